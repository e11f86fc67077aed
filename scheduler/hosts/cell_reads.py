"""CellReads: the host manager's cells and what it holds of each, kept current by reading
the cell databases.

HostStates live in a cache keyed by compute-node uuid, one ``CellView`` per cell. Each
request refreshes, per cell, only the rows changed since the last read, reading the cells in
parallel with a per-cell timeout: a cell that fails or does not answer in time is skipped and
the request goes on with the others (``CellHealth`` logs it once when it fails, with
reminders, and once when it recovers).

Two kinds of read keep a cell current. Every request reads the compute nodes whose
``updated_at`` moved (usage reports: an index range scan). At most every
``window_read_interval`` seconds (and whenever every host is asked for) a request reads the
whole window instead: services (heartbeats, enable/disable, forced down), compute nodes created
or soft-deleted. Neither table has an index on those columns, and nova-compute heartbeats
every 10 s, so reading them on every request would re-read most service rows of the cell per
request. nova's own tolerance for a heartbeat is ``service_down_time`` (60 s).

In the service, both of those happen off the request path: ``warm_up`` reads every cell whole
before the scheduler takes its first request, and the refresher thread reads each cell's
change window every ``service_refresh_interval`` seconds (``read_in_background``; whole
every five minutes). A request then reads only compute-node reports, and not even those while
the refresher is reading the cell: it takes the cell as it is (at most one read old) instead
of waiting.

A HostState created or re-read takes its aggregates from the lookup the aggregate cache
attaches (``attach_aggregates``); ``cells.py`` holds the machinery of one read (the pacer, the
reads in flight, ``CellView``).
"""

from __future__ import annotations

import concurrent.futures
import datetime
import functools
import gc
import logging
import operator
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from oslo_utils import timeutils

import db
from db import queries, read_ahead
from scheduler.hosts.cells import (
    Cell,
    CellRead,
    CellReadFailed,
    CellView,
    FreshReads,
    InlineRead,
    Pacer,
    SentRead,
    for_request,
    no_pause,
)
from scheduler.hosts.state import HostState
from scheduler.hosts.table import HostTable
from scheduler.objects import Aggregate
from scheduler.telemetry import metrics

# the host manager's logger: what operators filter cell failures and the warm-up by
LOG = logging.getLogger("scheduler.hosts.manager")

# A row is written with its writer's clock a little before it commits, MySQL DATETIME keeps
# whole seconds, and clocks drift: each read goes back this far behind the start of the
# previous one so that no row committed in between is lost.
WATERMARK_SLACK = datetime.timedelta(seconds=5)
# A request's read of compute-node reports, while the refresher thread reads the whole slack
# every service_refresh_interval: a report committed later than this is applied by the
# refresher's next read instead.
_REPORT_SLACK = datetime.timedelta(seconds=1)
# Service rows need less: nova-compute rewrites its whole service row (state and heartbeat)
# every report_interval (10 s), so a row a late commit hid is read again with the next
# heartbeat. The slack covers DATETIME's whole seconds. At 100k hosts every second of slack
# is 10,000 heartbeat rows re-read per window read.
_SERVICE_SLACK = datetime.timedelta(seconds=2)
# A service whose last heartbeat is this many seconds or more away from going stale
# (service_down_time) is up for sure: its heartbeat held may be a refresher read old. Those
# closer to it, or past it, are read by every request (CellReads._heartbeat_band).
_HEARTBEAT_MARGIN = 10.0
# Every so often a cell is read whole again. That bounds how long a change can be missed when
# a writer's clock lags ours by more than the slack, and drops soft-deleted services, which the
# incremental service query cannot see.
_FULL_RESYNC_SECONDS = 300.0
# How often (at most) a request reads the whole change window of a cell (services, compute
# nodes created or deleted); CellReads.window_read_interval, from
# ``[scheduler] service_refresh_interval`` once that option is registered.
_WINDOW_READ_SECONDS = 1.0

_SVC_BOOLS = ("disabled", "forced_down", "deleted")
_HEARTBEAT_COLUMNS = ("last_seen_up", "updated_at", "report_count")
# (name, is_bool) of the service columns a heartbeat does not change
_SVC_STABLE = tuple(
    (name, name in _SVC_BOOLS)
    for name in queries.ServiceRow._fields
    if name not in _HEARTBEAT_COLUMNS
)


# the aggregates of a host in none (shared by all such hosts; never modified)
_NO_AGGREGATES: list[Aggregate] = []


def _no_aggregates(host: str) -> list[Aggregate]:
    """The aggregates of every host until the aggregate cache attaches its lookup."""
    return _NO_AGGREGATES


