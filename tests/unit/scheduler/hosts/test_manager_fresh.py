"""Read-your-writes: a request sees every change committed to the cell and API databases
before it arrived, whatever the refresher is doing (issue 17).

The managers here read the change window at most once an hour, so anything a request sees
was found by the request's own read (``CellReads._request_read``) or by
``sync_aggregates``, not by a window read that happened to be due. Each test runs on SQLite
(reads on the pool's threads) and on MariaDB through PyMySQL (reads sent on arrival and
received by the request: ``db.read_ahead``).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import datetime
import threading
import time

import pytest
import sqlalchemy as sa
from oslo_utils import timeutils

import db
from db import models, queries, read_ahead
from scheduler.hosts.table import SERVICE_DISABLED, microseconds
from scheduler.request import SchedulingRequest
from tests.functional.fixtures_db import make_database
from tests.unit.scheduler.hosts.env import BASE, Env, request_spec, states_by_host

HOUR = 3600.0


class _MariaDBEnv(Env):
    """``Env`` with its API and cell databases on the MariaDB server."""

    def __init__(self, stack: contextlib.ExitStack):
        self._stack = stack
        self.tmp_path = None
        self.api = db.get_engine(stack.enter_context(make_database("mariadb", "novasched_rw")))
        db.create_schema(self.api, "api")
        self.cells = {}
        self.managers = []

    def cell_url(self, name: str) -> str:
        return self._stack.enter_context(make_database("mariadb", "novasched_rw"))


@pytest.fixture(params=["sqlite", "mariadb"])
def env(request, tmp_path):
    with contextlib.ExitStack() as stack:
        e = Env(tmp_path) if request.param == "sqlite" else _MariaDBEnv(stack)
        e.backend = request.param
        try:
            yield e
        finally:
            for hm in e.managers:
                hm.stop()
            db.dispose_engines()
            read_ahead.dispose_engines()


def _stored(env, when: datetime.datetime) -> datetime.datetime:
    """``when`` as nova's DATETIME column keeps it (MariaDB: whole seconds)."""
    return when.replace(microsecond=0) if env.backend == "mariadb" else when


def _one(hm, uuid):
    (hs,) = hm.get_host_states_by_uuids([uuid])
    return hs


def test_a_disable_committed_before_a_request_is_seen_by_it(env):
    cell = env.add_cell("cell1")
    u = env.add_host(cell, "h1")
    hm = env.manager(window_read_interval=HOUR)
    assert _one(hm, u).service["disabled"] is False

    # nova-api's PUT /os-services: the row's updated_at is nova-api's clock, which may lag
    env.update_service(cell, "h1", disabled=True, disabled_reason="maintenance", updated_at=BASE)
    hs = _one(hm, u)
    assert hs.service["disabled"] is True
    assert hs.service["disabled_reason"] == "maintenance"
    # ComputeFilter's column path reads the table's mirror of the service
    state, _ = hm.table.services(hm.table.rows_of([hs]))
    assert list(state) == [SERVICE_DISABLED]

    env.update_service(cell, "h1", disabled=False, disabled_reason=None, updated_at=BASE)
    assert _one(hm, u).service["disabled"] is False


def test_a_forced_down_service_is_seen_by_the_next_request(env):
    cell = env.add_cell("cell1")
    u1 = env.add_host(cell, "h1")
    u2 = env.add_host(cell, "h2")
    hm = env.manager(window_read_interval=HOUR)
    hm.get_host_states_by_uuids(None)

    env.update_service(cell, "h2", forced_down=True, updated_at=BASE)
    states = states_by_host(hm.get_host_states_by_uuids([u1, u2]))
    assert states["h2"].service["forced_down"] is True
    assert states["h1"].service["forced_down"] is False


def test_a_new_compute_node_and_its_service_are_seen_by_the_next_request(env):
    cell = env.add_cell("cell1")
    env.add_host(cell, "h1")
    hm = env.manager(window_read_interval=HOUR)
    hm.get_host_states_by_uuids(None)

    now = timeutils.utcnow()
    u2 = env.add_host(
        cell, "h2", service={"created_at": now, "updated_at": now}, created_at=now, updated_at=now
    )
    hs = _one(hm, u2)
    assert hs.host == "h2" and hs.service["host"] == "h2"


def test_a_deleted_compute_node_is_gone_for_the_next_request(env):
    cell = env.add_cell("cell1")
    u1 = env.add_host(cell, "h1")
    u2 = env.add_host(cell, "h2")
    hm = env.manager(window_read_interval=HOUR)
    assert len(hm.get_host_states_by_uuids([u1, u2])) == 2

    env.delete_node(cell, u2)
    env.update_node(cell, u2)  # nova's soft delete moves updated_at too
    assert [hs.uuid for hs in hm.get_host_states_by_uuids([u1, u2])] == [u1]


