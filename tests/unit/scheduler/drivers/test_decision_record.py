"""The driver's decision record: what a call decided, from its trace, handed to a recorder."""

from __future__ import annotations

import json
import math
import threading

import pytest

from scheduler.drivers import decisions
from scheduler.drivers.filter_scheduler import FilterScheduler
from scheduler.exceptions import NoValidHost
from scheduler.records import NO_VALID_HOST, SCHEDULED
from scheduler.records.record import decode_document, encode_document
from scheduler.request import SchedulingRequest
from tests.unit.scheduler.drivers.fakes import (
    CONTEXT,
    FakeHostManager,
    FakePlacement,
    ListRecorder,
    make_host,
    make_spec,
)
from weighers import BaseHostWeigher


def _stored(rec):
    """The record's document as the store keeps it (its deferred parts written out)."""
    return decode_document(encode_document(rec.document))


def _driver(hosts):
    driver = FilterScheduler(placement=FakePlacement(hosts), host_manager=FakeHostManager(hosts))
    driver.recorder = ListRecorder()
    return driver


def test_a_scheduled_call_records_its_choice_the_filters_and_the_best_weighed_hosts():
    hosts = [
        make_host("big", ram_mb=16384),
        make_host("small", ram_mb=4096),
        make_host("off", disabled=True),
    ]
    driver = _driver(hosts)
    result = driver.select_destinations(CONTEXT, make_spec(num_instances=2), ["i-0", "i-1"], True)
    (rec,) = driver.recorder.records
    assert rec.outcome == SCHEDULED and rec.instance_uuids == ["i-0", "i-1"]
    assert rec.request_id == CONTEXT.request_id
    assert rec.hosts == [r[0].service_host for r in result]
    doc = _stored(rec)  # as the store keeps it
    assert doc["request"]["flavor"]["memory_mb"] == 1024
    assert doc["hosts"] == 3
    compute = next(f for f in doc["filters"] if f["name"] == "ComputeFilter")
    assert (compute["hosts_in"], compute["hosts_passed"]) == (3, 2)
    assert doc["filter_removed"]["ComputeFilter"] >= 1
    # per instance, the best hosts by weight with each weigher's raw value and multiplier,
    # as they were before the instance consumed: the first instance saw big's free RAM whole
    first, second = doc["weighed"]
    assert [w["host"] for w in first] == ["big", "small"]
    assert first[0]["weighers"]["RAMWeigher"] == {
        "raw": 16384.0,
        "normalized": 1.0,
        "multiplier": 1.0,
        "share": 1.0,
    }
    assert first[0]["weight"] >= first[1]["weight"]
    # each weigher's share as the weighing computed it: they add up to the host's weight
    for entry in first + second:
        shares = [w.get("share") or 0.0 for w in entry["weighers"].values()]
        assert sum(shares) == pytest.approx(entry["weight"], abs=1e-5)
    assert second[0]["weighers"]["RAMWeigher"]["raw"] < 16384.0 or second[0]["host"] == "small"
    assert [s[0]["host"] for s in doc["selections"]] == rec.hosts
    assert doc["claims"]["made"] == 2 and "reason" not in doc


def test_a_no_valid_host_records_its_reason():
    driver = _driver([make_host("off", disabled=True)])
    with pytest.raises(NoValidHost):
        driver.select_destinations(CONTEXT, make_spec(), ["i-0"], False)
    (rec,) = driver.recorder.records
    assert rec.outcome == NO_VALID_HOST and rec.hosts == []
    assert "ComputeFilter" in rec.document["reason"]
    assert rec.document["selections"] == []


def test_a_recorder_that_fails_never_fails_the_request(caplog):
    class Broken:
        def record(self, rec):
            raise RuntimeError("queue gone")

    driver = _driver([make_host("h1")])
    driver.recorder = Broken()
    result = driver.select_destinations(CONTEXT, make_spec(), ["i-0"], False)
    assert result[0][0].service_host == "h1"
    assert "Could not record the decision" in caplog.text


