"""The shape IoOpsFilter and NumInstancesFilter (and their Aggregate* variants) share: a
per-host counter must stay below a limit from ``[filter_scheduler]``, which the host's
aggregates may lower (metadata key = option name; nova's override rule)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from filters import BaseHostFilter, FilterOutcome, Reject
from scheduler.conf import CONF
from scheduler.hosts.aggregates import OverrideCache, aggregate_override

LOG = logging.getLogger(__name__)


class HostCounterLimitFilter(BaseHostFilter):
    """Passes hosts whose ``counter`` is below the ``[filter_scheduler] <option>`` limit."""

    RUN_ON_REBUILD = False
    # every instance placed adds to its host's counter: check again for each one
    run_filter_once_per_request = False

    counter: str = ""  # the HostState attribute
    option: str = ""  # the [filter_scheduler] option, and the aggregate metadata key
    reject: Reject = Reject("over the limit")
    debug_text = "%(host)s fails %(counter)s check: the maximum per host is %(max)s"
    # let the host's aggregates lower the limit (the Aggregate* filters)
    aggregate_limit = False

    def _configured(self) -> int:
        return getattr(CONF.filter_scheduler, self.option)

    def _limit(self, host_state: Any) -> int:
        if self.aggregate_limit:
            return aggregate_override(host_state, self.option, self._configured(), int)
        return self._configured()

    def _limit_getter(self) -> Callable[[Any], int]:
        """A ``host -> limit`` function for one batch (the config is read once)."""
        if self.aggregate_limit:
            return OverrideCache(self.option, self._configured(), int).get
        limit = self._configured()
        return lambda _host: limit

    def host_passes(self, host_state: Any, spec_obj: Any) -> bool | Reject:
        return self._check(host_state, self._limit(host_state))

    def filter_hosts(self, host_states: Iterable[Any], spec_obj: Any) -> FilterOutcome:
        limit_of = self._limit_getter()
        check = self._check
        return FilterOutcome.partition(host_states, lambda host: check(host, limit_of(host)))

    def _check(self, host_state: Any, limit: int) -> bool | Reject:
        if getattr(host_state, self.counter) < limit:
            return True
        if LOG.isEnabledFor(logging.DEBUG):
            LOG.debug(self.debug_text, {"host": host_state, "counter": self.counter, "max": limit})
        return self.reject
