"""SchedulingRequest: one request while it is being scheduled, in three parts.

1. **The spec.** A SchedulingRequest *is* the decoded RequestSpec, so filters and weighers
   written for nova read ``spec_obj.flavor`` or ``spec_obj.get_scheduler_hint(...)`` as they
   always did (the driver passes it to them as ``spec_obj``/``weight_properties``). The
   decoded RequestSpec itself is never changed: the parts scheduling changes as nova's
   scheduler changes its RequestSpec (the requested destination and request-level traits
   the prefilters add to, the request groups' provider mappings, the server group's hosts,
   the instance uuid of a multi-create) are private copies. What the request is given when
   it is made (its id, the Placement consumer's project and user, when it arrived, its
   deadline, whether the provider view may answer) is fixed from then on.
2. **The scratch area** (``req.scratch``, a ``Scratch``; kube's CycleState): what plugins
   write for this request alone, because concurrent requests share the HostStates: the
   Placement candidates the NUMA and PCI filters narrow, the limits filters record per host,
   and a plugin's own per-request values. Plugins use the request's methods
   (``candidates_for``, ``keep_candidates``, ``set_host_limit``, ``limits_for``) or the
   scratch area's.
3. **The trace** (``req.trace``, a ``Trace``): what the driver and its collaborators (the
   candidate source, the claimer) record as they go: the prefilters applied, the query, the
   candidate source, the filter report, the claims, Placement's errors, timings. Only the
   driver writes it; explain, the metrics and NoValidHost read it. A retry against Placement
   is a new request with a trace of its own that links to the first attempt's.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from typing import Any

from placement_client.api.shapes import AllocationRequest
from scheduler.objects import RequestSpec

# the fields scheduling changes on its copy; every other field is shared with the spec
_COPIED = ("requested_destination", "request_level_params", "requested_resources", "instance_group")


@dataclass(slots=True, eq=False)
class Scratch:
    """What plugins write for one request (see the module docstring)."""

    # allocation requests by provider uuid (nova's HostState.allocation_candidates); the NUMA
    # and PCI filters keep only the ones that fit
    allocation_candidates: dict[str, list[AllocationRequest]] = field(default_factory=dict)
    # the candidates' provider summaries ({rp uuid: {"resources": {rc: {"used": n, ...}}}})
    provider_summaries: Any = None
    # limits recorded by filters, per (host, node) (nova's host_state.limits)
    host_limits: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    # a plugin's own per-request values, under a key of its choosing (its name)
    values: dict[str, Any] = field(default_factory=dict)

    def candidates_for(self, host_state: Any) -> list[AllocationRequest]:
        """The remaining allocation requests for a host (empty if none)."""
        uuid = getattr(host_state, "uuid", None)
        return self.allocation_candidates.get(uuid, []) if uuid else []

    def keep_candidates(self, host_state: Any, kept: list[AllocationRequest]) -> None:
        """Keep only ``kept`` of a host's allocation requests (empty: none is left)."""
        if host_state.uuid in self.allocation_candidates:
            self.allocation_candidates[host_state.uuid] = kept

    def set_host_limit(self, host_state: Any, name: str, value: Any) -> None:
        self.host_limits.setdefault((host_state.host, host_state.nodename), {})[name] = value

    def limits_for(self, host_state: Any) -> dict[str, Any]:
        return self.host_limits.get((host_state.host, host_state.nodename), {})


@dataclass(slots=True, eq=False)
class Trace:
    """What the driver recorded while scheduling one request (see the module docstring)."""

    # -- Placement -----------------------------------------------------------------------------
    prefilters: list[str] = field(default_factory=list)  # the prefilters that changed it
    query_text: str = ""
    candidate_count: int | None = None
    provider_count: int | None = None
    # when Placement returned nothing: which single query term emptied the answer
    placement_hint: str = ""
    # who answered the candidates query: "view" (the provider view) or "placement"; why the
    # view did not, and how old it was (seconds since its last refresh)
    candidate_source: str = ""
    view_declined: str = ""
    view_age: float | None = None

    # -- filters, claims -----------------------------------------------------------------------
    total_hosts: int = 0  # hosts the first instance started with
    # what the narrowing of the last instance took out before the filters: (count, why)
    narrowed: list[tuple[int, str]] = field(default_factory=list)
    first_report: Any = None  # the FilterReport of the first instance (every host)
    last_report: Any = None  # the FilterReport of the last instance
    # hosts each filter removed, over every instance of the request (for the metrics)
    filter_removed: dict[str, int] = field(default_factory=dict)
    claimed: list[str] = field(default_factory=list)  # instance uuids with a claim
    # instance uuids whose claim may have landed but could not be checked: the rollback
    # deletes their allocations too (DELETE of a consumer without allocations is harmless)
    possibly_claimed: list[str] = field(default_factory=list)
    claims_made: int = 0  # claims Placement took (a rollback may delete them later)
    claim_failures: int = 0  # claims Placement clearly refused (409, other 4xx)
    claim_errors: int = 0  # claims that failed otherwise (5xx, an outcome found not landed)
    claims_unsent: int = 0  # claims that never reached Placement (connection refused)
    placement_errors: list[str] = field(default_factory=list)
    # the error that showed Placement cannot be reached; no further claim is tried
    placement_unreachable: str = ""

    timings: dict[str, float] = field(default_factory=dict)  # seconds per step
    # the best weighed hosts per instance index, for the decision record (None: not recorded)
    weighed: dict[int, Any] | None = None  # scheduler.framework.Ranked
    # the attempt before this one (a NoValidHost from the view, asked of Placement again)
    previous: Trace | None = None

    @contextmanager
    def timed(self, step: str) -> Iterator[None]:
        """Add the time spent in the block to ``timings[step]``."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.timings[step] = self.timings.get(step, 0.0) + (time.perf_counter() - started)

    def attempts(self) -> list[Trace]:
        """This request's attempts, the first first (one unless Placement was asked again)."""
        chain = []
        trace: Trace | None = self
        while trace is not None:
            chain.append(trace)
            trace = trace.previous
        return chain[::-1]

    def all_timings(self) -> dict[str, float]:
        """Seconds per step over every attempt."""
        if self.previous is None:
            return self.timings
        total: dict[str, float] = {}
        for attempt in self.attempts():
            for step, seconds in attempt.timings.items():
                total[step] = total.get(step, 0.0) + seconds
        return total


