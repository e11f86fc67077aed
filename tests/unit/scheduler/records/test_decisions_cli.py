"""novasched-manage decision show / list, in-process, on a store the test fills."""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timedelta

import pytest

from scheduler.cmd import decisions
from scheduler.records import DecisionStore
from scheduler.records.record import utcnow
from tests.unit.scheduler.cmd.builders import run_manage
from tests.unit.scheduler.records.builders import make_record

UUID = "6f0d6c3e-1111-4f6e-9d43-2b1a4c3e0a01"
OTHER = "7a1b2c3d-1111-4f6e-9d43-2b1a4c3e0a02"

DOCUMENT = {
    "timings_ms": {"total": 31.2},
    "request": {"flavor": {"name": "m1.small", "vcpus": 2}, "num_instances": 2},
    "placement": {"source": "view", "candidates": 21},
    "filters": [
        {"name": "ComputeFilter", "hosts_in": 21, "hosts_passed": 18},
        {"name": "RamFilter", "hosts_in": 18, "hosts_passed": 18},
    ],
    "weighed": [
        {
            "host": "compute-12",
            "weight": 2.93,
            "weighers": {"RAMWeigher": {"raw": 60416.0, "normalized": 1.0, "multiplier": 1.0}},
        }
    ],
    "selections": [{"host": "compute-12", "alternates": ["compute-7", "compute-3"]}],
}


@pytest.fixture
def filled(tmp_path):
    """A nova.conf whose state_path holds three decisions: UUID scheduled with OTHER three
    hours ago, rescheduled and refused an hour ago; one more on compute-7 just now."""
    conf = tmp_path / "nova.conf"
    conf.write_text(f"[DEFAULT]\nstate_path = {tmp_path}\n")
    now = utcnow()
    store = DecisionStore(f"sqlite:///{tmp_path}/novasched-decisions.sqlite")
    store.add(
        [
            make_record(
                1,
                at=now - timedelta(hours=3),
                instances=[UUID, OTHER],
                hosts=["compute-12", "compute-7"],
                document=DOCUMENT,
            ),
            make_record(
                2,
                at=now - timedelta(hours=1),
                instances=[UUID],
                hosts=[],
                outcome="no_valid_host",
                document={"reason": "0/21 hosts available: 21 RamFilter (not enough RAM)"},
            ),
            make_record(3, at=now, hosts=["compute-7"]),
        ]
    )
    store.close()
    return ["--config-file", str(conf)]


def test_show_prints_every_decision_of_an_instance_newest_first(filled, capsys):
    rc, out, err = run_manage(capsys, *filled, "decision", "show", UUID)
    assert rc == 0 and err == ""
    first, second = out.split("\n\n")
    assert first.startswith("Decision 2 at ")
    assert "  request id: req-2\n  outcome:    no_valid_host\n" in first
    assert f"  instances:  {UUID}\n  hosts:      -\n" in first
    assert "  Reason: 0/21 hosts available: 21 RamFilter (not enough RAM)" in first
    assert second.startswith("Decision 1 at ")
    assert f"  instances:  {UUID}, {OTHER}\n  hosts:      compute-12, compute-7\n" in second
    # the known sections first, in their order, in words; other keys after, generically
    lines = second.splitlines()
    titles = [line.strip() for line in lines if line.startswith("  ") and line[2] != " "]
    assert titles[4:] == [
        "Request:",
        "Placement: source view, candidates 21",
        "Filters:",
        "Weighed hosts:",
        "Selections:",
        "Timings ms: total 31.2",
    ]
    assert "    - ComputeFilter: hosts_in 21, hosts_passed 18" in lines
    assert "    - compute-12: weight 2.93" in lines
    # a document without shares (version 1): each weigher as it was recorded
    assert "        RAMWeigher: raw 60416, normalized 1, multiplier 1" in lines
    assert "        alternates: compute-7, compute-3" in lines
    assert "{" not in out  # no raw JSON


