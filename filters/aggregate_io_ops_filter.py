"""AggregateIoOpsFilter: IoOpsFilter with a per-aggregate ``max_io_ops_per_host``."""

from __future__ import annotations

from filters.io_ops_filter import IoOpsFilter


class AggregateIoOpsFilter(IoOpsFilter):
    """Passes hosts running fewer I/O-heavy operations than their aggregates'
    ``max_io_ops_per_host`` metadata allows (the smallest value when several aggregates set
    it; ``[filter_scheduler] max_io_ops_per_host`` when none does or a value is not an integer)."""

    aggregate_limit = True
