"""``python -m benchmarks``: measure novasched against issue 4's targets and print the tables.

Sections: core (HostState refresh, filtering, weighing per request), e2e (select_destinations
over RabbitMQ against a real Placement on MariaDB, candidates from Placement and from the
provider view side by side), throughput (8 conductors against 1 and 2 scheduler processes, both
candidate sources), memory (resident memory holding 100k hosts). Each prints a table with the
target and nova's number beside the measurement and PASS/FAIL; ``--json`` writes everything.
docs/benchmarks.md explains every number.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import logging
import os
import platform
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from benchmarks.report import table, target_verdicts

SECTIONS = (
    "core",
    "e2e",
    "throughput",
    "memory",
    "faults",
    "view_cost",
    "telemetry",
    "capacity",
    "replay",
    "wide_tree",
)
DEFAULT_SIZES = {
    "core": [100, 1_000, 10_000, 100_000],
    "e2e": [100, 1_000, 5_000, 10_000],
    "throughput": [1_000],
    "memory": [100_000],
    "faults": [0],  # the suite's own fleets
    "view_cost": [1_000, 10_000, 100_000],
    "telemetry": [0],  # no fleet: the cost of counting one request
    "capacity": [1_000, 10_000],
    "replay": [1_000, 10_000],
    "wide_tree": [1_000],
}
QUICK_SIZES = {
    "core": [100, 1_000],
    "e2e": [100],
    "throughput": [100],
    "memory": [10_000],
    "faults": [0],
    "view_cost": [200],
    "telemetry": [0],
    "capacity": [200],
    "replay": [200],
    "wide_tree": [100],
}
# view_cost: seconds (polls at 1 Hz) per measuring window
DEFAULT_REPEATS = {
    "core": 40,
    "e2e": 30,
    "throughput": 400,
    "memory": 5,
    "faults": 1,
    "view_cost": 30,
    "telemetry": 20_000,  # requests counted per mode
    "capacity": 3,  # computations of every flavor's capacity
    "replay": 3,  # replays of every record
    "wide_tree": 3,  # queries per answerer
}
QUICK_REPEATS = {
    "core": 8,
    "e2e": 5,
    "throughput": 40,
    "memory": 3,
    "faults": 1,
    "view_cost": 4,
    "telemetry": 2_000,
    "capacity": 1,
    "replay": 1,
    "wide_tree": 1,
}


def _parse_sizes(text: str) -> list[int]:
    sizes = []
    for part in text.split(","):
        part = part.strip().lower().replace("_", "")
        if not part:
            continue
        mult = 1
        if part.endswith("k"):
            part, mult = part[:-1], 1000
        value = int(float(part) * mult)
        if value < 1:
            raise argparse.ArgumentTypeError(f"a size must be at least 1: {part}")
        sizes.append(value)
    if not sizes:
        raise argparse.ArgumentTypeError("no size given")
    return sizes


def _parse_sections(text: str) -> list[str]:
    wanted = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in wanted if s not in SECTIONS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}"
        )
    return wanted


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Measure novasched against issue 4's targets (see docs/benchmarks.md).",
    )
    parser.add_argument(
        "--sections",
        type=_parse_sections,
        default=list(SECTIONS),
        help=f"comma-separated sections to run (default: {','.join(SECTIONS)})",
    )
    parser.add_argument(
        "--sizes",
        type=_parse_sizes,
        default=None,
        help="comma-separated host counts (e.g. 100,1k,10k,100k); each section keeps the sizes "
        "it supports (e2e: at most 10k; memory: the largest given)",
    )
    parser.add_argument(
        "--repeats", type=int, default=None, help="requests per measurement (per size)"
    )
    parser.add_argument("--json", metavar="FILE", help="write the results as JSON to FILE")
    parser.add_argument(
        "--quick", action="store_true", help="small sizes and few repeats: a smoke run"
    )
    parser.add_argument(
        "--quiet-seconds",
        type=float,
        default=None,
        help="core: how long the fleet stays unwritten before 'refresh, nothing changed' is "
        "measured (default: the host manager's read window + 0.5 s)",
    )
    parser.add_argument(
        "--log-file",
        help="where the service's log lines go (default: a new file in the temp directory); "
        "nova's ComputeFilter warns once per down host per request, and that cost is measured",
    )
    parser.add_argument(
        "--plot",
        metavar="FILE.png",
        help="after the run, draw the core and e2e latencies against host count, beside nova "
        "34's numbers, into FILE.png (needs matplotlib: pip install 'novasched[plot]')",
    )
    parser.add_argument(
        "--from-json",
        metavar="RESULTS.json",
        help="run nothing: draw the --plot picture from a file written by --json",
    )
    parser.add_argument(
        "--split-cpus",
        action="store_true",
        help="e2e: the scheduler on the first CPU, the database servers and Placement on the "
        "others, as when they run on other hardware (needs the right to set the database "
        "server's CPU affinity; its masks are put back after the run)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="print progress")
    return parser


def sizes_for(section: str, given: list[int] | None, quick: bool) -> list[int]:
    """The sizes a section runs: the given ones it supports, else its defaults."""
    if given is None:
        return list((QUICK_SIZES if quick else DEFAULT_SIZES)[section])
    if section == "e2e":
        return [s for s in given if s <= 10_000] or [min(given)]
    if section == "memory":
        return [max(given)]
    if section == "throughput":
        return [min(given, key=lambda s: abs(s - 1_000))]
    if section in ("faults", "telemetry"):
        return [0]
    return list(given)


# -- tables -----------------------------------------------------------------------------------
def _verdict(ok: bool | None) -> str:
    if ok is None:
        return "-"
    return "PASS" if ok else "FAIL"


def _ms(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, (int, float)):
        return f"{value:,.1f}" if value < 100 else f"{value:,.0f}"
    return str(value)


def _pm(stat: dict[str, float] | None) -> str:
    if not stat:
        return "-"
    return f"{_ms(stat.get('p50'))} / {_ms(stat.get('p99'))}"


def format_core(result: dict[str, Any]) -> str:
    rows = []
    for r in result.get("rows", []):
        nova = r.get("nova_ms") or {}
        target = r.get("target_total_p50_ms")
        rows.append(
            [
                f"{r['hosts']:,}",
                _pm(r["refresh_ms"]),
                _pm(r["filter_ms"]),
                _pm(r["weigh_ms"]),
                _pm(r["total_ms"]),
                f"<= {_ms(target)}" if target else "-",
                _verdict(r.get("pass")),
                _ms(nova.get("total")),
                _pm(r["refresh_nothing_changed_ms"]),
                (
                    f"<= {_ms(r['target_nothing_changed_p50_ms'])} "
                    f"{_verdict(r.get('pass_nothing_changed'))}"
                    if "target_nothing_changed_p50_ms" in r
                    else "-"
                ),
                f"{r['pass_ratio'].get('plain', 0):.0%}",
            ]
        )
    text = table(
        [
            "hosts",
            "refresh ms p50/p99",
            "filter",
            "weigh",
            "sum",
            "target p50",
            "",
            "nova ms",
            "refresh, nothing changed",
            "target",
            "pass rate",
        ],
        rows,
    )
    notes = []
    for r in result.get("rows", []):
        kinds = ", ".join(f"{k} {_pm(v)}" for k, v in r.get("by_kind_total_ms", {}).items())
        ch = r.get("changes_per_request", {})
        notes.append(
            f"  {r['hosts']:,} hosts: first full load {_ms(r['initial_load_ms'])} ms; "
            f"per request {ch.get('compute_nodes')} compute nodes written, "
            f"{ch.get('service_heartbeats')} heartbeats; sum by kind: {kinds}"
        )
    return text + "\n" + "\n".join(notes)


def format_memory(result: dict[str, Any]) -> str:
    rows = []
    for r in result.get("rows", []):
        rows.append(
            [
                f"{r['hosts']:,}",
                _ms(r.get("baseline_rss_mb")),
                _ms(r.get("rss_mb")),
                _ms(r.get("hwm_mb")),
                _ms(r.get("per_host_kb")),
                f"<= {_ms(r['target_rss_mb'])}" if r.get("target_rss_mb") else "-",
                _verdict(r.get("pass")),
                _ms(r.get("nova_peak_mb")),
                f"{r['view_providers']:,}" if r.get("view_providers") else "-",
                _ms(r.get("view_mb")),
                f"{r['view_bytes_per_provider']:,}" if r.get("view_bytes_per_provider") else "-",
            ]
        )
    return table(
        [
            "hosts",
            "RSS before load MB",
            "RSS MB",
            "peak (VmHWM) MB",
            "KB/host",
            "target RSS",
            "",
            "nova peak MB",
            "nested view: providers",
            "MB",
            "B/provider",
        ],
        rows,
    )


def format_generic(result: dict[str, Any]) -> str:
    """e2e and throughput tables: their rows as given, with any pass flag as PASS/FAIL."""
    rows = result.get("rows") or []
    if not rows:
        return json.dumps(result, indent=1, default=str)
    keys: list[str] = []
    for r in rows:
        for k in r:
            if k not in keys:
                keys.append(k)
    body = []
    for r in rows:
        line = []
        for k in keys:
            v = r.get(k)
            if isinstance(v, bool):
                line.append(_verdict(v))
            elif isinstance(v, dict):
                line.append(_pm(v) if "p50" in v else json.dumps(v, default=str))
            elif isinstance(v, float):
                line.append(_ms(v))
            else:
                line.append(v)
        body.append(line)
    text = table(keys, body)
    extra = {k: v for k, v in result.items() if k != "rows"}
    if extra:
        text += "\n  " + json.dumps(extra, default=str)
    return text


FORMATTERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "core": format_core,
    "memory": format_memory,
    "e2e": format_generic,
    "throughput": format_generic,
    "faults": format_generic,
    "view_cost": format_generic,
    "telemetry": format_generic,
    "capacity": format_generic,
    "replay": format_generic,
    "wide_tree": format_generic,
}

HEADINGS = {
    "replay": "replay: novasched-manage replay per recorded request, candidates from the "
    "provider view (no target)",
    "capacity": "capacity: novasched-manage capacity for 20 flavors, candidates from the "
    "provider view (target: 10k hosts <= 5 s)",
    "core": "core: per-request scheduler cost, default filters + all weighers "
    "(targets: 10k <= 20 ms, 100k <= 250 ms p50; nothing changed <= 2 ms at 10k; "
    "nova 34: 1k ~180 ms, 10k ~2,300 ms, 100k ~24 s)",
    "e2e": "e2e: select_destinations over RabbitMQ, real Placement on MariaDB, candidates from "
    "Placement and from the provider view side by side (targets with the view: p50 <= 40 / 50 "
    "/ 60 ms at 1k / 5k / 10k, Placement CPU <= 15 ms per instance, 0 orphans; before: 242 / "
    "830 ms / ~1.3 s with Placement's a_c; nova 34: 2.8 / 3.7 s)",
    "throughput": "throughput: 8 conductors against 1 and 2 scheduler processes, both candidate "
    "sources (targets with the view at 1k: >= 60 req/s with 1 process, 2 processes >= 1.3x, "
    "Placement CPU <= 15 ms per instance; 0 over-commits, 0 orphans; before: 19.5 req/s)",
    "memory": "memory: resident memory of a scheduler holding the fleet "
    "(target: 100k hosts <= 600 MB; nova ~1.9 GB peak)",
    "faults": "faults: the fault suite (tests/faults) against the real services "
    "(target: every fault survived, 0 allocations lost)",
    "view_cost": "view_cost: what keeping the provider view current costs Placement, its "
    "database and the scheduler, through the API and through the database, idle and under "
    "claims by another writer (target: a change in the view within ~1 s)",
    "wide_tree": "wide_tree: Placement bug 2070257's shape, 8 PCI devices under every host and "
    "6 asked, answered by the provider view and by Placement, max_allocation_candidates "
    "100,000, both generation strategies (no target)",
    "telemetry": "telemetry: what counting one request into the Prometheus metrics costs, off, "
    "in memory and in multiprocess files ([metrics_exporter] listen), and one /metrics scrape",
}


# -- running ----------------------------------------------------------------------------------
def _section_module(name: str) -> Any:
    try:
        return importlib.import_module(f"benchmarks.{name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"benchmarks.{name}":
            return None
        raise


def run_section(
    name: str,
    sizes: list[int],
    repeats: int,
    progress: Callable[[str], None],
    quiet_seconds: float | None = None,
) -> dict[str, Any]:
    module = _section_module(name)
    if module is None:
        return {"available": False, "reason": f"benchmarks/{name}.py is not there"}
    out: dict[str, Any] = {"sizes": sizes, "repeats": repeats}
    if name == "core":
        return module.run(sizes, repeats, out, progress=progress, quiet_seconds=quiet_seconds)
    if name in ("memory", "view_cost", "capacity", "replay", "wide_tree"):
        return module.run(sizes, repeats, out, progress=progress)
    return module.run(sizes, repeats, out)


def _environment() -> dict[str, Any]:
    return {
        "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


def _run_sections(args: argparse.Namespace, results: dict[str, Any], progress: Any) -> bool:
    """Run and print each section asked for into ``results``; True if one failed."""
    failed = False
    for name in args.sections:
        sizes = sizes_for(name, args.sizes, args.quick)
        repeats = args.repeats or (QUICK_REPEATS if args.quick else DEFAULT_REPEATS)[name]
        print(f"\n== {HEADINGS[name]}", flush=True)
        try:
            result = run_section(name, sizes, repeats, progress, args.quiet_seconds)
        except Exception as exc:  # one broken section must not hide the others
            logging.getLogger(__name__).exception("Section %s failed", name)
            result = {"available": True, "error": f"{type(exc).__name__}: {exc}"}
            failed = True
        results["sections"][name] = result
        if result.get("available") is False:
            print(f"   section unavailable: {result['reason']}")
        elif "error" in result:
            print(f"   section failed: {result['error']}")
        else:
            module = _section_module(name)
            # a section module may bring its own table, with its targets (e2e and throughput)
            own = getattr(module, "format_table", None)
            print((own or FORMATTERS[name])(result), flush=True)
            verdicts = "" if own is not None else target_verdicts(result)
            if verdicts:
                print(verdicts, flush=True)
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.from_json and not args.plot:
        parser.error("--from-json draws a picture: give --plot FILE.png too")
    if args.from_json and args.json:
        parser.error("--from-json runs nothing: there are no new results for --json")
    if args.plot:
        from benchmarks import plot

        try:  # before a run of minutes, not after it
            plot.require_matplotlib()
        except plot.PlotError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return exc.exit_code
        if args.from_json:
            return plot.plot_command(args.from_json, args.plot)
    log_file = args.log_file
    if not log_file:
        fd, log_file = tempfile.mkstemp(prefix="novasched-bench-", suffix=".log")
        os.close(fd)
    # a service logs to a file: the log lines cost what they cost there, off the terminal
    logging.basicConfig(
        level=logging.WARNING,
        filename=log_file,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        force=True,
    )

    def progress(message: str) -> None:
        if args.verbose:
            print(f"  .. {message}", file=sys.stderr, flush=True)

    results: dict[str, Any] = {"environment": _environment(), "sections": {}}
    if args.split_cpus:
        from benchmarks import cpus

        try:
            cpus.ACTIVE = cpus.CpuSplit()
            results["environment"]["split_cpus"] = cpus.ACTIVE.apply()
        except cpus.CpuSplitError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    try:
        failed = _run_sections(args, results, progress)
    finally:
        if args.split_cpus:
            cpus.ACTIVE.restore()
            cpus.ACTIVE = None
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=2, default=str)
        print(f"\nJSON written to {args.json}")
    plotted = 0
    if args.plot:
        from benchmarks import plot

        plotted = plot.plot_command(results, args.plot)
    print(f"Log: {log_file}")
    return 1 if failed else plotted


if __name__ == "__main__":
    sys.exit(main())
