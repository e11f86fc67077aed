"""Each worker's health publisher: a thread that, every ``[metrics_exporter]
probe_interval`` seconds, publishes what ``/readyz`` and the gauges need — warmed up,
connected to the broker, the last good read of each cell, the last answer from Placement
(asking for Placement's version document when the worker has not heard from it for a
third of ``ready_max_age``), hosts per cell, the host refresher's lag and the provider
view's age.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from scheduler.telemetry import metrics

LOG = logging.getLogger(__name__)

_PING_TIMEOUT = 5.0  # seconds


def broker_connected(rpc_server: Any) -> bool | None:
    """Whether an oslo.messaging RPC server's listener holds a live broker connection:
    True/False for the rabbit driver (its kombu connection), None when the driver does not
    say (the in-process ``fake://`` driver has no connection to lose)."""
    listener = getattr(rpc_server, "listener", None)
    conn = getattr(getattr(listener, "_poll_style_listener", listener), "conn", None)
    for _ in range(4):  # ConnectionContext -> impl_rabbit.Connection -> kombu.Connection
        if conn is None:
            return None
        connected = getattr(type(conn), "connected", None)
        if isinstance(connected, property):
            try:
                return bool(conn.connected)
            except Exception:
                return False
        conn = getattr(conn, "connection", None)
    return None


class WorkerMonitor:
    """Publishes one worker's health and gauges (see the module docstring)."""

    def __init__(self, service: Any, conf: Any):
        self.service = service
        self.interval = float(conf.metrics_exporter.probe_interval)
        self.max_age = float(conf.metrics_exporter.ready_max_age)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cells: set[str] = set()

    def start(self) -> None:
        if not metrics.M.enabled or self._thread is not None:
            return
        self.tick()
        self._thread = threading.Thread(target=self._run, name="health-monitor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        metrics.M.worker_warm.set(0)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.tick()
            except Exception:  # the next tick tries again; serving goes on
                LOG.exception("Could not publish the worker's health")

    def tick(self) -> None:
        m = metrics.M
        now = time.time()
        m.worker_warm.set(1 if self.service.serving else 0)
        connected = broker_connected(self.service.rpc_server)
        m.broker_connected.set(1 if connected is None or connected else 0)
        driver = self.service.driver
        self._publish_cells(getattr(driver, "host_manager", None), now)
        self._publish_placement(getattr(driver, "placement", None), now)
        refresher = getattr(driver, "view_refresher", None)
        if refresher is None:
            m.view_age.set(-1)
        else:
            status = refresher.status()
            m.view_age.set(status["age"] if status["loaded"] else -1)
            m.view_providers.set(status["providers"])
            m.view_refresh_failures.set(status["failures"])

    def _publish_cells(self, host_manager: Any, now: float) -> None:
        status = getattr(host_manager, "status", None)
        if status is None:
            return
        m = metrics.M
        oldest = None
        seen = set()
        for cell in status():
            name = cell["name"]
            seen.add(name)
            m.cell_hosts.labels(cell=name).set(cell["hosts"])
            if cell["last_ok_at"]:
                m.cell_last_read.labels(cell=name).set(cell["last_ok_at"])
                age = now - cell["last_ok_at"]
                oldest = age if oldest is None else max(oldest, age)
        for gone in self._cells - seen:  # a cell unmapped or disabled since
            for gauge in (m.cell_hosts, m.cell_last_read):
                try:
                    gauge.remove(gone)
                except KeyError:  # never set (no good read of it)
                    pass
        self._cells = seen
        if oldest is not None:
            m.host_refresh_lag.set(oldest)

    def _publish_placement(self, placement: Any, now: float) -> None:
        last = getattr(placement, "last_answer_at", None)
        if last is None:
            return
        if now - last > self.max_age / 3:
            # idle: nothing has asked Placement lately; see whether it answers
            try:
                # briefly: a Placement that does not answer must not hold up the other checks
                placement.ping(timeout=_PING_TIMEOUT)
            except Exception:
                LOG.debug("Placement health ping failed", exc_info=True)
            last = placement.last_answer_at
        if last:
            metrics.M.placement_last_answer.set(last)
