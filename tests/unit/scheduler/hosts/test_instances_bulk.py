"""InstanceTracker.trusted_instances: every candidate host's instances in one pass, and the
tracker's footprint in the cyclic garbage collector (one object per host)."""

from __future__ import annotations

import gc

import pytest

from scheduler.conf import CONF
from scheduler.hosts.instances import InstanceTracker


@pytest.fixture
def tracker() -> InstanceTracker:
    return InstanceTracker(CONF, loader=lambda host: ["db-1"] if host == "h9" else [])


def test_trusted_instances_is_instances_for_of_each_host_in_order(tracker):
    tracker.update_instance_info("h1", ["a", "b"])  # a full list: trusted
    tracker.seed({"h2": ["c"]})  # from the database: not trusted until a cast confirms it
    tracker.update_instance_info("h9", ["x"])  # one instance of an unknown host: re-read
    hosts = ["h2", "h1", "nowhere", "h9", "h1"]
    got = tracker.trusted_instances(hosts)
    assert got == [tracker.instances_for(h) for h in hosts]
    assert got == [None, {"a": None, "b": None}, None, None, {"a": None, "b": None}]
    assert got[1] is got[4] is tracker.instances_for("h1")  # the shared snapshot
    # confirmed by a sync: trusted from then on, the same snapshot
    before = tracker._hosts["h2"]
    assert tracker.sync_instance_info("h2", ["c"])
    assert tracker.trusted_instances(["h2"]) == [{"c": None}]
    assert tracker.instances_for("h2") is before
    # a sync that does not match: re-read, not trusted
    assert not tracker.sync_instance_info("h1", ["a"])
    assert tracker.trusted_instances(["h1"]) == [None]
    assert tracker.tracked_hosts() == {"h1": False, "h2": True, "h9": False}


def test_a_dropped_host_is_neither_known_nor_trusted():
    tracker = InstanceTracker(CONF, loader=lambda host: None)  # the database cannot say
    tracker.update_instance_info("h1", ["a", "b"])
    tracker.sync_instance_info("h1", ["a"])  # does not match, and cannot be re-read
    assert tracker.trusted_instances(["h1"]) == [None]
    assert tracker.tracked_hosts() == {}


def test_trusted_instances_with_tracking_off():
    CONF.set_override("track_instance_changes", False, group="filter_scheduler")
    try:
        tracker = InstanceTracker(CONF)
    finally:
        CONF.clear_override("track_instance_changes", group="filter_scheduler")
    tracker.update_instance_info("h1", ["a", "b"])
    assert tracker.trusted_instances(["h1", "h2"]) == [None, None]


def test_a_host_costs_the_garbage_collector_one_object(tracker):
    tracker.seed({f"h{i}": [f"i{i}-a", f"i{i}-b"] for i in range(500)})
    for i in range(500):
        tracker.sync_instance_info(f"h{i}", [f"i{i}-a", f"i{i}-b"])
    entries = list(tracker._hosts.values())
    assert len(entries) == 500
    # the read-only proxy is tracked; the dict behind it (strings and None) is not
    assert all(gc.is_tracked(e) for e in entries)
    assert not any(gc.is_tracked(r) for e in entries for r in gc.get_referents(e))
    assert all(tracker._trusted[h] is tracker._hosts[h] for h in tracker._trusted)
