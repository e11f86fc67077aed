"""What the driver tells the decision records about one ``select_destinations``.

The document is built from the request's trace once the call has its answer: what was
asked, where the candidates came from, what each filter removed, the best weighed hosts of
each instance with each weigher's raw value, normalised value, multiplier and share of the
weight (captured by ``select_hosts`` before the instance consumed anything), the
selections and, on a NoValidHost, its reason. ``scheduler.records`` stores it without
looking inside (docs/operations.md, "Decision records").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduler.framework import Ranked
from scheduler.objects import request_summary
from scheduler.records import ERROR, NO_VALID_HOST, SCHEDULED, DecisionRecord
from scheduler.request import SchedulingRequest
from weighers.handler import normalized_value

# 2: the request as it arrived (``spec``), when the driver was given an encoder
DOCUMENT_VERSION = 2


def top_weighed(ranked: Ranked, weighers: Sequence[Any]) -> list[dict[str, Any]]:
    """One instance's best weighed hosts, each with its weight and, per weigher, its raw
    value, its value normalised as the weighing did (over all the filtered hosts), its
    multiplier and its share of the weight (``multiplier * normalized``; the shares add up
    to the weight), read from ``ranked.shares``: what the ranking itself weighed them by."""
    best, weights, shares = ranked.hosts, ranked.weights, ranked.shares
    out = [
        {"host": h.host, "node": h.nodename, "weight": round(w, 6), "weighers": {}}
        for h, w in zip(best, weights, strict=False)
    ]
    # each recorded host's place among the ranking's best (a picker may have reordered)
    place = {id(h): i for i, h in enumerate(shares.hosts)}
    for weigher in weighers:
        name = getattr(weigher, "name", None) or type(weigher).__name__
        share = shares.weighers.get(name)
        if share is None:
            # it weighed nothing (or the same for every host): no share
            for entry, host in zip(out, best, strict=False):
                try:
                    multiplier = float(weigher.weight_multiplier(host))
                except Exception as exc:  # a record must never fail a request
                    entry["weighers"][name] = {"error": str(exc)[:200]}
                    continue
                entry["weighers"][name] = {"multiplier": multiplier, "share": 0.0}
            continue
        minval = getattr(weigher, "minval", None)
        maxval = getattr(weigher, "maxval", None)
        for entry, host in zip(out, best, strict=False):
            i = place.get(id(host))
            if i is None:  # not among the ranking's best (a picker's own order)
                entry["weighers"][name] = {"raw": None, "normalized": None, "share": None}
                continue
            raw, multiplier = share.raws[i], share.multipliers[i]
            normalized = _normalized(raw, share.low, share.high, minval, maxval)
            entry["weighers"][name] = {
                "raw": _number(raw),
                "normalized": None if normalized is None else round(normalized, 6),
                "multiplier": multiplier,
                "share": None if normalized is None else round(multiplier * normalized, 6),
            }
    return out


def _normalized(
    raw: Any, low: float, high: float, minval: float | None, maxval: float | None
) -> float | None:
    try:
        return normalized_value(float(raw), low, high, minval, maxval)
    except (TypeError, ValueError):
        return None


def _number(value: Any) -> Any:
    try:
        return round(float(value), 6)
    except (TypeError, ValueError):
        return str(value)


def decision_record(
    req: SchedulingRequest,
    instance_uuids: list[str] | None,
    result: list[list[Any]] | None,
    error: BaseException | None,
    *,
    spec: dict[str, Any] | None = None,
    weighers: Sequence[Any] = (),
) -> DecisionRecord:
    """The record of one call: ``result`` its selections, or ``error`` what it raised;
    ``spec`` the request as it arrived, in the JSON form a replay decodes (nova's wire
    form); ``weighers`` the enabled ones, which the best hosts' shares are named by."""
    trace = req.trace
    if error is None:
        outcome = SCHEDULED
    else:
        outcome = NO_VALID_HOST if type(error).__name__ == "NoValidHost" else ERROR
    selections = [
        [
            {
                "host": s.service_host,
                "node": s.nodename,
                "cell_uuid": s.cell_uuid,
                "availability_zone": s.availability_zone,
                "claimed": s.allocation_request is not None,
            }
            for s in per_instance
        ]
        for per_instance in result or []
    ]
    report = trace.first_report
    document: dict[str, Any] = {
        "version": DOCUMENT_VERSION,
        "request": request_summary(req),
        "placement": {
            "source": trace.candidate_source or None,
            "query": trace.query_text or None,
            "candidates": trace.candidate_count,
            "providers": trace.provider_count,
            "view_age_s": None if trace.view_age is None else round(trace.view_age, 3),
            "view_declined": trace.view_declined or None,
            "hint": trace.placement_hint or None,
            "prefilters": list(trace.prefilters),
            "attempts": len(trace.attempts()),
        },
        "hosts": trace.total_hosts,
        # the first instance's filters (it started from every host); the later instances
        # of a multi-create are in filter_removed and, on a NoValidHost, in the reason
        "filters": [
            {"name": step.name, "hosts_in": step.hosts_in, "hosts_passed": step.hosts_out}
            for step in (report.steps if report is not None else ())
        ],
        "filter_removed": dict(trace.filter_removed),
        "narrowed": [{"hosts": n, "why": why} for n, why in trace.narrowed],
        "weighed": [top_weighed(trace.weighed[i], weighers) for i in sorted(trace.weighed or {})],
        "selections": selections,
        "claims": {
            "made": trace.claims_made,
            "refused": trace.claim_failures,
            "errors": trace.claim_errors,
        },
        "timings_ms": {k: round(v * 1000, 3) for k, v in trace.all_timings().items()},
    }
    if spec is not None:
        document["spec"] = spec
    if error is not None:
        document["reason"] = getattr(error, "reason", None) or str(error) or type(error).__name__
    return DecisionRecord(
        request_id=req.request_id,
        instance_uuids=list(instance_uuids or []),
        outcome=outcome,
        hosts=[per_instance[0]["host"] for per_instance in selections if per_instance],
        document=document,
    )
