# ruff: noqa: F811 - the fixtures are imported by name, and test arguments reuse those names
"""Across controllers, one computes the capacity gauges: the elected scheduler, chosen from
the real services rows as nova chooses its discovery leader.

Two controllers in one process, on MariaDB and PostgreSQL with nova's schema: each keeps its
services row with the scheduler's own ``Heartbeat`` and has its own reporter (and its own
lock directory, as each host has its metrics directory). The two reporters share this
process's metrics, so in each step the controller that stops leading takes its turn first.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

import db
from db import models
from scheduler.capacity.reporter import CapacityReporter
from scheduler.conf import CONF
from scheduler.objects import Flavor
from scheduler.servicegroup import Heartbeat
from scheduler.telemetry import metrics
from tests.functional.fixtures_db import server_db, server_kind  # noqa: F401  (fixtures)
from tests.unit.scheduler.capacity.cloud import az_aggregate, view_cloud
from tests.unit.scheduler.drivers.fakes import make_host

SMALL = Flavor(name="m1.small", vcpus=1, memory_mb=2048, root_gb=20)
SERIES = {"flavor": "m1.small", "az": "az-a"}


@pytest.fixture
def nova_db(server_db) -> Iterator[str]:
    """nova's main database (the one of ``[database] connection``), where the schedulers'
    rows live."""
    db.create_schema(server_db, "cell")
    CONF.set_override("connection", server_db, group="database")
    try:
        yield server_db
    finally:
        CONF.clear_override("connection", group="database")
        db.dispose_engines()


@pytest.fixture
def registry() -> Iterator[CollectorRegistry]:
    reg = CollectorRegistry()
    metrics.enable(registry=reg)
    yield reg
    metrics.disable()


class Controller:
    """A scheduler host: its services row, kept by the heartbeat, and its capacity reporter,
    counting the computations it makes."""

    def __init__(self, url: str, host: str, lock_dir: str):
        self.url, self.host = url, host
        # no heartbeat thread: each heartbeat is written when the test says
        self.heartbeat = Heartbeat(CONF, host, url=url, interval=0)
        self.heartbeat.start()
        aggregate = az_aggregate("az-a", ["h0"], 1)
        state = make_host("h0", vcpus=8, ram_mb=8192, disk_gb=100, aggregates=[aggregate])
        driver, _ = view_cloud([state], [aggregate])
        self.computed = 0
        self.reporter = CapacityReporter(
            driver, CONF, host=host, flavors=self._flavors, lock_dir=lock_dir
        )

    def _flavors(self) -> list[Flavor]:
        self.computed += 1
        return [SMALL]

    def heartbeats_stop(self) -> None:
        """The host's heartbeats stopped an hour ago: its row is down."""
        gone = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
        gone -= datetime.timedelta(hours=1)
        t = models.services
        with db.get_engine(self.url).begin() as conn:
            conn.execute(
                t.update()
                .where(t.c.id == self.heartbeat.service_id)
                .values(last_seen_up=gone, updated_at=gone, created_at=gone)
            )


def test_only_the_elected_controller_computes_and_another_takes_over(
    nova_db, registry, tmp_path, caplog
):
    caplog.set_level(logging.INFO, logger="scheduler.capacity.reporter")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    ctl_b = Controller(nova_db, "ctl-b", str(tmp_path / "b"))
    ctl_a = Controller(nova_db, "ctl-a", str(tmp_path / "a"))
    try:
        # both rows are up: ctl-a sorts lowest
        assert not ctl_b.reporter.run_once()
        assert ctl_a.reporter.run_once()
        assert not ctl_b.reporter.run_once()
        assert (ctl_a.computed, ctl_b.computed) == (1, 0)
        assert registry.get_sample_value("novasched_flavor_capacity_instances", SERIES) == 4
        assert any(m.startswith("ctl-a computes the capacity gauges") for m in caplog.messages)

        # ctl-a's row goes down: ctl-b computes from its next turn, ctl-a no longer
        ctl_a.heartbeats_stop()
        assert not ctl_a.reporter.run_once()
        assert ctl_b.reporter.run_once()
        assert (ctl_a.computed, ctl_b.computed) == (1, 1)
        assert registry.get_sample_value("novasched_flavor_capacity_instances", SERIES) == 4

        # ctl-a heartbeats again (restarted): it leads again, ctl-b withdraws
        ctl_a.heartbeat.report_state()
        assert not ctl_b.reporter.run_once()
        assert ctl_a.reporter.run_once()
        assert (ctl_a.computed, ctl_b.computed) == (2, 1)
        assert registry.get_sample_value("novasched_flavor_capacity_instances", SERIES) == 4
    finally:
        for ctl in (ctl_a, ctl_b):
            ctl.reporter.stop()
            ctl.heartbeat.stop()


def test_an_operator_forcing_the_leader_down_moves_the_gauges(nova_db, registry, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    ctl_a = Controller(nova_db, "ctl-a", str(tmp_path / "a"))
    ctl_b = Controller(nova_db, "ctl-b", str(tmp_path / "b"))
    try:
        assert ctl_a.reporter.run_once() and not ctl_b.reporter.run_once()
        # openstack compute service set --down ctl-a nova-scheduler
        t = models.services
        with db.get_engine(nova_db).begin() as conn:
            conn.execute(
                t.update().where(t.c.id == ctl_a.heartbeat.service_id).values(forced_down=True)
            )
        ctl_a.heartbeat.report_state()  # heartbeats go on; nova reads it down all the same
        assert not ctl_a.reporter.run_once()
        assert ctl_b.reporter.run_once()
        assert registry.get_sample_value("novasched_flavor_capacity_instances", SERIES) == 4
    finally:
        for ctl in (ctl_a, ctl_b):
            ctl.reporter.stop()
            ctl.heartbeat.stop()
