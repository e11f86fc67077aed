"""HostManager: the in-memory view of the compute nodes of every enabled cell.

HostStates live in a cache keyed by compute-node uuid. Each request refreshes, per cell, only
the rows changed since the last read, reading the cells in parallel with a per-cell timeout: a
cell that fails or does not answer in time is skipped and the request goes on with the others
(``_CellHealth`` logs it once when it fails, with reminders, and once when it recovers). A
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
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
from oslo_utils import timeutils

import db
from db import queries, read_ahead
from scheduler.conf import CONF, database_connection
from scheduler.hosts.instances import InstanceTracker
from scheduler.hosts.state import HostState
from scheduler.hosts.table import HostTable
from scheduler.objects import Aggregate, RequestSpec
from scheduler.request import SchedulingRequest
from scheduler.telemetry import metrics

LOG = logging.getLogger(__name__)
# the aggregates of a host in none (shared by all such hosts; never modified)
_NO_AGGREGATES: list[Aggregate] = []
_HOST_OF = operator.attrgetter("host")

CELL0_UUID = "00000000-0000-0000-0000-000000000000"
# A row is written with its writer's clock a little before it commits, MySQL DATETIME keeps
# whole seconds, and clocks drift: each read goes back this far behind the start of the
# previous one so that no row committed in between is lost.
_WATERMARK_SLACK = datetime.timedelta(seconds=5)
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
# The refresher thread's reads hand the GIL over this often (seconds of their own work; see
# _Pacer).
_BACKGROUND_SLICE = 0.001

_SVC_BOOLS = ("disabled", "forced_down", "deleted")
_HEARTBEAT_COLUMNS = ("last_seen_up", "updated_at", "report_count")
# (name, is_bool) of the service columns a heartbeat does not change
_SVC_STABLE = tuple(
    (name, name in _SVC_BOOLS)
    for name in queries.ServiceRow._fields
    if name not in _HEARTBEAT_COLUMNS
)


class _Pacer:
    """Called between rows by a read on the refresher thread: once every ``slice`` seconds
    it lets go of the GIL (``time.sleep(0)``), so that a request waiting for it goes first.

    A window read is 30-100 ms of CPU each second at 10k hosts with the core benchmark's
    write rate (a whole read every five minutes: seconds at 100k hosts). Without pauses a
    request that overlaps it gets the interpreter back only every switch interval (5 ms)
    each time it lets go of it itself (a NumPy operation, waiting for its cell read): next
    to a thread that holds the GIL, a 5 ms request of the benchmark took 18 ms; next to one
    that sleeps(0) every millisecond, 8 ms. What is left unpaced is the queries' own row
    processing. The refresher's read is in no hurry: requests meanwhile serve the cell as
    last read."""

    __slots__ = ("slice", "_until")

    def __init__(self, slice_: float | None = None):
        self.slice = _BACKGROUND_SLICE if slice_ is None else slice_
        self._until = time.perf_counter() + self.slice

    def __call__(self) -> None:
        if time.perf_counter() >= self._until:
            time.sleep(0)
            self._until = time.perf_counter() + self.slice


class CellReadFailed(RuntimeError):
    """A cell whose last read failed, asked for while another read of it runs."""


def _no_pause() -> None:
    """The pacer of a read on a request's behalf: it does not give way."""


