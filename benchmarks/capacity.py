"""Capacity section: what ``novasched-manage capacity`` costs for 20 flavors.

For each fleet size N: the core section's fleet (one SQLite cell, benchmarks/fleet.py), a
real HostManager and FilterScheduler with the configured filters, and a provider view that
holds one provider per compute node, with the inventories and use the node reports (the
view answers the candidates, as in a deployment with ``[placement] view_feed``). Timed: one
``CapacityCalculator.flavors`` call over ``FLAVORS`` (prefilters, the view's unlimited
candidates, the host states, the filters, the count per host and the stranded capacity),
``repeats`` times after one untimed warm-up. Target: 20 flavors at 10k hosts in <= 5 s.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from benchmarks.core import rows_per_size, warmed_driver
from scheduler.objects import Flavor

TARGET_SECONDS = {10_000: 5.0}

# 20 flavors as a public cloud lists them: general purpose, compute and memory optimised
FLAVORS = [
    Flavor(name=name, flavorid=name, vcpus=vcpus, memory_mb=ram_mb, root_gb=disk_gb)
    for name, vcpus, ram_mb, disk_gb in (
        ("m1.tiny", 1, 512, 1),
        ("m1.small", 1, 2048, 20),
        ("m1.medium", 2, 4096, 40),
        ("m1.large", 4, 8192, 80),
        ("m1.xlarge", 8, 16384, 160),
        ("g1.small", 2, 8192, 40),
        ("g1.medium", 4, 16384, 80),
        ("g1.large", 8, 32768, 160),
        ("g1.xlarge", 16, 65536, 320),
        ("c1.small", 2, 2048, 20),
        ("c1.medium", 4, 4096, 40),
        ("c1.large", 8, 8192, 80),
        ("c1.xlarge", 16, 16384, 160),
        ("c1.2xlarge", 32, 32768, 320),
        ("r1.small", 2, 16384, 40),
        ("r1.medium", 4, 32768, 80),
        ("r1.large", 8, 65536, 160),
        ("r1.xlarge", 16, 131072, 320),
        ("x1.large", 32, 262144, 640),
        ("x1.xlarge", 64, 524288, 1280),
    )
]


def root_record(h: Any) -> Any:
    """The provider of a compute node's HostState, with what nova-compute reports on it."""
    from placement_client.view import Inventory, ProviderRecord

    ram_used = (h.total_usable_ram_mb or 0) - (h.free_ram_mb or 0)
    disk_total = h.total_usable_disk_gb or 0
    disk_used = disk_total - int((h.free_disk_mb or 0) / 1024)
    return ProviderRecord(
        uuid=h.uuid,
        generation=1,
        name=h.nodename,
        inventories={
            "VCPU": Inventory(h.vcpus_total, allocation_ratio=h.cpu_allocation_ratio),
            "MEMORY_MB": Inventory(h.total_usable_ram_mb, allocation_ratio=h.ram_allocation_ratio),
            "DISK_GB": Inventory(disk_total, allocation_ratio=h.disk_allocation_ratio),
        },
        used={
            "VCPU": h.vcpus_used or 0,
            "MEMORY_MB": max(0, ram_used),
            "DISK_GB": max(0, disk_used),
        },
        aggregates=frozenset(a.uuid for a in (h.aggregates or ())),
        traits=frozenset(
            ["OWNER_NOVA"]
            + (["COMPUTE_STATUS_DISABLED"] if (h.service or {}).get("disabled") else [])
        ),
    )


def view_of(driver: Any) -> Any:
    """A provider view holding one provider per compute node, as Placement would."""
    from placement_client.view import ProviderView, ViewRefresher

    hosts = driver.host_manager.get_host_states_by_uuids(None)
    view = ProviderView()
    view.replace_all([root_record(h) for h in hosts], view.now())
    view.mark_refreshed(view.now())
    return ViewRefresher(view, _FilledFeed())


class _FilledFeed:
    """The view is filled once by this section; nothing reads Placement."""

    name = "benchmark"

    def load(self, view: Any) -> None:
        pass

    def poll(self, view: Any) -> int:
        return 0

    def close(self) -> None:
        pass


def measure_size(
    size: int,
    repeats: int,
    workdir: str,
    *,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    from scheduler.capacity import CapacityCalculator
    from scheduler.conf import CONF
    from scheduler.drivers.filter_scheduler import FilterScheduler

    with warmed_driver("capacity", size, workdir, progress) as base:
        refresher = view_of(base)
        driver = FilterScheduler(
            placement=object(), host_manager=base.host_manager, view=refresher, conf=CONF
        )
        calculator = CapacityCalculator(driver)
        calculator.flavors(FLAVORS)  # the cold start: the host table's columns
        seconds = []
        figures = []
        for _ in range(max(1, repeats)):
            started = time.perf_counter()
            figures = calculator.flavors(FLAVORS)
            seconds.append(time.perf_counter() - started)
    row: dict[str, Any] = {
        "hosts": size,
        "flavors": len(FLAVORS),
        "seconds_p50": round(statistics.median(seconds), 3),
        "seconds_max": round(max(seconds), 3),
        "per_flavor_ms": round(statistics.median(seconds) / len(FLAVORS) * 1000, 1),
        "instances_m1_small": next(f.total for f in figures if f.flavor == "m1.small"),
        "sources": sorted({f.source for f in figures}),
    }
    target = TARGET_SECONDS.get(size)
    if target is not None:
        row["target_s"] = target
        row["pass"] = row["seconds_p50"] <= target
    return row


def run(
    sizes: list[int],
    repeats: int,
    out: dict[str, Any],
    *,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    return rows_per_size(
        "capacity",
        sizes,
        out,
        lambda size, workdir: measure_size(size, repeats, workdir, progress=progress),
    )
