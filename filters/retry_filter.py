"""RetryFilter: skip the compute nodes a rescheduled request has already failed on.

A filter of earlier nova releases: nova's conductor passed the tried (host, node) pairs in
``RequestSpec.retry`` when it rescheduled a failed build. Since alternates replaced
rescheduling through the scheduler, nova no longer needs it, but operators still list it.
"""

from __future__ import annotations

import logging
from typing import Any

from filters import PASS_ALL, BaseHostFilter, Reject

LOG = logging.getLogger(__name__)

ALREADY_TRIED = Reject("already tried by this request")


def tried_nodes(spec_obj: Any) -> set[tuple[str, str]]:
    """The (host, nodename) pairs of ``spec_obj.retry`` (empty without a retry)."""
    retry = spec_obj.retry
    if not retry or not retry.hosts:
        return set()
    return {(host, node) for host, node in retry.hosts}


class RetryFilter(BaseHostFilter):
    """Passes compute nodes this request has not already been tried on (a reschedule
    never goes back to a node that failed it)."""

    depends_on_consumption = False

    # the tried list says nothing about where a rebuild may land
    RUN_ON_REBUILD = False
    run_filter_once_per_request = False

    def prepare(self, spec_obj: Any) -> Any:
        # the tried set once for the whole request
        return tried_nodes(spec_obj) or PASS_ALL

    def check(self, host_state: Any, tried: set[tuple[str, str]]) -> bool | Reject:
        if (host_state.host, host_state.nodename) in tried:
            # at most max_attempts hosts per request: cheap enough to log at info, as nova did
            LOG.info(
                "Host %s fails. Previously tried hosts: %s",
                [host_state.host, host_state.nodename],
                sorted(tried),
            )
            return ALREADY_TRIED
        return True
