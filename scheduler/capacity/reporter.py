"""The capacity gauges: computed in the background by one worker, never on a request's path.

``CapacityReporter`` runs on a thread of a scheduler worker every ``[capacity] interval``
seconds: it reads the flavors (``[capacity] flavors``, else every public, enabled one),
counts their capacity over the worker's own driver (``CapacityCalculator``: nothing is
claimed, nothing is consumed on the worker's hosts) and sets
``novasched_flavor_capacity_instances{flavor,az}`` and
``novasched_stranded_capacity{resource_class,flavor}``; the series of a flavor or AZ that
went away are removed.

With several workers, one computes: the first to take an exclusive lock on a file in
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
from scheduler.objects import Flavor
from scheduler.telemetry import metrics

LOG = logging.getLogger(__name__)

LOCK_NAME = "novasched-capacity.lock"


class CapacityReporter:
    """Keeps the capacity gauges of ``driver`` current (see the module docstring)."""

    def __init__(
        self,
        driver: Any,
        conf: Any,
        *,
        flavors: Callable[[], list[Flavor]] | None = None,
        lock_dir: str | None = None,
    ):
        """``flavors``: what to count (default: from nova's API database as configured);
        ``lock_dir``: where the workers' lock is (default: PROMETHEUS_MULTIPROC_DIR; none:
        this process is the only one)."""
        self.driver = driver
        self.conf = conf
        self.interval = float(conf.capacity.interval)
        self._flavors = flavors or (lambda: load_flavors(conf, list(conf.capacity.flavors)))
        self._lock_dir = (
            lock_dir if lock_dir is not None else os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        )
        self._lock_fd: int | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._series: set[tuple[str, ...]] = set()  # flavor, az
        self._stranded: set[tuple[str, ...]] = set()  # resource class, flavor
        self._failing = False
        self._refused: set[str] = set()  # flavors whose query Placement refuses (warned once)

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
            self.run_once()
            if self._stopping.wait(self.interval):
                break

    def run_once(self) -> bool:
        """Compute and publish the gauges if this worker holds the lock; False otherwise or
        when it failed (logged once until it works again)."""
        if not self._holds_lock():
            return False
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
        LOG.info("This worker (pid %d) computes the capacity gauges", os.getpid())
        return True


def _remove(gauge: Any, *labels: str) -> None:
    try:
        gauge.remove(*labels)
    except KeyError:
        pass
