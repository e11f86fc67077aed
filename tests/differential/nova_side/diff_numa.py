"""nova 34's NUMA fit, for tests/differential/test_numa.py: the instance topology from
``hardware.numa_get_constraints(flavor, image_meta)``, fitted on a host NUMATopology by
``hardware.numa_fit_instance_to_host`` with NUMATopologyLimits (ratios, network metadata) as
nova's NUMATopologyFilter builds them.

Payload::

    {"host": {"cells": [NUMACell data: id, cpuset, pcpuset, memory, cpu_usage, memory_usage,
                        pinned_cpus, siblings, mempages: [{size_kb, total, used, reserved}],
                        network_metadata: {physnets, tunneled} | null, socket]},
     "flavor": {"vcpus", "memory_mb", "extra_specs"}, "image": {"properties"},
     "limits": {"cpu_allocation_ratio", "ram_allocation_ratio", "network_metadata"?},
     "pack": [compute] packing_host_numa_cells_allocation_strategy,
     "pci_pools": [{"numa_node", "count"}] | null, "pci_requested": bool}

``pci_pools`` only orders the host cells (nova sorts them by their free PCI devices); PCI
matching is not under test here, so the stand-in for PciDeviceStats accepts every request.

The answer carries nova's fit (``real``) and, to recognise nova's documented bugs precisely,
the same fit re-decided with each bug patched out (see scheduler/resources/numa.py):

* ``pagesize``: every attempt of a guest cell on a host cell starts from the page size the
  guest asked for (nova overwrites it with the size picked on an earlier host cell);
* ``cache``: nova's per-(host cell, guest cell) fit cache never hits (nova keys it by the
  guest cell's ``id``, which it overwrites with host cell ids), so every pair is decided
  by its own inputs;
* ``fixed``: both.
"""

import contextlib
import itertools

from nova import exception, objects
from nova.conf import CONF
from nova.virt import hardware


class _PoolsOnly:
    """A stand-in for PciDeviceStats holding only pools: nova orders the host cells by them.
    It accepts every request (PCI matching is the PCI differential's subject)."""

    def __init__(self, pools):
        self.pools = [dict(p) for p in pools]

    def support_requests(self, requests, provider_mapping, numa_cells=None):
        return True


def _host(data):
    cells = []
    for cell in data["cells"]:
        kwargs = {
            "id": cell["id"],
            "cpuset": set(cell["cpuset"]),
            "pcpuset": set(cell["pcpuset"]),
            "memory": cell["memory"],
            "cpu_usage": cell["cpu_usage"],
            "memory_usage": cell["memory_usage"],
            "pinned_cpus": set(cell["pinned_cpus"]),
            "siblings": [set(s) for s in cell["siblings"]],
            "mempages": [objects.NUMAPagesTopology(**p) for p in cell["mempages"]],
            "socket": cell.get("socket"),
        }
        network = cell.get("network_metadata")
        if network is not None:
            kwargs["network_metadata"] = objects.NetworkMetadata(
                physnets=set(network["physnets"]), tunneled=network["tunneled"]
            )
        cells.append(objects.NUMACell(**kwargs))
    return objects.NUMATopology(cells=cells)


def _constraints(payload):
    flavor = objects.Flavor(
        name="flavor",
        vcpus=payload["flavor"]["vcpus"],
        memory_mb=payload["flavor"]["memory_mb"],
        extra_specs=dict(payload["flavor"]["extra_specs"]),
    )
    props = dict(payload["image"]["properties"])
    # the list forms are how a RequestSpec's ImageMetaProps carries them (from_dict reads
    # only glance's hw_numa_cpus.N / hw_numa_mem.N strings)
    cpus, mem = props.pop("hw_numa_cpus", None), props.pop("hw_numa_mem", None)
    image = objects.ImageMeta.from_dict({"name": "image", "properties": props})
    if cpus is not None:
        image.properties.hw_numa_cpus = [set(c) for c in cpus]
    if mem is not None:
        image.properties.hw_numa_mem = list(mem)
    return hardware.numa_get_constraints(flavor, image)


