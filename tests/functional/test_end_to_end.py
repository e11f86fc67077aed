"""One scheduling request, for real, end to end.

A conductor-side client calls select_destinations over the real RabbitMQ broker; the scheduler
service (real driver, default filters and weighers) asks the real Placement service for
candidates, reads HostStates from a MariaDB API database and three cells (MariaDB,
PostgreSQL, SQLite), claims in Placement and replies with nova Selection objects. Every
expectation is derived from the fleet that the test loads, never hard-coded.
"""

from __future__ import annotations

import contextlib
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import db
from scheduler.conf import CONF
from scheduler.exceptions import NoValidHost
from scheduler.objects import Flavor, ImageMeta, InstanceGroup, RequestSpec
from scheduler.rpc.context import RequestContext
from tests.functional.fixtures_cloud import PROJECT, USER, Cloud, build_cloud


@pytest.fixture(scope="module")
def cloud(tmp_path_factory) -> Iterator[Cloud]:
    with contextlib.ExitStack() as stack:
        yield build_cloud(
            stack,
            Path(tmp_path_factory.mktemp("e2e")),
            topic=f"scheduler-e2e-{uuidlib.uuid4().hex[:10]}",
        )


def _ctx() -> RequestContext:
    return RequestContext(user_id=USER, project_id=PROJECT, request_id=f"req-{uuidlib.uuid4()}")


def _spec(flavor: Flavor, count: int = 1, **fields: Any) -> RequestSpec:
    return RequestSpec(
        flavor=flavor, num_instances=count, project_id=PROJECT, user_id=USER, **fields
    )


SMALL = Flavor(name="m1.small", flavorid="2", vcpus=2, memory_mb=2048, root_gb=20)


def _select(cloud: Cloud, spec: RequestSpec, count: int = 1, **kw: Any):
    uuids = [str(uuidlib.uuid4()) for _ in range(count)]
    kw.setdefault("return_objects", True)
    kw.setdefault("return_alternates", True)
    result = cloud.client.select_destinations(_ctx(), spec, uuids, **kw)
    return uuids, result


def _allocations(cloud: Cloud, consumer: str) -> dict[str, Any]:
    return cloud.placement.get_allocations_for_consumer(consumer).get("allocations", {})


def test_single_boot_claims_the_chosen_host_and_returns_alternates(cloud):
    uuids, result = _select(cloud, _spec(SMALL))
    assert len(result) == 1
    chosen, *alternates = result[0]
    assert chosen.service_host not in cloud.unusable
    assert chosen.cell_uuid == cloud.host_cell(chosen.service_host)
    assert chosen.availability_zone == (cloud.host_az(chosen.service_host) or "nova")
    assert chosen.allocation_request_version == "1.36"
    # the claim is in Placement, on the chosen provider, with the flavor's amounts
    allocs = _allocations(cloud, uuids[0])
    assert list(allocs) == [chosen.compute_node_uuid]
    assert allocs[chosen.compute_node_uuid]["resources"] == {
        "VCPU": 2,
        "MEMORY_MB": 2048,
        "DISK_GB": 20,
    }
    # nova's alternates: up to max_attempts - 1, same cell, other hosts, each claimable
    assert 1 <= len(alternates) <= CONF.scheduler.max_attempts - 1
    for alt in alternates:
        assert alt.cell_uuid == chosen.cell_uuid
        assert alt.service_host != chosen.service_host
        assert alt.service_host not in cloud.unusable
        assert alt.compute_node_uuid in alt.allocation_request["allocations"]
        assert _allocations(cloud, uuids[0]).keys() == {chosen.compute_node_uuid}


def test_anti_affinity_multi_create_uses_distinct_hosts(cloud):
    group = InstanceGroup(uuid=str(uuidlib.uuid4()), policy="anti-affinity")
    spec = _spec(SMALL, 4, instance_group=group, scheduler_hints={"group": [group.uuid]})
    uuids, result = _select(cloud, spec, 4)
    hosts = [sels[0].service_host for sels in result]
    assert len(set(hosts)) == 4
    assert not set(hosts) & cloud.unusable
    for instance, sels in zip(uuids, result, strict=True):
        assert list(_allocations(cloud, instance)) == [sels[0].compute_node_uuid]


def test_affinity_multi_create_uses_one_host(cloud):
    group = InstanceGroup(uuid=str(uuidlib.uuid4()), policy="affinity")
    spec = _spec(SMALL, 3, instance_group=group, scheduler_hints={"group": [group.uuid]})
    _, result = _select(cloud, spec, 3)
    assert len({sels[0].service_host for sels in result}) == 1


def test_availability_zone_is_honoured(cloud):
    az = cloud.fleet.spec.azs[0]
    _, result = _select(cloud, _spec(SMALL, 3, availability_zone=az), 3)
    for sels in result:
        assert cloud.host_az(sels[0].service_host) == az
        assert sels[0].availability_zone == az


def test_legacy_reply_without_objects(cloud):
    uuids, result = _select(cloud, _spec(SMALL), 1, return_objects=False, return_alternates=False)
    assert len(result) == 1
    assert set(result[0]) == {"host", "nodename", "limits"}
    assert result[0]["host"] not in cloud.unusable
    # still claimed (RPC 4.5 with instance uuids)
    assert len(_allocations(cloud, uuids[0])) == 1


