"""Across controllers, only the elected scheduler computes the capacity gauges: the lowest-
sorted host among the nova-scheduler service rows that are up, as nova elects its discovery
leader. The rows are real ones in a SQLite database (the database of ``[database]
connection``); the other controllers are their rows."""

from __future__ import annotations

import datetime
import logging
from types import SimpleNamespace

import pytest
import sqlalchemy as sa
from prometheus_client import CollectorRegistry

import db
from db import models
from scheduler.capacity.reporter import CapacityReporter
from scheduler.objects import Flavor
from scheduler.telemetry import metrics
from tests.unit.scheduler.capacity.cloud import az_aggregate, view_cloud
from tests.unit.scheduler.drivers.fakes import make_host
from tests.unit.scheduler.hosts.env import service_row, utcnow

SMALL = Flavor(name="m1.small", vcpus=1, memory_mb=2048, root_gb=20)
SERIES = {"flavor": "m1.small", "az": "az-a"}
INTERVAL = 300.0
LOGGER = "scheduler.capacity.reporter"


@pytest.fixture
def registry():
    reg = CollectorRegistry()
    metrics.enable(registry=reg)
    yield reg
    metrics.disable()


@pytest.fixture
def rows_url(tmp_path):
    """The database of ``[database] connection``: nova's services table, no row yet."""
    url = f"sqlite:///{tmp_path}/nova.db"
    db.create_schema(url, "cell")
    yield url
    db.dispose_engines()


def _scheduler(url: str, host: str, **values) -> None:
    """A nova-scheduler services row, heard from now unless ``values`` say otherwise."""
    now = utcnow()
    values = {"last_seen_up": now, "updated_at": now, "created_at": now, **values}
    row = service_row(host, binary="nova-scheduler", topic="scheduler", **values)
    with db.get_engine(url).begin() as conn:
        conn.execute(models.services.insert().values(**row))


def _goes_down(url: str, host: str) -> None:
    """The host's heartbeats stopped an hour ago."""
    gone = utcnow() - datetime.timedelta(hours=1)
    t = models.services
    with db.get_engine(url).begin() as conn:
        conn.execute(t.update().where(t.c.host == host).values(last_seen_up=gone, updated_at=gone))


def _comes_back(url: str, host: str) -> None:
    t = models.services
    with db.get_engine(url).begin() as conn:
        conn.execute(t.update().where(t.c.host == host).values(last_seen_up=utcnow()))


def _conf(url: str | None, host: str) -> SimpleNamespace:
    return SimpleNamespace(
        host=host,
        capacity=SimpleNamespace(interval=INTERVAL, project_id=None, flavors=[]),
        database=SimpleNamespace(connection=url),
        service_down_time=60,
        report_interval=10,
    )


class Controller:
    """One controller's reporter, counting the computations it makes."""

    def __init__(self, url: str | None, host: str, lock_dir: str | None = None):
        aggregate = az_aggregate("az-a", ["h0"], 1)
        host_state = make_host("h0", vcpus=8, ram_mb=8192, disk_gb=100, aggregates=[aggregate])
        driver, _ = view_cloud([host_state], [aggregate])
        self.computed = 0
        self.reporter = CapacityReporter(
            driver, _conf(url, host), flavors=self._flavors, lock_dir=lock_dir
        )

    def _flavors(self) -> list[Flavor]:
        self.computed += 1
        return [SMALL]


def _info(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]


