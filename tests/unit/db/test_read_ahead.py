"""Statements sent ahead (``db.read_ahead``) on a real MariaDB through PyMySQL: the answer is
the one the statement gives when run the ordinary way, it is computed while the caller
works, and a connection that dies, a statement asked with other parameters or one never
asked for loses nothing."""

from __future__ import annotations

import datetime
import gc
import threading
import time

import pytest
import sqlalchemy as sa

import db
from db import read_ahead
from tests.functional.fixtures_db import make_database

_SLEEP = sa.select(sa.func.sleep(sa.bindparam("s")), sa.bindparam("x"))


@pytest.fixture
def engine():
    with make_database("mariadb", "novasched_ahead") as url:
        yield db.get_engine(url)
        read_ahead.dispose_engines()
        db.dispose_engines()


def _pool(engine):
    return read_ahead._engine_for(engine).pool


def _busy(engine) -> int:
    """The read-ahead connections checked out and not idle: those whose answer nobody
    received yet."""
    pool = read_ahead._engine_for(engine)
    return pool.pool.checkedout() - len(read_ahead._IDLE.get(pool, []))


def test_only_pymysql_engines_are_supported(engine, tmp_path):
    assert read_ahead.supported(engine)
    assert not read_ahead.supported(db.get_engine(f"sqlite:///{tmp_path}/x.db"))


def test_the_answer_is_computed_while_the_caller_works(engine):
    ahead = read_ahead.ReadAhead(engine)
    started = time.perf_counter()
    ahead.send(_SLEEP, {"s": 0.5, "x": 7})
    time.sleep(0.5)  # the caller's own work
    assert ahead.wait(time.monotonic() + 5)
    with ahead.connect() as conn:
        assert conn.execute(_SLEEP, {"s": 0.5, "x": 7}).one() == (0, 7)
    # one sleep, not two (1 s): the database slept while the caller did; the margin is wide
    # for a loaded machine
    assert time.perf_counter() - started < 0.95


def test_wait_says_no_before_the_answer_arrives(engine):
    ahead = read_ahead.ReadAhead(engine)
    ahead.send(_SLEEP, {"s": 0.3, "x": 1})
    assert not ahead.wait(time.monotonic() + 0.05)
    assert ahead.wait(time.monotonic() + 5)
    with ahead.connect() as conn:
        assert conn.execute(_SLEEP, {"s": 0.3, "x": 1}).all() == [(0, 1)]


def test_a_statement_asked_with_other_parameters_runs_again(engine):
    ahead = read_ahead.ReadAhead(engine)
    ahead.send(_SLEEP, {"s": 0, "x": 1})
    with ahead.connect() as conn:
        assert conn.execute(_SLEEP, {"s": 0, "x": 2}).one() == (0, 2)
    # the connection of the statement sent was answered and is idle, for the next send
    assert _busy(engine) == 0
    ahead = read_ahead.ReadAhead(engine)
    ahead.send(_SLEEP, {"s": 0, "x": 5})
    assert _pool(engine).checkedout() == 1  # the idle one again, not a new checkout


def test_a_statement_not_sent_runs_on_the_engine(engine):
    ahead = read_ahead.ReadAhead(engine)
    with ahead.connect() as conn:
        assert conn.execute(sa.select(sa.literal(5))).scalar() == 5


def test_each_statement_sees_commits_made_before_it_was_sent(engine):
    t = sa.Table("t", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True))
    t.metadata.create_all(engine)
    count = sa.select(sa.func.count()).select_from(t)
    for n in range(1, 4):
        with engine.begin() as conn:
            conn.execute(t.insert().values(id=n))
        # the pool's connections are reused: none may keep an older snapshot
        ahead = read_ahead.ReadAhead(engine)
        ahead.send(count)
        with ahead.connect() as conn:
            assert conn.execute(count).one() == (n,)


