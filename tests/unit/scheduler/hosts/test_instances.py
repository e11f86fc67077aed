"""InstanceTracker: nova's rules for the update/delete/sync instance-info casts."""

from __future__ import annotations

import threading

import pytest

from scheduler.conf import CONF
from scheduler.hosts.instances import InstanceTracker


class FakeDB:
    """The loader: instance uuids per host as the cell database has them; counts reads."""

    def __init__(self, by_host: dict[str, list[str]] | None = None):
        self.by_host = by_host or {}
        self.reads: list[str] = []

    def __call__(self, host: str) -> list[str] | None:
        self.reads.append(host)
        return list(self.by_host.get(host, []))


@pytest.fixture
def db() -> FakeDB:
    return FakeDB({"h1": ["db-1", "db-2"]})


@pytest.fixture
def tracker(db) -> InstanceTracker:
    return InstanceTracker(CONF, loader=db)


def test_unknown_host_is_read_from_the_database(tracker, db):
    assert tracker.instances_for("h1") is None
    assert db.reads == []  # reading is the caller's job while a host is not tracked


# -- update_instance_info ----------------------------------------------------------------


def test_full_list_from_unknown_host_replaces_and_is_trusted(tracker, db):
    tracker.update_instance_info("h1", ["a", "b", "c"])
    assert tracker.instances_for("h1") == {"a": None, "b": None, "c": None}
    assert db.reads == []


@pytest.mark.parametrize("uuids", [["a"], []])
def test_one_or_no_instance_from_unknown_host_rereads_and_is_not_trusted(tracker, db, uuids):
    tracker.update_instance_info("h1", uuids)
    assert db.reads == ["h1"]
    assert tracker.instances_for("h1") is None
    assert tracker.tracked_hosts() == {"h1": False}


def test_update_of_known_host_adds_and_trusts(tracker, db):
    tracker.update_instance_info("h1", ["a"])  # re-read: db-1, db-2, not trusted
    tracker.update_instance_info("h1", ["a"])
    assert tracker.instances_for("h1") == {"db-1": None, "db-2": None, "a": None}
    tracker.update_instance_info("h1", ["b", "a"])
    assert list(tracker.instances_for("h1")) == ["db-1", "db-2", "a", "b"]
    assert db.reads == ["h1"]


# -- delete_instance_info ----------------------------------------------------------------


def test_delete_from_known_host_drops_and_trusts(tracker, db):
    tracker.update_instance_info("h1", ["a", "b"])
    tracker.delete_instance_info("h1", "a")
    tracker.delete_instance_info("h1", "not-there")
    assert tracker.instances_for("h1") == {"b": None}
    assert db.reads == []


def test_delete_from_unknown_host_rereads(tracker, db):
    tracker.delete_instance_info("h1", "db-1")
    assert db.reads == ["h1"]
    assert tracker.instances_for("h1") is None
    # the re-read list is what later casts apply to
    tracker.delete_instance_info("h1", "db-1")
    assert tracker.instances_for("h1") == {"db-2": None}


def test_last_instance_deleted_leaves_a_trusted_empty_host(tracker):
    tracker.update_instance_info("h1", ["a", "b"])
    tracker.delete_instance_info("h1", "a")
    tracker.delete_instance_info("h1", "b")
    assert tracker.instances_for("h1") == {}


# -- sync_instance_info ------------------------------------------------------------------


def test_sync_of_unknown_host_rereads(tracker, db):
    assert tracker.sync_instance_info("h1", ["db-1", "db-2"]) is False
    assert db.reads == ["h1"] and tracker.instances_for("h1") is None
    # the next sync matches the database's list: trusted from now on
    assert tracker.sync_instance_info("h1", ["db-2", "db-1"]) is True
    assert tracker.instances_for("h1") == {"db-1": None, "db-2": None}
    assert db.reads == ["h1"]


def test_sync_that_differs_rereads_and_distrusts(tracker, db):
    tracker.update_instance_info("h1", ["a", "b"])
    assert tracker.sync_instance_info("h1", ["a"]) is False
    assert db.reads == ["h1"]
    assert tracker.instances_for("h1") is None
    assert tracker.tracked_hosts() == {"h1": False}
    # a missed delete looks the same as a missed update
    tracker.update_instance_info("h2", ["a", "b"])
    assert tracker.sync_instance_info("h2", ["a", "b", "c"]) is False


