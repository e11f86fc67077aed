"""AggregateCache: nova's host aggregates as the host manager holds them.

Every aggregate is read whole from the API database at start, on SIGHUP and when the tables
changed; nova-api's casts (update_aggregates, delete_aggregate) are applied as they come. With
``read_your_writes`` each request makes sure the aggregates held include every change committed
before it arrived (``catch_up``: one statement compares the tables' counts, highest ids and update
times with those of the last whole read) and the refresher's check also counts the hosts of
each aggregate, which requests leave out. Without it they are read again once
``aggregate_cache_ttl`` has passed.

After every change the HostStates held take their aggregates from the cache's lookup by host
name (``for_host``), handed to ``attach``: the host manager's cell reads, which give new
HostStates theirs from it too. Hosts in the same aggregates share one list object.

The helpers that read a host's aggregate metadata as nova's filters do are ``aggregates.py``'s.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from oslo_utils import timeutils

import db
from db import queries, read_ahead
from scheduler.hosts.aggregates import aggregates_matching
from scheduler.hosts.cells import FreshReads, InlineRead
from scheduler.objects import Aggregate

# the host manager's logger: what operators filter the aggregates' warnings by
LOG = logging.getLogger("scheduler.hosts.manager")

# the aggregates of a host in none (shared by all such hosts; never modified)
_NO_AGGREGATES: list[Aggregate] = []
# An update of an aggregate or its metadata within this long before the last whole read of
# the aggregates began may be hidden by DATETIME's whole seconds: such a read is repeated.
_AGGREGATES_SLACK = datetime.timedelta(seconds=2)


class AggregateCache:
    """The aggregates of nova's API database by id and by host name. Handed the pool a
    request's check runs on when it cannot be sent ahead, whether the refresher runs
    (``refreshing``: then it checks the aggregates and requests need not read them on a
    TTL), and ``attach``, called with the lookup by host name after every change."""

    def __init__(
        self,
        conf: Any,
        api_engine: Any,
        executor: concurrent.futures.Executor,
        refreshing: Callable[[], bool],
        attach: Callable[[Callable[[str], list[Aggregate]]], None],
    ) -> None:
        self.conf = conf
        self.api_engine = api_engine
        self._executor = executor
        self._refreshing = refreshing
        self._attach = attach
        self._aggregates: dict[int, Aggregate] = {}
        self._host_aggregates: dict[str, list[Aggregate]] = {}
        # time.monotonic() of the last whole read (aggregate_cache_ttl)
        self._loaded_at = 0.0
        self._lock = threading.Lock()
        # the checks requests share
        self._fresh = FreshReads()
        # the aggregate tables as of the last whole read of them, and when (our clock,
        # UTC) that read started; None before the first
        self._seen: tuple[db.AggregatesFingerprint, datetime.datetime] | None = None

    def refresh(self) -> None:
        """Re-read every aggregate from the API database and attach them to the HostStates."""
        started = timeutils.utcnow()
        # before the read: a change committed in between shows at the next check
        fingerprint = db.get_aggregates_fingerprint(self.api_engine)
        aggregates: dict[int, Aggregate] = {}
        for row in db.get_aggregates(self.api_engine):
            agg = Aggregate(
                id=row["id"],
                uuid=row["uuid"],
                name=row.get("name") or "",
                hosts=set(row.get("hosts") or ()),
                metadata=dict(row.get("metadata") or {}),
            )
            aggregates[agg.id] = agg
        with self._lock:
            # cached HostStates get the new aggregates too: a quiet compute node may not
            # write its row again for a long time
            self._set(aggregates)
            self._loaded_at = time.monotonic()
            self._seen = (fingerprint, started)

    def catch_up(self, not_before: float | None = None) -> None:
        """Make the aggregates held include every change committed to the API database
        before ``not_before`` (``time.monotonic()``; default now), a request's arrival, as
        nova's request filters see them by reading per request. One statement compares the
        aggregate tables' counts, highest ids and update times with those of the last whole
        read (``check``); they are read whole again only when they differ. Concurrent
        requests share a check started after they arrived. If the API database does not
        answer, the aggregates held are used (and a warning logged)."""
        if not self.conf.scheduler.read_your_writes:
            return
        if not_before is None:
            not_before = time.monotonic()
        try:
            self._fresh.run("aggregates", not_before, self.check)
        except Exception as exc:
            LOG.warning(
                "Could not check the aggregates in the API database: %s; using those held", exc
            )

    def prefetch(self, not_before: float) -> None:
        """With ``read_your_writes``, start a request's check now without waiting for it
        (``catch_up`` joins it: it started after the request arrived at ``not_before``)."""
        if self.conf.scheduler.read_your_writes:
            self._fresh.get("aggregates", not_before, self._start_check)

    def _start_check(self) -> concurrent.futures.Future:
        """A request's check of the aggregates, started: its statement sent now and
        received by the request (``db.read_ahead``), else run on the pool."""
        if not read_ahead.supported(self.api_engine):
            return self._executor.submit(self.check)
        ahead = read_ahead.ReadAhead(self.api_engine)
        ahead.send(queries.aggregates_fingerprint_statement(count_hosts=False))
        work = functools.partial(self.check, ahead=ahead)
        return InlineRead(work, ahead.wait, self._executor)

    def check(self, count_hosts: bool = False, ahead: read_ahead.ReadAhead | None = None) -> None:
        """Read the aggregates whole again if their tables changed since the last whole
        read. A request's check (``count_hosts`` False) leaves out the one costly part, a
        count of ``aggregate_hosts``, so a host taken out of an aggregate is not seen by it:
        nova-api's cast applies that at once (nova's own filters know aggregate hosts only
        from those casts too; its request filters read aggregates and metadata), and the
        refresher's check, which counts, within ``service_refresh_interval``."""
        fingerprint = db.get_aggregates_fingerprint(
            ahead or self.api_engine,  # type: ignore[arg-type]
            count_hosts=count_hosts,
        )
        seen = self._seen
        if seen is not None:
            held, read_at = seen
            if not count_hosts:
                held = held._replace(hosts=None)
            changed_at = fingerprint.changed_at
            # an update in the same (DATETIME) second as one the last read saw looks alike:
            # read again until that read began well after the last update
            if fingerprint == held and (
                changed_at is None or changed_at < read_at - _AGGREGATES_SLACK
            ):
                return
        self.refresh()

    def refresh_if_stale(self) -> None:
        """Without checks by the refresher and the requests, read the aggregates whole
        again once ``aggregate_cache_ttl`` has passed (-1: never); if that fails, keep
        serving with those held."""
        if self.conf.scheduler.read_your_writes and self._refreshing():
            return  # every request checks them, and the refresher counts their hosts
        ttl = self.conf.scheduler.aggregate_cache_ttl
        if ttl >= 0 and time.monotonic() - self._loaded_at >= ttl:
            try:
                self.refresh()
            except Exception as exc:  # keep serving with the aggregates we have
                LOG.warning("Could not refresh aggregates from the API database: %s", exc)

    @property
    def aggregates(self) -> list[Aggregate]:
        return list(self._aggregates.values())

    def for_host(self, host: str) -> list[Aggregate]:
        """The aggregates of ``host``, ordered by id (one list, never modified, shared by
        the hosts in the same aggregates)."""
        return self._host_aggregates.get(host, _NO_AGGREGATES)

    def by_metadata(
        self, key: str | None = None, value: str | None = None, key_prefix: str | None = None
    ) -> list[Aggregate]:
        """The aggregates with a metadata item matching every condition given
        (``aggregates_matching``), read again first if stale (``refresh_if_stale``)."""
        self.refresh_if_stale()
        return aggregates_matching(self._aggregates.values(), key, value, key_prefix)

    def update(self, aggregates: list[Aggregate]) -> None:
        """Apply aggregates sent by nova-api (update_aggregates RPC)."""
        with self._lock:
            current = dict(self._aggregates)
            for agg in aggregates:
                current[agg.id] = agg
            self._set(current)

    def delete(self, aggregate: Aggregate) -> None:
        """Forget an aggregate deleted in nova-api (delete_aggregate RPC)."""
        with self._lock:
            current = dict(self._aggregates)
            current.pop(aggregate.id, None)
            self._set(current)

    def _set(self, aggregates: dict[int, Aggregate]) -> None:
        """Hold ``aggregates`` (the lock held) and attach them to the HostStates."""
        by_host: dict[str, list[Aggregate]] = {}
        for agg in aggregates.values():
            for host in agg.hosts:
                by_host.setdefault(host, []).append(agg)
        # hosts in the same aggregates share one list object: weighers and filters compute
        # per distinct set of aggregates, and 100k hosts need only a few lists
        shared: dict[tuple[int, ...], list[Aggregate]] = {}
        for host, aggs in by_host.items():
            aggs.sort(key=lambda a: a.id)
            by_host[host] = shared.setdefault(tuple(a.id for a in aggs), aggs)
        self._aggregates = aggregates
        self._host_aggregates = by_host
        self._attach(self.for_host)