def test_without_a_recorder_nothing_is_captured():
    driver = _driver([make_host("h1"), make_host("h2")])
    driver.recorder = None
    seen = []
    new_request = driver.new_request
    driver.new_request = lambda *a, **kw: seen.append(new_request(*a, **kw)) or seen[-1]
    driver.select_destinations(CONTEXT, make_spec(), ["i-0"], False)
    assert seen[0].trace.weighed is None


@pytest.mark.parametrize("hosts_count", [4, 300])
def test_the_shares_add_up_to_the_weight_on_the_list_and_the_column_paths(hosts_count, tmp_path):
    """300 hosts in the host manager's table weigh through the columns; 4 through lists."""
    from tests.unit.scheduler.hosts.env import Env, utcnow

    env = Env(tmp_path)
    cell = env.add_cell("cell1")
    for i in range(hosts_count):
        env.add_host(
            cell,
            f"h{i:03d}",
            service={"last_seen_up": utcnow()},
            free_ram_mb=1024 + 37 * i,
            vcpus_used=i % 7,
        )
    manager = env.manager()
    driver = FilterScheduler(placement=object(), host_manager=manager, view=False)
    driver.recorder = ListRecorder()
    req = driver.new_request(CONTEXT, make_spec())
    hosts = driver.all_hosts(req)
    assert len(hosts) == hosts_count
    step = driver.select_hosts(req, hosts, 0)
    (ranked,) = req.trace.weighed.values()
    best = decisions.top_weighed(ranked, driver.framework.weighers)
    assert [b["host"] for b in best] == [h.host for h in step.hosts[:5]]
    for entry, weight in zip(best, step.weights, strict=False):
        shares = [w.get("share") or 0.0 for w in entry["weighers"].values()]
        assert sum(shares) == pytest.approx(weight, abs=1e-5)
    manager.stop()


class DistanceFromMean(BaseHostWeigher):
    """A weigher whose ``prepare`` looks at every host weighed: the closer a host's free
    RAM is to the mean of them all, the better."""

    def prepare(self, spec_obj, hosts):
        return sum(h.free_ram_mb for h in hosts) / len(hosts)

    def weigh(self, host_state, mean):
        return -abs(host_state.free_ram_mb - mean)


def test_a_records_shares_are_the_rankings_for_a_weigher_that_prepares_on_every_host():
    """The record reads what the ranking weighed the best hosts by: a weigher whose
    ``prepare`` depends on all the hosts gives the record the same raw values, and the
    shares add up to the weights (prepared again on the best five alone, the mean would
    move and the shares would not)."""
    rams = [1024, 2048, 3072, 4096, 8192, 16384, 32768, 65536]
    hosts = [make_host(f"h{i}", ram_mb=ram) for i, ram in enumerate(rams)]
    driver = FilterScheduler(
        placement=FakePlacement(hosts),
        host_manager=FakeHostManager(hosts),
        weighers=[DistanceFromMean()],
    )
    driver.recorder = ListRecorder()
    req = driver.new_request(CONTEXT, make_spec())
    step = driver.select_hosts(req, hosts, 0)
    (ranked,) = req.trace.weighed.values()
    best = decisions.top_weighed(ranked, driver.framework.weighers)
    mean = sum(h.free_ram_mb for h in hosts) / len(hosts)
    assert [b["host"] for b in best] == [h.host for h in step.hosts[:5]]
    for entry, host, weight in zip(best, step.hosts, step.weights, strict=False):
        share = entry["weighers"]["DistanceFromMean"]
        assert share["raw"] == pytest.approx(-abs(host.free_ram_mb - mean))
        assert share["share"] == pytest.approx(weight, abs=1e-5)


def test_only_the_chosen_host_is_recorded_as_claimed_an_alternate_carries_a_request():
    hosts = [make_host("a"), make_host("b"), make_host("c")]
    driver = _driver(hosts)
    result = driver.select_destinations(CONTEXT, make_spec(), ["i-0"], True)
    assert len(result[0]) == 3  # the chosen host and two alternates
    (rec,) = driver.recorder.records
    chosen, *alternates = rec.document["selections"][0]
    assert chosen["claimed"] is True and "allocation_request" not in chosen
    assert alternates and all(
        alt["claimed"] is False and alt["allocation_request"] is True for alt in alternates
    )
    # Placement holds the chosen host's claim only
    assert set(driver.placement.claims) == {"i-0"}
    assert driver.placement.claims["i-0"]["host"] == chosen["host"]


