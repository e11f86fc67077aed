"""Moves and rebuilds through nova's API: each one asks novasched for a destination."""

from __future__ import annotations

import pytest

from tests.deployment.deployment import ApiError, Deployment, host_of, wait_for

# the first test also waits for the deployment (and, on a fresh machine, nova's install)
pytestmark = [pytest.mark.functional, pytest.mark.timeout(600)]

AZ_MAIN = {"dep-c1", "dep-c2"}


def _other(host: str | None) -> str:
    (other,) = AZ_MAIN - {host}
    return other


def _migration_allocations_gone(cloud: Deployment, server_id: str) -> bool:
    migrations = cloud.admin.get(f"/os-migrations?instance_uuid={server_id}")["migrations"]
    return all(cloud.allocations(m["uuid"]) == {} for m in migrations)


def _boot_in_main(cloud: Deployment, name: str) -> dict:
    server = cloud.boot_and_wait(cloud.flavor("small"), name=name)
    cloud.expect_active(server, AZ_MAIN)
    return server


def test_resize_moves_to_the_other_host_and_confirm_keeps_only_its_allocation(
    deployment: Deployment,
):
    server = _boot_in_main(deployment, "resize")
    source = host_of(server)
    medium = deployment.flavor("medium", ram=1024, vcpus=2)

    deployment.tenant.post(
        f"/servers/{server['id']}/action", {"resize": {"flavorRef": medium}}, ok=(202,)
    )
    resized = deployment.wait_server(server["id"], ("VERIFY_RESIZE", "ERROR", "ACTIVE"))

    assert resized["status"] == "VERIFY_RESIZE", resized.get("fault")
    # nova resizes to another host unless allow_resize_to_same_host
    assert host_of(resized) == _other(source)
    deployment.tenant.post(f"/servers/{server['id']}/action", {"confirmResize": None}, ok=(204,))
    confirmed = deployment.wait_server(server["id"])
    deployment.expect_active(confirmed, {_other(source)})
    assert confirmed["flavor"]["ram"] == 1024
    allocs = deployment.allocations(server["id"])
    assert allocs == {
        deployment.provider_uuid(_other(source)): {"VCPU": 2, "MEMORY_MB": 1024, "DISK_GB": 1}
    }
    assert _migration_allocations_gone(deployment, server["id"])


def test_cold_migration_moves_to_the_other_host(deployment: Deployment):
    server = _boot_in_main(deployment, "cold")
    source = host_of(server)

    deployment.admin.post(f"/servers/{server['id']}/action", {"migrate": None}, ok=(202,))
    migrated = deployment.wait_server(server["id"], ("VERIFY_RESIZE", "ERROR", "ACTIVE"))

    assert migrated["status"] == "VERIFY_RESIZE", migrated.get("fault")
    assert host_of(migrated) == _other(source)
    deployment.admin.post(f"/servers/{server['id']}/action", {"confirmResize": None}, ok=(204,))
    confirmed = deployment.wait_server(server["id"])
    deployment.expect_active(confirmed, {_other(source)})
    assert deployment.host_allocations_match(confirmed)
    assert _migration_allocations_gone(deployment, server["id"])


def test_live_migration_moves_to_the_other_host(deployment: Deployment):
    server = _boot_in_main(deployment, "live")
    source = host_of(server)

    deployment.admin.post(
        f"/servers/{server['id']}/action",
        {"os-migrateLive": {"host": None, "block_migration": "auto"}},
        ok=(202,),
    )
    moved = deployment.wait_server(server["id"], until=lambda s: host_of(s) != source)

    deployment.expect_active(moved, {_other(source)})
    migration = wait_for(
        "the live migration to complete",
        lambda: _completed_migration(deployment, server["id"]),
        60,
    )
    assert migration["migration_type"] == "live-migration"
    assert migration["dest_compute"] == _other(source)
    wait_for(
        "the live migration's source allocation to go",
        lambda: deployment.host_allocations_match(moved),
        30,
    )


def _unforce(cloud: Deployment, service: str) -> bool:
    try:
        cloud.admin.put(f"/os-services/{service}", {"forced_down": False})
    except ApiError as exc:
        if exc.status == 400:
            return False
        raise
    return True


def _completed_migration(cloud: Deployment, server_id: str) -> dict | None:
    (migration,) = cloud.admin.get(f"/os-migrations?instance_uuid={server_id}")["migrations"]
    return migration if migration["status"] == "completed" else None


