"""AggregateCache against a real SQLite API database with nova's schema: what it reads, when it
reads again, and the lookup by host name it attaches after every change."""

from __future__ import annotations

import concurrent.futures
import logging
import time

import pytest
import sqlalchemy as sa

import db
from db import models
from scheduler.conf import CONF
from scheduler.hosts.aggregate_cache import AggregateCache
from scheduler.objects import Aggregate
from tests.unit.scheduler.hosts.env import new_uuid


class Cache:
    """An AggregateCache over ``env``'s API database, with what it attached."""

    def __init__(self, env, refreshing: bool = False) -> None:
        self.attached: list = []
        self.pool = concurrent.futures.ThreadPoolExecutor(2)
        self.cache = AggregateCache(
            CONF, env.api, self.pool, lambda: refreshing, self.attached.append
        )


@pytest.fixture
def make(env):
    made: list[Cache] = []

    def make(refreshing: bool = False) -> Cache:
        made.append(Cache(env, refreshing))
        return made[-1]

    yield make
    for cache in made:
        cache.pool.shutdown(wait=True)


def _ids(aggregates) -> list[int]:
    return [a.id for a in aggregates]


def _count_reads(monkeypatch) -> list[int]:
    reads: list[int] = []
    real = db.get_aggregates
    monkeypatch.setattr(db, "get_aggregates", lambda e: reads.append(1) or real(e))
    return reads


def test_a_refresh_attaches_one_shared_list_per_set_of_aggregates(env, make):
    a = env.add_aggregate("a", ["h1", "h2", "h3"], {"availability_zone": "az1"})
    b = env.add_aggregate("b", ["h2", "h1"], {"ssd": "true"})
    cached = make()
    cache = cached.cache
    cache.refresh()

    (lookup,) = cached.attached
    assert _ids(lookup("h1")) == sorted([a.id, b.id])
    assert lookup("h1") is lookup("h2")  # hosts in the same aggregates share one list
    assert _ids(lookup("h3")) == [a.id]
    assert lookup("elsewhere") == [] and lookup("elsewhere") is lookup("nowhere")
    assert sorted(_ids(cache.aggregates)) == sorted([a.id, b.id])


def test_nova_apis_casts_change_the_aggregates_and_attach_them_again(env, make):
    env.add_aggregate("a", ["h1"], {})
    cached = make()
    cache = cached.cache
    cache.refresh()

    cast = Aggregate(id=999, uuid=new_uuid(), name="cast", hosts={"h9"}, metadata={"k": "v"})
    cache.update([cast])
    assert _ids(cache.for_host("h9")) == [999]
    assert len(cached.attached) == 2 and _ids(cached.attached[-1]("h9")) == [999]

    cache.delete(cast)
    cache.delete(Aggregate(id=12345, uuid=new_uuid(), name="never"))  # unknown: no error
    assert cache.for_host("h9") == [] and len(cached.attached) == 4


def test_a_check_reads_again_only_when_the_tables_changed(env, make, monkeypatch):
    env.add_aggregate("a", ["h1"], {"availability_zone": "az1"})
    cache = make().cache
    cache.refresh()
    reads = _count_reads(monkeypatch)

    cache.check()
    assert reads == []  # nothing changed since the whole read

    env.add_aggregate("b", ["h2"], {})
    cache.check()
    assert reads == [1] and [a.name for a in cache.for_host("h2")] == ["b"]


def test_a_requests_check_leaves_a_host_taken_out_to_the_refreshers(env, make):
    agg = env.add_aggregate("a", ["h1", "h2"], {})
    cache = make().cache
    cache.refresh()
    t = models.aggregate_hosts
    with env.api.begin() as conn:
        conn.execute(t.delete().where(t.c.aggregate_id == agg.id, t.c.host == "h1"))

    cache.check()  # a request's: no count of aggregate_hosts
    assert _ids(cache.for_host("h1")) == [agg.id]
    cache.check(count_hosts=True)  # the refresher's
    assert cache.for_host("h1") == []


def test_catch_up_sees_what_was_committed_before_it(env, make):
    cache = make().cache
    env.add_aggregate("late", ["h1"], {})

    cache.catch_up()
    assert [a.name for a in cache.for_host("h1")] == ["late"]


