"""The availability zones, aggregates and flavors capacity and explain accept: the ones
nova knows, exactly, case included."""

from __future__ import annotations

import pytest

from scheduler.capacity import scope
from scheduler.objects import Aggregate
from tests.unit.scheduler.capacity.cloud import az_aggregate, view_cloud
from tests.unit.scheduler.drivers.fakes import make_host


def _driver(hosts, aggregates):
    driver, _ = view_cloud(hosts, aggregates)
    return driver


def _hosts(n=3):
    return [make_host(f"h{i}") for i in range(n)]


def test_an_aggregate_zone_is_known_and_the_default_only_when_a_host_is_in_no_zone():
    hosts = _hosts()
    east = az_aggregate("az-east", ["h0", "h1"], 1)
    driver = _driver(hosts, [east])
    for host in hosts:
        host.set_aggregates([east] if host.host in east.hosts else [])
    scope.check_scope(driver, availability_zone="az-east")
    scope.check_scope(driver, availability_zone="nova")  # h2 is in no zone

    every = az_aggregate("az-east", ["h0", "h1", "h2"], 1)
    for host in hosts:
        host.set_aggregates([every])
    with pytest.raises(scope.UnknownName) as caught:
        scope.check_scope(_driver(hosts, [every]), availability_zone="nova")
    assert str(caught.value) == "no availability zone 'nova'; known: az-east"


def test_a_zone_in_another_case_is_refused_with_the_right_spelling():
    hosts = _hosts()
    aggs = [az_aggregate("az-east", ["h0"], 1), az_aggregate("az-west", ["h1", "h2"], 2)]
    for host in hosts:
        host.set_aggregates([a for a in aggs if host.host in a.hosts])
    with pytest.raises(scope.UnknownName) as caught:
        scope.check_scope(_driver(hosts, aggs), availability_zone="AZ-East")
    assert str(caught.value) == (
        "no availability zone 'AZ-East' (did you mean 'az-east'?); known: az-east, az-west"
    )


def test_an_aggregate_is_known_by_its_exact_name():
    hosts = _hosts()
    aggs = [
        Aggregate(id=1, uuid="agg-ssd", name="ssd", hosts={"h0"}, metadata={}),
        az_aggregate("az-east", ["h1"], 2),
    ]
    driver = _driver(hosts, aggs)
    scope.check_scope(driver, aggregate="ssd")
    with pytest.raises(scope.UnknownName) as caught:
        scope.check_scope(driver, aggregate="nosuch")
    assert str(caught.value) == "no aggregate 'nosuch'; known: az-east, ssd"


def test_the_default_zone_is_known_when_a_cell_could_not_be_read():
    hosts = _hosts(1)
    east = az_aggregate("az-east", ["h0"], 1)
    hosts[0].set_aggregates([east])
    driver = _driver(hosts, [east])
    driver.host_manager.status = lambda: [
        {"name": "cell2", "uuid": "c2", "hosts": 0, "last_ok_at": None, "failing": True}
    ]
    # cell2's hosts may be in no zone: nova would know the default one
    scope.check_scope(driver, availability_zone="nova")
    assert scope.missing_cells(driver.host_manager) == ["cell2"]


def test_many_known_names_are_cut_short():
    known = [f"agg{i:02d}" for i in range(scope.SHOWN + 5)]
    message = scope.unknown_message("aggregate", ["x"], known)
    assert message.endswith(f"agg{scope.SHOWN - 1:02d}, ... (5 more)")
