"""Request prefilters: rewrite the Placement query before it is sent, as nova's do.

Each prefilter takes the request and a view of the aggregates and changes the request
(required/forbidden root traits, required aggregates). It returns True when it changed
something, and raises RequestFilterFailed when the request can never be placed.
They run in nova's order (``ALL_REQUEST_FILTERS``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

import os_traits

from scheduler.conf import CONF
from scheduler.exceptions import RequestFilterFailed
from scheduler.objects import Aggregate, Destination, RequestSpec

LOG = logging.getLogger(__name__)

TENANT_METADATA_KEY = "filter_tenant_id"


class AggregateView(Protocol):
    def aggregates_by_metadata(
        self, key: str | None = None, value: str | None = None, key_prefix: str | None = None
    ) -> list[Aggregate]: ...


def _destination(spec: RequestSpec) -> Destination:
    if spec.requested_destination is None:
        spec.requested_destination = Destination()
    return spec.requested_destination


def require_tenant_aggregate(spec: RequestSpec, aggregates: AggregateView, conf=CONF) -> bool:
    """Restrict a project to the aggregates whose ``filter_tenant_id*`` metadata names it."""
    if not conf.scheduler.limit_tenants_to_placement_aggregate:
        return False
    project = spec.project_id
    # one metadata item must both be a tenant key and name the project
    matching = (
        aggregates.aggregates_by_metadata(key_prefix=TENANT_METADATA_KEY, value=project)
        if project
        else []  # value=None would match every tenant's aggregates
    )
    if matching:
        _destination(spec).require_aggregates([agg.uuid for agg in matching])
        LOG.debug(
            "require_tenant_aggregate: project %s limited to %d aggregate(s)",
            project,
            len(matching),
        )
        return True
    if conf.scheduler.placement_aggregate_required_for_tenants:
        LOG.info("Tenant %s has no available aggregates", project)
        raise RequestFilterFailed(
            f"No hosts available for tenant {project}: it is in no aggregate with "
            f"{TENANT_METADATA_KEY}* metadata and placement_aggregate_required_for_tenants is set"
        )
    return False


def map_az_to_placement_aggregate(spec: RequestSpec, aggregates: AggregateView, conf=CONF) -> bool:
    """Send the requested availability zone to Placement as its aggregates."""
    az = spec.availability_zone
    if not az:
        return False
    matching = aggregates.aggregates_by_metadata(key="availability_zone", value=az)
    if not matching:
        # nova adds nothing then: the default AZ is made of hosts in no AZ aggregate
        return False
    _destination(spec).require_aggregates([agg.uuid for agg in matching])
    LOG.debug("map_az_to_placement_aggregate: %s -> %d aggregate(s)", az, len(matching))
    return True


def compute_status_filter(spec: RequestSpec, aggregates: AggregateView, conf=CONF) -> bool:
    """Leave out compute nodes whose service is disabled (root trait COMPUTE_STATUS_DISABLED)."""
    spec.request_level_params.root_forbidden.add(os_traits.COMPUTE_STATUS_DISABLED)
    return True


RequestFilter = Callable[[RequestSpec, AggregateView], bool]

ALL_REQUEST_FILTERS: list[tuple[str, Callable[..., bool]]] = [
    ("require_tenant_aggregate", require_tenant_aggregate),
    ("map_az_to_placement_aggregate", map_az_to_placement_aggregate),
    ("compute_status_filter", compute_status_filter),
]


def process_reqspec(spec: RequestSpec, aggregates: AggregateView, conf=CONF) -> list[str]:
    """Run every prefilter in order; return the names of those that changed the request."""
    applied = []
    for name, fn in ALL_REQUEST_FILTERS:
        start = time.perf_counter()
        if fn(spec, aggregates, conf):
            applied.append(name)
            if LOG.isEnabledFor(logging.DEBUG):
                LOG.debug(
                    "Request filter %r took %.1f ms", name, (time.perf_counter() - start) * 1000
                )
    return applied


# Toggles nova has that novasched accepts but does not act on (yet, or ever: the routed
# networks prefilter needs Neutron, which the scheduler does not call).
_NOT_IMPLEMENTED_TOGGLES = {
    "query_placement_for_image_type_support": "require_image_type_support",
    "enable_isolated_aggregate_filtering": "isolate_aggregates",
    "image_metadata_prefilter": "transform_image_metadata",
    "query_placement_for_routed_network_aggregates": "routed_networks_filter (needs Neutron)",
}


def warn_unimplemented_toggles(conf=CONF) -> list[str]:
    """Log one warning per enabled toggle of a prefilter novasched does not run."""
    names = []
    for option, prefilter in _NOT_IMPLEMENTED_TOGGLES.items():
        if getattr(conf.scheduler, option):
            names.append(option)
            LOG.warning(
                "[scheduler] %s is set but the %s prefilter is not available in novasched; "
                "requests are scheduled without it",
                option,
                prefilter,
            )
    if conf.scheduler.discover_hosts_in_cells_interval != -1:
        names.append("discover_hosts_in_cells_interval")
        LOG.warning(
            "[scheduler] discover_hosts_in_cells_interval is ignored: novasched reads host "
            "mappings but does not create them; run 'nova-manage cell_v2 discover_hosts'"
        )
    return names