def test_a_request_does_not_wait_for_a_stuck_refresher_read_to_see_a_disable(env, monkeypatch):
    cell = env.add_cell("cell1")
    u = env.add_host(cell, "h1")
    hm = env.manager(window_read_interval=0.05)
    hm.warm_up()
    real = queries.get_compute_services
    release, blocked = threading.Event(), threading.Event()

    def services(engine, updated_since=None, **kw):
        if updated_since is not None and not release.is_set():
            blocked.set()
            release.wait(10)  # the refresher's window read, on a write-locked table
        return real(engine, updated_since=updated_since, **kw)

    monkeypatch.setattr(queries, "get_compute_services", services)
    try:
        hm.start_refresher()
        assert blocked.wait(5)
        env.update_service(cell, "h1", disabled=True, updated_at=BASE)
        started = time.monotonic()
        hs = _one(hm, u)
        assert time.monotonic() - started < 1.0
        assert hs.service["disabled"] is True
    finally:
        release.set()


def test_a_refresher_read_that_began_before_a_disable_does_not_undo_it(env, monkeypatch):
    cell = env.add_cell("cell1")
    u = env.add_host(cell, "h1")
    hm = env.manager(window_read_interval=HOUR)
    hm.get_host_states_by_uuids(None)
    view = hm._cell_reads.views[cell]
    real = queries.get_compute_services
    # what the refresher read just before nova-api disabled the service: a heartbeat row,
    # newer by its own (compute's) clock than nova-api's update
    stale = real(env.cells[cell], updated_since=BASE - datetime.timedelta(days=1))
    beat = timeutils.utcnow() + datetime.timedelta(seconds=30)
    stale = [row._replace(updated_at=beat, report_count=row.report_count + 1) for row in stale]
    read_began = time.monotonic()

    env.update_service(cell, "h1", disabled=True, updated_at=BASE)
    assert _one(hm, u).service["disabled"] is True  # the request's read applied it

    with view.lock:  # the refresher's read ends now and applies what it read
        hm._cell_reads._apply_changes(view, stale, [], read_began=read_began)
    assert view.hosts[u].service["disabled"] is True
    # a read that began after the request's applies its rows as usual
    with view.lock:
        hm._cell_reads._apply_changes(view, stale, [], read_began=time.monotonic())
    assert view.hosts[u].service["disabled"] is False


def test_concurrent_requests_share_a_read_started_after_they_arrived(env, monkeypatch):
    cell = env.add_cell("cell1")
    u = env.add_host(cell, "h1")
    hm = env.manager(window_read_interval=HOUR)
    hm.get_host_states_by_uuids(None)
    real = queries.get_service_exceptions_digest
    calls, gate = [], threading.Event()

    def flagged(engine, *band):
        calls.append(time.monotonic())
        gate.wait(5)
        return real(engine, *band)

    monkeypatch.setattr(queries, "get_service_exceptions_digest", flagged)
    arrived = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        first = pool.submit(hm.get_host_states_by_uuids, [u])
        while not calls:
            time.sleep(0.001)
        # arrived before the read in flight started: they share it
        read = hm._cell_reads.scatter_gather
        others = [pool.submit(read, [hm.cells[cell]], None, False, arrived)]
        # arrived after it started: a read of its own
        late = pool.submit(read, [hm.cells[cell]], None, False, time.monotonic())
        gate.set()
        assert [hs.uuid for hs in first.result(5)] == [u]
        assert all(len(o.result(5)) == 1 for o in others)
        assert len(late.result(5)) == 1
    assert len(calls) == 2


# --------------------------------------------------------------------------- aggregates


def _set_metadata(env, agg_id: int, key: str, value: str, when: datetime.datetime) -> None:
    t = models.aggregate_metadata
    with env.api.begin() as conn:
        done = conn.execute(
            t.update()
            .where(t.c.aggregate_id == agg_id, t.c.key == key)
            .values(value=value, updated_at=when)
        )
        if not done.rowcount:
            conn.execute(
                t.insert().values(aggregate_id=agg_id, key=key, value=value, created_at=when)
            )


def test_sync_aggregates_sees_a_host_added_then_removed(env):
    env.add_cell("cell1")
    agg = env.add_aggregate("az1", ["h1"], {"availability_zone": "az1"})
    hm = env.manager(window_read_interval=HOUR)
    assert [a.id for a in hm.aggregates_for_host("h2")] == []

    with env.api.begin() as conn:
        conn.execute(models.aggregate_hosts.insert().values(aggregate_id=agg.id, host="h2"))
    hm.sync_aggregates()
    assert [a.id for a in hm.aggregates_for_host("h2")] == [agg.id]

    t = models.aggregate_hosts
    with env.api.begin() as conn:
        conn.execute(t.delete().where(t.c.aggregate_id == agg.id, t.c.host == "h1"))
    # a request's check leaves the count of aggregate_hosts out (nova-api's cast applies a
    # removal, as nova's own filters learn it); the refresher's check counts
    hm.sync_aggregates()
    assert [a.id for a in hm.aggregates_for_host("h1")] == [agg.id]
    hm._aggregate_cache.check(count_hosts=True)
    assert hm.aggregates_for_host("h1") == []


