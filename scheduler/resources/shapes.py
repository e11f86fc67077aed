"""What an instance asks of a host's NUMA cells and PCI devices, as typed values.

nova sends them as object primitives (``RequestSpec.numa_topology``, an
InstanceNUMATopology; ``RequestSpec.pci_requests``, InstancePCIRequests). The RPC edge
(``scheduler/rpc/wire``) decodes them once, when the request arrives, into these shapes
(``numa.instance_topology_from_primitive``, ``pci.requests_from_primitive``): past the
manager nothing reads a primitive. Each keeps the data it was decoded from (``primitive``)
for what has to give nova's shape back: the wire's encoders, the versioned notifications,
nova's own plugins (``scheduler/nova_plugins.py``).

This module imports nothing of the product: the request model (``scheduler/objects.py``)
names these types, the maths (``numa.py``, ``pci.py``) work on them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

SHARED = "shared"
DEDICATED = "dedicated"
MIXED = "mixed"
# the CPU policies that pin guest CPUs to host CPUs
PINNED_POLICIES = (DEDICATED, MIXED)


@dataclass(slots=True)
class InstanceCell:
    """One guest NUMA node: its CPUs (shared and pinned), memory and page size."""

    id: int
    cpuset: frozenset[int]  # shared (floating) guest CPUs
    pcpuset: frozenset[int]  # pinned guest CPUs
    memory: int  # MiB
    pagesize: int | None = None
    cpu_policy: str | None = None
    cpu_thread_policy: str | None = None

    @property
    def pinned(self) -> bool:
        return self.cpu_policy in PINNED_POLICIES


@dataclass(slots=True)
class InstanceTopology:
    """The guest's NUMA nodes. ``primitive``: the InstanceNUMATopology data it was decoded
    from (None when built from a flavor's extra specs and an image's properties)."""

    cells: list[InstanceCell]
    emulator_threads_policy: str | None = None
    primitive: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    @property
    def emulator_threads_isolated(self) -> bool:
        return self.emulator_threads_policy == "isolate"

    def as_data(self) -> Mapping[str, Any]:
        """nova's InstanceNUMATopology data (unwrapped): what it was decoded from, else
        built from the cells (a topology made from a flavor, or by a test)."""
        if self.primitive is not None:
            return self.primitive
        return {
            "cells": [
                {
                    "id": cell.id,
                    "cpuset": sorted(cell.cpuset),
                    "pcpuset": sorted(cell.pcpuset),
                    "memory": cell.memory,
                    "pagesize": cell.pagesize,
                    "cpu_policy": cell.cpu_policy,
                    "cpu_thread_policy": cell.cpu_thread_policy,
                }
                for cell in self.cells
            ],
            "emulator_threads_policy": self.emulator_threads_policy,
        }


@dataclass(frozen=True, slots=True)
class PciRequest:
    """One InstancePCIRequest: ``count`` devices matching any one of ``specs`` (each a dict
    of the keys a device pool must have), for a flavor's alias (``alias_name``) or a port's
    VNIC (no alias; ``requester_id`` names the port). ``request_id`` names the Placement
    request groups of an alias's devices (``<request_id>-<n>``). ``primitive``: the
    InstancePCIRequest data it was decoded from."""

    count: int = 1
    specs: tuple[Mapping[str, Any], ...] = ()
    alias_name: str | None = None
    numa_policy: str | None = None
    request_id: str | None = None
    requester_id: str | None = None
    primitive: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def is_port(self) -> bool:
        """An SR-IOV port's request (nova: no ``alias_name``) rather than a flavor alias's."""
        return self.alias_name is None

    def as_data(self) -> Mapping[str, Any]:
        """nova's InstancePCIRequest data (unwrapped): what it was decoded from, else built
        from the fields."""
        if self.primitive:
            return self.primitive
        data: dict[str, Any] = {"count": self.count, "spec": [dict(s) for s in self.specs]}
        for name in ("alias_name", "numa_policy", "request_id", "requester_id"):
            value = getattr(self, name)
            if value is not None:
                data[name] = value
        return data
