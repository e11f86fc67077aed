"""ComputeFilter: only hosts whose nova-compute service is enabled and alive."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Iterable
from typing import Any

from filters import BaseHostFilter, FilterOutcome, Reject
from scheduler.conf import CONF

LOG = logging.getLogger(__name__)

DISABLED = Reject("service disabled")
FORCED_DOWN = Reject("service forced down")
DOWN = Reject("service down")


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


class ComputeFilter(BaseHostFilter):
    """Passes hosts whose compute service is enabled and has reported within
    ``service_down_time`` seconds (and is not forced down)."""

    RUN_ON_REBUILD = False
    # the service state does not change within a request
    run_filter_once_per_request = True

    def host_passes(self, host_state: Any, spec_obj: Any) -> bool | Reject:
        result = self._check(host_state, _utcnow(), CONF.service_down_time)
        return True if result is None else result

    def filter_hosts(self, host_states: Iterable[Any], spec_obj: Any) -> FilterOutcome:
        # one clock reading for the whole batch
        now = _utcnow()
        down_time = CONF.service_down_time
        check = self._check
        outcome = FilterOutcome()
        passed = outcome.passed
        rejected = outcome.rejected
        for host in host_states:
            result = check(host, now, down_time)
            if result is None:
                passed.append(host)
            else:
                rejected.append((host, result.reason))
        return outcome

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
        # nova warns for every host it has not heard from
        LOG.warning("%(host_state)s has not been heard from in a while", {"host_state": host_state})
        return FORCED_DOWN if service.get("forced_down") else DOWN
