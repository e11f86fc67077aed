"""What keeps the host manager out of a request's way (issue 11, the core benchmark's tail):
the refresher's reads give the GIL away between rows, a window read does not apply again the
reports requests applied, and the long-lived cache is kept out of the cyclic GC's full
collections."""

from __future__ import annotations

import datetime
import gc
import time

import pytest

from scheduler.hosts import cell_reads as cell_reads_mod
from scheduler.hosts import cells as cells_mod
from scheduler.hosts import gc_policy
from scheduler.hosts.state import HostState
from tests.unit.scheduler.hosts.env import utcnow


@pytest.fixture(autouse=True)
def _no_gc_policy_left_behind():
    """The policy is process-wide: a test that installs it takes it away again."""
    installed = gc_policy.freeze_survivors in gc.callbacks
    threshold = gc.get_threshold()
    yield
    if not installed and gc_policy.freeze_survivors in gc.callbacks:
        gc.callbacks.remove(gc_policy.freeze_survivors)
    gc.set_threshold(*threshold)


def _count_node_updates(monkeypatch) -> list[str]:
    applied: list[str] = []
    real = HostState.update_from_row

    def update_from_row(self, row):
        applied.append(row.uuid)
        return real(self, row)

    monkeypatch.setattr(HostState, "update_from_row", update_from_row)
    return applied


# ---------------------------------------------------------------- rows applied only once


def test_a_window_read_does_not_apply_again_what_requests_read_since_the_last(env, monkeypatch):
    monkeypatch.setattr(cell_reads_mod, "WATERMARK_SLACK", datetime.timedelta(seconds=0.3))
    cell = env.add_cell("cell1")
    u1 = env.add_host(cell, "h1")
    u2 = env.add_host(cell, "h2")
    hm = env.manager(window_read_interval=3600.0)  # requests read reports only
    hm.warm_up()
    hm._cell_reads.refresh_cell(hm.cells[cell], window=True)  # the refresher's first window read
    applied = _count_node_updates(monkeypatch)

    env.update_node(cell, u1, free_ram_mb=111)
    states = {hs.uuid: hs for hs in hm.get_host_states_by_uuids([u1, u2])}
    assert states[u1].free_ram_mb == 111 and applied == [u1]
    # a later request, more than the slack after the report: the next window read still
    # goes back to it, so the request does not forget it
    time.sleep(0.5)
    hm.get_host_states_by_uuids([u1, u2])
    env.update_node(cell, u2, free_ram_mb=222)

    hm._cell_reads.refresh_cell(hm.cells[cell], window=True, background=True)
    # u1's report is not applied a second time; u2's, new, is
    assert applied == [u1, u2]
    assert states[u2].free_ram_mb == 222
    # and once the window has moved past it, the row is dropped
    time.sleep(0.4)
    hm._cell_reads.refresh_cell(hm.cells[cell], window=True, background=True)
    assert set(hm._cell_reads.views[cell].recent_rows) <= {u2}


def test_a_report_read_keeps_the_rows_without_sorting_through_the_others(env, monkeypatch):
    """Between two window reads the rows kept only grow: no request rebuilds them."""
    cell = env.add_cell("cell1")
    uuids = [env.add_host(cell, f"h{i}") for i in range(3)]
    hm = env.manager(window_read_interval=3600.0)
    hm.warm_up()
    hm._cell_reads.refresh_cell(hm.cells[cell], window=True)
    view = hm._cell_reads.views[cell]
    for i, u in enumerate(uuids):
        env.update_node(cell, u, free_ram_mb=1000 + i)
        kept = view.recent_rows
        hm.get_host_states_by_uuids(uuids)
        assert view.recent_rows is kept  # added to, not rebuilt
        assert set(kept) == set(uuids[: i + 1])


# ------------------------------------------------------------ the refresher gives way


class _CountingPacer(cells_mod.Pacer):
    made = 0
    calls = 0

    def __init__(self, slice_=None):
        super().__init__(slice_)
        type(self).made += 1

    def __call__(self):
        type(self).calls += 1
        super().__call__()


@pytest.fixture
def pacer(monkeypatch):
    class Pacer(_CountingPacer):
        made = 0
        calls = 0

    monkeypatch.setattr(cell_reads_mod, "Pacer", Pacer)
    return Pacer


