"""AggregateTypeAffinityFilter: aggregates with ``instance_type`` metadata take only the
flavors they list."""

from __future__ import annotations

import logging
from typing import Any

from filters import BaseHostFilter, Reject
from scheduler.hosts.aggregates import aggregate_values_from_key

LOG = logging.getLogger(__name__)

KEY = "instance_type"

FLAVOR_NOT_ALLOWED = Reject("flavor not allowed by aggregate")


class AggregateTypeAffinityFilter(BaseHostFilter):
    """Passes hosts with no aggregate ``instance_type`` metadata, and hosts where one of
    their aggregates lists the flavor's name in its ``instance_type`` (a comma-separated
    list of flavor names)."""

    depends_on_consumption = False

    RUN_ON_REBUILD = False
    # the flavor and the aggregates do not change within a request
    run_filter_once_per_request = True

    # the answer depends only on the host's aggregates: checked once per set of aggregates
    per_aggregates = True

    def prepare(self, spec_obj: Any) -> str | None:
        return _flavor_name(spec_obj)

    def check(self, host_state: Any, flavor_name: str | None) -> bool | Reject:
        if not host_state.aggregates:
            return True
        values = aggregate_values_from_key(host_state, KEY)
        if not values:
            return True
        for value in values:
            if flavor_name in (part.strip() for part in value.split(",")):
                return True
        if LOG.isEnabledFor(logging.DEBUG):
            LOG.debug(
                "%(host)s fails instance_type affinity: flavor %(flavor)s not in %(values)s",
                {"host": host_state, "flavor": flavor_name, "values": sorted(values)},
            )
        return FLAVOR_NOT_ALLOWED


def _flavor_name(spec_obj: Any) -> str | None:
    return getattr(getattr(spec_obj, "flavor", None), "name", None)
