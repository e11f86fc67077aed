"""``decision show`` in words (the weighers that differ, the margin, never "-0"), ``decision
show --host`` ("why not host X?") and ``decision list``'s filters, on records the driver made
and on documents written by hand (older versions, shapes the driver makes rarely)."""

from __future__ import annotations

import dataclasses
import json
import re
from types import SimpleNamespace

import pytest

from scheduler.cmd import decisions
from scheduler.drivers import decisions as driver_decisions
from scheduler.drivers.filter_scheduler import FilterScheduler
from scheduler.exceptions import NoValidHost
from scheduler.objects import ImageMeta
from scheduler.records import DecisionRecord, DecisionStore
from scheduler.records import why_not as answers
from scheduler.records.record import decode_document, encode_document
from tests.unit.scheduler.cmd.builders import run_manage
from tests.unit.scheduler.drivers.fakes import (
    FakeHostManager,
    FakePlacement,
    ListRecorder,
    make_host,
    make_spec,
)
from tests.unit.scheduler.records.builders import make_record

UUID = "5b7c0e2a-1111-4f6e-9d43-2b1a4c3e0a01"
NEGATIVE_ZERO = re.compile(r"(?<![\w.])-0(?![.\d])")


def _fleet() -> list:
    """Seven hosts that pass, the more free RAM the better (the best five are detailed), one
    disabled, one down and one the request ignores."""
    rams = {"big": 16384, "mid": 8192, "small": 4096, "h4": 3000, "h5": 2500}
    rams.update({"h6": 2000, "h7": 1500})
    hosts = [make_host(name, ram_mb=ram) for name, ram in rams.items()]
    hosts += [make_host("off", disabled=True), make_host("gone", down=True), make_host("skip")]
    return hosts


def _scheduled(request_id: str = "req-a") -> DecisionRecord:
    """The record the driver makes of a boot on ``_fleet`` that ignores host skip."""
    hosts = _fleet()
    driver = FilterScheduler(placement=FakePlacement(hosts), host_manager=FakeHostManager(hosts))
    driver.recorder = ListRecorder()
    context = SimpleNamespace(request_id=request_id, project_id="p1", user_id="u1")
    driver.select_destinations(
        context,
        make_spec(ignore_hosts=["SKIP"], project_id="p1"),
        [UUID],
        return_alternates=True,
    )
    (rec,) = driver.recorder.records
    return _as_stored(rec)


def _refused(request_id: str = "req-b") -> DecisionRecord:
    """The record of a request for an architecture no host has (the filters removed every
    host)."""
    hosts = _fleet()
    driver = FilterScheduler(placement=FakePlacement(hosts), host_manager=FakeHostManager(hosts))
    context = SimpleNamespace(request_id=request_id, project_id="p2", user_id="u2")
    image = ImageMeta(properties={"hw_architecture": "s390x"})
    spec = make_spec(project_id="p2", image=image)
    spec.flavor.name = "m1.huge"
    req = driver.new_request(context, spec)
    with pytest.raises(NoValidHost) as caught:
        driver._select(req, ["i-9"], False)
    return _as_stored(
        driver_decisions.decision_record(
            req, ["i-9"], None, caught.value, weighers=driver.framework.weighers
        )
    )


def _as_stored(rec: DecisionRecord) -> DecisionRecord:
    """The record as the store gives it back (its deferred parts written out)."""
    return dataclasses.replace(rec, document=decode_document(encode_document(rec.document)))


def _host(name: str, weight: float, **shares: float) -> dict:
    return {
        "host": name,
        "node": name,
        "weight": weight,
        "weighers": {
            weigher: {"raw": 1.0, "normalized": 1.0, "multiplier": 1.0, "share": share}
            for weigher, share in shares.items()
        },
    }


def _text(document: dict, hosts: list[str] | None = None) -> str:
    return decisions.render_record(make_record(1, hosts=hosts or ["h1"], document=document))


def _flat(text: str) -> str:
    """``text`` with its lines joined (to read a wrapped line whole)."""
    return " ".join(text.split())


