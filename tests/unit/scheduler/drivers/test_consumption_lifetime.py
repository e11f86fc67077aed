"""Our consumption lives exactly as long as the instance does: the driver and the host manager
release it when nova says the instance is gone or elsewhere, when its claim is rolled back or
was never made, when Placement drops its allocation, and when it grows too old.

The host manager is the real one, over SQLite cell databases; Placement is the fake of
tests/unit/scheduler/drivers/fakes.py. Two hosts differ only in free RAM, so a boot goes to h1
until our consumption there makes h2 the better one.
"""

from __future__ import annotations

import datetime
from types import SimpleNamespace
from typing import Any

import pytest
from oslo_utils import timeutils

from placement_client.api import ClaimConflict
from scheduler.conf import CONF
from scheduler.drivers.filter_scheduler import FilterScheduler
from scheduler.exceptions import NoValidHost
from scheduler.objects import Destination
from scheduler.telemetry import metrics
from tests.unit.scheduler.drivers.fakes import CONTEXT, FakePlacement, make_spec
from tests.unit.scheduler.hosts.env import utcnow


class Cloud:
    """Two hosts of one cell (h1 has 512 MB more free RAM), a real HostManager, a driver."""

    def __init__(self, env, h1_ram: int = 61440, h2_ram: int = 60928, view: Any = False):
        cell = env.add_cell("cell1")
        up = {"last_seen_up": utcnow()}
        self.uuids = {
            "h1": env.add_host(cell, "h1", service=up, free_ram_mb=h1_ram),
            "h2": env.add_host(cell, "h2", service=dict(up), free_ram_mb=h2_ram),
        }
        self.env, self.cell = env, cell
        self.manager = env.manager()
        hosts = self.manager.get_host_states_by_uuids(None)
        self.placement = FakePlacement(hosts)
        self.driver = FilterScheduler(
            placement=self.placement, host_manager=self.manager, view=view
        )

    def host(self, name: str):
        (hs,) = self.manager.host_states_for(name)
        return hs

    def boot(self, *uuids: str, **spec: Any) -> list[str]:
        result = self.driver.select_destinations(
            CONTEXT, make_spec(num_instances=len(uuids), **spec), list(uuids), False
        )
        return [selections[0].service_host for selections in result]


@pytest.fixture
def cloud(env) -> Cloud:
    return Cloud(env)


def test_a_deleted_instance_stops_counting_and_the_next_boot_goes_to_its_host(cloud):
    assert cloud.boot("i-1") == ["h1"]
    assert cloud.boot("i-2") == ["h2"]  # i-1 counted on h1
    cloud.driver.delete_instance_info("h2", "i-2")
    cloud.driver.delete_instance_info("h1", "i-1")  # deleted before h1 reported it
    assert cloud.host("h1").consumptions() == {} == cloud.host("h2").consumptions()
    assert cloud.host("h1").free_ram_mb == 61440
    assert cloud.boot("i-3") == ["h1"]


def test_an_instance_reported_on_another_host_stops_counting_where_it_was_chosen(cloud):
    assert cloud.boot("i-1") == ["h1"]
    # rescheduled by the conductor to its alternate, built there
    cloud.driver.update_instance_info("h2", ["i-1"])
    assert cloud.host("h1").consumptions() == {}
    assert cloud.boot("i-2") == ["h1"]
    # the instance on its own host: still counted there until its report
    cloud.driver.update_instance_info("h1", ["i-2"])
    assert list(cloud.host("h1").consumptions()) == ["i-2"]


def test_a_sync_releases_instances_its_host_does_not_have_except_recent_ones(cloud, monkeypatch):
    assert cloud.boot("i-1") == ["h1"]
    cloud.driver.sync_instance_info("h1", [])
    assert list(cloud.host("h1").consumptions()) == ["i-1"]  # too recent to be listed
    later = timeutils.utcnow() + datetime.timedelta(seconds=31)
    monkeypatch.setattr(timeutils, "utcnow", lambda with_timezone=False: later)
    cloud.driver.sync_instance_info("h1", ["other"])
    assert cloud.host("h1").consumptions() == {}


def test_a_rebuild_check_leaves_no_usage_behind(cloud):
    before = cloud.host("h1").free_ram_mb
    spec = {"hints": {"_nova_check_type": ["rebuild"]}}
    assert cloud.boot("i-1", requested_destination=Destination(host="h1"), **spec) == ["h1"]
    assert cloud.host("h1").consumptions() == {}
    assert cloud.host("h1").free_ram_mb == before
    assert cloud.placement.claim_attempts == []


