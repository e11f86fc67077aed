"""The host manager's refresher thread: keeps the cells current off the request path.

Every ``[scheduler] service_refresh_interval`` seconds it reads each enabled cell's change
window (services: heartbeats, enable/disable, forced down; compute nodes created or
soft-deleted; the whole cell every five minutes), then, with ``read_your_writes``, checks the
aggregates with the count of their hosts that requests' checks leave out, and sweeps expired
consumption when the sweep is due. Requests then read only compute-node reports.

The reads and what they apply are the host manager's (``HostManager.background_round``:
``CellReads``' reads, the ``AggregateCache``'s check, the ``ConsumptionLedger``'s sweep;
requests share them); ``Refresher`` owns only the thread, and knows nothing of the manager:
starting it, its loop, telling whether it runs, and stopping it. Its reads give way to requests
(``cells.Pacer``). Starting it installs the process's GC policy (``gc_policy``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from scheduler.hosts.gc_policy import install_gc_policy

# the host manager's logger: what operators filter the refresher's messages by
LOG = logging.getLogger("scheduler.hosts.manager")


class Refresher:
    """The refresher thread of one host manager, which hands it ``interval`` (the seconds
    between two rounds, read at each round; 0: no thread) and ``round`` (one round of reads,
    given the event that says the thread is stopping), and delegates ``start_refresher``
    and ``stop`` to it."""

    def __init__(
        self, interval: Callable[[], float], round: Callable[[threading.Event], None]
    ) -> None:
        self.interval = interval
        self.round = round
        # the thread while it runs (``start``), and what stops it
        self.thread: threading.Thread | None = None
        self._stopping = threading.Event()

    def start(self) -> None:
        """Run a round on a thread of its own every ``interval()`` seconds, so that
        requests do not. Nothing to do when the interval is 0 (every request reads
        everything)."""
        if self.interval() <= 0 or self.thread is not None:
            return
        install_gc_policy()
        self._stopping.clear()
        self.thread = threading.Thread(target=self._loop, name="host-refresh", daemon=True)
        self.thread.start()

    def running(self) -> bool:
        thread = self.thread
        return thread is not None and thread.is_alive()

    def stop(self) -> None:
        self._stopping.set()
        thread, self.thread = self.thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stopping.wait(self.interval()):
            try:
                self.round(self._stopping)
            except Exception:  # the next round tries again; requests go on
                LOG.exception("The host refresher's round failed")