# -- the weighed hosts in words -----------------------------------------------------------------
def test_only_the_weighers_whose_share_differs_are_shown_per_host():
    weighed = [
        [
            _host("h1", 1.5, RAMWeigher=1.0, CPUWeigher=0.5, BuildFailureWeigher=-0.0, Io=0.0),
            _host("h2", 1.0, RAMWeigher=0.5, CPUWeigher=0.5, BuildFailureWeigher=0.0, Io=0.0),
            _host("h3", 0.75, RAMWeigher=0.25, CPUWeigher=0.5, BuildFailureWeigher=0.0, Io=0.0),
        ]
    ]
    lines = _text({"weighed": weighed}).splitlines()
    start = lines.index("  Weighed hosts:")
    assert lines[start + 1 :] == [
        "    #1:",
        "      margin: h1 over h2 by 0.5: RAMWeigher +0.5",
        "      same for every host shown: CPUWeigher, BuildFailureWeigher, Io",
        "      - h1: weight 1.5",
        "          RAMWeigher: share 1 (raw 1, normalized 1, multiplier 1)",
        "      - h2: weight 1",
        "          RAMWeigher: share 0.5 (raw 1, normalized 1, multiplier 1)",
        "      - h3: weight 0.75",
        "          RAMWeigher: share 0.25 (raw 1, normalized 1, multiplier 1)",
    ]


def test_a_single_weighed_host_shows_what_counted_and_sums_up_the_rest():
    weighed = [[_host("h1", 1.0, RAMWeigher=1.0, CPUWeigher=0.0, IoOpsWeigher=-0.0)]]
    lines = _text({"weighed": weighed}).splitlines()
    assert "      no share: CPUWeigher, IoOpsWeigher" in lines
    assert "          RAMWeigher: share 1 (raw 1, normalized 1, multiplier 1)" in lines
    assert not any("margin" in line for line in lines)


def test_negative_zero_is_never_printed():
    weighed = [
        [
            _host("h1", -0.0, RAMWeigher=-0.0, IoOpsWeigher=0.0),
            _host("h2", -0.0, RAMWeigher=0.0, IoOpsWeigher=-0.0),
        ]
    ]
    document = {"weighed": weighed, "timings_ms": {"weigh": -0.0}, "claims": {"made": -0.0}}
    text = _text(document)
    assert NEGATIVE_ZERO.search(text) is None, text
    assert "- h1: weight 0" in text and "Timings ms: weigh 0" in text
    assert "margin: none: h1 and h2 weigh the same" in text
    # a share of -0 and one of 0 are the same share
    assert "same for every host shown: RAMWeigher, IoOpsWeigher" in text


def test_the_margin_is_the_weight_between_the_first_two_and_the_weighers_that_made_it():
    first = _host("h1", 2.93, A=1.0, B=0.7, C=0.1, D=0.5, E=0.2, F=0.23, G=0.2)
    second = _host("h2", 2.1, A=0.38, B=0.49, C=0.2, D=0.48, E=0.3, F=0.23, G=0.02)
    text = _text({"weighed": [[first, second]]})
    # the largest share differences first, with their signs; the rest summed
    assert "      margin: h1 over h2 by 0.83: A +0.62, B +0.21, G +0.18, 3 more -0.18" in text
    assert "same for every host shown: F" in text


def test_a_chosen_host_that_was_not_the_best_weighed_is_said_so():
    weighed = [[_host("h1", 2.0, A=1.0), _host("h2", 1.0, A=0.0)]]
    text = _text({"weighed": weighed}, hosts=["h2"])
    assert "      chosen: h2, weighed #2 (a random pick among the best" in text


def test_a_driver_record_in_words():
    text = decisions.render_record(_scheduled())
    assert NEGATIVE_ZERO.search(text) is None
    lines = text.splitlines()
    # only RAM tells these hosts apart
    assert "      margin: big over mid by 0.5: RAMWeigher +0.5" in lines
    same = next(line for line in lines if "same for every host shown:" in line)
    assert "RAMWeigher" not in same and "CPUWeigher" in same
    assert sum("RAMWeigher: share" in line for line in lines) == 5
    assert not any("CPUWeigher: share" in line for line in lines)
    assert (
        "Per host: 9 hosts given to the filters: 2 removed, 7 passed; show --host HOST says "
        "why HOST was or was not chosen Selections:"
    ) in _flat(text)


