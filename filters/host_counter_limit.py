"""The shape IoOpsFilter and NumInstancesFilter (and their Aggregate* variants) share: a
per-host counter must stay below a limit from ``[filter_scheduler]``, which the host's
aggregates may lower (metadata key = option name; nova's override rule)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from filters import BaseHostFilter, Reject
from scheduler.conf import CONF
from scheduler.hosts.aggregates import OverrideCache

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

    def prepare(self, spec_obj: Any) -> Callable[[Any], int]:
        """A ``host -> limit`` function for this request (the config is read once; the
        aggregates' override once per set of aggregates)."""
        if self.aggregate_limit:
            return OverrideCache(self.option, self._configured(), int).get
        limit = self._configured()
        return lambda _host: limit

    def check(self, host_state: Any, limit_of: Callable[[Any], int]) -> bool | Reject:
        limit = limit_of(host_state)
        if getattr(host_state, self.counter) < limit:
            return True
        if LOG.isEnabledFor(logging.DEBUG):
            LOG.debug(self.debug_text, {"host": host_state, "counter": self.counter, "max": limit})
        return self.reject