def _limits(data):
    limits = objects.NUMATopologyLimits(
        cpu_allocation_ratio=data["cpu_allocation_ratio"],
        ram_allocation_ratio=data["ram_allocation_ratio"],
    )
    network = data.get("network_metadata")
    if network is not None:
        limits.network_metadata = objects.NetworkMetadata(
            physnets=set(network["physnets"]), tunneled=network["tunneled"]
        )
    return limits


@contextlib.contextmanager
def _pagesize_as_requested(topology):
    """Patch out nova's rewriting of the requested page size: each attempt of a guest cell
    on a host cell starts from the page size the guest cell asked for."""
    requested = {id(cell): cell.pagesize for cell in topology.cells}
    original = hardware._numa_fit_instance_cell

    def fit_as_requested(host_cell, instance_cell, limits=None, cpuset_reserved=0):
        instance_cell.pagesize = requested[id(instance_cell)]
        return original(host_cell, instance_cell, limits, cpuset_reserved)

    hardware._numa_fit_instance_cell = fit_as_requested
    try:
        yield
    finally:
        hardware._numa_fit_instance_cell = original


@contextlib.contextmanager
def _no_fit_cache():
    """Patch out nova's fit cache: while fitting, a guest cell's ``id`` (the cache's key,
    read once per attempt) reads as a new number every time, so no attempt is a cache hit.
    What nova writes into ``id`` (the host cell's) is kept and read afterwards."""
    cls = objects.InstanceNUMACell
    original = cls.__dict__["id"]
    tokens = itertools.count(1 << 40)
    cls.id = property(lambda self: next(tokens), original.fset, original.fdel)
    try:
        yield
    finally:
        cls.id = original


def _fit(payload, pagesize_fix=False, cache_fix=False):
    topology = _constraints(payload)
    host = _host(payload["host"])
    pools = payload.get("pci_pools")
    pci_stats = _PoolsOnly(pools) if pools is not None else None
    pci_requests = ["a request"] if payload.get("pci_requested") else None
    CONF.set_override(
        "packing_host_numa_cells_allocation_strategy", payload["pack"], group="compute"
    )
    with contextlib.ExitStack() as patches:
        if pagesize_fix:
            patches.enter_context(_pagesize_as_requested(topology))
        if cache_fix:
            patches.enter_context(_no_fit_cache())
        fitted = hardware.numa_fit_instance_to_host(
            host,
            topology,
            provider_mapping=None,
            limits=_limits(payload["limits"]),
            pci_requests=pci_requests,
            pci_stats=pci_stats,
        )
    if fitted is None:
        return None
    return [
        {
            "host_cell": cell.id,
            "pagesize": cell.pagesize,
            "pinning": sorted([v, p] for v, p in (cell.cpu_pinning or {}).items()),
            "reserved": sorted(cell.cpuset_reserved or ()),
        }
        for cell in fitted.cells
    ]


def _topology(topology):
    return {
        "emulator_threads_policy": topology.emulator_threads_policy,
        "cells": [
            {
                "cpuset": sorted(cell.cpuset),
                "pcpuset": sorted(cell.pcpuset),
                "memory": cell.memory,
                "pagesize": cell.pagesize,
                "cpu_policy": cell.cpu_policy,
                "cpu_thread_policy": cell.cpu_thread_policy,
            }
            for cell in topology.cells
        ],
    }


def _numa_fit(payload):
    try:
        topology = _constraints(payload)
    except (exception.NovaException, ValueError) as exc:
        return {"error": type(exc).__name__, "message": str(exc)}
    if topology is None:
        return {"topology": None}
    answer = {"topology": _topology(topology), "real": _fit(payload)}
    answer["fixed"] = _fit(payload, pagesize_fix=True, cache_fix=True)
    if answer["fixed"] != answer["real"]:
        answer["pagesize"] = _fit(payload, pagesize_fix=True)
        answer["cache"] = _fit(payload, cache_fix=True)
    return answer


OPS = {"fit": _numa_fit}
