"""The decision recorder: takes a record on the request's thread, writes it on its own.

``record()`` puts the record on a bounded queue (``[decision_records] queue_size``) and
returns at once. It never waits and never raises: when the queue is full the record is
dropped and counted (``novasched_decision_records_total{result="dropped"}``), because a slow
store must not slow a boot. A writer thread takes up to ``batch_size`` records at a time
and writes each batch in one transaction. When the store fails, the batch's records are
counted ``failed`` and lost, the outage is logged once (ERROR) and its end once (INFO), and
the writer goes on with the next batch.

The writer also keeps the store bounded: every ``prune_interval`` seconds, and after every
``prune_every`` records it wrote, it deletes what is older than ``max_age`` and the oldest
beyond ``max_records``, a bounded amount per round (``DecisionStore.prune``), so a burst
leaves at most about ``prune_every`` plus a batch per writing process above the limit, and
``flush`` leaves none.

Each process needs its own recorder: the service makes one per worker, after the fork. A
recorder that a fork copies into a child starts over there, with an empty queue, its own
connections and a writer thread of its own, started by the child's first record.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
import weakref
from typing import Any

import sqlalchemy as sa

from scheduler.conf import CONF
from scheduler.records.record import DecisionRecord
from scheduler.records.store import DecisionStore, StoreError, first_line, safe_url
from scheduler.telemetry import metrics

LOG = logging.getLogger(__name__)

DEFAULT_FILE = "novasched-decisions.sqlite"
BATCH_SIZE = 200  # records per transaction
PRUNE_INTERVAL = 10.0  # seconds between two retention rounds, at most
PRUNE_EVERY = 1000  # records written between two retention rounds, at most
DROP_LOG_INTERVAL = 60.0  # seconds between two "dropped" warnings
STOP_TIMEOUT = 10.0

# every recorder of this process, to start over in a forked child
_RECORDERS: weakref.WeakSet[DecisionRecorder] = weakref.WeakSet()


class _Marker:
    """Put in the queue by ``flush``: set once everything queued before it is written."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = threading.Event()


