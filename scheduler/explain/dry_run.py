"""explain: why a request would land where it lands, or why it cannot land anywhere.

Three parts, all read-only:

* ``placement_hint``: when GET /allocation_candidates comes back empty, ask Placement again
  without one query term at a time (a trait, an aggregate, a resource amount ...) and name
  the terms whose absence would have given candidates. At most ``MAX_BISECTION_QUERIES``
  extra queries and ``BISECTION_TIME_BUDGET`` seconds, only on that failure, and any error
  just leaves the hint out.
* ``explain_request``: the driver's whole pipeline as a dry run (prefilters, Placement, host
  states, narrowing, filters, weighers, the pick) that claims nothing in Placement and
  consumes nothing on the shared HostStates; it returns the JSON document described in
  docs/explain.md. ``render_text`` prints that document for people.
* the request readers of ``novasched-manage explain``: ``parse_flavor``, ``parse_pairs``,
  ``spec_from_json``, ``spec_from_flags``.
"""

from __future__ import annotations

import copy
import logging
import time
import uuid as uuidlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from filters.handler import FilterReport
from placement_client import (
    AllocationCandidates,
    AllocationCandidatesQuery,
    PlacementClientError,
)
from scheduler.exceptions import NoValidHost
from scheduler.hosts.state import HostState
from scheduler.objects import Flavor, ImageMeta, RequestSpec
from scheduler.rpc import wire

LOG = logging.getLogger(__name__)

DOCUMENT_VERSION = 1
# Cost bound of the Placement bisection (only run when Placement returned nothing).
MAX_BISECTION_QUERIES = 8
BISECTION_TIME_BUDGET = 5.0  # seconds (checked between queries)


class ExplainInputError(ValueError):
    """A request given to explain (flags or a request file) that cannot be understood."""


# =========================================================================== bisection


@dataclass(frozen=True, slots=True)
class QueryTerm:
    """One term of a Placement query that can be left out on its own."""

    kind: str  # root_required, root_forbidden, required_trait, forbidden_trait, member_of,
    #            forbidden_aggregates, in_tree, resource, same_subtree, group_policy
    suffix: str
    value: str
    label: str
    index: int = 0


def _in_group(suffix: str) -> str:
    return f" (group {suffix})" if suffix else ""


def query_terms(query: AllocationCandidatesQuery) -> list[QueryTerm]:
    """The terms of ``query`` in the order they are tried: the constraints that most often
    empty an answer (traits, aggregates, a forced tree) before the resource amounts."""
    terms: list[QueryTerm] = []
    for trait in sorted(query.root_forbidden):
        terms.append(QueryTerm("root_forbidden", "", trait, f"forbidden root trait {trait}"))
    for trait in sorted(query.root_required):
        terms.append(QueryTerm("root_required", "", trait, f"required root trait {trait}"))
    groups = query.effective_groups()
    for g in groups:
        for trait in sorted(g.required_traits):
            label = f"required trait {trait}{_in_group(g.suffix)}"
            terms.append(QueryTerm("required_trait", g.suffix, trait, label))
        for trait in sorted(g.forbidden_traits):
            label = f"forbidden trait {trait}{_in_group(g.suffix)}"
            terms.append(QueryTerm("forbidden_trait", g.suffix, trait, label))
    for g in groups:
        for i, or_set in enumerate(g.member_of):
            if not or_set:
                continue
            value = ",".join(sorted(or_set))
            label = f"aggregate member_of=in:{value}{_in_group(g.suffix)}"
            terms.append(QueryTerm("member_of", g.suffix, value, label, i))
        if g.forbidden_aggregates:
            value = ",".join(sorted(g.forbidden_aggregates))
            label = f"forbidden aggregates {value}{_in_group(g.suffix)}"
            terms.append(QueryTerm("forbidden_aggregates", g.suffix, value, label))
        if g.in_tree:
            label = f"in_tree={g.in_tree}{_in_group(g.suffix)}"
            terms.append(QueryTerm("in_tree", g.suffix, g.in_tree, label))
    total = query.total_resources()
    for g in groups:
        for rc, amount in g.resources.items():
            if not amount:
                continue
            if set(total) == {rc} and total[rc] == amount:
                continue  # Placement refuses a query without any resources
            label = f"{rc}:{amount}{_in_group(g.suffix)}"
            terms.append(QueryTerm("resource", g.suffix, rc, label))
    for i, subtree in enumerate(query.same_subtree):
        value = ",".join(sorted(subtree))
        terms.append(QueryTerm("same_subtree", "", value, f"same_subtree={value}", i))
    if query.group_policy == "isolate":
        terms.append(QueryTerm("group_policy", "", "isolate", "group_policy=isolate"))
    return terms


