"""``python -m benchmarks --plot FILE.png``: the measured latencies against host count, beside
nova 34's numbers, as a PNG.

Takes the results the command writes with ``--json`` (``{"environment": {...}, "sections":
{name: result}}``), after a run or from a saved file (``--from-json``). Both axes are
logarithmic: host count across, milliseconds up. Drawn, from what the data holds:

- core: the scheduler's own cost per request (HostState refresh + filter + weigh), p50 and p99;
- e2e: ``select_destinations`` at the conductor (client latency p50), one series per candidate
  source (the provider view, Placement's allocation candidates, the view's API feed), at nova's
  default ``max_placement_results`` (1000);
- nova 34's reference numbers (``benchmarks.core.NOVA_MS`` and the e2e figures of
  ``benchmarks.e2e.LATENCY_BEFORE``), dashed, for each of those sections that is drawn.

A section the data does not hold is left out and reported. matplotlib is an optional extra
(``pip install 'novasched[plot]'``); it is imported only here, when a picture is asked for, and
drawn with the Agg canvas (no display).
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import json
import os
import sys
import textwrap
from typing import Any, TextIO

from benchmarks.core import NOVA_MS

INSTALL_HINT = "pip install 'novasched[plot]'"
EXIT_NO_DATA = 2
EXIT_NO_MATPLOTLIB = 3

# nova 34's select_destinations at the conductor, ms (the figures e2e.LATENCY_BEFORE quotes)
NOVA_E2E_MS = {1_000: 2_800.0, 5_000: 3_700.0}
# the e2e rows drawn: nova's default [scheduler] max_placement_results (e2e.DEFAULT_LIMIT)
E2E_LIMIT = 1_000
PLOTTED_SECTIONS = ("core", "e2e")

E2E_SOURCES = {
    "view": "e2e select_destinations p50, candidates from the provider view",
    "placement": "e2e select_destinations p50, Placement's allocation candidates",
    "view-api": "e2e select_destinations p50, provider view (API feed)",
    "view-stale": "e2e select_destinations p50, provider view without per-request freshness",
}
# key -> (colour, line style, marker)
STYLES: dict[str, tuple[str, str, str]] = {
    "core_p50": ("#1f77b4", "-", "o"),
    "core_p99": ("#1f77b4", ":", "v"),
    "e2e_view": ("#2ca02c", "-", "s"),
    "e2e_placement": ("#ff7f0e", "-", "D"),
    "e2e_view-api": ("#17becf", "-", "P"),
    "e2e_view-stale": ("#98df8a", ":", "s"),
    "nova_core": ("#d62728", "--", "X"),
    "nova_e2e": ("#7f0000", "--", "^"),
}


class PlotError(Exception):
    """The picture cannot be drawn; ``exit_code`` is what the command returns."""

    exit_code = EXIT_NO_DATA


class NoDataError(PlotError):
    """The results hold nothing to draw (no core or e2e section with measured rows)."""


class MatplotlibMissing(PlotError):
    """matplotlib is not installed (or does not import)."""

    exit_code = EXIT_NO_MATPLOTLIB


@dataclasses.dataclass
class Series:
    """One line of the picture: ``key`` names it for a test or a caller, ``points`` are
    ``(hosts, ms)`` sorted by hosts."""

    key: str
    label: str
    points: list[tuple[int, float]]
    reference: bool = False


@dataclasses.dataclass
class PlotReport:
    """What :func:`plot_results` drew: its series, and the sections it left out (with why)."""

    path: str
    series: list[Series]
    skipped: dict[str, str]

    @property
    def drawn(self) -> list[str]:
        return [s.key for s in self.series]

    def lines(self) -> list[str]:
        """What to print: each series drawn, then each section left out."""
        out = [
            f"  drew {s.key}: "
            + ", ".join(f"{hosts:,} hosts {_label_ms(ms)}" for hosts, ms in s.points)
            for s in self.series
        ]
        out += [f"  left out {name}: {why}" for name, why in self.skipped.items()]
        return out


def require_matplotlib() -> Any:
    """The ``matplotlib`` module, or :class:`MatplotlibMissing` saying how to install it."""
    try:
        matplotlib = importlib.import_module("matplotlib")
        importlib.import_module("matplotlib.backends.backend_agg")
    except ImportError as exc:
        raise MatplotlibMissing(
            f"--plot needs matplotlib, which is not installed here ({exc}); "
            f"install it with: {INSTALL_HINT}"
        ) from None
    return matplotlib


# -- what to draw -------------------------------------------------------------------------------
def sections_of(results: dict[str, Any]) -> dict[str, Any]:
    """The per-section results: ``results["sections"]`` as ``--json`` writes it, or the
    sections at the top level."""
    sections = results.get("sections")
    if isinstance(sections, dict):
        return sections
    return {k: v for k, v in results.items() if k in PLOTTED_SECTIONS and isinstance(v, dict)}


def _unusable(result: Any) -> str | None:
    """Why a section's result cannot be drawn, or None."""
    if not isinstance(result, dict):
        return "not a section result"
    if result.get("available") is False:
        return f"unavailable ({result.get('reason', 'no reason given')})"
    if "error" in result:
        return f"failed ({result['error']})"
    if not result.get("rows"):
        return "no rows"
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return None
    return float(value)


