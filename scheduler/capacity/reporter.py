"""The capacity gauges: computed in the background by one worker of one host, never on a
request's path.

``CapacityReporter`` runs on a thread of a scheduler worker every ``[capacity] interval``
seconds: it reads the flavors (``[capacity] flavors``, else every public, enabled one),
counts their capacity over the worker's own driver (``CapacityCalculator``: nothing is
claimed, nothing is consumed on the worker's hosts) and sets
``novasched_flavor_capacity_instances{flavor,az}`` and
``novasched_stranded_capacity{resource_class,flavor}``; the series of a flavor or AZ that
went away are removed.

Across controllers, one host computes: the elected scheduler, as nova elects the host that
discovers compute hosts (``scheduler/leader.py``: the lowest-sorted host among the
``nova-scheduler`` service rows that are up in the database of ``[database] connection``).
Only that host exports the series, so a sum over every scraped host counts each flavor
once; the others log once which host computes them. The thread looks at the rows every
``[DEFAULT] report_interval`` seconds (at most every interval): a host that becomes the
leader computes at once, one that stops being it withdraws its series. Without ``[database]
connection`` there are no rows to elect with, and every host computes (one WARNING says so).

novasched's row cannot be told from nova-scheduler's (``scheduler/leader.py``): when a host
running nova's own scheduler sorts lowest, it is elected and no host computes the gauges.
That is the safe side: absent gauges show, and the log names the host; gauges computed by
several hosts would add up to a multiple of the capacity without a sign.

Within the host, one worker computes: the first to take an exclusive lock on a file in
``PROMETHEUS_MULTIPROC_DIR`` keeps it while it lives; when it dies the lock is released and
another worker takes over at its next turn.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from scheduler.capacity.calculator import CapacityCalculator, FlavorCapacity
from scheduler.capacity.flavors import load_flavors
from scheduler.conf import database_connection
from scheduler.leader import read_leader
from scheduler.objects import Flavor
from scheduler.telemetry import metrics

LOG = logging.getLogger(__name__)

LOCK_NAME = "novasched-capacity.lock"
# the leader before the first election (None means: no scheduler's row is up)
_UNKNOWN = object()


class CapacityReporter:
    """Keeps the capacity gauges of ``driver`` current (see the module docstring)."""

    def __init__(
        self,
        driver: Any,
        conf: Any,
        *,
        host: str | None = None,
        flavors: Callable[[], list[Flavor]] | None = None,
        lock_dir: str | None = None,
    ):
        """``host``: this scheduler's host, as its services row names it (default
        ``[DEFAULT] host``); ``flavors``: what to count (default: from nova's API database as
        configured); ``lock_dir``: where the workers' lock is (default:
        PROMETHEUS_MULTIPROC_DIR; none: this process is the only one)."""
        self.driver = driver
        self.conf = conf
        self.host = host or conf.host
        self.interval = float(conf.capacity.interval)
        # how often the thread wakes to look at the election: the rows' own heartbeat
        self.poll = min(self.interval, float(conf.report_interval or 0) or self.interval)
        self._flavors = flavors or (lambda: load_flavors(conf, list(conf.capacity.flavors)))
        self._lock_dir = (
            lock_dir if lock_dir is not None else os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        )
        self._lock_fd: int | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._due = 0.0  # time.monotonic() of the next computation
        self._series: set[tuple[str, ...]] = set()  # flavor, az
        self._stranded: set[tuple[str, ...]] = set()  # resource class, flavor
        self._failing = False
        self._refused: set[str] = set()  # flavors whose query Placement refuses (warned once)
        self._leader: object = _UNKNOWN  # the elected host as last logged
        self._alone = False  # no services rows to elect with (warned once)
        self._rows_unreadable = False  # (warned once)

    def start(self) -> None:
        if self.interval <= 0 or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="capacity-gauges", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)
        self._thread = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _run(self) -> None:
        while not self._stopping.is_set():
            self.wake(time.monotonic())
            if self._stopping.wait(self.poll):
                break

    def wake(self, now: float) -> None:
        """One turn of the thread at ``now`` (``time.monotonic()``): compute when this
        worker and host lead and ``interval`` has passed since the last computation, at once
        when they have just become the leader."""
        if not self.may_compute():
            self._due = 0.0
        elif now >= self._due:
            self._compute()
            self._due = now + self.interval

    def run_once(self) -> bool:
        """Compute and publish the gauges if this worker holds the lock and its host is the
        elected one; False otherwise or when it failed (logged once until it works again)."""
        return self.may_compute() and self._compute()

    def may_compute(self) -> bool:
        """Whether this worker computes the gauges now: it holds the host's lock and the
        host is the elected scheduler (a host no longer elected withdraws its series)."""
        return self._holds_lock() and self._elected()

    def _elected(self) -> bool:
        url = database_connection(self.conf)
        if not url:
            if not self._alone:
                LOG.warning(
                    "[database] connection is not set: novasched cannot see the schedulers' "
                    "service rows to elect the one host that computes the capacity gauges, so "
                    "this host (%s) computes them as every other host does; a sum over hosts "
                    "counts each flavor once per host",
                    self.host,
                )
                self._alone = True
            return True
        try:
            elected = read_leader(url, self.conf.service_down_time)
        except Exception as exc:
            # the gauges stay as they are (their timestamp ages) until the rows can be read
            if not self._rows_unreadable:
                LOG.warning(
                    "Could not read the nova-scheduler service rows to elect the host that "
                    "computes the capacity gauges; trying again at the next turn: %s",
                    exc,
                )
            self._rows_unreadable = True
            return False
        if self._rows_unreadable:
            LOG.info("The nova-scheduler service rows can be read again")
            self._rows_unreadable = False
        if elected != self._leader:
            self._leader = elected
            self._say_leader(elected)
            if elected != self.host:
                self._withdraw()
        return elected == self.host

    def _say_leader(self, elected: str | None) -> None:
        if elected == self.host:
            LOG.info(
                "This host (%s) is the elected scheduler (the lowest-sorted nova-scheduler "
                "service row that is up): it computes the capacity gauges",
                self.host,
            )
        elif elected is None:
            LOG.info(
                "No nova-scheduler service row is up: no host computes the capacity gauges "
                "until one is (this host: %s)",
                self.host,
            )
        else:
            LOG.info(
                "%s computes the capacity gauges (the lowest-sorted nova-scheduler service "
                "row that is up); this host (%s) does not export them. If %s runs nova's own "
                "nova-scheduler, no host computes them: its row cannot be told from "
                "novasched's",
                elected,
                self.host,
                elected,
            )

    def _compute(self) -> bool:
        started = time.perf_counter()
        try:
            flavors = self._flavors()
            calculator = CapacityCalculator(self.driver, project_id=self.conf.capacity.project_id)
            figures = calculator.flavors(flavors)
        except Exception:
            if not self._failing:
                LOG.exception("Could not compute the capacity gauges; trying again later")
            self._failing = True
            return False
        if self._failing:
            LOG.info("The capacity gauges are computed again")
        self._failing = False
        self._note_refusals(figures)
        self.publish(figures)
        LOG.info(
            "Capacity of %d flavor(s) computed in %.0f ms",
            len(figures),
            (time.perf_counter() - started) * 1000,
        )
        return True

    def _note_refusals(self, figures: list[FlavorCapacity]) -> None:
        """A flavor whose query Placement refuses (a trait it does not know yet, say) is a note
        about that flavor, not a fault of the service: one WARNING per flavor until its
        capacity can be computed again."""
        for f in figures:
            if f.cause == "placement_refused":
                if f.flavor not in self._refused:
                    self._refused.add(f.flavor)
                    LOG.warning(
                        "The capacity of flavor %s cannot be computed until Placement takes its "
                        "query (warned once): %s",
                        f.flavor,
                        f.reason,
                    )
            elif f.flavor in self._refused:
                self._refused.discard(f.flavor)
                LOG.info("The capacity of flavor %s is computed again", f.flavor)

    def publish(self, figures: list[FlavorCapacity]) -> None:
        """Set the gauges to ``figures`` and remove the series no longer in them."""
        m = metrics.M
        series: set[tuple[str, ...]] = set()
        stranded: set[tuple[str, ...]] = set()
        for f in figures:
            zones = f.by_az or dict.fromkeys(self._zones_of(f.flavor), 0)
            for az, count in zones.items():
                m.flavor_capacity.labels(flavor=f.flavor, az=az).set(count)
                series.add((f.flavor, az))
            for rc, amount in f.stranded.items():
                m.stranded_capacity.labels(resource_class=rc, flavor=f.flavor).set(amount)
                stranded.add((rc, f.flavor))
        for flavor, az in self._series - series:
            _remove(m.flavor_capacity, flavor, az)
        for rc, flavor in self._stranded - stranded:
            _remove(m.stranded_capacity, rc, flavor)
        self._series, self._stranded = series, stranded
        m.capacity_computed.set(time.time())

    def _withdraw(self) -> None:
        """Another host computes the gauges now: this one's series go, and its timestamp
        says 0 (never computed here), as on a host that never led."""
        m = metrics.M
        for flavor, az in self._series:
            _remove(m.flavor_capacity, flavor, az)
        for rc, flavor in self._stranded:
            _remove(m.stranded_capacity, rc, flavor)
        self._series, self._stranded = set(), set()
        m.capacity_computed.set(0)

    def _zones_of(self, flavor: str) -> list[str]:
        """The AZs a flavor had series in: a flavor that no longer fits anywhere shows 0
        there rather than vanish."""
        return [az for name, az in self._series if name == flavor]

    def _holds_lock(self) -> bool:
        if self._lock_dir is None or self._lock_fd is not None:
            return True
        import fcntl

        fd = os.open(os.path.join(self._lock_dir, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._lock_fd = fd
        LOG.info(
            "This worker (pid %d) computes the capacity gauges for this host, when it is the "
            "elected one",
            os.getpid(),
        )
        return True


def _remove(gauge: Any, *labels: str) -> None:
    """Remove a series. prometheus-client's multiprocess mode (the service's) cannot: the
    series stays in the worker's file until the worker exits, so it is set to 0 first, which
    keeps a sum over workers and hosts right."""
    gauge.labels(*labels).set(0)
    try:
        gauge.remove(*labels)
    except KeyError:
        pass
