"""SchedulingRequest: one request while it is being scheduled, and everything that belongs to
it alone.

The decoded RequestSpec is what the conductor asked; nothing changes it. Scheduling needs a
place for what belongs to one request: the Placement candidates (which NUMA and PCI filters
narrow), the limits filters record per host, the claims made so far, the filter report
explain and NoValidHost read, timings. HostStates cannot hold any of it, because concurrent
requests share them.

A SchedulingRequest *is* a RequestSpec, so filters and weighers written for nova read
``spec_obj.flavor`` or ``spec_obj.get_scheduler_hint(...)`` as they always did: the driver
passes it to them as ``spec_obj``/``weight_properties``. The parts of the spec that
scheduling changes as nova's scheduler changes its RequestSpec (the requested destination and
request-level traits the prefilters add to, the request groups' provider mappings, the server
group's hosts, the instance uuid of a multi-create) are private copies.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from typing import Any

from scheduler.objects import RequestSpec

# the fields scheduling changes on its copy; every other field is shared with the spec
_COPIED = ("requested_destination", "request_level_params", "requested_resources", "instance_group")


@dataclass(slots=True, eq=False)
class SchedulingRequest(RequestSpec):
    """A RequestSpec being scheduled (see the module docstring)."""

    request_id: str | None = None
    # the Placement consumer's project and user: the spec's, else the caller's context's
    consumer_project_id: str | None = None
    consumer_user_id: str | None = None

    # -- Placement ---------------------------------------------------------------------------
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
    use_view: bool = True  # False: ask Placement (a NoValidHost from the view, asked again)
    # allocation requests by provider uuid (nova's HostState.allocation_candidates); the NUMA
    # and PCI filters drop the ones that do not fit
    allocation_candidates: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    # -- filters, weighers, claims -------------------------------------------------------------
    # limits recorded by filters, per (host, node) (nova's host_state.limits)
    host_limits: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    total_hosts: int = 0  # hosts the first instance started with
    # what the narrowing of the last instance took out before the filters: (count, why)
    narrowed: list[tuple[int, str]] = field(default_factory=list)
    last_report: Any = None  # the FilterReport of the last instance
    claimed: list[str] = field(default_factory=list)  # instance uuids with a claim
    # instance uuids whose claim may have landed but could not be checked: the rollback
    # deletes their allocations too (DELETE of a consumer without allocations is harmless)
    possibly_claimed: list[str] = field(default_factory=list)
    claims_made: int = 0  # claims Placement took (a rollback may delete them later)
    # hosts each filter removed, over every instance of the request (for the metrics)
    filter_removed: dict[str, int] = field(default_factory=dict)
    claim_failures: int = 0  # claims Placement clearly refused (409, other 4xx)
    claim_errors: int = 0  # claims that failed otherwise (5xx, an outcome found not landed)
    claims_unsent: int = 0  # claims that never reached Placement (connection refused)
    placement_errors: list[str] = field(default_factory=list)
    # the error that showed Placement cannot be reached; no further claim is tried
    placement_unreachable: str = ""
    # when the request must stop claiming (time.monotonic() seconds; the driver sets it
    # from the arrival and the smaller of long_rpc_timeout and request_deadline), and the
    # length of that budget in seconds
    deadline: float = math.inf
    deadline_seconds: float = math.inf
    # when the request arrived (time.monotonic()): what it reads includes every change
    # committed before then (the host cache's reads started since; None: when asked)
    arrived_at: float | None = None
    timings: dict[str, float] = field(default_factory=dict)  # seconds per step

    @classmethod
    def of(
        cls,
        spec: RequestSpec,
        *,
        request_id: str | None = None,
        project_id: str | None = None,
        user_id: str | None = None,
    ) -> SchedulingRequest:
        """A request for ``spec``; ``project_id``/``user_id`` (the caller's context) stand in
        for the spec's own when it has none."""
        values = {f.name: getattr(spec, f.name) for f in fields(RequestSpec)}
        for name in _COPIED:
            values[name] = copy.deepcopy(values[name])
        return cls(
            **values,
            request_id=request_id,
            consumer_project_id=spec.project_id or project_id,
            consumer_user_id=spec.user_id or user_id,
        )

    def candidates_for(self, host_state: Any) -> list[dict[str, Any]]:
        """This request's remaining allocation requests for a host (empty if none)."""
        uuid = getattr(host_state, "uuid", None)
        return self.allocation_candidates.get(uuid, []) if uuid else []

    def set_host_limit(self, host_state: Any, name: str, value: Any) -> None:
        """Record a limit for this request on a host (what nova's filters wrote into
        ``host_state.limits[name]``); it goes into the host's Selection."""
        key = (host_state.host, host_state.nodename)
        self.host_limits.setdefault(key, {})[name] = value

    def limits_for(self, host_state: Any) -> dict[str, Any]:
        """The limits this request's filters recorded for a host."""
        return self.host_limits.get((host_state.host, host_state.nodename), {})

    @contextmanager
    def timed(self, step: str) -> Iterator[None]:
        """Add the time spent in the block to ``timings[step]``."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.timings[step] = self.timings.get(step, 0.0) + (time.perf_counter() - started)
