"""NUMATopologyFilter over nova-shaped host topologies and requests."""

from __future__ import annotations

from typing import Any

import pytest

from filters import PASS_ALL
from filters.numa_topology_filter import NUMATopologyFilter
from scheduler.objects import Flavor, RequestSpec
from scheduler.request import SchedulingRequest
from scheduler.resources import numa, pci
from tests.unit.filters.fakes import make_host, make_spec, run_filter
from tests.unit.scheduler.resources.builders import (
    alias_request,
    host_cell,
    host_topology,
    instance_cell,
    instance_topology,
    pool,
    pool_list,
    smt_host,
)

GPU = ("10de", "1eb8")


def host(name: str = "host1", topology: Any = None, **attrs: Any):
    attrs.setdefault("uuid", f"{name}-uuid")
    attrs.setdefault("cpu_allocation_ratio", 4.0)
    attrs.setdefault("ram_allocation_ratio", 1.0)
    return make_host(name, numa_topology=topology, **attrs)


def spec(
    topology: dict[str, Any] | None = None,
    extra_specs: dict[str, str] | None = None,
    image_props: dict[str, Any] | None = None,
    vcpus: int = 4,
    memory_mb: int = 4096,
    pci_requests: list[dict[str, Any]] | None = None,
) -> RequestSpec:
    s = make_spec(extra_specs=extra_specs, image_props=image_props)
    s.flavor = Flavor(memory_mb=memory_mb, vcpus=vcpus, extra_specs=dict(extra_specs or {}))
    # decoded as the RPC edge decodes a request's
    s.numa_topology = numa.instance_topology_from_primitive(topology)
    s.pci_requests = pci.requests_from_primitive(pci_requests or [])
    return s


def candidate(rp: str, **mappings: list[str]) -> dict[str, Any]:
    return {
        "allocations": {rp: {"resources": {"VCPU": 1}}},
        "mappings": {"": [rp], **mappings},
    }


PINNED_2 = instance_topology(instance_cell(0, [0, 1], 1024, "dedicated", "require"))

FLT = NUMATopologyFilter()


def test_plugin_flags() -> None:
    assert NUMATopologyFilter.RUN_ON_REBUILD is False
    assert NUMATopologyFilter.run_filter_once_per_request is False


def test_request_without_topology_passes_everywhere() -> None:
    s = spec()
    assert FLT.host_passes(host(topology=None), s) is True
    assert FLT.host_passes(host(topology=smt_host()), s) is True
    assert s.scratch.host_limits == {}
    # the handler then checks no host at all
    assert FLT.prepare(s) is PASS_ALL


def test_thread_policy_require_alone_is_still_checked_per_host() -> None:
    extra = {"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": "require"}
    assert FLT.prepare(spec(extra_specs=extra, vcpus=2, memory_mb=1024)) is not PASS_ALL


def test_host_without_topology_fails_a_numa_request() -> None:
    result = FLT.host_passes(host(topology=None), spec(PINNED_2))
    assert not result and result.reason == "host has no NUMA topology"


def test_fit_records_the_numa_limit_with_the_host_ratios() -> None:
    h = host(topology=smt_host(), cpu_allocation_ratio=16.0, ram_allocation_ratio=1.5)
    s = spec(PINNED_2)
    assert FLT.host_passes(h, s) is True
    assert s.scratch.host_limits[("host1", "host1")]["numa_topology"] == {
        "cpu_allocation_ratio": 16.0,
        "ram_allocation_ratio": 1.5,
    }
    # the shared HostState is not written
    assert "numa_topology" not in h.limits


def test_missing_ratios_fall_back_to_nova_defaults() -> None:
    h = host(topology=smt_host(), cpu_allocation_ratio=None, ram_allocation_ratio=None)
    s = spec(PINNED_2)
    assert FLT.host_passes(h, s)
    assert s.scratch.host_limits[("host1", "host1")]["numa_topology"] == {
        "cpu_allocation_ratio": 4.0,
        "ram_allocation_ratio": 1.0,
    }


def test_cpu_ratio_of_the_host_decides_shared_cpus() -> None:
    topo = host_topology(host_cell(0, [0, 1, 2, 3], [], 8192, cpu_usage=15))
    s = spec(instance_topology(instance_cell(0, [0, 1], 1024)))
    result = FLT.host_passes(host(topology=topo, cpu_allocation_ratio=4.0), s)
    assert not result and result.reason == numa.NOT_ENOUGH_CELL_CPUS
    assert FLT.host_passes(host(topology=topo, cpu_allocation_ratio=8.0), s)


