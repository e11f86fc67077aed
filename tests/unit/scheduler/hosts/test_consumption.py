"""ConsumptionLedger: where each consumption of ours is counted, and the releases that find it
there (nova's casts, Placement's view, the sweep), over HostStates held in one cell view."""

from __future__ import annotations

import datetime

import pytest
from oslo_utils import timeutils

from db.queries import ComputeNodeRow
from scheduler.conf import CONF
from scheduler.hosts import consumption
from scheduler.hosts.cells import Cell, CellView
from scheduler.hosts.consumption import ConsumptionLedger
from scheduler.hosts.state import HostState
from scheduler.objects import Flavor, RequestSpec
from tests.db_rows import compute_node_row

T0 = datetime.datetime(2026, 11, 1, 12, 0, 0)
CELL = Cell(uuid="cell-1", name="cell1", database_connection="sqlite://")


class Clock:
    """``timeutils.utcnow`` while a test runs: T0, moved on by the test."""

    now = T0

    def __call__(self, with_timezone: bool = False) -> datetime.datetime:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    found = Clock()
    monkeypatch.setattr(timeutils, "utcnow", found)
    return found


def _row(host: str) -> ComputeNodeRow:
    return compute_node_row(
        host,
        memory_mb=65536,
        free_ram_mb=60000,
        free_disk_gb=900,
        local_gb=1000,
        local_gb_used=100,
        vcpus=32,
        vcpus_used=4,
        stats='{"num_instances": "3"}',
        updated_at=T0 - datetime.timedelta(hours=1),
        created_at=T0 - datetime.timedelta(days=1),
    )


class Cloud:
    """Two hosts in one cell view, and a ledger over it."""

    def __init__(self) -> None:
        self.view = CellView(cell=CELL)
        self.hosts: dict[str, HostState] = {}
        for name in ("h1", "h2"):
            hs = HostState(name, name, CELL.uuid)
            hs.update_from_row(_row(name))
            self.view.hosts[hs.uuid] = hs
            self.hosts[name] = hs
        self.ledger = ConsumptionLedger(CONF, {CELL.uuid: self.view}, self.named)

    def named(self, host: str, node: str | None = None) -> list[HostState]:
        return [hs for hs in self.view.hosts.values() if hs.host == host]

    def consume(self, host: str, key: str, *, claimed: bool = True) -> HostState:
        """What the driver does for an instance placed on ``host``."""
        hs = self.hosts[host]
        spec = RequestSpec(flavor=Flavor(memory_mb=1024, vcpus=2, root_gb=10, ephemeral_gb=0))
        hs.consume_from_request(spec, key, claimed=claimed)
        self.ledger.track(hs, key)
        return hs


@pytest.fixture
def cloud(clock) -> Cloud:
    return Cloud()


def test_placement_dropping_a_claim_releases_it_only_on_that_compute_node(cloud):
    h1 = cloud.consume("h1", "inst-1")
    h2 = cloud.consume("h2", "inst-1")  # a reschedule: counted on both

    cloud.ledger.release_consumer("inst-1", h2.uuid)
    assert "inst-1" in h1.consumptions() and "inst-1" not in h2.consumptions()
    cloud.ledger.release_consumer("not-ours", h1.uuid)  # most consumers: nothing to do
    assert "inst-1" in h1.consumptions()


def test_a_move_releases_the_instance_on_every_other_host(cloud):
    h1 = cloud.consume("h1", "inst-1")
    h2 = cloud.consume("h2", "inst-1")

    assert cloud.ledger.release_moved_instances("h2", ["inst-1", "not-ours"]) == 1
    assert h1.consumptions() == {} and list(h2.consumptions()) == ["inst-1"]


def test_a_delete_releases_the_instance_on_the_host_that_reported_it(cloud):
    cloud.consume("h1", "inst-1")

    assert cloud.ledger.release_deleted_instance("h2", "inst-1") == 0
    assert cloud.ledger.release_deleted_instance("h1", "inst-1") == 1
    assert cloud.hosts["h1"].consumptions() == {}


def test_a_sync_keeps_what_was_consumed_within_the_grace(cloud, clock):
    cloud.consume("h1", "old")
    clock.now = T0 + datetime.timedelta(seconds=50)
    cloud.consume("h1", "recent")
    clock.now = T0 + consumption._SYNC_GRACE + datetime.timedelta(seconds=30)

    # the compute lists neither: the old one is gone, the recent one may not have reached it
    assert cloud.ledger.release_unlisted_instances("h1", []) == 1
    assert list(cloud.hosts["h1"].consumptions()) == ["recent"]
    assert cloud.ledger.release_unlisted_instances("unknown-host", []) == 0


def test_counted_claims_are_those_counted_now_where_they_are_counted(cloud):
    h1 = cloud.consume("h1", "claimed")
    cloud.consume("h2", "unclaimed", claimed=False)

    assert cloud.ledger.counted_claims() == {"claimed": {h1.uuid}}
    cloud.ledger.release_consumer("claimed", h1.uuid)
    assert cloud.ledger.counted_claims() == {}


def test_a_host_no_longer_held_is_skipped(cloud):
    h1 = cloud.consume("h1", "inst-1")
    del cloud.view.hosts[h1.uuid]  # a read found its compute node deleted

    assert cloud.ledger.counted_claims() == {}
    cloud.ledger.release_consumer("inst-1", h1.uuid)
    assert cloud.ledger.release_moved_instances("h2", ["inst-1"]) == 0


def test_the_sweep_expires_old_consumptions_and_forgets_the_released(cloud, clock):
    CONF.set_override("consumption_max_age", 600, group="scheduler")
    cloud.consume("h1", "old")
    cloud.consume("h2", "released")
    cloud.hosts["h2"].release_consumption("released", "rollback")  # not through the ledger
    clock.now = T0 + datetime.timedelta(seconds=300)
    cloud.consume("h2", "young")
    clock.now = T0 + datetime.timedelta(seconds=601)

    assert cloud.ledger.expire() == 1
    assert cloud.hosts["h1"].consumptions() == {}
    assert set(cloud.ledger.consumed) == {"young"}


def test_without_a_max_age_the_sweep_only_forgets(cloud, clock):
    CONF.set_override("consumption_max_age", 0, group="scheduler")
    cloud.consume("h1", "kept")
    clock.now = T0 + datetime.timedelta(days=1)

    assert cloud.ledger.expire() == 0
    assert set(cloud.ledger.consumed) == {"kept"}


def test_tracking_does_not_sweep_before_a_sweep_is_due(cloud, clock, monkeypatch):
    CONF.set_override("consumption_max_age", 60, group="scheduler")
    monkeypatch.setattr(consumption, "_SWEEP_SECONDS", 3600.0)
    cloud.consume("h1", "old")  # the first tracking sweeps: nothing old yet
    assert not cloud.ledger.sweep_due()
    clock.now = T0 + datetime.timedelta(seconds=120)

    cloud.consume("h2", "new")
    assert list(cloud.hosts["h1"].consumptions()) == ["old"]


def test_tracking_sweeps_when_a_sweep_is_due(cloud, clock, monkeypatch):
    CONF.set_override("consumption_max_age", 60, group="scheduler")
    monkeypatch.setattr(consumption, "_SWEEP_SECONDS", 0.0)
    cloud.consume("h1", "old")
    assert cloud.ledger.sweep_due()
    clock.now = T0 + datetime.timedelta(seconds=120)

    cloud.consume("h2", "new")
    assert cloud.hosts["h1"].consumptions() == {}
    assert set(cloud.ledger.consumed) == {"new"}
