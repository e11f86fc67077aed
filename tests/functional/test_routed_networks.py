"""Routed networks and remote-managed ports, end to end through the filter scheduler.

Proven against real HTTP servers: the real Placement service (the session's
``placement_service``, on 127.0.0.1) holds the compute nodes and the segments' resource
providers in the segments' aggregates, as Neutron's segments plugin writes them; a local
Neutron stand-in (tests/functional/fixtures_neutron.py, 127.0.0.1, ephemeral port) serves
Neutron's documented extensions, subnets and ports answers. The driver runs nova's request
filters, sends ``GET /allocation_candidates`` to Placement and claims there; the test reads
the query Placement received and where the instances were claimed.
"""

# ruff: noqa: F811 - the fixtures are imported by name, and test arguments reuse those names

from __future__ import annotations

import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from urllib.parse import parse_qs, urlsplit

import os_traits
import pytest

from placement_client.api import PlacementClient
from placement_client.api.client import ProviderSpec
from scheduler.conf import CONF
from scheduler.drivers.filter_scheduler import FilterScheduler
from scheduler.exceptions import NoValidHost
from scheduler.objects import Flavor, RequestSpec
from tests.functional.fixtures_neutron import NeutronStandIn
from tests.functional.fixtures_placement import placement_service  # noqa: F401 - a fixture
from tests.unit.scheduler.drivers.fakes import FakeHostManager, make_host

NET_A = "9d1c0a5e-0000-4000-8000-0000000000a1"  # routed: segment A only
NET_AB = "9d1c0a5e-0000-4000-8000-0000000000a2"  # routed: segments A and B
NET_PLAIN = "9d1c0a5e-0000-4000-8000-0000000000a3"  # not routed
NET_LOST = "9d1c0a5e-0000-4000-8000-0000000000a4"  # its segment is in no aggregate


def _u() -> str:
    return str(uuid.uuid4())


def _compute(rp: str, agg: str, traits: list[str]) -> ProviderSpec:
    inventories = {
        "VCPU": {"total": 8, "max_unit": 8},
        "MEMORY_MB": {"total": 8192, "max_unit": 8192},
        "DISK_GB": {"total": 100, "max_unit": 100},
    }
    return ProviderSpec(rp, f"cn-{rp[:8]}", inventories, traits=traits, aggregates=[agg])


@pytest.fixture
def cloud(placement_service) -> Iterator[SimpleNamespace]:
    """Four compute nodes, two in segment A's aggregate and two in segment B's (one of them
    with COMPUTE_REMOTE_MANAGED_PORTS), and Neutron's networks, subnets and ports."""
    placement = PlacementClient(placement_service.url, retry_backoff=0.01)
    agg_a, agg_b = _u(), _u()
    seg_a, seg_b, seg_lost = _u(), _u(), _u()
    rps = [_u() for _ in range(4)]
    dpu = os_traits.COMPUTE_REMOTE_MANAGED_PORTS
    specs = [
        _compute(rps[0], agg_a, []),
        _compute(rps[1], agg_a, []),
        _compute(rps[2], agg_b, []),
        _compute(rps[3], agg_b, [dpu]),
        # the segments' providers, as Neutron's segments plugin makes them
        ProviderSpec(seg_a, seg_a, {"IPV4_ADDRESS": 254}, aggregates=[agg_a]),
        ProviderSpec(seg_b, seg_b, {"IPV4_ADDRESS": 254}, aggregates=[agg_b]),
        ProviderSpec(seg_lost, seg_lost, {"IPV4_ADDRESS": 254}),
    ]
    placement.create_providers_bulk(specs, workers=4)
    hosts = []
    for i, rp in enumerate(rps):
        host = make_host(f"routed-{rp[:8]}-{i}")
        host.uuid = rp
        hosts.append(host)

    neutron = NeutronStandIn()
    neutron.start()
    sub_a = neutron.add_subnet(NET_A, seg_a, "10.1.0.0")
    neutron.add_subnet(NET_AB, seg_a, "10.2.0.0")
    sub_b = neutron.add_subnet(NET_AB, seg_b, "10.3.0.0")
    neutron.add_subnet(NET_PLAIN, None, "10.4.0.0")
    neutron.add_subnet(NET_LOST, seg_lost, "10.5.0.0")

    CONF.set_override("query_placement_for_routed_network_aggregates", True, group="scheduler")
    CONF.set_override("endpoint_override", neutron.url, group="neutron")
    CONF.set_override("http_retries", 0, group="neutron")
    # the prefilter's Placement client (nova's report client) reads [placement]
    CONF.set_override("auth_type", "noauth2", group="placement")
    CONF.set_override("endpoint_override", placement_service.url, group="placement")
    driver = FilterScheduler(placement=placement, host_manager=FakeHostManager(hosts))
    queries = _record_candidate_queries(placement)
    placed: list[str] = []
    yield SimpleNamespace(
        driver=driver,
        placement=placement,
        neutron=neutron,
        queries=queries,
        placed=placed,
        agg_a=agg_a,
        agg_b=agg_b,
        seg_lost=seg_lost,
        sub_a=sub_a,
        sub_b=sub_b,
        segment_a_hosts=set(rps[:2]),
        segment_b_hosts=set(rps[2:]),
        dpu_host=rps[3],
    )
    neutron.stop()
    for instance in placed:
        placement.delete_allocation_for_instance(instance)
    for rp in [*rps, seg_a, seg_b, seg_lost]:
        placement.delete_provider(rp)