def test_nothing_fits_names_the_placement_query(cloud):
    # the explanation reaches a caller only when the operator asks (nova's conductor would
    # store it as the instance fault); by default it is logged under the request id
    CONF.set_override("novalidhost_detail", True, group="scheduler")
    huge = Flavor(name="huge", flavorid="h", vcpus=1, memory_mb=64 * 1024 * 1024, root_gb=1)
    with pytest.raises(NoValidHost) as info:
        _select(cloud, _spec(huge))
    assert "Placement returned no allocation candidates" in str(info.value)
    assert f"MEMORY_MB:{64 * 1024 * 1024}" in str(info.value)


def test_filters_removing_every_host_are_counted_in_the_reason(cloud):
    CONF.set_override("novalidhost_detail", True, group="scheduler")
    image = ImageMeta(name="ppc", properties={"hw_architecture": "ppc64le"})
    uuids, _ = [], None
    with pytest.raises(NoValidHost) as info:
        uuids, _ = _select(cloud, _spec(SMALL, image=image))
    reason = str(info.value)
    candidates = len(cloud.fleet.hosts) - len(cloud.fleet.disabled_hosts)
    assert f"0/{candidates} hosts available" in reason
    assert "ImagePropertiesFilter" in reason
    down = len(cloud.fleet.down_hosts - cloud.fleet.disabled_hosts)
    if down:
        assert f"{down} ComputeFilter (service down)" in reason


def test_partial_multi_create_is_rolled_back(cloud):
    CONF.set_override("novalidhost_detail", True, group="scheduler")  # the reason travels
    # an affinity group bigger than any single host can take
    big = Flavor(name="big", flavorid="b", vcpus=1, memory_mb=48 * 1024, root_gb=1)
    group = InstanceGroup(uuid=str(uuidlib.uuid4()), policy="affinity")
    count = 40
    spec = _spec(big, count, instance_group=group, scheduler_hints={"group": [group.uuid]})
    uuids = [str(uuidlib.uuid4()) for _ in range(count)]
    with pytest.raises(NoValidHost) as info:
        cloud.client.select_destinations(_ctx(), spec, uuids, True, True)
    assert f"of {count} instances" in str(info.value)
    for instance in uuids:
        assert _allocations(cloud, instance) == {}


def test_a_cell_that_fails_is_skipped_and_the_others_serve(cloud):
    api = db.get_engine(cloud.api_url)
    bad_cell = next(iter(cloud.cell_urls))
    t = sa.table("cell_mappings", sa.column("uuid"), sa.column("database_connection"))
    dead = "mysql+pymysql://root@127.0.0.1:1/nowhere"
    with api.begin() as conn:
        conn.execute(t.update().where(t.c.uuid == bad_cell).values(database_connection=dead))
    cloud.service.reset()  # what SIGHUP does
    try:
        for _ in range(2):
            _, result = _select(cloud, _spec(SMALL))
            assert result[0][0].cell_uuid != bad_cell
    finally:
        with api.begin() as conn:
            conn.execute(
                t.update()
                .where(t.c.uuid == bad_cell)
                .values(database_connection=cloud.cell_urls[bad_cell])
            )
        cloud.service.reset()


def _free_memory(cloud: Cloud, rp_uuid: str) -> int:
    inv = cloud.placement.get_inventories(rp_uuid)["MEMORY_MB"]
    capacity = int((inv["total"] - inv["reserved"]) * inv["allocation_ratio"])
    return capacity - cloud.placement.get_usages(rp_uuid).get("MEMORY_MB", 0)


def test_multi_create_of_five_rolls_back_every_claim_when_the_fifth_cannot_fit(cloud):
    CONF.set_override("novalidhost_detail", True, group="scheduler")  # the reason travels
    host = next(h for h in cloud.fleet.hosts if h not in cloud.unusable)
    rp = next(p["uuid"] for p in cloud.fleet.providers if p["name"] == host)
    free = _free_memory(cloud, rp)
    # four instances fit on the forced host, the fifth does not
    flavor = Flavor(name="quarter", flavorid="q", vcpus=1, memory_mb=free // 4, root_gb=1)
    spec = _spec(flavor, 5, force_hosts=[host])
    uuids = [str(uuidlib.uuid4()) for _ in range(5)]
    with pytest.raises(NoValidHost) as info:
        cloud.client.select_destinations(_ctx(), spec, uuids, True, True)
    assert "Found hosts for 4 of 5 instances" in str(info.value)
    for instance in uuids:
        assert _allocations(cloud, instance) == {}
    assert _free_memory(cloud, rp) == free
    # and the same host takes four of them once the fifth is not asked for
    uuids, result = _select(cloud, _spec(flavor, 4, force_hosts=[host]), 4)
    assert {sels[0].service_host for sels in result} == {host}
    assert _free_memory(cloud, rp) == free - 4 * (free // 4)
    for instance in uuids:
        cloud.placement.delete_allocation_for_instance(instance)


def test_disabled_and_down_hosts_are_never_chosen(cloud):
    chosen: set[str] = set()
    for _ in range(4):
        _, result = _select(cloud, _spec(SMALL, 5), 5)
        chosen |= {sels[0].service_host for sels in result}
        for sels in result:
            assert not {s.service_host for s in sels} & cloud.unusable
    assert chosen and not chosen & cloud.unusable
