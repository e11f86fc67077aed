"""ComputeFilter: only hosts whose nova-compute service is enabled and alive.

The rule ("is the service up") is ``scheduler.hosts.table``'s: ``read_service``,
``heartbeat_window`` and ``services_up``, which the per-host and the column paths share."""

from __future__ import annotations

import datetime
import logging
from typing import Any

import numpy as np
from oslo_utils import timeutils

from filters import BaseHostFilter, Reject, RowOutcome, column_path
from scheduler.conf import CONF
from scheduler.hosts import table as host_table

LOG = logging.getLogger(__name__)

DISABLED = Reject("service disabled")
FORCED_DOWN = Reject("service forced down")
DOWN = Reject("service down")

# hosts named in the one warning per request about services that are down
_WARN_HOSTS = 10
# RowOutcome reasons, by code
_ROW_REASONS = [DISABLED.reason, FORCED_DOWN.reason, DOWN.reason]


def _warn_down(count: int, named: list[Any]) -> None:
    # nova warns once per host; one line per request says the same without flooding the log
    # when a rack goes away (every host is named at debug level)
    LOG.warning(
        "%d host(s) have not been heard from in a while: %s%s",
        count,
        ", ".join(str(h.host) for h in named),
        " ..." if count > _WARN_HOSTS else "",
    )


@column_path
class ComputeFilter(BaseHostFilter):
    """Passes hosts whose compute service is enabled and has reported within
    ``service_down_time`` seconds (and is not forced down)."""

    depends_on_consumption = False

    RUN_ON_REBUILD = False
    # the service state does not change within a request
    run_filter_once_per_request = True

    def now(self) -> datetime.datetime:
        """The current time, naive UTC (an instance may be given another clock in tests)."""
        return timeutils.utcnow()

    def _window(self) -> tuple[datetime.datetime, ...]:
        return host_table.heartbeat_bounds(self.now(), CONF.service_down_time)

    def prepare(self, spec_obj: Any) -> tuple[datetime.datetime, ...]:
        """The heartbeat window: one clock reading for every host of the request."""
        return self._window()

    def check(self, host_state: Any, window: tuple[datetime.datetime, ...]) -> bool | Reject:
        state, last = host_table.read_service(host_state.service, True)
        if host_table.services_up(state, last, window):
            return True
        result = self._reason(host_state, state)
        if result is not DISABLED:
            # nova warns for every host it has not heard from (the column path says it in
            # one line per request)
            LOG.warning(
                "%(host_state)s has not been heard from in a while", {"host_state": host_state}
            )
        return result

    def filter_rows(self, table: Any, rows: Any, spec_obj: Any) -> RowOutcome | None:
        """``check`` over the table's service columns (the same rule, on arrays: two integer
        comparisons per host), with one warning per request naming the hosts that are down.
        None (ask the hosts) with debug logging on, or when a heartbeat is not a naive
        datetime."""
        if LOG.isEnabledFor(logging.DEBUG):
            return None
        window = host_table.heartbeat_window(self.now(), CONF.service_down_time)
        state, last = table.services(rows)
        if (state == host_table.SERVICE_ODD).any():
            return None
        up = host_table.services_up(state, last, window)
        codes = np.full(len(rows), 2, dtype=np.int8)  # down
        disabled = state == host_table.SERVICE_DISABLED
        codes[disabled] = 0
        codes[state == host_table.SERVICE_FORCED_DOWN] = 1
        down = ~(up | disabled)
        count = int(np.count_nonzero(down))
        if count:
            _warn_down(count, table.hosts_at(rows[down][:_WARN_HOSTS]))
        return RowOutcome(up, _ROW_REASONS, codes)

    @staticmethod
    def _reason(host_state: Any, state: int) -> Reject:
        """Why a host whose service is not up (``read_service`` said ``state``) fails."""
        if state == host_table.SERVICE_DISABLED:
            if LOG.isEnabledFor(logging.DEBUG):
                LOG.debug(
                    "%(host_state)s is disabled, reason: %(reason)s",
                    {
                        "host_state": host_state,
                        "reason": host_state.service.get("disabled_reason"),
                    },
                )
            return DISABLED
        if state == host_table.SERVICE_ODD:
            raise TypeError(
                f"the service of {host_state.host} is not a mapping: "
                f"{type(host_state.service).__name__}"
            )
        if LOG.isEnabledFor(logging.DEBUG):
            LOG.debug(
                "%(host_state)s has not been heard from in a while", {"host_state": host_state}
            )
        return FORCED_DOWN if state == host_table.SERVICE_FORCED_DOWN else DOWN
