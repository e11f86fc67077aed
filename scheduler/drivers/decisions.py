"""What the driver tells the decision records about one ``select_destinations``.

The document is built from the request's trace once the call has its answer: what was
asked, where the candidates came from, what each filter removed, the best weighed hosts of
each instance with each weigher's raw value, normalised value, multiplier and share of the
weight (captured by ``select_hosts`` before the instance consumed anything), what became of
each host the first instance's filters were given (``per_host``: the filter that removed it,
or its weight; a name per host, so written out by the recorder's writer thread, not the
request's), the selections and, on a NoValidHost, its reason. ``scheduler.records`` stores
it without looking inside (docs/operations.md, "Decision records").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from scheduler.exceptions import NoValidHost
from scheduler.framework import Ranked
from scheduler.framework import document as sections
from scheduler.objects import request_summary
from scheduler.records import ERROR, NO_VALID_HOST, SCHEDULED, DecisionRecord, Deferred
from scheduler.records.completions import Completions
from scheduler.request import SchedulingRequest
from weighers.handler import normalized_value

LOG = logging.getLogger(__name__)

# 2: the request as it arrived (``spec``), when the driver was given an encoder;
# 3: the sections explain shares (scheduler/framework/document.py): ``narrowed`` as
#    {count, reason}; an alternate is not ``claimed`` but carries an ``allocation_request``;
# 4: ``per_host`` (scheduler/framework/document.py, ``per_host_section``)
DOCUMENT_VERSION = 4

# The most hosts ``per_host`` names (the removed ones first): about 15 bytes and 0.1 to
# 0.2 us of the writer thread a host, so a record stays within a few tens of KB; beyond it
# ``per_host.capped`` says how many were left out.
PER_HOST_LIMIT = 2000


def top_weighed(ranked: Ranked, weighers: Sequence[Any]) -> list[dict[str, Any]]:
    """One instance's best weighed hosts, each with its weight and, per weigher, its raw
    value, its value normalised as the weighing did (over all the filtered hosts), its
    multiplier and its share of the weight (``multiplier * normalized``; the shares add up
    to the weight), read from ``ranked.shares``: what the ranking itself weighed them by."""
    best, weights, shares = ranked.hosts, ranked.weights, ranked.shares
    parts: list[dict[str, Any]] = [{} for _ in best]
    # each recorded host's place among the ranking's best (a picker may have reordered)
    place = {id(h): i for i, h in enumerate(shares.hosts)}
    for weigher in weighers:
        name = getattr(weigher, "name", None) or type(weigher).__name__
        share = shares.weighers.get(name)
        if share is None:
            # it weighed nothing (or the same for every host): no share
            for part, host in zip(parts, best, strict=False):
                try:
                    multiplier = float(weigher.weight_multiplier(host))
                except Exception as exc:  # a record must never fail a request
                    part[name] = {"error": str(exc)[:200]}
                    continue
                part[name] = {"multiplier": multiplier, "share": 0.0}
            continue
        minval = getattr(weigher, "minval", None)
        maxval = getattr(weigher, "maxval", None)
        for part, host in zip(parts, best, strict=False):
            i = place.get(id(host))
            if i is None:  # not among the ranking's best (a picker's own order)
                part[name] = {"raw": None, "normalized": None, "share": None}
                continue
            raw, multiplier = share.raws[i], share.multipliers[i]
            part[name] = sections.weigher_part(
                raw, _normalized(raw, share.low, share.high, minval, maxval), multiplier
            )
    return [
        sections.weighed_host(h, w, part) for h, w, part in zip(best, weights, parts, strict=False)
    ]


def _normalized(
    raw: Any, low: float, high: float, minval: float | None, maxval: float | None
) -> float | None:
    try:
        return normalized_value(float(raw), low, high, minval, maxval)
    except (TypeError, ValueError):
        return None


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
    # only an instance's chosen host holds a claim; an alternate carries an allocation
    # request the conductor claims if the build on the chosen host fails
    selections = [
        [
            {
                "host": s.service_host,
                "node": s.nodename,
                "cell_uuid": s.cell_uuid,
                "availability_zone": s.availability_zone,
                "claimed": i == 0 and s.allocation_request is not None,
                **({"allocation_request": s.allocation_request is not None} if i else {}),
            }
            for i, s in enumerate(per_instance)
        ]
        for per_instance in result or []
    ]
    report = trace.first_report
    first = (trace.weighed or {}).get(0)
    if report is not None:
        # which hosts each filter removed, resolved now: a filter keeps the host table's
        # rows, which a host removed from the cell and another added could reuse before the
        # writer thread names them; no more than per_host keeps
        budget = PER_HOST_LIMIT
        for step in report.steps:
            budget -= step.resolve(budget)
    document: dict[str, Any] = {
        "version": DOCUMENT_VERSION,
        "request": request_summary(req),
        "placement": sections.placement_section(trace),
        "hosts": trace.total_hosts,
        # the first instance's filters (it started from every host); the later instances
        # of a multi-create are in filter_removed and, on a NoValidHost, in the reason
        "filters": sections.filters_section(report),
        "filter_removed": dict(trace.filter_removed),
        "narrowed": sections.narrowed_section(trace.narrowed),
        "weighed": [top_weighed(trace.weighed[i], weighers) for i in sorted(trace.weighed or {})],
        # a name per host: written out by the recorder's writer thread, not here
        "per_host": Deferred(
            partial(
                sections.per_host_section,
                report,
                first.hosts if first is not None else (),
                first.weights if first is not None else (),
                limit=PER_HOST_LIMIT,
            )
        ),
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


def hand_over(
    recorder: Any,
    completions: Completions,
    req: SchedulingRequest,
    instance_uuids: list[str] | None,
    result: list[list[Any]] | None,
    error: BaseException | None,
    *,
    spec: Callable[[], dict[str, Any]] | None,
    weighers: Sequence[Any],
    smallest_change: Callable[[], dict[str, Any]],
) -> None:
    """Hand the call's decision record to ``recorder`` (which never waits); a record that
    cannot be made is logged, never the request's failure. When the filters left no host or
    Placement had none, ``smallest_change`` (the relaxation search) runs first, after the reply, on
    ``completions``' thread. ``spec``: the request as it arrived, in its wire form."""
    try:
        rec = decision_record(
            req,
            instance_uuids,
            result,
            error,
            spec=spec() if spec is not None else None,
            weighers=weighers,
        )
        if isinstance(error, NoValidHost) and error.cause in ("filters", "no_candidates"):
            completions.submit(rec, "smallest_change", smallest_change, recorder.record)
        else:
            recorder.record(rec)
    except Exception:
        LOG.exception("Could not record the decision of request %s", req.request_id)
