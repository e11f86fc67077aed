"""ComputeFilter: only hosts whose nova-compute service is enabled and alive."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Iterable
from typing import Any

import numpy as np

from filters import BaseHostFilter, FilterOutcome, Reject, RowOutcome
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


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(tzinfo=None)


def _naive_utc(value: Any) -> datetime.datetime | None:
    """A service timestamp as a naive UTC datetime (nova stores naive UTC)."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    if not isinstance(value, datetime.datetime):
        return None
    if value.tzinfo is not None:
        value = value.astimezone(datetime.UTC).replace(tzinfo=None)
    return value


def service_is_up(service: dict[str, Any], now: datetime.datetime, down_time: float) -> bool:
    """nova's db servicegroup driver: not forced down, and the last heartbeat
    (``last_seen_up``, else ``created_at``) is at most ``down_time`` seconds away from now."""
    if service.get("forced_down"):
        return False
    last = _naive_utc(service.get("last_seen_up") or service.get("created_at"))
    if last is None:
        return False
    return abs((now - last).total_seconds()) <= down_time


def _heartbeat_window(
    now: datetime.datetime, down_time: Any
) -> tuple[datetime.datetime, datetime.datetime] | None:
    """(earliest, latest) naive heartbeat for which ``service_is_up`` holds, or None when the
    window cannot be written as datetimes (a fractional or huge ``down_time``).

    For an integer number of seconds D and a naive datetime ``last``,
    ``abs((now - last).total_seconds()) <= D`` is ``now - D <= last <= now + D``: the
    difference is a whole number of microseconds, and D + 1 us is still a different float
    than D for every D below 2**32."""
    if isinstance(down_time, bool) or not isinstance(down_time, int | float):
        return None
    if isinstance(down_time, float) and not down_time.is_integer():
        return None
    if not 0 <= down_time < 2**32:
        return None
    try:
        delta = datetime.timedelta(seconds=int(down_time))
        return now - delta, now + delta
    except OverflowError:
        return None


def _warn_down(count: int, named: list[Any]) -> None:
    # nova warns once per host; one line per request says the same without flooding the log
    # when a rack goes away (every host is named at debug level)
    LOG.warning(
        "%d host(s) have not been heard from in a while: %s%s",
        count,
        ", ".join(str(h.host) for h in named),
        " ..." if count > _WARN_HOSTS else "",
    )


class ComputeFilter(BaseHostFilter):
    """Passes hosts whose compute service is enabled and has reported within
    ``service_down_time`` seconds (and is not forced down)."""

    RUN_ON_REBUILD = False
    # the service state does not change within a request
    run_filter_once_per_request = True

    def now(self) -> datetime.datetime:
        """The current time, naive UTC (an instance may be given another clock in tests)."""
        return _utcnow()

    def host_passes(self, host_state: Any, spec_obj: Any) -> bool | Reject:
        result = self._check(host_state, self.now(), CONF.service_down_time)
        if result is None:
            return True
        if result is not DISABLED:
            # nova warns for every host it has not heard from
            LOG.warning(
                "%(host_state)s has not been heard from in a while", {"host_state": host_state}
            )
        return result

    def filter_hosts(self, host_states: Iterable[Any], spec_obj: Any) -> FilterOutcome:
        # one clock reading for the whole batch
        now = self.now()
        down_time = CONF.service_down_time
        window = _heartbeat_window(now, down_time)
        check = self._check
        debug = LOG.isEnabledFor(logging.DEBUG)
        outcome = FilterOutcome()
        passed = outcome.passed
        append = passed.append
        rejected = outcome.rejected
        if window is None or debug:
            for host in host_states:
                result = check(host, now, down_time)
                if result is None:
                    append(host)
                else:
                    rejected.append((host, result.reason))
        else:
            # The hot path: the common service (enabled, not forced down, a naive datetime
            # heartbeat) is decided with two comparisons; anything else goes to _check. A
            # heartbeat that is not a naive datetime (a string, an aware datetime, None)
            # cannot be compared with naive datetimes: TypeError, so _check decides.
            earliest, latest = window
            for host in host_states:
                service = host.service
                if service and not service.get("disabled") and not service.get("forced_down"):
                    last = service.get("last_seen_up") or service.get("created_at")
                    try:
                        if earliest <= last <= latest:
                            append(host)
                            continue
                    except TypeError:
                        pass
                result = check(host, now, down_time)
                if result is None:
                    append(host)
                else:
                    rejected.append((host, result.reason))
        down = [host for host, reason in rejected if reason != DISABLED.reason]
        if down:
            _warn_down(len(down), down[:_WARN_HOSTS])
        return outcome

    def filter_rows(self, table: Any, rows: Any, spec_obj: Any) -> RowOutcome | None:
        """``filter_hosts`` over the table's service columns: the heartbeat window as two
        integer comparisons per host (microseconds, exact). None (ask the hosts) with debug
        logging on, a window that is not whole seconds, or a heartbeat that is not a naive
        datetime."""
        if LOG.isEnabledFor(logging.DEBUG):
            return None
        now = self.now()
        window = _heartbeat_window(now, CONF.service_down_time)
        if window is None:
            return None
        state, last = table.services(rows)
        if (state == host_table.SERVICE_ODD).any():
            return None
        earliest, latest = (host_table.microseconds(t) for t in window)
        up = (state == host_table.SERVICE_UP_IF_RECENT) & (last >= earliest) & (last <= latest)
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
    def _check(host_state: Any, now: datetime.datetime, down_time: float) -> Reject | None:
        service = host_state.service or {}
        if service.get("disabled"):
            if LOG.isEnabledFor(logging.DEBUG):
                LOG.debug(
                    "%(host_state)s is disabled, reason: %(reason)s",
                    {"host_state": host_state, "reason": service.get("disabled_reason")},
                )
            return DISABLED
        if service_is_up(service, now, down_time):
            return None
        if LOG.isEnabledFor(logging.DEBUG):
            LOG.debug(
                "%(host_state)s has not been heard from in a while", {"host_state": host_state}
            )
        return FORCED_DOWN if service.get("forced_down") else DOWN
