"""AvailabilityZoneFilter: only hosts in the availability zone the request asks for.

A filter of earlier nova releases; nova now maps the AZ to a Placement aggregate
(``map_az_to_placement_aggregate``), so this filter matters where Placement is not consulted.
A host's zones are the ``availability_zone`` values of its aggregates (comma-separated lists
are split, as nova's aggregate metadata helper does); a host in no such aggregate is in
``[DEFAULT] default_availability_zone``.
"""

from __future__ import annotations

import logging
from typing import Any

from filters import PASS_ALL, BaseHostFilter, Reject
from scheduler.conf import CONF

LOG = logging.getLogger(__name__)

OTHER_ZONE = Reject("not in the requested availability zone")

AZ_KEY = "availability_zone"


def host_zones(host_state: Any) -> set[str] | None:
    """The zones the host's aggregates put it in; None if no aggregate names a zone."""
    zones: set[str] | None = None
    for agg in host_state.aggregates or ():
        value = agg.metadata.get(AZ_KEY)
        if value is None:
            continue
        if zones is None:
            zones = set()
        zones.update(part.strip() for part in str(value).split(","))
    return zones


class AvailabilityZoneFilter(BaseHostFilter):
    """Passes hosts in the requested availability zone (any host when the request names none;
    hosts in no zone aggregate count as ``default_availability_zone``)."""

    depends_on_consumption = False

    RUN_ON_REBUILD = False
    # availability zones do not change within a request
    run_filter_once_per_request = True
    # a host's zones are those of its aggregates: checked once per set of aggregates
    per_aggregates = True

    def prepare(self, spec_obj: Any) -> Any:
        """The requested zone; PASS_ALL when the request names none."""
        return spec_obj.availability_zone or PASS_ALL

    def check(self, host_state: Any, requested: str) -> bool | Reject:
        zones = host_zones(host_state)
        if zones is None:
            zones = {CONF.default_availability_zone}
        if requested in zones:
            return True

        if LOG.isEnabledFor(logging.DEBUG):
            LOG.debug(
                "Availability Zone '%s' requested. %s has AZs: %s",
                requested,
                host_state,
                sorted(zones),
            )
        return OTHER_ZONE