def without_term(query: AllocationCandidatesQuery, term: QueryTerm) -> AllocationCandidatesQuery:
    """A copy of ``query`` with ``term`` left out (the original is not changed)."""
    q = copy.deepcopy(query)
    kind = term.kind
    if kind == "root_required":
        q.root_required.discard(term.value)
    elif kind == "root_forbidden":
        q.root_forbidden.discard(term.value)
    elif kind == "same_subtree":
        del q.same_subtree[term.index]
    elif kind == "group_policy":
        q.group_policy = "none"
    else:
        g = q.group(term.suffix)
        if kind == "required_trait":
            g.required_traits.discard(term.value)
        elif kind == "forbidden_trait":
            g.forbidden_traits.discard(term.value)
        elif kind == "member_of":
            del g.member_of[term.index]
        elif kind == "forbidden_aggregates":
            g.forbidden_aggregates.clear()
        elif kind == "in_tree":
            g.in_tree = None
        elif kind == "resource":
            g.resources.pop(term.value, None)
        else:  # pragma: no cover - every kind query_terms makes is handled above
            raise ValueError(f"unknown query term kind {kind!r}")
    return q


def host_count(answer: AllocationCandidates) -> int:
    """Distinct compute nodes (root providers) among an answer's allocation requests."""
    summaries = answer.provider_summaries
    roots: set[str] = set()
    for areq in answer.allocation_requests:
        for rp in areq.get("allocations") or {}:
            roots.add((summaries.get(rp) or {}).get("root_provider_uuid") or rp)
    return len(roots)


@dataclass(slots=True)
class Finding:
    term: QueryTerm
    hosts: int
    capped: bool  # the answer hit the query's limit: there may be more


@dataclass(slots=True)
class Bisection:
    """What leaving out one term at a time found."""

    total_terms: int
    tried: int = 0  # probes sent
    answered: int = 0  # probes Placement answered (a refused or failed probe proves nothing)
    findings: list[Finding] = field(default_factory=list)

    def hint(self) -> str:
        """``without required trait CUSTOM_GPU it would return 12 hosts``; or that no single
        term explains it; "" when there was nothing to try."""
        if self.findings:
            parts = []
            for f in self.findings:
                n = f"at least {f.hosts}" if f.capped else str(f.hosts)
                noun = "host" if f.hosts == 1 and not f.capped else "hosts"
                parts.append(f"without {f.term.label} it would return {n} {noun}")
            return "; ".join(parts)
        if not self.answered:
            return ""
        if self.answered >= self.total_terms:
            return (
                f"leaving out any one of its {self.total_terms} terms alone still returns "
                "nothing (the request is too large or several terms exclude every host)"
            )
        return (
            f"leaving out any one of {self.answered} of its {self.total_terms} terms alone "
            "still returns nothing"
        )


def bisect_empty_query(
    placement: Any,
    query: AllocationCandidatesQuery,
    *,
    request_id: str | None = None,
    max_queries: int = MAX_BISECTION_QUERIES,
    time_budget: float = BISECTION_TIME_BUDGET,
) -> Bisection:
    """Ask Placement for ``query`` without one term at a time (at most ``max_queries``
    times, within ``time_budget`` seconds). A term Placement refuses to drop (4xx) is
    skipped; any other error ends the search with what was found so far."""
    terms = query_terms(query)
    result = Bisection(total_terms=len(terms))
    deadline = time.monotonic() + time_budget
    for term in terms:
        if result.tried >= max_queries or time.monotonic() > deadline:
            break
        probe = without_term(query, term)
        result.tried += 1
        try:
            answer = placement.get_allocation_candidates(probe, request_id=request_id)
        except PlacementClientError as exc:
            LOG.debug("Placement refused the query without %s: %s", term.label, exc)
            continue
        except Exception as exc:
            LOG.debug("Stopping the Placement bisection: %s", exc)
            break
        result.answered += 1
        if answer.allocation_requests:
            capped = query.limit is not None and len(answer.allocation_requests) >= query.limit
            result.findings.append(Finding(term, host_count(answer), capped))
    return result