def test_sync_that_matches_keeps_trusting(tracker, db):
    tracker.update_instance_info("h1", ["a", "b"])
    assert tracker.sync_instance_info("h1", ["b", "a", "a"]) is True
    assert tracker.instances_for("h1") == {"a": None, "b": None}
    assert db.reads == []


# -- readers -----------------------------------------------------------------------------


def test_instances_for_returns_a_read_only_snapshot(tracker):
    tracker.update_instance_info("h1", ["a", "b"])
    mine = tracker.instances_for("h1")
    # shared by every request (no copy per host): a caller that wants to add one copies it
    with pytest.raises(TypeError):
        mine["placed-by-this-request"] = None
    assert {**mine, "placed-by-this-request": None} == {
        "a": None,
        "b": None,
        "placed-by-this-request": None,
    }
    assert tracker.instances_for("h1") == {"a": None, "b": None}


def test_hosts_are_independent(tracker, db):
    tracker.update_instance_info("h1", ["a", "b"])
    tracker.update_instance_info("h2", ["c", "d"])
    tracker.delete_instance_info("h2", "a")
    assert tracker.instances_for("h1") == {"a": None, "b": None}
    assert tracker.instances_for("h2") == {"c": None, "d": None}


def test_seed_starts_hosts_untrusted_and_keeps_what_casts_said(tracker, db):
    tracker.update_instance_info("h2", ["x", "y"])
    tracker.seed({"h1": ["db-1"], "h2": ["stale"]})
    assert tracker.tracked_hosts() == {"h2": True, "h1": False}
    assert tracker.instances_for("h1") is None
    assert tracker.instances_for("h2") == {"x": None, "y": None}
    assert tracker.sync_instance_info("h1", ["db-1"]) is True  # compared with the seed
    assert tracker.instances_for("h1") == {"db-1": None}
    assert db.reads == []


# -- no loader, failing loader -----------------------------------------------------------


def test_without_loader_a_host_is_never_trusted_on_a_guess():
    tracker = InstanceTracker(CONF)
    tracker.update_instance_info("h1", ["a"])
    tracker.delete_instance_info("h1", "a")
    assert tracker.sync_instance_info("h1", []) is False
    assert tracker.tracked_hosts() == {}  # still unknown: read from the DB per request
    tracker.update_instance_info("h1", ["a", "b"])
    assert tracker.instances_for("h1") == {"a": None, "b": None}
    assert tracker.sync_instance_info("h1", ["a"]) is False
    assert tracker.tracked_hosts() == {}


@pytest.mark.parametrize("outcome", ["raise", "none"])
def test_loader_failure_leaves_the_host_untracked(outcome, caplog):
    def loader(host):
        if outcome == "raise":
            raise RuntimeError("cell down")
        return None

    tracker = InstanceTracker(CONF, loader=loader)
    tracker.update_instance_info("h1", ["a", "b"])
    with caplog.at_level("INFO", logger="scheduler.hosts.instances"):
        assert tracker.sync_instance_info("h1", ["a"]) is False
    assert tracker.tracked_hosts() == {}
    assert tracker.instances_for("h1") is None
    assert "h1" in caplog.text


# -- disabled ------------------------------------------------------------------------------


def test_track_instance_changes_false_ignores_casts(db):
    CONF.set_override("track_instance_changes", False, group="filter_scheduler")
    tracker = InstanceTracker(CONF, loader=db)
    tracker.update_instance_info("h1", ["a", "b"])
    tracker.delete_instance_info("h1", "a")
    tracker.seed({"h1": ["a"]})
    assert tracker.sync_instance_info("h1", ["a", "b"]) is False
    assert tracker.instances_for("h1") is None
    assert tracker.tracked_hosts() == {} and db.reads == []


# -- concurrency -------------------------------------------------------------------------


def test_concurrent_casts_lose_no_update(db):
    tracker = InstanceTracker(CONF, loader=db)
    tracker.update_instance_info("h1", ["seed-1", "seed-2"])
    per_thread = 200
    start = threading.Barrier(4)

    def add(n: int) -> None:
        start.wait()
        for i in range(per_thread):
            tracker.update_instance_info("h1", [f"t{n}-{i}"])
            tracker.instances_for("h1")

    threads = [threading.Thread(target=add, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(tracker.instances_for("h1")) == 2 + 4 * per_thread