def test_a_rollback_releases_its_own_consumption_and_keeps_the_others(env):
    cloud = Cloud(env, h1_ram=65536, h2_ram=30000)
    assert cloud.boot("i-1") == ["h1"]
    cloud.placement.consumer_errors["i-3"] = ClaimConflict("full", status=409)
    with pytest.raises(NoValidHost):
        cloud.boot("i-2", "i-3")  # i-2 claimed and consumed on h1, then rolled back
    h1 = cloud.host("h1")
    assert list(h1.consumptions()) == ["i-1"]
    assert h1.free_ram_mb == 65536 - 1024


def test_placement_dropping_the_allocation_releases_it_through_the_view(env):
    view = SimpleNamespace(on_consumer_gone=None)
    refresher = SimpleNamespace(view=view, start=lambda: None, stop=lambda: None)
    cloud = Cloud(env, view=refresher)
    assert view.on_consumer_gone == cloud.manager.release_consumer
    h1 = cloud.host("h1")
    req = cloud.driver.new_request(CONTEXT, make_spec())
    cloud.driver.consume(req, h1, "i-1")
    view.on_consumer_gone("someone-else", h1.uuid)
    view.on_consumer_gone("i-1", cloud.uuids["h2"])
    assert list(h1.consumptions()) == ["i-1"]
    view.on_consumer_gone("i-1", h1.uuid)
    assert h1.consumptions() == {}


def test_placement_losing_the_allocation_releases_it_before_the_next_boot(cloud):
    """No view: Placement's answer shows less used on h1 than our claims there, so the
    instances counted on h1 are looked up, and the one Placement lost is not counted by the
    next boot (nova counts none of them)."""
    assert cloud.boot("i-1") == ["h1"]
    assert cloud.boot("i-2") == ["h2"]  # i-1 counted on h1
    looked_up = len(cloud.placement.checks)
    assert cloud.boot("i-3") == ["h1"]  # i-2 counted on h2 now: h1 is the better again
    # nothing was lost: Placement's answer shows every claim, nothing is looked up
    assert len(cloud.placement.checks) == looked_up
    cloud.placement.delete_allocation_for_instance("i-1")  # no report, no cast
    cloud.placement.delete_allocation_for_instance("i-3")
    assert cloud.boot("i-4") == ["h1"]
    assert set(cloud.placement.checks[looked_up:]) == {"i-1", "i-3"}
    assert list(cloud.host("h1").consumptions()) == ["i-4"]
    assert list(cloud.host("h2").consumptions()) == ["i-2"]


def test_a_consumption_its_compute_never_reports_expires(cloud, monkeypatch, caplog):
    assert cloud.boot("i-1") == ["h1"]
    assert cloud.manager.expire_consumption() == 0
    later = timeutils.utcnow() + datetime.timedelta(seconds=CONF.scheduler.consumption_max_age)
    with monkeypatch.context() as patch, caplog.at_level("INFO", logger="scheduler.hosts.state"):
        patch.setattr(timeutils, "utcnow", lambda with_timezone=False: later)
        assert cloud.manager.expire_consumption() == 1
    assert "Stopped counting i-1 on host h1" in caplog.text
    assert cloud.host("h1").consumptions() == {}
    assert cloud.manager._consumed == {}  # and forgotten by the sweep
    assert cloud.boot("i-2") == ["h1"]


def test_a_boot_without_instance_uuids_counts_until_the_report(cloud, monkeypatch):
    result = cloud.driver.select_destinations(CONTEXT, make_spec(), None, False)
    assert [s[0].service_host for s in result] == ["h1"]
    (key,) = cloud.host("h1").consumptions()
    later = timeutils.utcnow() + datetime.timedelta(seconds=60)
    with monkeypatch.context() as patch:
        patch.setattr(timeutils, "utcnow", lambda with_timezone=False: later)
        cloud.driver.sync_instance_info("h1", [])  # nova's list cannot name it
    assert list(cloud.host("h1").consumptions()) == [key]
    cloud.env.update_node(cloud.cell, cloud.uuids["h1"], free_ram_mb=61440 - 1024)
    cloud.manager.get_host_states_by_uuids(None)
    assert cloud.host("h1").consumptions() == {}


def test_releases_are_counted_by_reason(cloud):
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    metrics.enable(registry=registry)
    try:
        cloud.boot("i-1")
        cloud.driver.delete_instance_info("h1", "i-1")
        cloud.boot("i-2")
        cloud.driver.update_instance_info("h2", ["i-2"])
        assert (
            registry.get_sample_value("novasched_consumption_released_total", {"reason": "deleted"})
            == 1.0
        )
        assert (
            registry.get_sample_value("novasched_consumption_released_total", {"reason": "moved"})
            == 1.0
        )
    finally:
        metrics.disable()