def test_pinned_cpus_already_used() -> None:
    s = spec(instance_topology(instance_cell(0, [0, 1, 2, 3], 1024, "dedicated")))
    assert FLT.host_passes(host(topology=smt_host()), s)
    busy = host(topology=smt_host(pinned=([2], [14])))
    result = FLT.host_passes(busy, s)
    assert not result and result.reason == "no NUMA cell with 4 free pinned CPUs"


def test_thread_policy_require_needs_smt_siblings() -> None:
    no_smt = host_topology(host_cell(0, [0, 1], [2, 3, 4, 5], 8192))
    extra = {"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": "require"}
    s = spec(extra_specs=extra, vcpus=2, memory_mb=1024)
    result = FLT.host_passes(host(topology=no_smt), s)
    assert not result and result.reason == "thread policy require: no SMT siblings"
    assert FLT.host_passes(host(topology=smt_host()), s)


def test_thread_policy_require_from_the_image() -> None:
    no_smt = host_topology(host_cell(0, [0, 1], [2, 3, 4, 5], 8192))
    s = spec(
        extra_specs={"hw:cpu_policy": "dedicated"},
        image_props={"hw_cpu_thread_policy": "require"},
        vcpus=2,
        memory_mb=1024,
    )
    result = FLT.host_passes(host(topology=no_smt), s)
    assert not result and result.reason == "thread policy require: no SMT siblings"


def test_thread_policy_isolate_refused_on_new_style_smt_host() -> None:
    extra = {"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": "isolate"}
    s = spec(extra_specs=extra, vcpus=2, memory_mb=1024)
    result = FLT.host_passes(host(topology=smt_host()), s)
    assert not result and result.reason == numa.ISOLATE_HOST_SMT
    assert FLT.host_passes(host(topology=smt_host(legacy=True)), s)


def test_topology_derived_from_flavor_when_the_spec_has_none() -> None:
    s = spec(extra_specs={"hw:numa_nodes": "2"}, vcpus=4, memory_mb=4096)
    assert FLT.host_passes(host(topology=smt_host()), s)
    one_cell = host_topology(host_cell(0, list(range(8)), [], 32768))
    result = FLT.host_passes(host(topology=one_cell), s)
    assert not result and result.reason == numa.TOO_MANY_NODES


def test_spec_topology_wins_over_flavor() -> None:
    # the flavor says 2 nodes, the spec's (authoritative) topology has one
    one_cell = host_topology(host_cell(0, list(range(8)), [], 32768))
    s = spec(
        instance_topology(instance_cell(0, [0, 1, 2, 3], 4096)),
        extra_specs={"hw:numa_nodes": "2"},
    )
    assert FLT.host_passes(host(topology=one_cell), s)


def test_hugepages_from_the_flavor() -> None:
    s = spec(extra_specs={"hw:mem_page_size": "2MB"}, vcpus=2, memory_mb=2048)
    result = FLT.host_passes(host(topology=smt_host()), s)
    assert not result and result.reason == numa.PAGESIZE_MISSING
    full = host(topology=smt_host(hugepages_2m=1024, hugepages_used=1000))
    result = FLT.host_passes(full, s)
    assert not result and result.reason == numa.NOT_ENOUGH_HUGEPAGES
    assert FLT.host_passes(host(topology=smt_host(hugepages_2m=1024)), s)


def test_invalid_flavor_numa_request_is_a_reason_not_a_crash() -> None:
    s = spec(extra_specs={"hw:numa_nodes": "2"}, vcpus=3, memory_mb=4096)
    result = FLT.host_passes(host(topology=smt_host()), s)
    assert not result and result.reason == "invalid NUMA request in flavor or image"


# -- allocation candidates ------------------------------------------------------------------


def test_candidates_are_kept_when_the_topology_fits() -> None:
    h = host(topology=smt_host())
    s = spec(PINNED_2)
    cands = [candidate("host1-uuid"), candidate("host1-uuid")]
    s.scratch.allocation_candidates = {"host1-uuid": list(cands)}
    assert FLT.host_passes(h, s)
    assert s.scratch.allocation_candidates["host1-uuid"] == cands


def test_candidates_are_dropped_when_the_topology_does_not_fit() -> None:
    h = host(topology=smt_host(pinned=([2, 3, 6, 7], [10, 11, 14, 15])))
    s = spec(PINNED_2)
    s.scratch.allocation_candidates = {"host1-uuid": [candidate("host1-uuid")], "other": [{}]}
    result = FLT.host_passes(h, s)
    assert not result and result.reason == "no NUMA cell with 2 free pinned CPUs"
    assert s.scratch.allocation_candidates["host1-uuid"] == []
    assert s.scratch.allocation_candidates["other"] == [{}]
    assert s.scratch.host_limits == {}