def test_the_refreshers_read_gives_way_between_rows_and_a_requests_does_not(env, pacer):
    cell = env.add_cell("cell1")
    uuids = [env.add_host(cell, f"h{i}") for i in range(5)]
    hm = env.manager(window_read_interval=3600.0)
    hm.warm_up()  # before any request: no pacing
    assert pacer.made == 0
    for i, u in enumerate(uuids):
        env.update_node(cell, u, free_ram_mb=500 + i)
        env.update_service(cell, f"h{i}", last_seen_up=utcnow())

    hm.get_host_states_by_uuids(uuids)  # a request: reports only, at once
    hm._cell_reads.refresh_cell(hm.cells[cell], window=True)  # a request asking for every host
    assert pacer.made == 0

    hm._cell_reads.refresh_cell(hm.cells[cell], window=True, background=True)
    assert pacer.made == 1
    # between the two queries, after them, and at every row of each
    assert pacer.calls >= 2 + 5 + 5


def test_the_refresher_thread_reads_in_the_background(env, pacer):
    cell = env.add_cell("cell1")
    env.add_host(cell, "h1")
    hm = env.manager(window_read_interval=0.02)
    hm.warm_up()
    hm.start_refresher()
    deadline = time.monotonic() + 5
    while pacer.made < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    hm.stop()
    assert pacer.made >= 2


def test_the_pacer_lets_go_of_the_gil_once_per_slice(monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(cells_mod.time, "sleep", slept.append)
    busy = cells_mod.Pacer(3600.0)
    for _ in range(1000):
        busy()
    assert slept == []  # within its slice: no hand-over
    eager = cells_mod.Pacer(0.0)
    for _ in range(3):
        eager()
    assert slept == [0, 0, 0]
    monkeypatch.setattr(cells_mod, "_BACKGROUND_SLICE", 0.25)
    assert cells_mod.Pacer().slice == 0.25


def test_a_whole_read_by_the_refresher_gives_way_too(env, pacer, monkeypatch):
    cell = env.add_cell("cell1")
    for i in range(4):
        env.add_host(cell, f"h{i}")
    hm = env.manager(window_read_interval=3600.0)
    hm.warm_up()
    monkeypatch.setattr(cell_reads_mod, "_FULL_RESYNC_SECONDS", 0.0)
    hm._cell_reads.refresh_cell(hm.cells[cell], window=True, background=True)
    assert pacer.made == 1 and pacer.calls >= 2 + 4 + 4
    assert len(hm.get_host_states_by_uuids(None)) == 4


# ------------------------------------------------------------------ garbage collection


class _FakeGC:
    def __init__(self):
        self.calls: list[str] = []
        self.callbacks: list = []

    def collect(self, generation: int = 2) -> int:
        self.calls.append(f"collect({generation})")
        return 0

    def freeze(self) -> None:
        self.calls.append("freeze")


def test_a_slow_full_collection_freezes_what_survived_it(monkeypatch):
    fake = _FakeGC()
    monkeypatch.setattr(gc_policy, "gc", fake)
    clock = [100.0]
    monkeypatch.setattr(gc_policy.time, "perf_counter", lambda: clock[0])

    def collection(generation: int, seconds: float) -> None:
        gc_policy.freeze_survivors("start", {"generation": generation})
        clock[0] += seconds
        gc_policy.freeze_survivors("stop", {"generation": generation, "collected": 0})

    collection(0, 1.0)  # young generations: never
    collection(1, 1.0)
    collection(2, gc_policy._GC_FREEZE_AFTER / 2)  # a quick full collection: nothing to gain
    assert fake.calls == []
    collection(2, gc_policy._GC_FREEZE_AFTER * 2)
    assert fake.calls == ["freeze"]


def test_the_refresher_installs_the_gc_policy_once(env):
    cell = env.add_cell("cell1")
    env.add_host(cell, "h1")
    hm = env.manager(window_read_interval=3600.0)
    hm.warm_up()
    gc.set_threshold(700, 10, 10)  # CPython's defaults
    hm.start_refresher()
    gc_policy.install_gc_policy()
    assert gc.callbacks.count(gc_policy.freeze_survivors) == 1
    assert gc.get_threshold() == (gc_policy._GC_YOUNG_THRESHOLD, 10, 10)
    hm.stop()


def test_the_gc_policy_keeps_a_higher_threshold_or_collection_off():
    gc.set_threshold(50_000, 20, 5)
    gc_policy.install_gc_policy()
    assert gc.get_threshold() == (50_000, 20, 5)
    gc.set_threshold(0, 10, 10)
    gc_policy.install_gc_policy()
    assert gc.get_threshold() == (0, 10, 10)


def test_the_gc_policy_freezes_after_a_real_full_collection(monkeypatch):
    monkeypatch.setattr(gc_policy, "_GC_FREEZE_AFTER", 0.0)
    gc_policy.install_gc_policy()
    frozen = gc.get_freeze_count()
    kept = [[i] for i in range(1000)]  # tracked, alive
    gc.collect()
    assert gc.get_freeze_count() >= frozen + len(kept)
    assert gc.get_objects(generation=2) == []
