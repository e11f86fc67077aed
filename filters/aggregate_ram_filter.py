"""AggregateRamFilter: RamFilter with the RAM allocation ratio taken from the host's aggregates."""

from __future__ import annotations

from typing import Any

from filters.ram_filter import RamFilter
from scheduler.hosts.aggregates import aggregate_override


class AggregateRamFilter(RamFilter):
    """Passes hosts whose free RAM holds the flavor, overcommitted by the smallest
    ``ram_allocation_ratio`` in the metadata of the host's aggregates (the host's own ratio if
    no aggregate sets one, or if any aggregate's value is not a number)."""

    RUN_ON_REBUILD = False
    run_filter_once_per_request = False

    def ram_allocation_ratio(self, host_state: Any) -> float:
        host_ratio = super().ram_allocation_ratio(host_state)
        return aggregate_override(host_state, "ram_allocation_ratio", host_ratio, float)
