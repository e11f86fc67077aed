"""What every benchmark section shares to report its numbers: percentiles, tables, target
verdicts, and the CPU time of the processes a measurement ran against."""

from __future__ import annotations

import os
from typing import Any


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile (``pct`` in 0..100); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * pct // 100))
    return ordered[int(rank) - 1]


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """A fixed-width table: the first column left-aligned, the others right-aligned."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        lines.append(
            "  ".join(
                c.rjust(w) if i else c.ljust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


# -- targets ----------------------------------------------------------------------------------
def judge(target: dict[str, Any], measured: float | int | None) -> None:
    """Record ``measured`` on ``target`` (``{limit, cmp}``; ``cmp`` "<=" unless given) and
    whether it is met. None leaves the target unmeasured."""
    if measured is None:
        return
    target["measured"] = measured
    if target.get("cmp", "<=") == ">=":
        target["met"] = measured >= target["limit"]
    else:
        target["met"] = measured <= target["limit"]


def target_verdicts(result: dict[str, Any]) -> str:
    """PASS/FAIL lines for a section that reports ``targets`` as ``{name: {what, limit,
    measured, met}}`` plus optional ``cmp`` (``<=``/``>=``), ``unit`` and ``before``."""
    lines = []
    for name, target in (result.get("targets") or {}).items():
        if not isinstance(target, dict) or "limit" not in target:
            continue
        measured = target.get("measured")
        verdict = "-" if measured is None else ("PASS" if target.get("met") else "FAIL")
        unit = f" {target['unit']}" if target.get("unit") else ""
        cmp = target.get("cmp", "")
        shown = "-" if measured is None else f"{measured}{unit}"
        before = f"; before: {target['before']}" if target.get("before") else ""
        lines.append(
            f"{verdict:4}  {name}: {target.get('what', '')} (target {cmp + ' ' if cmp else ''}"
            f"{target['limit']}{unit}, measured {shown}{before})"
        )
    return "\n".join(lines)


# -- CPU accounting ---------------------------------------------------------------------------
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def proc_table() -> dict[int, tuple[int, str, float]]:
    """pid -> (ppid, comm, cpu seconds = utime + stime) of every process we can read."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        # fields[1] is ppid; utime and stime are fields 14 and 15 of stat (1-based)
        found[int(entry)] = (int(fields[1]), comm, (int(fields[11]) + int(fields[12])) / _TICK)
    return found


def cpu_by_group(
    roots: dict[str, int], comms: dict[str, str], singles: dict[str, int]
) -> dict[str, float]:
    """CPU seconds so far of each named process tree (``roots``: name -> pid; the root and
    every descendant alive now), of every process whose command is ``comms[name]``, and of
    single processes (``singles``)."""
    procs = proc_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    out: dict[str, float] = {}
    for name, root in roots.items():
        total, todo = 0.0, [root]
        while todo:
            pid = todo.pop()
            if pid in procs:
                total += procs[pid][2]
            todo.extend(children.get(pid, []))
        out[name] = total
    for name, comm in comms.items():
        out[name] = sum(cpu for _, c, cpu in procs.values() if c == comm)
    for name, pid in singles.items():
        out[name] = procs[pid][2] if pid in procs else 0.0
    return out
