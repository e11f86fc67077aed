"""Every host source has every member of ``HostSource``: the driver calls them directly.

HostManager (the service's), HostStateCache (the caching scheduler's), ReplayFleet (the
what-if replay's) and the tests' FakeHostManager are checked by name against the Protocol,
so that a member added to the Protocol and the driver, and forgotten in one source, fails
here rather than in production on the first request that needs it.
"""

from __future__ import annotations

import inspect

import pytest

from scheduler.drivers.caching_scheduler import HostStateCache
from scheduler.drivers.host_source import HostSource
from scheduler.hosts.manager import HostManager
from scheduler.replay.fleet import ReplayFleet
from tests.unit.scheduler.drivers.fakes import FakeHostManager


def _members(cls: type) -> set[str]:
    names = {n for n in vars(cls) if not n.startswith("_")}
    return names | set(getattr(cls, "__annotations__", {}))


def _source_members(cls: type, instance: object | None = None) -> set[str]:
    found = set()
    for klass in inspect.getmro(cls):
        found |= {n for n in vars(klass) if not n.startswith("_")}
    if instance is not None:
        found |= {n for n in vars(instance) if not n.startswith("_")}
    return found


def _missing(cls: type, instance: object | None = None) -> set[str]:
    return _members(HostSource) - _source_members(cls, instance)


def test_the_protocol_lists_what_the_driver_calls():
    members = _members(HostSource)
    # a few the driver cannot do without; the list is the Protocol's
    assert {"get_host_states_by_uuids", "track_consumption", "prefetch", "warm_up"} <= members
    assert "instance_tracker" in members and "instance_details" in members


@pytest.mark.parametrize(
    "source",
    [
        pytest.param(lambda: (FakeHostManager, FakeHostManager([])), id="FakeHostManager"),
        pytest.param(lambda: (HostStateCache, None), id="HostStateCache"),
        pytest.param(lambda: (ReplayFleet, None), id="ReplayFleet"),
    ],
)
def test_each_source_has_every_member(source):
    cls, instance = source()
    assert _missing(cls, instance) == set()


def test_the_host_manager_has_every_member():
    # HostManager sets its two attributes in __init__, which reads the configuration: read
    # them from the source instead
    text = inspect.getsource(HostManager.__init__)
    attributes = {n for n in _members(HostSource) if f"self.{n} =" in text}
    assert _missing(HostManager) - attributes == set()


def test_the_check_sees_a_missing_member():
    members = {n: v for n, v in vars(FakeHostManager).items() if n != "release_consumer"}
    partial = type("Partial", (), members)
    assert _missing(partial, FakeHostManager([])) == {"release_consumer"}