def _record_candidate_queries(client: PlacementClient) -> list[dict[str, list[str]]]:
    """The query string of every GET /allocation_candidates the client sends, as parsed by
    Placement (the request itself goes through unchanged)."""
    session = client._session
    real_send = session.send
    seen: list[dict[str, list[str]]] = []

    def send(request, **kwargs):
        url = urlsplit(request.url)
        if request.method == "GET" and url.path.endswith("/allocation_candidates"):
            seen.append(parse_qs(url.query))
        return real_send(request, **kwargs)

    session.send = send
    return seen


def _spec(*networks: dict, num_instances: int = 1) -> RequestSpec:
    return RequestSpec(
        flavor=Flavor(name="m1", flavorid="m1", memory_mb=512, vcpus=1, root_gb=1),
        num_instances=num_instances,
        project_id="6f70656e-7374-6163-6b00-70726f6a6563",
        user_id="75736572-0000-4000-8000-000000000001",
        requested_networks=[
            {"network_id": None, "port_id": None, "address": None, "tag": None, **n}
            for n in networks
        ],
    )


def _boot(cloud: SimpleNamespace, spec: RequestSpec) -> set[str]:
    """Schedule the spec's instances; the compute nodes Placement holds their claims on."""
    instances = [_u() for _ in range(spec.num_instances)]
    cloud.placed.extend(instances)
    cloud.driver.select_destinations(None, spec, instances, False)
    chosen = set()
    for instance in instances:
        allocations = cloud.placement.get_allocations_for_consumer(instance)["allocations"]
        chosen |= set(allocations)
    return chosen


def test_boots_on_a_routed_network_land_only_on_its_segments_hosts(cloud):
    chosen = _boot(cloud, _spec({"network_id": NET_A}, num_instances=4))
    assert chosen and chosen <= cloud.segment_a_hosts
    assert cloud.queries[-1]["member_of"] == [f"in:{cloud.agg_a}"]
    # nova's reads: the extension list, then the network's subnets' segments
    assert cloud.neutron.paths() == ["/v2.0/extensions", "/v2.0/subnets"]
    assert cloud.neutron.requests[-1][1] == {"network_id": [NET_A], "fields": ["segment_id"]}


def test_a_network_with_two_segments_may_use_either(cloud):
    _boot(cloud, _spec({"network_id": NET_AB}))
    assert cloud.queries[-1]["member_of"] == ["in:" + ",".join(sorted([cloud.agg_a, cloud.agg_b]))]


def test_a_port_with_an_address_lands_on_its_subnets_segment(cloud):
    port = cloud.neutron.add_port(NET_AB, cloud.sub_b)
    chosen = _boot(cloud, _spec({"port_id": port}, num_instances=3))
    assert chosen and chosen <= cloud.segment_b_hosts
    assert cloud.queries[-1]["member_of"] == [f"in:{cloud.agg_b}"]
    assert f"/v2.0/subnets/{cloud.sub_b}" in cloud.neutron.paths()


def test_two_nics_on_different_segments_find_no_host(cloud):
    port_b = cloud.neutron.add_port(NET_AB, cloud.sub_b)
    with pytest.raises(NoValidHost):
        _boot(cloud, _spec({"network_id": NET_A}, {"port_id": port_b}))
    assert sorted(cloud.queries[-1]["member_of"]) == sorted(
        [f"in:{cloud.agg_a}", f"in:{cloud.agg_b}"]
    )


def test_a_remote_managed_port_requires_a_host_that_can_bind_it(cloud):
    port = cloud.neutron.add_port(NET_PLAIN, vnic_type="remote-managed")
    chosen = _boot(cloud, _spec({"port_id": port}))
    assert chosen == {cloud.dpu_host}
    query = cloud.queries[-1]
    assert "member_of" not in query  # the network is not routed
    assert os_traits.COMPUTE_REMOTE_MANAGED_PORTS in query["root_required"][0].split(",")


def test_a_segment_in_no_aggregate_fails_with_nova_reason_and_claims_nothing(cloud):
    instance = _u()
    cloud.placed.append(instance)
    with pytest.raises(NoValidHost, match=f"Aggregates not found for the network {NET_LOST}"):
        cloud.driver.select_destinations(None, _spec({"network_id": NET_LOST}), [instance])
    assert cloud.queries == []  # Placement was never asked for candidates
    assert cloud.placement.get_allocations_for_consumer(instance)["allocations"] == {}


@pytest.mark.parametrize("failure", ["unreachable", "server error"])
def test_neutron_failing_gives_no_valid_host_with_the_reason(cloud, failure):
    instance = _u()
    cloud.placed.append(instance)
    if failure == "unreachable":
        cloud.neutron.stop()
        expected = "Neutron is unreachable"
    else:
        cloud.neutron.fail_status = 500
        expected = "Neutron answered 500"
    with pytest.raises(NoValidHost, match=expected):
        cloud.driver.select_destinations(None, _spec({"network_id": NET_A}), [instance])
    assert cloud.queries == []
    assert cloud.placement.get_allocations_for_consumer(instance)["allocations"] == {}