def test_the_per_host_line_says_when_it_was_capped():
    per_host = {"hosts_in": 5000, "removed": [{"filter": "F", "reason": "r", "hosts": ["a"]}]}
    per_host.update(passed=["b", "c"], best=[], weights=[])
    per_host["capped"] = {"limit": 3, "left_out": 4997}
    text = _text({"per_host": per_host})
    assert _flat(text).endswith(
        "Per host: 5000 hosts given to the filters: 1 removed, 2 passed, 4997 more not "
        "named (the record names 3 at most); show --host HOST says why HOST was or was not "
        "chosen"
    )


# -- why not host X -----------------------------------------------------------------------------
def test_why_not_a_host_a_filter_removed():
    rec = _scheduled()
    answer = answers.why_not(rec, "gone")
    assert answer.verdict == answers.REMOVED
    filters = len(rec.document["filters"])
    assert answer.lines == [
        f"removed by ComputeFilter: service down (filter 1 of {filters}, which removed 2 of "
        "the 9 it was given)"
    ]
    assert answer.detail == {"filter": "ComputeFilter", "reason": "service down"}
    assert answers.why_not(rec, "OFF").detail["reason"] == "service disabled"


def test_why_not_a_host_the_narrowing_took_out():
    rec = _scheduled()
    answer = answers.why_not(rec, "skip")
    assert answer.verdict == answers.NARROWED
    assert answer.lines == ["taken out before the filters: in the request's ignore_hosts"]
    # the requested destination narrows every other host
    doc = {"per_host": {"hosts_in": 1, "removed": [], "passed": ["h1"], "best": [], "weights": []}}
    doc["request"] = {"requested_destination": {"host": "h1", "node": None}}
    answer = answers.why_not(make_record(1, document=doc), "h2")
    assert answer.lines == ["taken out before the filters: not the requested destination (h1)"]
    doc["request"] = {"force_hosts": ["h1"]}
    answer = answers.why_not(make_record(1, document=doc), "h2")
    assert answer.lines == ["taken out before the filters: not in the request's force_hosts (h1)"]


def test_why_not_a_host_that_passed_its_rank_weight_and_how_far_behind_by_weigher():
    rec = _scheduled()
    per_host = rec.document["per_host"]
    weights = per_host["weights"]
    answer = answers.why_not(rec, "small")
    assert answer.verdict == answers.PASSED
    behind = round(weights[0] - weights[2], 6)
    assert answer.detail["rank"] == 3 and answer.detail["weight"] == weights[2]
    assert answer.detail["behind"] == behind and answer.detail["behind_host"] == "big"
    best = {w["host"]: w["weighers"] for w in rec.document["weighed"][0]}
    ram = round(best["small"]["RAMWeigher"]["share"] - best["big"]["RAMWeigher"]["share"], 6)
    assert answer.detail["by_weigher"] == {"RAMWeigher": ram}
    assert answer.lines == [
        f"passed every filter: weighed #3 of 7 (weight {weights[2]:g})",
        f"{behind:g} behind big, the chosen host (weight {weights[0]:g})",
        f"by weigher (its share less big's): RAMWeigher {ram:+g}",
    ]


def test_why_not_a_host_that_passed_but_was_not_among_the_best_weighed():
    rec = _scheduled()
    weights = rec.document["per_host"]["weights"]
    per_host = rec.document["per_host"]
    assert "h7" in per_host["passed"] and "h7" not in per_host["best"]
    answer = answers.why_not(rec, "h7")
    assert answer.verdict == answers.PASSED
    assert answer.lines == [
        "passed every filter, but was not among the 5 best weighed hosts, whose weights the "
        f"record keeps: its weight was at most {weights[4]:g} (#5's of 7)",
        f"at least {round(weights[0] - weights[4], 6):g} behind big, the chosen host",
    ]