@dataclass(slots=True, eq=False)
class SchedulingRequest(RequestSpec):
    """A RequestSpec being scheduled (see the module docstring)."""

    request_id: str | None = None
    # the Placement consumer's project and user: the spec's, else the caller's context's
    consumer_project_id: str | None = None
    consumer_user_id: str | None = None
    # when the request arrived (time.monotonic()): what it reads includes every change
    # committed before then (the host cache's reads started since; None: when asked)
    arrived_at: float | None = None
    # when the request must stop claiming (time.monotonic() seconds; the driver sets it from
    # the arrival and the smaller of long_rpc_timeout and request_deadline), and the length
    # of that budget in seconds
    deadline: float = math.inf
    deadline_seconds: float = math.inf
    use_view: bool = True  # False: ask Placement (a NoValidHost from the view, asked again)
    # who asks: "schedule" (nova's select_destinations), or a tool that reports its own
    # failures ("capacity", "explain", "smallest_change": Placement's refusal or outage is
    # that tool's to report, not an ERROR of the service)
    purpose: str = "schedule"

    scratch: Scratch = field(default_factory=Scratch)
    trace: Trace = field(default_factory=Trace)

    @classmethod
    def of(
        cls,
        spec: RequestSpec,
        *,
        request_id: str | None = None,
        project_id: str | None = None,
        user_id: str | None = None,
        arrived_at: float | None = None,
        deadline_seconds: float = math.inf,
        deadline: float | None = None,
        retry_of: SchedulingRequest | None = None,
        purpose: str = "schedule",
    ) -> SchedulingRequest:
        """A request for ``spec``; ``project_id``/``user_id`` (the caller's context) stand in
        for the spec's own when it has none. Its deadline is ``deadline``, else
        ``deadline_seconds`` after ``arrived_at``. ``retry_of``: the attempt this one asks
        Placement again for: its deadline holds, the provider view is not asked, and the
        new trace links to the first one's."""
        values = {f.name: getattr(spec, f.name) for f in fields(RequestSpec)}
        for name in _COPIED:
            values[name] = copy.deepcopy(values[name])
        if deadline is None:
            deadline = math.inf if arrived_at is None else arrived_at + deadline_seconds
        trace = Trace()
        use_view = True
        if retry_of is not None:
            deadline = retry_of.deadline
            deadline_seconds = retry_of.deadline_seconds
            use_view = False
            trace.previous = retry_of.trace
        return cls(
            **values,
            request_id=request_id,
            consumer_project_id=spec.project_id or project_id,
            consumer_user_id=spec.user_id or user_id,
            arrived_at=arrived_at,
            deadline=deadline,
            deadline_seconds=deadline_seconds,
            use_view=use_view,
            purpose=purpose,
            trace=trace,
        )

    # -- what plugins write, for this request alone (the scratch area) -------------------------
    def candidates_for(self, host_state: Any) -> list[AllocationRequest]:
        """This request's remaining allocation requests for a host (empty if none)."""
        return self.scratch.candidates_for(host_state)

    def keep_candidates(self, host_state: Any, kept: list[AllocationRequest]) -> None:
        """Keep only ``kept`` of this request's allocation requests for a host (what nova's
        NUMA and PCI filters do by assigning ``host_state.allocation_candidates``)."""
        self.scratch.keep_candidates(host_state, kept)

    def set_host_limit(self, host_state: Any, name: str, value: Any) -> None:
        """Record a limit for this request on a host (what nova's filters wrote into
        ``host_state.limits[name]``); it goes into the host's Selection."""
        self.scratch.set_host_limit(host_state, name, value)

    def limits_for(self, host_state: Any) -> dict[str, Any]:
        """The limits this request's filters recorded for a host."""
        return self.scratch.limits_for(host_state)


def deadline_seconds(conf: Any) -> float:
    """A request's time to decide: the smaller of ``[DEFAULT] long_rpc_timeout`` (the
    caller's wait) and ``[scheduler] request_deadline`` (0: none)."""
    limit = math.inf
    caller = getattr(conf, "long_rpc_timeout", None)
    if caller:
        limit = float(caller)
    own = conf.scheduler.request_deadline
    if own:
        limit = min(limit, float(own))
    return limit
