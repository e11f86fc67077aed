"""The benchmark command at tiny sizes: the fleet it builds, the core section's JSON, the CLI."""

from __future__ import annotations

import json
import sqlite3

import pytest

from benchmarks import core, fleet, run

ROW_STATS = ("refresh_ms", "filter_ms", "weigh_ms", "total_ms", "refresh_nothing_changed_ms")


def _count(path: str, sql: str) -> int:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchone()[0]
    finally:
        conn.close()


def test_fleet_has_the_promised_mix(tmp_path):
    bench = fleet.build(200, str(tmp_path / "f"))
    try:
        cell = bench.cell_url.removeprefix("sqlite:///")
        api = bench.api_url.removeprefix("sqlite:///")
        assert _count(cell, "SELECT count(*) FROM compute_nodes WHERE deleted = 0") == 200
        assert _count(cell, "SELECT count(*) FROM services WHERE disabled = 1") == 16
        assert _count(cell, "SELECT count(*) FROM services WHERE report_count = 0") == 14
        assert _count(cell, "SELECT count(DISTINCT cpu_allocation_ratio) FROM compute_nodes") > 2
        assert _count(api, "SELECT count(*) FROM host_mappings") == 200
        # three AZs and the weigher-multiplier aggregates
        assert _count(api, "SELECT count(*) FROM aggregate_metadata") >= 5
        assert _count(api, "SELECT count(*) FROM instance_groups") == len(bench.groups) > 0
        members = sum(len(g.members) for g in bench.groups)
        assert _count(api, "SELECT count(*) FROM instance_group_member") == members
        assert sorted(sum(bench.az_members.values(), [])) == sorted(bench.compute_uuids)

        before = _count(cell, "SELECT sum(report_count) FROM services")
        assert bench.heartbeat(10) == 10
        assert _count(cell, "SELECT sum(report_count) FROM services") == before + 10
        assert bench.touch_compute_nodes(3) == 3
        # the fleet's own rows are ten minutes old; the touched ones are new
        recent = (
            "SELECT count(*) FROM compute_nodes WHERE updated_at > datetime('now', '-60 seconds')"
        )
        assert _count(cell, recent) == 3
    finally:
        bench.close()


def test_core_section_json_shape(tmp_path):
    out = core.run([60], 4, {}, workdir=str(tmp_path), quiet_seconds=0)
    json.dumps(out)  # JSON-able
    assert out["repeats"] == 4
    (row,) = out["rows"]
    assert row["hosts"] == 60
    assert row["requests"] == 4
    for key in ROW_STATS:
        assert set(row[key]) == {"p50", "p99"}
        assert 0 <= row[key]["p50"] <= row[key]["p99"]
    # one request of each kind, and the fleet lets about half of the hosts through
    assert set(row["by_kind_total_ms"]) == set(core.KINDS)
    assert 0.25 <= row["pass_ratio"]["plain"] <= 0.75
    assert row["pass_ratio"]["capability"] < row["pass_ratio"]["plain"]
    assert "ComputeFilter" in row["filters"]
    assert "RAMWeigher" in row["weighers"]
    assert "pass" not in row  # no target at 60 hosts
    assert row["changes_per_request"]["compute_nodes"] == 1


def test_targets_are_judged_at_their_sizes():
    assert core.TARGETS_MS == {10_000: 20.0, 100_000: 250.0}
    assert core.NOTHING_CHANGED_TARGET_MS == {10_000: 2.0}


def test_percentile_is_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert core.percentile(values, 99) == 99.0
    assert core.percentile(values, 50) == 50.0
    assert core.percentile([3.0], 99) == 3.0


def test_sizes_and_sections_parse():
    assert run._parse_sizes("100,1k,10_000") == [100, 1000, 10000]
    assert run.sizes_for("e2e", [100, 1000, 100000], False) == [100, 1000]
    assert run.sizes_for("memory", [100, 1000], False) == [1000]
    assert run.sizes_for("core", None, True) == run.QUICK_SIZES["core"]
    with pytest.raises(SystemExit):
        run.build_parser().parse_args(["--sections", "core,bogus"])


def test_cli_runs_core_and_writes_json(tmp_path, capsys):
    out_file = tmp_path / "bench.json"
    code = run.main(
        [
            "--sections",
            "core",
            "--sizes",
            "40",
            "--repeats",
            "3",
            "--quiet-seconds",
            "0",
            "--json",
            str(out_file),
            "--log-file",
            str(tmp_path / "bench.log"),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "core:" in printed and "refresh ms p50/p99" in printed
    data = json.loads(out_file.read_text())
    assert data["sections"]["core"]["rows"][0]["hosts"] == 40
    assert data["environment"]["cpus"] >= 1


def test_memory_table_marks_the_target():
    text = run.format_memory(
        {
            "rows": [
                {
                    "hosts": 100_000,
                    "baseline_rss_mb": 50.0,
                    "rss_mb": 700.0,
                    "hwm_mb": 900.0,
                    "per_host_kb": 6.6,
                    "target_rss_mb": 600.0,
                    "pass": False,
                    "nova_peak_mb": 1900.0,
                }
            ]
        }
    )
    assert "FAIL" in text and "100,000" in text


def test_instance_lists_are_synced_as_in_a_live_cell(tmp_path):
    from scheduler.conf import CONF

    bench = fleet.build(30, str(tmp_path / "f"))
    core.ensure_conf(CONF)
    driver = core._driver(bench, CONF)
    try:
        core.sync_instances(driver, bench)
        tracked = driver.host_manager.instance_tracker.tracked_hosts()
        assert set(tracked) == set(bench.hosts)
        assert all(tracked.values())
        group = bench.groups[0]
        member_host = group.hosts[0]
        assert group.members[0] in driver.host_manager.instance_tracker.instances_for(member_host)
    finally:
        driver.stop()
        bench.close()


def test_section_targets_become_pass_and_fail_lines():
    text = run.target_verdicts(
        {
            "targets": {
                "own_p50": {"what": "own time at 1k", "limit": 10.0, "measured": 7.5, "met": True},
                "overcommits": {"what": "over-commits", "limit": 0, "measured": 2, "met": False},
                "later": {"what": "not run", "limit": 1, "measured": None},
            }
        }
    )
    lines = text.splitlines()
    assert lines[0].startswith("PASS") and "own_p50" in lines[0]
    assert lines[1].startswith("FAIL") and "overcommits" in lines[1]
    assert lines[2].startswith("-")
