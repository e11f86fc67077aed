"""AggregateIoOpsFilter: IoOpsFilter with a per-aggregate ``max_io_ops_per_host``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from filters.aggregate_utils import OverrideCache, aggregate_override
from filters.io_ops_filter import IoOpsFilter
from scheduler.conf import CONF

KEY = "max_io_ops_per_host"


class AggregateIoOpsFilter(IoOpsFilter):
    """Passes hosts running fewer I/O-heavy operations than their aggregates'
    ``max_io_ops_per_host`` metadata allows (the smallest value when several aggregates set
    it; ``[filter_scheduler] max_io_ops_per_host`` when none does or a value is not an integer)."""

    RUN_ON_REBUILD = False
    run_filter_once_per_request = False

    def _max_io_ops(self, host_state: Any) -> int:
        return aggregate_override(host_state, KEY, CONF.filter_scheduler.max_io_ops_per_host, int)

    def _limit_getter(self) -> Callable[[Any], int]:
        return OverrideCache(KEY, CONF.filter_scheduler.max_io_ops_per_host, int).get