def core_series(result: dict[str, Any]) -> list[Series]:
    """p50 and p99 of refresh + filter + weigh per size, from the core section's rows."""
    p50: list[tuple[int, float]] = []
    p99: list[tuple[int, float]] = []
    for row in result.get("rows", []):
        total = row.get("total_ms") or {}
        hosts = row.get("hosts")
        if not isinstance(hosts, int) or hosts < 1:
            continue
        if (v := _number(total.get("p50"))) is not None:
            p50.append((hosts, v))
        if (v := _number(total.get("p99"))) is not None:
            p99.append((hosts, v))
    out = []
    if p50:
        label = "novasched per request p50 (HostState refresh + filter + weigh)"
        out.append(Series("core_p50", label, sorted(p50)))
    if p99:
        out.append(Series("core_p99", "novasched per request p99", sorted(p99)))
    return out


def e2e_series(result: dict[str, Any]) -> list[Series]:
    """Client latency p50 per size and candidate source, at nova's default limit."""
    by_source: dict[str, list[tuple[int, float]]] = {}
    for row in result.get("rows", []):
        hosts = row.get("hosts")
        if not isinstance(hosts, int) or hosts < 1:
            continue
        if row.get("max_placement_results", E2E_LIMIT) != E2E_LIMIT:
            continue  # the limit-N runs are shown in the table, not drawn
        value = _number(row.get("client_p50_ms"))
        if value is None:
            continue
        by_source.setdefault(str(row.get("source", "placement")), []).append((hosts, value))
    order = [s for s in E2E_SOURCES if s in by_source] + sorted(set(by_source) - set(E2E_SOURCES))
    return [
        Series(
            f"e2e_{source}",
            E2E_SOURCES.get(source, f"e2e select_destinations p50, {source}"),
            sorted(by_source[source]),
        )
        for source in order
    ]


def nova_series(section: str) -> Series:
    """nova 34's reference numbers for ``section`` (core or e2e)."""
    if section == "core":
        points = sorted((hosts, nova[2]) for hosts, nova in NOVA_MS.items())
        return Series("nova_core", "nova 34 scheduler CPU per request", points, reference=True)
    points = sorted(NOVA_E2E_MS.items())
    return Series("nova_e2e", "nova 34 select_destinations", points, reference=True)


def collect(results: dict[str, Any]) -> tuple[list[Series], dict[str, str]]:
    """The series the results hold, ours then nova's, and the sections left out (with why)."""
    sections = sections_of(results)
    ours: list[Series] = []
    nova: list[Series] = []
    skipped: dict[str, str] = {}
    for name, make in (("core", core_series), ("e2e", e2e_series)):
        if name not in sections:
            skipped[name] = "not in the data"
            continue
        why = _unusable(sections[name])
        found = [] if why else make(sections[name])
        if not found:
            skipped[name] = why or "no latency in its rows"
            continue
        ours += found
        nova.append(nova_series(name))
    for name in sections:
        if name not in PLOTTED_SECTIONS:
            skipped[name] = "not a latency against host count"
    return ours + nova, skipped


# -- the picture --------------------------------------------------------------------------------
def _fmt_ms(ms: float) -> str:
    if ms >= 10_000:
        return f"{ms / 1000:,.0f} s" if ms % 1000 == 0 else f"{ms / 1000:,.1f} s"
    if ms >= 100:
        return f"{ms:,.0f}"
    return f"{ms:.1f}" if ms >= 1 else f"{ms:.2f}"


def _label_ms(ms: float) -> str:
    text = _fmt_ms(ms)
    return text if text.endswith(" s") else f"{text} ms"


def _fmt_axis_ms(ms: float, _pos: Any = None) -> str:
    return f"{ms:,.0f}" if ms >= 1 else f"{ms:g}"


