"""IoOpsFilter: hosts with fewer concurrent I/O-heavy operations than the configured maximum."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from filters import BaseHostFilter, FilterOutcome, Reject
from scheduler.conf import CONF

LOG = logging.getLogger(__name__)

TOO_MANY_IO_OPS = Reject("too many I/O operations")


class IoOpsFilter(BaseHostFilter):
    """Passes hosts running fewer I/O-heavy operations (builds, resizes, snapshots ...) than
    ``[filter_scheduler] max_io_ops_per_host``."""

    RUN_ON_REBUILD = False
    # every instance placed adds an I/O operation to its host: check again for each one
    run_filter_once_per_request = False

    def _max_io_ops(self, host_state: Any) -> int:
        return CONF.filter_scheduler.max_io_ops_per_host

    def _limit_getter(self) -> Callable[[Any], int]:
        """A ``host -> limit`` function for one batch (the config is read once)."""
        limit = CONF.filter_scheduler.max_io_ops_per_host
        return lambda _host: limit

    def host_passes(self, host_state: Any, spec_obj: Any) -> bool | Reject:
        return self._check(host_state, self._max_io_ops(host_state))

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
        if host_state.num_io_ops < limit:
            return True
        if LOG.isEnabledFor(logging.DEBUG):
            LOG.debug(
                "%(host)s fails I/O ops check: Max IOs per host is set to %(max)s",
                {"host": host_state, "max": limit},
            )
        return TOO_MANY_IO_OPS
