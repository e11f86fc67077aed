"""The host manager's refresher thread: keeps the cells current off the request path.

Every ``[scheduler] service_refresh_interval`` seconds it reads each enabled cell's change
window (services: heartbeats, enable/disable, forced down; compute nodes created or
soft-deleted; the whole cell every five minutes), then, with ``read_your_writes``, checks the
aggregates with the count of their hosts that requests' checks leave out, and sweeps expired
consumption when the sweep is due. Requests then read only compute-node reports.

The reads and what they apply are the ``HostManager``'s (``_refresh_cell``: requests share
them); ``Refresher`` owns only the thread: starting it, its loop, telling whether it runs,
and stopping it. Its reads give way to requests (``cells.Pacer``). Starting it installs the
process's GC policy (``gc_policy``).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from scheduler.hosts.gc_policy import install_gc_policy

if TYPE_CHECKING:
    from scheduler.hosts.manager import HostManager

# the host manager's logger: what operators filter the refresher's messages by
LOG = logging.getLogger("scheduler.hosts.manager")


class Refresher:
    """The refresher thread of one ``HostManager`` (``manager``), which delegates
    ``start_refresher`` and ``stop`` to it."""

    def __init__(self, manager: HostManager) -> None:
        self.manager = manager
        # the thread while it runs (``start``), and what stops it
        self.thread: threading.Thread | None = None
        self._stopping = threading.Event()

    def start(self) -> None:
        """Read every enabled cell's change window (and, every five minutes, the whole cell)
        on a thread of its own, every ``service_refresh_interval`` seconds, so that requests
        do not. Nothing to do when the interval is 0 (every request reads everything)."""
        if self.manager.window_read_interval <= 0 or self.thread is not None:
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
        manager = self.manager
        while not self._stopping.wait(manager.window_read_interval):
            for cell in list(manager.enabled_cells.values()):
                if self._stopping.is_set():
                    return
                try:
                    manager._refresh_cell(cell, window=True, background=True)
                except Exception as exc:  # the next round tries again; requests go on
                    # (logged once, with reminders, by the cell's CellHealth)
                    LOG.debug("Could not refresh cell %s: %s", cell.name, exc)
            if manager.conf.scheduler.read_your_writes:
                try:  # what the requests' checks leave out: a host out of an aggregate
                    manager._check_aggregates(count_hosts=True)
                except Exception as exc:  # the next round tries again
                    LOG.debug("Could not check the aggregates: %s", exc)
            if time.monotonic() >= manager._next_sweep:
                try:
                    manager.expire_consumption()
                except Exception:  # the next round tries again
                    LOG.exception("Could not release expired consumption")
