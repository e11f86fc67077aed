"""The decision recorder: off the caller's thread, never blocking, counting what it drops
and what the store refuses, flush and stop, retention, a fork; and recorder_from_conf."""

from __future__ import annotations

import logging
import os
import threading
import time

import pytest
import sqlalchemy as sa
from prometheus_client import CollectorRegistry

from scheduler import conf as novasched_conf
from scheduler.records import (
    DecisionRecorder,
    DecisionStore,
    Deferred,
    Pruned,
    recorder_from_conf,
)
from scheduler.records import recorder as recorder_mod
from scheduler.telemetry import metrics
from tests.unit.scheduler.records.builders import make_record

LOGGER = "scheduler.records.recorder"


@pytest.fixture
def registry():
    reg = CollectorRegistry()
    metrics.enable(registry=reg)
    yield reg
    metrics.disable()


def _counted(registry: CollectorRegistry, result: str) -> float:
    value = registry.get_sample_value("novasched_decision_records_total", {"result": result})
    return value or 0.0


def _wait_for(predicate, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.005)


class FakeStore:
    """A store in memory that can be made to block (``gate``) or to fail (``failures``)."""

    def __init__(self, failures: int = 0):
        self.batches: list[list] = []
        self.threads: set[str] = set()
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.gate.set()
        self.failures = failures
        self.prunes: list[dict] = []
        self.forked = 0

    def add(self, records):
        self.threads.add(threading.current_thread().name)
        self.entered.set()
        self.gate.wait(10)
        if self.failures:
            self.failures -= 1
            raise sa.exc.OperationalError("INSERT", {}, Exception("server has gone away"))
        self.batches.append(list(records))
        return list(range(len(records)))

    def prune(self, **kwargs):
        self.prunes.append(kwargs)
        return Pruned()

    def after_fork(self):
        self.forked += 1

    @property
    def written(self) -> list:
        return [r for batch in self.batches for r in batch]

    def __str__(self) -> str:
        return "fake-store"


@pytest.fixture
def recorders():
    made: list[DecisionRecorder] = []
    yield made
    for rec in made:
        rec.stop(timeout=2)


def _recorder(recorders, store, **kwargs) -> DecisionRecorder:
    rec = DecisionRecorder(store, **kwargs)
    recorders.append(rec)
    return rec


# -- the request side ---------------------------------------------------------------------------
def test_records_are_written_by_the_writer_thread_in_batches(recorders, registry):
    store = FakeStore()
    rec = _recorder(recorders, store, batch_size=50)
    store.gate.clear()
    assert rec.record(make_record(0))
    assert store.entered.wait(5)  # the writer holds record 0
    for i in range(1, 121):
        assert rec.record(make_record(i))
    store.gate.set()
    assert rec.flush(5)
    assert [r.request_id for r in store.written] == [f"req-{i}" for i in range(121)]
    assert store.threads == {"decision-records"}
    assert threading.current_thread().name not in store.threads
    # what queued while the store was busy went in batches of at most 50
    assert [len(b) for b in store.batches] == [1, 50, 50, 20]
    assert rec.written == 121 and _counted(registry, "written") == 121


def test_a_full_queue_drops_counts_and_warns_once_a_minute(recorders, registry, caplog):
    store = FakeStore()
    rec = _recorder(recorders, store, queue_size=5)
    store.gate.clear()
    rec.record(make_record(0))
    assert store.entered.wait(5)
    caplog.set_level(logging.WARNING, LOGGER)
    accepted = [rec.record(make_record(i)) for i in range(1, 6)]
    started = time.monotonic()
    dropped = [rec.record(make_record(i)) for i in range(6, 106)]
    assert time.monotonic() - started < 0.5  # nothing waited for the blocked store
    assert accepted == [True] * 5 and dropped == [False] * 100
    assert rec.dropped == 100 and _counted(registry, "dropped") == 100
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "Dropped 1 decision record(s)" in warnings[0].getMessage()
    assert "[decision_records] queue_size = 5" in warnings[0].getMessage()
    # a minute later the next drop says how many went meanwhile
    rec._drop_logged_at -= recorder_mod.DROP_LOG_INTERVAL
    rec.record(make_record(106))
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert "Dropped 100 decision record(s) in the last 60 s" in warnings[1].getMessage()
    store.gate.set()
    assert rec.flush(5)
    # every record was either written or counted as dropped
    assert rec.written + rec.dropped == 107
    assert [r.request_id for r in store.written] == [f"req-{i}" for i in range(6)]