def _fmt_hosts(hosts: float, _pos: Any = None) -> str:
    if hosts >= 1000 and hosts % 1000 == 0:
        return f"{hosts / 1000:,.0f}k"
    return f"{hosts:,.0f}"


def footnote(results: dict[str, Any]) -> str:
    """Where the numbers come from: the run's environment and any ``source`` notes."""
    parts = []
    env = results.get("environment")
    if isinstance(env, dict):
        when = env.get("when")
        if isinstance(when, str):
            try:
                when = datetime.datetime.fromisoformat(when).strftime("%Y-%m-%d %H:%M UTC")
            except ValueError:
                pass
        bits = [f"run {when}" if when else None]
        if env.get("machine") or env.get("cpus"):
            bits.append(f"{env.get('machine') or '?'}, {env.get('cpus') or '?'} CPUs")
        if env.get("python"):
            bits.append(f"Python {env['python']}")
        load = env.get("load_average")
        if isinstance(load, list) and load:
            bits.append("load " + " / ".join(f"{x:.1f}" for x in load))
        parts.append("; ".join(b for b in bits if b))
    source = results.get("source")
    if isinstance(source, str):
        parts.append(source)
    elif isinstance(source, dict):
        for name, note in source.items():
            if isinstance(note, dict):
                note = note.get("summary") or "; ".join(f"{k}: {v}" for k, v in note.items())
            parts.append(f"{name}: {note}")
    lines = []
    for part in parts:
        lines += textwrap.wrap(part, 150) or [""]
    return "\n".join(lines)


# value labels: (dx, dy) in points from the point, horizontal and vertical alignment; the first
# that touches no line, marker or other label wins
_LABEL_SPOTS = (
    (0, 7, "center", "bottom"),
    (0, -8, "center", "top"),
    (-7, 4, "right", "bottom"),
    (-7, -4, "right", "top"),
    (7, 4, "left", "bottom"),
    (7, -4, "left", "top"),
    (0, 16, "center", "bottom"),
    (0, -17, "center", "top"),
)
_LABEL_FONT = 7.5
_INCH = {  # the layout, in inches
    "width": 10.0,
    "axes": 5.0,
    "top": 0.45,
    "xlabel": 0.55,
    "legend_row": 0.2,
    "legend_pad": 0.2,
    "note_line": 0.14,
    "note_pad": 0.12,
}


def _segments(points: list[tuple[float, float]], step: float = 3.0) -> list[tuple[float, float]]:
    """Points every ``step`` pixels along a polyline given in pixels (its markers included)."""
    out = list(points)
    for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
        n = int(max(abs(x1 - x0), abs(y1 - y0)) / step)
        out += [(x0 + (x1 - x0) * i / n, y0 + (y1 - y0) * i / n) for i in range(1, n)]
    return out


def _place_labels(ax: Any, series: list[Series], dpi: float) -> None:
    """Write each point's value beside it where it overlaps nothing (or the least)."""
    to_px = ax.transData.transform
    lines = {s.key: _segments([tuple(to_px(p)) for p in s.points]) for s in series}
    box = ax.get_window_extent()
    pt = dpi / 72.0
    taken: list[tuple[float, float, float, float]] = []
    for s in series:
        if s.key == "core_p99":
            continue  # the p50 labels say enough; the tail is the line
        colour = STYLES.get(s.key, ("#555555", "", ""))[0]
        for point in s.points:
            text = _label_ms(point[1])
            px, py = to_px(point)
            w, h = len(text) * _LABEL_FONT * 0.58 * pt, _LABEL_FONT * 1.15 * pt
            best: tuple[tuple[float, ...], tuple[Any, ...]] | None = None
            for rank, (dx, dy, ha, va) in enumerate(_LABEL_SPOTS):
                x = px + dx * pt - {"left": 0, "center": w / 2, "right": w}[ha]
                y = py + dy * pt - {"bottom": 0, "top": h}[va]
                rect = (x - 2, y - 2, x + w + 2, y + h + 2)
                hits = sum(
                    rect[0] <= qx <= rect[2] and rect[1] <= qy <= rect[3]
                    for pts in lines.values()
                    for qx, qy in pts
                )
                overlaps = sum(
                    rect[0] < o[2] and o[0] < rect[2] and rect[1] < o[3] and o[1] < rect[3]
                    for o in taken
                )
                outside = not (box.x0 <= x and x + w <= box.x1 and box.y0 <= y and y + h <= box.y1)
                score = (overlaps + outside, hits, rank)
                if best is None or score < best[0]:
                    best = (score, (dx, dy, ha, va, rect))
            assert best is not None
            dx, dy, ha, va, rect = best[1]
            taken.append(rect)
            ax.annotate(
                text,
                point,
                textcoords="offset points",
                xytext=(dx, dy),
                ha=ha,
                va=va,
                fontsize=_LABEL_FONT,
                color=colour,
                zorder=4,
            )


