"""The capacity benchmark section runs the calculator on the core fleet and judges its target."""

from __future__ import annotations

import json

from benchmarks import capacity, run


def test_capacity_section_json_shape(tmp_path):
    out = capacity.run([120], 1, {})
    json.dumps(out)  # JSON-able
    (row,) = out["rows"]
    assert row["hosts"] == 120 and row["flavors"] == len(capacity.FLAVORS) == 20
    assert 0 < row["seconds_p50"] <= row["seconds_max"]
    # the view answered every flavor, and the small flavor fits many times over
    assert row["sources"] == ["view"]
    assert row["instances_m1_small"] > 120
    assert "pass" not in row  # no target at 120 hosts


def test_the_capacity_target_is_judged_at_10k():
    assert capacity.TARGET_SECONDS == {10_000: 5.0}
    assert "capacity" in run.SECTIONS
    assert run.DEFAULT_SIZES["capacity"] == [1_000, 10_000]