def test_evacuate_from_a_dead_host_rebuilds_on_the_other(deployment: Deployment):
    server = _boot_in_main(deployment, "evacuate")
    source = host_of(server)
    service = deployment.service_id(source)

    deployment.stop_compute(source)
    deployment.admin.put(f"/os-services/{service}", {"forced_down": True})
    try:
        deployment.admin.post(f"/servers/{server['id']}/action", {"evacuate": {}}, ok=(200,))
        evacuated = deployment.wait_server(server["id"], until=lambda s: host_of(s) != source)
        # microversion 2.94: the evacuated server keeps running
        deployment.expect_active(evacuated, {_other(source)})
        dest_rp = deployment.provider_uuid(_other(source))
        assert dest_rp in deployment.allocations(server["id"])
    finally:
        deployment.restart_compute(source)
        # nova refuses to force a host up while it has evacuations in `done`; the restarted
        # compute moves them to `completed` as it starts
        wait_for(
            f"nova to accept {source} forced up again",
            lambda: _unforce(deployment, service),
            90,
            0.5,
        )
    assert _completed_migration(deployment, server["id"])
    wait_for(
        f"{source} to report up again",
        lambda: deployment.service(source)["state"] == "up",
        60,
        0.5,
    )
    # the restarted source cleans the evacuated server's allocation off itself
    wait_for(
        "the evacuated server's allocation to be on its new host only",
        lambda: deployment.host_allocations_match(evacuated),
        60,
        0.5,
    )


def test_shelve_offloads_and_unshelve_schedules_again(deployment: Deployment):
    server = _boot_in_main(deployment, "shelve")
    source = host_of(server)
    free_vcpus = deployment.weighed_values((source,))[source][1]
    images_before = set(deployment.glance.images)

    deployment.tenant.post(f"/servers/{server['id']}/action", {"shelve": None}, ok=(202,))
    shelved = deployment.wait_server(
        server["id"], ("SHELVED_OFFLOADED", "ERROR"), until=lambda s: host_of(s) is None
    )

    assert shelved["status"] == "SHELVED_OFFLOADED", shelved.get("fault")
    assert deployment.allocations(server["id"]) == {}
    (snapshot,) = set(deployment.glance.images) - images_before
    # the instance is saved offloaded just before nova-compute updates its compute node row
    wait_for(
        f"{source}'s compute node row to free the offloaded server",
        lambda: deployment.weighed_values((source,))[source][1] > free_vcpus,
        30,
    )
    zone = tuple(sorted(AZ_MAIN))
    expected, weighed = deployment.preferred_host(zone), deployment.weighed_values(zone)
    deployment.tenant.post(f"/servers/{server['id']}/action", {"unshelve": None}, ok=(202,))
    unshelved = deployment.wait_server(server["id"])
    assert deployment.expect_active(unshelved) == expected, weighed
    assert deployment.host_allocations_match(unshelved)
    # nova deletes the shelve snapshot once the server runs again
    wait_for("the shelve snapshot to be deleted", lambda: snapshot not in deployment.glance.images)


def test_rebuild_with_a_new_image_stays_on_its_host(deployment: Deployment):
    server = _boot_in_main(deployment, "rebuild")

    deployment.tenant.post(
        f"/servers/{server['id']}/action",
        {"rebuild": {"imageRef": deployment.image2_id}},
        ok=(202,),
    )
    rebuilt = deployment.wait_server(
        server["id"], until=lambda s: s["image"]["id"] == deployment.image2_id
    )

    assert deployment.expect_active(rebuilt) == host_of(server)
    assert deployment.host_allocations_match(rebuilt)


def test_build_failure_is_rescheduled_to_the_alternate(deployment: Deployment):
    server = deployment.boot_and_wait(deployment.flavor("small"), name="resched", az="az-resched")

    # the first choice (most free RAM) fails its spawn; the alternate takes it
    assert deployment.expect_active(server) == "dep-c4"
    builds = [
        e
        for e in deployment.instance_events(server["id"])
        if e["event"] == "compute__do_build_and_run_instance"
    ]
    # (nova records the rescheduled attempt's event as a success: only the hosts tell)
    assert sorted(e["host"] for e in builds) == ["dep-c4", "dep-resched"]
    assert deployment.host_allocations_match(server)