def test_sync_aggregates_sees_a_metadata_change_in_the_same_second_as_the_last_read(env):
    env.add_cell("cell1")
    agg = env.add_aggregate("isolated", ["h1"], {"pinned": "true"})
    hm = env.manager(window_read_interval=HOUR)
    second = timeutils.utcnow().replace(microsecond=0)
    _set_metadata(env, agg.id, "pinned", "false", second)
    hm.sync_aggregates()
    assert hm.aggregates_for_host("h1")[0].metadata["pinned"] == "false"
    # same DATETIME second: counts, ids and the last update time look alike
    _set_metadata(env, agg.id, "pinned", "maybe", second)
    hm.sync_aggregates()
    assert hm.aggregates_for_host("h1")[0].metadata["pinned"] == "maybe"


def test_sync_aggregates_reads_nothing_whole_when_nothing_changed(env, monkeypatch):
    env.add_cell("cell1")
    env.add_aggregate("az1", ["h1"], {"availability_zone": "az1"})
    hm = env.manager(window_read_interval=HOUR)
    # the last change is well before the last whole read
    hm._aggregate_cache._seen = (
        hm._aggregate_cache._seen[0],
        hm._aggregate_cache._seen[1] + datetime.timedelta(seconds=5),
    )
    reads = []
    real = db.get_aggregates
    monkeypatch.setattr(db, "get_aggregates", lambda e: reads.append(1) or real(e))
    for _ in range(3):
        hm.sync_aggregates()
    assert reads == []


def test_sync_aggregates_keeps_the_aggregates_held_when_the_api_database_fails(
    env, monkeypatch, caplog
):
    env.add_cell("cell1")
    agg = env.add_aggregate("az1", ["h1"], {"availability_zone": "az1"})
    hm = env.manager(window_read_interval=HOUR)

    def broken(engine, **kwargs):
        raise sa.exc.OperationalError("select", {}, Exception("gone away"))

    monkeypatch.setattr(db, "get_aggregates_fingerprint", broken)
    hm.sync_aggregates()
    assert [a.id for a in hm.aggregates_for_host("h1")] == [agg.id]
    assert "Could not check the aggregates" in caplog.text


def test_without_read_your_writes_a_disable_waits_for_the_refresher(env):
    from scheduler.conf import CONF

    CONF.set_override("read_your_writes", False, group="scheduler")
    cell = env.add_cell("cell1")
    u = env.add_host(cell, "h1")
    hm = env.manager(window_read_interval=HOUR)
    hm.get_host_states_by_uuids(None)
    env.update_service(cell, "h1", disabled=True)
    assert _one(hm, u).service["disabled"] is False  # not read by requests
    hm._cell_reads.refresh_cell(hm.cells[cell], window=True)  # the refresher's next read
    assert _one(hm, u).service["disabled"] is True


def test_a_compute_that_came_back_is_up_for_the_next_request(env):
    cell = env.add_cell("cell1")
    u = env.add_host(cell, "h1")  # last heartbeat an hour ago: down
    hm = env.manager(window_read_interval=HOUR)
    hm.get_host_states_by_uuids(None)
    beat = _stored(env, timeutils.utcnow())
    env.update_service(cell, "h1", last_seen_up=beat, updated_at=BASE)
    assert _one(hm, u).service["last_seen_up"] == beat


def test_a_compute_that_stopped_reporting_is_judged_on_the_databases_heartbeat(env):
    cell = env.add_cell("cell1")
    recent = timeutils.utcnow() - datetime.timedelta(seconds=5)
    u = env.add_host(cell, "h1", service={"last_seen_up": recent})
    hm = env.manager(window_read_interval=HOUR)
    hm.get_host_states_by_uuids(None)
    # as if service_down_time had passed since its last heartbeat
    old = _stored(env, recent - datetime.timedelta(hours=1))
    env.update_service(cell, "h1", last_seen_up=old, updated_at=BASE)
    hs = _one(hm, u)
    assert hs.service["last_seen_up"] == old
    state, last = hm.table.services(hm.table.rows_of([hs]))
    assert last[0] == microseconds(old)


def test_a_prefetched_read_is_joined_by_the_request(env, monkeypatch):
    cell = env.add_cell("cell1")
    u = env.add_host(cell, "h1")
    hm = env.manager(window_read_interval=HOUR)
    hm.get_host_states_by_uuids(None)
    real = queries.get_service_exceptions_digest
    calls = []
    monkeypatch.setattr(
        queries, "get_service_exceptions_digest", lambda *a: calls.append(1) or real(*a)
    )
    req = SchedulingRequest.of(request_spec())
    req.arrived_at = time.monotonic()
    hm.prefetch(req)
    hosts = hm.get_host_states_by_uuids([u], req)
    assert [hs.uuid for hs in hosts] == [u]
    assert len(calls) == 1
