"""Records whose last part takes time: finished off the request's thread, then handed on.

A record of a NoValidHost the filters gave carries the smallest change that would have fitted
(``smallest_change``), a search of up to a second. ``Completions`` runs such a part on one
thread of its own after the reply, at most ``pending`` at a time (past that the part says it
was skipped), and then hands the record to the recorder. What the part raises is kept in it;
the record is handed on whatever happens.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import Any

from scheduler.records.record import DecisionRecord

LOG = logging.getLogger(__name__)

# parts waiting or running at once
PENDING = 4


class Completions:
    """One thread that finishes records (see the module docstring)."""

    def __init__(self, pending: int = PENDING):
        self._slots = threading.BoundedSemaphore(pending)
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    def submit(
        self,
        rec: DecisionRecord,
        key: str,
        compute: Callable[[], Any],
        then: Callable[[DecisionRecord], Any],
    ) -> None:
        """Set ``rec.document[key]`` to what ``compute()`` returns, on the pool's thread, then
        call ``then(rec)``; at once, with the part skipped, when ``pending`` are in hand."""
        if not self._slots.acquire(blocking=False):
            rec.document[key] = {"skipped": "too many searches at once"}
            then(rec)
            return
        try:
            self._executor().submit(self._finish, rec, key, compute, then)
        except RuntimeError:  # shut down: the part is not computed
            self._slots.release()
            rec.document[key] = {"skipped": "the scheduler is stopping"}
            then(rec)

    def _finish(
        self,
        rec: DecisionRecord,
        key: str,
        compute: Callable[[], Any],
        then: Callable[[DecisionRecord], Any],
    ) -> None:
        try:
            rec.document[key] = compute()
        except Exception as exc:
            LOG.exception("Could not compute %s for request %s", key, rec.request_id)
            rec.document[key] = {"error": str(exc)[:200]}
        finally:
            self._slots.release()
            then(rec)

    def _executor(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="relaxations"
                )
            return self._pool

    def stop(self) -> None:
        """Finish what was submitted; take nothing more."""
        with self._lock:
            pool = self._pool
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=False)
