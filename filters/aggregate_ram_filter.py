"""AggregateRamFilter: RamFilter with the RAM allocation ratio taken from the host's aggregates."""

from __future__ import annotations

from filters.ram_filter import RamFilter


class AggregateRamFilter(RamFilter):
    """Passes hosts whose free RAM holds the flavor, overcommitted by the smallest
    ``ram_allocation_ratio`` in the metadata of the host's aggregates (the host's own ratio if
    no aggregate sets one, or if any aggregate's value is not a number)."""

    aggregate_ratio = True
