"""Builders of nova-shaped NUMA and PCI data, as nova-compute stores it and nova's API sends
it: NUMA cells and topologies of hosts and instances, PCI device pools and PCI requests (used
by the resources tests, the host state tests and the filter tests)."""

from __future__ import annotations

import json
from typing import Any

# -- NUMA ---------------------------------------------------------------------------------


def _env(name: str, data: dict[str, Any], version: str = "1.0") -> dict[str, Any]:
    return {
        "nova_object.name": name,
        "nova_object.namespace": "nova",
        "nova_object.version": version,
        "nova_object.data": data,
        "nova_object.changes": list(data),
    }


def pages(size_kb: int, total: int, used: int = 0, reserved: int = 0) -> dict[str, Any]:
    return _env(
        "NUMAPagesTopology",
        {"size_kb": size_kb, "total": total, "used": used, "reserved": reserved},
        "1.1",
    )


def host_cell(
    cell_id: int,
    cpuset: list[int],
    pcpuset: list[int],
    memory: int,
    siblings: list[list[int]] | None = None,
    mempages: list[dict[str, Any]] | None = None,
    pinned: list[int] | None = None,
    cpu_usage: int = 0,
    memory_usage: int = 0,
    socket: int | None = None,
) -> dict[str, Any]:
    """A NUMACell 1.5 primitive as nova-compute stores it."""
    if siblings is None:
        siblings = [[c] for c in sorted(set(cpuset) | set(pcpuset))]
    if mempages is None:
        mempages = [pages(4, memory * 256)]
    return _env(
        "NUMACell",
        {
            "id": cell_id,
            "cpuset": cpuset,
            "pcpuset": pcpuset,
            "memory": memory,
            "cpu_usage": cpu_usage,
            "memory_usage": memory_usage,
            "pinned_cpus": pinned or [],
            "siblings": siblings,
            "mempages": mempages,
            "network_metadata": _env("NetworkMetadata", {"physnets": [], "tunneled": False}, "1.0"),
            "socket": socket,
        },
        "1.5",
    )


def host_topology(*cells: dict[str, Any]) -> dict[str, Any]:
    return _env("NUMATopology", {"cells": list(cells)}, "1.2")


def smt_host(
    pinned: tuple[list[int], list[int]] = ([], []),
    hugepages_2m: int = 0,
    hugepages_used: int = 0,
    legacy: bool = False,
) -> dict[str, Any]:
    """Two sockets, one cell each, 4 cores x 2 threads per cell, 16 GiB per cell.
    New-style config: shared CPUs are core 0 and 1 of each cell (cpu_shared_set), dedicated
    cores 2 and 3 (cpu_dedicated_set); ``legacy`` uses vcpu_pin_set (both sets equal)."""
    cells = []
    for cell_id in (0, 1):
        base = cell_id * 8
        siblings = [[base + i, base + i + 4] for i in range(4)]
        if legacy:
            shared = dedicated = list(range(base, base + 8))
        else:
            shared = [base, base + 4, base + 1, base + 5]
            dedicated = [base + 2, base + 6, base + 3, base + 7]
        memory = 16384
        mempages = [pages(4, (memory - hugepages_2m * 2) * 256)]
        if hugepages_2m:
            mempages.append(pages(2048, hugepages_2m, used=hugepages_used))
        cells.append(
            host_cell(
                cell_id,
                sorted(shared),
                sorted(dedicated),
                memory,
                siblings=siblings,
                mempages=mempages,
                pinned=pinned[cell_id],
                socket=cell_id,
            )
        )
    return host_topology(*cells)


def instance_cell(
    cell_id: int,
    cpus: list[int],
    memory: int,
    policy: str | None = None,
    thread_policy: str | None = None,
    pagesize: int | None = None,
) -> dict[str, Any]:
    dedicated = policy == "dedicated"
    return {
        "id": cell_id,
        "cpuset": [] if dedicated else cpus,
        "pcpuset": cpus if dedicated else [],
        "memory": memory,
        "pagesize": pagesize,
        "cpu_policy": policy,
        "cpu_thread_policy": thread_policy,
        "cpuset_reserved": None,
        "cpu_pinning_raw": None,
    }


def instance_topology(*cells: dict[str, Any], emulator: str | None = None) -> dict[str, Any]:
    return {"cells": list(cells), "emulator_threads_policy": emulator}


def stored_topology(inst: dict[str, Any], fitted: list[Any]) -> str:
    """What nova-compute stores in ``instance_extra.numa_topology`` for an instance fitted
    so: each guest cell with the host cell it got, its pinning and reserved CPUs."""
    cells = []
    for fc in fitted:
        guest = inst["cells"][fc.guest_id]
        cells.append(
            {
                "nova_object.name": "InstanceNUMACell",
                "nova_object.data": {
                    **guest,
                    "id": fc.host_cell_id,
                    "pagesize": fc.pagesize,
                    "cpu_pinning_raw": {str(g): h for g, h in fc.pinning} or None,
                    "cpuset_reserved": sorted(fc.reserved) or None,
                },
            }
        )
    return json.dumps(
        {"nova_object.name": "InstanceNUMATopology", "nova_object.data": {"cells": cells}}
    )


# -- PCI ----------------------------------------------------------------------------------


NETWORK_DEVICE_TYPES = ("type-VF", "type-PF", "vdpa")


def pool(
    vendor_id: str,
    product_id: str,
    count: int,
    numa_node: int | None = 0,
    **tags: str,
) -> dict[str, Any]:
    """A PciDevicePool 1.1 primitive as nova-compute stores it in compute_nodes.pci_stats
    (network devices tagged remote_managed=false unless the device_spec says otherwise)."""
    tags = {"dev_type": "type-PCI", **tags}
    if tags["dev_type"] in NETWORK_DEVICE_TYPES:
        tags.setdefault("remote_managed", "false")
    return {
        "nova_object.name": "PciDevicePool",
        "nova_object.namespace": "nova",
        "nova_object.version": "1.1",
        "nova_object.data": {
            "product_id": product_id,
            "vendor_id": vendor_id,
            "numa_node": numa_node,
            "tags": tags,
            "count": count,
        },
        "nova_object.changes": ["product_id", "vendor_id", "numa_node", "tags", "count"],
    }


def pool_list(*pools: dict[str, Any]) -> dict[str, Any]:
    return {
        "nova_object.name": "PciDevicePoolList",
        "nova_object.namespace": "nova",
        "nova_object.version": "1.1",
        "nova_object.data": {"objects": list(pools)},
        "nova_object.changes": ["objects"],
    }


def alias_request(
    alias: str,
    count: int = 1,
    numa_policy: str | None = None,
    request_id: str | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """An InstancePCIRequest from a flavor's ``pci_passthrough:alias`` (unwrapped)."""
    return {
        "count": count,
        "spec": [spec],
        "alias_name": alias,
        "is_new": False,
        "numa_policy": numa_policy,
        "request_id": request_id,
        "requester_id": None,
    }


def port_request(physnet: str, request_id: str = "req-port") -> dict[str, Any]:
    """An InstancePCIRequest for an SR-IOV (vnic_type=direct) port."""
    return {
        "count": 1,
        "spec": [{"physical_network": physnet, "remote_managed": "False"}],
        "alias_name": None,
        "numa_policy": None,
        "request_id": request_id,
        "requester_id": "port-uuid-1",
    }


NIC = ("8086", "1520")  # an SR-IOV capable NIC (VFs)
GPU = ("10de", "1eb8")  # a GPU passed through whole