class CellReads:
    """The enabled cells' HostStates, read from the cell databases: whole at start-up, then
    what changed, per request (joining reads started after it arrived) and on the refresher
    thread. Handed the table the HostStates are kept in, the pool the reads run on, and
    whether the refresher runs (``refreshing``)."""

    def __init__(
        self,
        conf: Any,
        table: HostTable,
        executor: concurrent.futures.Executor,
        refreshing: Callable[[], bool],
    ) -> None:
        self.conf = conf
        self.table = table
        self._executor = executor
        self._refreshing = refreshing
        # what we hold of each cell, by cell uuid (the dict is never replaced: the
        # consumption ledger reads it too)
        self.views: dict[str, CellView] = {}
        self._views_lock = threading.Lock()
        self.cells: dict[str, Cell] = {}
        self.enabled_cells: dict[str, Cell] = {}
        # the reads requests share, per (cell uuid, window)
        self._fresh = FreshReads()
        # the aggregates of a host by its name (``attach_aggregates``)
        self._aggregates_for_host: Callable[[str], list[Aggregate]] = _no_aggregates
        # seconds between window reads of a cell on the request path (0: every request)
        self.window_read_interval = float(
            getattr(conf.scheduler, "service_refresh_interval", _WINDOW_READ_SECONDS)
        )
        # seconds between two reminders that a cell is still failing (CellHealth)
        self.cell_failure_log_interval = 60.0

    def adopt(self, cells: dict[str, Cell]) -> None:
        """Take the cell mappings read again (cell0 left out): disabled cells are not
        scheduled to; the view of a cell that is gone, or whose database moved, is dropped
        (its HostStates leave the table), so that it is read whole again under its new
        name."""
        with self._views_lock:
            self.cells = cells
            self.enabled_cells = {u: c for u, c in cells.items() if not c.disabled}
            for uuid in list(self.views):
                old = self.views[uuid].cell
                new = cells.get(uuid)
                if new is None or new.database_connection != old.database_connection:
                    # another database: read it whole again, under its new name
                    for hs in self.views[uuid].hosts.values():
                        self.table.release(hs)
                    del self.views[uuid]
                else:
                    self.views[uuid].cell = new

    def attach_aggregates(self, aggregates_for_host: Callable[[str], list[Aggregate]]) -> None:
        """The aggregates were read again (or changed by nova-api's casts): every HostState
        held takes its own from ``aggregates_for_host`` (by host name) now, and every one
        created or re-read later from it too (the aggregate cache calls this)."""
        self._aggregates_for_host = aggregates_for_host
        every_host = [hs for view in list(self.views.values()) for hs in view.hosts.values()]
        HostState.set_aggregates_of(every_host, aggregates_for_host, self.table)

    def _view(self, cell: Cell) -> CellView:
        """What we hold of ``cell``: made empty (never read) the first time it is asked."""
        with self._views_lock:
            view = self.views.get(cell.uuid)
            if view is None:
                view = self.views[cell.uuid] = CellView(cell=cell)
            return view

    def warm_up(self) -> int:
        """Read every enabled cell whole (before the service takes requests: at 100k hosts
        the first read takes seconds). A cell that fails is skipped with a warning; requests
        read it later. Returns the number of hosts loaded."""
        started = time.monotonic()
        cells = list(self.enabled_cells.values())
        loaded = 0
        LOG.info("Warming up: reading %d cell(s)", len(cells))
        for number, cell in enumerate(cells, 1):
            cell_started = time.monotonic()
            try:
                hosts = len(self.refresh_cell(cell, window=True).hosts)
            except Exception as exc:  # logged by the cell's CellHealth
                LOG.info(
                    "Warm-up: cell %s (%d of %d) could not be read: %s",
                    cell.name,
                    number,
                    len(cells),
                    exc,
                )
                continue
            loaded += hosts
            LOG.info(
                "Warm-up: cell %s (%d of %d): %d host(s) in %.1f s (%d host(s) so far, %.1f s)",
                cell.name,
                number,
                len(cells),
                hosts,
                time.monotonic() - cell_started,
                loaded,
                time.monotonic() - started,
            )
        LOG.info(
            "Loaded %d host(s) from %d cell(s) in %.1f s",
            loaded,
            len(cells),
            time.monotonic() - started,
        )
        return loaded

    def status(self) -> list[dict[str, Any]]:
        """Per enabled cell: its name and uuid, the hosts in the cache (with a service
        record), when the last good read ended (``time.time()``, None if never), and whether
        it is failing now. For health checks and metrics; takes no lock."""
        out = []
        for cell in list(self.enabled_cells.values()):
            with self._views_lock:
                view = self.views.get(cell.uuid)
            health = view.health if view is not None else None
            out.append(
                {
                    "name": cell.name,
                    "uuid": cell.uuid,
                    "hosts": len(view.servable) if view is not None else 0,
                    "last_ok_at": health.last_ok_at if health is not None else None,
                    "failing": bool(health is not None and health.failing_since is not None),
                }
            )
        return out

    def read_in_background(self, stopping: threading.Event) -> bool:
        """The refresher's reads: each enabled cell's change window (the whole cell every
        five minutes), giving way to requests (``Pacer``). ``stopping`` ends them between
        two cells; returns False when it did."""
        for cell in list(self.enabled_cells.values()):
            if stopping.is_set():
                return False
            try:
                self.refresh_cell(cell, window=True, background=True)
            except Exception as exc:  # the next round tries again; requests go on
                # (logged once, with reminders, by the cell's CellHealth)
                LOG.debug("Could not refresh cell %s: %s", cell.name, exc)
        return True

    def refresh_cell(
        self,
        cell: Cell,
        window: bool = False,
        *,
        wait: bool = True,
        request_id: str | None = None,
        background: bool = False,
    ) -> CellRead:
        """Read what changed in one cell and apply it to its HostStates.

        ``window`` forces a read of the whole change window (services, creations,
        deletions) even if the last one is recent. Without ``wait``, a cell that has been
        read before and is being read right now (by the refresher, or another request) is
        returned as it is, without a read of its own. Returns the cell's view and its
        HostStates at that moment (a dict no one modifies), so callers can iterate it while
        another request refreshes the same cell. The cell's ``CellHealth`` logs what fails:
        a read that raises or runs longer than ``cell_timeout``, even one not waited for.
        ``background``: the refresher thread's read, which gives way to requests
        (``Pacer``).
        """
        view = self._view(cell)
        timeout = self.conf.scheduler.cell_timeout
        interval = self.cell_failure_log_interval
        if not view.lock.acquire(blocking=wait or view.read_started_at is None):
            if view.health.errored:
                # its last read failed (a dead database): skip the cell while another read
                # tries again, rather than choose hosts of a cell that cannot build them
                raise CellReadFailed(f"cell {cell.name}: the last read failed, another is running")
            # the read in flight may be stuck (a locked table): say so, once
            view.health.timed_out(cell, timeout, interval, request_id, waited=False)
            return CellRead(view, view.hosts, view.servable)
        try:
            view.health.read_started()
            try:
                read = self._read_cell(view, cell, window, Pacer() if background else no_pause)
            except Exception as exc:
                view.health.read_ended(cell, timeout, interval, request_id, exc)
                raise
            view.health.read_ended(cell, timeout, interval, request_id)
            return read
        finally:
            view.lock.release()

    def _request_read(
        self, cell: Cell, request_id: str | None = None, sent: SentRead | None = None
    ) -> CellRead:
        """A request's read of one cell: everything committed before it started is applied
        when it returns, without waiting for the refresher's read in flight.

        Two statements: the exceptional services (disabled, forced down, or whose last
        heartbeat is near or past ``service_down_time``: ``queries.get_service_exceptions``),
        compared with those held (nova-api's enable, disable and force-down; a compute that
        stopped or came back), and the compute-node reports since the last read. A known
        node's report is applied on its HostState; a changed service record on the hosts
        of that service (its heartbeat in place). So a service that is up by its heartbeat
        here is up by the database's, and one that is not is judged on the database's
        heartbeat, as nova's ComputeFilter does. Only what changes the set of hosts or
        services (a node created, deleted or moved, a service created or deleted) takes the
        cell's lock, for a window read of its services. A cell never read, or whose last
        read failed, goes through ``refresh_cell``; so does a cell whose window nobody
        else reads (no refresher: explain from the command line, tests). ``sent``: the
        statements sent when the request arrived (``_send_cell_read``)."""
        view = self._view(cell)
        if sent is not None and not self._sendable(view):
            sent.ahead.discard()
            sent = None
        if view.read_started_at is None or view.health.errored:
            return self.refresh_cell(cell, wait=view.read_started_at is None, request_id=request_id)
        if not self._refreshing() and (
            time.monotonic() - view.window_read_at >= self.window_read_interval
        ):
            return self.refresh_cell(cell, window=True, wait=True, request_id=request_id)
        timeout = self.conf.scheduler.cell_timeout
        interval = self.cell_failure_log_interval
        # the refresher's read may be stuck (a locked table): say so, once
        view.health.timed_out(cell, timeout, interval, request_id, waited=False)
        clock = time.monotonic()
        started = timeutils.utcnow()
        try:
            engine = db.get_engine(cell.database_connection)
            exceptions = digest = None
            if sent is None:
                band = self._heartbeat_band()
                since = (view.nodes_read_started_at or view.read_started_at) - _REPORT_SLACK
                bind: Any = engine
            else:
                band, since, bind = sent.band, sent.since, sent.ahead
            # both statements on one connection (one checkout, one liveness ping), or
            # answered from those sent on arrival
            with bind.connect() as conn:
                if self.conf.scheduler.read_your_writes:
                    # the rows only when their digest moved (a disable, a compute that stopped)
                    digest = queries.get_service_exceptions_digest(conn, *band)
                    if digest != view.exceptions_digest:
                        exceptions = queries.get_service_exceptions(engine, *band)
                    else:
                        exceptions = view.exceptions
                nodes = queries.get_compute_node_reports(conn, since, view.recent_rows)
            self._apply_request_read(view, cell, engine, exceptions, nodes, timeout, band)
            if digest is not None:
                # (taken before the rows: a change in between reads them again next time)
                view.exceptions_digest = digest
        except Exception as exc:
            view.health.request_read_ended(
                cell, time.monotonic() - clock, timeout, interval, request_id, exc
            )
            raise
        view.health.request_read_ended(
            cell, time.monotonic() - clock, timeout, interval, request_id
        )
        known = view.nodes_read_started_at
        if known is None or started > known:
            view.nodes_read_started_at = started
        return CellRead(view, view.hosts, view.servable)

    def _sendable(self, view: CellView) -> bool:
        """Whether a request's read of this cell is the two statements ``_request_read``
        runs (not a whole or window read)."""
        if view.read_started_at is None or view.health.errored:
            return False
        return self._refreshing() or (
            time.monotonic() - view.window_read_at < self.window_read_interval
        )

    def _send_cell_read(self, cell: Cell) -> SentRead | None:
        """Send a request's read of ``cell`` now, to be received by ``_request_read`` when
        the request needs it (``db.read_ahead``); None where that cannot be done (another
        driver than PyMySQL, a cell never read)."""
        engine = db.get_engine(cell.database_connection)
        if not read_ahead.supported(engine):
            return None
        view = self._view(cell)
        if not self._sendable(view):
            return None
        band = self._heartbeat_band()
        since = (view.nodes_read_started_at or view.read_started_at) - _REPORT_SLACK
        ahead = read_ahead.ReadAhead(engine)
        if self.conf.scheduler.read_your_writes:
            ahead.send(*queries.service_exceptions_digest_statement(*band))
        ahead.send(*queries.compute_node_reports_statement(since))
        return SentRead(ahead, band, since)

    def _apply_request_read(
        self,
        view: CellView,
        cell: Cell,
        engine: Any,
        exceptions: dict[str, tuple[bool, bool, datetime.datetime | None]] | None,
        nodes: list[queries.ComputeNodeRow],
        timeout: float,
        band: tuple[datetime.datetime, datetime.datetime],
    ) -> None:
        """Apply what ``_request_read`` found (see there); ``exceptions`` None: the
        services were not read (``read_your_writes`` off). ``band``: the heartbeats the
        exceptions were read for (``_heartbeat_band``)."""
        recent = view.recent_rows
        hosts = view.hosts
        moved: list[queries.ComputeNodeRow] = []
        for row in nodes:
            uuid = row.uuid
            if not uuid:
                continue
            hs = hosts.get(uuid)
            if (
                hs is not None
                and not row.deleted
                and hs.host == row.host
                and hs.nodename == row.hypervisor_hostname
            ):
                hs.update_from_row(row)
                recent[uuid] = row
            else:
                moved.append(row)
        structural = bool(moved)
        if exceptions is not None:
            last = view.exceptions
            # what changed since the last request's read (usually nothing), and what is
            # held as exceptional but no longer is in the database: enabled, up again
            check = set() if exceptions == last else _differing(exceptions, last)
            check |= self._held_not_exceptional(view, cell, exceptions, band)
            services = view.services
            stale = [h for h in check if _exception_key(services.get(h)) != exceptions.get(h)]
            if stale:
                rows = queries.get_compute_services(engine, hosts=stale)
                # a host without a live row: its service was deleted (the window read)
                structural |= len(rows) < len(stale)
                structural |= self._apply_services(view, cell, rows)
            view.exceptions = exceptions
        if not structural:
            return
        # the set of hosts or services changed: as the refresher does, under the lock
        if not view.lock.acquire(timeout=timeout):
            raise CellReadFailed(
                f"cell {cell.name}: a read has held it for longer than cell_timeout"
            )
        try:
            services = queries.get_compute_services(
                engine, updated_since=view.read_started_at - _SERVICE_SLACK
            )
            self._apply_changes(view, services, moved)
        finally:
            view.lock.release()

    def _apply_services(self, view: CellView, cell: Cell, rows: list[queries.ServiceRow]) -> bool:
        """Apply service rows a request just read to the records held: a heartbeat in place,
        anything else as a new record on every node of the host. True when a row names a
        host without a record (a new service: the caller reads the window)."""
        changed = new = False
        for row in rows:
            host = row.host
            known = view.services.get(host)
            if known is None:
                new = True
                continue
            if _only_heartbeat_changed(known, row):
                if _SVC_BEAT_OF_DICT(known) != _SVC_BEAT_OF_ROW(row):
                    HostState.apply_heartbeat(known, row, self.table, cell.uuid)
                continue
            service = _service_dict(row)
            view.services[host] = service
            # a read of the refresher's that began before now must not put back what it
            # read of this service (see _apply_changes)
            view.services_fixed_at[host] = time.monotonic()
            for hs in _hosts_named(view, host):
                hs.set_service(service)
            changed = True
            LOG.debug(
                "Service of host %s in cell %s changed: disabled %s, forced down %s",
                host,
                cell.name,
                service["disabled"],
                service["forced_down"],
            )
        if changed:
            view.services_generation += 1
        return new

    def _heartbeat_band(self) -> tuple[datetime.datetime, datetime.datetime]:
        """The heartbeats (naive UTC) that are up for sure now and for the next
        ``_HEARTBEAT_MARGIN`` seconds: ``service_down_time`` either side of now, less the
        margin. A service whose heartbeat is outside is one a request reads exactly."""
        down_time = float(getattr(self.conf, "service_down_time", 60) or 0)
        span = datetime.timedelta(
            seconds=max(0.0, down_time - min(_HEARTBEAT_MARGIN, down_time / 2))
        )
        now = timeutils.utcnow()
        return now - span, now + span

    def _held_not_exceptional(
        self,
        view: CellView,
        cell: Cell,
        exceptions: dict[str, tuple[bool, bool, datetime.datetime | None]],
        band: tuple[datetime.datetime, datetime.datetime],
    ) -> set[str] | frozenset[str]:
        """The hosts held as disabled, forced down or near down whose service the database
        no longer names exceptional (enabled, up again). Usually none; it is worked out
        again only when the services held, the exceptions read or the heartbeats outside
        ``band`` changed since the last request (at 10,000 hosts with 1,000 exceptional
        services: 0.2 ms of set work saved per request)."""
        late = self.table.heartbeats_outside(*band)
        memo = view.not_exceptional
        if (
            memo is not None
            and memo[0] == view.services_generation
            and memo[1] is exceptions
            and np.array_equal(memo[2], late)
        ):
            return memo[3]
        held = self._held_flagged(view) | self.table.hosts_of_slots(late, cell.uuid)
        missing = frozenset(held - exceptions.keys())
        view.not_exceptional = (view.services_generation, exceptions, late, missing)
        return missing

    @staticmethod
    def _held_flagged(view: CellView) -> frozenset[str]:
        """The hosts whose services held are disabled or forced down (recomputed only
        after a service changed in more than its heartbeat)."""
        generation = view.services_generation
        flagged = view.flagged
        if flagged is None or view.flags_generation != generation:
            flagged = frozenset(
                host
                for host, service in list(view.services.items())
                if service.get("disabled") or service.get("forced_down")
            )
            view.flagged, view.flags_generation = flagged, generation
        return flagged

    def _read_cell(
        self, view: CellView, cell: Cell, window: bool, pause: Callable[[], None] = no_pause
    ) -> CellRead:
        """The read of ``refresh_cell``, under the view's lock. ``pause`` is called between
        the queries and between rows (``Pacer``)."""
        engine = db.get_engine(cell.database_connection)
        started = timeutils.utcnow()
        now = time.monotonic()
        full = view.read_started_at is None or (
            now - view.full_read_at >= _FULL_RESYNC_SECONDS
            # with a refresher, requests leave the whole read to it (unless it is stuck)
            and (
                window
                or not self._refreshing()
                or now - view.full_read_at >= 2 * _FULL_RESYNC_SECONDS
            )
        )
        window_due = now - view.window_read_at >= self.window_read_interval * (
            3 if self._refreshing() and not window else 1
        )
        if full or window or window_due:
            since = None if full else view.read_started_at - WATERMARK_SLACK
            services = queries.get_compute_services(
                engine, updated_since=None if full else view.read_started_at - _SERVICE_SLACK
            )
            pause()
            nodes = queries.get_compute_nodes(engine, updated_since=since)
            pause()
            if full:
                self._apply_full_read(view, services, nodes, pause, read_began=now)
                # the rows of a whole read are not kept (they hold every report's text)
                nodes = []
                view.recent_rows = {}
            else:
                self._apply_changes(view, services, nodes, pause, read_began=now)
            fixed = view.services_fixed_at
            if fixed:
                # what a request applied before this read began, this read has seen too
                view.services_fixed_at = {h: t for h, t in list(fixed.items()) if t > now}
            view.read_started_at = started
            # from the end of the read: a read slower than the interval must not make
            # every request a window read
            view.window_read_at = time.monotonic()
            if full:
                view.full_read_at = now
                # The cache is long-lived and free of reference cycles: move it out of
                # the cyclic GC's generations so full collections stop walking 10^5
                # HostStates (spikes of ~100 ms at 10k hosts). Freed objects still go by
                # reference counting.
                gc.freeze()
        else:
            # With the refresher, whose window reads go back the whole slack every
            # second, a request need only cover DATETIME's whole seconds
            slack = _REPORT_SLACK if self._refreshing() else WATERMARK_SLACK
            since = (view.nodes_read_started_at or view.read_started_at) - slack
            # only the reports not applied yet are read whole (a report re-read within
            # the slack is recognised by its updated_at; two reports of one node in one
            # second of a DATETIME column look alike, and the next window read, which
            # compares whole rows, applies the second)
            nodes = queries.get_compute_node_reports(engine, since, view.recent_rows)
            if nodes:
                self._apply_changes(view, [], nodes)
        view.nodes_read_started_at = started
        # what the next reads may re-read: the next window read goes back to the slack
        # before the start of the last one (a read of reports goes back less far)
        self._remember_rows(view, nodes, view.read_started_at - WATERMARK_SLACK)
        return CellRead(view, view.hosts, view.servable)

    @staticmethod
    def _remember_rows(
        view: CellView, nodes: list[queries.ComputeNodeRow], cutoff: datetime.datetime
    ) -> None:
        """Keep the rows a later read may re-read: those reported at or after ``cutoff``
        (the next read goes back no further), so that it need not apply them again.

        The cutoff moves with window reads only: a read of reports adds its rows, and the
        rows older than the cutoff are dropped when it moves (not at every request). Were
        they dropped at the request's own start instead, the next window read would find
        about one read interval of reports missing and apply each of them a second time."""
        recent = view.recent_rows
        for row in nodes:
            recent[row.uuid] = row
        if recent and cutoff != view.recent_cutoff:
            view.recent_rows = {
                uuid: row
                for uuid, row in recent.items()
                if (row.updated_at or row.created_at or cutoff) >= cutoff
            }
        view.recent_cutoff = cutoff

    def _apply_full_read(
        self,
        view: CellView,
        services: list[queries.ServiceRow],
        nodes: list[queries.ComputeNodeRow],
        pause: Callable[[], None] = no_pause,
        *,
        read_began: float | None = None,
    ) -> None:
        # what the whole read does not return is gone (deleted rows are not in it)
        by_host: dict[str, dict[str, Any]] = {}
        fixed = view.services_fixed_at if read_began is not None else None
        for row in services:
            known = view.services.get(row.host) if fixed else None
            if known is not None and fixed.get(row.host, -1.0) > read_began:
                by_host[row.host] = known  # a request applied it after this read began
            else:
                by_host[row.host] = _service_dict(row)
            pause()
        view.services = by_host
        view.services_generation += 1
        live = {row.uuid for row in nodes if row.uuid}
        hosts = {u: hs for u, hs in view.hosts.items() if u in live}
        for uuid, hs in view.hosts.items():
            if uuid not in live:
                self.table.release(hs)
        self.table.collect()
        pause()
        # every host kept has a row in ``nodes``: _apply_node gives it its service
        for row in nodes:
            self._apply_node(view, hosts, row)
            pause()
        view.hosts = hosts
        view.servable = {u: hs for u, hs in hosts.items() if hs.service}

    def _apply_changes(
        self,
        view: CellView,
        services: list[queries.ServiceRow],
        nodes: list[queries.ComputeNodeRow],
        pause: Callable[[], None] = no_pause,
        *,
        read_began: float | None = None,
    ) -> None:
        """Apply changed service and compute-node rows. ``read_began``: when the read that
        found them began (``time.monotonic()``); a service record a request's read applied
        after that (``_request_read``) is newer than the row and stays."""
        changed_hosts: set[str] = set()
        fixed = view.services_fixed_at if read_began is not None else None
        apply_heartbeat = HostState.apply_heartbeat
        table = self.table
        cell_uuid = view.cell.uuid
        # deleted rows first: a host whose old service was deleted and a new one created
        # (nova-compute re-registering) must end up with the new one
        for row in sorted(services, key=lambda r: not r.deleted):
            pause()
            host = row.host
            if row.deleted:
                if view.services.pop(host, None) is not None:
                    changed_hosts.add(host)
                continue
            if fixed and fixed.get(host, -1.0) > read_began:
                continue
            known = view.services.get(host)
            if known is not None and _only_heartbeat_changed(known, row):
                if _SVC_BEAT_OF_DICT(known) == _SVC_BEAT_OF_ROW(row):
                    continue  # the same row again (a window re-reads its slack)
                # most re-read rows: a heartbeat, applied in place
                apply_heartbeat(known, row, table, cell_uuid)
                continue
            view.services[host] = _service_dict(row)
            changed_hosts.add(host)
        hosts = view.hosts
        copied = False
        applied = view.recent_rows
        for row in nodes:
            pause()
            uuid = row.uuid
            if not uuid or applied.get(uuid) == row:
                continue
            hs = hosts.get(uuid)
            if row.deleted:
                if hs is not None:
                    if not copied:
                        hosts, copied = dict(hosts), True
                    del hosts[uuid]
                    self.table.release(hs)
                continue
            if hs is not None and hs.host == row.host and hs.nodename == row.hypervisor_hostname:
                # the common case: a known node reports again
                hs.update_from_row(row)
                continue
            if not copied:
                hosts, copied = dict(hosts), True
            self._apply_node(view, hosts, row)
        if changed_hosts:
            view.services_generation += 1
            for hs in hosts.values():
                if hs.host in changed_hosts:
                    hs.set_service(view.services.get(hs.host) or {})
        if copied:
            view.hosts = hosts
        if copied or changed_hosts:
            view.servable = {u: hs for u, hs in hosts.items() if hs.service}

    def _apply_node(
        self, view: CellView, hosts: dict[str, HostState], row: queries.ComputeNodeRow
    ) -> None:
        """Apply a live compute-node row to ``hosts`` (a dict not yet published)."""
        uuid, host, nodename = row.uuid, row.host, row.hypervisor_hostname
        if not uuid:
            return
        hs = hosts.get(uuid)
        # A node whose usage is not reported yet keeps uuid None, as in nova: it goes
        # through the filters but has no allocation candidates, so it is never claimed.
        if hs is None or hs.host != host or hs.nodename != nodename:
            if hs is not None:
                self.table.release(hs)
            hs = HostState(host, nodename, view.cell.uuid)
            hosts[uuid] = hs
            # not published yet: no other thread can see it, so no lock (and none created),
            # and in no table yet: ``add`` fills its row
            hs._update_from_row(row)
            hs.set_service(view.services.get(host) or {})
            hs.set_aggregates(self._aggregates_for_host(host))
            self.table.add(hs)
            return
        with hs._lock:
            hs._update_from_row(row)
            hs.set_service(view.services.get(host) or {})
            hs.set_aggregates(self._aggregates_for_host(host))

    def cell_read(
        self, cell: Cell, window: bool, not_before: float, request_id: str | None = None
    ) -> concurrent.futures.Future:
        """A read of ``cell`` started at or after ``not_before``: one in flight or done, or
        a new one on the pool (``window``: the whole change window, else a request's read).
        A read in flight for longer than ``cell_timeout`` is joined rather than queued
        behind, so that a stuck cell cannot fill the pool."""
        if window:

            def start() -> concurrent.futures.Future:
                return self._executor.submit(
                    self.refresh_cell, cell, True, wait=True, request_id=request_id
                )
        else:

            def start() -> concurrent.futures.Future:
                sent = self._send_cell_read(cell)
                if sent is None:
                    return self._executor.submit(self._request_read, cell, request_id)
                work = functools.partial(self._request_read, cell, request_id, sent)
                return InlineRead(work, sent.ahead.wait, self._executor)

        return self._fresh.get(
            (cell.uuid, window), not_before, start, stuck_after=self.conf.scheduler.cell_timeout
        )

    def scatter_gather(
        self,
        cells: list[Cell],
        request_id: str | None = None,
        window: bool = False,
        not_before: float | None = None,
    ) -> list[CellRead]:
        """Refresh these cells in parallel; those that fail or time out are left out.
        ``window``: read each cell's whole change window (see ``refresh_cell``). Each
        cell's answer includes every change committed before ``not_before``
        (``time.monotonic()``; default: now), the request's arrival: a read of the cell
        started since then is shared, else one is started (``FreshReads``)."""
        if not cells:
            return []
        timeout = self.conf.scheduler.cell_timeout
        if not_before is None:
            not_before = time.monotonic()
        futures = {self.cell_read(cell, window, not_before, request_id): cell for cell in cells}
        deadline = time.monotonic() + timeout
        for fut in futures:
            if isinstance(fut, InlineRead):
                fut.run_here(deadline)
        left = max(0.0, deadline - time.monotonic())
        done, not_done = concurrent.futures.wait(futures, timeout=left)
        reads: list[CellRead] = []
        # a failing cell is logged by its CellHealth: once when it fails, at most every
        # cell_failure_log_interval while it fails, once when it answers again
        for fut, cell in futures.items():
            if fut in not_done:
                self._view(cell).health.timed_out(
                    cell, timeout, self.cell_failure_log_interval, request_id, waited=True
                )
                metrics.M.cell_skipped.labels(cell=cell.name, reason="timeout").inc()
                continue
            exc = fut.exception()
            if exc is not None:
                metrics.M.cell_skipped.labels(cell=cell.name, reason="error").inc()
                LOG.debug(
                    "Skipping the hosts of cell %s (%s)%s: %s",
                    cell.name,
                    cell.uuid,
                    for_request(request_id),
                    exc,
                )
                continue
            reads.append(fut.result())
        return reads

    def host_states_for(self, host: str, node: str | None = None) -> list[HostState]:
        """Cached HostStates of one host (and node), across cells, by an index of host
        names rebuilt only after a read added or removed hosts."""
        out = []
        for view in list(self.views.values()):
            out.extend(hs for hs in _hosts_named(view, host) if node is None or hs.nodename == node)
        return out

    def minimum_compute_version(self) -> int | None:
        """The lowest nova-compute service version across the enabled cells (None when no
        service is known), from the cached service rows (owner_nova_filter asks it)."""
        views = [v for u, v in list(self.views.items()) if u in self.enabled_cells]
        if not views or not any(v.services for v in views):
            cells = list(self.enabled_cells.values())
            views = [r.view for r in self.scatter_gather(cells, window=True)]
        versions = []
        for view in views:
            # per cell, recomputed only after a service changed (not at every heartbeat)
            generation = view.services_generation
            known = view.min_version
            if known is None or known[0] != generation:
                found = [
                    row["version"]
                    for row in list(view.services.values())
                    if row.get("version") is not None
                ]
                known = view.min_version = (generation, min(found) if found else None)
            if known[1] is not None:
                versions.append(known[1])
        return min(versions) if versions else None