class DecisionRecorder:
    """Records decisions off the request path (see the module's doc).

    ``store`` is a DecisionStore (or anything with its ``add``, ``prune`` and
    ``after_fork``). ``max_age`` (seconds) and ``max_records`` are the retention; None
    keeps everything on that count. ``written``, ``dropped`` and ``failed`` count this
    process's records as the metric does.
    """

    def __init__(
        self,
        store: Any,
        *,
        queue_size: int = 10_000,
        max_age: float | None = None,
        max_records: int | None = None,
        batch_size: int = BATCH_SIZE,
        prune_interval: float = PRUNE_INTERVAL,
        prune_every: int | None = None,
    ):
        self.store = store
        self.queue_size = queue_size
        self.max_age = max_age
        self.max_records = max_records
        self.batch_size = batch_size
        self.prune_interval = prune_interval
        if prune_every is None:
            # a tenth of the table, so a small one is not overshot by a whole thousand
            tenth = max_records // 10 if max_records else PRUNE_EVERY
            prune_every = min(PRUNE_EVERY, max(batch_size, tenth))
        self.prune_every = prune_every
        self._stopping = False
        self._reset()
        _RECORDERS.add(self)
        self._start()

    def _reset(self) -> None:
        """Everything a process owns alone: the queue, the locks, the thread, the counts."""
        self.written = self.dropped = self.failed = 0
        self._queue: queue.Queue[DecisionRecord | _Marker] = queue.Queue(self.queue_size)
        self._start_lock = threading.Lock()
        self._drop_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._halt = threading.Event()
        self._dropped_unlogged = 0
        self._drop_logged_at: float | None = None
        self._outage_since: float | None = None
        self._lost_in_outage = 0
        self._prune_failing = False
        self._prune_more = False
        self._since_prune = 0
        self._next_prune = time.monotonic() + self.prune_interval

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None and not self._stopping:
                thread = threading.Thread(target=self._run, name="decision-records", daemon=True)
                thread.start()
                self._thread = thread

    def _after_fork(self) -> None:
        """In a forked child: the parent's queue, locks and thread are not ours."""
        self._reset()
        try:
            self.store.after_fork()
        except Exception:  # never let a fork fail on us
            LOG.debug("Could not reset the decision store after a fork", exc_info=True)

    # ------------------------------------------------------------------- request side

    def record(self, rec: DecisionRecord) -> bool:
        """Queue ``rec`` for writing: True, or False when it was dropped (a full queue, a
        stopped recorder). Never blocks, never raises. The record is the recorder's now."""
        try:
            if self._thread is None:
                self._start()  # the first record of a forked child
            if self._stopping or not isinstance(rec, DecisionRecord):
                self._drop(full=False)
                return False
            self._queue.put_nowait(rec)
            return True
        except queue.Full:
            self._drop(full=True)
            return False
        except Exception:
            LOG.debug("Could not queue a decision record", exc_info=True)
            return False

    def _drop(self, full: bool) -> None:
        try:
            metrics.M.decision_records.labels(result="dropped").inc()
            with self._drop_lock:
                self.dropped += 1
                if not full:
                    return
                self._dropped_unlogged += 1
                now = time.monotonic()
                last = self._drop_logged_at
                if last is not None and now - last < DROP_LOG_INTERVAL:
                    return
                count, self._dropped_unlogged, self._drop_logged_at = self._dropped_unlogged, 0, now
            LOG.warning(
                "Dropped %d decision record(s)%s: the writer's queue is full ([decision_records] "
                "queue_size = %d) because %s does not keep up; requests are not slowed",
                count,
                "" if last is None else f" in the last {now - last:.0f} s",
                self.queue_size,
                self.store,
            )
        except Exception:  # counting must not fail a request either
            pass

    # ------------------------------------------------------------------- control

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every record queued before this call is written (or failed) and the
        retention is applied in full; False if that took longer than ``timeout``."""
        if self._thread is None:
            self._start()
        thread = self._thread
        if thread is None or not thread.is_alive():
            return self._queue.empty()
        marker = _Marker()
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            self._queue.put(marker, timeout=timeout)
        except queue.Full:
            return False
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        return marker.done.wait(left)

    def stop(self, timeout: float = STOP_TIMEOUT) -> bool:
        """Write what is queued, then end the writer thread; later records are dropped.
        False if the writer did not finish within ``timeout`` (what it still held is lost
        with the process)."""
        deadline = time.monotonic() + timeout
        flushed = self.flush(timeout)
        self._stopping = True
        self._halt.set()
        try:
            self._queue.put_nowait(_Marker())  # wake the writer if it waits for records
        except queue.Full:
            pass
        thread = self._thread
        if thread is not None:
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                return False
        while True:  # records queued between the flush and the halt
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, _Marker):
                item.done.set()
            else:
                self._drop(full=False)
        return flushed

    def status(self) -> dict[str, Any]:
        """What the recorder has done, for a report."""
        return {
            "store": str(self.store),
            "queued": self._queue.qsize(),
            "written": self.written,
            "dropped": self.dropped,
            "failed": self.failed,
            "failing": self._outage_since is not None,
        }

    # ------------------------------------------------------------------- writer thread

    def _run(self) -> None:
        while True:
            batch, markers = self._take()
            try:
                if batch:
                    self._write(batch)
                if markers:
                    self._retention(complete=True)
                elif self._retention_due():
                    self._retention(complete=False)
            except Exception:  # never let the writer die: the next batch tries again
                LOG.exception("Unexpected error in the decision records' writer")
            for marker in markers:
                marker.done.set()
            if self._halt.is_set() and not batch and self._queue.empty():
                return

    def _take(self) -> tuple[list[DecisionRecord], list[_Marker]]:
        """Up to ``batch_size`` records, waiting for the first no longer than the next
        retention round; a marker ends the batch."""
        batch: list[DecisionRecord] = []
        markers: list[_Marker] = []
        wait = 0.0 if self._prune_more else self._next_prune - time.monotonic()
        try:
            item = self._queue.get(timeout=wait) if wait > 0 else self._queue.get_nowait()
        except queue.Empty:
            return batch, markers
        while True:
            if isinstance(item, _Marker):
                markers.append(item)
                break
            batch.append(item)
            if len(batch) >= self.batch_size:
                break
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
        return batch, markers

    def _write(self, batch: list[DecisionRecord]) -> None:
        try:
            self.store.add(batch)
        except Exception as exc:
            self.failed += len(batch)
            metrics.M.decision_records.labels(result="failed").inc(len(batch))
            if self._outage_since is None:
                self._outage_since = time.monotonic()
                self._lost_in_outage = 0
                LOG.error(
                    "Could not write %d decision record(s) to %s: %s. Records are lost until "
                    "it answers again; scheduling goes on",
                    len(batch),
                    self.store,
                    first_line(exc),
                    exc_info=not isinstance(exc, sa.exc.SQLAlchemyError),
                )
            else:
                LOG.debug("Still cannot write decision records: %s", first_line(exc))
            self._lost_in_outage += len(batch)
            return
        self.written += len(batch)
        self._since_prune += len(batch)
        metrics.M.decision_records.labels(result="written").inc(len(batch))
        if self._outage_since is not None:
            LOG.info(
                "Decision records are written to %s again after %.0f s; %d record(s) were lost",
                self.store,
                time.monotonic() - self._outage_since,
                self._lost_in_outage,
            )
            self._outage_since = None

    def _retention_due(self) -> bool:
        return (
            self._prune_more
            or self._since_prune >= self.prune_every
            or time.monotonic() >= self._next_prune
        )

    def _retention(self, complete: bool) -> None:
        """One round of pruning (``complete``: until nothing is left to delete). Skipped
        while the store refuses writes: the outage is logged already."""
        self._since_prune = 0
        self._next_prune = time.monotonic() + self.prune_interval
        if self.max_age is None and self.max_records is None:
            return
        if self._outage_since is not None:
            self._prune_more = False
            return
        deleted = 0
        try:
            while True:
                pruned = self.store.prune(max_age=self.max_age, max_records=self.max_records)
                deleted += pruned.deleted
                if not (complete and pruned.more):
                    break
        except Exception as exc:
            self._prune_more = False
            if not self._prune_failing:
                LOG.warning(
                    "Could not delete old decision records from %s: %s; trying again in %.0f s",
                    self.store,
                    first_line(exc),
                    self.prune_interval,
                )
            self._prune_failing = True
            return
        if self._prune_failing:
            LOG.info("Old decision records are deleted from %s again", self.store)
        self._prune_failing = False
        self._prune_more = pruned.more
        if deleted:
            LOG.debug("Deleted %d old decision record(s) from %s", deleted, self.store)


def _after_fork_in_child() -> None:
    for recorder in list(_RECORDERS):
        recorder._after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)


# ------------------------------------------------------------------------- from options


def store_url(conf: Any = None) -> str:
    """The store's URL: ``[decision_records] connection``, else the SQLite file
    ``novasched-decisions.sqlite`` in ``[DEFAULT] state_path``."""
    conf = CONF if conf is None else conf
    url = conf.decision_records.connection
    if url:
        return url
    return "sqlite:///" + os.path.join(conf.state_path, DEFAULT_FILE)


def store_option(conf: Any = None) -> str:
    """The option an operator changes to point the store elsewhere."""
    conf = CONF if conf is None else conf
    if conf.decision_records.connection:
        return "[decision_records] connection"
    return "[DEFAULT] state_path (or [decision_records] connection)"


def recorder_from_conf(conf: Any = None) -> DecisionRecorder | None:
    """The recorder ``[decision_records]`` asks for, its store opened (tables created if
    missing); None when it is disabled or its store cannot be opened. The latter logs one
    ERROR naming the option to fix, and the scheduler goes on without records."""
    conf = CONF if conf is None else conf
    opts = conf.decision_records
    if not opts.enabled:
        LOG.info("Not recording decisions ([decision_records] enabled = false)")
        return None
    url = store_url(conf)
    try:
        store = DecisionStore(url)
    except Exception as exc:  # StoreError, or anything a driver raises on connect
        reason = str(exc) if isinstance(exc, StoreError) else first_line(exc)
        LOG.error(
            "Not recording decisions: cannot open the decision records' store %s: %s. Fix "
            "%s, or set [decision_records] enabled = false; scheduling goes on without records",
            safe_url(url),
            reason,
            store_option(conf),
        )
        return None
    recorder = DecisionRecorder(
        store,
        queue_size=opts.queue_size,
        max_age=opts.max_age,
        max_records=opts.max_records,
    )
    LOG.info(
        "Recording decisions in %s: kept %s s, at most %d record(s)",
        safe_url(url),
        opts.max_age,
        opts.max_records,
    )
    return recorder