def plot_results(
    results: dict[str, Any], path: str | os.PathLike[str], *, title: str | None = None
) -> PlotReport:
    """Draw ``results`` (what ``--json`` writes) into the PNG at ``path``.

    Raises :class:`NoDataError` when neither core nor e2e holds a latency, and
    :class:`MatplotlibMissing` when matplotlib does not import."""
    series, skipped = collect(results)
    if not series:
        reasons = "; ".join(f"{k}: {v}" for k, v in skipped.items()) or "no sections"
        raise NoDataError(f"nothing to plot: no core or e2e latencies in the data ({reasons})")
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, LogLocator

    note = footnote(results)
    note_h = (note.count("\n") + 1) * _INCH["note_line"] + _INCH["note_pad"] if note else 0.0
    legend_h = -(-len(series) // 2) * _INCH["legend_row"] + _INCH["legend_pad"]
    bottom = _INCH["xlabel"] + legend_h + note_h
    height = _INCH["top"] + _INCH["axes"] + bottom
    fig = Figure(figsize=(_INCH["width"], height), dpi=110)
    FigureCanvasAgg(fig)
    fig.subplots_adjust(
        left=0.08, right=0.98, top=1 - _INCH["top"] / height, bottom=bottom / height
    )
    ax = fig.add_subplot(1, 1, 1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    for s in series:
        colour, style, marker = STYLES.get(s.key, ("#555555", "--" if s.reference else "-", "o"))
        ax.plot(
            [h for h, _ in s.points],
            [ms for _, ms in s.points],
            linestyle=style,
            marker=marker,
            color=colour,
            linewidth=1.3 if s.key == "core_p99" else 2.0,
            markersize=5 if s.key == "core_p99" else 7,
            label=s.label + (" (reference)" if s.reference else ""),
            zorder=3,
        )
    hosts = [h for s in series for h, _ in s.points]
    values = [ms for s in series for _, ms in s.points]
    ax.set_xlim(min(hosts) / 1.6, max(hosts) * 1.6)
    ax.set_ylim(min(values) / 2.5, max(values) * 2.5)
    ax.xaxis.set_major_locator(LogLocator(base=10))
    ax.xaxis.set_major_formatter(FuncFormatter(_fmt_hosts))
    ax.yaxis.set_major_formatter(FuncFormatter(_fmt_axis_ms))
    ax.grid(True, which="major", alpha=0.35)
    ax.grid(True, which="minor", alpha=0.12)
    ax.set_xlabel("hosts (compute nodes / resource providers), log scale")
    ax.set_ylabel("latency per request, ms (log scale)")
    ax.set_title(title or "novasched vs nova 34: scheduling latency by host count")
    _place_labels(ax, series, fig.dpi)
    fig.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, (legend_h + note_h) / height),
        ncol=2,
        fontsize=8,
        frameon=False,
    )
    if note:
        fig.text(0.01, 0.06 / height, note, fontsize=7, color="#444444", va="bottom")
    fig.savefig(os.fspath(path), format="png")
    return PlotReport(path=os.fspath(path), series=series, skipped=skipped)


# -- the command's side -------------------------------------------------------------------------
def load_results(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A saved ``--json`` file; :class:`NoDataError` if it cannot be read as one."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise NoDataError(f"cannot read {os.fspath(path)}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise NoDataError(f"{os.fspath(path)} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise NoDataError(f"{os.fspath(path)} does not hold benchmark results (a JSON object)")
    return data


def plot_command(
    results: dict[str, Any] | str | os.PathLike[str],
    path: str | os.PathLike[str],
    *,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Draw ``results`` (a dict or a ``--json`` file) into ``path`` and say what was drawn and
    left out; the command's exit code (0, or a :class:`PlotError`'s, with its message on
    ``err``)."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        data = results if isinstance(results, dict) else load_results(results)
        report = plot_results(data, path)
    except PlotError as exc:
        print(f"error: {exc}", file=err)
        return exc.exit_code
    except OSError as exc:  # the PNG could not be written
        print(f"error: cannot write {os.fspath(path)}: {exc.strerror or exc}", file=err)
        return 1
    print(f"\nPlot written to {report.path}", file=out)
    for line in report.lines():
        print(line, file=out)
    return 0
