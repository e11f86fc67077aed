"""The scheduler's own ``services`` row: what makes ``openstack compute service list`` show
``nova-scheduler`` up while novasched runs, as nova-scheduler's row would.

nova's service start finds or creates the row of (host, binary ``nova-scheduler``) in the
database of its ``[database] connection`` (nova's main database, the one a context with no
cell targeted uses), and its db servicegroup driver then writes a heartbeat every
``[DEFAULT] report_interval`` seconds (the first 5 s after start): ``report_count`` + 1,
``last_seen_up`` and ``updated_at`` now. ``Heartbeat`` does the same, in a daemon thread that
survives database errors: the first failure is logged once as a warning, the recovery once.

What nova does and we do too:

* ``forced_down`` and ``disabled`` are never written by a heartbeat; a service forced down
  keeps reporting and is down for whoever reads it (nova's servicegroup API says a forced
  down service is down whatever its heartbeat).
* On stop the heartbeats stop and the row stays: it shows down after ``service_down_time``.
* A row deleted through the API while the service runs is not recreated (an error says to
  restart the service).
* Each worker process of a host heartbeats the host's one row (nova's workers each run the
  service start); the count is incremented in SQL, so that workers do not write back each
  other's counts, and the row is up while at least one worker is.

Where we differ: without ``[database] connection`` nova-scheduler cannot start; novasched
starts and logs one warning that it will not appear in the service list.
"""

from __future__ import annotations

import logging
import threading

from oslo_config import cfg

import db.api as db_api
from scheduler import exceptions
from scheduler.conf import database_connection

LOG = logging.getLogger(__name__)

BINARY = "nova-scheduler"
TOPIC = "scheduler"
# nova 34.0.0's SERVICE_VERSION (nova/objects/service.py): what its services write
NOVA_SERVICE_VERSION = 74
# nova's servicegroup INITIAL_REPORTING_DELAY: seconds from start to the first heartbeat
INITIAL_REPORTING_DELAY = 5.0


def check_servicegroup_driver(conf: cfg.ConfigOpts) -> None:
    """Raise ConfigurationError unless ``[DEFAULT] servicegroup_driver`` is ``db``."""
    problem = servicegroup_driver_problem(conf)
    if problem is not None:
        raise exceptions.ConfigurationError(problem)


def servicegroup_driver_problem(conf: cfg.ConfigOpts) -> str | None:
    """Why ``[DEFAULT] servicegroup_driver`` stops the scheduler (None: it does not)."""
    driver = getattr(conf, "servicegroup_driver", "db") or "db"
    if driver == "db":
        return None
    return (
        f"[DEFAULT] servicegroup_driver = {driver} is not supported: novasched reads whether "
        "a compute service is up from the services table of the cell databases, as nova's "
        "db driver does, and with the memcached driver nova-compute writes its heartbeats "
        "to memcached instead, so every compute would look down after service_down_time. "
        "Set [DEFAULT] servicegroup_driver = db (nova's default) for every nova service."
    )


def apply_report_interval_floor(conf: cfg.ConfigOpts) -> None:
    """nova's servicegroup API: a ``service_down_time`` not above ``report_interval`` would
    make every service look down between heartbeats, so it becomes 2.5 x report_interval,
    with nova's warning."""
    interval = conf.report_interval or 0
    if interval and conf.service_down_time <= interval:
        new = int(interval * 2.5)
        LOG.warning(
            "Report interval must be less than service down time. Current config: "
            "<service_down_time: %s, report_interval: %s>. Setting service_down_time to: %s",
            conf.service_down_time,
            interval,
            new,
        )
        conf.set_override("service_down_time", new)


class Heartbeat:
    """Registers this scheduler's services row and keeps it up (see the module's doc)."""

    def __init__(
        self,
        conf: cfg.ConfigOpts,
        host: str,
        *,
        url: str | None = None,
        interval: float | None = None,
        initial_delay: float | None = None,
    ):
        self.conf = conf
        self.host = host
        self.url = url if url is not None else database_connection(conf)
        self.interval = float(conf.report_interval if interval is None else interval or 0)
        delay = INITIAL_REPORTING_DELAY if initial_delay is None else initial_delay
        self.initial_delay = min(delay, self.interval) if self.interval > 0 else delay
        self.service_id: int | None = None
        self.service_uuid: str | None = None
        self.reports = 0
        self._disconnected = False
        self._gone = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Find or create the row now (a failure is retried by the thread), then heartbeat
        every ``report_interval`` seconds in a daemon thread."""
        if not self.url:
            LOG.warning(
                "[database] connection is not set: novasched does not write its services "
                "row (binary %s, host %s), so it does not appear in 'openstack compute "
                "service list'. Set it to the database nova-scheduler used (nova's main "
                "database).",
                BINARY,
                self.host,
            )
            return
        self._stop.clear()
        self._register()
        if self.interval <= 0 and self.service_id is not None:
            return  # nova: no report_interval, no heartbeats
        self._thread = threading.Thread(target=self._run, name="service-heartbeat", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop heartbeating; the row stays (it shows down after service_down_time)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _register(self) -> bool:
        try:
            row = db_api.find_or_create_service(
                db_api.get_engine(self.url),
                host=self.host,
                binary=BINARY,
                topic=TOPIC,
                version=NOVA_SERVICE_VERSION,
            )
        except Exception as exc:
            self._lost(exc)
            return False
        self.service_id, self.service_uuid = row["id"], row["uuid"]
        LOG.info(
            "%s services row of %s on host %s (id %s, uuid %s)%s",
            "Created the" if row["created"] else "Reporting in the",
            BINARY,
            self.host,
            row["id"],
            row["uuid"],
            "; it is forced down by an operator" if row["forced_down"] else "",
        )
        self._recovered()
        return True

    def _run(self) -> None:
        wait = self.initial_delay
        while not self._stop.wait(wait):
            wait = self.interval if self.interval > 0 else INITIAL_REPORTING_DELAY
            try:
                self.report_state()
            except Exception:  # never let the heartbeat thread die
                LOG.exception("Unexpected error while reporting service status")
                self._disconnected = True

    def report_state(self) -> None:
        """One heartbeat (registering the row first if start could not)."""
        if self.service_id is None:
            if not self._register() or self.interval <= 0:
                return
        assert self.service_id is not None
        try:
            alive = db_api.report_service_state(
                db_api.get_engine(self.url), self.service_id, version=NOVA_SERVICE_VERSION
            )
        except Exception as exc:
            self._lost(exc)
            return
        if not alive:
            if not self._gone:
                LOG.error(
                    "The services table record for the %s service on host %s is gone. You "
                    "either need to stop this service if it should be deleted or restart it "
                    "to recreate the record in the database.",
                    BINARY,
                    self.host,
                )
            self._gone = True
            return
        self._gone = False
        self.reports += 1
        self._recovered()

    def _lost(self, exc: Exception) -> None:
        if not self._disconnected:
            LOG.warning("Lost connection to the database for reporting service status: %s", exc)
        else:
            LOG.debug("Still unable to report service status: %s", exc)
        self._disconnected = True

    def _recovered(self) -> None:
        if self._disconnected:
            self._disconnected = False
            LOG.info("Recovered from being unable to report status.")
