"""DedicatedCloudFilter: dedicated hosts for a project, and that project kept on them.

An operator dedicates hosts to a project by putting them in an aggregate with the metadata
``dedicated_cloud=<project id>`` (a comma-separated list shares them between projects).
Those hosts then take only that project's instances. A project listed in
``[example_plugins] dedicated_projects`` must also land *only* on its dedicated hosts: a
filter sees one host at a time, so which projects own a dedicated cloud has to come from the
configuration, not from the hosts in the request.
"""

from __future__ import annotations

import logging
from typing import Any

from filters import BaseHostFilter, Reject
from novasched_example_plugins import conf as plugin_conf
from scheduler.conf import CONF

LOG = logging.getLogger(__name__)

METADATA_KEY = "dedicated_cloud"

# fixed reasons, so that NoValidHost can count them
OTHER_PROJECT = Reject("dedicated to another project")
NOT_DEDICATED = Reject("project must use its dedicated hosts")


def dedicated_owners(host_state: Any) -> frozenset[str]:
    """The projects a host is dedicated to (empty: a shared host)."""
    owners: set[str] = set()
    for agg in host_state.aggregates:
        value = agg.metadata.get(METADATA_KEY)
        if value:
            owners.update(p.strip() for p in value.split(",") if p.strip())
    return frozenset(owners)


class DedicatedCloudFilter(BaseHostFilter):
    """Passes dedicated hosts only for their project, and shared hosts only for projects
    without a dedicated cloud (``[example_plugins] dedicated_projects``)."""

    # a rebuild stays on its host: nothing to check
    RUN_ON_REBUILD = False
    # the project and the aggregates do not change between the instances of a request
    run_filter_once_per_request = True
    # check reads nothing of a host but its aggregates: the handler checks one host per set
    # of aggregates and gives the hosts that share it the same answer
    per_aggregates = True

    def prepare(self, spec_obj: Any) -> tuple[str | None, set[str]]:
        """The project and the option, read once per request."""
        return spec_obj.project_id, set(CONF[plugin_conf.GROUP].dedicated_projects)

    def check(self, host_state: Any, request: tuple[str | None, set[str]]) -> bool | Reject:
        project, dedicated = request
        return self._check(host_state, dedicated_owners(host_state), project, dedicated)

    @staticmethod
    def _check(
        host_state: Any, owners: frozenset[str], project: str | None, dedicated: set[str]
    ) -> bool | Reject:
        if owners:
            if project in owners:
                return True
            if LOG.isEnabledFor(logging.DEBUG):
                LOG.debug(
                    "%s is dedicated to %s, not to project %s",
                    host_state,
                    ", ".join(sorted(owners)),
                    project,
                )
            return OTHER_PROJECT
        if project in dedicated:
            if LOG.isEnabledFor(logging.DEBUG):
                LOG.debug(
                    "%s is shared; project %s must use its dedicated hosts", host_state, project
                )
            return NOT_DEDICATED
        return True