def test_only_the_lowest_host_that_is_up_computes(registry, rows_url, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    _scheduler(rows_url, "ctl-2")
    _scheduler(rows_url, "ctl-1")
    _scheduler(rows_url, "ctl-3")
    leader, other = Controller(rows_url, "ctl-1"), Controller(rows_url, "ctl-2")
    assert leader.reporter.run_once()
    assert registry.get_sample_value("novasched_flavor_capacity_instances", SERIES) == 4
    caplog.clear()
    for _ in range(3):
        assert not other.reporter.run_once()
    assert other.computed == 0
    # said once, naming the host that computes
    (said,) = _info(caplog)
    assert said.startswith("ctl-1 computes the capacity gauges") and "(ctl-2)" in said


def test_a_host_that_is_not_elected_exports_no_series(registry, rows_url):
    _scheduler(rows_url, "ctl-1")
    _scheduler(rows_url, "ctl-2")
    other = Controller(rows_url, "ctl-2")
    other.reporter.run_once()
    assert registry.get_sample_value("novasched_flavor_capacity_instances", SERIES) is None
    # its timestamp says "never computed here" (an unlabelled gauge always has a value)
    assert registry.get_sample_value("novasched_capacity_computed_timestamp_seconds") == 0


def test_when_the_leaders_row_goes_down_the_next_host_takes_over(registry, rows_url, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    _scheduler(rows_url, "ctl-1")
    _scheduler(rows_url, "ctl-2")
    first, second = Controller(rows_url, "ctl-1"), Controller(rows_url, "ctl-2")
    assert first.reporter.run_once() and not second.reporter.run_once()
    _goes_down(rows_url, "ctl-1")
    caplog.clear()
    assert second.reporter.run_once()
    assert any(m.startswith("This host (ctl-2) is the elected scheduler") for m in _info(caplog))
    assert registry.get_sample_value("novasched_flavor_capacity_instances", SERIES) == 4


def test_the_thread_takes_over_at_its_next_wake_up_not_a_whole_interval_later(registry, rows_url):
    _scheduler(rows_url, "ctl-1")
    _scheduler(rows_url, "ctl-2")
    second = Controller(rows_url, "ctl-2")
    assert second.reporter.poll == 10  # [DEFAULT] report_interval: the rows' heartbeat
    second.reporter.wake(1000.0)
    _goes_down(rows_url, "ctl-1")
    second.reporter.wake(1010.0)
    assert second.computed == 1
    # then every interval, not at every wake-up
    second.reporter.wake(1020.0)
    assert second.computed == 1
    second.reporter.wake(1010.0 + INTERVAL)
    assert second.computed == 2


def test_a_host_no_longer_elected_withdraws_its_series(registry, rows_url, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    _scheduler(rows_url, "ctl-1")
    _scheduler(rows_url, "ctl-2")
    _goes_down(rows_url, "ctl-1")
    second = Controller(rows_url, "ctl-2")
    assert second.reporter.run_once()
    assert registry.get_sample_value("novasched_flavor_capacity_instances", SERIES) == 4
    # ctl-1 is back (restarted): it leads again, and ctl-2 stops exporting
    _comes_back(rows_url, "ctl-1")
    caplog.clear()
    assert not second.reporter.run_once()
    assert registry.get_sample_value("novasched_flavor_capacity_instances", SERIES) is None
    stranded = {"resource_class": "VCPU", "flavor": "m1.small"}
    assert registry.get_sample_value("novasched_stranded_capacity", stranded) is None
    assert registry.get_sample_value("novasched_capacity_computed_timestamp_seconds") == 0
    assert [m.split(" (")[0] for m in _info(caplog)] == ["ctl-1 computes the capacity gauges"]


def test_no_row_up_no_host_computes(registry, rows_url, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    _scheduler(rows_url, "ctl-1")
    _goes_down(rows_url, "ctl-1")
    alone = Controller(rows_url, "ctl-1")
    assert not alone.reporter.run_once() and not alone.reporter.run_once()
    assert alone.computed == 0
    (said,) = _info(caplog)
    assert said.startswith("No nova-scheduler service row is up")


def test_without_database_connection_every_host_computes_and_says_why_once(registry, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    first, second = Controller(None, "ctl-1"), Controller(None, "ctl-2")
    for _ in range(2):
        assert first.reporter.run_once() and second.reporter.run_once()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2  # once per host
    assert all(w.startswith("[database] connection is not set") for w in warnings)


def test_a_nova_scheduler_that_sorts_lower_is_elected_and_no_novasched_computes(
    registry, rows_url, caplog
):
    # nothing in a row tells nova's scheduler from novasched: the safe side is no gauges
    # (visible) rather than gauges from several hosts (sums silently multiplied)
    caplog.set_level(logging.INFO, logger=LOGGER)
    _scheduler(rows_url, "ctl-0")  # nova's own nova-scheduler
    _scheduler(rows_url, "ctl-1")
    ours = Controller(rows_url, "ctl-1")
    assert not ours.reporter.run_once()
    assert ours.computed == 0
    (said,) = _info(caplog)
    assert "If ctl-0 runs nova's own nova-scheduler, no host computes them" in said


def test_rows_that_cannot_be_read_keep_the_gauges_and_warn_once(
    registry, rows_url, caplog, monkeypatch
):
    caplog.set_level(logging.INFO, logger=LOGGER)
    _scheduler(rows_url, "ctl-1")
    ours = Controller(rows_url, "ctl-1")
    assert ours.reporter.run_once()

    def unreachable(engine, binary):
        raise sa.exc.OperationalError("SELECT", {}, Exception("database is down"))

    monkeypatch.setattr(db, "get_service_rows", unreachable)
    assert not ours.reporter.run_once() and not ours.reporter.run_once()
    assert ours.computed == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "database is down" in warnings[0]
    # kept as they were: their timestamp ages
    assert registry.get_sample_value("novasched_flavor_capacity_instances", SERIES) == 4
    monkeypatch.undo()
    assert ours.reporter.run_once()
    assert "The nova-scheduler service rows can be read again" in _info(caplog)


def test_on_the_elected_host_one_worker_computes(registry, rows_url, tmp_path):
    _scheduler(rows_url, "ctl-1")
    workers = [Controller(rows_url, "ctl-1", lock_dir=str(tmp_path)) for _ in range(2)]
    try:
        assert workers[0].reporter.run_once()
        assert not workers[1].reporter.run_once()
        assert [w.computed for w in workers] == [1, 0]
    finally:
        for w in workers:
            w.reporter.stop()


def test_in_multiprocess_mode_a_withdrawn_series_is_zero_so_sums_stay_right(
    rows_url, tmp_path, monkeypatch
):
    # prometheus-client's multiprocess mode (the service's) cannot remove a series from a
    # live worker's file: what is left is 0, never the old figure
    from prometheus_client import values
    from prometheus_client.multiprocess import MultiProcessCollector

    directory = tmp_path / "metrics"
    directory.mkdir()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(directory))
    metrics.enable(multiprocess=True)
    try:
        scraped = CollectorRegistry()
        MultiProcessCollector(scraped, path=str(directory))
        _scheduler(rows_url, "ctl-1")
        _scheduler(rows_url, "ctl-2")
        _goes_down(rows_url, "ctl-1")
        second = Controller(rows_url, "ctl-2", lock_dir=str(tmp_path))
        assert second.reporter.run_once()
        assert scraped.get_sample_value("novasched_flavor_capacity_instances", SERIES) == 4
        _comes_back(rows_url, "ctl-1")
        with pytest.warns(UserWarning, match="multi-process"):
            assert not second.reporter.run_once()
        assert scraped.get_sample_value("novasched_flavor_capacity_instances", SERIES) == 0
        assert scraped.get_sample_value("novasched_capacity_computed_timestamp_seconds") == 0
        second.reporter.stop()
    finally:
        values.close_all_multiprocess_files()
        metrics.enable(registry=CollectorRegistry())  # back to in-process values
        metrics.disable()
