"""nova 34's own conductor-side code talks to novasched over the real RabbitMQ broker.

nova's `SchedulerAPI.select_destinations` (nova.scheduler.rpcapi), with RequestSpecs built by
nova's `RequestSpec.from_components`, runs in a separate venv holding the published nova 34.0.0
(see fixtures_nova.py). It must get back nova `Selection` objects it can use, nova's legacy
dicts at return_objects=False, and — the conductor's contract — a failure that it catches as
its own `nova.exception.NoValidHost`.
"""

# ruff: noqa: F811 - the nova_python fixture is imported by name; tests take it by that name

from __future__ import annotations

import contextlib
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.functional.fixtures_cloud import PROJECT, USER, Cloud, build_cloud
from tests.functional.fixtures_nova import (  # noqa: F401 - nova_python is a fixture
    nova_aggregate_api,
    nova_conductor_call,
    nova_python,
)


@pytest.fixture(scope="module")
def cloud(tmp_path_factory) -> Iterator[Cloud]:
    with contextlib.ExitStack() as stack:
        yield build_cloud(
            stack,
            Path(tmp_path_factory.mktemp("nova-wire")),
            api_kind="sqlite",
            cell_kinds=("sqlite", "sqlite"),
            hosts=16,
            # nova's client always sends to topic "scheduler": isolate by exchange
            exchange=f"nova-wire-{uuidlib.uuid4().hex[:8]}",
            # aggregates change only through nova-api's update_aggregates casts
            aggregate_cache_ttl=-1,
        )


def _call(nova_python: Path, cloud: Cloud, **kw) -> dict:
    args = {
        "transport_url": cloud.transport_url,
        "exchange": cloud.exchange,
        "user_id": USER,
        "project_id": PROJECT,
        "request_id": f"req-{uuidlib.uuid4()}",
        "flavor": {"name": "m1.small", "vcpus": 1, "memory_mb": 512, "root_gb": 1},
        "count": 1,
    }
    args.update(kw)
    return nova_conductor_call(nova_python, **args)


def test_nova_conductor_gets_selection_objects_and_the_claim_exists(nova_python, cloud):
    out = _call(nova_python, cloud, count=2, anti_affinity=True)
    assert len(out["selections"]) == 2
    chosen = [sels[0] for sels in out["selections"]]
    assert len({c["service_host"] for c in chosen}) == 2  # anti-affinity, decoded from nova
    for instance, sels in zip(out["instance_uuids"], out["selections"], strict=True):
        first = sels[0]
        assert first["type"] == "Selection"
        assert first["service_host"] not in cloud.unusable
        assert first["allocation_request_version"] == "1.36"
        assert first["compute_node_uuid"] in first["allocation_request"]["allocations"]
        assert first["cell_uuid"] == cloud.host_cell(first["service_host"])
        allocs = cloud.placement.get_allocations_for_consumer(instance)["allocations"]
        assert list(allocs) == [first["compute_node_uuid"]]
        for alt in sels[1:]:
            assert alt["cell_uuid"] == first["cell_uuid"]


def test_nova_conductor_gets_legacy_dicts(nova_python, cloud):
    out = _call(nova_python, cloud, return_objects=False, return_alternates=False)
    [legacy] = out["legacy"]
    assert set(legacy) == {"host", "nodename", "limits"}
    assert legacy["host"] not in cloud.unusable


def test_nova_conductor_catches_its_own_no_valid_host(nova_python, cloud):
    request_id = f"req-{uuidlib.uuid4()}"
    out = _call(
        nova_python,
        cloud,
        request_id=request_id,
        flavor={"name": "huge", "vcpus": 1, "memory_mb": 64 * 1024 * 1024, "root_gb": 1},
    )
    nvh = out["no_valid_host"]
    assert nvh["is_nova_no_valid_host"]
    # oslo.messaging rebuilds a remote exception as a subclass of the allowed original
    assert nvh["class"] == "nova.exception_Remote.NoValidHost_Remote"
    # nova's words and the request id; the explanation is in the scheduler's log only
    assert nvh["message"].split("\n", 1)[0] == (
        f"No valid host was found. There are not enough hosts available. (request {request_id})"
    )
    assert "Placement" not in nvh["message"]


def test_filter_reasons_reach_nova_conductor_when_the_operator_asks(nova_python, cloud):
    from scheduler.conf import CONF

    CONF.set_override("novalidhost_detail", True, group="scheduler")
    out = _call(nova_python, cloud, image_properties={"hw_architecture": "ppc64le"})
    message = out["no_valid_host"]["message"]
    assert "hosts available" in message and "ImagePropertiesFilter" in message