def test_show_by_request_id_and_as_json(filled, capsys):
    rc, out, _ = run_manage(capsys, *filled, "decision", "show", "req-1", "--json")
    assert rc == 0
    [record] = json.loads(out)
    assert record["request_id"] == "req-1" and record["outcome"] == "scheduled"
    assert record["instance_uuids"] == [UUID, OTHER]
    assert record["hosts"] == ["compute-12", "compute-7"]
    assert record["document"] == DOCUMENT
    assert record["created_at"].endswith("Z")


def test_show_of_nothing_is_exit_status_2(filled, capsys):
    rc, out, err = run_manage(capsys, *filled, "decision", "show", "req-404")
    assert (rc, out) == (2, "")
    assert err == "novasched-manage: no decision recorded for instance or request req-404\n"
    rc, out, _ = run_manage(capsys, *filled, "decision", "show", "req-404", "--json")
    assert rc == 2 and json.loads(out) == []


def test_list_prints_a_line_per_decision_newest_first(filled, capsys):
    rc, out, err = run_manage(capsys, *filled, "decision", "list")
    assert rc == 0 and err == ""
    header, rule, *rows, total = out.splitlines()
    assert header.split() == ["time", "(UTC)", "request", "id", "outcome", "instances", "hosts"]
    assert [row.split()[2] for row in rows] == ["req-3", "req-2", "req-1"]
    assert rows[1].split()[3:] == ["no_valid_host", UUID, "-"]
    assert rows[2].split()[3:] == ["scheduled", UUID, "(+1)", "compute-12,", "compute-7"]
    assert total == "3 decision(s)"


def test_list_by_host_since_until_and_limit(filled, capsys):
    rc, out, _ = run_manage(capsys, *filled, "decision", "list", "--host", "compute-7", "--json")
    assert rc == 0 and [r["request_id"] for r in json.loads(out)] == ["req-3", "req-1"]
    rc, out, _ = run_manage(capsys, *filled, "decision", "list", "--since", "2h", "--json")
    assert [r["request_id"] for r in json.loads(out)] == ["req-3", "req-2"]
    until = (utcnow() - timedelta(minutes=30)).isoformat(timespec="minutes")
    rc, out, _ = run_manage(capsys, *filled, "decision", "list", "--until", until, "--json")
    assert [r["request_id"] for r in json.loads(out)] == ["req-2", "req-1"]
    rc, out, _ = run_manage(capsys, *filled, "decision", "list", "--limit", "1")
    assert rc == 0 and out.splitlines()[-1] == "1 decision(s); there may be more: raise --limit"
    rc, out, err = run_manage(
        capsys, *filled, "decision", "list", "--host", "compute-7", "--since", "2h"
    )
    assert rc == 0 and len(out.splitlines()) == 4
    rc, out, err = run_manage(capsys, *filled, "decision", "list", "--host", "compute-99")
    assert (rc, out) == (2, "")
    assert err == "novasched-manage: no decision recorded on host compute-99\n"


def test_a_missing_store_is_an_error_and_is_not_created(tmp_path, capsys):
    conf = tmp_path / "nova.conf"
    conf.write_text(f"[DEFAULT]\nstate_path = {tmp_path}\n")
    rc, out, err = run_manage(capsys, "--config-file", str(conf), "decision", "list")
    assert (rc, out) == (1, "")
    assert err == (
        "novasched-manage: error: cannot read the decision records at "
        f"sqlite:///{tmp_path}/novasched-decisions.sqlite: the file does not exist: no "
        "decision has been recorded there. Check [DEFAULT] state_path (or "
        "[decision_records] connection)\n"
    )
    assert not (tmp_path / "novasched-decisions.sqlite").exists()


def test_a_store_that_fails_to_read_is_one_line(filled, tmp_path, capsys):
    (tmp_path / "novasched-decisions.sqlite").write_bytes(b"not a database" * 100)
    rc, out, err = run_manage(capsys, *filled, "decision", "show", UUID)
    assert rc == 1 and out == ""
    assert err.startswith("novasched-manage: error: cannot read the decision records at ")
    assert "file is not a database" in err and "Traceback" not in err
    assert len(err.splitlines()) == 1


