"""AggregateDiskFilter: DiskFilter with the disk allocation ratio taken from the host's
aggregates."""

from __future__ import annotations

from filters.disk_filter import DiskFilter


class AggregateDiskFilter(DiskFilter):
    """Passes hosts whose free disk holds the flavor, overcommitted by the smallest
    ``disk_allocation_ratio`` in the metadata of the host's aggregates (the host's own ratio if
    no aggregate sets one, or if any aggregate's value is not a number)."""

    aggregate_ratio = True
