"""AggregateMultiTenancyIsolation: aggregates with ``filter_tenant_id*`` metadata take only
the projects they list."""

from __future__ import annotations

import logging
from typing import Any

from filters import BaseHostFilter, Reject

LOG = logging.getLogger(__name__)

KEY_PREFIX = "filter_tenant_id"

PROJECT_NOT_ALLOWED = Reject("project not allowed by aggregate")


def allowed_projects(host_state: Any) -> set[str]:
    """The projects named by the ``filter_tenant_id*`` keys of the host's aggregates
    (comma-separated values, all keys of all aggregates together)."""
    projects: set[str] = set()
    for agg in host_state.aggregates or ():
        for key, value in agg.metadata.items():
            if key.startswith(KEY_PREFIX):
                projects.update(part.strip() for part in str(value).split(","))
    return projects


class AggregateMultiTenancyIsolation(BaseHostFilter):
    """Passes hosts whose aggregates name the request's project in a ``filter_tenant_id``
    metadata key (``filter_tenant_id``, ``filter_tenant_id2`` ...), and hosts whose
    aggregates have no such key. Other projects' hosts are still open to this project."""

    depends_on_consumption = False

    RUN_ON_REBUILD = False
    # the project and the aggregates do not change within a request
    run_filter_once_per_request = True
    # the answer depends only on the host's aggregates: checked once per set of aggregates
    per_aggregates = True

    def prepare(self, spec_obj: Any) -> str | None:
        """The request's project."""
        return getattr(spec_obj, "project_id", None)

    def check(self, host_state: Any, project_id: str | None) -> bool | Reject:
        if not host_state.aggregates:
            return True
        projects = allowed_projects(host_state)
        if not projects or project_id in projects:
            return True
        if LOG.isEnabledFor(logging.DEBUG):
            LOG.debug(
                "%(host)s fails project id on aggregate: %(project)s not in %(allowed)s",
                {"host": host_state, "project": project_id, "allowed": sorted(projects)},
            )
        return PROJECT_NOT_ALLOWED