# -- the cyclic garbage collector -------------------------------------------------------------
# The host manager's cache is long-lived and free of reference cycles: HostStates, their
# service dicts, decoded reports, and (made on first use, after the first read) each host's
# lockutils semaphore (~9 GC-tracked objects) and instance-list snapshot. Every full
# collection walks whatever of it is not frozen: at 10k hosts 35-55k objects after a few
# hundred requests, 6-9 ms of CPU with the interpreter stopped (at 100k hosts: 18-25 full
# collections per 200 requests of the core benchmark, the longest 270-470 ms on a busy
# machine), growing with every host updated until the next whole read freezes it (every
# five minutes). Objects frozen are still freed
# by reference counting; only a reference cycle among them is never collected, and the
# scheduler's own structures have none (no request of the core benchmark leaves cyclic
# garbage).
#
# A full collection that takes longer than this freezes what it kept (``_freeze_survivors``).
_GC_FREEZE_AFTER = 0.002
# The youngest generation is collected after this many more allocations than frees of
# tracked objects (CPython's default: 700). A window read allocates a row per changed
# service and node (at 100k hosts ~36k rows each second: some 50 young collections), and
# each young collection also walks the containers a request holds meanwhile (lists of every
# candidate host). At 10k hosts the benchmark's GC time drops from ~0.3 to ~0.07 ms of CPU
# per request (3 young collections of ~4 ms per 200 requests instead of ~100 of 0.4 ms and
# ~10 of 2 ms), at 100k from ~15 to ~10 ms.
_GC_YOUNG_THRESHOLD = 10_000
_gc_full_started = 0.0
_gc_policy_lock = threading.Lock()


def _freeze_survivors(phase: str, info: dict[str, Any]) -> None:
    """``gc.callbacks`` hook: after a full collection that took ``_GC_FREEZE_AFTER`` or
    longer, freeze what survived it (everything reachable: the collection just removed the
    garbage), so that the next full collections walk only what was made since. CPython's
    own rule (a full collection once the objects that came into the oldest generation since
    the last one are a quarter of those it kept) then keeps them rare and small."""
    global _gc_full_started
    if info.get("generation") != 2:
        return
    if phase == "start":
        _gc_full_started = time.perf_counter()
    elif time.perf_counter() - _gc_full_started >= _GC_FREEZE_AFTER:
        gc.freeze()


def install_gc_policy() -> None:
    """Keep the long-lived cache out of the cyclic GC's way in this process (idempotent):
    the service's host manager installs it when its refresher starts. The youngest
    generation's threshold is raised to ``_GC_YOUNG_THRESHOLD`` unless it is already higher
    or collection is off (0)."""
    with _gc_policy_lock:
        if _freeze_survivors not in gc.callbacks:
            gc.callbacks.append(_freeze_survivors)
        young, middle, old = gc.get_threshold()
        if 0 < young < _GC_YOUNG_THRESHOLD:
            gc.set_threshold(_GC_YOUNG_THRESHOLD, middle, old)


@dataclass(slots=True)
class Cell:
    uuid: str
    name: str
    database_connection: str
    disabled: bool = False


