"""The driver seam: the filter scheduler has the whole of ``SchedulerDriver``; a plugin driver
with only what docs/plugins.md asks of it is given the rest once, when it is handed over."""

from __future__ import annotations

from scheduler.drivers.base import CASTS, PluginDriver, SchedulerDriver, as_scheduler_driver
from scheduler.drivers.filter_scheduler import FilterScheduler
from tests.unit.scheduler.drivers.fakes import FakeHostManager, FakePlacement, make_host


class Minimal:
    """What docs/plugins.md asks of a driver, and no more."""

    def __init__(self):
        self.calls = []

    def select_destinations(self, context, spec_obj, instance_uuids, return_alternates=False):
        self.calls.append("select")
        return [["host"]]

    def reset(self):
        self.calls.append("reset")

    def stop(self):
        self.calls.append("stop")


class Hooked(Minimal):
    def select_destinations(
        self, context, spec_obj, instance_uuids, return_alternates=False, on_candidates=None
    ):
        self.calls.append(("select", on_candidates))
        return [["host"]]

    def delete_instance_info(self, host_name, instance_uuid):
        self.calls.append(("deleted", host_name, instance_uuid))


def test_the_filter_scheduler_is_its_own_seam():
    hosts = [make_host("h1")]
    driver = FilterScheduler(placement=FakePlacement(hosts), host_manager=FakeHostManager(hosts))
    assert isinstance(driver, SchedulerDriver)
    assert as_scheduler_driver(driver) is driver
    assert driver.steps() is driver and driver.applies_casts == frozenset(CASTS)


def test_a_minimal_plugin_is_given_the_rest():
    inner = Minimal()
    seam = as_scheduler_driver(inner)
    assert isinstance(seam, PluginDriver)
    told = []
    assert seam.select_destinations(None, "spec", ["i-1"], on_candidates=told.append) == [["host"]]
    # without a hook of its own, nova's start notification goes before it runs
    assert told == ["spec"] and inner.calls == ["select"]
    assert seam.applies_casts == frozenset()
    seam.update_aggregates([])  # ignored
    seam.prepare()
    assert seam.steps() is None and seam.status() == {}
    assert seam.explain_destinations(None, "spec") is None
    seam.reset()
    seam.stop()
    assert inner.calls == ["select", "reset", "stop"]


def test_a_plugin_with_a_hook_and_a_cast_gets_them_called():
    inner = Hooked()
    seam = as_scheduler_driver(inner)
    told = []
    seam.select_destinations(None, "spec", ["i-1"], on_candidates=told.append)
    assert inner.calls == [("select", told.append)] and told == []
    assert seam.applies_casts == frozenset({"delete_instance_info"})
    seam.delete_instance_info("h1", "i-1")
    assert inner.calls[-1] == ("deleted", "h1", "i-1")