def test_host_without_candidates_in_a_placement_request_fails() -> None:
    s = spec(PINNED_2)
    s.scratch.allocation_candidates = {"other-uuid": [candidate("other-uuid")]}
    result = FLT.host_passes(host(topology=smt_host()), s)
    assert not result and result.reason == "no allocation candidate left"
    # and a host that would not fit says why
    result = FLT.host_passes(host(topology=host_topology(host_cell(0, [0], [], 512))), s)
    assert not result and result.reason == numa.NOT_ENOUGH_SMALLPAGES


def test_pci_numa_affinity_per_placement_candidate() -> None:
    """PCI in Placement: the GPU of cell 0 or of cell 1 per candidate; cell 1's pinned CPUs
    are all taken, so only the candidate with cell 0's GPU can keep the device NUMA-local."""
    topo = smt_host(pinned=([], [10, 11, 14, 15]))
    stats = pool_list(pool(*GPU, 1, 0, rp_uuid="rp-gpu-0"), pool(*GPU, 1, 1, rp_uuid="rp-gpu-1"))
    gpu = alias_request(
        "gpu", numa_policy="required", request_id="r1", vendor_id=GPU[0], product_id=GPU[1]
    )
    s = spec(PINNED_2, pci_requests=[gpu])
    local = candidate("host1-uuid", **{"r1-0": ["rp-gpu-0"]})
    remote = candidate("host1-uuid", **{"r1-0": ["rp-gpu-1"]})
    s.scratch.allocation_candidates = {"host1-uuid": [remote, local]}
    assert FLT.host_passes(host(topology=topo, pci_stats=stats), s)
    assert s.scratch.allocation_candidates["host1-uuid"] == [local]

    s.scratch.allocation_candidates = {"host1-uuid": [remote]}
    result = FLT.host_passes(host(topology=topo, pci_stats=stats), s)
    assert not result and result.reason == numa.PCI_NOT_LOCAL


def test_pci_numa_affinity_without_placement() -> None:
    topo = smt_host(pinned=([2, 3, 6, 7], []))  # only cell 1 has free pinned CPUs
    gpu_on_cell0 = pool_list(pool(*GPU, 1, 0))
    required = alias_request("gpu", numa_policy="required", vendor_id=GPU[0], product_id=GPU[1])
    s = spec(PINNED_2, pci_requests=[required])
    result = FLT.host_passes(host(topology=topo, pci_stats=gpu_on_cell0), s)
    assert not result and result.reason == numa.PCI_NOT_LOCAL
    preferred = dict(required, numa_policy="preferred")
    s = spec(PINNED_2, pci_requests=[preferred])
    assert FLT.host_passes(host(topology=topo, pci_stats=gpu_on_cell0), s)
    # a device that reports no NUMA node is fine for the legacy policy
    legacy = dict(required, numa_policy=None)
    s = spec(PINNED_2, pci_requests=[legacy])
    assert FLT.host_passes(host(topology=topo, pci_stats=pool_list(pool(*GPU, 1, None))), s)


def test_pci_request_on_host_without_devices_fails_the_fit() -> None:
    gpu = alias_request("gpu", vendor_id=GPU[0], product_id=GPU[1])
    s = spec(PINNED_2, pci_requests=[gpu])
    result = FLT.host_passes(host(topology=smt_host(), pci_stats=None), s)
    assert not result and result.reason == numa.PCI_NOT_LOCAL


# -- over a list of hosts -------------------------------------------------------------------


@pytest.mark.parametrize("with_candidates", [False, True])
def test_run_filter_agrees_with_host_passes(with_candidates: bool) -> None:
    hosts = [
        host("free", topology=smt_host()),
        host("none", topology=None),
        host("busy", topology=smt_host(pinned=([2, 3, 6, 7], [10, 11, 14, 15]))),
        host("nosmt", topology=host_topology(host_cell(0, [0, 1], [2, 3, 4, 5], 8192))),
        host("legacy", topology=smt_host(legacy=True)),
    ]

    def fresh() -> RequestSpec:
        s = spec(PINNED_2)
        if with_candidates:
            s.scratch.allocation_candidates = {h.uuid: [candidate(h.uuid)] for h in hosts}
        return s

    one = fresh()
    singles = [(h.host, FLT.host_passes(h, one)) for h in hosts]
    batch_spec = fresh()
    outcome = run_filter(FLT, hosts, batch_spec)
    assert [h.host for h in outcome.passed] == [name for name, r in singles if r]
    assert [(h.host, why) for h, why in outcome.rejected] == [
        (name, r.reason) for name, r in singles if not r
    ]
    assert [h.host for h in outcome.passed] == ["free", "legacy"]
    assert batch_spec.scratch.host_limits == one.scratch.host_limits
    assert batch_spec.scratch.allocation_candidates == one.scratch.allocation_candidates


