"""HostManager: the in-memory view of the compute nodes of every enabled cell.

HostStates live in a cache keyed by compute-node uuid. Each request refreshes, per cell, only
the rows changed since the last read, reading the cells in parallel with a per-cell timeout: a
cell that fails or does not answer in time is skipped and the request goes on with the others
(``CellHealth`` logs it once when it fails, with reminders, and once when it recovers). A
host this scheduler consumed from counts that consumption on top of its last report until the
compute node reports newer data, nova says the instance is gone or elsewhere, its claim is
rolled back, Placement no longer holds it, or ``consumption_max_age`` passes.

Two kinds of read keep a cell current. Every request reads the compute nodes whose
``updated_at`` moved (usage reports: an index range scan). At most every
``window_read_interval`` seconds (and whenever every host is asked for) a request reads the
whole window instead: services (heartbeats, enable/disable, forced down), compute nodes created
or soft-deleted. Neither table has an index on those columns, and nova-compute heartbeats
every 10 s, so reading them on every request would re-read most service rows of the cell per
request. nova's own tolerance for a heartbeat is ``service_down_time`` (60 s).

In the service, both of those happen off the request path: ``warm_up`` reads every cell whole
before the scheduler takes its first request, and a refresher thread reads each cell's change
window every ``service_refresh_interval`` seconds (and whole every five minutes). A request
then reads only compute-node reports, and not even those while the refresher is reading the
cell: it takes the cell as it is (at most one read old) instead of waiting.

Elsewhere in this package: ``cells.py`` holds ``Cell``, a cell's health (``CellHealth``) and
the machinery of one read (the pacer, the reads in flight, ``CellView``); ``refresher.py`` the
refresher thread (``Refresher``, handed ``background_round`` and the interval);
``gc_policy.py`` the process's cyclic-GC policy the refresher installs.
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
from collections.abc import Callable, Iterable, KeysView
from typing import Any

import numpy as np
from oslo_utils import timeutils

import db
from db import queries, read_ahead
from scheduler.conf import CONF, database_connection
from scheduler.hosts.aggregates import aggregates_matching
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
from scheduler.hosts.gc_policy import install_gc_policy
from scheduler.hosts.instances import InstanceTracker
from scheduler.hosts.refresher import Refresher
from scheduler.hosts.state import HostState
from scheduler.hosts.table import HostTable
from scheduler.objects import Aggregate, RequestSpec
from scheduler.request import SchedulingRequest
from scheduler.telemetry import metrics

# used elsewhere under this module's name
__all__ = ["Cell", "CellReadFailed", "HostManager", "install_gc_policy"]

LOG = logging.getLogger(__name__)
# the aggregates of a host in none (shared by all such hosts; never modified)
_NO_AGGREGATES: list[Aggregate] = []
_HOST_OF = operator.attrgetter("host")

CELL0_UUID = "00000000-0000-0000-0000-000000000000"
# A row is written with its writer's clock a little before it commits, MySQL DATETIME keeps
# whole seconds, and clocks drift: each read goes back this far behind the start of the
# previous one so that no row committed in between is lost.
WATERMARK_SLACK = datetime.timedelta(seconds=5)
# A consumption counted within this long before nova-compute's sync_instance_info is not
# released by it: the compute's list (read from a database replica) cannot hold an instance
# that has not reached its claim yet (the conductor's work after our answer, the compute's
# build queue).
_SYNC_GRACE = datetime.timedelta(seconds=30)
# at most this often, the sweep of expired consumptions runs from a consumption
_SWEEP_SECONDS = 10.0
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
# closer to it, or past it, are read by every request (HostManager._heartbeat_band).
_HEARTBEAT_MARGIN = 10.0
# An update of an aggregate or its metadata within this long before the last whole read of
# the aggregates began may be hidden by DATETIME's whole seconds: such a read is repeated.
_AGGREGATES_SLACK = datetime.timedelta(seconds=2)
# Every so often a cell is read whole again. That bounds how long a change can be missed when
# a writer's clock lags ours by more than the slack, and drops soft-deleted services, which the
# incremental service query cannot see.
_FULL_RESYNC_SECONDS = 300.0
# How often (at most) a request reads the whole change window of a cell (services, compute
# nodes created or deleted); HostManager.window_read_interval, from
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


class HostManager:
    """Reads cells, aggregates and compute nodes; hands out HostStates per request."""

    def __init__(self, conf=CONF, api_engine=None):
        self.conf = conf
        if api_engine is None:
            url = conf.api_database.connection
            if not url:
                from scheduler.exceptions import ConfigurationError

                raise ConfigurationError(
                    "[api_database] connection is not set: novasched reads cell mappings and "
                    "aggregates from nova's API database"
                )
            api_engine = db.get_engine(url)
        self.api_engine = api_engine
        self._views: dict[str, CellView] = {}
        # the HostStates of every cell as columns, for the batch filters and weighers
        self.table = HostTable()
        self._views_lock = threading.Lock()
        self._aggregates: dict[int, Aggregate] = {}
        self._host_aggregates: dict[str, list[Aggregate]] = {}
        self._aggregates_loaded_at = 0.0
        self._aggregates_lock = threading.Lock()
        # the reads requests share: per (cell, window) and the aggregates' check
        self._fresh = FreshReads()
        # the aggregate tables as of the last whole read of them, and when (our clock,
        # UTC) that read started; None before the first
        self._aggregates_seen: tuple[db.AggregatesFingerprint, datetime.datetime] | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=conf.cell_worker_thread_pool_size, thread_name_prefix="cell-read"
        )
        self.cells: dict[str, Cell] = {}
        self.enabled_cells: dict[str, Cell] = {}
        # seconds between window reads of a cell on the request path (0: every request)
        self.window_read_interval = float(
            getattr(conf.scheduler, "service_refresh_interval", _WINDOW_READ_SECONDS)
        )
        # seconds between two reminders that a cell is still failing (CellHealth)
        self.cell_failure_log_interval = 60.0
        # per-host instance lists kept current by nova-compute's casts (nova's _instance_info)
        self.instance_tracker = InstanceTracker(conf, loader=self._read_host_instances)
        # Set by the driver when a plugin needs more than the uuids of the instances on every
        # host (TypeAffinityFilter: their flavor; ImagePropertiesWeigher: their image
        # properties): instances are then read, with those details, for every request.
        self.instance_details = False
        # the refresher thread (start_refresher, stop)
        self._refresher = Refresher(lambda: self.window_read_interval, self.background_round)
        # where each consumption of ours is counted: key (instance uuid) -> ((cell uuid,
        # compute-node uuid), ...), for nova's casts, Placement's view and the sweep
        # (``track_consumption``; entries released elsewhere are dropped by the sweep)
        self._consumed: dict[str, tuple[tuple[str | None, str], ...]] = {}
        self._consumed_lock = threading.Lock()
        self._next_sweep = 0.0
        self.refresh_cells_caches()
        self.refresh_aggregates()

    def reset(self) -> None:
        """SIGHUP: reload the cell mappings and the aggregates now."""
        self.refresh_cells_caches()
        self.refresh_aggregates()

    # -- cells ------------------------------------------------------------------------------
    def refresh_cells_caches(self) -> None:
        """(Re)load cell mappings: cell0 is left out, disabled cells are not scheduled to."""
        cells: dict[str, Cell] = {}
        for row in db.get_cell_mappings(
            self.api_engine, database_connection(self.conf), skip_unusable=True
        ):
            if row["uuid"] == CELL0_UUID:
                continue
            cells[row["uuid"]] = Cell(
                uuid=row["uuid"],
                name=row.get("name") or row["uuid"],
                database_connection=row["database_connection"],
                disabled=bool(row.get("disabled")),
            )
        with self._views_lock:
            self.cells = cells
            self.enabled_cells = {u: c for u, c in cells.items() if not c.disabled}
            for uuid in list(self._views):
                old = self._views[uuid].cell
                new = cells.get(uuid)
                if new is None or new.database_connection != old.database_connection:
                    # another database: read it whole again, under its new name
                    for hs in self._views[uuid].hosts.values():
                        self.table.release(hs)
                    del self._views[uuid]
                else:
                    self._views[uuid].cell = new
        LOG.info(
            "Found %d cell(s), %d enabled: %s",
            len(cells),
            len(self.enabled_cells),
            ", ".join(c.name for c in self.enabled_cells.values()) or "-",
        )

    # -- aggregates -------------------------------------------------------------------------
    def refresh_aggregates(self) -> None:
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
        with self._aggregates_lock:
            # cached HostStates get the new aggregates too: a quiet compute node may not
            # write its row again for a long time
            self._set_aggregates(aggregates)
            self._aggregates_loaded_at = time.monotonic()
            self._aggregates_seen = (fingerprint, started)

    def sync_aggregates(self, not_before: float | None = None) -> None:
        """Make the aggregates held include every change committed to the API database
        before ``not_before`` (``time.monotonic()``; default now), a request's arrival, as
        nova's request filters see them by reading per request. One statement compares the
        aggregate tables' counts, highest ids and update times with those of the last whole
        read (``_check_aggregates``); they are read whole again only when they differ.
        Concurrent requests share a check started after they arrived. If the API database
        does not answer, the aggregates held are used (and a warning logged)."""
        if not self.conf.scheduler.read_your_writes:
            return
        if not_before is None:
            not_before = time.monotonic()
        try:
            self._fresh.run("aggregates", not_before, self._check_aggregates)
        except Exception as exc:
            LOG.warning(
                "Could not check the aggregates in the API database: %s; using those held", exc
            )

    def _start_aggregates_check(self) -> concurrent.futures.Future:
        """A request's check of the aggregates, started: its statement sent now and
        received by the request (``db.read_ahead``), else run on the pool."""
        if not read_ahead.supported(self.api_engine):
            return self._executor.submit(self._check_aggregates)
        ahead = read_ahead.ReadAhead(self.api_engine)
        ahead.send(queries.aggregates_fingerprint_statement(count_hosts=False))
        work = functools.partial(self._check_aggregates, ahead=ahead)
        return InlineRead(work, ahead.wait, self._executor)

    def _check_aggregates(
        self, count_hosts: bool = False, ahead: read_ahead.ReadAhead | None = None
    ) -> None:
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
        seen = self._aggregates_seen
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
        self.refresh_aggregates()

    def _maybe_refresh_aggregates(self) -> None:
        if self.conf.scheduler.read_your_writes and self._refreshing():
            return  # every request checks them, and the refresher counts their hosts
        ttl = self.conf.scheduler.aggregate_cache_ttl
        if ttl >= 0 and time.monotonic() - self._aggregates_loaded_at >= ttl:
            try:
                self.refresh_aggregates()
            except Exception as exc:  # keep serving with the aggregates we have
                LOG.warning("Could not refresh aggregates from the API database: %s", exc)

    @property
    def aggregates(self) -> list[Aggregate]:
        return list(self._aggregates.values())

    def aggregates_for_host(self, host: str) -> list[Aggregate]:
        return self._host_aggregates.get(host, _NO_AGGREGATES)

    def aggregates_by_metadata(
        self, key: str | None = None, value: str | None = None, key_prefix: str | None = None
    ) -> list[Aggregate]:
        self._maybe_refresh_aggregates()
        return aggregates_matching(self._aggregates.values(), key, value, key_prefix)

    def update_aggregates(self, aggregates: list[Aggregate]) -> None:
        """Apply aggregates sent by nova-api (update_aggregates RPC)."""
        with self._aggregates_lock:
            current = dict(self._aggregates)
            for agg in aggregates:
                current[agg.id] = agg
            self._set_aggregates(current)

    def delete_aggregate(self, aggregate: Aggregate) -> None:
        """Forget an aggregate deleted in nova-api (delete_aggregate RPC)."""
        with self._aggregates_lock:
            current = dict(self._aggregates)
            current.pop(aggregate.id, None)
            self._set_aggregates(current)

    def _set_aggregates(self, aggregates: dict[int, Aggregate]) -> None:
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
        every_host = [hs for view in list(self._views.values()) for hs in view.hosts.values()]
        HostState.set_aggregates_of(every_host, self.aggregates_for_host, self.table)

    # -- host states ------------------------------------------------------------------------
    def _cells_for(self, spec: RequestSpec | None) -> list[Cell]:
        dest = spec.requested_destination if spec is not None else None
        if dest is not None and dest.cell_uuid and not dest.allow_cross_cell_move:
            # as nova: the requested cell is used even if it is disabled
            cell = self.cells.get(dest.cell_uuid)
            return [cell] if cell else []
        return list(self.enabled_cells.values())

    def _view(self, cell: Cell) -> CellView:
        with self._views_lock:
            view = self._views.get(cell.uuid)
            if view is None:
                view = self._views[cell.uuid] = CellView(cell=cell)
            return view

    # -- start-up and the refresher ----------------------------------------------------------
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
                hosts = len(self._refresh_cell(cell, window=True).hosts)
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
                view = self._views.get(cell.uuid)
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

    def background_round(self, stopping: threading.Event) -> None:
        """One round of the refresher thread: each enabled cell's change window (the
        whole cell every five minutes), then, with ``read_your_writes``, the aggregates with
        the count of their hosts that requests' checks leave out, and the sweep of expired
        consumption when it is due. ``stopping`` ends the round between two cells."""
        for cell in list(self.enabled_cells.values()):
            if stopping.is_set():
                return
            try:
                self._refresh_cell(cell, window=True, background=True)
            except Exception as exc:  # the next round tries again; requests go on
                # (logged once, with reminders, by the cell's CellHealth)
                LOG.debug("Could not refresh cell %s: %s", cell.name, exc)
        if self.conf.scheduler.read_your_writes:
            try:  # what the requests' checks leave out: a host out of an aggregate
                self._check_aggregates(count_hosts=True)
            except Exception as exc:  # the next round tries again
                LOG.debug("Could not check the aggregates: %s", exc)
        if time.monotonic() >= self._next_sweep:
            try:
                self.expire_consumption()
            except Exception:  # the next round tries again
                LOG.exception("Could not release expired consumption")

    def start_refresher(self) -> None:
        """Start the refresher thread (``Refresher.start``): every enabled cell's change
        window read every ``service_refresh_interval`` seconds, so that requests do not."""
        self._refresher.start()

    def _refresh_cell(
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
        read failed, goes through ``_refresh_cell``; so does a cell whose window nobody
        else reads (no refresher: explain from the command line, tests). ``sent``: the
        statements sent when the request arrived (``_send_cell_read``)."""
        view = self._view(cell)
        if sent is not None and not self._sendable(view):
            sent.ahead.discard()
            sent = None
        if view.read_started_at is None or view.health.errored:
            return self._refresh_cell(
                cell, wait=view.read_started_at is None, request_id=request_id
            )
        if not self._refreshing() and (
            time.monotonic() - view.window_read_at >= self.window_read_interval
        ):
            return self._refresh_cell(cell, window=True, wait=True, request_id=request_id)
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
        """The read of ``_refresh_cell``, under the view's lock. ``pause`` is called between
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
            hs.set_aggregates(self.aggregates_for_host(host))
            self.table.add(hs)
            return
        with hs._lock:
            hs._update_from_row(row)
            hs.set_service(view.services.get(host) or {})
            hs.set_aggregates(self.aggregates_for_host(host))

    def get_host_states_by_uuids(
        self,
        compute_uuids: Iterable[str] | None,
        spec: RequestSpec | None = None,
        *,
        request_id: str | None = None,
    ) -> list[HostState]:
        """HostStates for these compute-node uuids (None: every compute node) in the cells
        the request may use. Hosts whose compute node has no service record are skipped.
        ``compute_uuids`` given as a dict, its keys or a set is taken as free of duplicates
        (Placement's provider summaries); another iterable is de-duplicated first."""
        self._maybe_refresh_aggregates()
        cells = self._cells_for(spec)
        # every host: a rebuild, the caching scheduler's refresh, explain --all-hosts; they
        # want the cell as it is now, not as of the last window read
        arrived = spec.arrived_at if isinstance(spec, SchedulingRequest) else None
        reads = self._scatter_gather(
            cells, request_id, window=compute_uuids is None, not_before=arrived
        )
        wanted: Iterable[str] | None = compute_uuids
        if wanted is not None and not isinstance(wanted, dict | KeysView | set | frozenset):
            wanted = dict.fromkeys(wanted)
        out: list[HostState] = []
        for read in reads:
            if wanted is None:
                items: list[HostState] = list(read.hosts.values())
                found = list(read.servable.values())
            else:
                # (a HostState is always true: filter(None) drops only the misses)
                found = list(filter(None, map(read.servable.get, wanted)))
                items = found
                if len(read.servable) != len(read.hosts):
                    items = list(filter(None, map(read.hosts.get, wanted)))
            if len(found) != len(items):
                for hs in items:
                    if not hs.service:
                        LOG.warning(
                            "No compute service record found for host %(host)s in cell "
                            "%(cell)s; skipping it",
                            {"host": hs.host, "cell": read.view.cell.name},
                        )
            out.extend(found)
        if self.instance_details or (spec is not None and _needs_instances(spec)):
            self._load_instances([r.view for r in reads], out)
        return out

    def prefetch(
        self, spec: RequestSpec | None = None, *, aggregates: bool = True, cells: bool = True
    ) -> None:
        """Start the request's check of the aggregates and its reads of its cells now,
        without waiting for them: they run (in the databases) while the request does other
        work, and ``sync_aggregates`` and ``get_host_states_by_uuids`` join them
        (``FreshReads``: they started after the request arrived). A second call joins
        what the first started; ``aggregates`` / ``cells`` False leave those out (a caller
        that wants the database to answer something else first)."""
        arrived = spec.arrived_at if isinstance(spec, SchedulingRequest) else None
        now = time.monotonic() if arrived is None else arrived
        if aggregates and self.conf.scheduler.read_your_writes:
            # the aggregates' check first (sync_aggregates joins it)
            self._fresh.get("aggregates", now, self._start_aggregates_check)
        if cells:
            for cell in self._cells_for(spec):
                self._cell_read(cell, False, now)

    def _cell_read(
        self, cell: Cell, window: bool, not_before: float, request_id: str | None = None
    ) -> concurrent.futures.Future:
        """A read of ``cell`` started at or after ``not_before``: one in flight or done, or
        a new one on the pool (``window``: the whole change window, else a request's read).
        A read in flight for longer than ``cell_timeout`` is joined rather than queued
        behind, so that a stuck cell cannot fill the pool."""
        if window:

            def start() -> concurrent.futures.Future:
                return self._executor.submit(
                    self._refresh_cell, cell, True, wait=True, request_id=request_id
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

    def _scatter_gather(
        self,
        cells: list[Cell],
        request_id: str | None = None,
        window: bool = False,
        not_before: float | None = None,
    ) -> list[CellRead]:
        """Refresh these cells in parallel; those that fail or time out are left out.
        ``window``: read each cell's whole change window (see ``_refresh_cell``). Each
        cell's answer includes every change committed before ``not_before``
        (``time.monotonic()``; default: now), the request's arrival: a read of the cell
        started since then is shared, else one is started (``FreshReads``)."""
        if not cells:
            return []
        timeout = self.conf.scheduler.cell_timeout
        if not_before is None:
            not_before = time.monotonic()
        futures = {self._cell_read(cell, window, not_before, request_id): cell for cell in cells}
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

    def _load_instances(self, views: list[CellView], hosts: list[HostState]) -> None:
        """Fill host.instances for the hosts of this request (needed by affinity filters,
        same/different host hints): one query per cell."""
        by_cell: dict[str, list[HostState]] = {}
        details = self.instance_details
        if details:
            # the casts carry uuids only: with details asked for, read the database
            tracked: list[Any] = [None] * len(hosts)
        else:
            # one lookup pass for every host (a server-group request has them all)
            tracked = self.instance_tracker.trusted_instances(list(map(_HOST_OF, hosts)))
        for hs, known in zip(hosts, tracked, strict=True):
            if known is not None:  # kept current by the compute's casts
                hs.instances = known
            else:
                by_cell.setdefault(hs.cell_uuid, []).append(hs)
        for view in views:
            cell_hosts = by_cell.get(view.cell.uuid)
            if not cell_hosts:
                continue
            try:
                engine = db.get_engine(view.cell.database_connection)
                names = sorted({hs.host for hs in cell_hosts})
                if details:
                    by_host = db.get_instance_details_by_host(engine, names)
                else:
                    uuids_by_host = db.get_instance_uuids_by_host(engine, names)
            except Exception as exc:
                LOG.warning("Could not read instances of cell %s: %s", view.cell.name, exc)
                continue
            for hs in cell_hosts:
                if details:
                    hs.instances = dict(by_host.get(hs.host, {}))
                else:
                    hs.instances = {u: None for u in uuids_by_host.get(hs.host, ())}

    def _read_host_instances(self, host: str) -> list[str] | None:
        """The instance uuids of one host from its cell database (the instance tracker's
        re-read); None while no cell read so far has shown the host."""
        for view in list(self._views.values()):
            if host in view.services:
                engine = db.get_engine(view.cell.database_connection)
                return sorted(db.get_instance_uuids_by_host(engine, [host]).get(host, ()))
        return None

    def minimum_compute_version(self) -> int | None:
        """The lowest nova-compute service version across the enabled cells (None when no
        service is known), from the cached service rows (owner_nova_filter asks it)."""
        views = [v for u, v in list(self._views.items()) if u in self.enabled_cells]
        if not views or not any(v.services for v in views):
            cells = list(self.enabled_cells.values())
            views = [r.view for r in self._scatter_gather(cells, window=True)]
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

    def track_consumption(self, hs: HostState, key: str) -> None:
        """Remember where the consumption ``key`` (an instance uuid) is counted, so that
        nova's casts, Placement's view and the sweep find it; sweep if one is due."""
        if hs.uuid:
            where = (hs.cell_uuid, hs.uuid)
            with self._consumed_lock:
                known = self._consumed.get(key)
                if known is None:
                    self._consumed[key] = (where,)
                elif where not in known:
                    self._consumed[key] = (*known, where)
        if time.monotonic() >= self._next_sweep:
            self.expire_consumption()

    def release_deleted_instance(self, host: str, instance_uuid: str) -> int:
        """nova-compute says ``instance_uuid`` left ``host`` (``delete_instance_info``):
        stop counting it there. Returns how many consumptions were released."""
        return sum(
            hs.release_consumption(instance_uuid, "deleted") for hs in self.host_states_for(host)
        )

    def release_moved_instances(self, host: str, instance_uuids: Iterable[str]) -> int:
        """nova-compute says these instances are on ``host`` (``update_instance_info``):
        stop counting them on every other host (a reschedule to an alternate, a reverted
        move)."""
        released = 0
        consumed = self._consumed
        for instance_uuid in instance_uuids:
            known = consumed.get(instance_uuid)
            if known is None:  # the common case: not one of ours, or long released
                continue
            for hs in self._consuming_hosts(known):
                if hs.host != host:
                    released += hs.release_consumption(instance_uuid, "moved")
        return released

    def release_unlisted_instances(self, host: str, instance_uuids: Iterable[str]) -> int:
        """nova-compute listed the instances of ``host`` (``sync_instance_info``): stop
        counting there the instances it does not list, unless consumed within the last
        ``_SYNC_GRACE`` (the compute's list, read from a database replica, cannot hold an
        instance that has not reached the compute's claim yet)."""
        hosts = self.host_states_for(host)
        if not hosts:
            return 0
        made_before = timeutils.utcnow() - _SYNC_GRACE
        listed = set(instance_uuids)
        return sum(hs.release_unlisted(listed, made_before) for hs in hosts)

    def release_consumer(self, consumer: str, compute_uuid: str) -> None:
        """Placement no longer holds ``consumer``'s allocation on the provider
        ``compute_uuid`` (the provider view's ``on_consumer_gone``): stop counting it on
        that compute node. Cheap for the consumers that are not ours (most of them)."""
        known = self._consumed.get(consumer)
        if known is None:
            return
        for hs in self._consuming_hosts(known):
            if hs.uuid == compute_uuid:
                hs.release_consumption(consumer, "placement")

    def counted_claims(self) -> dict[str, set[str]]:
        """``{instance uuid: compute-node uuids}`` of the instances whose consumption is
        counted now, by where it is counted: the claims Placement must still hold for that
        to be right (the provider view's ``counted_claims``)."""
        with self._consumed_lock:
            items = list(self._consumed.items())
        counted: dict[str, set[str]] = {}
        for key, known in items:
            for hs in self._consuming_hosts(known):
                if hs.counts_claim(key):
                    counted.setdefault(key, set()).add(hs.uuid)
        return counted

    def expire_consumption(self) -> int:
        """The sweep: release the consumptions older than ``[scheduler]
        consumption_max_age`` (their compute never reported them) and forget where the
        released ones were. Called by ``track_consumption`` every ``_SWEEP_SECONDS`` at
        most; cheap enough to be called by the refresher too. Returns how many expired."""
        self._next_sweep = time.monotonic() + _SWEEP_SECONDS
        max_age = getattr(self.conf.scheduler, "consumption_max_age", 0) or 0
        with self._consumed_lock:
            items = list(self._consumed.items())
        if not items:
            return 0
        hosts: dict[int, HostState] = {}
        for _key, known in items:
            for hs in self._consuming_hosts(known):
                hosts[id(hs)] = hs
        expired = 0
        if max_age:
            now = timeutils.utcnow()
            for hs in hosts.values():
                expired += hs.expire_consumption(max_age, now)
        counted: set[str] = set()
        for hs in hosts.values():
            counted.update(hs.consumptions())
        with self._consumed_lock:
            for key, known in items:
                if key not in counted and self._consumed.get(key) is known:
                    del self._consumed[key]
        return expired

    def _consuming_hosts(self, known: tuple[tuple[str | None, str], ...]) -> list[HostState]:
        """The cached HostStates at these (cell uuid, compute-node uuid)."""
        out = []
        for cell_uuid, uuid in known:
            view = self._views.get(cell_uuid) if cell_uuid else None
            hs = view.hosts.get(uuid) if view is not None else None
            if hs is not None:
                out.append(hs)
        return out

    def host_states_for(self, host: str, node: str | None = None) -> list[HostState]:
        """Cached HostStates of one host (and node), across cells, by an index of host
        names rebuilt only after a read added or removed hosts."""
        out = []
        for view in list(self._views.values()):
            out.extend(hs for hs in _hosts_named(view, host) if node is None or hs.nodename == node)
        return out

    def compute_nodes_by_host_or_node(
        self, host: str | None, node: str | None, spec: RequestSpec | None = None
    ) -> list[HostState]:
        """Compute nodes for a forced or requested destination (refreshing the cells)."""
        out = []
        for read in self._scatter_gather(self._cells_for(spec), window=True):
            for hs in read.hosts.values():
                if host is not None and hs.host != host:
                    continue
                if node is not None and hs.nodename != node:
                    continue
                out.append(hs)
        return out

    def _refreshing(self) -> bool:
        return self._refresher.running()

    def stop(self) -> None:
        self._refresher.stop()
        self._executor.shutdown(wait=False, cancel_futures=True)


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


def _needs_instances(spec: RequestSpec) -> bool:
    if spec.instance_group is not None:
        return True
    hints = spec.scheduler_hints or {}
    return "same_host" in hints or "different_host" in hints


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