def test_without_read_your_writes_catch_up_reads_nothing(env, make, monkeypatch):
    CONF.set_override("read_your_writes", False, group="scheduler")
    cache = make().cache
    env.add_aggregate("late", ["h1"], {})
    checks: list[int] = []
    monkeypatch.setattr(db, "get_aggregates_fingerprint", lambda *a, **k: checks.append(1))

    cache.prefetch(time.monotonic())
    cache.catch_up()
    assert checks == [] and cache.for_host("h1") == []


def test_catch_up_keeps_the_aggregates_held_when_the_api_database_fails(
    env, make, monkeypatch, caplog
):
    agg = env.add_aggregate("a", ["h1"], {})
    cache = make().cache
    cache.refresh()

    def broken(engine, **kwargs):
        raise sa.exc.OperationalError("select", {}, Exception("gone away"))

    monkeypatch.setattr(db, "get_aggregates_fingerprint", broken)
    with caplog.at_level(logging.WARNING, logger="scheduler.hosts.manager"):
        cache.catch_up()
    assert _ids(cache.for_host("h1")) == [agg.id]
    assert "Could not check the aggregates" in caplog.text


def test_a_prefetched_check_is_joined_by_the_requests_catch_up(env, make, monkeypatch):
    cache = make().cache
    cache.refresh()
    checks: list[int] = []
    real = db.get_aggregates_fingerprint
    monkeypatch.setattr(
        db, "get_aggregates_fingerprint", lambda *a, **k: checks.append(1) or real(*a, **k)
    )
    arrived = time.monotonic()

    cache.prefetch(arrived)
    cache.catch_up(arrived)
    assert checks == [1]
    cache.catch_up()  # arrived after that check started: one of its own
    assert checks == [1, 1]


@pytest.mark.parametrize(
    ("ttl", "read_your_writes", "refreshing", "read"),
    [
        (-1, False, False, False),  # never re-read
        (3600, False, False, False),  # not expired yet
        (0, False, False, True),  # every call
        (0, True, False, True),  # no refresher to check them
        (0, True, True, False),  # requests and the refresher check them instead
    ],
)
def test_refresh_if_stale(env, make, monkeypatch, ttl, read_your_writes, refreshing, read):
    CONF.set_override("aggregate_cache_ttl", ttl, group="scheduler")
    CONF.set_override("read_your_writes", read_your_writes, group="scheduler")
    cache = make(refreshing).cache
    cache.refresh()
    reads = _count_reads(monkeypatch)

    cache.refresh_if_stale()
    assert reads == ([1] if read else [])


def test_a_failed_refresh_keeps_serving_the_aggregates_held(env, make, monkeypatch, caplog):
    agg = env.add_aggregate("a", ["h1"], {"availability_zone": "az1"})
    CONF.set_override("aggregate_cache_ttl", 0, group="scheduler")
    CONF.set_override("read_your_writes", False, group="scheduler")
    cache = make().cache
    cache.refresh()

    def broken(engine):
        raise sa.exc.OperationalError("select", {}, Exception("API database is down"))

    monkeypatch.setattr(db, "get_aggregates", broken)
    with caplog.at_level(logging.WARNING, logger="scheduler.hosts.manager"):
        found = cache.by_metadata(key="availability_zone")
    assert _ids(found) == [agg.id] and _ids(cache.for_host("h1")) == [agg.id]
    assert "Could not refresh aggregates" in caplog.text


def test_by_metadata_matches_every_condition_given(env, make):
    CONF.set_override("aggregate_cache_ttl", -1, group="scheduler")
    az = env.add_aggregate("az", ["h1"], {"availability_zone": "az1"})
    tenant = env.add_aggregate("t", ["h2"], {"filter_tenant_id": "p1", "ssd": "true"})
    cache = make().cache
    cache.refresh()

    assert _ids(cache.by_metadata(key="availability_zone")) == [az.id]
    assert _ids(cache.by_metadata(key_prefix="filter_tenant")) == [tenant.id]
    assert _ids(cache.by_metadata(key="ssd", value="false")) == []
    assert sorted(_ids(cache.by_metadata())) == sorted([az.id, tenant.id])