# -- in the filter chain --------------------------------------------------------------------


def test_chain_with_pci_filter_groups_reasons_and_skips_on_rebuild() -> None:
    from filters.handler import FilterHandler
    from filters.pci_passthrough_filter import PciPassthroughFilter

    gpu_stats = pool_list(pool(*GPU, 1, 0))
    hosts = [
        host("ok", topology=smt_host(), pci_stats=gpu_stats),
        host("nogpu1", topology=smt_host()),
        host("nogpu2", topology=smt_host()),
        host("busy1", topology=smt_host(pinned=([2, 3, 6, 7], [10, 11, 14, 15]))),
        host("busy2", topology=smt_host(pinned=([2, 3, 6, 7], [10, 11, 14, 15]))),
        host("flat", topology=None, pci_stats=gpu_stats),
    ]
    gpu = alias_request("gpu", vendor_id=GPU[0], product_id=GPU[1])
    chain = FilterHandler([PciPassthroughFilter(), NUMATopologyFilter()])
    s = spec(PINNED_2, pci_requests=[gpu])
    report = chain.run(hosts, s)
    assert [h.host for h in report.hosts] == ["ok"]
    assert report.summary() == (
        "1/6 hosts available: "
        "4 PciPassthroughFilter (host has no PCI devices), "
        "1 NUMATopologyFilter (host has no NUMA topology)"
    )
    s = spec(PINNED_2)
    report = FilterHandler([NUMATopologyFilter()]).run(hosts, s)
    assert report.summary() == (
        "3/6 hosts available: "
        "2 NUMATopologyFilter (no NUMA cell with 2 free pinned CPUs), "
        "1 NUMATopologyFilter (host has no NUMA topology)"
    )
    # rebuild: neither filter runs
    s = spec(PINNED_2, pci_requests=[gpu])
    s.scheduler_hints = {"_nova_check_type": ["rebuild"]}
    assert len(chain.run(hosts, s).hosts) == 6


def test_request_spec_from_nova_wire_and_limit_back_on_the_wire() -> None:
    from scheduler.objects import SchedulerLimits, Selection
    from scheduler.request import SchedulingRequest
    from scheduler.rpc import wire

    s = spec(PINNED_2, pci_requests=[alias_request("gpu", vendor_id=GPU[0], product_id=GPU[1])])
    s.instance_uuid = "7f4b1c1e-8a0b-4a4e-9e57-0d6f1c1e7b2a"
    decoded = SchedulingRequest.of(
        wire.request_spec_from_primitive(wire.request_spec_to_primitive(s))
    )
    # decoded at the edge: typed, with nova's data kept for the way back
    assert decoded.numa_topology.cells[0].pcpuset == frozenset({0, 1})
    assert decoded.numa_topology.primitive["cells"][0]["pcpuset"] == [0, 1]
    assert decoded.pci_requests[0].alias_name == "gpu"
    h = host(topology=smt_host(), pci_stats=pool_list(pool(*GPU, 1, 0)))
    assert FLT.host_passes(h, decoded)
    limit = decoded.scratch.host_limits[("host1", "host1")]["numa_topology"]
    sel = Selection(
        compute_node_uuid="host1-uuid",
        service_host="host1",
        nodename="host1",
        cell_uuid="cell1",
        allocation_request=None,
        allocation_request_version=None,
        limits=SchedulerLimits(numa_topology=limit),
    )
    prim = wire.selection_to_primitive(sel)
    numa_limits = prim["nova_object.data"]["limits"]["nova_object.data"]["numa_topology"]
    assert numa_limits["nova_object.name"] == "NUMATopologyLimits"
    assert numa_limits["nova_object.data"]["cpu_allocation_ratio"] == 4.0


