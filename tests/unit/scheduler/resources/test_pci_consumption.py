"""HostState.consume_from_request's PCI part, as nova's: the devices Placement allocated (the
request groups' providers), NUMA-local to the cells the instance was fitted to, taken in
nova's pool order; what a failed consumption took stays taken."""

from __future__ import annotations

import logging
from typing import Any

from scheduler.hosts.state import HostState
from scheduler.objects import Flavor, RequestGroup, RequestSpec
from scheduler.resources import numa, pci
from tests.unit.scheduler.resources.builders import GPU, alias_request, pool, pool_list


def _host_cell(cell_id: int, cpu_usage: int = 0, memory_usage: int = 0) -> dict[str, Any]:
    cpus = [4 * cell_id + i for i in range(4)]
    return {
        "id": cell_id,
        "cpuset": cpus,
        "pcpuset": [],
        "memory": 4096,
        "cpu_usage": cpu_usage,
        "memory_usage": memory_usage,
        "pinned_cpus": [],
        "siblings": [[c] for c in cpus],
        "mempages": [{"size_kb": 4, "total": 4096 * 256, "used": 0, "reserved": 0}],
        "socket": 0,
    }


def _guest(*memory: int) -> numa.InstanceTopology | None:
    """An unpinned guest NUMA topology, one node per ``memory`` (MiB), one vCPU each,
    decoded as the RPC edge decodes a request's."""
    cells = [
        {
            "id": i,
            "cpuset": [i],
            "pcpuset": [],
            "memory": mb,
            "pagesize": None,
            "cpu_policy": None,
            "cpu_thread_policy": None,
            "cpuset_reserved": None,
            "cpu_pinning_raw": None,
        }
        for i, mb in enumerate(memory)
    ]
    return numa.instance_topology_from_primitive({"cells": cells, "emulator_threads_policy": None})


def _host(stats: Any, *cells: dict[str, Any]) -> HostState:
    hs = HostState("h", "h")
    hs.pci_stats = stats
    hs.numa_topology = {"cells": list(cells)} if cells else None
    hs.cpu_allocation_ratio = 16.0
    hs.ram_allocation_ratio = 1.0
    hs.free_ram_mb = hs.total_usable_ram_mb = 8192
    return hs


def _spec(*requests: dict[str, Any], groups: dict[str, list[str]] | None = None) -> RequestSpec:
    return RequestSpec(
        flavor=Flavor(memory_mb=512, vcpus=1, root_gb=1),
        pci_requests=pci.requests_from_primitive(requests),
        requested_resources=[
            RequestGroup(requester_id=rid, provider_uuids=list(rps))
            for rid, rps in (groups or {}).items()
        ],
    )


def _counts(hs: HostState) -> list[tuple[Any, int]]:
    return [
        (p.get("rp_uuid", p["numa_node"]), p["count"]) for p in pci.pools_from_stats(hs.pci_stats)
    ]


def _memory_used(hs: HostState) -> list[int]:
    topology = numa.host_topology_from_primitive(hs.numa_topology)
    assert topology is not None
    return [c.memory_usage for c in topology.cells]


PLACED = pool_list(pool(*GPU, 2, 0, rp_uuid="rp-a"), pool(*GPU, 2, 0, rp_uuid="rp-b"))
GPU_R1 = alias_request("gpu", request_id="r1", vendor_id=GPU[0], product_id=GPU[1])


def test_the_devices_come_from_the_providers_placement_allocated() -> None:
    hs = _host(PLACED)
    hs.consume_from_request(_spec(GPU_R1, groups={"r1-0": ["rp-b"]}), "i-1")
    assert _counts(hs) == [("rp-a", 2), ("rp-b", 1)]


def test_each_instance_of_a_multi_create_keeps_its_own_providers() -> None:
    hs = _host(PLACED)
    spec = _spec(GPU_R1, groups={"r1-0": ["rp-b"]})
    hs.consume_from_request(spec, "i-1")
    # the scheduler sets the group's providers again from the next claimed candidate
    spec.requested_resources[0].provider_uuids = ["rp-a"]
    hs.consume_from_request(spec, "i-2")
    assert _counts(hs) == [("rp-a", 1), ("rp-b", 1)]
    # releasing i-1 consumes i-2 again on the report: from rp-a, as it was
    hs.release_consumption("i-1", "deleted")
    assert _counts(hs) == [("rp-a", 1), ("rp-b", 2)]


def test_the_devices_are_local_to_the_cells_the_instance_was_fitted_to() -> None:
    # cell 1 has more GPUs and is less used: the instance's node lands there, and so do
    # its devices (the legacy policy takes local devices when there are enough)
    stats = pool_list(pool(*GPU, 1, 0), pool(*GPU, 2, 1))
    hs = _host(stats, _host_cell(0, cpu_usage=2, memory_usage=1024), _host_cell(1))
    spec = _spec(alias_request("gpu", vendor_id=GPU[0], product_id=GPU[1]))
    spec.numa_topology = _guest(512)
    hs.consume_from_request(spec, "i-1")
    assert _counts(hs) == [(0, 1), (1, 1)]
    assert _memory_used(hs) == [1024, 512]


def test_the_fit_is_checked_for_pci_numa_affinity() -> None:
    # the only GPU is on cell 1, which is the busier one: a required policy moves the
    # instance's node there
    stats = pool_list(pool(*GPU, 1, 1))
    hs = _host(stats, _host_cell(0), _host_cell(1, cpu_usage=2, memory_usage=1024))
    required = alias_request("gpu", numa_policy="required", vendor_id=GPU[0], product_id=GPU[1])
    spec = _spec(required)
    spec.numa_topology = _guest(512)
    hs.consume_from_request(spec, "i-1")
    assert _memory_used(hs) == [0, 1536]
    assert _counts(hs) == []


def test_a_failed_consumption_keeps_what_it_took(caplog: Any) -> None:
    hs = _host(pool_list(pool(*GPU, 2, 0)))
    fpga = alias_request("fpga", vendor_id="1172", product_id="0001")
    with caplog.at_level(logging.WARNING, logger="scheduler.hosts.state"):
        hs.consume_from_request(_spec(alias_request("gpu", vendor_id=GPU[0]), fpga), "i-1")
    assert _counts(hs) == [(0, 1)]
    assert hs.free_ram_mb == 8192 - 512  # the rest of the instance is counted
    # the operator is told which request failed, and nothing raised on the way
    (warning,) = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert warning.getMessage() == (
        "Selected host h failed to consume the instance's PCI devices "
        "(no PCI device matching alias fpga)"
    )


def test_consumption_leaves_the_shared_report_untouched() -> None:
    hs = _host(PLACED)
    hs.consume_from_request(_spec(GPU_R1, groups={"r1-0": ["rp-a"]}), "i-1")
    assert hs.pci_stats is not PLACED
    objects = PLACED["nova_object.data"]["objects"]
    assert [o["nova_object.data"]["count"] for o in objects] == [2, 2]
