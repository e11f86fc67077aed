"""Where a request's allocation candidates come from: the provider view or Placement.

``CandidateSource.candidates(req, queries)`` answers the request's Placement queries from the
provider view when it can (and, with a feed that can prove it, only once the view holds every
change committed before the request arrived), else from ``GET /allocation_candidates``. It
records on the request who answered (``candidate_source``), why the view did not
(``view_declined``), the query and the counts, and raises NoValidHost when Placement refuses
the query, cannot be reached, or finds nothing (with the query term that emptied it).
``ask_placement_again`` says whether a NoValidHost reached on the view's candidates is asked
of Placement once more (the driver's retry).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from placement_client import query
from placement_client.api import (
    AllocationCandidates,
    Placement,
    PlacementClientError,
    PlacementError,
)
from placement_client.hint import placement_hint
from placement_client.view import unsupported_reason
from scheduler.conf import CONF
from scheduler.exceptions import NoValidHost
from scheduler.request import SchedulingRequest

LOG = logging.getLogger(__name__)


class CandidateSource:
    """The provider view, then Placement (see the module docstring). ``view_refresher``:
    the driver's provider view, or None (Placement answers every request); ``clock``: the
    clock of the requests' arrivals and deadlines."""

    def __init__(
        self,
        placement: Placement,
        view_refresher: Any = None,
        conf: Any = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.placement = placement
        self.view_refresher = view_refresher
        self.view = view_refresher.view if view_refresher is not None else None
        self.conf = conf if conf is not None else CONF
        self._clock = clock

    def start_view_check(self, req: SchedulingRequest) -> None:
        """Send the view's freshness check now, so that it runs in Placement's database
        while the request does other work (``candidates`` receives it)."""
        refresher = self.view_refresher
        if (
            refresher is not None
            and req.use_view
            and self.conf.scheduler.read_your_writes
            and refresher.fresh_per_request
        ):
            refresher.start_check(self._view_time_of_arrival(req))

    def candidates(self, req: SchedulingRequest, queries: list[Any]) -> AllocationCandidates:
        """The request's candidates (never empty: NoValidHost instead)."""
        candidates = self.from_view(req, queries)
        if candidates is None:
            results: list[AllocationCandidates] = []
            req.trace.candidate_source = "placement"
            with req.trace.timed("placement"):
                for q in queries:
                    try:
                        results.append(
                            self.placement.get_allocation_candidates(
                                q, request_id=req.request_id, not_before=req.arrived_at
                            )
                        )
                    except PlacementClientError as exc:
                        # (a 4xx: Placement is up and says the query is wrong; not an outage;
                        # a tool's request is that tool's to report)
                        log = LOG.error if req.purpose == "schedule" else LOG.debug
                        log("Placement refused the allocation candidates query: %s", exc)
                        raise NoValidHost(
                            f"Placement refused the query {q.describe()}: {exc}",
                            "placement_refused",
                        ) from exc
                    except PlacementError as exc:
                        log = LOG.error if req.purpose == "schedule" else LOG.debug
                        log("Failed to get allocation candidates from Placement: %s", exc)
                        raise NoValidHost(
                            f"Placement could not be asked for candidates: {exc}",
                            "placement_unreachable",
                        ) from exc
            candidates = results[0] if len(results) == 1 else query.merge_candidates(results)
        req.trace.query_text = " | ".join(q.describe() for q in queries)
        req.trace.candidate_count = len(candidates.allocation_requests)
        req.trace.provider_count = len(candidates.provider_summaries)
        if not candidates.allocation_requests:
            LOG.info(
                "Got no allocation candidates from the Placement API (query: %s)",
                req.trace.query_text,
            )
            reason = f"Placement returned no allocation candidates for {req.trace.query_text}"
            # which single term emptied it: a few more queries, only now, never an error
            with req.trace.timed("placement_bisection"):
                req.trace.placement_hint = placement_hint(
                    self.placement, queries[0], request_id=req.request_id
                )
            if req.trace.placement_hint:
                reason += "; " + req.trace.placement_hint
            raise NoValidHost(reason, "no_candidates")
        return candidates

    def ask_placement_again(self, req: SchedulingRequest, exc: NoValidHost) -> bool:
        """Whether a NoValidHost reached on the view's candidates is asked again of
        Placement (not past the deadline, not with Placement unreachable)."""
        if req.trace.candidate_source != "view" or req.trace.placement_unreachable:
            return False
        if self._clock() >= req.deadline:
            return False
        LOG.info(
            "No valid host from the provider view's candidates (%s); asking Placement",
            exc.reason,
        )
        return True

    def from_view(self, req: SchedulingRequest, queries: list[Any]) -> AllocationCandidates | None:
        """The candidates of ``queries`` from the provider view, or None (the reason is kept
        in ``req.trace.view_declined``) when the view cannot answer them all or finds none: an
        empty answer is always Placement's to give."""
        view = self.view
        if view is None or not req.use_view:
            return None
        with req.trace.timed("view"):
            check = self._view_check_wanted(queries)
            while True:
                # asked before its freshness check is answered (the check's statement runs
                # in Placement's database meanwhile); a view that a read changed while it
                # was asked is asked again, fresh by then
                applied = view.reads_applied
                answers = self._ask_view(req, view, queries)
                if answers is None:
                    return None
                if not check:
                    break
                if not self._view_fresh_for(req):
                    return None  # (why: req.trace.view_declined) Placement answers
                check = False
                if view.reads_applied == applied:
                    break
            candidates = answers[0] if len(answers) == 1 else query.merge_candidates(answers)
        if candidates.empty:
            req.trace.view_declined = "the provider view found no candidate"
            LOG.debug("The provider view found no candidate; asking Placement")
            return None
        req.trace.candidate_source = "view"
        if LOG.isEnabledFor(logging.DEBUG):
            LOG.debug(
                "%d allocation candidate(s) from the provider view (%s feed, %.1f s old)",
                len(candidates.allocation_requests),
                view.source,
                req.trace.view_age or 0.0,
            )
        return candidates

    def _view_time_of_arrival(self, req: SchedulingRequest) -> float:
        """The request's arrival on the provider view's clock."""
        now = self.view.now()
        if req.arrived_at is None:
            return now
        return now - max(0.0, self._clock() - req.arrived_at)

    def _ask_view(
        self, req: SchedulingRequest, view: Any, queries: list[Any]
    ) -> list[AllocationCandidates] | None:
        """The view's candidates for each query, or None (why: ``req.trace.view_declined``)."""
        answers = []
        for q in queries:
            try:
                answer = view.candidates(q)
            except Exception:  # a fault of the view must not fail the request
                LOG.exception("The provider view failed to answer; asking Placement")
                req.trace.view_declined = "the provider view failed (see the log)"
                return None
            req.trace.view_age = answer.age
            if answer.candidates is None:
                req.trace.view_declined = answer.reason
                LOG.debug("Provider view not used: %s", answer.reason)
                return None
            answers.append(answer.candidates)
        return answers

    def _view_check_wanted(self, queries: list[Any]) -> bool:
        """Whether the view's answer must be proven fresh (``_view_fresh_for``): with a feed
        that can prove it (the database feed), unless ``read_your_writes`` is off or the
        view declines the queries itself."""
        refresher = self.view_refresher
        if refresher is None or not refresher.fresh_per_request:
            return False
        if not self.conf.scheduler.read_your_writes:
            return False  # the view as its last refresh left it
        return all(unsupported_reason(q) is None for q in queries)

    def _view_fresh_for(self, req: SchedulingRequest) -> bool:
        """Make the view hold every change committed before the request arrived: nova
        reads Placement afresh for each request, and so must the view. False (the reason
        in ``req.trace.view_declined``): ask Placement."""
        declined = self.view_refresher.ensure_fresh(self._view_time_of_arrival(req))
        if declined is None:
            return True
        req.trace.view_declined = declined
        LOG.debug("Provider view not used: %s", declined)
        return False