class _CellHealth:
    """Whether one cell answers, and what has been logged about it.

    A read fails when it raises or runs longer than ``cell_timeout`` (found in flight that
    long by a request, or ending that late). The first failure is logged (WARNING, naming the
    cell), then at most one reminder every ``interval`` seconds while the cell keeps failing
    (for how long, how many reads failed), and once when a read answers in time again (INFO).
    Everything else, such as each request served without the cell, is logged at DEBUG.
    """

    __slots__ = (
        "failing_since",
        "failures",
        "reminded_at",
        "reading_since",
        "errored",
        "last_ok_at",
        "_counted",
        "_lock",
    )

    def __init__(self) -> None:
        self.failing_since: float | None = None  # time.monotonic() of the first failure
        self.failures = 0  # failed reads since then
        self.reminded_at = 0.0  # time.monotonic() of the last WARNING about it
        self.reading_since: float | None = None  # start of the read in flight
        # the last read that ended raised (the database refused or dropped us): its hosts are
        # not served as last read while another read tries again
        self.errored = False
        self.last_ok_at: float | None = None  # time.time() when the last good read ended
        self._counted = False  # the read in flight is counted as failed already
        self._lock = threading.Lock()

    def read_started(self) -> None:
        with self._lock:
            self.reading_since = time.monotonic()
            self._counted = False

    def read_ended(
        self,
        cell: Cell,
        timeout: float,
        interval: float,
        request_id: str | None,
        exc: BaseException | None = None,
    ) -> None:
        with self._lock:
            now = time.monotonic()
            took = now - (self.reading_since or now)
            count = not self._counted
            self.reading_since, self._counted = None, False
            self._ended(cell, now, took, timeout, interval, request_id, exc, count)

    def request_read_ended(
        self,
        cell: Cell,
        took: float,
        timeout: float,
        interval: float,
        request_id: str | None,
        exc: BaseException | None = None,
    ) -> None:
        """A request's own read of the cell's changes ended (``took`` seconds). Such reads
        run beside the refresher's and each other's, so they leave the read in flight
        alone."""
        with self._lock:
            now = time.monotonic()
            # while another read is stuck, one that answers does not end the failure
            stuck = self.reading_since is not None and now - self.reading_since > timeout
            self._ended(
                cell, now, took, timeout, interval, request_id, exc, True, recover=not stuck
            )

    def _ended(
        self,
        cell: Cell,
        now: float,
        took: float,
        timeout: float,
        interval: float,
        request_id: str | None,
        exc: BaseException | None,
        count: bool,
        *,
        recover: bool = True,
    ) -> None:
        self.errored = exc is not None
        if exc is not None:
            first = f"Error reading cell {cell.name} ({cell.uuid}){_req(request_id)}: {exc}"
            self._failed(cell, now, interval, first, f"error: {exc}", request_id, count, "error")
            return
        if took > timeout:
            first = (
                f"Reading cell {cell.name} ({cell.uuid}) took {took:.1f} s: it did not "
                f"answer within cell_timeout ({timeout:.1f} s){_req(request_id)}"
            )
            reason = f"a read took {took:.1f} s, longer than cell_timeout"
            self._failed(cell, now, interval, first, reason, request_id, count, "timeout")
            return
        self.last_ok_at = time.time()
        if self.failing_since is not None and recover:
            LOG.info(
                "Cell %s (%s) answers again after %.1f s (%d failed read(s))",
                cell.name,
                cell.uuid,
                now - self.failing_since,
                self.failures,
            )
            self.failing_since, self.failures, self.reminded_at = None, 0, 0.0

    def timed_out(
        self, cell: Cell, timeout: float, interval: float, request_id: str | None, *, waited: bool
    ) -> bool:
        """A request found the read in flight for longer than ``timeout`` (``waited``: it
        waited that long for it, and skips the cell). Counts the read as failed, once."""
        with self._lock:
            now = time.monotonic()
            if not waited and (self.reading_since is None or now - self.reading_since <= timeout):
                return False
            count, self._counted = not self._counted, True
            if waited:
                first = (
                    f"Timed out after {timeout:.1f} s waiting for cell {cell.name} "
                    f"({cell.uuid}): it did not answer within cell_timeout; skipping its "
                    f"hosts{_req(request_id)}"
                )
            else:
                first = (
                    f"Cell {cell.name} ({cell.uuid}) did not answer within cell_timeout "
                    f"({timeout:.1f} s): a read has been in flight for "
                    f"{now - (self.reading_since or now):.1f} s{_req(request_id)}"
                )
            reason = f"did not answer within cell_timeout ({timeout:.1f} s)"
            self._failed(cell, now, interval, first, reason, request_id, count, "timeout")
            return True

    def _failed(
        self,
        cell: Cell,
        now: float,
        interval: float,
        first: str,
        reason: str,
        request_id: str | None,
        count: bool,
        kind: str,
    ) -> None:
        """A failed read (``kind``: error or timeout): logged, and counted in the metrics
        unless ``count`` is False (this read was counted already)."""
        if count:
            metrics.M.cell_read_failures.labels(cell=cell.name, reason=kind).inc()
        if self.failing_since is None:
            self.failing_since = self.reminded_at = now
            self.failures = 1
            LOG.warning("%s", first)
            return
        self.failures += count
        if now - self.reminded_at >= interval:
            self.reminded_at = now
            LOG.warning(
                "Cell %s (%s) has been failing for %.0f s, %d failed read(s); last: %s%s",
                cell.name,
                cell.uuid,
                now - self.failing_since,
                self.failures,
                reason,
                _req(request_id),
            )
        else:
            LOG.debug(
                "Cell %s (%s) still failing (%d failed read(s)): %s%s",
                cell.name,
                cell.uuid,
                self.failures,
                reason,
                _req(request_id),
            )


