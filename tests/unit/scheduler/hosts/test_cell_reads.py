"""CellReads on its own, against real SQLite cell databases with nova's schema: the cells it
is given, what it holds of each, the aggregates it hands its HostStates, and what it tells
about the cells. (What a read sees and when is test_manager*.py's, through the manager.)"""

from __future__ import annotations

import concurrent.futures
import threading
import time

import pytest

from scheduler.conf import CONF
from scheduler.hosts.cell_reads import CellReads
from scheduler.hosts.cells import Cell
from scheduler.hosts.table import HostTable, table_of
from scheduler.objects import Aggregate
from tests.unit.scheduler.hosts.env import break_cell, new_uuid, states_by_host, utcnow


@pytest.fixture
def reads():
    pool = concurrent.futures.ThreadPoolExecutor(2)
    # no refresher: a request reads the change window itself when it is due
    made = CellReads(CONF, HostTable(), pool, lambda: False)
    made.window_read_interval = 0.0
    yield made
    pool.shutdown(wait=True)


def _cell(env, uuid: str, name: str, **kw) -> Cell:
    return Cell(uuid=uuid, name=name, database_connection=env.cell_url(name), **kw)


def _adopt(reads: CellReads, *cells: Cell) -> None:
    reads.adopt({c.uuid: c for c in cells})


def _aggregate(agg_id: int, *hosts: str) -> Aggregate:
    return Aggregate(id=agg_id, uuid=new_uuid(), name=f"agg{agg_id}", hosts=set(hosts))


def test_adopt_keeps_the_enabled_cells_apart(env, reads):
    c1, c2 = env.add_cell("cell1"), env.add_cell("off")
    _adopt(reads, _cell(env, c1, "cell1"), _cell(env, c2, "off", disabled=True))

    assert set(reads.cells) == {c1, c2}
    assert set(reads.enabled_cells) == {c1}


def test_a_renamed_cell_keeps_its_hosts_and_a_moved_one_is_read_again(env, reads):
    c1 = env.add_cell("cell1")
    env.add_host(c1, "h1")
    env.add_host(c1, "h2")
    _adopt(reads, _cell(env, c1, "cell1"))
    assert reads.warm_up() == 2
    held = list(reads.views[c1].hosts.values())

    _adopt(reads, Cell(uuid=c1, name="renamed", database_connection=env.cell_url("cell1")))
    assert reads.views[c1].cell.name == "renamed"
    assert list(reads.views[c1].hosts.values()) == held
    assert reads.table.collect(time.monotonic() + HostTable.RELEASE_DELAY) == 0

    moved = Cell(uuid=c1, name="renamed", database_connection=env.cell_url("elsewhere"))
    _adopt(reads, moved)
    assert c1 not in reads.views
    # its HostStates leave the table (once no request can hold their rows)
    assert reads.table.collect(time.monotonic() + HostTable.RELEASE_DELAY) == 2
    assert table_of(held) is None


def test_attached_aggregates_reach_the_hosts_held_and_those_read_later(env, reads):
    c1 = env.add_cell("cell1")
    env.add_host(c1, "h1")
    _adopt(reads, _cell(env, c1, "cell1"))
    reads.warm_up()
    agg = _aggregate(7, "h1", "h2")
    by_host = {"h1": [agg], "h2": [agg]}

    reads.attach_aggregates(lambda host: by_host.get(host, []))
    (h1,) = reads.host_states_for("h1")
    assert h1.aggregates == [agg]

    now = utcnow()
    env.add_host(c1, "h2", service={"created_at": now, "updated_at": now}, updated_at=now)
    reads.scatter_gather(list(reads.enabled_cells.values()), window=True)
    (h2,) = reads.host_states_for("h2")
    assert h2.aggregates == [agg]


def test_warm_up_skips_a_cell_that_fails_and_status_says_so(env, reads, monkeypatch):
    good, bad = env.add_cell("good"), env.add_cell("bad")
    env.add_host(good, "h1")
    env.add_host(bad, "h2")
    _adopt(reads, _cell(env, good, "good"), _cell(env, bad, "bad"))
    break_cell(monkeypatch, env, bad)

    assert reads.warm_up() == 1
    status = {s["name"]: s for s in reads.status()}
    assert (status["good"]["hosts"], status["good"]["failing"]) == (1, False)
    assert (status["bad"]["hosts"], status["bad"]["failing"]) == (0, True)
    assert status["good"]["last_ok_at"] is not None and status["bad"]["last_ok_at"] is None


def test_scatter_gather_leaves_out_a_cell_that_fails(env, reads, monkeypatch):
    good, bad = env.add_cell("good"), env.add_cell("bad")
    env.add_host(good, "h1")
    env.add_host(bad, "h2")
    _adopt(reads, _cell(env, good, "good"), _cell(env, bad, "bad"))
    break_cell(monkeypatch, env, bad)

    got = reads.scatter_gather(list(reads.enabled_cells.values()))
    assert [r.view.cell.name for r in got] == ["good"]
    assert [hs.host for r in got for hs in r.servable.values()] == ["h1"]


def test_host_states_for_finds_the_nodes_of_a_host_across_cells(env, reads):
    c1, c2 = env.add_cell("cell1"), env.add_cell("cell2")
    env.add_host(c1, "h1")
    env.add_host(c1, "ironic", hypervisor_hostname="node-a")
    env.add_host(c2, "ironic", service=False, hypervisor_hostname="node-b")
    _adopt(reads, _cell(env, c1, "cell1"), _cell(env, c2, "cell2"))
    reads.warm_up()

    assert sorted(hs.nodename for hs in reads.host_states_for("ironic")) == ["node-a", "node-b"]
    assert [hs.nodename for hs in reads.host_states_for("ironic", "node-b")] == ["node-b"]
    assert reads.host_states_for("nowhere") == []


def test_a_background_round_stops_between_cells(env, reads):
    c1 = env.add_cell("cell1")
    env.add_host(c1, "h1")
    _adopt(reads, _cell(env, c1, "cell1"))
    stopping = threading.Event()

    stopping.set()
    assert reads.read_in_background(stopping) is False
    assert reads.views == {}

    stopping.clear()
    assert reads.read_in_background(stopping) is True
    assert list(states_by_host(reads.views[c1].hosts.values())) == ["h1"]


def test_the_minimum_compute_version_is_read_when_no_service_is_held(env, reads):
    c1, c2 = env.add_cell("cell1"), env.add_cell("cell2")
    env.add_host(c1, "h1", service={"version": 74})
    env.add_host(c2, "h2", service={"version": 70})
    off = env.add_cell("off")
    env.add_host(off, "h3", service={"version": 60})
    _adopt(reads, _cell(env, c1, "cell1"), _cell(env, c2, "cell2"))
    _adopt(reads, *reads.cells.values(), _cell(env, off, "off", disabled=True))

    assert reads.minimum_compute_version() == 70  # read: nothing was held
    env.update_service(c2, "h2", version=75)
    assert reads.minimum_compute_version() == 70  # held: no read of its own