def test_why_not_the_chosen_host():
    answer = answers.why_not(_scheduled(), "BIG")
    assert answer.verdict == answers.CHOSEN
    assert answer.lines[0] == "chosen for instance 1"
    assert answer.lines[1].startswith("passed every filter: weighed #1 of 7 (weight ")
    assert answer.detail["rank"] == 1


def test_why_not_a_host_that_was_not_a_candidate():
    answer = answers.why_not(_scheduled(), "compute-99")
    assert answer.verdict == answers.NOT_CANDIDATE
    assert answer.lines == [
        "not a candidate: Placement did not return it, or it is in another cell (the filters "
        "were given 9 hosts)"
    ]


def test_why_not_on_a_no_valid_host():
    rec = _refused()
    assert rec.outcome == "no_valid_host" and rec.document["per_host"]["passed"] == []
    answer = answers.why_not(rec, "big")
    assert answer.verdict == answers.REMOVED
    assert answer.detail["filter"] == "ImagePropertiesFilter"
    assert answer.lines[0].startswith("removed by ImagePropertiesFilter: ")
    # the disabled host went first, to the first filter
    assert answers.why_not(rec, "off").detail == {
        "filter": "ComputeFilter",
        "reason": "service disabled",
    }


def test_a_record_older_than_per_host_detail_says_so():
    document = {"version": 3, "weighed": [[_host("h1", 1.0, A=1.0)]], "filters": []}
    answer = answers.why_not(make_record(1, hosts=["h1"], document=document), "h2")
    assert answer.verdict == answers.PREDATES
    assert answer.lines == [
        "this record predates per-host detail (document version 3; per-host detail came with 4)"
    ]
    # its chosen host is still said to be chosen
    chosen = answers.why_not(make_record(1, hosts=["h1"], document=document), "h1")
    assert chosen.verdict == answers.CHOSEN and chosen.lines[0] == "chosen for instance 1"


def test_a_record_whose_filters_never_ran():
    document = {"version": 4, "per_host": None, "reason": "No valid host: Placement had none"}
    answer = answers.why_not(make_record(1, hosts=[], document=document), "h1")
    assert answer.verdict == answers.NO_FILTERS
    assert answer.lines == ["the filters never ran: No valid host: Placement had none"]


def test_a_host_left_out_of_a_capped_record_is_not_called_a_non_candidate():
    per_host = {"hosts_in": 5000, "removed": [], "passed": ["a"], "best": [], "weights": []}
    per_host["capped"] = {"limit": 1, "left_out": 4999}
    answer = answers.why_not(make_record(1, document={"per_host": per_host}), "b")
    assert answer.verdict == answers.NOT_RECORDED
    assert answer.lines == [
        "not among the hosts the record names: 4999 of the 5000 given to the filters were left "
        "out (it names 1 at most)"
    ]


def test_a_record_whose_detail_was_not_kept_does_not_call_a_host_a_non_candidate():
    unwritten = {"per_host": {"unrecorded": "AttributeError: 'NoneType' object has no attribute"}}
    answer = answers.why_not(make_record(1, hosts=["h1"], document=unwritten), "h2")
    assert answer.verdict == answers.NOT_RECORDED
    assert answer.lines == [
        "the record does not say: its detail was not kept (AttributeError: 'NoneType' object "
        "has no attribute)"
    ]
    too_big = {"unrecorded": "the document was 300000 bytes, above 262144", "keys": ["spec"]}
    answer = answers.why_not(make_record(1, hosts=["h1"], document=too_big), "h1")
    assert answer.verdict == answers.CHOSEN
    assert answer.lines[1].startswith("the record does not say: its detail was not kept (the ")


