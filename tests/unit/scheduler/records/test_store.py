"""The decision store on a temporary SQLite file: tables, add, find, list, prune, and what
it refuses to open."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from scheduler.records import DecisionRecord, DecisionStore, StoreError
from scheduler.records import store as store_mod
from scheduler.records.record import MAX_DOCUMENT_BYTES
from tests.unit.scheduler.records.builders import T0, make_record


def _rows(store: DecisionStore, table: str) -> int:
    with store.engine.connect() as conn:
        return conn.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar()


# -- the schema ---------------------------------------------------------------------------------
def test_tables_and_indexes_are_ours_and_created_once(store, store_url):
    inspector = sa.inspect(store.engine)
    assert sorted(inspector.get_table_names()) == sorted(store_mod.TABLES)
    indexes = {
        table: {ix["name"]: ix["column_names"] for ix in inspector.get_indexes(table)}
        for table in store_mod.TABLES
    }
    assert indexes[store_mod.DECISIONS] == {
        "novasched_decisions_created_at_idx": ["created_at", "id"],
        "novasched_decisions_request_id_idx": ["request_id"],
    }
    assert indexes[store_mod.INSTANCES] == {
        "novasched_decision_instances_uuid_idx": ["instance_uuid"]
    }
    assert indexes[store_mod.HOSTS] == {
        "novasched_decision_hosts_host_idx": ["host", "created_at", "decision_id"]
    }
    store.add([make_record(1)])
    # a second store on the same file (a restart, another worker) keeps what is there
    again = DecisionStore(store_url)
    assert again.count() == 1
    again.close()


def test_the_sqlite_file_is_in_wal_mode(store, tmp_path):
    store.add([make_record(1)])
    conn = sqlite3.connect(tmp_path / "decisions.sqlite")
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()


def test_tables_can_live_beside_other_tables(tmp_path):
    url = f"sqlite:///{tmp_path}/operator.sqlite"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE instances (id INTEGER PRIMARY KEY, host TEXT)")
        conn.exec_driver_sql("INSERT INTO instances (host) VALUES ('compute-1')")
    engine.dispose()
    store = DecisionStore(url)
    store.add([make_record(1)])
    names = set(sa.inspect(store.engine).get_table_names())
    assert names == {"instances", *store_mod.TABLES}
    store.close()


# -- add, find, list ----------------------------------------------------------------------------
def test_a_batch_is_written_and_read_back_as_it_was(store):
    doc = {"request": {"flavor": {"name": "m1.small", "vcpus": 2}}, "weighed": [{"host": "a"}]}
    rec = make_record(
        1,
        hosts=["compute-1", "compute-2"],
        instances=["11111111-1111-1111-1111-111111111111", "22222222-2222-2222-2222-222222222222"],
        document=doc,
    )
    rec.created_at = T0.replace(microsecond=123456)
    ids = store.add([rec, make_record(2), make_record(3)])
    assert len(ids) == 3 and ids == sorted(ids)
    [got] = store.by_request("req-1")
    assert got.id == ids[0]
    assert got.created_at == T0.replace(microsecond=123456)
    assert got.instance_uuids == rec.instance_uuids
    assert got.hosts == ["compute-1", "compute-2"]
    assert got.outcome == "scheduled"
    assert got.document == doc


def test_a_batch_is_one_transaction(store):
    store.add([make_record(1)])
    # the side table goes missing: the batch fails after its decisions were inserted
    with store.engine.begin() as conn:
        conn.exec_driver_sql(f"ALTER TABLE {store_mod.HOSTS} RENAME TO elsewhere")
    with pytest.raises(sa.exc.OperationalError, match="no such table"):
        store.add([make_record(2), make_record(3)])
    assert [r.request_id for r in store.list()] == ["req-1"]
    assert _rows(store, store_mod.INSTANCES) == 1


def test_an_instance_is_found_in_every_decision_that_names_it_newest_first(store):
    uuid = "33333333-3333-3333-3333-333333333333"
    store.add(
        [
            make_record(1, instances=[uuid, "44444444-4444-4444-4444-444444444444"]),
            make_record(2),
            # the reschedule, later
            make_record(3, instances=[uuid], outcome="no_valid_host", hosts=[]),
        ]
    )
    found = store.by_instance(uuid)
    assert [r.request_id for r in found] == ["req-3", "req-1"]
    assert found[0].hosts == [] and found[0].outcome == "no_valid_host"
    assert store.by_instance("55555555-5555-5555-5555-555555555555") == []
    # find: by instance or request id, one list, no decision twice
    assert [r.request_id for r in store.find(uuid)] == ["req-3", "req-1"]
    assert [r.request_id for r in store.find("req-2")] == ["req-2"]
    assert store.find("req-404") == []


def test_list_filters_by_host_and_time_newest_first(store):
    store.add([make_record(i, hosts=[f"compute-{i % 2}", "compute-9"]) for i in range(10)])
    everything = store.list()
    assert [r.request_id for r in everything] == [f"req-{i}" for i in range(9, -1, -1)]
    odd = store.list(host="compute-1")
    assert [r.request_id for r in odd] == ["req-9", "req-7", "req-5", "req-3", "req-1"]
    window = store.list(since=T0 + timedelta(seconds=3), until=T0 + timedelta(seconds=6))
    assert [r.request_id for r in window] == ["req-6", "req-5", "req-4", "req-3"]
    both = store.list(host="compute-0", since=T0 + timedelta(seconds=3), limit=2)
    assert [r.request_id for r in both] == ["req-8", "req-6"]
    assert [r.request_id for r in store.list(limit=3)] == ["req-9", "req-8", "req-7"]
    assert store.list(host="compute-5") == []
    # a host chosen for two instances of one decision lists the decision once
    assert [r.request_id for r in store.list(host="compute-9", limit=100)] == [
        f"req-{i}" for i in range(9, -1, -1)
    ]


def test_one_host_twice_in_a_decision_is_one_side_row(store):
    store.add([make_record(1, hosts=["compute-1", "compute-1", "compute-2"])])
    assert _rows(store, store_mod.HOSTS) == 2
    assert store.by_request("req-1")[0].hosts == ["compute-1", "compute-1", "compute-2"]


def test_times_are_stored_as_naive_utc(store):
    aware = datetime(2026, 11, 26, 12, 0, tzinfo=timezone(timedelta(hours=2)))
    store.add([make_record(1, at=aware)])
    assert store.by_request("req-1")[0].created_at == datetime(2026, 11, 26, 10, 0)
    rec = DecisionRecord(request_id="r", instance_uuids=[], outcome="error")
    assert rec.created_at.tzinfo is None
    assert abs(rec.created_at - datetime.now(UTC).replace(tzinfo=None)) < timedelta(seconds=5)


def test_a_document_that_cannot_be_stored_is_replaced_not_lost(store):
    circular: dict = {"request": {}}
    circular["request"]["self"] = circular
    big = {"filters": ["x" * 1000] * (MAX_DOCUMENT_BYTES // 1000 + 1)}
    odd = {"when": datetime(2026, 1, 1), "traits": {"HW_CPU_X86_AVX2"}}
    store.add(
        [
            make_record(1, document=circular),
            make_record(2, document=big),
            make_record(3, document=odd),
        ]
    )
    first, second, third = (store.by_request(f"req-{i}")[0] for i in (1, 2, 3))
    assert first.document["keys"] == ["request"]
    assert "could not be encoded" in first.document["unrecorded"]
    assert second.document["keys"] == ["filters"]
    assert f"above {MAX_DOCUMENT_BYTES}" in second.document["unrecorded"]
    # values JSON does not know are written as their str
    assert third.document == {"when": "2026-01-01 00:00:00", "traits": "{'HW_CPU_X86_AVX2'}"}
    assert first.hosts == ["compute-1"]  # the record's own fields are kept


def test_a_large_batch_is_split_into_statements_but_keeps_its_order(store, monkeypatch):
    monkeypatch.setattr(store_mod, "_INSERT_PAGE_BYTES", 2000)
    records = [make_record(i, document={"pad": "x" * 500, "i": i}) for i in range(20)]
    ids = store.add(records)
    assert len(ids) == len(set(ids)) == 20
    for i, decision_id in enumerate(ids):
        [rec] = store.by_request(f"req-{i}")
        assert rec.id == decision_id and rec.document["i"] == i


def test_without_returning_each_row_gets_its_id(store):
    store._returning = False  # as on MySQL, which has no INSERT ... RETURNING
    ids = store.add([make_record(i) for i in range(5)])
    assert [store.by_request(f"req-{i}")[0].id for i in range(5)] == ids


# -- prune --------------------------------------------------------------------------------------
def test_prune_by_age_deletes_the_old_and_their_side_rows(store):
    store.add([make_record(i) for i in range(10)])
    now = T0 + timedelta(seconds=100)
    pruned = store.prune(max_age=95.5, now=now)  # older than T0 + 4.5 s
    assert (pruned.by_age, pruned.by_count, pruned.more) == (5, 0, False)
    assert sorted(r.request_id for r in store.list()) == [f"req-{i}" for i in range(5, 10)]
    assert _rows(store, store_mod.INSTANCES) == 5
    assert _rows(store, store_mod.HOSTS) == 5
    assert store.prune(max_age=95.5, now=now).deleted == 0


def test_prune_by_count_keeps_the_newest(store):
    # written out of time order: "oldest" is by time, not by id
    store.add([make_record(i) for i in (5, 1, 7, 3, 9, 0, 8, 2, 6, 4)])
    pruned = store.prune(max_records=4)
    assert (pruned.by_age, pruned.by_count) == (0, 6)
    assert [r.request_id for r in store.list()] == ["req-9", "req-8", "req-7", "req-6"]
    assert store.count() == 4
    assert _rows(store, store_mod.INSTANCES) == _rows(store, store_mod.HOSTS) == 4


def test_prune_applies_age_then_count(store):
    store.add([make_record(i) for i in range(10)])
    pruned = store.prune(max_age=5.5, max_records=2, now=T0 + timedelta(seconds=10))
    assert (pruned.by_age, pruned.by_count) == (5, 3)
    assert [r.request_id for r in store.list()] == ["req-9", "req-8"]


def test_prune_works_in_bounded_chunks(store):
    store.add([make_record(i) for i in range(25)])
    deletes = []
    real_delete = store.delete

    def delete(ids):
        deletes.append(len(ids))
        real_delete(ids)

    store.delete = delete
    first = store.prune(max_records=3, chunk=4, max_chunks=2)
    assert (first.deleted, first.more) == (8, True)
    assert deletes == [4, 4]
    rest = []
    while True:
        pruned = store.prune(max_records=3, chunk=4, max_chunks=2)
        rest.append(pruned.deleted)
        if not pruned.more:
            break
    assert sum(rest) == 25 - 3 - 8
    assert max(deletes) == 4
    assert [r.request_id for r in store.list()] == ["req-24", "req-23", "req-22"]


def test_the_count_is_checked_again_only_after_something_was_added(store, monkeypatch):
    store.add([make_record(i) for i in range(5)])
    assert store.prune(max_records=3).by_count == 2
    scans = []
    real = store._delete_older
    monkeypatch.setattr(store, "_delete_older", lambda *a, **k: scans.append(1) or real(*a, **k))
    assert store.prune(max_records=3).by_count == 0
    assert scans == []  # nothing added since: not even looked for
    store.add([make_record(10)])
    assert store.prune(max_records=3).by_count == 1
    assert [r.request_id for r in store.list()] == ["req-10", "req-4", "req-3"]
    # a lower limit is a new question
    assert store.prune(max_records=1).by_count == 2


def test_a_late_record_pruned_at_once_does_not_hide_the_next_ones(store):
    # a record made long before it is written (it waited in a queue) is the oldest, so the
    # prune deletes the highest id; the next id must still be new, or the next prune would
    # believe nothing was added
    store.add([make_record(i) for i in range(10, 15)])
    assert store.prune(max_records=5).deleted == 0
    store.add([make_record(1)])
    assert store.prune(max_records=5).by_count == 1
    store.add([make_record(20)])
    assert store.prune(max_records=5).by_count == 1
    assert [r.request_id for r in store.list()] == [
        "req-20",
        "req-14",
        "req-13",
        "req-12",
        "req-11",
    ]


# -- opening ------------------------------------------------------------------------------------
def test_reading_never_creates_a_store(tmp_path):
    path = tmp_path / "missing.sqlite"
    with pytest.raises(StoreError, match="the file does not exist"):
        DecisionStore(f"sqlite:///{path}", create=False)
    assert not path.exists()
    sa.create_engine(f"sqlite:///{path}").connect().close()  # an empty database
    with pytest.raises(StoreError, match=r"no table novasched_decisions, .*: no decision"):
        DecisionStore(f"sqlite:///{path}", create=False)


@pytest.mark.parametrize(
    "url, message",
    [
        ("not a url", "not a SQLAlchemy database URL"),
        ("nosuchdialect://x/y", "cannot load its database driver"),
        ("sqlite:////nonexistent-dir/x/decisions.sqlite", "directory /nonexistent-dir/x does not"),
    ],
)
def test_a_store_that_cannot_be_opened_says_why(url, message):
    with pytest.raises(StoreError, match=message):
        DecisionStore(url)


def test_a_server_that_refuses_is_a_store_error_quickly():
    # nothing listens on port 1
    with pytest.raises(StoreError, match="(?i)can't connect|connection refused"):
        DecisionStore("mysql+pymysql://root@127.0.0.1:1/x", connect_timeout=1)


def test_urls_are_shown_without_their_password():
    assert (
        store_mod.safe_url("mysql+pymysql://nova:s3cret@db/nova")
        == "mysql+pymysql://nova:***@db/nova"
    )
    assert store_mod.parse_url("mysql://db/x").drivername == "mysql+pymysql"
    assert store_mod.parse_url("postgres://db/x").drivername == "postgresql"


def test_as_dict_is_json(store):
    store.add([make_record(1)])
    [rec] = store.list()
    data = json.loads(json.dumps(rec.as_dict()))
    assert data["created_at"] == "2026-11-26T10:00:01.000000Z"
    assert data["request_id"] == "req-1" and data["document"] == {"i": 1}


class _DriverError(Exception):
    """What PyMySQL raises: the server's error number first."""


