"""AggregateCoreFilter: CoreFilter with the CPU allocation ratio taken from the host's
aggregates."""

from __future__ import annotations

from filters.core_filter import CoreFilter


class AggregateCoreFilter(CoreFilter):
    """Passes hosts whose free vCPUs hold the flavor, overcommitted by the smallest
    ``cpu_allocation_ratio`` in the metadata of the host's aggregates (the host's own ratio if
    no aggregate sets one, or if any aggregate's value is not a number); hosts that report no
    vCPUs pass."""

    aggregate_ratio = True
