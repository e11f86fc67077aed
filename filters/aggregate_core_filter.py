"""AggregateCoreFilter: CoreFilter with the CPU allocation ratio taken from the host's
aggregates."""

from __future__ import annotations

from typing import Any

from filters.core_filter import CoreFilter
from scheduler.hosts.aggregates import aggregate_override


class AggregateCoreFilter(CoreFilter):
    """Passes hosts whose free vCPUs hold the flavor, overcommitted by the smallest
    ``cpu_allocation_ratio`` in the metadata of the host's aggregates (the host's own ratio if
    no aggregate sets one, or if any aggregate's value is not a number); hosts that report no
    vCPUs pass."""

    RUN_ON_REBUILD = False
    run_filter_once_per_request = False

    def cpu_allocation_ratio(self, host_state: Any) -> float:
        host_ratio = super().cpu_allocation_ratio(host_state)
        return aggregate_override(host_state, "cpu_allocation_ratio", host_ratio, float)