def test_a_deadlock_victim_is_written_again_other_errors_are_not(store, monkeypatch):
    monkeypatch.setattr(store_mod.time, "sleep", lambda s: None)
    real = store._add_rows
    calls = []

    def deadlocking(conn, rows, records):
        calls.append(len(rows))
        ids = real(conn, rows, records)  # written, then rolled back by the "deadlock"
        if len(calls) == 1:
            raise sa.exc.OperationalError("INSERT", {}, _DriverError(1213, "Deadlock found"))
        return ids

    monkeypatch.setattr(store, "_add_rows", deadlocking)
    ids = store.add([make_record(1), make_record(2)])
    assert calls == [2, 2] and len(ids) == 2
    assert store.count() == 2  # once, not twice

    def failing(conn, rows, records):
        calls.append(len(rows))
        raise sa.exc.OperationalError("INSERT", {}, _DriverError(1146, "Table doesn't exist"))

    monkeypatch.setattr(store, "_add_rows", failing)
    calls.clear()
    with pytest.raises(sa.exc.OperationalError, match="1146"):
        store.add([make_record(3)])
    assert calls == [1]


# -- finding as nova writes, listing by outcome and by the document's values (issue 32) ---------
def test_upper_case_and_other_spellings_of_a_uuid_find_what_nova_wrote(store):
    uuid = "5b7c0e2a-1111-4f6e-9d43-2b1a4c3e0a01"
    request = "req-9a8b7c6d-2222-4f6e-9d43-2b1a4c3e0a02"
    store.add(
        [
            make_record(1, instances=[uuid]),
            DecisionRecord(request_id=request, instance_uuids=[], outcome="error"),
            make_record(3),
        ]
    )
    for key in (uuid.upper(), uuid.replace("-", ""), f"{{{uuid.upper()}}}", f" {uuid} "):
        assert [r.request_id for r in store.find(key)] == ["req-1"], key
    assert [r.request_id for r in store.find(request.upper())] == [request]
    assert [r.request_id for r in store.find("REQ-" + request[4:].upper())] == [request]
    # what is not a uuid is looked up as given
    assert [r.request_id for r in store.find("req-3")] == ["req-3"]
    assert store.find("REQ-3") == []


