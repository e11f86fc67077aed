"""Boots through nova's API, placed by novasched: where each lands is where nova 34 would put it."""

from __future__ import annotations

import pytest

from tests.deployment.deployment import (
    NO_VALID_HOST,
    ApiError,
    Deployment,
    fault_message,
    host_of,
)

# the first test also waits for the deployment (and, on a fresh machine, nova's install)
pytestmark = [pytest.mark.functional, pytest.mark.timeout(600)]

AZ_MAIN = ("dep-c1", "dep-c2")


def test_boot_lands_on_the_host_the_weighers_prefer(deployment: Deployment):
    expected, weighed = deployment.preferred_host(AZ_MAIN), deployment.weighed_values(AZ_MAIN)

    server = deployment.boot_and_wait(deployment.flavor("small"), name="plain")

    assert deployment.expect_active(server) == expected, weighed
    assert server["OS-EXT-AZ:availability_zone"] == "az-main"
    assert deployment.host_allocations_match(server)
    resources = next(iter(deployment.allocations(server["id"]).values()))
    assert resources == {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}
    # novasched recorded why: the chosen host, first in its weighed order
    (record,) = deployment.decisions(server["id"])
    assert record["outcome"] == "scheduled" and record["hosts"] == [expected]
    assert record["document"]["weighed"][0][0]["host"] == expected
    # replayed on the deployment as it is now, with the same nova.conf: the server is taken
    # out of its host (as its nova-compute reports it) and of Placement, and lands there again
    report = deployment.replay(record)
    assert report["counts"]["replayed"] == 1 and report["counts"]["changed"] == 0, report
    assert report["taken_out"]["instances"] == report["taken_out"]["allocations"] == 1
    assert report["calls"][0]["replayed"]["hosts"][0].split("/")[0] == expected


def test_multi_create_boots_every_server_of_the_request(deployment: Deployment):
    ids = deployment.boot(deployment.flavor("small"), name="multi", count=3)

    assert len(ids) == 3
    for server_id in ids:
        server = deployment.wait_server(server_id)
        deployment.expect_active(server, set(AZ_MAIN))
        assert deployment.host_allocations_match(server)


def test_affinity_group_puts_its_servers_on_one_host(deployment: Deployment):
    group = deployment.tenant.post(
        "/os-server-groups", {"server_group": {"name": "together", "policy": "affinity"}}
    )["server_group"]
    hints = {"group": group["id"]}
    flavor = deployment.flavor("small")

    first = deployment.boot_and_wait(flavor, name="aff-1", hints=hints)
    second = deployment.boot_and_wait(flavor, name="aff-2", hints=hints)

    assert deployment.expect_active(second) == deployment.expect_active(first)


def test_anti_affinity_group_spreads_then_refuses_a_third_in_a_two_host_zone(
    deployment: Deployment,
):
    group = deployment.tenant.post(
        "/os-server-groups", {"server_group": {"name": "apart", "policy": "anti-affinity"}}
    )["server_group"]
    hints = {"group": group["id"]}
    flavor = deployment.flavor("small")

    first = deployment.boot_and_wait(flavor, name="anti-1", hints=hints)
    second = deployment.boot_and_wait(flavor, name="anti-2", hints=hints)
    third = deployment.boot_and_wait(flavor, name="anti-3", hints=hints)

    assert {deployment.expect_active(first), deployment.expect_active(second)} == set(AZ_MAIN)
    assert third["status"] == "ERROR"
    assert fault_message(third).startswith(NO_VALID_HOST), third.get("fault")
    assert deployment.allocations(third["id"]) == {}


def test_the_owner_sees_the_no_valid_host_message(deployment: Deployment):
    flavor = deployment.flavor("ssd", **{"aggregate_instance_extra_specs:ssd": "true"})

    (server_id,) = deployment.boot(flavor, name="ssd-solo", az="az-solo")
    deployment.wait_server(server_id)
    as_owner = deployment.tenant.get(f"/servers/{server_id}")["server"]

    assert as_owner["status"] == "ERROR"
    assert fault_message(as_owner).startswith(NO_VALID_HOST), as_owner.get("fault")
    assert "details" not in as_owner["fault"]


def test_availability_zone_restricts_the_hosts(deployment: Deployment):
    server = deployment.boot_and_wait(deployment.flavor("small"), name="solo", az="az-solo")

    assert deployment.expect_active(server) == "dep-c3"
    assert server["OS-EXT-AZ:availability_zone"] == "az-solo"


def test_unknown_availability_zone_is_refused_by_nova_api(deployment: Deployment):
    with pytest.raises(ApiError) as err:
        deployment.boot(deployment.flavor("small"), name="nowhere", az="az-none")
    assert err.value.status == 400


def test_aggregate_extra_specs_choose_the_aggregate_host(deployment: Deployment):
    flavor = deployment.flavor("ssd", **{"aggregate_instance_extra_specs:ssd": "true"})

    server = deployment.boot_and_wait(flavor, name="ssd")

    assert deployment.expect_active(server) == "dep-c2"
    assert host_of(server) == "dep-c2"