def test_a_connection_the_database_killed_is_replaced_and_the_statement_runs(engine):
    whoami = sa.select(sa.func.connection_id())
    ahead = read_ahead.ReadAhead(engine)
    ahead.send(whoami)
    with ahead.connect() as conn:
        (victim,) = conn.execute(whoami).one()
    with engine.connect() as conn:
        conn.exec_driver_sql(f"KILL {int(victim)}")
    time.sleep(0.1)
    ahead = read_ahead.ReadAhead(engine)
    ahead.send(_SLEEP, {"s": 0, "x": 3})  # likely on the killed connection
    with ahead.connect() as conn:
        assert conn.execute(_SLEEP, {"s": 0, "x": 3}).one() == (0, 3)
    again = read_ahead.ReadAhead(engine)
    again.send(_SLEEP, {"s": 0, "x": 4})
    with again.connect() as conn:
        assert conn.execute(_SLEEP, {"s": 0, "x": 4}).one() == (0, 4)


def test_a_statement_nobody_asks_for_does_not_keep_its_connection(engine):
    ahead = read_ahead.ReadAhead(engine)
    ahead.send(_SLEEP, {"s": 0, "x": 1})
    assert _busy(engine) == 1
    del ahead
    gc.collect()
    assert _pool(engine).checkedout() == 0  # invalidated: never handed out again
    # and the pool hands out working connections afterwards
    ahead = read_ahead.ReadAhead(engine)
    ahead.send(_SLEEP, {"s": 0, "x": 2})
    with ahead.connect() as conn:
        assert conn.execute(_SLEEP, {"s": 0, "x": 2}).one() == (0, 2)


def test_statements_sent_from_several_threads_get_their_own_answers(engine):
    errors: list[str] = []

    def one(i: int) -> None:
        for j in range(20):
            ahead = read_ahead.ReadAhead(engine)
            ahead.send(_SLEEP, {"s": 0, "x": i * 100 + j})
            with ahead.connect() as conn:
                got = conn.execute(_SLEEP, {"s": 0, "x": i * 100 + j}).one()
            if got != (0, i * 100 + j):
                errors.append(f"{i}/{j}: {got}")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_an_idle_connection_older_than_the_recycle_age_is_closed(engine, monkeypatch):
    ahead = read_ahead.ReadAhead(engine)
    ahead.send(_SLEEP, {"s": 0, "x": 1})
    with ahead.connect() as conn:
        conn.execute(_SLEEP, {"s": 0, "x": 1})
    pool = read_ahead._engine_for(engine)
    [(first, _)] = read_ahead._IDLE[pool]
    monkeypatch.setattr(read_ahead, "_RECYCLE_SECONDS", 0.0)
    again = read_ahead.ReadAhead(engine)
    again.send(_SLEEP, {"s": 0, "x": 2})
    with again.connect() as conn:
        assert conn.execute(_SLEEP, {"s": 0, "x": 2}).one() == (0, 2)
    [(second, _)] = read_ahead._IDLE[pool]
    assert second is not first and _pool(engine).checkedout() == 1


@pytest.mark.parametrize(
    "value",
    [
        0,
        -7,
        2**40,
        "nova-compute",
        'it\'s \\ "quoted"\n',
        None,
        True,
        1.5,
        datetime.datetime(2026, 11, 26, 12, 0, 1, 250),
        datetime.datetime(2026, 11, 26, 12, 0, 1),
        datetime.date(2026, 11, 26),
    ],
)
def test_values_are_written_as_pymysql_writes_them(engine, value):
    ahead = read_ahead.ReadAhead(engine)
    ahead.send(_SLEEP, {"s": 0, "x": 0})
    pool = read_ahead._engine_for(engine)
    with ahead.connect() as conn:
        conn.execute(_SLEEP, {"s": 0, "x": 0})
    [(raw, _)] = read_ahead._IDLE[pool]
    pymysql_conn = raw.driver_connection
    assert read_ahead._sql_literal(pymysql_conn, value) == pymysql_conn.escape(value)
    # and the database reads it back as the same value
    back = read_ahead.ReadAhead(engine)
    stmt = sa.select(sa.bindparam("v", type_=sa.types.NullType()))
    back.send(stmt, {"v": value})
    with back.connect() as conn:
        got = conn.execute(stmt, {"v": value}).one()[0]
    with engine.connect() as conn:
        assert got == conn.execute(stmt, {"v": value}).one()[0]