def test_rebuild_check_selection_carries_the_json_null_nova_sends(nova_python, cloud):
    host = next(h for h in cloud.fleet.hosts if h not in cloud.unusable)
    out = _call(nova_python, cloud, rebuild_on=host, return_alternates=False)
    [[sel]] = out["selections"]
    assert sel["service_host"] == host
    # nova's Selection.from_host_state JSON-encodes the (absent) allocation request
    assert sel["allocation_request_json"] == "null"
    assert sel["allocation_request_version"] is None
    claims = cloud.placement.get_allocations_for_consumer(out["instance_uuids"][0])
    assert claims["allocations"] == {}


def _aggregate_api(nova_python: Path, cloud: Cloud, **kw) -> dict:
    return nova_aggregate_api(
        nova_python,
        transport_url=cloud.transport_url,
        exchange=cloud.exchange,
        api_database=cloud.api_url,
        **kw,
    )


def _join_placement_aggregate(cloud: Cloud, hosts: list[str], agg_uuid: str) -> None:
    """What nova-api's add_host_to_aggregate also does: mirror the host into Placement."""
    for provider in cloud.fleet.providers:
        if provider["name"] in hosts:
            current = cloud.placement.get_aggregates(provider["uuid"])
            cloud.placement.set_aggregates(provider["uuid"], sorted({*current, agg_uuid}))


def test_an_az_made_and_renamed_through_nova_api_is_seen_by_the_next_request(nova_python, cloud):
    az2 = next(a for a in cloud.fleet.aggregates if a.metadata.get("availability_zone") == "az2")
    moved = [h for h in az2.hosts if h not in cloud.unusable][:2]
    assert len(moved) == 2

    # a new AZ, and two hosts moved into it from az2 (nova allows a host in one AZ only)
    made = _aggregate_api(nova_python, cloud, op="create", name="cast-az", availability_zone="az-x")
    _aggregate_api(nova_python, cloud, op="remove_hosts", uuid=az2.uuid, hosts=moved)
    added = _aggregate_api(nova_python, cloud, op="add_hosts", id=made["id"], hosts=moved)
    assert added["hosts"] == sorted(moved)
    _join_placement_aggregate(cloud, moved, made["uuid"])

    # aggregate_cache_ttl = -1: only the casts can have told the scheduler
    out = _call(nova_python, cloud, availability_zone="az-x", count=2)
    chosen = [sels[0] for sels in out["selections"]]
    assert {c["service_host"] for c in chosen} <= set(moved)
    assert {c["availability_zone"] for c in chosen} == {"az-x"}

    # an AZ renamed: the prefilter finds it under its new name, and its hosts report it
    _aggregate_api(
        nova_python,
        cloud,
        op="set_metadata",
        id=made["id"],
        metadata={"availability_zone": "az-renamed"},
    )
    out = _call(nova_python, cloud, availability_zone="az-renamed")
    [first, *_] = out["selections"][0]
    assert first["service_host"] in moved
    assert first["availability_zone"] == "az-renamed"


def test_aggregate_multipliers_changed_through_nova_api_weigh_the_next_request(nova_python, cloud):
    usable = [h for h in cloud.fleet.hosts if h not in cloud.unusable]
    host_manager = cloud.service.driver.host_manager
    free = {h: host_manager.host_states_for(h)[0].free_ram_mb for h in usable}
    most, least = max(free.values()), min(free.values())
    assert most > least, "the fleet needs hosts with different free RAM"
    roomiest = sorted(h for h in usable if free[h] == most)

    made = _aggregate_api(nova_python, cloud, op="create", name="cast-weights")
    _aggregate_api(nova_python, cloud, op="add_hosts", id=made["id"], hosts=roomiest)

    def boot_with_ram_multiplier(multiplier: str) -> str:
        metadata = {"ram_weight_multiplier": multiplier}
        _aggregate_api(nova_python, cloud, op="set_metadata", id=made["id"], metadata=metadata)
        out = _call(nova_python, cloud, return_alternates=False)
        return out["selections"][0][0]["service_host"]

    assert boot_with_ram_multiplier("1000000") in roomiest
    # the same hosts now weigh last: a request goes anywhere but there
    assert boot_with_ram_multiplier("-1000000") not in roomiest


def test_a_same_host_list_as_long_as_nova_api_takes_is_decided(nova_python, cloud):
    # nova-api's schema puts no bound on the list: its request body does (114,688 bytes by
    # default, about 2,900 instance uuids); the conductor sends it as nova-api took it
    uuids = [str(uuidlib.uuid4()) for _ in range(114_688 // 39)]
    out = _call(nova_python, cloud, return_alternates=False, scheduler_hints={"same_host": uuids})
    # (no instance of the list is anywhere, and SameHostFilter is not enabled: any host)
    assert out["selections"][0][0]["service_host"] not in cloud.unusable, out
