"""What a request's end says: its Selections, the NoValidHost of too few hosts, and the metrics
its trace counts (``FilterScheduler`` uses them; so do explain and the tests)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from placement_client.api import MV_CLAIM, AllocationRequest
from scheduler.exceptions import NoValidHost
from scheduler.hosts.state import HostState
from scheduler.objects import SchedulerLimits, Selection
from scheduler.request import SchedulingRequest, Trace
from scheduler.telemetry import metrics

LOG = logging.getLogger(__name__)


def selection(
    req: SchedulingRequest,
    host: HostState,
    alloc_req: AllocationRequest | None,
    default_availability_zone: str | None,
) -> Selection:
    """nova's Selection of ``host`` for this request (``alloc_req``: the allocation request
    it carries, claimed or, for an alternate, not)."""
    # only what this request's filters recorded: HostStates are shared between requests
    limits = req.limits_for(host)
    return Selection(
        compute_node_uuid=host.uuid or "",
        service_host=host.host,
        nodename=host.nodename,
        cell_uuid=host.cell_uuid or "",
        allocation_request=alloc_req,
        allocation_request_version=MV_CLAIM if alloc_req else None,
        limits=SchedulerLimits(
            numa_topology=limits.get("numa_topology"),
            vcpu=limits.get("vcpu"),
            disk_gb=limits.get("disk_gb"),
            memory_mb=limits.get("memory_mb"),
        ),
        availability_zone=host.availability_zone or default_availability_zone,
    )


def not_enough(req: SchedulingRequest, got: int, wanted: int) -> NoValidHost:
    """The NoValidHost for fewer hosts than instances: its reason says why (the filter
    counts of the instance that found none, and what the narrowing took out, or the
    claims Placement refused); its cause is what the metrics count (``filters`` and the
    filter that removed the last host, ``narrowed`` when the requested destination or
    forced hosts left none, else what stopped the claims)."""
    parts = []
    if wanted > 1:
        parts.append(f"Found hosts for {got} of {wanted} instances.")
    report = req.trace.last_report
    cause, filter_name = "other", ""
    if report is not None and not report.hosts:
        # the first instance's report counts every host; later ones count the survivors
        text = report.summary(req.trace.total_hosts if got == 0 else None)
        if req.trace.narrowed:
            more = ", ".join(f"{count} {why}" for count, why in req.trace.narrowed)
            text += (", " if ": " in text else ": ") + more
        parts.append(text)
        cause = "narrowed"
        for step in reversed(report.steps):
            if step.hosts_in and not step.hosts_out:
                cause, filter_name = "filters", step.name
                break
    elif req.trace.placement_unreachable:
        parts.append(f"Placement unreachable: {req.trace.placement_unreachable}")
        cause = "placement_unreachable"
    elif req.trace.claim_failures or req.trace.claim_errors:
        texts = []
        if req.trace.claim_failures:
            texts.append(f"Placement refused {req.trace.claim_failures} claim(s)")
        if req.trace.claim_errors:
            texts.append(f"{req.trace.claim_errors} claim(s) failed on a Placement error")
        text = "; ".join(texts)
        if req.trace.placement_errors:
            text += f"; last Placement error: {req.trace.placement_errors[-1]}"
        parts.append(text + ".")
        cause = "claims_refused"
    else:
        parts.append("There are not enough hosts available.")
    return NoValidHost(" ".join(parts), cause, filter_name)


def observe(
    trace: Trace, total: float, timing_observer: Callable[[dict[str, float]], None] | None
) -> None:
    """A call's timings, once it has its answer: to the debug log, to ``timing_observer``
    (the benchmark's) with ``total``, and to the metrics."""
    timings = trace.all_timings()
    if LOG.isEnabledFor(logging.DEBUG):
        LOG.debug(
            "select_destinations took %.1f ms (%s)",
            total * 1000,
            ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in timings.items()),
        )
    if timing_observer is not None:
        timing_observer(dict(timings, total=total))
    if metrics.M.enabled:
        count_request(trace)


def count_request(trace: Trace) -> None:
    """A call's stages (one observation per stage, over its attempts), where its candidates
    came from (its last attempt), and the hosts filters removed and the claims of every
    attempt, to the metrics."""
    m = metrics.M
    for step, seconds in trace.all_timings().items():
        m.stage.labels(stage=metrics.stage_label(step)).observe(seconds)
    if trace.candidate_source:
        m.candidate_source.labels(source=trace.candidate_source).inc()
    if trace.view_declined:
        m.view_declined.labels(reason=metrics.declined_label(trace.view_declined)).inc()
    for attempt in trace.attempts():
        for name, count in attempt.filter_removed.items():
            if count:
                m.filter_removed.labels(filter=name).inc(count)
        for result, count in (
            ("claimed", attempt.claims_made),
            ("conflict", attempt.claim_failures),
            ("error", attempt.claim_errors),
            ("unsent", attempt.claims_unsent),
        ):
            if count:
                m.claims.labels(result=result).inc(count)
