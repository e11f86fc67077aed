"""What a request's trace says, as JSON: the sections explain and the decision records share.

A decision record (``scheduler/drivers/decisions.py``) and explain's document
(``scheduler/explain/dry_run.py``, docs/explain.md) describe the same steps: where the
candidates came from, what each filter removed, how the best hosts were weighed. Both build
those sections here, from the same trace, so that they cannot drift apart. Explain's are the
record's plus per-host detail (``detail=True``): the hosts each filter removed and why, each
filter's time, a weighed host's cell and allocation candidates. The record's alone: what
became of each host the filters were given (``per_host_section``), compactly, so that "why
not host X?" can be answered later.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from operator import attrgetter
from typing import Any

from filters.handler import FilterReport
from scheduler.hosts.state import HostState
from scheduler.request import Trace


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


def placement_section(trace: Trace, *, detail: bool = False) -> dict[str, Any]:
    """Where the candidates came from: the query, its answer's size, the provider view's age
    or why it declined, the hint of an empty answer, the prefilters that changed the query
    and the attempts (a NoValidHost from the view is asked of Placement again)."""
    out: dict[str, Any] = {
        "source": trace.candidate_source or None,
        "query": trace.query_text or None,
        "candidates": trace.candidate_count,
        "providers": trace.provider_count,
        "view_age_s": None if trace.view_age is None else round(trace.view_age, 3),
        "view_declined": trace.view_declined or None,
        "hint": trace.placement_hint or None,
        "prefilters": list(trace.prefilters),
        "attempts": len(trace.attempts()),
    }
    if detail:
        asked = trace.timings.get("placement", 0.0) + trace.timings.get("view", 0.0)
        out["elapsed_ms"] = _ms(asked)
    return out


def filters_section(report: FilterReport | None, *, detail: bool = False) -> list[dict[str, Any]]:
    """Each filter in order: the hosts it was given and passed; with ``detail`` the hosts it
    removed with their reasons, its time and whether it was skipped (a rebuild's check)."""
    out = []
    for step in report.steps if report is not None else ():
        entry: dict[str, Any] = {
            "name": step.name,
            "hosts_in": step.hosts_in,
            "hosts_passed": step.hosts_out,
        }
        if detail:
            entry["hosts_out"] = [
                {"host": h.host, "node": h.nodename, "reason": reason} for h, reason in step.removed
            ]
            entry["elapsed_ms"] = _ms(step.elapsed)
            entry["skipped"] = step.skipped
        out.append(entry)
    return out


def narrowed_section(narrowed: Iterable[tuple[int, str]]) -> list[dict[str, Any]]:
    """The hosts the narrowing took out before the filters (destination, ignore/force
    hosts): how many and why."""
    return [{"count": n, "reason": why} for n, why in narrowed]


def weighed_host(
    host: HostState,
    weight: float,
    weighers: Mapping[str, dict[str, Any]],
    *,
    detail: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One weighed host: its weight and, per weigher, what it weighed (``raw``,
    ``normalized``, ``multiplier``, ``share`` = multiplier × normalized; the shares add up to
    the weight). ``detail``: explain's per-host additions (cell, allocation candidates)."""
    entry: dict[str, Any] = {"host": host.host, "node": host.nodename}
    if detail is not None:
        entry["cell_uuid"] = host.cell_uuid
    entry["weight"] = round(weight, 6)
    entry["weighers"] = dict(weighers)
    if detail is not None:
        entry.update(detail)
    return entry


def weigher_part(raw: Any, normalized: float | None, multiplier: float) -> dict[str, Any]:
    """One weigher's part in a host's weight (None where it could not be normalised); a
    negative multiplier times 0 is a share of 0.0, not -0.0."""
    return {
        "raw": _number(raw),
        "normalized": None if normalized is None else round(normalized, 6) + 0.0,
        "multiplier": multiplier,
        "share": None if normalized is None else round(multiplier * normalized, 6) + 0.0,
    }


def _number(value: Any) -> Any:
    try:
        return round(float(value), 6)
    except (TypeError, ValueError):
        return str(value)


def per_host_section(
    report: FilterReport | None,
    best: Sequence[HostState] = (),
    weights: Sequence[float] = (),
    *,
    limit: int,
) -> dict[str, Any] | None:
    """Per host the first instance's filters were given, what became of it, compactly: the
    hosts each filter removed, grouped by reason (``removed``: ``filter``, ``reason``,
    ``hosts``); the hosts that passed, in the filters' order (``passed``); the best weighed
    of them, best first (``best``), with their weights (``weights``): as many as the ranking
    kept (``best``/``weights``). A host is its name, or ``[host, node]`` when its node is
    named otherwise. At most ``limit`` hosts, the removed ones first; ``capped`` says how
    many were left out. None when the filters never ran (Placement had no candidate)."""
    if report is None:
        return None
    steps = report.steps
    budget = limit
    left_out = 0
    removed: list[dict[str, Any]] = []
    for step in steps:
        count = step.hosts_in - step.hosts_out
        if not count:
            continue
        if budget <= 0:
            left_out += count
            continue
        pairs = step.removed
        left_out += count - len(pairs)  # not resolved (FilterStep.resolve): past the limit
        if len(pairs) > budget:
            left_out += len(pairs) - budget
            pairs = pairs[:budget]
        budget -= len(pairs)
        by_reason: dict[str, list[HostState]] = {}
        for host, reason in pairs:
            by_reason.setdefault(reason, []).append(host)
        removed.extend(
            {"filter": step.name, "reason": reason, "hosts": _host_names(hosts)}
            for reason, hosts in by_reason.items()
        )
    passed = report.hosts
    if len(passed) > budget:
        left_out += len(passed) - max(budget, 0)
        passed = passed[: max(budget, 0)]
    known = min(len(best), len(weights))
    out: dict[str, Any] = {
        "hosts_in": steps[0].hosts_in if steps else len(report.hosts),
        "removed": removed,
        "passed": _host_names(passed),
        "best": _host_names(best[:known]),
        "weights": [round(w, 6) + 0.0 for w in weights[:known]],
    }
    if left_out:
        out["capped"] = {"limit": limit, "left_out": left_out}
    return out


_HOST = attrgetter("host")
_NODE = attrgetter("nodename")


def _host_names(hosts: Sequence[HostState]) -> list[Any]:
    """Each host's name, or ``[host, node]`` when its node is named otherwise (ironic)."""
    names = list(map(_HOST, hosts))
    nodes = list(map(_NODE, hosts))
    if names == nodes:
        return names
    return [h if n == h or not n else [h, n] for h, n in zip(names, nodes, strict=True)]
