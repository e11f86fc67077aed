"""The replay benchmark section replays recorded boots on the core fleet."""

from __future__ import annotations

import json

from benchmarks import replay, run


def test_replay_section_json_shape():
    out = replay.run([120], 1, {})
    json.dumps(out)  # JSON-able
    (row,) = out["rows"]
    # every record was replayed (none skipped), and the time per request is what it says
    assert row["hosts"] == 120 and row["replayed"] == row["records"] == 100
    assert abs(row["ms_per_request"] - row["seconds_p50"] / row["records"] * 1000) <= 0.1
    assert "replay" in run.SECTIONS and run.DEFAULT_SIZES["replay"] == [1_000, 10_000]
