"""Records whose last part takes time are finished on a thread of their own, then handed on."""

from __future__ import annotations

import threading

from scheduler.records import SCHEDULED, DecisionRecord
from scheduler.records.completions import Completions


def _record() -> DecisionRecord:
    return DecisionRecord(
        request_id="req-1", instance_uuids=["i-1"], outcome=SCHEDULED, hosts=[], document={}
    )


def test_a_part_is_computed_off_the_callers_thread_then_the_record_is_handed_on():
    done = []
    handed = threading.Event()
    completions = Completions()
    caller = threading.get_ident()
    completions.submit(
        _record(),
        "part",
        lambda: {"thread": threading.get_ident()},
        lambda rec: (done.append(rec), handed.set()),
    )
    assert handed.wait(10)
    assert done[0].document["part"]["thread"] != caller
    completions.stop()


def test_past_its_slots_a_part_is_skipped_and_a_failing_one_keeps_its_error():
    release = threading.Event()
    handed: list[DecisionRecord] = []
    completions = Completions(pending=1)
    completions.submit(_record(), "part", lambda: release.wait(10) and "slow", handed.append)
    skipped = _record()
    completions.submit(skipped, "part", lambda: "never", handed.append)
    assert skipped.document["part"] == {"skipped": "too many searches at once"}
    assert handed == [skipped]  # handed on at once
    release.set()
    failing = _record()

    def boom():
        raise ValueError("no luck")

    completions.stop()  # the slow one is finished first
    assert handed[1].document["part"] == "slow"
    completions = Completions()
    completions.submit(failing, "part", boom, handed.append)
    completions.stop()
    assert failing.document["part"] == {"error": "no luck"}