def _only_heartbeat_changed(known: dict[str, Any], row: queries.ServiceRow) -> bool:
    """Whether ``row`` differs from the cached service dict only in heartbeat columns."""
    # the common case in one C-level comparison (the stored booleans equal the rows' 0/1)
    if _SVC_STABLE_OF_DICT(known) == _SVC_STABLE_OF_ROW(row):
        return True
    for name, is_bool in _SVC_STABLE:
        value = getattr(row, name)
        if is_bool:
            value = bool(value)
        if known.get(name) != value:
            return False
    return True


_SVC_STABLE_OF_ROW = operator.attrgetter(*(name for name, _ in _SVC_STABLE))
_SVC_STABLE_OF_DICT = operator.itemgetter(*(name for name, _ in _SVC_STABLE))
_SVC_BEAT_OF_ROW = operator.attrgetter(*_HEARTBEAT_COLUMNS)
_SVC_BEAT_OF_DICT = operator.itemgetter(*_HEARTBEAT_COLUMNS)


def _service_dict(row: queries.ServiceRow) -> dict[str, Any]:
    """A service row as the dict filters read (nova's field names)."""
    service = row._asdict()
    for name in _SVC_BOOLS:
        service[name] = bool(service[name])
    for name in ("binary", "topic"):
        value = service[name]
        if isinstance(value, str):
            service[name] = sys.intern(value)
    return service


def _hosts_named(view: CellView, host: str) -> list[HostState]:
    """The HostStates of one host in one cell (by the view's host-name index)."""
    hosts, index = view.hosts, view.host_index
    if index is None or index[0] is not hosts:
        by_host: dict[str, list[HostState]] = {}
        for hs in list(hosts.values()):
            by_host.setdefault(hs.host, []).append(hs)
        index = view.host_index = (hosts, by_host)
    return index[1].get(host, [])


def _exception_key(service: dict[str, Any] | None) -> tuple[bool, bool, Any] | None:
    """A service record held as ``queries.get_service_exceptions`` gives a row: (disabled,
    forced_down, heartbeat, the heartbeat None when disabled or forced down). None for no
    record."""
    if not service:
        return None
    disabled, forced_down = bool(service.get("disabled")), bool(service.get("forced_down"))
    if disabled or forced_down:
        return disabled, forced_down, None
    return False, False, service.get("last_seen_up") or service.get("created_at")


def _differing(new: dict[str, Any], old: dict[str, Any]) -> set[str]:
    """The keys whose values differ between two dicts (added and removed ones included)."""
    return {key for key in new.keys() | old.keys() if new.get(key) != old.get(key)}
