"""SameHostFilter: go next to the instances named in the ``same_host`` hint."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from filters import BaseHostFilter, FilterOutcome, Reject
from filters.different_host_filter import hinted_uuids

LOG = logging.getLogger(__name__)

NO_LISTED_INSTANCE = Reject("runs no instance named in same_host")


class SameHostFilter(BaseHostFilter):
    """Passes hosts that run at least one of the instances listed in the ``same_host``
    scheduler hint (every host when there is no hint)."""

    RUN_ON_REBUILD = False
    # instances placed by this request are not among the hinted ones
    run_filter_once_per_request = True

    def host_passes(self, host_state: Any, spec_obj: Any) -> bool | Reject:
        uuids = hinted_uuids(spec_obj, "same_host")
        if not uuids or not uuids.isdisjoint(host_state.instances or ()):
            return True
        return self._reject(host_state)

    def filter_hosts(self, host_states: Iterable[Any], spec_obj: Any) -> FilterOutcome:
        uuids = hinted_uuids(spec_obj, "same_host")
        if not uuids:
            return FilterOutcome(passed=list(host_states))
        outcome = FilterOutcome()
        for host in host_states:
            if not uuids.isdisjoint(host.instances or ()):
                outcome.passed.append(host)
            else:
                outcome.rejected.append((host, self._reject(host).reason))
        return outcome

    @staticmethod
    def _reject(host_state: Any) -> Reject:
        if LOG.isEnabledFor(logging.DEBUG):
            LOG.debug("%s runs no instance named in the same_host hint", host_state)
        return NO_LISTED_INSTANCE