def test_record_never_raises(recorders, registry, monkeypatch):
    store = FakeStore()
    rec = _recorder(recorders, store)
    assert rec.record(None) is False  # not a record: refused, it would spoil its batch

    def broken(item):
        raise RuntimeError("as broken as it gets")

    monkeypatch.setattr(rec._queue, "put_nowait", broken)
    assert rec.record(make_record(1)) is False
    monkeypatch.undo()
    assert rec.record(make_record(2)) and rec.flush(5)
    assert [r.request_id for r in store.written] == ["req-2"]


# -- the store failing --------------------------------------------------------------------------
def test_a_failing_store_loses_its_batches_logs_once_and_the_writer_goes_on(
    recorders, registry, caplog
):
    caplog.set_level(logging.DEBUG, LOGGER)
    store = FakeStore(failures=3)
    rec = _recorder(recorders, store)
    for i in range(3):
        rec.record(make_record(i))
        assert rec.flush(5)
    assert rec.failed == 3 and _counted(registry, "failed") == 3
    assert rec.status()["failing"] is True
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "Could not write 1 decision record(s) to fake-store: server has gone away" in (
        errors[0].getMessage()
    )
    assert rec._thread.is_alive()
    # no pruning while the store is down: the outage is logged already
    assert store.prunes == []
    rec.record(make_record(3))
    assert rec.flush(5)
    assert [r.request_id for r in store.written] == ["req-3"]
    recovered = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any(
        "written to fake-store again after" in m and "3 record(s) were lost" in m for m in recovered
    )
    assert rec.status()["failing"] is False and rec.written == 1


