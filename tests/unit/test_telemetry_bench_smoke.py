"""The telemetry benchmark section runs and reports each mode and a scrape."""

from __future__ import annotations

from benchmarks import telemetry


def test_telemetry_section_reports_each_mode_and_a_scrape_of_two_processes():
    out = telemetry.run([0], 300, {})
    assert "error" not in out, out.get("error")
    modes = {row["mode"]: row for row in out["rows"]}
    assert set(modes) == {"off", "in-memory", "multiprocess"}
    assert all(row["requests"] == 300 and row["us_per_request"] > 0 for row in modes.values())
    # the stand-ins do less than real metrics
    assert modes["off"]["us_per_request"] < modes["multiprocess"]["us_per_request"]
    assert out["scrape_ms"] > 0 and out["series"] > 20