def test_the_connection_option_names_the_store(tmp_path, capsys):
    conf = tmp_path / "nova.conf"
    conf.write_text("[decision_records]\nconnection = mysql+pymysql://nova:pw@127.0.0.1:1/x\n")
    rc, _, err = run_manage(capsys, "--config-file", str(conf), "decision", "list")
    assert rc == 1
    assert "at mysql+pymysql://nova:***@127.0.0.1:1/x: " in err and "pw" not in err
    assert err.rstrip().endswith("Check [decision_records] connection")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["list", "--since", "yesterday"], "argument --since: not a time: 'yesterday'"),
        (["list", "--limit", "0"], "argument --limit: must be at least 1"),
        (["show"], "the following arguments are required: INSTANCE_UUID|REQUEST_ID"),
        (["drop"], "invalid choice: 'drop'"),
    ],
)
def test_bad_arguments_are_one_line_errors(filled, capsys, argv, message):
    rc, out, err = run_manage(capsys, *filled, "decision", *argv)
    assert rc == 1 and out == ""
    assert err.startswith("novasched-manage: error: ") and message in err


def test_since_after_until_is_an_error(filled, capsys):
    rc, _, err = run_manage(capsys, *filled, "decision", "list", "--since", "1h", "--until", "2h")
    assert rc == 1 and err == "novasched-manage: error: --since is after --until\n"


NOW = datetime(2026, 11, 26, 12, 0, 0)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2026-11-26T10:00", datetime(2026, 11, 26, 10, 0)),
        ("2026-11-26", datetime(2026, 11, 26, 0, 0)),
        ("2026-11-26 10:00:30.5", datetime(2026, 11, 26, 10, 0, 30, 500000)),
        ("2026-11-26T10:00+02:00", datetime(2026, 11, 26, 8, 0)),
        ("2026-11-26T10:00Z", datetime(2026, 11, 26, 10, 0)),
        ("30m", NOW - timedelta(minutes=30)),
        ("2h", NOW - timedelta(hours=2)),
        ("7d", NOW - timedelta(days=7)),
        ("1w", NOW - timedelta(days=7)),
        ("90s ago", NOW - timedelta(seconds=90)),
        ("1.5H", NOW - timedelta(minutes=90)),
    ],
)
def test_times_are_iso_in_utc_or_ago(text, expected):
    assert decisions.parse_time(text, now=NOW) == expected


@pytest.mark.parametrize("text", ["", "soon", "10x", "-2h", "2026-13-01"])
def test_what_is_not_a_time(text):
    with pytest.raises(argparse.ArgumentTypeError, match="not a time"):
        decisions.parse_time(text, now=NOW)


def test_rendering_any_shape_of_document():
    rec = make_record(
        1,
        document={
            "reason": "x " * 80,
            "empty": {},
            "none": None,
            "flags": [True, False],
            "nested": [[1, 2], {"a": {"b": 1}}, [], [{"host": "compute-1", "weight": 2.0}]],
            "steps": [{"took": 1.23456789}],
        },
    )
    text = decisions.render_record(rec)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= decisions.WIDTH
    # the known section first, wrapped under itself
    assert lines[5].startswith("  Reason: x x") and lines[6].startswith("    x x")
    assert lines[7] == "  Empty: -"
    assert "  None: -" in lines and "  Flags: yes, no" in lines
    # lists in a list (one per instance) are numbered
    nested = lines.index("  Nested:")
    assert lines[nested + 1 : nested + 5] == [
        "    #1: 1, 2",
        "    - a: b 1",
        "    #3: -",
        "    #4:",
    ]
    assert lines[nested + 5] == "      - compute-1: weight 2"
    assert "    - took 1.23457" in lines