def test_an_unexpected_error_does_not_kill_the_writer(recorders, registry, caplog):
    store = FakeStore()
    rec = _recorder(recorders, store, max_records=10)

    def broken_prune(**kwargs):
        raise RuntimeError("a bug")

    store.prune = broken_prune
    caplog.set_level(logging.WARNING, LOGGER)
    rec.record(make_record(1))
    assert rec.flush(5)
    rec.record(make_record(2))
    assert rec.flush(5)
    assert [r.request_id for r in store.written] == ["req-1", "req-2"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "Could not delete old decision records" in warnings[0]


# -- flush, stop, retention ---------------------------------------------------------------------
def test_stop_writes_what_is_queued_then_drops(recorders, registry):
    store = FakeStore()
    rec = _recorder(recorders, store)
    store.gate.clear()
    for i in range(5):
        rec.record(make_record(i))
    threading.Timer(0.1, store.gate.set).start()
    assert rec.stop(timeout=5)
    assert len(store.written) == 5
    assert not rec._thread.is_alive()
    assert rec.record(make_record(9)) is False
    assert rec.dropped == 1 and _counted(registry, "dropped") == 1


def test_flush_times_out_on_a_stuck_store(recorders):
    store = FakeStore()
    rec = _recorder(recorders, store)
    store.gate.clear()
    rec.record(make_record(1))
    started = time.monotonic()
    assert rec.flush(0.2) is False
    assert time.monotonic() - started < 2
    store.gate.set()
    assert rec.flush(5)


def test_retention_runs_by_count_by_time_and_on_flush(recorders):
    store = FakeStore()
    rec = _recorder(
        recorders, store, max_age=3600, max_records=100, batch_size=10, prune_interval=0.2
    )
    assert rec.prune_every == 10  # a tenth of max_records, at least a batch
    assert rec.flush(5)
    assert store.prunes[-1] == {"max_age": 3600, "max_records": 100}
    count = len(store.prunes)
    _wait_for(lambda: len(store.prunes) > count)  # the interval passed, nothing written
    store.gate.clear()
    for i in range(40):
        rec.record(make_record(i))
    count = len(store.prunes)
    store.gate.set()
    assert rec.flush(5)
    assert len(store.prunes) - count >= 4  # every 10 records, and the flush
    assert DecisionRecorder(FakeStore(), max_records=1_000_000).prune_every == 1000


def test_a_prune_left_unfinished_goes_on_before_the_interval(recorders):
    store = FakeStore()
    rounds = iter([Pruned(by_count=10, more=True)] * 3 + [Pruned(by_count=2)])
    store.prune = lambda **kw: store.prunes.append(kw) or next(rounds, Pruned())
    rec = _recorder(recorders, store, max_records=5, prune_interval=3600)
    rec._since_prune = rec.prune_every  # as after a burst
    rec.record(make_record(1))
    _wait_for(lambda: len(store.prunes) >= 4, timeout=2)


def test_the_real_store_stays_bounded(recorders, store):
    rec = _recorder(recorders, store, max_records=30, batch_size=10)
    for i in range(200):
        rec.record(make_record(i))
        if i % 10 == 0:
            assert store.count() <= 30 + rec.prune_every + rec.batch_size
    assert rec.flush(10)
    assert store.count() == 30
    assert [r.request_id for r in store.list(limit=30)] == [f"req-{i}" for i in range(199, 169, -1)]


# -- fork ---------------------------------------------------------------------------------------
def test_a_recorder_copied_by_a_fork_starts_over_in_the_child(recorders, store):
    rec = _recorder(recorders, store)
    rec.record(make_record(1))
    assert rec.flush(5)
    pid = os.fork()
    if pid == 0:  # the child: its own queue, thread and connections
        code = 1
        try:
            ok = rec.record(make_record(2)) and rec.flush(5) and rec.written == 1
            code = 0 if ok else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert sorted(r.request_id for r in store.list()) == ["req-1", "req-2"]
    # the parent's recorder is untouched
    rec.record(make_record(3))
    assert rec.flush(5) and rec.written == 2


# -- recorder_from_conf -------------------------------------------------------------------------
CONF = novasched_conf.CONF


def test_disabled_means_no_recorder():
    CONF.set_override("enabled", False, group="decision_records")
    assert recorder_from_conf(CONF) is None


def test_the_default_store_is_a_file_in_state_path(tmp_path, recorders):
    CONF.set_override("state_path", str(tmp_path))
    CONF.set_override("max_records", 7, group="decision_records")
    rec = recorder_from_conf(CONF)
    recorders.append(rec)
    assert rec is not None and rec.max_records == 7 and rec.max_age == 7 * 24 * 3600
    assert recorder_mod.store_url(CONF) == f"sqlite:///{tmp_path}/novasched-decisions.sqlite"
    rec.record(make_record(1))
    assert rec.flush(5)
    assert (tmp_path / "novasched-decisions.sqlite").exists()
    reader = DecisionStore(recorder_mod.store_url(CONF), create=False)
    assert [r.request_id for r in reader.list()] == ["req-1"]
    reader.close()


@pytest.mark.parametrize(
    "options, option_named",
    [
        ({"state_path": "/nonexistent/state"}, "Fix [DEFAULT] state_path"),
        (
            {"connection": "sqlite:////nonexistent/state/d.sqlite"},
            "Fix [decision_records] connection",
        ),
        ({"connection": "::not a url::"}, "Fix [decision_records] connection"),
        ({"connection": "mysql+pymysql://u:pw@127.0.0.1:1/x"}, "Fix [decision_records] connection"),
    ],
)
def test_a_store_that_cannot_be_opened_is_one_error_and_no_recorder(options, option_named, caplog):
    for name, value in options.items():
        CONF.set_override(name, value, group=None if name == "state_path" else "decision_records")
    caplog.set_level(logging.DEBUG, "scheduler.records")
    assert recorder_from_conf(CONF) is None
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    message = errors[0].getMessage()
    assert message.startswith("Not recording decisions: cannot open the decision records' store")
    assert option_named in message and "scheduling goes on without records" in message
    assert "pw" not in message  # the password is masked
    assert errors[0].exc_info is None  # one line, no traceback


def test_a_deferred_part_is_computed_by_the_writer_thread_when_it_writes(store):
    """The request's thread hands over a part unwritten; the writer computes it as it encodes
    the document, and a part that fails leaves the rest of the record intact."""
    seen: list[str] = []

    def per_host():
        seen.append(threading.current_thread().name)
        return {"passed": ["h1"]}

    def broken():
        raise KeyError("gone")

    recorder = DecisionRecorder(store)
    rec = make_record(1, document={"per_host": Deferred(per_host), "other": Deferred(broken)})
    recorder.record(rec)
    assert seen == []  # not on the caller's thread
    assert recorder.flush(5)
    assert seen == ["decision-records"]
    [stored] = store.by_request("req-1")
    assert stored.document == {
        "per_host": {"passed": ["h1"]},
        "other": {"unrecorded": "KeyError: 'gone'"},
    }
    recorder.stop()