def test_a_host_of_several_nodes_answers_per_node_and_a_node_by_its_name():
    removed = [{"filter": "F", "reason": "r", "hosts": [["i", "N1"]]}]
    per_host = {"hosts_in": 2, "removed": removed, "passed": [["i", "n2"]]}
    per_host.update(best=[["i", "n2"]], weights=[1.0])
    document = {"per_host": per_host, "request": {"num_instances": 2}}
    document["filters"] = [{"name": "F", "hosts_in": 2, "hosts_passed": 1}]
    rec = make_record(1, hosts=["i", "i"], document=document)
    answer = answers.why_not(rec, "I")
    assert answer.verdict == answers.CHOSEN  # the host took both instances
    assert answer.lines == [
        "chosen for instances 1, 2",
        "node N1: removed by F: r (filter 1 of 1, which removed 1 of the 2 it was given)",
        "node n2: passed every filter: weighed #1 of 1 (weight 1)",
        "(the per-host detail is the first instance's, of 2)",
    ]
    assert set(answer.detail["nodes"]) == {"N1", "n2"}
    node = answers.why_not(rec, "n1")
    assert node.verdict == answers.REMOVED
    assert node.lines == [
        "removed by F: r (filter 1 of 1, which removed 1 of the 2 it was given)",
        "(the per-host detail is the first instance's, of 2)",
    ]


# -- the commands -------------------------------------------------------------------------------
@pytest.fixture
def filled(tmp_path):
    """A nova.conf whose store holds a boot the driver recorded, a NoValidHost and a record
    of document version 3."""
    conf = tmp_path / "nova.conf"
    conf.write_text(f"[DEFAULT]\nstate_path = {tmp_path}\n")
    store = DecisionStore(f"sqlite:///{tmp_path}/novasched-decisions.sqlite")
    old = make_record(3, instances=[UUID], hosts=["mid"], document={"version": 3})
    store.add([old, _scheduled(), _refused()])
    store.close()
    return ["--config-file", str(conf)]


def test_show_host_answers_for_each_decision_of_an_upper_case_instance_uuid(filled, capsys):
    rc, out, err = run_manage(capsys, *filled, "decision", "show", UUID.upper(), "--host", "gone")
    assert rc == 0 and err == ""
    newest, oldest = out.split("\n\n")
    assert newest.startswith("Decision 2 at ") and "request req-a, scheduled on big" in newest
    assert newest.splitlines()[1:3] == [
        "  gone:",
        "    removed by ComputeFilter: service down (filter 1 of 5, which removed 2 of the 9 it "
        "was given)",
    ]
    assert _flat(oldest).endswith(
        "gone: this record predates per-host detail (document version 3; per-host detail came "
        "with 4)"
    )


def test_show_host_as_json(filled, capsys):
    rc, out, _ = run_manage(capsys, *filled, "decision", "show", "req-a", "--host", "mid", "--json")
    assert rc == 0
    [answer] = json.loads(out)
    assert answer["request_id"] == "req-a" and answer["host"] == "mid"
    assert answer["verdict"] == "passed" and answer["rank"] == 2
    assert answer["behind_host"] == "big" and set(answer["by_weigher"]) == {"RAMWeigher"}
    assert "document" not in answer


def test_list_by_outcome_project_and_flavor(filled, capsys):
    def listed(*argv):
        rc, out, err = run_manage(capsys, *filled, "decision", "list", *argv, "--json")
        assert rc in (0, 2), err
        return [r["request_id"] for r in json.loads(out)]

    assert listed("--outcome", "no_valid_host") == ["req-b"]
    assert listed("--outcome", "scheduled") == ["req-a", "req-3"]
    assert listed("--outcome", "error") == []
    # the project and the flavor as the driver records them
    assert listed("--project", "p1") == ["req-a"]
    assert listed("--project", "p2", "--outcome", "no_valid_host") == ["req-b"]
    assert listed("--flavor", "m1.huge") == ["req-b"]
    assert listed("--flavor", "m1", "--project", "p1") == ["req-a"]
    assert listed("--flavor", "m1", "--project", "p2") == []


def test_list_says_what_it_filtered_on_when_nothing_matched(filled, capsys):
    rc, out, err = run_manage(
        capsys, *filled, "decision", "list", "--outcome", "error", "--flavor", "x"
    )
    assert (rc, out) == (2, "")
    assert err == "novasched-manage: no decision recorded with outcome error of flavor x\n"
    rc, out, err = run_manage(capsys, *filled, "decision", "list", "--outcome", "refused")
    assert rc == 1 and "argument --outcome: invalid choice: 'refused'" in err
