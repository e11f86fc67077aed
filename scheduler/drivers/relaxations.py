"""The smallest change that would let a request the filters emptied fit somewhere.

NoValidHost already says which filter removed how many hosts. An operator's next question
is what would have to change for the boot to fit. This module answers with single changes,
each tried on its own with the scheduler's own steps, claiming nothing:

1. **one filter dropped** (each filter that removed a host, on the same candidates: no new
   Placement query);
2. **one scheduler hint** left out;
3. **the availability zone** left out;
4. **one flavor extra spec** left out (this one changes the Placement query: the
   candidates are asked again).

Every change that makes the first instance fit is reported, in that order, with the hosts
it would then choose (the best weighed, at most ``BEST_HOSTS``). The search stops at its time
budget, and says so. It is computed only on a NoValidHost the filters caused: by explain at
once, and for the decision record on a thread of its own after the reply is sent.
"""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from scheduler.exceptions import NoValidHost
from scheduler.objects import RequestSpec

LOG = logging.getLogger(__name__)

# seconds the search may take; the hosts named per change
BUDGET_SECONDS = 2.0
BEST_HOSTS = 3
# hints nova sets for itself, not the user's
_INTERNAL_HINTS = frozenset({"_nova_check_type"})


@dataclass(slots=True)
class Relaxation:
    """One change and the hosts the request would then choose, best first."""

    kind: str  # "filter", "hint", "availability_zone", "extra_spec"
    name: str  # the filter's name, the hint's key, the zone, the extra spec's key
    hosts: list[dict[str, str]] = field(default_factory=list)  # host, node

    def as_dict(self) -> dict[str, Any]:
        return {"change": f"without {self.kind} {self.name}", "kind": self.kind,
                "name": self.name, "hosts": list(self.hosts)}  # fmt: skip


@dataclass(slots=True)
class Search:
    """What the search found, and whether it ran out of time before trying every change."""

    found: list[Relaxation] = field(default_factory=list)
    tried: int = 0
    complete: bool = True
    elapsed: float = 0.0
    # False: the changes were tried on every host of the cells, without asking Placement
    # (explain --all-hosts), so an extra spec left out says what the filters would do only
    placement_asked: bool = True

    def as_dict(self) -> dict[str, Any]:
        return {
            "found": [r.as_dict() for r in self.found],
            "tried": self.tried,
            "complete": self.complete,
            "elapsed_ms": round(self.elapsed * 1000, 3),
            "placement_asked": self.placement_asked,
        }


def search(
    driver: Any,
    context: Any,
    spec: RequestSpec,
    *,
    budget: float = BUDGET_SECONDS,
    all_hosts: bool = False,
) -> Search:
    """Try each single change to ``spec`` (see the module docstring) within ``budget``
    seconds. ``spec`` is not changed. ``all_hosts``: on every host of the cells, without
    Placement (as ``explain --all-hosts`` decides)."""
    started = time.monotonic()
    deadline = started + budget
    out = Search(placement_asked=not all_hosts)
    hosts_of = driver.all_hosts if all_hosts else driver.placement_hosts
    base = driver.new_request(context, spec)
    try:
        hosts = hosts_of(base)
    except NoValidHost:
        hosts = []  # Placement (or a prefilter) refused: only the spec's changes can help
    answered = dict(base.scratch.allocation_candidates)
    report = driver.framework.filtered(base, hosts) if hosts else None
    if report is not None and report.hosts:
        out.elapsed = time.monotonic() - started
        return out  # it fits: nothing to relax
    steps = [] if report is None else report.steps
    culprits = [s.name for s in steps if s.hosts_in and s.hosts_out < s.hosts_in]

    def in_time() -> bool:
        if time.monotonic() < deadline:
            return True
        out.complete = False
        return False

    for name in culprits:
        if not in_time():
            break
        out.tried += 1
        req = driver.new_request(context, spec)
        req.scratch.allocation_candidates = dict(answered)
        best = _best(driver, req, hosts, without=name)
        if best:
            out.found.append(Relaxation("filter", name, best))
    for kind, name, variant in _spec_changes(spec):
        if not in_time():
            break
        out.tried += 1
        req = driver.new_request(context, variant)
        try:
            candidates = hosts_of(req)
        except NoValidHost:
            continue
        best = _best(driver, req, candidates)
        if best:
            out.found.append(Relaxation(kind, name, best))
    out.elapsed = time.monotonic() - started
    return out


def _best(
    driver: Any, req: Any, hosts: list[Any], without: str | None = None
) -> list[dict[str, str]]:
    """The best hosts of the request's first instance through the driver's framework:
    narrowed (a host the request excludes is never offered), filtered (``without``: that
    filter left out) and weighed; none: the change does not help."""
    best = driver.framework.best(req, hosts, BEST_HOSTS, without=without)
    return [{"host": h.host, "node": h.nodename} for h in best]


def _spec_changes(spec: RequestSpec) -> list[tuple[str, str, RequestSpec]]:
    """Each single change of the spec: a hint left out, the AZ left out, an extra spec left
    out (in that order)."""
    out = []
    for key in sorted(spec.scheduler_hints or {}):
        if key in _INTERNAL_HINTS:
            continue
        variant = copy.deepcopy(spec)
        variant.scheduler_hints.pop(key, None)
        out.append(("hint", key, variant))
    if spec.availability_zone:
        variant = copy.deepcopy(spec)
        variant.availability_zone = None
        out.append(("availability_zone", spec.availability_zone, variant))
    for key in sorted(spec.flavor.extra_specs or {}):
        variant = copy.deepcopy(spec)
        variant.flavor.extra_specs.pop(key, None)
        out.append(("extra_spec", key, variant))
    return out