def test_multi_create_consumption_takes_the_pinned_cpus_of_the_first_instance() -> None:
    # a host with 4 free pinned CPUs in one cell takes one 4-CPU pinned guest, not two
    h = host(topology=host_topology(host_cell(0, [0, 1], [2, 3, 4, 5], 8192)))
    s = spec(instance_topology(instance_cell(0, [0, 1, 2, 3], 1024, "dedicated")))
    assert FLT.host_passes(h, s)
    before = h.numa_topology
    h.consume_from_request(s)
    assert h.numa_topology is not before  # replaced, never modified in place
    result = FLT.host_passes(
        h, spec(instance_topology(instance_cell(0, [0, 1, 2, 3], 1024, "dedicated")))
    )
    assert not result and result.reason == "no NUMA cell with 4 free pinned CPUs"


# -- nova 34's limits: network metadata, cell order ------------------------------------------


class _SpecWithNetworks(SchedulingRequest):
    """A request that carries nova's ``RequestSpec.network_metadata`` (a primitive, as the
    wire brings it)."""


def _network_spec(
    topology: dict[str, Any], physnets: list[str], tunneled: bool
) -> _SpecWithNetworks:
    s = _SpecWithNetworks.of(spec(topology))
    s.network_metadata = {
        "nova_object.name": "NetworkMetadata",
        "nova_object.namespace": "nova",
        "nova_object.version": "1.0",
        "nova_object.data": {"physnets": physnets, "tunneled": tunneled},
    }
    return s


def _cells_with_physnet0_on(cell_id: int, busy: int) -> dict[str, Any]:
    topo = smt_host(pinned=([2], []) if busy == 0 else ([], [10]))
    for cell in topo["nova_object.data"]["cells"]:
        data = cell["nova_object.data"]
        physnets = ["physnet0"] if data["id"] == cell_id else []
        data["network_metadata"]["nova_object.data"] = {"physnets": physnets, "tunneled": False}
    return topo


def test_network_metadata_is_decoded_checked_and_recorded_in_the_limit() -> None:
    one_pinned = instance_topology(instance_cell(0, [0], 1024, "dedicated"))
    h = host(topology=_cells_with_physnet0_on(0, busy=0))
    s = _network_spec(one_pinned, ["physnet0"], False)
    assert FLT.host_passes(h, s)
    assert s.scratch.host_limits[("host1", "host1")]["numa_topology"] == {
        "cpu_allocation_ratio": 4.0,
        "ram_allocation_ratio": 1.0,
        "network_metadata": {"physnets": ["physnet0"], "tunneled": False},
    }
    # the cell local to physnet0 has no free pinned CPU left: the other cells do not do
    full = _cells_with_physnet0_on(0, busy=0)
    full["nova_object.data"]["cells"][0]["nova_object.data"]["pinned_cpus"] = [2, 3, 6, 7]
    result = FLT.host_passes(host(topology=full), _network_spec(one_pinned, ["physnet0"], False))
    assert not result and result.reason == numa.NETWORKS_NOT_LOCAL


def test_network_limit_goes_back_to_nova_as_network_metadata() -> None:
    from scheduler.objects import SchedulerLimits
    from scheduler.rpc import wire

    s = _network_spec(PINNED_2, ["physnet1"], True)
    assert FLT.host_passes(host(topology=smt_host()), s)
    limit = s.scratch.host_limits[("host1", "host1")]["numa_topology"]
    prim = wire.limits_to_primitive(SchedulerLimits(numa_topology=limit))
    numa_limits = prim["nova_object.data"]["numa_topology"]["nova_object.data"]
    network = numa_limits["network_metadata"]
    assert network["nova_object.name"] == "NetworkMetadata"
    assert network["nova_object.data"] == {"physnets": ["physnet1"], "tunneled": True}


def test_packing_strategy_option_orders_the_cells() -> None:
    from tests.unit.filters.fakes import override

    inst = instance_topology(instance_cell(0, [0], 1024, "dedicated"))
    # cell 0 has a pinned CPU: spreading takes cell 1, packing cell 0
    h = host(topology=smt_host(pinned=([2], [])))
    s = spec(inst)
    assert FLT.host_passes(h, s)
    h.consume_from_request(s)
    assert sorted(len(c.pinned_cpus) for c in numa.host_topology_of(h, h.numa_topology).cells) == [
        1,
        1,
    ]
    with override("packing_host_numa_cells_allocation_strategy", True, group="compute"):
        h = host(topology=smt_host(pinned=([2], [])))
        s = spec(inst)
        assert FLT.host_passes(h, s)
        h.consume_from_request(s)
        cells = numa.host_topology_of(h, h.numa_topology).cells
        assert [len(c.pinned_cpus) for c in cells] == [2, 0]