def test_a_request_id_written_in_upper_case_is_still_found_as_written(store):
    caller = "req-5B7C0E2A-1111-4F6E-9D43-2B1A4C3E0A01"
    store.add([DecisionRecord(request_id=caller, instance_uuids=[], outcome="scheduled")])
    assert [r.request_id for r in store.find(caller)] == [caller]


@pytest.mark.parametrize(
    "key, canonical",
    [
        ("5B7C0E2A-1111-4F6E-9D43-2B1A4C3E0A01", "5b7c0e2a-1111-4f6e-9d43-2b1a4c3e0a01"),
        ("urn:uuid:5B7C0E2A11114F6E9D432B1A4C3E0A01", "5b7c0e2a-1111-4f6e-9d43-2b1a4c3e0a01"),
        ("Req-5B7C0E2A-1111-4F6E-9D43-2B1A4C3E0A01", "req-5b7c0e2a-1111-4f6e-9d43-2b1a4c3e0a01"),
        (" compute-1 ", "compute-1"),
        ("req-", "req-"),
        ("", ""),
    ],
)
def test_the_canonical_key_is_novas_spelling(key, canonical):
    assert store_mod.canonical_key(key) == canonical


def test_list_filters_by_outcome_in_the_query(store):
    outcomes = ["scheduled", "no_valid_host", "scheduled", "error", "no_valid_host", "scheduled"]
    store.add([make_record(i, outcome=o, hosts=["compute-1"]) for i, o in enumerate(outcomes)])
    refused = store.list(outcome="no_valid_host")
    assert [r.request_id for r in refused] == ["req-4", "req-1"]
    # the limit counts the matching decisions (the newest decision is another outcome)
    assert [r.request_id for r in store.list(outcome="no_valid_host", limit=1)] == ["req-4"]
    assert [r.request_id for r in store.list(outcome="error", host="compute-1")] == ["req-3"]
    assert store.list(outcome="error", host="compute-2") == []
    later = store.list(outcome="scheduled", since=T0 + timedelta(seconds=2))
    assert [r.request_id for r in later] == ["req-5", "req-2"]