# -- per host: what became of each host the filters were given (document version 4) ---------


def test_the_record_says_per_host_which_filter_removed_it_and_the_weights_of_the_best():
    hosts = [
        make_host("big", ram_mb=16384),
        make_host("off", disabled=True),
        make_host("small", ram_mb=4096),
        make_host("gone", down=True),
        make_host("mid", ram_mb=8192),
    ]
    driver = _driver(hosts)
    driver.select_destinations(CONTEXT, make_spec(), ["i-0"], True)
    (rec,) = driver.recorder.records
    doc = _stored(rec)
    assert doc["version"] == decisions.DOCUMENT_VERSION == 4
    per_host = doc["per_host"]
    assert per_host["hosts_in"] == 5
    assert per_host["removed"] == [
        {"filter": "ComputeFilter", "reason": "service disabled", "hosts": ["off"]},
        {"filter": "ComputeFilter", "reason": "service down", "hosts": ["gone"]},
    ]
    # the hosts that passed in the filters' order; the best weighed, best first, with the
    # weights the ranking gave them (the weighed section's)
    assert per_host["passed"] == ["big", "small", "mid"]
    assert per_host["best"] == [w["host"] for w in doc["weighed"][0]] == ["big", "mid", "small"]
    assert per_host["weights"] == [w["weight"] for w in doc["weighed"][0]]
    assert "capped" not in per_host


def test_a_node_named_otherwise_than_its_host_is_recorded_with_both():
    hosts = [make_host("ironic-1", node="node-a"), make_host("ironic-1", node="node-b")]
    driver = _driver(hosts)
    driver.select_destinations(CONTEXT, make_spec(), ["i-0"], True)
    (rec,) = driver.recorder.records
    passed = _stored(rec)["per_host"]["passed"]
    assert sorted(passed) == [["ironic-1", "node-a"], ["ironic-1", "node-b"]]


def test_the_per_host_detail_is_capped_the_removed_hosts_first_and_says_so(monkeypatch):
    monkeypatch.setattr(decisions, "PER_HOST_LIMIT", 3)
    hosts = [make_host("off1", disabled=True), make_host("off2", disabled=True)] + [
        make_host(f"h{i}", ram_mb=2048 * (i + 1)) for i in range(4)
    ]
    driver = _driver(hosts)
    driver.select_destinations(CONTEXT, make_spec(), ["i-0"], True)
    (rec,) = driver.recorder.records
    per_host = _stored(rec)["per_host"]
    assert per_host["removed"][0]["hosts"] == ["off1", "off2"]
    assert per_host["passed"] == ["h0"]  # the third host named; three passed hosts left out
    assert per_host["capped"] == {"limit": 3, "left_out": 3}
    assert per_host["hosts_in"] == 6


def test_a_record_whose_filters_never_ran_has_no_per_host_detail():
    req = SchedulingRequest.of(make_spec(), request_id="req-x")
    rec = decisions.decision_record(req, ["i-0"], None, NoValidHost("no candidates"))
    assert _stored(rec)["per_host"] is None
    assert rec.document["version"] == 4


def test_a_weighers_share_is_never_negative_zero():
    """BuildFailureWeigher's multiplier is negative: times a normalised 0 it is -0.0, which
    a reader sees as "-0"; the record writes 0.0."""
    driver = _driver([make_host("a", ram_mb=4096), make_host("b", ram_mb=8192)])
    driver.select_destinations(CONTEXT, make_spec(), ["i-0"], True)
    (rec,) = driver.recorder.records
    shares = [
        part["share"]
        for entry in rec.document["weighed"][0]
        for part in entry["weighers"].values()
        if part.get("share") is not None
    ]
    negative = [p for e in rec.document["weighed"][0] for p in e["weighers"].values()]
    assert any(p.get("multiplier", 0) < 0 and p.get("share") == 0 for p in negative)
    assert all(math.copysign(1.0, s) == 1.0 for s in shares if s == 0)
    assert "-0.0" not in json.dumps(rec.document["weighed"])


