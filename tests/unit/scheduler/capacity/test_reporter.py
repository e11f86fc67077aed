"""The capacity gauges: computed off the request path by one worker, stale series removed."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry

from scheduler.capacity.reporter import CapacityReporter
from scheduler.conf import CONF
from scheduler.objects import Aggregate, Flavor
from scheduler.telemetry import metrics
from tests.unit.scheduler.capacity.cloud import az_aggregate, view_cloud
from tests.unit.scheduler.drivers.fakes import make_host

SMALL = Flavor(name="m1.small", vcpus=1, memory_mb=2048, root_gb=20)
HUGE = Flavor(name="m1.huge", vcpus=2, memory_mb=65536, root_gb=20)


@pytest.fixture
def registry():
    reg = CollectorRegistry()
    metrics.enable(registry=reg)
    yield reg
    metrics.disable()


def _fleet() -> tuple[object, list[Aggregate]]:
    aggregates = [az_aggregate("az-a", ["h0"], 1), az_aggregate("az-b", ["h1"], 2)]
    hosts = [
        make_host(f"h{i}", vcpus=8, ram_mb=8192, disk_gb=100, aggregates=[aggregates[i]])
        for i in range(2)
    ]
    driver, _ = view_cloud(hosts, aggregates)
    return driver, aggregates


def test_the_gauges_say_how_many_fit_per_flavor_andaz_aggregate(registry, tmp_path):
    driver, _ = _fleet()
    reporter = CapacityReporter(driver, CONF, flavors=lambda: [SMALL, HUGE], lock_dir=None)
    assert reporter.run_once()
    get = registry.get_sample_value
    assert get("novasched_flavor_capacity_instances", {"flavor": "m1.small", "az": "az-a"}) == 4
    assert get("novasched_flavor_capacity_instances", {"flavor": "m1.small", "az": "az-b"}) == 4
    # 8 vCPUs with nova's ratio 4.0, less the 4 counted, on each host
    assert (
        get("novasched_stranded_capacity", {"resource_class": "VCPU", "flavor": "m1.small"}) == 56
    )
    # the huge flavor fits nowhere: no AZ series, all its memory is stranded
    assert get("novasched_flavor_capacity_instances", {"flavor": "m1.huge", "az": "az-a"}) is None
    stranded = {"resource_class": "MEMORY_MB", "flavor": "m1.huge"}
    assert get("novasched_stranded_capacity", stranded) == 16384
    assert get("novasched_capacity_computed_timestamp_seconds") > 0
    # nothing was consumed on the worker's hosts
    assert [h.free_ram_mb for h in driver.host_manager.hosts] == [8192, 8192]


def test_a_flavor_that_goes_away_leaves_no_series(registry):
    driver, _ = _fleet()
    flavors = [SMALL]
    reporter = CapacityReporter(driver, CONF, flavors=lambda: list(flavors), lock_dir=None)
    reporter.run_once()
    flavors.clear()
    reporter.run_once()
    labels = {"flavor": "m1.small", "az": "az-a"}
    assert registry.get_sample_value("novasched_flavor_capacity_instances", labels) is None


def test_one_worker_computes_while_it_holds_the_lock(registry, tmp_path):
    driver, _ = _fleet()
    first = CapacityReporter(driver, CONF, flavors=lambda: [SMALL], lock_dir=str(tmp_path))
    second = CapacityReporter(driver, CONF, flavors=lambda: [SMALL], lock_dir=str(tmp_path))
    assert first.run_once()
    assert not second.run_once()
    first.stop()  # the worker went away: its lock with it
    assert second.run_once()
    second.stop()


def test_a_failure_is_logged_once_and_the_next_turn_tries_again(registry, caplog):
    caplog.set_level(logging.INFO, logger="scheduler.capacity.reporter")
    driver, _ = _fleet()
    calls = []

    def flavors():
        calls.append(1)
        if len(calls) <= 2:
            raise RuntimeError("API database unreachable")
        return [SMALL]

    reporter = CapacityReporter(driver, CONF, flavors=flavors, lock_dir=None)
    assert not reporter.run_once() and not reporter.run_once()
    assert caplog.text.count("Could not compute the capacity gauges") == 1
    assert reporter.run_once()
    assert "computed again" in caplog.text


def test_no_interval_no_thread(registry):
    driver, _ = _fleet()
    CONF.set_override("interval", 0, group="capacity")
    try:
        reporter = CapacityReporter(driver, CONF, flavors=lambda: [SMALL], lock_dir=None)
        reporter.start()
        assert reporter._thread is None
    finally:
        CONF.clear_override("interval", group="capacity")


def test_a_flavor_placement_refuses_is_one_warning_until_it_can_be_counted(registry, caplog):
    from placement_client.api import PlacementClientError

    driver, _ = _fleet()
    placement = driver.placement
    answer = placement.get_allocation_candidates

    def refusing(query, request_id=None, *, not_before=None):
        if any("CUSTOM_NEW" in g.required_traits for g in query.groups):
            raise PlacementClientError("400 No such trait(s): CUSTOM_NEW")
        return answer(query, request_id, not_before=not_before)

    placement.get_allocation_candidates = refusing
    new = Flavor(name="m1.new", vcpus=1, memory_mb=512, root_gb=1)
    new.extra_specs = {"trait:CUSTOM_NEW": "required"}
    reporter = CapacityReporter(driver, CONF, flavors=lambda: [SMALL, new], lock_dir=None)
    caplog.set_level(logging.DEBUG)
    for _ in range(3):
        assert reporter.run_once()  # the other flavors are still counted
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and "m1.new" in r.message]
    assert errors == [] and len(warned) == 1, caplog.text
    assert "No such trait" in warned[0].message
    small = {"flavor": "m1.small", "az": "az-a"}
    assert registry.get_sample_value("novasched_flavor_capacity_instances", small) == 4
    # Placement learns the trait: computed again (said once), and a later refusal warns again
    placement.get_allocation_candidates = answer
    caplog.clear()
    assert reporter.run_once()
    assert [r.message for r in caplog.records if "m1.new" in r.message] == [
        "The capacity of flavor m1.new is computed again"
    ]
    placement.get_allocation_candidates = refusing
    caplog.clear()
    reporter.run_once()
    assert sum("m1.new" in r.message and r.levelno == logging.WARNING for r in caplog.records) == 1
