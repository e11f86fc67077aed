"""The scheduler service process: driver + RPC server on topic ``scheduler``, and the worker
supervisor that forks ``[scheduler] workers`` of them.

Signals, as nova's service launcher gives them: SIGTERM/SIGINT stop gracefully (stop
consuming, let in-flight calls finish and reply), SIGHUP asks the driver to reload what
it caches (``driver.reset()``).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import oslo_messaging
from oslo_config import cfg
from stevedore import driver as stevedore_driver
from stevedore import exception as stevedore_exc
from stevedore import extension as stevedore_extension

from scheduler import exceptions, servicegroup
from scheduler.conf import CONF, NOVA_DRIVER_CLASS_PATHS
from scheduler.discovery import HostDiscovery
from scheduler.drivers.base import Observers, as_scheduler_driver
from scheduler.records import recorder_from_conf
from scheduler.rpc import transport as sched_rpc
from scheduler.rpc.manager import BaseAPI, SchedulerManager
from scheduler.rpc.wire import request_spec_to_primitive
from scheduler.telemetry import gmr, metrics
from scheduler.telemetry.exporter import Exporter, exporter_from_conf
from scheduler.telemetry.monitor import WorkerMonitor

LOG = logging.getLogger(__name__)

DRIVER_NAMESPACE = "novasched.scheduler.driver"

# exit status of a worker that could not start because of its configuration (sysexits.h);
# the supervisor does not respawn such a worker.
EXIT_CONFIG = 78


def _raise_load_failure(manager: Any, entrypoint: Any, exc: BaseException) -> None:
    raise exceptions.ConfigurationError(
        f"Could not load scheduler driver {entrypoint.name!r}: {exc}"
    ) from exc


def load_driver(
    conf: cfg.ConfigOpts = CONF,
    *,
    observers: Callable[[], Observers] | None = None,
    **kwargs: Any,
) -> Any:
    """Build the driver named by ``[scheduler] driver`` from the
    ``novasched.scheduler.driver`` entry points, with ``kwargs``. nova's old class paths
    (``nova.scheduler.filter_scheduler.FilterScheduler``, ...) load our driver of the same
    name, with a warning. A driver whose factory declares ``takes_observers = True`` is
    built with ``observers=observers()`` too (called only then: a plugin driver keeps the
    keyword arguments it was written for). Raises ConfigurationError (PluginNotFound for an
    unknown name, listing the available ones)."""
    name = (conf.scheduler.driver or "").strip()
    new_name = NOVA_DRIVER_CLASS_PATHS.get(name.replace(":", "."))
    if new_name is not None:
        LOG.warning(
            "[scheduler] driver = %s is nova's old class path; loading %r. Set "
            "[scheduler] driver = %s instead.",
            name,
            new_name,
            new_name,
        )
        name = new_name
    try:
        manager = stevedore_driver.DriverManager(
            DRIVER_NAMESPACE,
            name,
            invoke_on_load=False,
            on_load_failure_callback=_raise_load_failure,
        )
    except stevedore_exc.NoMatches:
        available = stevedore_extension.ExtensionManager(DRIVER_NAMESPACE).names()
        raise exceptions.PluginNotFound("scheduler driver", [name], available) from None
    factory = manager.driver
    if observers is not None and getattr(factory, "takes_observers", False) is True:
        kwargs["observers"] = observers()
    return factory(**kwargs)


def default_executor(conf: cfg.ConfigOpts = CONF) -> str:
    return "eventlet" if conf.concurrency_backend == "eventlet" else "threading"


class SchedulerService:
    """One scheduler RPC server: the manager and baseapi endpoints on topic ``scheduler``,
    server name ``[DEFAULT] host``, nova's control exchange."""

    def __init__(
        self,
        conf: cfg.ConfigOpts = CONF,
        driver: Any = None,
        executor: str | None = None,
        *,
        transport: oslo_messaging.Transport | None = None,
        topic: str = sched_rpc.RPC_TOPIC,
        host: str | None = None,
        timing: Callable[[dict[str, float]], None] | None = None,
    ):
        """``driver``: this one (with its own observers) instead of ``[scheduler] driver``;
        ``timing``: told each call's seconds per step (``Observers.timing``; the benchmark)."""
        self.conf = conf
        self.driver = driver
        self._timing = timing
        self.executor = executor or default_executor(conf)
        self.topic = topic
        self.host = host or conf.host
        self._transport = transport
        self._owns_transport = transport is None
        self._notifier_transport: oslo_messaging.Transport | None = None
        self.manager: SchedulerManager | None = None
        self._server: Any = None
        self._stopped = threading.Event()
        self._stop_lock = threading.Lock()
        self._monitor: WorkerMonitor | None = None
        self._capacity: Any = None  # the capacity gauges' reporter (one worker computes)
        self._recorder: Any = None  # the decision records' writer (one per worker)
        self._seam: Any = None  # the driver as SchedulerDriver (scheduler/drivers/base.py)
        # this host's services row (binary nova-scheduler), as nova-scheduler keeps it
        self.heartbeat: servicegroup.Heartbeat | None = None
        # [scheduler] discover_hosts_in_cells_interval, when this host is the elected one
        self.discovery: HostDiscovery | None = None

    def _observers(self) -> Observers:
        """What watches the driver this worker builds: each worker records its own
        decisions, written by a thread of its own, each with the whole request as nova sent
        it (what novasched-manage replay re-runs)."""
        self._recorder = recorder_from_conf(self.conf)
        return Observers(
            recorder=self._recorder, spec_encoder=request_spec_to_primitive, timing=self._timing
        )

    @property
    def serving(self) -> bool:
        """Warmed up and consuming the topic."""
        return self._server is not None

    @property
    def rpc_server(self) -> Any:
        """The oslo.messaging RPC server (None when not serving)."""
        return self._server

    @property
    def in_flight(self) -> int:
        """Calls being served right now."""
        return self.manager.in_flight.count if self.manager else 0

    def start(self) -> None:
        """Build the driver (if none was given) and start consuming the topic."""
        started = time.monotonic()
        metrics.M.worker_warm.set(0)
        servicegroup.check_servicegroup_driver(self.conf)
        servicegroup.apply_report_interval_floor(self.conf)
        if self.driver is None:
            self.driver = load_driver(self.conf, observers=self._observers)
        driver = self._seam = as_scheduler_driver(self.driver)
        # the first read of a large cloud takes seconds: not on a request's time
        driver.prepare()
        if self._transport is None:
            self._transport = sched_rpc.get_transport(self.conf)
        self._notifier_transport = sched_rpc.get_notification_transport(self.conf)
        notifier = sched_rpc.get_notifier(self.conf, self._notifier_transport, host=self.host)
        self.manager = SchedulerManager(self.driver, notifier=notifier, host=self.host)
        target = oslo_messaging.Target(topic=self.topic, server=self.host)
        kwargs: dict[str, Any] = {"serializer": sched_rpc.get_serializer()}
        if self.executor != "threading":
            # oslo.messaging defaults to threading and deprecates naming an executor
            kwargs["executor"] = self.executor
        self._server = oslo_messaging.get_rpc_server(
            self._transport, target, [self.manager, BaseAPI("scheduler")], **kwargs
        )
        self._stopped.clear()
        self._server.start()
        LOG.info(
            "Scheduler service listening on topic %s as %s (%s executor, pid %d); warm-up "
            "and start took %.1f s",
            self.topic,
            self.host,
            self.executor,
            os.getpid(),
            time.monotonic() - started,
        )
        self.heartbeat = servicegroup.Heartbeat(self.conf, self.host)
        self.heartbeat.start()
        # (after the row: nova's leader is chosen among the scheduler rows that are up)
        self.discovery = HostDiscovery(self.conf, self.host)
        self.discovery.start()
        gmr.set_status_source(self.status)
        if metrics.M.enabled:
            self._monitor = WorkerMonitor(self, self.conf)
            self._monitor.start()
            self._start_capacity_gauges()

    def _start_capacity_gauges(self) -> None:
        """The capacity gauges, kept by one worker ([capacity] interval; a driver that is
        not the filter scheduler's has none)."""
        steps = self._seam.steps()
        if self.conf.capacity.interval <= 0 or steps is None:
            return
        from scheduler.capacity.reporter import CapacityReporter

        self._capacity = CapacityReporter(steps, self.conf, host=self.host)
        self._capacity.start()

    def status(self) -> dict[str, Any]:
        """This worker's state, for the Guru Meditation Report."""
        out: dict[str, Any] = {
            "role": "scheduler worker",
            "host": self.host,
            "topic": self.topic,
            "executor": self.executor,
            "serving": self.serving,
            "requests_in_flight": self.in_flight,
        }
        if self._seam is not None:
            out.update(self._seam.status())
        return out

    def stop(self, graceful: bool = True, timeout: float | None = None) -> None:
        """Stop consuming; with ``graceful`` wait (up to ``timeout`` s) for in-flight calls
        to finish and reply, then release the driver and the transport."""
        with self._stop_lock:
            if self._server is None:
                self._stopped.set()
                return
            server, self._server = self._server, None
            if self.heartbeat is not None:
                # nova leaves the row: it shows down after service_down_time
                self.heartbeat.stop()
                self.heartbeat = None
            if self.discovery is not None:
                self.discovery.stop()
                self.discovery = None
            if self._monitor is not None:
                self._monitor.stop()
                self._monitor = None
            if self._capacity is not None:
                self._capacity.stop()
                self._capacity = None
            server.stop()
            if graceful and self.manager is not None:
                if not self.manager.in_flight.wait_idle(timeout):
                    LOG.warning(
                        "Stopping with %d select_destinations call(s) still running",
                        self.manager.in_flight.count,
                    )
            if graceful:
                server.wait()
            try:
                if self.driver is not None:
                    self.driver.stop()
            except Exception:
                LOG.exception("Scheduler driver failed to stop cleanly")
            if self._recorder is not None:
                # what was decided is written before the process goes
                self._recorder.stop()
                self._recorder = None
            if self._notifier_transport is not None:
                self._notifier_transport.cleanup()
                self._notifier_transport = None
            if self._owns_transport and self._transport is not None:
                self._transport.cleanup()
                self._transport = None
            self._stopped.set()
            LOG.info("Scheduler service on topic %s stopped", self.topic)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the service has stopped; False if ``timeout`` passed first."""
        return self._stopped.wait(timeout)

    def reset(self) -> None:
        """SIGHUP: ask the driver to reload its caches (cell mappings)."""
        LOG.info("Reloading scheduler driver caches (SIGHUP)")
        if self.driver is not None:
            self.driver.reset()


ServiceFactory = Callable[[], SchedulerService]


def _run_in_process(factory: ServiceFactory) -> int:
    """Run one service in this process until SIGTERM/SIGINT; SIGHUP resets the driver."""
    stop_requested = threading.Event()
    hup_requested = threading.Event()

    def _on_stop(signum: int, frame: Any) -> None:
        stop_requested.set()

    def _on_hup(signum: int, frame: Any) -> None:
        hup_requested.set()

    signal.signal(signal.SIGTERM, _on_stop)
    signal.signal(signal.SIGINT, _on_stop)
    signal.signal(signal.SIGHUP, _on_hup)

    try:
        service = factory()
        service.start()
    except exceptions.ConfigurationError as exc:
        print(f"novasched-scheduler: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    # the signal handlers only set flags; the main thread does the (blocking) work here
    while not stop_requested.is_set():
        stop_requested.wait(0.5)
        if hup_requested.is_set():
            hup_requested.clear()
            try:
                service.reset()
            except Exception:
                LOG.exception("Driver reset on SIGHUP failed")
    LOG.info("Stopping scheduler service (pid %d)", os.getpid())
    service.stop(graceful=True)
    return 0


def run_workers(
    conf: cfg.ConfigOpts = CONF,
    n: int | None = None,
    *,
    service_factory: ServiceFactory | None = None,
) -> int:
    """Run ``n`` scheduler processes (default ``[scheduler] workers``, else the CPU count)
    on the same topic and return the exit status. ``n == 1`` runs in this process;
    otherwise workers are forked, SIGTERM/SIGINT stop them all gracefully, SIGHUP is passed
    on, and a worker that dies unexpectedly is replaced."""
    if n is None:
        n = conf.scheduler.workers or os.cpu_count() or 1
    factory = service_factory or (lambda: SchedulerService(conf))
    exporter = exporter_from_conf(conf, n)
    try:
        if n <= 1:
            return _run_in_process(factory)
        supervisor = _Supervisor(factory, n, exporter)
        if exporter is not None:
            exporter.supervising(lambda: list(supervisor.children))
        return supervisor.run()
    finally:
        if exporter is not None:
            exporter.stop()


class _Supervisor:
    """Forks and watches the worker processes."""

    def __init__(self, factory: ServiceFactory, n: int, exporter: Exporter | None = None):
        self.factory = factory
        self.n = n
        self.exporter = exporter
        self.children: dict[int, float] = {}  # pid -> start time
        self.stopping = False
        self.status = 0

    def _spawn(self) -> None:
        pid = os.fork()
        if pid == 0:
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                signal.signal(sig, signal.SIG_DFL)
            if self.exporter is not None:
                self.exporter.close_in_child()
            gmr.setup_in_child()
            code = 1
            try:
                code = _run_in_process(self.factory)
            except BaseException:
                LOG.exception("Scheduler worker %d crashed", os.getpid())
            finally:
                logging.shutdown()
                os._exit(code)
        self.children[pid] = time.monotonic()
        LOG.info("Started scheduler worker %d", pid)

    def _signal_children(self, signum: int) -> None:
        for pid in list(self.children):
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

    def run(self) -> int:
        def _on_stop(signum: int, frame: Any) -> None:
            self.stopping = True
            self._signal_children(signal.SIGTERM)

        def _on_hup(signum: int, frame: Any) -> None:
            self._signal_children(signal.SIGHUP)

        for _ in range(self.n):
            self._spawn()
        signal.signal(signal.SIGTERM, _on_stop)
        signal.signal(signal.SIGINT, _on_stop)
        signal.signal(signal.SIGHUP, _on_hup)
        gmr.forward_to(lambda: list(self.children))

        while self.children:
            try:
                pid, wstatus = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                time.sleep(0.2)
                continue
            started = self.children.pop(pid, time.monotonic())
            code = os.waitstatus_to_exitcode(wstatus)
            if self.exporter is not None:
                self.exporter.worker_exited(pid)
            if self.stopping:
                continue
            if code == EXIT_CONFIG:
                LOG.error("Worker %d could not start (configuration); stopping", pid)
                self.status = EXIT_CONFIG
                self.stopping = True
                self._signal_children(signal.SIGTERM)
                continue
            LOG.warning("Scheduler worker %d exited with status %s; replacing it", pid, code)
            # a worker that dies at once would otherwise be respawned in a tight loop
            if time.monotonic() - started < 1.0:
                time.sleep(1.0)
            self._spawn()
        return self.status