def test_per_host_on_the_column_path_names_the_hosts_the_columns_removed(tmp_path):
    """80 hosts in the host manager's table: the filters decide over its columns and keep
    the removed hosts as rows; the record names them and their reasons all the same."""
    from tests.unit.scheduler.hosts.env import Env, utcnow

    env = Env(tmp_path)
    cell = env.add_cell("cell1")
    for i in range(80):
        service = {"last_seen_up": utcnow(), "disabled": i % 9 == 4}
        env.add_host(cell, f"h{i:03d}", service=service, free_ram_mb=1024 + 37 * i)
    manager = env.manager()
    driver = FilterScheduler(placement=object(), host_manager=manager, view=False)
    driver.recorder = ListRecorder()
    req = driver.new_request(CONTEXT, make_spec())
    driver.select_hosts(req, driver.all_hosts(req), 0)
    rec = decisions.decision_record(req, ["i-0"], None, None, weighers=driver.framework.weighers)
    per_host = _stored(rec)["per_host"]
    disabled = sorted(f"h{i:03d}" for i in range(80) if i % 9 == 4)
    assert per_host["removed"] == [
        {"filter": "ComputeFilter", "reason": "service disabled", "hosts": disabled}
    ]
    assert len(per_host["passed"]) == 80 - len(disabled)
    assert not set(per_host["passed"]) & set(disabled)
    assert per_host["best"][0] == "h079"  # the most free RAM
    manager.stop()


def test_per_host_names_no_more_removed_hosts_than_it_keeps(tmp_path, monkeypatch):
    """On the request's thread the record names only the removed hosts ``per_host`` keeps
    (PER_HOST_LIMIT), not every one; the others are counted as left out."""
    from tests.unit.scheduler.hosts.env import Env, utcnow

    monkeypatch.setattr(decisions, "PER_HOST_LIMIT", 5)
    env = Env(tmp_path)
    cell = env.add_cell("cell1")
    for i in range(80):  # enough for the filters to run over the table's columns
        service = {"last_seen_up": utcnow(), "disabled": i % 2 == 0}
        env.add_host(cell, f"h{i:03d}", service=service)
    manager = env.manager()
    named: list[int] = []
    hosts_at = manager.table.hosts_at
    monkeypatch.setattr(
        manager.table, "hosts_at", lambda rows: named.append(len(rows)) or hosts_at(rows)
    )
    driver = FilterScheduler(placement=object(), host_manager=manager, view=False)
    req = driver.new_request(CONTEXT, make_spec())
    driver.select_hosts(req, driver.all_hosts(req), 0)
    named.clear()
    rec = decisions.decision_record(req, ["i-0"], None, None, weighers=driver.framework.weighers)
    assert named == [5]  # the 40 disabled hosts' rows, only 5 of them named
    per_host = _stored(rec)["per_host"]
    assert [len(r["hosts"]) for r in per_host["removed"]] == [5]
    assert per_host["passed"] == []
    assert per_host["capped"] == {"limit": 5, "left_out": 35 + 40}
    manager.stop()


def test_the_per_host_detail_is_written_out_by_the_recorders_thread(tmp_path, monkeypatch):
    """A name per host costs time: the request's thread hands the section over unwritten
    (``Deferred``) and the recorder's writer thread writes it out."""
    from scheduler.framework import document
    from scheduler.records import DecisionRecorder, DecisionStore, Deferred

    threads: list[str] = []
    section = document.per_host_section

    def watched(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return section(*args, **kwargs)

    monkeypatch.setattr(document, "per_host_section", watched)
    store = DecisionStore(f"sqlite:///{tmp_path}/decisions.sqlite")
    driver = _driver([make_host("a"), make_host("off", disabled=True)])
    driver.recorder = DecisionRecorder(store)
    captured = []
    record = driver.recorder.record
    driver.recorder.record = lambda rec: captured.append(rec) or record(rec)
    driver.select_destinations(CONTEXT, make_spec(), ["i-0"], True)
    assert isinstance(captured[0].document["per_host"], Deferred) and threads == []
    assert driver.recorder.flush(5)
    assert threads == ["decision-records"]
    [stored] = store.by_request(CONTEXT.request_id)
    assert stored.document["per_host"]["removed"][0]["hosts"] == ["off"]
    driver.recorder.stop()
    store.close()
