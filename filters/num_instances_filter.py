"""NumInstancesFilter: hosts with fewer instances than the configured maximum."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from filters import BaseHostFilter, FilterOutcome, Reject
from scheduler.conf import CONF

LOG = logging.getLogger(__name__)

TOO_MANY_INSTANCES = Reject("too many instances")


class NumInstancesFilter(BaseHostFilter):
    """Passes hosts that run fewer instances than ``[filter_scheduler] max_instances_per_host``."""

    RUN_ON_REBUILD = False
    # every instance placed adds to its host's count: check again for each one
    run_filter_once_per_request = False

    def _max_instances(self, host_state: Any) -> int:
        return CONF.filter_scheduler.max_instances_per_host

    def _limit_getter(self) -> Callable[[Any], int]:
        """A ``host -> limit`` function for one batch (the config is read once)."""
        limit = CONF.filter_scheduler.max_instances_per_host
        return lambda _host: limit

    def host_passes(self, host_state: Any, spec_obj: Any) -> bool | Reject:
        return self._check(host_state, self._max_instances(host_state))

    def filter_hosts(self, host_states: Iterable[Any], spec_obj: Any) -> FilterOutcome:
        limit_of = self._limit_getter()
        check = self._check
        outcome = FilterOutcome()
        passed = outcome.passed
        rejected = outcome.rejected
        for host in host_states:
            result = check(host, limit_of(host))
            if result is True:
                passed.append(host)
            else:
                rejected.append((host, result.reason))
        return outcome

    @staticmethod
    def _check(host_state: Any, limit: int) -> bool | Reject:
        if host_state.num_instances < limit:
            return True
        if LOG.isEnabledFor(logging.DEBUG):
            LOG.debug(
                "%(host)s fails num_instances check: Max instances per host is set to %(max)s",
                {"host": host_state, "max": limit},
            )
        return TOO_MANY_INSTANCES