def _asked(i: int, project: str, flavor: str, **more) -> DecisionRecord:
    # all at one time: the pages are cut by id then
    return make_record(
        i, at=T0, document={"request": {"project_id": project, "flavor": {"name": flavor}}, **more}
    )


def test_list_filters_by_values_inside_the_document(store, monkeypatch):
    monkeypatch.setattr(store_mod, "_MATCH_PAGE", 2)  # several pages for a few matches
    store.add(
        [
            _asked(0, "p1", "m1.small"),
            _asked(1, "p2", "m1.small"),
            _asked(2, "p1", "m1.large"),
            # the text names p1 and m1.small elsewhere: not this request's
            _asked(3, "p2", "m1.tiny", spec={"project_id": "p1"}, image={"name": "m1.small"}),
            _asked(4, "p2", "m1.large"),
            _asked(5, "p1", "m1.small"),
            make_record(6, document={"request": None}),
            _asked(7, "p3", "m1.small"),
        ]
    )

    def ids(**document):
        return [r.request_id for r in store.list(document=document, limit=50)]

    assert ids(**{"request.project_id": "p1"}) == ["req-5", "req-2", "req-0"]
    assert ids(**{"request.flavor.name": "m1.small"}) == ["req-7", "req-5", "req-1", "req-0"]
    both = {"request.project_id": "p1", "request.flavor.name": "m1.small"}
    assert ids(**both) == ["req-5", "req-0"]
    # the limit counts matches, read a page at a time (req-3 mentions p1 but is p2's: the
    # first page of two holds one match)
    p1 = {"request.project_id": "p1"}
    assert [r.request_id for r in store.list(document=p1, limit=2)] == ["req-5", "req-2"]
    assert [r.request_id for r in store.list(document=p1, limit=3)] == ["req-5", "req-2", "req-0"]
    assert [r.request_id for r in store.list(document=both, limit=1)] == ["req-5"]
    assert ids(**{"request.project_id": "nobody"}) == []


def test_document_values_with_like_wildcards_are_matched_as_written(store):
    store.add([_asked(1, "team_a/b%", "x"), _asked(2, "teamXa/bX", "x"), _asked(3, "team", "x")])
    found = store.list(document={"request.project_id": "team_a/b%"})
    assert [r.request_id for r in found] == ["req-1"]
    assert store_mod._mention("request.project_id", "a_b%c/d") == '%"project/_id":"a/_b/%c//d"%'
