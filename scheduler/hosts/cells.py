"""The cells the host manager reads, and the machinery of one read of a cell.

- ``Cell``: a cell mapping of nova's API database; ``CellReadFailed``: a cell whose last read
  failed, asked for while another read of it runs.
- ``CellHealth``: whether one cell answers within ``cell_timeout``, and what has been logged
  about it (once when it fails, reminders while it keeps failing, once when it recovers).
- ``Pacer`` / ``no_pause``: what a read calls between rows: the refresher thread's read gives
  the GIL away once a millisecond, so that a request waiting for it goes first; a request's
  read does not give way.
- ``FreshReads``: the reads in flight by key, so that concurrent requests share one read
  started after they arrived instead of queueing one each; ``InlineRead``: a read whose
  statements were sent on the request's arrival (``db.read_ahead``), received and applied by
  the first thread that wants it; ``SentRead``: what such a read sent.
- ``CellView``: what the host manager holds of one cell (its HostStates, its service rows, how
  far it has been read); ``CellRead``: one cell's answer to one request.

The reads themselves, and what they apply, are ``CellReads``' (``cell_reads.py``).
"""

from __future__ import annotations

import concurrent.futures
import datetime
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from db import queries, read_ahead
from scheduler.hosts.state import HostState
from scheduler.telemetry import metrics

# the host manager's logger: what operators filter cell failures by
LOG = logging.getLogger("scheduler.hosts.manager")


@dataclass(slots=True)
class Cell:
    """A cell of nova's API database (cell mappings): where its database is, and
    whether it is disabled."""

    uuid: str
    name: str
    database_connection: str
    disabled: bool = False


class CellReadFailed(RuntimeError):
    """A cell whose last read failed, asked for while another read of it runs."""


class CellHealth:
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
            first = f"Error reading cell {cell.name} ({cell.uuid}){for_request(request_id)}: {exc}"
            self._failed(cell, now, interval, first, f"error: {exc}", request_id, count, "error")
            return
        if took > timeout:
            first = (
                f"Reading cell {cell.name} ({cell.uuid}) took {took:.1f} s: it did not "
                f"answer within cell_timeout ({timeout:.1f} s){for_request(request_id)}"
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
                    f"hosts{for_request(request_id)}"
                )
            else:
                first = (
                    f"Cell {cell.name} ({cell.uuid}) did not answer within cell_timeout "
                    f"({timeout:.1f} s): a read has been in flight for "
                    f"{now - (self.reading_since or now):.1f} s{for_request(request_id)}"
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
                for_request(request_id),
            )
        else:
            LOG.debug(
                "Cell %s (%s) still failing (%d failed read(s)): %s%s",
                cell.name,
                cell.uuid,
                self.failures,
                reason,
                for_request(request_id),
            )


def for_request(request_id: str | None) -> str:
    """`` (request <id>)`` for a log line, or nothing without a request id."""
    return f" (request {request_id})" if request_id else ""


# The refresher thread's reads hand the GIL over this often (seconds of their own work; see
# Pacer).
_BACKGROUND_SLICE = 0.001


class Pacer:
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


def no_pause() -> None:
    """The pacer of a read on a request's behalf: it does not give way."""


class FreshReads:
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
            if found is not None and isinstance(found[1], InlineRead):
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


class InlineRead(concurrent.futures.Future):
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


class SentRead(NamedTuple):
    """A request's read of a cell sent on arrival: the statements' parameters with them."""

    ahead: read_ahead.ReadAhead
    band: tuple[datetime.datetime, datetime.datetime]
    since: datetime.datetime


@dataclass(slots=True)
class CellView:
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
    health: CellHealth = field(default_factory=CellHealth)
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


class CellRead(NamedTuple):
    """One cell's answer to one request: its view and its HostStates at that moment."""

    view: CellView
    hosts: dict[str, HostState]
    servable: dict[str, HostState]
