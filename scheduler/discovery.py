"""Host discovery: nova's ``[scheduler] discover_hosts_in_cells_interval``, on the elected
scheduler.

nova 34's scheduler runs ``nova-manage cell_v2 discover_hosts``' work as a periodic task when
the option is 0 or more (every that many seconds, 0 meaning oslo.service's default of 60, and
once at start), but only on a leader: the lowest-sorted host among the ``nova-scheduler``
service rows that are up, read from the database of ``[database] connection``
(``scheduler/leader.py``). Every scheduler, nova's and ours, keeps such a row, so in a
deployment that mixes them the lowest host does the work, whichever it is.

The work, per cell but cell0: each compute node not yet mapped whose host has no host mapping
gets one in the API database, and the node is marked mapped (``db.discover_cell_hosts``). It
is idempotent: a second run finds nothing. nova logs ``Discovered N new hosts: cell:host,...``
at INFO; a discovery that meets a mapping someone else made at the same moment logs nova's
warning once ("This periodic task should only be enabled if discover hosts is not run via
nova-manage"), then at DEBUG.

A host's worker processes take turns through a lock file, so that they do not map the same
node at the same moment.
"""

from __future__ import annotations

import fcntl
import logging
import os
import tempfile
import threading
from typing import Any

import db
from scheduler.conf import database_connection
from scheduler.leader import read_leader

LOG = logging.getLogger(__name__)

# oslo.service's periodic task: a spacing of 0 runs at its default interval
DEFAULT_SPACING = 60.0


def interval_of(conf: Any) -> float | None:
    """Seconds between discoveries (None: off, nova's -1)."""
    value = conf.scheduler.discover_hosts_in_cells_interval
    if value is None or value < 0:
        return None
    return float(value) or DEFAULT_SPACING


def discover_hosts(api_engine: Any, cells: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Map every unmapped compute node of ``cells`` (cell0 left out); (cell name, host) of
    each host mapped."""
    found: list[tuple[str, str]] = []
    for cell in cells:
        if cell["uuid"] == db.CELL0_UUID or cell.get("template_error"):
            continue
        engine = db.get_engine(cell["database_connection"])
        for host in db.discover_cell_hosts(api_engine, cell, engine):
            found.append((cell["name"] or cell["uuid"], host))
    return found


class HostDiscovery:
    """The periodic discovery of one scheduler process (see the module's doc)."""

    def __init__(
        self,
        conf: Any,
        host: str,
        *,
        lock_dir: str | None = None,
    ):
        self.conf = conf
        self.host = host
        self.interval = interval_of(conf)
        self._lock_path = os.path.join(
            lock_dir or tempfile.gettempdir(), f"novasched-discover-hosts-{host}.lock"
        )
        self._warned_exists = False
        self._warned_alone = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.interval is None or self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="discover-hosts", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        # nova: run_immediately, then every interval
        while True:
            try:
                self.run_once()
            except Exception:  # never let the thread die
                LOG.exception("Host discovery failed; trying again in %.0f s", self.interval)
            if self._stop.wait(self.interval):
                return

    def elected(self) -> bool:
        """Whether this host is the discovery leader now."""
        url = database_connection(self.conf)
        if not url:
            if not self._warned_alone:
                LOG.warning(
                    "[database] connection is not set: novasched cannot see the other "
                    "schedulers' service rows, and discovers hosts as if it were the only "
                    "scheduler"
                )
                self._warned_alone = True
            return True
        elected = read_leader(url, self.conf.service_down_time)
        if elected != self.host:
            LOG.debug("Current leader is %s, skipping discover hosts on %s", elected, self.host)
            return False
        return True

    def run_once(self) -> list[tuple[str, str]]:
        """One discovery if this host is the leader and no other worker of it is at it now;
        the (cell, host) pairs it mapped."""
        if not self.elected():
            return []
        with open(self._lock_path, "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return []  # another worker of this host is discovering now
            try:
                return self._discover()
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _discover(self) -> list[tuple[str, str]]:
        if not self.conf.api_database.connection:
            return []  # (the service does not start without it; a test's bare config)
        api = db.get_engine(self.conf.api_database.connection)
        cells = db.get_cell_mappings(
            api, database_connection(self.conf) or None, skip_unusable=True
        )
        try:
            found = discover_hosts(api, cells)
        except db.HostMappingExists as exc:
            message = (
                "This periodic task should only be enabled if discover hosts is not run via "
                f"nova-manage, schedulers: {exc}"
            )
            if not self._warned_exists:
                LOG.warning("%s", message)
                self._warned_exists = True
            else:
                LOG.debug("%s", message)
            return []
        if found:
            LOG.info(
                "Discovered %(count)i new hosts: %(hosts)s",
                {"count": len(found), "hosts": ",".join(f"{c}:{h}" for c, h in found)},
            )
        return found
