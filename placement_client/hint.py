"""The Placement hint: when GET /allocation_candidates comes back empty, ask Placement again
without one query term at a time (a trait, an aggregate, a resource amount ...) and name the
terms whose absence would have given candidates.

At most ``MAX_BISECTION_QUERIES`` extra queries and ``BISECTION_TIME_BUDGET`` seconds, only on
that failure; any error just leaves the hint out. The driver puts the hint into NoValidHost,
and explain shows it.
"""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from placement_client.api import (
    AllocationCandidates,
    AllocationCandidatesQuery,
    PlacementClientError,
)

LOG = logging.getLogger(__name__)

# Cost bound of the Placement bisection (only run when Placement returned nothing).
MAX_BISECTION_QUERIES = 8
BISECTION_TIME_BUDGET = 5.0  # seconds (checked between queries)


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
