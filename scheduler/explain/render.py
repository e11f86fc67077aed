"""The explain document (docs/explain.md) as text for people: ``render_text``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def _fmt(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _values(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


def _names(hosts: Iterable[dict[str, Any]], limit: int) -> str:
    hosts = list(hosts)
    names = [h["host"] if h["host"] == h["node"] else f"{h['host']}/{h['node']}" for h in hosts]
    text = ", ".join(names[:limit])
    if len(names) > limit:
        text += f", ... and {len(names) - limit} more"
    return text


def _render_instance(lines: list[str], entry: dict[str, Any], limit: int) -> None:
    for n in entry["narrowed"]:
        lines.append(f"  before the filters: {n['count']} host(s) {n['reason']}")
    if entry["forced"]:
        lines.append("  forced host/node: the filters were not run")
    if entry["filters"]:
        width = max(len(f["name"]) for f in entry["filters"])
        lines.append("  Filters (hosts in -> passed):")
        for f in entry["filters"]:
            extra = " (skipped: rebuild)" if f["skipped"] else ""
            lines.append(
                f"    {f['name']:<{width}}  {f['hosts_in']:>5} -> {f['hosts_passed']:<5} "
                f"{f['elapsed_ms']:.1f} ms{extra}"
            )
            by_reason: dict[str, list[dict[str, Any]]] = {}
            for h in f["hosts_out"]:
                by_reason.setdefault(h["reason"], []).append(h)
            for reason, out in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
                lines.append(f"      {len(out)} {reason}: {_names(out, limit)}")
    weighed = entry["weighed"]
    if weighed:
        lines.append("  Weighed (best first):")
        width = max(len(f"{w['host']}/{w['node']}") for w in weighed[:limit])
        for i, w in enumerate(weighed[:limit], start=1):
            # only the weighers that moved this host (-f json has every one)
            parts = [
                f"{name} {c['multiplier'] * c['normalized']:+.3f} (raw {_fmt(c['raw'])}"
                + ("" if c["multiplier"] == 1 else f", x{_fmt(c['multiplier'])}")
                + ")"
                for name, c in w["weighers"].items()
                if c["multiplier"] * c["normalized"]
            ]
            where = f"{w['host']}/{w['node']}"
            line = f"    {i:>3}. {where:<{width}}  {w['weight']:8.4f}  " + "; ".join(parts)
            lines.append(line.rstrip())
        if len(weighed) > limit:
            lines.append(f"    ... and {len(weighed) - limit} more (-f json lists all)")
    pick = entry["pick"]
    if pick is not None:
        lines.append(
            f"  Pick: {pick['host']} (node {pick['node']}, cell {pick['cell_uuid']}, "
            f"az {pick['availability_zone']}, weight {pick['weight']:.4f})"
        )


def _source(p: dict[str, Any]) -> str:
    """Which source answered the candidates query, and the view's age or why it did not."""
    source = p.get("source")
    age = p.get("view_age_s")
    if source == "view":
        return f"answered by the provider view ({age:.1f} s old), not by Placement"
    if source == "placement":
        declined = p.get("view_declined")
        return "answered by Placement" + (
            f" (the provider view did not: {declined})" if declined else ""
        )
    return ""


def render_text(doc: dict[str, Any], limit: int = 10) -> str:
    """The explain document for a terminal: ``limit`` host names per list. A document
    built without some cells (``missing_cells``, added by the command) says so first."""
    lines: list[str] = []
    missing = doc.get("missing_cells") or []
    if missing:
        lines.append(
            f"PARTIAL: cell(s) {', '.join(missing)} could not be read: their hosts were not "
            "considered"
        )
    r = doc["request"]
    f = r["flavor"]
    what = (
        f"flavor {f['name'] or '-'} ({f['vcpus']} VCPU, {f['memory_mb']} MB RAM, "
        f"{f['root_gb']} GB root disk)"
    )
    if f["extra_specs"]:
        what += " " + ",".join(f"{k}={v}" for k, v in sorted(f["extra_specs"].items()))
    lines.append(f"Request: {what}; {r['num_instances']} instance(s)")
    if r["availability_zone"]:
        lines.append(f"  availability zone: {r['availability_zone']}")
    if r["image"] and r["image"]["properties"]:
        props = ",".join(f"{k}={v}" for k, v in sorted(r["image"]["properties"].items()))
        lines.append(f"  image properties: {props}")
    if r["scheduler_hints"]:
        hints = " ".join(f"{k}={_values(v)}" for k, v in sorted(r["scheduler_hints"].items()))
        lines.append(f"  hints: {hints}")
    if doc["prefilters"]:
        lines.append(f"Prefilters applied: {', '.join(doc['prefilters'])}")
    p = doc["placement"]
    if doc["mode"] == "all_hosts":
        lines.append("Placement: not asked (--all-hosts): every compute node of the cells")
    elif doc["mode"] == "rebuild":
        lines.append("Placement: not asked (rebuild): every compute node of the cells")
    elif p is not None:
        lines.append(f"Placement query: {p['query'] or '-'}")
        if p["candidates"] is not None:
            lines.append(
                f"  {p['candidates']} allocation candidate(s) on {p['providers']} provider(s) "
                f"({p['elapsed_ms']:.1f} ms)"
            )
        source = _source(p)
        if source:
            lines.append(f"  {source}")
        if p["hint"]:
            lines.append(f"  {p['hint']}")
    lines.append(f"Hosts considered: {doc['hosts']}")
    first = {k: doc[k] for k in ("narrowed", "forced", "filters", "weighed", "pick")}
    instances = [first] + list(doc["more_instances"])
    for i, entry in enumerate(instances):
        if len(instances) > 1 or r["num_instances"] > 1:
            lines.append(f"Instance {i + 1} of {r['num_instances']}:")
        _render_instance(lines, entry, limit)
    if doc["no_valid_host"]:
        lines.append(f"No valid host: {doc['no_valid_host']}")
    elif doc["picks"]:
        chosen = ", ".join(p["host"] for p in doc["picks"])
        note = ""
        if doc["host_subset_size"] > 1:
            note = (
                f" (host_subset_size is {doc['host_subset_size']}: the scheduler picks at "
                "random among that many best hosts)"
            )
        lines.append(f"Would choose: {chosen}{note}")
    change = doc.get("smallest_change")
    if change:
        found = change.get("found") or []
        if found:
            lines.append("It would fit with one change:")
            for item in found:
                where = ", ".join(h["host"] for h in item["hosts"])
                opened = item.get("hosts_opened")
                count = f"{opened} host(s), best " if opened else ""
                lines.append(f"  {item['change']}: {count}{where}")
        else:
            lines.append(
                "No single change would fit: no host to enable, and no hint, AZ, image "
                "property or extra spec left out."
            )
        if not change.get("complete", True):
            lines.append(f"  (the search stopped after {change['elapsed_ms']:.0f} ms)")
        if change.get("placement_asked") is False:
            lines.append("  (tried on every host of the cells; Placement was not asked)")
    return "\n".join(lines)
