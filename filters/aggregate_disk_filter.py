"""AggregateDiskFilter: DiskFilter with the disk allocation ratio taken from the host's
aggregates."""

from __future__ import annotations

from typing import Any

from filters.disk_filter import DiskFilter
from scheduler.hosts.aggregates import aggregate_override


class AggregateDiskFilter(DiskFilter):
    """Passes hosts whose free disk holds the flavor, overcommitted by the smallest
    ``disk_allocation_ratio`` in the metadata of the host's aggregates (the host's own ratio if
    no aggregate sets one, or if any aggregate's value is not a number)."""

    RUN_ON_REBUILD = False
    run_filter_once_per_request = False

    def disk_allocation_ratio(self, host_state: Any) -> float:
        host_ratio = super().disk_allocation_ratio(host_state)
        return aggregate_override(host_state, "disk_allocation_ratio", host_ratio, float)
