"""ViewRefresher and ApiFeed's bookkeeping, with stand-in feeds and a stand-in Placement."""

from __future__ import annotations

import threading
import time

from placement_client.api import PlacementConnectionError
from placement_client.view import ApiFeed, Inventory, ProviderRecord, ProviderView, ViewRefresher


class Clock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


class ScriptedFeed:
    name = "scripted"

    def __init__(self, clock: Clock, load_seconds: float = 0.0, fail_loads: int = 0):
        self.clock = clock
        self.load_seconds = load_seconds
        self.fail_loads = fail_loads
        self.calls: list[str] = []
        self.polled = threading.Event()

    def load(self, view):
        self.calls.append("load")
        if self.fail_loads:
            self.fail_loads -= 1
            raise PlacementConnectionError("Placement is down")
        started = self.clock.now
        self.clock.now += self.load_seconds
        view.replace_all([ProviderRecord("a", 1, inventories={"VCPU": Inventory(4)})], started)

    def poll(self, view):
        self.calls.append("poll")
        view.mark_refreshed(self.clock.now)
        self.polled.set()
        return 0

    def close(self):
        self.calls.append("close")


def test_a_load_older_than_half_the_max_age_is_refreshed_before_it_counts_as_loaded():
    clock = Clock()
    view = ProviderView(max_age=10.0, clock=clock)
    feed = ScriptedFeed(clock, load_seconds=30.0)  # e.g. 1k providers through the API
    refresher = ViewRefresher(view, feed)
    assert refresher.load()
    assert feed.calls == ["load", "poll"]
    assert view.age() == 0.0
    assert refresher.loaded.is_set()


def test_a_quick_load_is_not_polled_at_once():
    clock = Clock()
    view = ProviderView(max_age=10.0, clock=clock)
    feed = ScriptedFeed(clock, load_seconds=0.2)
    assert ViewRefresher(view, feed).load()
    assert feed.calls == ["load"]


def test_a_failed_load_is_retried_by_the_thread_and_a_dirty_mark_wakes_it():
    view = ProviderView(max_age=10.0)
    feed = ScriptedFeed(Clock(), fail_loads=1)
    refresher = ViewRefresher(view, feed, interval=0.05)
    refresher.start(load_now=True)  # the first load fails: logged, not raised
    try:
        assert refresher.loaded.wait(5)
        assert feed.calls[:2] == ["load", "load"]
        assert feed.polled.wait(5)
        refresher.interval = 60.0  # from now on only a mark can wake it soon
        time.sleep(0.1)
        feed.polled.clear()
        view.mark_dirty(["a"])
        assert feed.polled.wait(5)
    finally:
        refresher.stop()
    assert feed.calls[-1] == "close"


class FakePlacement:
    """GET /resource_providers and the four parts of each provider; can fail."""

    def __init__(self):
        self.providers = {"a": 1, "b": 1}
        self.down = False
        self.reads: list[str] = []

    def list_providers(self):
        if self.down:
            raise PlacementConnectionError("down")
        return [
            {"uuid": u, "generation": g, "parent_provider_uuid": None, "root_provider_uuid": u}
            for u, g in self.providers.items()
        ]

    def get_provider_part(self, uuid, part):
        if self.down:
            raise PlacementConnectionError("down")
        self.reads.append(f"{uuid}/{part}")
        body = {"inventories": {"VCPU": {"total": 4}}, "allocations": {}}.get(part, [])
        return self.providers[uuid], body


def test_api_feed_keeps_dirty_marks_across_a_failed_refresh():
    placement = FakePlacement()
    view = ProviderView()
    feed = ApiFeed(placement, sweep_period=0)
    try:
        feed.load(view)
        view.mark_dirty(["a"])
        placement.down = True
        try:
            feed.poll(view)
        except PlacementConnectionError:
            pass
        placement.down = False
        placement.reads.clear()
        assert feed.poll(view) == 1
        assert {r.split("/")[0] for r in placement.reads} == {"a"}
        placement.reads.clear()
        assert feed.poll(view) == 0  # the mark was satisfied
    finally:
        feed.close()


def test_api_feed_reads_a_provider_whose_tree_moved_without_a_generation_change():
    placement = FakePlacement()
    view = ProviderView()
    feed = ApiFeed(placement, sweep_period=0)
    try:
        feed.load(view)
        listing = placement.list_providers

        def reparented():
            out = listing()
            out[1] = dict(out[1], parent_provider_uuid="a", root_provider_uuid="a")
            return out

        placement.list_providers = reparented
        placement.reads.clear()
        assert feed.poll(view) == 1
        assert {r.split("/")[0] for r in placement.reads} == {"b"}
        assert view.record("b").root_uuid == "a"
    finally:
        feed.close()


def test_api_feed_sweeps_at_most_a_few_providers_per_refresh_however_long_the_last_took():
    placement = FakePlacement()
    placement.providers = {f"rp-{i}": 1 for i in range(500)}
    clock = Clock()
    view = ProviderView(clock=clock)
    feed = ApiFeed(placement, sweep_period=10.0, clock=clock)
    try:
        feed.load(view)
        clock.now += 60.0  # a refresh that came six sweep periods late
        placement.reads.clear()
        read = feed.poll(view)
        assert 0 < read <= 32
        assert len({r.split("/")[0] for r in placement.reads}) == read
    finally:
        feed.close()


def test_api_feed_cold_load_logs_how_far_it_got(caplog):
    placement = FakePlacement()
    placement.providers = {f"rp-{i}": 1 for i in range(30)}
    ticks = iter(range(0, 10_000, 4))  # every look at the clock: 4 s later

    view = ProviderView()
    feed = ApiFeed(placement, threads=1, sweep_period=0, clock=lambda: float(next(ticks)))
    try:
        with caplog.at_level("INFO", logger="placement_client.view.api_feed"):
            feed.load(view)
    finally:
        feed.close()
    lines = [r.getMessage() for r in caplog.records if "Loading the provider view" in r.message]
    assert lines and all(" of 30 provider(s) read in " in line for line in lines)
    # about one line per 10 s of the load, not one per provider
    assert 3 <= len(lines) <= 10
    assert len(view) == 30
