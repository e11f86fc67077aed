"""``python -m benchmarks --plot``: the picture of the latencies against host count, from a run
or from a saved ``--json`` file, and its errors (no data, no matplotlib)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import matplotlib  # noqa: F401 (the test extra installs it: a missing one fails, never skips)
import pytest

from benchmarks import core, e2e, plot, run

REPO = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _core_row(hosts: int, p50: float, p99: float) -> dict:
    return {"hosts": hosts, "total_ms": {"p50": p50, "p99": p99}, "refresh_ms": {"p50": 0.1}}


def _e2e_row(hosts: int, source: str, p50: float, limit: int = 1000) -> dict:
    return {
        "hosts": hosts,
        "source": source,
        "max_placement_results": limit,
        "client_p50_ms": p50,
        "client_p99_ms": p50 * 2,
    }


def _results(*, with_e2e: bool = True) -> dict:
    sections: dict = {
        "core": {"rows": [_core_row(10_000, 8.0, 40.0), _core_row(1_000, 1.5, 7.0)]},
        "memory": {"rows": [{"hosts": 100_000, "rss_mb": 528.0}]},
    }
    if with_e2e:
        sections["e2e"] = {
            "rows": [
                _e2e_row(1_000, "placement", 216.0),
                _e2e_row(1_000, "view", 30.5),
                _e2e_row(5_000, "view", 37.7),
                _e2e_row(5_000, "view", 45.6, limit=5_000),  # limit N: not drawn
                _e2e_row(5_000, "placement", 723.0),
            ]
        }
    return {
        "environment": {
            "when": "2026-11-25T02:17:09+00:00",
            "python": "3.11.7",
            "machine": "x86_64",
            "cpus": 2,
            "load_average": [0.1, 0.2, 0.1],
        },
        "sections": sections,
    }


def _assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 10_000  # axes, lines and text, not an empty canvas


def _write(tmp_path: Path, data: object, name: str = "r.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_plot_draws_every_series_the_results_hold(tmp_path):
    out = tmp_path / "bench.png"
    report = plot.plot_results(_results(), out)
    _assert_png(out)
    assert report.drawn == [
        "core_p50",
        "core_p99",
        "e2e_view",
        "e2e_placement",
        "nova_core",
        "nova_e2e",
    ]
    by_key = {s.key: s for s in report.series}
    assert by_key["core_p50"].points == [(1_000, 1.5), (10_000, 8.0)]  # sorted by hosts
    assert by_key["core_p99"].points == [(1_000, 7.0), (10_000, 40.0)]
    # nova's default limit only: the limit-N run at 5k is left off the line
    assert by_key["e2e_view"].points == [(1_000, 30.5), (5_000, 37.7)]
    assert by_key["nova_core"].reference and not by_key["core_p50"].reference
    assert by_key["nova_core"].points == [(h, v[2]) for h, v in sorted(core.NOVA_MS.items())]
    assert report.skipped == {"memory": "not a latency against host count"}


def test_a_missing_section_is_left_out_and_said(tmp_path):
    out = tmp_path / "core.png"
    report = plot.plot_results(_results(with_e2e=False), out)
    _assert_png(out)
    assert report.drawn == ["core_p50", "core_p99", "nova_core"]
    assert report.skipped["e2e"] == "not in the data"
    assert any(line.startswith("  left out e2e") for line in report.lines())


def test_failed_and_empty_sections_are_left_out_with_their_reason():
    data = _results()
    data["sections"]["e2e"] = {"available": True, "error": "RuntimeError: no RabbitMQ"}
    series, skipped = plot.collect(data)
    assert [s.key for s in series] == ["core_p50", "core_p99", "nova_core"]
    assert "no RabbitMQ" in skipped["e2e"]
    data["sections"]["core"] = {"rows": [{"hosts": 100, "total_ms": {}}]}
    series, skipped = plot.collect(data)
    assert series == [] and skipped["core"] == "no latency in its rows"


def test_nothing_to_draw_is_an_error():
    with pytest.raises(plot.NoDataError, match="nothing to plot"):
        plot.plot_results({"environment": {}, "sections": {}}, "unused.png")
    with pytest.raises(plot.NoDataError):
        plot.plot_results({"sections": {"memory": {"rows": [{"hosts": 1}]}}}, "unused.png")


def test_nova_e2e_reference_matches_what_the_e2e_section_quotes():
    for hosts, ms in plot.NOVA_E2E_MS.items():
        assert f"nova 34 {ms / 1000:.1f} s" in e2e.LATENCY_BEFORE[hosts]
    assert plot.E2E_LIMIT == e2e.DEFAULT_LIMIT


def test_footnote_carries_the_date_machine_and_sources():
    data = _results()
    data["source"] = {"e2e": {"summary": "recorded in docs/benchmarks.md", "measured": "x"}}
    note = plot.footnote(data)
    assert "2026-11-25 02:17 UTC" in note and "x86_64, 2 CPUs" in note
    assert "e2e: recorded in docs/benchmarks.md" in note
    assert plot.footnote({"sections": {}}) == ""


def test_cli_from_json_plots_without_running(tmp_path, capsys):
    saved = _write(tmp_path, _results(with_e2e=False))
    out = tmp_path / "out.png"
    code = run.main(["--from-json", str(saved), "--plot", str(out)])
    assert code == 0
    _assert_png(out)
    printed = capsys.readouterr().out
    assert "drew core_p50" in printed and "drew nova_core" in printed
    assert "left out e2e: not in the data" in printed
    assert "== core" not in printed  # nothing ran


def test_cli_from_json_end_to_end_as_a_command(tmp_path):
    saved = _write(tmp_path, _results())
    out = tmp_path / "cmd.png"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--from-json", str(saved), "--plot", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    _assert_png(out)
    assert "drew e2e_placement" in proc.stdout and "drew nova_e2e" in proc.stdout


def test_cli_no_data_exits_2_with_a_message(tmp_path, capsys):
    empty = _write(tmp_path, {"environment": {"cpus": 2}, "sections": {}})
    out = tmp_path / "none.png"
    assert run.main(["--from-json", str(empty), "--plot", str(out)]) == 2
    assert "nothing to plot" in capsys.readouterr().err
    assert not out.exists()
    not_json = tmp_path / "bad.json"
    not_json.write_text("{not json")
    assert run.main(["--from-json", str(not_json), "--plot", str(out)]) == 2
    assert "is not JSON" in capsys.readouterr().err
    assert run.main(["--from-json", str(tmp_path / "absent.json"), "--plot", str(out)]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_cli_from_json_needs_plot(tmp_path):
    with pytest.raises(SystemExit) as exc:
        run.main(["--from-json", str(tmp_path / "r.json")])
    assert exc.value.code == 2


def test_missing_matplotlib_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    saved = _write(tmp_path, _results())
    out = tmp_path / "never.png"
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    with pytest.raises(plot.MatplotlibMissing, match=r"pip install 'novasched\[plot\]'"):
        plot.plot_results(_results(), out)
    code = run.main(["--from-json", str(saved), "--plot", str(out)])
    assert code == plot.EXIT_NO_MATPLOTLIB != 0
    captured = capsys.readouterr()
    assert "pip install 'novasched[plot]'" in captured.err
    assert "Traceback" not in captured.err + captured.out
    assert not out.exists()
    # with sections to run, it says so before running any of them
    code = run.main(["--sections", "core", "--sizes", "40", "--plot", str(out)])
    assert code == plot.EXIT_NO_MATPLOTLIB
    captured = capsys.readouterr()
    assert "novasched[plot]" in captured.err and "== core" not in captured.out


def test_plot_command_reports_an_unwritable_file(tmp_path):
    err = io.StringIO()
    code = plot.plot_command(_results(), tmp_path / "no-such-dir" / "x.png", err=err)
    assert code == 1 and "cannot write" in err.getvalue()


def test_run_then_plot_what_was_measured(tmp_path, capsys):
    out = tmp_path / "run.png"
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
            "--plot",
            str(out),
            "--log-file",
            str(tmp_path / "bench.log"),
        ]
    )
    assert code == 0
    _assert_png(out)
    printed = capsys.readouterr().out
    assert "drew core_p50: 40 hosts" in printed


def test_the_checked_in_picture_data_still_plots(tmp_path):
    path = REPO / "docs" / "benchmarks-results.json"
    data = plot.load_results(path)
    assert {"core", "e2e"} <= set(data["source"])
    report = plot.plot_results(data, tmp_path / "docs.png")
    assert {"core_p50", "e2e_view", "e2e_placement", "nova_core", "nova_e2e"} <= set(report.drawn)
    assert os.path.getsize(tmp_path / "docs.png") > 10_000
