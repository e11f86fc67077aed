"""The capacity figures for a reader: a table in text, a bar chart in a PNG."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

from scheduler.capacity.calculator import COMPUTE_NODE_CLASSES, FlavorCapacity

INSTALL_HINT = "pip install 'novasched[plot]'"


class PlotUnavailable(Exception):
    """matplotlib is missing, or the picture cannot be written."""


def _count(n: int | None) -> str:
    return "unbounded" if n is None else f"{n:,}"


def stranded_classes(figures: Sequence[FlavorCapacity]) -> list[str]:
    """The resource classes with stranded capacity in ``figures``: VCPU, MEMORY_MB and
    DISK_GB first (those present, in that order), then the others by name."""
    present = {rc for f in figures for rc in f.stranded}
    first = [rc for rc in COMPUTE_NODE_CLASSES if rc in present]
    return first + sorted(present - set(first))


def missing_cells(figures: Sequence[FlavorCapacity]) -> list[str]:
    """The cells missing from any of ``figures`` (empty: the figures are whole)."""
    return sorted({cell for f in figures for cell in f.missing_cells})


def partial_line(figures: Sequence[FlavorCapacity]) -> str:
    """What the figures lack, in one line ("" when they lack nothing)."""
    cells = missing_cells(figures)
    if not cells:
        return ""
    return (
        f"PARTIAL: cell(s) {', '.join(cells)} could not be read: their hosts are not counted "
        "in these figures"
    )


def table_rows(
    figures: Sequence[FlavorCapacity], *, by_aggregate: bool = False
) -> tuple[list[str], list[list[Any]]]:
    """The table's headers and rows, the values unformatted: one row per flavor, how many
    more fit in total ("unbounded" when nothing bounds it) and per AZ (or per aggregate),
    and the stranded capacity per resource class any flavor has (``stranded_classes``;
    None where a flavor asks none of it)."""
    part = "by_aggregate" if by_aggregate else "by_az"
    columns = sorted({name for f in figures for name in getattr(f, part)})
    classes = stranded_classes(figures)
    head = ["flavor", "total", *columns, *(f"stranded {rc}" for rc in classes)]
    rows = [
        [
            f.flavor,
            "unbounded" if f.total is None else f.total,
            *(getattr(f, part).get(c, 0) for c in columns),
            *(round(f.stranded[rc]) if rc in f.stranded else None for rc in classes),
        ]
        for f in figures
    ]
    return head, rows


def text(figures: Sequence[FlavorCapacity], *, by_aggregate: bool = False) -> str:
    """The table of ``table_rows``, numbers right-aligned with thousands separators ("-"
    for no stranded figure); then why for each flavor that fits nowhere. Figures counted
    without some cells say so first."""
    head, raw = table_rows(figures, by_aggregate=by_aggregate)
    rows = [
        [
            row[0],
            *("-" if v is None else v if isinstance(v, str) else f"{v:,}" for v in row[1:]),
        ]
        for row in raw
    ]
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    lines = [
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(line, widths, strict=True))
        )
        for line in [head, ["-" * w for w in widths], *rows]
    ]
    why = [f"{f.flavor}: {f.reason}" for f in figures if f.total == 0 and f.reason]
    if why:
        lines += ["", "Fits nowhere:", *(f"  {line}" for line in why)]
    source = sorted({f.source for f in figures if f.source})
    if source:
        lines += ["", f"Candidates from: {', '.join(source)}"]
    partial = partial_line(figures)
    if partial:
        lines = [partial, "", *lines]
    return "\n".join(lines)


def _matplotlib() -> Any:
    try:
        matplotlib = importlib.import_module("matplotlib")
        matplotlib.use("Agg")
        return importlib.import_module("matplotlib.pyplot")
    except ImportError as exc:
        raise PlotUnavailable(
            f"--plot needs matplotlib, which is not installed here ({exc}); install it "
            f"with: {INSTALL_HINT}"
        ) from None


def plot(figures: Sequence[FlavorCapacity], path: str) -> None:
    """Stacked bars: per flavor, how many more instances fit, one colour per AZ."""
    plt = _matplotlib()
    zones = sorted({az for f in figures for az in f.by_az})
    names = [f.flavor for f in figures]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(names) + 2), 4.5))
    try:
        bottom = [0] * len(figures)
        for az in zones:
            values = [f.by_az.get(az, 0) for f in figures]
            ax.bar(names, values, bottom=bottom, label=az)
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
        for x, f in enumerate(figures):
            ax.annotate(
                _count(f.total),
                (x, bottom[x]),
                ha="center",
                va="bottom",
                fontsize=8,
                xytext=(0, 2),
                textcoords="offset points",
            )
        ax.set_ylabel("instances that still fit")
        ax.set_title("Capacity per flavor and availability zone")
        if zones:
            ax.legend(title="AZ", fontsize=8)
        ax.tick_params(axis="x", labelrotation=30)
        fig.tight_layout()
        try:
            fig.savefig(path, dpi=120)
        except OSError as exc:
            raise PlotUnavailable(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