def placement_hint(
    placement: Any,
    query: AllocationCandidatesQuery,
    *,
    request_id: str | None = None,
    max_queries: int = MAX_BISECTION_QUERIES,
) -> str:
    """The bisection's sentence for a NoValidHost reason, or "" (never raises)."""
    try:
        return bisect_empty_query(
            placement, query, request_id=request_id, max_queries=max_queries
        ).hint()
    except Exception:  # the hint is a courtesy: it must never change how the request fails
        LOG.debug("Placement bisection failed; no hint", exc_info=True)
        return ""


# =========================================================================== dry run


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted(_jsonable(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return str(value)


def request_summary(spec: RequestSpec) -> dict[str, Any]:
    """What was asked, as the document's ``request`` section."""
    f = spec.flavor
    dest = spec.requested_destination
    group = spec.instance_group
    return {
        "flavor": {
            "name": f.name,
            "vcpus": f.vcpus,
            "memory_mb": f.memory_mb,
            "root_gb": f.root_gb,
            "ephemeral_gb": f.ephemeral_gb,
            "swap": f.swap,
            "extra_specs": _jsonable(dict(f.extra_specs or {})),
        },
        "image": None
        if spec.image is None
        else {
            "id": spec.image.id,
            "name": spec.image.name,
            "properties": _jsonable(dict(spec.image.properties or {})),
        },
        "num_instances": spec.num_instances,
        "availability_zone": spec.availability_zone,
        "project_id": spec.project_id,
        "user_id": spec.user_id,
        "scheduler_hints": _jsonable(dict(spec.scheduler_hints or {})),
        "instance_group": None
        if group is None
        else {"uuid": group.uuid, "policy": group.policy, "hosts": list(group.hosts)},
        "force_hosts": list(spec.force_hosts or []),
        "force_nodes": list(spec.force_nodes or []),
        "ignore_hosts": list(spec.ignore_hosts or []),
        "requested_destination": None
        if dest is None
        else {"host": dest.host, "node": dest.node, "cell_uuid": dest.cell_uuid},
        "is_bfv": spec.is_bfv,
        "is_rebuild": spec.is_rebuild,
    }


def _shadow(host: HostState) -> HostState:
    """A private copy of a shared HostState, for simulated consumption."""
    twin = copy.copy(host)
    # consumption on the copy must not reach the host manager's columns
    twin._table = None
    twin._row = -1
    twin.instances = dict(host.instances or {})
    twin.limits = dict(host.limits or {})
    return twin


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


def _filters_section(report: FilterReport) -> list[dict[str, Any]]:
    out = []
    for step in report.steps:
        out.append(
            {
                "name": step.name,
                "hosts_in": step.hosts_in,
                "hosts_passed": step.hosts_out,
                "hosts_out": [
                    {"host": h.host, "node": h.nodename, "reason": reason}
                    for h, reason in step.removed
                ],
                "elapsed_ms": _ms(step.elapsed),
                "skipped": step.skipped,
            }
        )
    return out


def _host_entry(host: HostState) -> dict[str, Any]:
    return {"host": host.host, "node": host.nodename, "cell_uuid": host.cell_uuid}


def _instance_entry(
    index: int,
    narrowed: list[tuple[int, str]],
    forced: bool,
    report: FilterReport,
    weighed: list[Any],
    pick: Any,
    spec: RequestSpec,
    placement_mode: bool,
    default_az: str | None,
) -> dict[str, Any]:
    weighed_out = []
    for w in weighed:
        entry = _host_entry(w.obj)
        entry["weight"] = w.weight
        entry["weighers"] = {
            name: {"raw": c.raw, "normalized": c.normalized, "multiplier": c.multiplier}
            for name, c in (w.contributions or {}).items()
        }
        entry["allocation_candidates"] = len(spec.candidates_for(w.obj)) if placement_mode else None
        weighed_out.append(entry)
    pick_out = None
    if pick is not None:
        pick_out = _host_entry(pick.obj)
        pick_out["weight"] = pick.weight
        pick_out["availability_zone"] = pick.obj.availability_zone or default_az
        cands = spec.candidates_for(pick.obj) if placement_mode else []
        pick_out["allocation_request"] = _jsonable(cands[0]) if cands else None
    return {
        "index": index,
        "narrowed": [{"count": n, "reason": why} for n, why in narrowed],
        "forced": forced,
        "filters": _filters_section(report),
        "weighed": weighed_out,
        "pick": pick_out,
    }


def explain_request(
    driver: Any, context: Any, spec: RequestSpec, *, all_hosts: bool = False
) -> dict[str, Any]:
    """Run ``driver``'s pipeline for ``spec`` without claiming or consuming anything and
    return the explain document (docs/explain.md). NoValidHost (from the prefilters,
    Placement, the filters, a failing plugin) is reported in the document, not raised;
    InvalidRequest (a malformed request) is raised."""
    from scheduler.drivers.filter_scheduler import _Request

    started = time.perf_counter()
    spec = copy.deepcopy(spec)  # the prefilters and a multi-create change the request
    summary = request_summary(spec)
    req = _Request(
        spec=spec,
        request_id=getattr(context, "request_id", None),
        project_id=spec.project_id or getattr(context, "project_id", None),
        user_id=spec.user_id or getattr(context, "user_id", None),
    )
    if spec.is_rebuild:
        mode = "rebuild"
    elif all_hosts:
        mode = "all_hosts"
    else:
        mode = "placement"
    conf = driver.conf
    doc: dict[str, Any] = {
        "version": DOCUMENT_VERSION,
        "mode": mode,
        "request": summary,
        "prefilters": [],
        "placement": None,
        "hosts": 0,
        "narrowed": [],
        "forced": False,
        "filters": [],
        "weighed": [],
        "pick": None,
        "more_instances": [],
        "picks": [],
        "host_subset_size": conf.filter_scheduler.host_subset_size,
        "no_valid_host": None,
        "elapsed_ms": 0.0,
    }
    try:
        if mode == "placement":
            try:
                driver._run_prefilters(req)
                hosts = driver._hosts_from_placement(req)
            finally:
                doc["prefilters"] = list(req.prefilters)
                doc["placement"] = {
                    "query": req.query_text or None,
                    "candidates": req.candidate_count,
                    "providers": req.provider_count,
                    "elapsed_ms": _ms(req.timings.get("placement", 0.0)),
                    "hint": req.placement_hint or None,
                }
        else:
            hosts = driver.host_manager.get_host_states_by_uuids(
                None, spec, request_id=req.request_id
            )
        doc["hosts"] = len(hosts)
        _dry_run(driver, req, hosts, doc, placement_mode=mode == "placement")
    except NoValidHost as exc:
        doc["no_valid_host"] = exc.reason
    doc["elapsed_ms"] = _ms(time.perf_counter() - started)
    return doc


def _dry_run(
    driver: Any,
    req: Any,
    hosts: list[HostState],
    doc: dict[str, Any],
    *,
    placement_mode: bool,
) -> None:
    spec = req.spec
    num = max(1, spec.num_instances or 1)
    if num > 1:
        # later instances see the earlier ones' consumption, on private copies only
        hosts = [_shadow(h) for h in hosts]
    req.total_hosts = len(hosts)
    default_az = driver.conf.default_availability_zone
    instance_uuids = [str(uuidlib.uuid4()) for _ in range(num)]
    if spec.instance_group is not None:
        # nova's API makes the new instances members of their server group before scheduling
        spec.instance_group.members = list(spec.instance_group.members) + instance_uuids
    for index, instance_uuid in enumerate(instance_uuids):
        spec.instance_uuid = instance_uuid
        narrowed, forced = driver._narrow(req, hosts)
        if forced:
            report = FilterReport(hosts=list(narrowed))
        else:
            report = driver.filter_handler.run(narrowed, spec, index, request_id=req.request_id)
        req.last_report = report
        weighed = driver.weight_handler.weigh(report.hosts, spec, explain=True)
        # the first host Placement could claim on (every host when Placement is not asked)
        pick = next((w for w in weighed if not placement_mode or spec.candidates_for(w.obj)), None)
        entry = _instance_entry(
            index,
            list(req.narrowed),
            forced,
            report,
            weighed,
            pick,
            spec,
            placement_mode,
            default_az,
        )
        if index == 0:
            for key in ("narrowed", "forced", "filters", "weighed", "pick"):
                doc[key] = entry[key]
        else:
            doc["more_instances"].append(entry)
        if pick is None:
            raise NoValidHost(driver._not_enough_reason(req, index, num))
        doc["picks"].append({"host": pick.obj.host, "node": pick.obj.nodename})
        if num > 1:
            driver._consume(spec, pick.obj, instance_uuid)
        hosts = [w.obj for w in weighed]


# =========================================================================== text


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
            # only the weighers that moved this host (--format json has every one)
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
            lines.append(f"    ... and {len(weighed) - limit} more (--format json lists all)")
    pick = entry["pick"]
    if pick is not None:
        lines.append(
            f"  Pick: {pick['host']} (node {pick['node']}, cell {pick['cell_uuid']}, "
            f"az {pick['availability_zone']}, weight {pick['weight']:.4f})"
        )


def render_text(doc: dict[str, Any], limit: int = 10) -> str:
    """The explain document for a terminal: ``limit`` host names per list."""
    lines: list[str] = []
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
    return "\n".join(lines)


# =========================================================================== request input


def split_pairs(text: str, *, multi: bool = False) -> dict[str, Any]:
    """``k=v,k2=v2`` → dict. A piece without ``=`` continues the previous value (values may
    hold commas: ``hw:cpu_dedicated_mask=0,1``); with ``multi`` it is another value of the
    previous key and every value is a list (``different_host=a,b``)."""
    out: dict[str, Any] = {}
    last: str | None = None
    for piece in text.split(","):
        if not piece.strip():
            continue
        if "=" not in piece:
            if last is None:
                raise ExplainInputError(f"expected key=value, got {piece!r} in {text!r}")
            if multi:
                out[last].append(piece.strip())
            else:
                out[last] += "," + piece.strip()
            continue
        key, value = piece.split("=", 1)
        key = key.strip()
        if not key:
            raise ExplainInputError(f"empty key in {text!r}")
        if multi:
            out.setdefault(key, []).append(value.strip())
        else:
            out[key] = value.strip()
        last = key
    return out


def _int_field(value: Any, what: str) -> int:
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        raise ExplainInputError(f"{what} must be a whole number, got {value!r}") from None
    if number < 0:
        raise ExplainInputError(f"{what} must not be negative, got {value!r}")
    return number


def parse_flavor(text: str) -> Flavor:
    """``NAME:VCPUS:RAM_MB:DISK_GB[:key=val,...]`` → Flavor (extra spec keys may contain
    colons: ``m1:2:2048:20:hw:cpu_policy=dedicated,trait:CUSTOM_GPU=required``)."""
    parts = text.split(":", 4)
    if len(parts) < 4:
        raise ExplainInputError(
            f"--flavor {text!r}: expected NAME:VCPUS:RAM_MB:DISK_GB[:key=val,...]"
        )
    name, vcpus, ram, disk = parts[:4]
    extra = split_pairs(parts[4]) if len(parts) == 5 else {}
    return Flavor(
        name=name,
        vcpus=_int_field(vcpus, "VCPUS"),
        memory_mb=_int_field(ram, "RAM_MB"),
        root_gb=_int_field(disk, "DISK_GB"),
        extra_specs={k: str(v) for k, v in extra.items()},
    )


_JSON_KEYS = {
    "flavor",
    "image_props",
    "hints",
    "az",
    "num_instances",
    "project_id",
    "user_id",
    "force_hosts",
    "ignore_hosts",
    "is_bfv",
}


def _flavor_from_json(value: Any) -> Flavor:
    if isinstance(value, str):
        return parse_flavor(value)
    if not isinstance(value, dict):
        raise ExplainInputError("'flavor' must be a NAME:VCPUS:RAM_MB:DISK_GB string or object")
    unknown = set(value) - {
        "name",
        "vcpus",
        "memory_mb",
        "root_gb",
        "ephemeral_gb",
        "swap",
        "extra_specs",
    }
    if unknown:
        raise ExplainInputError(f"unknown flavor field(s): {', '.join(sorted(unknown))}")
    for key in ("vcpus", "memory_mb"):
        if key not in value:
            raise ExplainInputError(f"flavor.{key} is required")
    extra = value.get("extra_specs") or {}
    if not isinstance(extra, dict):
        raise ExplainInputError("flavor.extra_specs must be an object")
    return Flavor(
        name=str(value.get("name") or ""),
        vcpus=_int_field(value["vcpus"], "flavor.vcpus"),
        memory_mb=_int_field(value["memory_mb"], "flavor.memory_mb"),
        root_gb=_int_field(value.get("root_gb", 0), "flavor.root_gb"),
        ephemeral_gb=_int_field(value.get("ephemeral_gb", 0), "flavor.ephemeral_gb"),
        swap=_int_field(value.get("swap", 0), "flavor.swap"),
        extra_specs={str(k): str(v) for k, v in extra.items()},
    )


def _pairs_from_json(value: Any, what: str, *, multi: bool) -> dict[str, Any]:
    if isinstance(value, str):
        return split_pairs(value, multi=multi)
    if not isinstance(value, dict):
        raise ExplainInputError(f"{what!r} must be an object or a k=v,... string")
    if not multi:
        return dict(value)
    return {k: (list(v) if isinstance(v, list) else [v]) for k, v in value.items()}


def _str_list(value: Any, what: str) -> list[str]:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise ExplainInputError(f"{what!r} must be a list of names")


def spec_from_json(data: Any) -> RequestSpec:
    """A RequestSpec from a request file's content: a nova RequestSpec object primitive
    (``{"nova_object.name": "RequestSpec", ...}``, also inside ``{"spec_obj": ...}`` as
    nova's RPC message carries it), or our short form (docs/explain.md)."""
    if not isinstance(data, dict):
        raise ExplainInputError("the request file must hold a JSON object")
    if isinstance(data.get("spec_obj"), dict):
        data = data["spec_obj"]
    if "nova_object.name" in data:
        return wire.request_spec_from_primitive(data)
    unknown = set(data) - _JSON_KEYS
    if unknown:
        raise ExplainInputError(
            f"unknown request field(s): {', '.join(sorted(unknown))} "
            f"(known: {', '.join(sorted(_JSON_KEYS))})"
        )
    if "flavor" not in data:
        raise ExplainInputError("the request needs a 'flavor'")
    spec = RequestSpec(flavor=_flavor_from_json(data["flavor"]))
    apply_overrides(
        spec,
        image_props=_pairs_from_json(data["image_props"], "image_props", multi=False)
        if "image_props" in data
        else None,
        hints=_pairs_from_json(data["hints"], "hints", multi=True) if "hints" in data else None,
        az=data.get("az"),
        num_instances=_int_field(data["num_instances"], "num_instances")
        if "num_instances" in data
        else None,
    )
    spec.project_id = data.get("project_id")
    spec.user_id = data.get("user_id")
    if "force_hosts" in data:
        spec.force_hosts = _str_list(data["force_hosts"], "force_hosts")
    if "ignore_hosts" in data:
        spec.ignore_hosts = _str_list(data["ignore_hosts"], "ignore_hosts")
    spec.is_bfv = bool(data.get("is_bfv", False))
    return spec


def apply_overrides(
    spec: RequestSpec,
    *,
    flavor: Flavor | None = None,
    image_props: dict[str, Any] | None = None,
    hints: dict[str, list[Any]] | None = None,
    az: str | None = None,
    num_instances: int | None = None,
) -> RequestSpec:
    """Put the command line's values onto ``spec``: the flavor, the availability zone and the
    instance count replace; image properties and hints are merged in."""
    if flavor is not None:
        spec.flavor = flavor
    if image_props:
        if spec.image is None:
            spec.image = ImageMeta()
        spec.image.properties = {**(spec.image.properties or {}), **image_props}
    if hints:
        spec.scheduler_hints = {**(spec.scheduler_hints or {}), **hints}
    if az:
        spec.availability_zone = az
    if num_instances is not None:
        if num_instances < 1:
            raise ExplainInputError("the number of instances must be at least 1")
        spec.num_instances = num_instances
    return spec
