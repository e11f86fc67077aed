"""DifferentHostFilter: keep away from the instances named in the ``different_host`` hint."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from filters import BaseHostFilter, FilterOutcome, Reject

LOG = logging.getLogger(__name__)

HOSTS_LISTED_INSTANCE = Reject("runs an instance named in different_host")


def hinted_uuids(spec_obj: Any, hint: str) -> set[str]:
    """The instance uuids of a ``same_host``/``different_host`` hint (a uuid or a list)."""
    value = spec_obj.get_scheduler_hint(hint)
    if not value:
        return set()
    if isinstance(value, str):
        return {value}
    return {str(uuid) for uuid in value}


class DifferentHostFilter(BaseHostFilter):
    """Passes hosts that run none of the instances listed in the ``different_host``
    scheduler hint (every host when there is no hint)."""

    RUN_ON_REBUILD = False
    # instances placed by this request are not among the hinted ones
    run_filter_once_per_request = True

    def host_passes(self, host_state: Any, spec_obj: Any) -> bool | Reject:
        uuids = hinted_uuids(spec_obj, "different_host")
        if not uuids or uuids.isdisjoint(host_state.instances or ()):
            return True
        return self._reject(host_state)

    def filter_hosts(self, host_states: Iterable[Any], spec_obj: Any) -> FilterOutcome:
        uuids = hinted_uuids(spec_obj, "different_host")
        if not uuids:
            return FilterOutcome(passed=list(host_states))
        outcome = FilterOutcome()
        for host in host_states:
            if uuids.isdisjoint(host.instances or ()):
                outcome.passed.append(host)
            else:
                outcome.rejected.append((host, self._reject(host).reason))
        return outcome

    @staticmethod
    def _reject(host_state: Any) -> Reject:
        if LOG.isEnabledFor(logging.DEBUG):
            LOG.debug("%s runs an instance named in the different_host hint", host_state)
        return HOSTS_LISTED_INSTANCE
