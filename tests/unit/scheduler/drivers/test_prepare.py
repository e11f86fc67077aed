"""FilterScheduler.prepare: what the service does before it takes requests."""

from __future__ import annotations

from scheduler.drivers.filter_scheduler import FilterScheduler
from tests.unit.scheduler.drivers.fakes import (
    FakeHostManager,
    FakePlacement,
    make_host,
)


class WarmHostManager(FakeHostManager):
    def warm_up(self) -> int:
        self.calls.append("warm_up")
        return len(self.hosts)

    def start_refresher(self) -> None:
        self.calls.append("start_refresher")


def test_prepare_runs_the_plugins_once_over_every_host_before_the_first_request():
    hosts = [make_host("host-a"), make_host("host-b", disabled=True)]
    hm = WarmHostManager(hosts)
    driver = FilterScheduler(placement=FakePlacement(hosts), host_manager=hm)
    seen = []
    run = driver.filter_handler.run

    def spy(hosts, spec, index=0, request_id=None):
        seen.append((len(hosts), spec.flavor.name, request_id))
        return run(hosts, spec, index, request_id=request_id)

    driver.filter_handler.run = spy
    driver.prepare()
    assert hm.calls[:3] == ["warm_up", "start_refresher", "get_host_states_by_uuids"]
    assert seen == [(2, "warm-up", "req-warm-up")]
    # nothing was consumed on the hosts
    assert [h.num_instances for h in hosts] == [0, 0]


def test_a_plugin_failing_on_the_warm_up_does_not_stop_the_service():
    hosts = [make_host("host-a")]
    hm = WarmHostManager(hosts)
    driver = FilterScheduler(placement=FakePlacement(hosts), host_manager=hm)

    def broken(*args, **kwargs):
        raise RuntimeError("a plugin that wants a real request")

    driver.filter_handler.run = broken
    driver.prepare()  # logged, not raised
    assert "start_refresher" in hm.calls
