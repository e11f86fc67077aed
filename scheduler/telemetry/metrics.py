"""The scheduler's Prometheus metrics.

Code that counts something reads the current set at call time::

    from scheduler.telemetry import metrics
    metrics.M.requests.labels(result="scheduled").inc()

Until ``enable()`` is called (``[metrics_exporter] listen`` unset) ``M`` holds do-nothing
stand-ins, so counting costs one attribute look-up and a call. ``enable(multiprocess=True)``
uses prometheus-client's multiprocess mode: every process writes its values to files in
``PROMETHEUS_MULTIPROC_DIR`` and the process that serves ``/metrics`` adds them up, so the
metrics of ``[scheduler] workers`` forked workers come out as one. Gauges say how they are
combined (``multiprocess_mode``): ``liveall`` keeps one series per live worker (``pid``
label), ``livemax``/``livesum`` one value for all live workers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

# select_destinations and its stages: from a millisecond (a view-answered filter pass) to a
# minute (a cell that does not answer, Placement retries)
LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)

# the request's stages as the driver times them (SchedulingRequest.timings) -> label
STAGES = {
    "placement": "placement_query",
    "view": "provider_view",
    "host_states": "host_states",
    "filter": "filter",
    "weigh": "weigh",
    "claim": "claim",
    "placement_bisection": "placement_hint",
}


class _Null:
    """A metric that records nothing (metrics disabled)."""

    __slots__ = ()

    def labels(self, *args: Any, **kwargs: Any) -> _Null:
        return self

    def inc(self, amount: float = 1) -> None:
        pass

    def dec(self, amount: float = 1) -> None:
        pass

    def observe(self, amount: float) -> None:
        pass

    def set(self, value: float) -> None:
        pass

    def remove(self, *labelvalues: Any) -> None:
        pass


_NULL = _Null()


@dataclass
class Metrics:
    """Every metric of the scheduler."""

    select_destinations: Any
    requests: Any
    instances_requested: Any
    instances_scheduled: Any
    alternates: Any
    stage: Any
    candidate_source: Any
    view_declined: Any
    filter_removed: Any
    claims: Any
    claim_retries: Any
    claim_confirmations: Any
    no_valid_host: Any
    casts: Any
    decision_records: Any
    flavor_capacity: Any
    stranded_capacity: Any
    capacity_computed: Any
    cell_hosts: Any
    cell_read_failures: Any
    cell_skipped: Any
    host_refresh_lag: Any
    view_age: Any
    view_providers: Any
    view_refresh_failures: Any
    in_flight: Any
    # what /readyz reads (one series per live worker)
    worker_warm: Any
    broker_connected: Any
    cell_last_read: Any
    placement_last_answer: Any
    consumption_released: Any
    enabled: bool = True


def _null_metrics() -> Metrics:
    names = [f for f in Metrics.__dataclass_fields__ if f != "enabled"]
    return Metrics(**{name: _NULL for name in names}, enabled=False)


M: Metrics = _null_metrics()


def _build(registry: Any) -> Metrics:
    from prometheus_client import Counter, Gauge, Histogram

    def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Any:
        return Counter(name, doc, labels, registry=registry)

    def gauge(name: str, doc: str, labels: tuple[str, ...] = (), mode: str = "livemax") -> Any:
        return Gauge(name, doc, labels, registry=registry, multiprocess_mode=mode)

    def histogram(name: str, doc: str, labels: tuple[str, ...] = ()) -> Any:
        return Histogram(name, doc, labels, registry=registry, buckets=LATENCY_BUCKETS)

    return Metrics(
        select_destinations=histogram(
            "novasched_select_destinations_duration_seconds",
            "Time to answer select_destinations, by result (scheduled, no_valid_host, error).",
            ("result",),
        ),
        requests=counter(
            "novasched_requests",
            "select_destinations calls answered, by result (scheduled, no_valid_host, error; "
            "a malformed request counts as error).",
            ("result",),
        ),
        instances_requested=counter(
            "novasched_instances_requested", "Instances asked for in select_destinations calls."
        ),
        instances_scheduled=counter(
            "novasched_instances_scheduled", "Instances given a host (one Selection each)."
        ),
        alternates=counter(
            "novasched_alternates_returned", "Alternate hosts returned with the selections."
        ),
        stage=histogram(
            "novasched_stage_duration_seconds",
            "Time a select_destinations call spent in one stage (placement_query, "
            "provider_view, host_states, filter, weigh, claim, placement_hint), per call.",
            ("stage",),
        ),
        candidate_source=counter(
            "novasched_candidate_source",
            "Where a call's allocation candidates came from: the provider view or Placement.",
            ("source",),
        ),
        view_declined=counter(
            "novasched_view_declined",
            "Calls the provider view did not answer (Placement did), by why: not_loaded, "
            "too_old, not_checked (the freshness check failed, took too long or refreshes are "
            "failing), no_candidate (an empty answer is Placement's to give), failed (a fault "
            "of the view, logged), empty_query, too_wide (more request-group combinations "
            "than the view examines).",
            ("reason",),
        ),
        filter_removed=counter(
            "novasched_filter_hosts_removed",
            "Hosts a filter removed (each instance of a request counts its own pass).",
            ("filter",),
        ),
        claims=counter(
            "novasched_claims",
            "Claims of a host (PUT /allocations), by result: claimed, conflict (Placement "
            "refused: the host was full or its generation kept moving; the next host is "
            "tried), error (5xx, or an answer lost and the claim found not made), unsent "
            "(Placement could not be reached).",
            ("result",),
        ),
        claim_retries=counter(
            "novasched_claim_retries",
            "Claims sent again after a provider-generation conflict ([placement] claim_retries).",
        ),
        claim_confirmations=counter(
            "novasched_claim_confirmations",
            "Hosts chosen from the provider view's candidates confirmed with Placement before "
            "their claim ([placement] view_confirm_claims), by result: confirmed, refused "
            "(Placement no longer offers that allocation request: not claimed, the next host "
            "is tried), error (Placement failed or could not be reached: not claimed).",
            ("result",),
        ),
        no_valid_host=counter(
            "novasched_no_valid_host",
            "NoValidHost answers by cause (no_candidates: Placement found none; filters: "
            "the filter named in 'filter' removed the last host; narrowed: the requested "
            "destination or forced hosts left none; claims_refused; placement_unreachable; "
            "prefilter; no_such_host; no_compute_node; deadline; other).",
            ("cause", "filter"),
        ),
        casts=counter(
            "novasched_casts",
            "Cache-update casts from nova (update_aggregates, delete_aggregate, "
            "update_instance_info, delete_instance_info, sync_instance_info), by result.",
            ("method", "result"),
        ),
        decision_records=counter(
            "novasched_decision_records",
            "Decision records by result: written, dropped (the writer's queue was full: the "
            "request was not slowed), failed (the store refused a batch).",
            ("result",),
        ),
        flavor_capacity=gauge(
            "novasched_flavor_capacity_instances",
            "How many more instances of a flavor fit, per availability zone, by the "
            "scheduler's own filters and Placement's inventories ([capacity] interval).",
            ("flavor", "az"),
        ),
        stranded_capacity=gauge(
            "novasched_stranded_capacity",
            "Free capacity no further instance of a flavor can use, per resource class "
            "(VCPU, MEMORY_MB, DISK_GB), over the up and enabled hosts.",
            ("resource_class", "flavor"),
        ),
        capacity_computed=gauge(
            "novasched_capacity_computed_timestamp_seconds",
            "Unix time the capacity gauges were last computed.",
        ),
        cell_hosts=gauge(
            "novasched_cell_hosts", "Compute hosts in the scheduler's cache, per cell.", ("cell",)
        ),
        cell_read_failures=counter(
            "novasched_cell_read_failures",
            "Reads of a cell database that failed (error) or ran past cell_timeout (timeout).",
            ("cell", "reason"),
        ),
        cell_skipped=counter(
            "novasched_cell_skipped",
            "Requests served without a cell, because its read failed (error) or did not "
            "answer within cell_timeout (timeout).",
            ("cell", "reason"),
        ),
        host_refresh_lag=gauge(
            "novasched_host_refresh_lag_seconds",
            "Age of the oldest cell's last successful read (the host refresher's lag).",
        ),
        view_age=gauge(
            "novasched_provider_view_age_seconds",
            "Age of the provider view's last successful refresh (-1: no view or not loaded; "
            "the largest over the workers).",
        ),
        view_providers=gauge(
            "novasched_provider_view_providers", "Resource providers in the provider view."
        ),
        view_refresh_failures=gauge(
            "novasched_provider_view_refresh_failures",
            "Failed refreshes of the provider view in a row (0 after a good one; the most "
            "of any worker).",
        ),
        in_flight=gauge(
            "novasched_requests_in_flight",
            "select_destinations calls being served now.",
            mode="livesum",
        ),
        worker_warm=gauge(
            "novasched_worker_ready",
            "1 once a worker has finished its warm-up (read its cells, loaded the provider "
            "view if it loads at start; a cell that failed is read again later) and consumes "
            "the topic.",
            mode="liveall",
        ),
        broker_connected=gauge(
            "novasched_broker_connected",
            "1 while a worker's RPC server is connected to the message broker.",
            mode="liveall",
        ),
        cell_last_read=gauge(
            "novasched_cell_last_read_timestamp_seconds",
            "Unix time of a worker's last successful read of a cell.",
            ("cell",),
            mode="liveall",
        ),
        placement_last_answer=gauge(
            "novasched_placement_last_answer_timestamp_seconds",
            "Unix time of a worker's last answer from the Placement API (below 500).",
            mode="liveall",
        ),
        consumption_released=counter(
            "novasched_consumption_released",
            "Instances this scheduler stopped counting on a host's cached state, by reason: "
            "report (the compute's newer report counts it now: the normal case); the others "
            "correct usage nova would not have, kept while the instance never reached the host "
            "or left it: deleted, moved, synced (the instance-info casts), rollback (a claim "
            "rolled back), rebuild (a rebuild check, never claimed), placement (Placement no "
            "longer holds its allocation there), expired ([scheduler] consumption_max_age).",
            ("reason",),
        ),
    )


def enable(*, registry: Any = None, multiprocess: bool = False) -> Metrics:
    """Create the real metrics (in ``registry``, a new CollectorRegistry by default) and
    make them current. ``multiprocess``: values go to PROMETHEUS_MULTIPROC_DIR, which must be
    set before this call."""
    global M
    from prometheus_client import CollectorRegistry, values

    if multiprocess:
        if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            raise RuntimeError("PROMETHEUS_MULTIPROC_DIR must be set for multiprocess metrics")
        # prometheus-client picks its value class when first imported: pick again now
        values.ValueClass = values.get_value_class()
    else:
        values.ValueClass = values.MutexValue
    M = _build(registry if registry is not None else CollectorRegistry())
    return M


def disable() -> None:
    """Back to the do-nothing stand-ins."""
    global M
    M = _null_metrics()


_DECLINED = (
    ("not loaded", "not_loaded"),
    (" s old", "too_old"),
    ("found no candidate", "no_candidate"),
    ("empty query", "empty_query"),
    ("combinations", "too_wide"),
    ("view failed", "failed"),
)


def declined_label(reason: str) -> str:
    """The ``reason`` label of novasched_view_declined_total for why the view declined."""
    for words, label in _DECLINED:
        if words in reason:
            return label
    return "not_checked"


def stage_label(step: str) -> str:
    return STAGES.get(step, step)