def _req(request_id: str | None) -> str:
    return f" (request {request_id})" if request_id else ""


class _FreshReads:
    """Reads in flight, by key, each with the time (``time.monotonic()``) it was started.

    A request must see every change committed before it arrived: it joins a read of the
    same key started at or after its arrival (in flight, or done), else starts its own.
    Concurrent requests therefore share one read rather than queue one each, and a request
    never takes a read that began before it arrived. A read in flight for longer than
    ``stuck_after`` (a cell that does not answer) is joined by everyone rather than piled
    up behind, so that a stuck cell cannot fill the thread pool."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reads: dict[Any, tuple[float, concurrent.futures.Future]] = {}

    def get(
        self,
        key: Any,
        not_before: float,
        start: Callable[[], concurrent.futures.Future],
        stuck_after: float | None = None,
    ) -> concurrent.futures.Future:
        with self._lock:
            now = time.monotonic()
            found = self._reads.get(key)
            if found is not None:
                started, fut = found
                if started >= not_before:
                    return fut
                if stuck_after is not None and not fut.done() and now - started > stuck_after:
                    return fut
            fut = start()
            self._reads[key] = (now, fut)
            if found is not None and isinstance(found[1], _InlineRead):
                # sent, and maybe asked for by nobody (its request failed first): receive
                # and apply it on the pool, which returns its connection
                found[1].settle()
            return fut

    def run(self, key: Any, not_before: float, work: Callable[[], Any]) -> Any:
        """``work()`` in this thread, unless a call of it started at or after
        ``not_before`` can be joined; its result (or exception) either way."""
        mine: list[concurrent.futures.Future] = []

        def start() -> concurrent.futures.Future:
            mine.append(concurrent.futures.Future())
            return mine[0]

        fut = self.get(key, not_before, start)
        if mine:
            try:
                fut.set_result(work())
            except BaseException as exc:
                fut.set_exception(exc)
        return fut.result()


class _InlineRead(concurrent.futures.Future):
    """A read whose statements were sent when the request arrived (``db.read_ahead``): the
    first thread that wants its result receives and applies it, on that thread, rather than
    a worker thread that would wait for the interpreter lock after each round trip. A
    thread whose deadline passes before the answers arrive hands the rest to the pool, so
    a database that does not answer is waited for no longer than a read on the pool is."""

    def __init__(
        self,
        work: Callable[[], Any],
        arrived: Callable[[float], bool],
        pool: concurrent.futures.Executor,
    ):
        super().__init__()
        self._work = work
        self._arrived = arrived
        self._pool = pool
        self._claim = threading.Lock()

    def run_here(self, deadline: float | None = None) -> None:
        """Receive and apply the read now, unless another thread does (or did); with a
        ``deadline`` (``time.monotonic()``), only if the answers arrive by then, else on
        the pool."""
        if not self._claim.acquire(blocking=False):
            return
        if deadline is not None and not self._arrived(deadline):
            self._pool.submit(self._run)
            return
        self._run()

    def settle(self) -> None:
        """Receive and apply it on the pool unless a thread has already taken it."""
        if not self.done() and not self._claim.locked():
            self._pool.submit(self.run_here)

    def _run(self) -> None:
        try:
            self.set_result(self._work())
        except BaseException as exc:
            self.set_exception(exc)

    def result(self, timeout: float | None = None) -> Any:
        self.run_here(None if timeout is None else time.monotonic() + timeout)
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self.run_here(None if timeout is None else time.monotonic() + timeout)
        return super().exception(timeout)


class _SentRead(NamedTuple):
    """A request's read of a cell sent on arrival: the statements' parameters with them."""

    ahead: read_ahead.ReadAhead
    band: tuple[datetime.datetime, datetime.datetime]
    since: datetime.datetime


@dataclass(slots=True)
class _CellView:
    """What we hold of one cell: its HostStates and how far we have read it."""

    cell: Cell
    # by compute-node uuid. Copy-on-write: a read that adds or removes hosts publishes a new
    # dict, so a request iterates the one it got without a copy and without the lock.
    hosts: dict[str, HostState] = field(default_factory=dict)
    services: dict[str, dict[str, Any]] = field(default_factory=dict)  # by host name
    # the hosts that have a service record (those a request may get), by uuid; rebuilt
    # with ``hosts`` or when a service comes or goes, never modified once published
    servable: dict[str, HostState] = field(default_factory=dict)
    # (our clock) when the last successful window read started; None until the first one
    read_started_at: datetime.datetime | None = None
    # (our clock) when the last successful read of compute-node reports started
    nodes_read_started_at: datetime.datetime | None = None
    # the compute-node rows of the last reads, by uuid: the next read re-reads the slack
    # window, and a row equal to the one applied then is not applied again. Rows reported
    # before ``recent_cutoff`` (how far back the next window read goes) are dropped.
    recent_rows: dict[str, queries.ComputeNodeRow] = field(default_factory=dict)
    recent_cutoff: datetime.datetime | None = None
    # bumped whenever a service row changes in more than its heartbeat; the lowest
    # nova-compute version as of such a generation (``minimum_compute_version``)
    services_generation: int = 0
    min_version: tuple[int, int | None] | None = None
    window_read_at: float = 0.0  # time.monotonic() of the last window read
    full_read_at: float = 0.0  # time.monotonic() of the last whole read
    lock: threading.Lock = field(default_factory=threading.Lock)
    health: _CellHealth = field(default_factory=_CellHealth)
    # ``hosts`` by host name, and the ``hosts`` dict it was built from (rebuilt when a read
    # publishes a new one): nova-compute's delete_instance_info casts look hosts up by name
    host_index: tuple[dict[str, HostState], dict[str, list[HostState]]] | None = None
    # the hosts whose services held are disabled or forced down, as of ``flags_generation``
    # (a services_generation), and those of the database's exceptional services at the last
    # request's read: what a request re-reads when the database no longer names them
    flagged: frozenset[str] | None = None
    flags_generation: int = -1
    exceptions: dict[str, tuple[bool, bool, datetime.datetime | None]] = field(default_factory=dict)
    exceptions_digest: tuple[tuple[int, ...], ...] | None = None
    # (services_generation, exceptions, heartbeat slots outside the band, the held hosts
    # not among the exceptions) of the last request's read: _held_not_exceptional
    not_exceptional: tuple[int, Any, Any, frozenset[str]] | None = None
    # host -> time.monotonic() when a request's read applied its service record: the
    # refresher's reads that began earlier leave that record alone
    services_fixed_at: dict[str, float] = field(default_factory=dict)


class _CellRead(NamedTuple):
    """One cell's answer to one request: its view and its HostStates at that moment."""

    view: _CellView
    hosts: dict[str, HostState]
    servable: dict[str, HostState]


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
        self._views: dict[str, _CellView] = {}
        # the HostStates of every cell as columns, for the batch filters and weighers
        self.table = HostTable()
        self._views_lock = threading.Lock()
        self._aggregates: dict[int, Aggregate] = {}
        self._host_aggregates: dict[str, list[Aggregate]] = {}
        self._aggregates_loaded_at = 0.0
        self._aggregates_lock = threading.Lock()
        # the reads requests share: per (cell, window) and the aggregates' check
        self._fresh = _FreshReads()
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
        # seconds between two reminders that a cell is still failing (_CellHealth)
        self.cell_failure_log_interval = 60.0
        # per-host instance lists kept current by nova-compute's casts (nova's _instance_info)
        self.instance_tracker = InstanceTracker(conf, loader=self._read_host_instances)
        # Set by the driver when a plugin needs more than the uuids of the instances on every
        # host (TypeAffinityFilter: their flavor; ImagePropertiesWeigher: their image
        # properties): instances are then read, with those details, for every request.
        self.instance_details = False
        # the refresher thread (start_refresher), and what stops it
        self._refresher: threading.Thread | None = None
        self._stopping = threading.Event()
        # where each consumption of ours is counted: key (instance uuid) -> ((cell uuid,
        # compute-node uuid), ...), for nova's casts, Placement's view and the sweep
        # (``track_consumption``; entries released elsewhere are dropped by the sweep)
        self._consumed: dict[str, tuple[tuple[str | None, str], ...]] = {}
        self._consumed_lock = threading.Lock()
        self._next_sweep = 0.0
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
        return _InlineRead(work, ahead.wait, self._executor)

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
        out = []
        for agg in self._aggregates.values():
            for k, v in agg.metadata.items():
                if key is not None and k != key:
                    continue
                if key_prefix is not None and not k.startswith(key_prefix):
                    continue
                if value is not None and v != value:
                    continue
                out.append(agg)
                break
        return out

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

    def _view(self, cell: Cell) -> _CellView:
        with self._views_lock:
            view = self._views.get(cell.uuid)
            if view is None:
                view = self._views[cell.uuid] = _CellView(cell=cell)
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
            except Exception as exc:  # logged by the cell's _CellHealth
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

    def start_refresher(self) -> None:
        """Read every enabled cell's change window (and, every five minutes, the whole cell)
        on a thread of its own, every ``service_refresh_interval`` seconds, so that requests
        do not. Nothing to do when the interval is 0 (every request reads everything)."""
        if self.window_read_interval <= 0 or self._refresher is not None:
            return
        install_gc_policy()
        self._stopping.clear()
        self._refresher = threading.Thread(
            target=self._refresh_loop, name="host-refresh", daemon=True
        )
        self._refresher.start()

    def _refresh_loop(self) -> None:
        while not self._stopping.wait(self.window_read_interval):
            for cell in list(self.enabled_cells.values()):
                if self._stopping.is_set():
                    return
                try:
                    self._refresh_cell(cell, window=True, background=True)
                except Exception as exc:  # the next round tries again; requests go on
                    # (logged once, with reminders, by the cell's _CellHealth)
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

    def _refresh_cell(
        self,
        cell: Cell,
        window: bool = False,
        *,
        wait: bool = True,
        request_id: str | None = None,
        background: bool = False,
    ) -> _CellRead:
        """Read what changed in one cell and apply it to its HostStates.

        ``window`` forces a read of the whole change window (services, creations,
        deletions) even if the last one is recent. Without ``wait``, a cell that has been
        read before and is being read right now (by the refresher, or another request) is
        returned as it is, without a read of its own. Returns the cell's view and its
        HostStates at that moment (a dict no one modifies), so callers can iterate it while
        another request refreshes the same cell. The cell's ``_CellHealth`` logs what fails:
        a read that raises or runs longer than ``cell_timeout``, even one not waited for.
        ``background``: the refresher thread's read, which gives way to requests
        (``_Pacer``).
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
            return _CellRead(view, view.hosts, view.servable)
        try:
            view.health.read_started()
            try:
                read = self._read_cell(view, cell, window, _Pacer() if background else _no_pause)
            except Exception as exc:
                view.health.read_ended(cell, timeout, interval, request_id, exc)
                raise
            view.health.read_ended(cell, timeout, interval, request_id)
            return read
        finally:
            view.lock.release()

    def _request_read(
        self, cell: Cell, request_id: str | None = None, sent: _SentRead | None = None
    ) -> _CellRead:
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
        return _CellRead(view, view.hosts, view.servable)

    def _sendable(self, view: _CellView) -> bool:
        """Whether a request's read of this cell is the two statements ``_request_read``
        runs (not a whole or window read)."""
        if view.read_started_at is None or view.health.errored:
            return False
        return self._refreshing() or (
            time.monotonic() - view.window_read_at < self.window_read_interval
        )

    def _send_cell_read(self, cell: Cell) -> _SentRead | None:
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
        return _SentRead(ahead, band, since)

    def _apply_request_read(
        self,
        view: _CellView,
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

    def _apply_services(self, view: _CellView, cell: Cell, rows: list[queries.ServiceRow]) -> bool:
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
        view: _CellView,
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
    def _held_flagged(view: _CellView) -> frozenset[str]:
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
        self, view: _CellView, cell: Cell, window: bool, pause: Callable[[], None] = _no_pause
    ) -> _CellRead:
        """The read of ``_refresh_cell``, under the view's lock. ``pause`` is called between
        the queries and between rows (``_Pacer``)."""
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
            since = None if full else view.read_started_at - _WATERMARK_SLACK
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
            slack = _REPORT_SLACK if self._refreshing() else _WATERMARK_SLACK
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
        self._remember_rows(view, nodes, view.read_started_at - _WATERMARK_SLACK)
        return _CellRead(view, view.hosts, view.servable)

    @staticmethod
    def _remember_rows(
        view: _CellView, nodes: list[queries.ComputeNodeRow], cutoff: datetime.datetime
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
        view: _CellView,
        services: list[queries.ServiceRow],
        nodes: list[queries.ComputeNodeRow],
        pause: Callable[[], None] = _no_pause,
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
        view: _CellView,
        services: list[queries.ServiceRow],
        nodes: list[queries.ComputeNodeRow],
        pause: Callable[[], None] = _no_pause,
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
        self, view: _CellView, hosts: dict[str, HostState], row: queries.ComputeNodeRow
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
        (``_FreshReads``: they started after the request arrived). A second call joins
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
                return _InlineRead(work, sent.ahead.wait, self._executor)

        return self._fresh.get(
            (cell.uuid, window), not_before, start, stuck_after=self.conf.scheduler.cell_timeout
        )

    def _scatter_gather(
        self,
        cells: list[Cell],
        request_id: str | None = None,
        window: bool = False,
        not_before: float | None = None,
    ) -> list[_CellRead]:
        """Refresh these cells in parallel; those that fail or time out are left out.
        ``window``: read each cell's whole change window (see ``_refresh_cell``). Each
        cell's answer includes every change committed before ``not_before``
        (``time.monotonic()``; default: now), the request's arrival: a read of the cell
        started since then is shared, else one is started (``_FreshReads``)."""
        if not cells:
            return []
        timeout = self.conf.scheduler.cell_timeout
        if not_before is None:
            not_before = time.monotonic()
        futures = {self._cell_read(cell, window, not_before, request_id): cell for cell in cells}
        deadline = time.monotonic() + timeout
        for fut in futures:
            if isinstance(fut, _InlineRead):
                fut.run_here(deadline)
        left = max(0.0, deadline - time.monotonic())
        done, not_done = concurrent.futures.wait(futures, timeout=left)
        reads: list[_CellRead] = []
        # a failing cell is logged by its _CellHealth: once when it fails, at most every
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
                    _req(request_id),
                    exc,
                )
                continue
            reads.append(fut.result())
        return reads

    def _load_instances(self, views: list[_CellView], hosts: list[HostState]) -> None:
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

    def forget_consumption(self, host_states: Iterable[HostState]) -> None:
        """Stop counting every consumption of this scheduler on these HostStates (a rollback
        that cannot name its instances; a rollback that can releases just those with
        ``HostState.release_consumption``). No database read: each host keeps its last
        report as the base of its consumption."""
        for hs in host_states:
            hs.release_consumption(None, "rollback")

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
        refresher = self._refresher
        return refresher is not None and refresher.is_alive()

    def stop(self) -> None:
        self._stopping.set()
        refresher, self._refresher = self._refresher, None
        if refresher is not None and refresher is not threading.current_thread():
            refresher.join(timeout=5)
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


def _hosts_named(view: _CellView, host: str) -> list[HostState]:
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
