"""One scheduling request, for real, end to end.

A conductor-side client calls select_destinations over the real RabbitMQ broker; the scheduler
service (real driver, default filters and weighers) asks the real Placement service for
candidates, reads HostStates from a MariaDB API database and two cells (MariaDB and
PostgreSQL), claims in Placement and replies with nova Selection objects. Every expectation is
derived from the fleet that the test loads, never hard-coded.
"""

from __future__ import annotations

import contextlib
import uuid as uuidlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import db
from placement_client import PlacementClient
from scheduler import fleet as fleet_mod
from scheduler import rpc
from scheduler.conf import CONF
from scheduler.context import RequestContext
from scheduler.embedded_placement import EmbeddedPlacement
from scheduler.exceptions import NoValidHost
from scheduler.objects import Flavor, ImageMeta, InstanceGroup, RequestSpec
from scheduler.rpcapi import SchedulerAPI
from scheduler.service import SchedulerService
from tests.functional.fixtures_db import make_database
from tests.functional.fixtures_rabbit import delete_queues, ensure_rabbit

PROJECT = "6f70656e-7374-6163-6b00-70726f6a6563"
USER = "75736572-0000-4000-8000-000000000001"


@dataclass
class Cloud:
    fleet: fleet_mod.Fleet
    api_url: str
    cell_urls: dict[str, str]  # cell uuid -> url
    placement: PlacementClient
    client: SchedulerAPI
    service: SchedulerService

    def host_az(self, host: str) -> str | None:
        for agg in self.fleet.aggregates:
            if host in agg.hosts and "availability_zone" in agg.metadata:
                return agg.metadata["availability_zone"]
        return None

    def host_cell(self, host: str) -> str:
        return self.fleet.host_cells[host]

    @property
    def unusable(self) -> set[str]:
        return self.fleet.disabled_hosts | self.fleet.down_hosts


def _config(cloud_api_url: str, placement_url: str) -> None:
    CONF.set_override("connection", cloud_api_url, group="api_database")
    CONF.set_override("auth_type", "noauth2", group="placement")
    CONF.set_override("endpoint_override", placement_url, group="placement")
    CONF.set_override("claim_retry_backoff", 0.01, group="placement")
    CONF.set_override("host", f"e2e-{uuidlib.uuid4().hex[:8]}")
    CONF.set_override("aggregate_cache_ttl", 0, group="scheduler")


@pytest.fixture(scope="module")
def cloud(tmp_path_factory) -> Iterator[Cloud]:
    url = ensure_rabbit()
    topic = f"scheduler-e2e-{uuidlib.uuid4().hex[:10]}"
    with contextlib.ExitStack() as stack:
        api_url = stack.enter_context(make_database("mariadb", "novasched_e2e_api"))
        cell_urls_list = [
            stack.enter_context(make_database("mariadb", "novasched_e2e_cell1")),
            stack.enter_context(make_database("postgresql", "novasched_e2e_cell2")),
        ]
        api = db.get_engine(api_url)
        db.create_schema(api, "api")
        cell_urls: dict[str, str] = {}
        for i, cell_url in enumerate(cell_urls_list, start=1):
            mapping = db.create_cell_mapping(api, name=f"cell{i}", database_connection=cell_url)
            db.create_schema(cell_url, "cell")
            cell_urls[mapping["uuid"]] = cell_url
        pdir = Path(tmp_path_factory.mktemp("e2e-placement"))
        placement_svc = EmbeddedPlacement(f"sqlite:///{pdir / 'placement.sqlite'}", mode="process")
        placement_url = placement_svc.start()
        stack.callback(placement_svc.stop)
        placement = PlacementClient(placement_url, retry_backoff=0.01)
        fleet = fleet_mod.build_fleet(
            fleet_mod.FleetSpec(
                hosts=24,
                cells=list(cell_urls),
                seed=11,
                disabled_fraction=0.125,
                down_fraction=0.125,
                max_instances_per_host=1,
            )
        )
        engines = {u: db.get_engine(c) for u, c in cell_urls.items()}
        fleet_mod.load_fleet(fleet, api, engines, placement)
        for engine in engines.values():
            db.touch_services(engine)

        _config(api_url, placement_url)
        transport = rpc.get_transport(CONF, url=url)
        stack.callback(transport.cleanup)
        service = SchedulerService(CONF, transport=transport, topic=topic)
        service.start()
        stack.callback(service.stop)
        stack.callback(delete_queues, url, [topic, f"{topic}.{service.host}"])
        client = SchedulerAPI(transport, topic=topic)
        yield Cloud(fleet, api_url, cell_urls, placement, client, service)
        db.dispose_engines()


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
    huge = Flavor(name="huge", flavorid="h", vcpus=1, memory_mb=64 * 1024 * 1024, root_gb=1)
    with pytest.raises(NoValidHost) as info:
        _select(cloud, _spec(huge))
    assert "Placement returned no allocation candidates" in str(info.value)
    assert f"MEMORY_MB:{64 * 1024 * 1024}" in str(info.value)


def test_filters_removing_every_host_are_counted_in_the_reason(cloud):
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
    bad_cell, good_cell = list(cloud.cell_urls)
    t = sa.table("cell_mappings", sa.column("uuid"), sa.column("database_connection"))
    dead = "mysql+pymysql://root@127.0.0.1:1/nowhere"
    with api.begin() as conn:
        conn.execute(t.update().where(t.c.uuid == bad_cell).values(database_connection=dead))
    cloud.service.reset()  # what SIGHUP does
    try:
        for _ in range(2):
            _, result = _select(cloud, _spec(SMALL))
            assert result[0][0].cell_uuid == good_cell
    finally:
        with api.begin() as conn:
            conn.execute(
                t.update()
                .where(t.c.uuid == bad_cell)
                .values(database_connection=cloud.cell_urls[bad_cell])
            )
        cloud.service.reset()
