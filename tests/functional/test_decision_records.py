"""Decision records on real databases (issue 21): the store on MariaDB and PostgreSQL, records
that survive a restart and are read back by ``novasched-manage decision`` in another
process, and a retention that holds under a burst from two threads and from two processes
on one SQLite file and one MariaDB database."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from scheduler import conf as novasched_conf
from scheduler.records import (
    DecisionRecord,
    DecisionRecorder,
    DecisionStore,
    recorder_from_conf,
)
from scheduler.records import store as store_mod
from tests.functional.fixtures_db import make_database, server_db, server_kind  # noqa: F401
from tests.unit.scheduler.records.builders import T0, make_record

MANAGE = Path(sys.executable).with_name("novasched-manage")
CONF = novasched_conf.CONF


@contextlib.contextmanager
def _database(kind: str, folder: Path) -> Iterator[str]:
    """A fresh store URL of ``kind``: an SQLite file in ``folder``, or a server database."""
    if kind == "sqlite":
        yield f"sqlite:///{folder}/decisions.sqlite"
    else:
        with make_database(kind, "novasched_decisions") as url:
            yield url


def _manage(conf_file: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(MANAGE), "--config-file", str(conf_file), "decision", *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )


# -- the store on the servers -------------------------------------------------------------------
def test_the_store_on_a_server(server_db):  # noqa: F811
    # workers of one host open the store at once: the tables are created once, by one
    stores: list[DecisionStore] = []
    errors: list[BaseException] = []

    def open_store():
        try:
            stores.append(DecisionStore(server_db))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_store) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(stores) == 4
    store = stores[0]
    inspector = sa.inspect(store.engine)
    assert set(store_mod.TABLES) <= set(inspector.get_table_names())
    assert {ix["name"] for ix in inspector.get_indexes(store_mod.DECISIONS)} == {
        "novasched_decisions_created_at_idx",
        "novasched_decisions_request_id_idx",
    }

    # a batch is one INSERT per table, its ids in the records' order
    statements: list[str] = []
    sa.event.listen(
        store.engine, "before_cursor_execute", lambda *a: statements.append(a[2].split()[0])
    )
    uuid_a = str(uuid.uuid4())
    batch = [make_record(i, hosts=[f"compute-{i % 2}"]) for i in range(50)]
    batch[7] = make_record(
        7,
        at=T0 + timedelta(seconds=7, microseconds=654321),
        instances=[uuid_a, str(uuid.uuid4())],
        hosts=["compute-1", "compute-0"],
        document={"reason": "ünïcödé ✓", "weighed": [{"host": "compute-1", "weight": 0.5}]},
    )
    ids = store.add(batch)
    assert [s for s in statements if s.upper() == "INSERT"] == ["INSERT"] * 3
    assert len(ids) == 50 and ids == sorted(ids)
    [seven] = store.by_request("req-7")
    assert seven.id == ids[7]
    assert seven.created_at == T0 + timedelta(seconds=7, microseconds=654321)
    assert seven.document == batch[7].document
    assert seven.hosts == ["compute-1", "compute-0"]

    # an instance in two decisions (the reschedule), newest first
    store.add([make_record(60, instances=[uuid_a], hosts=[], outcome="no_valid_host")])
    assert [r.request_id for r in store.find(uuid_a)] == ["req-60", "req-7"]
    listed = store.list(host="compute-1", since=T0 + timedelta(seconds=40), limit=3)
    assert [r.request_id for r in listed] == ["req-49", "req-47", "req-45"]
    until = store.list(until=T0 + timedelta(seconds=2))
    assert [r.request_id for r in until] == ["req-2", "req-1", "req-0"]

    # documents near the cap, in one batch above a MySQL packet of 4 MB
    big = [make_record(100 + i, document={"pad": "x" * 250_000}) for i in range(20)]
    assert len(store.add(big)) == 20
    assert len(store.by_request("req-119")[0].document["pad"]) == 250_000

    # retention: by age, then by count, in chunks, with the side rows
    assert store.count() == 71
    pruned = store.prune(max_age=3600, now=T0 + timedelta(seconds=3600 + 10.5))
    assert pruned.by_age == 11  # req-0 .. req-10
    pruned = store.prune(max_records=5, chunk=7, max_chunks=3)
    assert (pruned.by_count, pruned.more) == (21, True)
    while store.prune(max_records=5, chunk=7, max_chunks=3).more:
        pass
    assert [r.request_id for r in store.list()] == [f"req-{i}" for i in range(119, 114, -1)]
    with store.engine.connect() as conn:
        for table in (store_mod.INSTANCES, store_mod.HOSTS):
            assert conn.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar() == 5
    for s in stores:
        s.close()


def test_finding_and_listing_as_an_operator_asks_on_a_server(server_db):  # noqa: F811
    """Upper-case uuids, the outcome column and the values inside the documents on each
    server: MariaDB's LIKE ignores case (its collation), PostgreSQL's does not; the store
    answers the same on both."""
    store = DecisionStore(server_db)
    instance = str(uuid.uuid4())

    def asked(i: int, project: str, outcome: str = "scheduled", **more) -> DecisionRecord:
        document = {"request": {"project_id": project, "flavor": {"name": "m1.small"}}, **more}
        return make_record(i, outcome=outcome, document=document)

    store.add(
        [
            make_record(1, instances=[instance]),
            asked(2, "team_a/b%"),
            asked(3, "TEAM_A/B%"),  # the same letters, another case: another project
            asked(4, "teamXa/bX"),
            asked(5, "team_a/b%", outcome="no_valid_host"),
            asked(6, "p2", spec={"project_id": "team_a/b%"}),  # named, but not the request's
        ]
    )
    assert [r.request_id for r in store.find(instance.upper())] == ["req-1"]
    project = {"request.project_id": "team_a/b%"}
    assert [r.request_id for r in store.list(document=project)] == ["req-5", "req-2"]
    refused = store.list(outcome="no_valid_host", document=project)
    assert [r.request_id for r in refused] == ["req-5"]
    small = {"request.flavor.name": "m1.small"}
    assert [r.request_id for r in store.list(document=small, limit=2)] == ["req-6", "req-5"]
    store.close()


def test_two_writers_on_one_server_database(server_db):  # noqa: F811
    stores = [DecisionStore(server_db) for _ in range(2)]
    failures: list[BaseException] = []

    def write(store: DecisionStore, base: int) -> None:
        try:
            for n in range(20):
                store.add([make_record(base + n * 10 + i) for i in range(10)])
        except BaseException as exc:
            failures.append(exc)

    bases = (0, 1000)
    threads = [
        threading.Thread(target=write, args=(s, b)) for s, b in zip(stores, bases, strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert stores[0].count() == 400
    assert len({r.id for r in stores[1].list(limit=None)}) == 400
    for s in stores:
        s.close()


# -- a restart ----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["sqlite", "mariadb", "postgresql"])
def test_records_survive_a_restart_and_the_command_reads_them(kind, tmp_path):
    with _database(kind, tmp_path) as url:
        conf_file = tmp_path / "nova.conf"
        if kind == "sqlite":  # the default store: a file in state_path
            url = f"sqlite:///{tmp_path}/novasched-decisions.sqlite"
            conf_file.write_text(f"[DEFAULT]\nstate_path = {tmp_path}\n")
            CONF.set_override("state_path", str(tmp_path))
        else:
            conf_file.write_text(f"[decision_records]\nconnection = {url}\n")
            CONF.set_override("connection", url, group="decision_records")
        instance, other = str(uuid.uuid4()), str(uuid.uuid4())
        document = {
            "request": {"flavor": {"name": "m1.small", "vcpus": 2}, "num_instances": 2},
            "filters": [{"name": "ComputeFilter", "hosts_in": 21, "hosts_passed": 18}],
            "weighed": [{"host": "compute-12", "weight": 2.93}],
        }
        first = recorder_from_conf(CONF)
        assert first is not None
        assert first.record(
            DecisionRecord(
                request_id="req-first",
                instance_uuids=[instance, other],
                outcome="scheduled",
                hosts=["compute-12", "compute-7"],
                document=document,
            )
        )
        assert first.record(make_record(1))
        assert first.stop(timeout=30)
        first.store.close()

        # the service starts again: a new recorder on the same store
        second = recorder_from_conf(CONF)
        assert second is not None
        reschedule = DecisionRecord(
            request_id="req-again",
            instance_uuids=[instance],
            outcome="no_valid_host",
            document={"reason": "0/20 hosts available: 20 RamFilter (not enough RAM)"},
        )
        assert second.record(reschedule)
        assert second.stop(timeout=30)
        second.store.close()

        reader = DecisionStore(url, create=False)
        assert [r.request_id for r in reader.find(instance)] == ["req-again", "req-first"]
        assert reader.count() == 3
        reader.close()

        # another process reads them back
        shown = _manage(conf_file, "show", instance)
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.index("request id: req-again") < shown.stdout.index(
            "request id: req-first"
        )
        assert "Reason: 0/20 hosts available: 20 RamFilter (not enough RAM)" in shown.stdout
        assert "    - ComputeFilter: hosts_in 21, hosts_passed 18" in shown.stdout
        as_json = _manage(conf_file, "show", instance, "--json")
        assert as_json.returncode == 0
        records = json.loads(as_json.stdout)
        assert [r["outcome"] for r in records] == ["no_valid_host", "scheduled"]
        assert records[1]["document"] == document
        assert records[1]["hosts"] == ["compute-12", "compute-7"]
        listed = _manage(conf_file, "list", "--host", "compute-7", "--since", "1h")
        assert listed.returncode == 0
        assert "req-first" in listed.stdout and "req-again" not in listed.stdout
        missing = _manage(conf_file, "show", str(uuid.uuid4()))
        assert missing.returncode == 2 and "no decision recorded" in missing.stderr


# -- a burst ------------------------------------------------------------------------------------
MAX_RECORDS = 500
PER_WRITER = 2500
QUEUE_SIZE = 2000
BATCH = 200


def _recorder(url: str) -> DecisionRecorder:
    return DecisionRecorder(
        DecisionStore(url),
        queue_size=QUEUE_SIZE,
        max_records=MAX_RECORDS,
        max_age=7 * 24 * 3600,
        batch_size=BATCH,
    )


def _write(recorder: DecisionRecorder, name: str) -> list[tuple[str, datetime]]:
    """Record PER_WRITER decisions as fast as possible: those the recorder accepted."""
    accepted = []
    for i in range(PER_WRITER):
        rec = DecisionRecord(
            request_id=f"{name}-{i}",
            instance_uuids=[str(uuid.uuid4())],
            outcome="scheduled",
            hosts=[f"compute-{i % 7}"],
            document={"writer": name, "i": i, "weighed": [{"host": f"compute-{i % 7}"}] * 5},
        )
        if recorder.record(rec):
            accepted.append((rec.request_id, rec.created_at))
    return accepted


def _process_writer(url: str, name: str, start, results) -> None:
    """One scheduler worker: its recorder is made after the fork."""
    recorder = _recorder(url)
    start.wait(30)
    accepted = _write(recorder, name)
    flushed = recorder.flush(120)
    recorder.stop(30)
    results.put(
        {
            "name": name,
            "accepted": [(rid, at.isoformat()) for rid, at in accepted],
            "written": recorder.written,
            "dropped": recorder.dropped,
            "failed": recorder.failed,
            "flushed": flushed,
            "prune_every": recorder.prune_every,
        }
    )


class _Sampler:
    """Counts the decisions in the store every few milliseconds while the burst runs."""

    def __init__(self, url: str):
        self.store = DecisionStore(url, create=False)
        self.counts: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def __enter__(self) -> _Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.store.close()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.counts.append(self.store.count())


@pytest.mark.parametrize("writers", ["threads", "processes"])
@pytest.mark.parametrize("kind", ["sqlite", "mariadb"])
def test_retention_holds_under_a_burst(kind, writers, tmp_path):
    with _database(kind, tmp_path) as url:
        DecisionStore(url).close()  # the tables, before the sampler reads them
        reports = []
        started = time.monotonic()
        with _Sampler(url) as sampler:
            if writers == "threads":
                recorder = _recorder(url)
                accepted: dict[str, list] = {}
                threads = [
                    threading.Thread(target=lambda n=n: accepted.update({n: _write(recorder, n)}))
                    for n in ("t0", "t1")
                ]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                assert recorder.flush(120)
                recorder.stop(30)
                reports.append(
                    {
                        "accepted": [a for n in accepted for a in accepted[n]],
                        "written": recorder.written,
                        "dropped": recorder.dropped,
                        "failed": recorder.failed,
                        "flushed": True,
                        "prune_every": recorder.prune_every,
                        "writers": 2 * PER_WRITER,
                    }
                )
                processes = 1
            else:
                ctx = multiprocessing.get_context("fork")
                start, results = ctx.Event(), ctx.Queue()
                procs = [
                    ctx.Process(target=_process_writer, args=(url, n, start, results))
                    for n in ("p0", "p1")
                ]
                for p in procs:
                    p.start()
                start.set()
                for _ in procs:
                    report = results.get(timeout=180)
                    report["accepted"] = [
                        (rid, datetime.fromisoformat(at)) for rid, at in report["accepted"]
                    ]
                    report["writers"] = PER_WRITER
                    reports.append(report)
                for p in procs:
                    p.join(30)
                    assert p.exitcode == 0
                processes = 2
        elapsed = time.monotonic() - started

        # every record was written or counted as dropped; none failed
        for report in reports:
            assert report["flushed"] and report["failed"] == 0
            assert report["written"] + report["dropped"] == report["writers"]
            assert report["written"] == len(report["accepted"])
        accepted_all = [a for report in reports for a in report["accepted"]]
        written = sum(report["written"] for report in reports)
        assert written >= MAX_RECORDS

        # bounded while the burst ran, and to the limit once flushed
        prune_every = reports[0]["prune_every"]
        assert max(sampler.counts, default=0) <= MAX_RECORDS + processes * (prune_every + BATCH)
        store = DecisionStore(url, create=False)
        assert store.count() <= MAX_RECORDS + BATCH
        kept = store.list(limit=None)
        store.close()
        assert len(kept) == MAX_RECORDS

        # the newest are kept
        kept_ids = {r.request_id for r in kept}
        times = dict(accepted_all)
        assert kept_ids <= set(times)
        gone = [at for rid, at in accepted_all if rid not in kept_ids]
        assert min(times[rid] for rid in kept_ids) >= max(gone)
        print(
            f"{kind}/{writers}: {written} written, "
            f"{sum(r['dropped'] for r in reports)} dropped in {elapsed:.1f} s; "
            f"at most {max(sampler.counts, default=0)} rows during the burst"
        )
