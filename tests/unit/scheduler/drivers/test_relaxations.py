"""The smallest change that would let a request the filters emptied fit."""

from __future__ import annotations

import threading

import pytest

from scheduler.conf import CONF
from scheduler.drivers.filter_scheduler import FilterScheduler
from scheduler.exceptions import NoValidHost
from scheduler.objects import Aggregate, Destination, ImageMeta
from tests.unit.scheduler.drivers.fakes import (
    CONTEXT,
    FakeHostManager,
    FakePlacement,
    make_host,
    make_spec,
)

AZ1 = Aggregate(id=1, uuid="agg-az1", name="az1", metadata={"availability_zone": "az1"})
SSD = Aggregate(id=2, uuid="agg-ssd", name="ssd", metadata={"ssd": "true"})


def _driver(hosts, aggregates=()):
    return FilterScheduler(
        placement=FakePlacement(hosts), host_manager=FakeHostManager(hosts, list(aggregates))
    )


@pytest.fixture
def hosts():
    return [
        make_host("a1", ram_mb=16384, aggregates=[AZ1]),
        make_host("a2", ram_mb=8192, aggregates=[AZ1, SSD]),
        make_host("b1", ram_mb=32768),
        make_host("off", ram_mb=65536, disabled=True),
    ]


def test_the_image_property_in_the_way_is_named_with_the_hosts_it_opens(hosts):
    driver = _driver(hosts, [AZ1, SSD])
    spec = make_spec(image=ImageMeta(properties={"hw_architecture": "aarch64"}))
    found = driver.relaxations(CONTEXT, spec)
    assert found.complete
    (change,) = found.found
    assert (change.kind, change.name) == ("image_property", "hw_architecture")
    assert change.as_dict()["change"] == "without image property hw_architecture"
    # the best weighed first (RAMWeigher: the most free RAM), never the disabled host; no
    # filter is offered to be dropped
    assert [h["host"] for h in change.hosts] == ["b1", "a1", "a2"]
    assert change.opened == 3
    assert spec.image.properties == {"hw_architecture": "aarch64"}  # unchanged


def test_a_suggestion_never_names_a_host_the_request_excludes(hosts):
    """A resize's source host is in ignore_hosts: the narrowing that takes it out comes
    before the filters in the search as in the service, so no change offers it."""
    driver = _driver(hosts, [AZ1, SSD])
    spec = make_spec(image=ImageMeta(properties={"hw_architecture": "aarch64"}))
    spec.ignore_hosts = ["B1"]  # as nova compares it: without regard to case
    (change,) = driver.relaxations(CONTEXT, spec).found
    assert change.name == "hw_architecture"
    assert [h["host"] for h in change.hosts] == ["a1", "a2"] and change.opened == 2
    # a requested destination narrows the same way
    spec.ignore_hosts = []
    spec.requested_destination = Destination(host="a2")
    (change,) = driver.relaxations(CONTEXT, spec).found
    assert [h["host"] for h in change.hosts] == ["a2"]


def test_a_disabled_host_that_is_up_is_offered_to_enable_a_down_one_never():
    CONF.set_override("enabled_filters", ["ComputeFilter", "RamFilter"], group="filter_scheduler")
    hosts = [
        make_host("small", ram_mb=4096),
        make_host("big-off", ram_mb=65536, disabled=True),
        make_host("big-dead", ram_mb=65536, disabled=True, down=True),
        make_host("big-down", ram_mb=65536, down=True),
    ]
    found = _driver(hosts).relaxations(CONTEXT, make_spec(ram_mb=20000)).found
    assert [(c.kind, c.name, c.opened) for c in found] == [("enable_host", "big-off", 1)]
    assert found[0].as_dict()["change"] == "enable host big-off"
    assert found[0].hosts == [{"host": "big-off", "node": "big-off"}]


def test_the_availability_zone_left_out(hosts):
    # az1's hosts are too small for this flavor once the legacy RAM filter runs
    CONF.set_override(
        "enabled_filters",
        ["ComputeFilter", "AvailabilityZoneFilter", "RamFilter"],
        group="filter_scheduler",
    )
    driver = _driver(hosts, [AZ1, SSD])
    spec = make_spec(ram_mb=20000, availability_zone="az1")
    changes = [(c.kind, c.name) for c in driver.relaxations(CONTEXT, spec).found]
    # b1 takes it outside az1; the disabled host would not (it is in no az1 aggregate)
    assert changes == [("availability_zone", "az1")]


def test_an_extra_spec_left_out(hosts):
    CONF.set_override(
        "enabled_filters",
        ["ComputeFilter", "AggregateInstanceExtraSpecsFilter"],
        group="filter_scheduler",
    )
    driver = _driver(hosts, [AZ1, SSD])
    spec = make_spec()
    spec.flavor.extra_specs = {"aggregate_instance_extra_specs:ssd": "false"}
    found = driver.relaxations(CONTEXT, spec).found
    assert [(c.kind, c.name) for c in found] == [
        ("extra_spec", "aggregate_instance_extra_specs:ssd"),
    ]
    assert spec.flavor.extra_specs  # the caller's spec is not changed


def test_a_request_that_fits_needs_no_change(hosts):
    found = _driver(hosts).relaxations(CONTEXT, make_spec())
    assert found.found == [] and found.tried == 0


def test_the_search_stops_at_its_budget(hosts, monkeypatch):
    from scheduler.drivers import relaxations

    monkeypatch.setattr(relaxations, "BUDGET_SECONDS", 0.0)
    driver = _driver(hosts, [AZ1, SSD])
    spec = make_spec(image=ImageMeta(properties={"hw_architecture": "aarch64"}))
    found = relaxations.search(driver, CONTEXT, spec, budget=0.0)
    assert not found.complete and found.found == []


class WaitingRecorder:
    def __init__(self):
        self.records = []
        self.arrived = threading.Event()

    def record(self, rec):
        self.records.append(rec)
        self.arrived.set()
        return True


def test_the_record_of_a_no_valid_host_carries_the_smallest_change(hosts):
    driver = _driver(hosts, [AZ1, SSD])
    driver.recorder = WaitingRecorder()
    spec = make_spec(image=ImageMeta(properties={"hw_architecture": "aarch64"}))
    with pytest.raises(NoValidHost):
        driver.select_destinations(CONTEXT, spec, ["i-0"], False)
    # searched after the reply, on a thread of its own
    assert driver.recorder.arrived.wait(10)
    (rec,) = driver.recorder.records
    change = rec.document["smallest_change"]
    assert (
        change["complete"]
        and change["found"][0]["change"] == "without image property hw_architecture"
    )
    assert change["found"][0]["hosts"][0] == {"host": "b1", "node": "b1"}
    driver.stop()
