"""AggregateNumInstancesFilter: NumInstancesFilter with a per-aggregate
``max_instances_per_host``."""

from __future__ import annotations

from filters.num_instances_filter import NumInstancesFilter


class AggregateNumInstancesFilter(NumInstancesFilter):
    """Passes hosts that run fewer instances than their aggregates' ``max_instances_per_host``
    metadata allows (the smallest value when several aggregates set it;
    ``[filter_scheduler] max_instances_per_host`` when none does or a value is not an integer)."""

    aggregate_limit = True
