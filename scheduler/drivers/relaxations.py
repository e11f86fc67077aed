"""The smallest change that would let a request the filters emptied fit somewhere.

NoValidHost already says which filter removed how many hosts. An operator's next question
is what would have to change for the boot to fit. This module answers with single changes an
operator or a user can make, each tried on its own with the scheduler's own steps, claiming
nothing:

1. **a host enabled**: a host the ComputeFilter removed because its service is disabled,
   whose compute is up (a down host is never offered: enabling it would not make it take a
   boot), on the same candidates;
2. **one scheduler hint** left out;
3. **the availability zone** left out;
4. **one image property** left out (what the ImagePropertiesFilter compares);
5. **one flavor extra spec** left out.

Changes of the request (2-5) ask for its candidates again (an extra spec can change the
Placement query). Dropping a filter is not offered: it is not a change of one boot, and the
NoValidHost already names the filters in the way. Every change that makes the first
instance fit is reported, in that order, with how many hosts it would open and the ones it
would then choose (the best weighed, at most ``BEST_HOSTS``); a host the request excludes
(``ignore_hosts``, a requested destination) is never named. The search stops at its time
budget, and says so. It is computed only on a NoValidHost the filters caused: by explain at
once, and for the decision record on a thread of its own after the reply is sent.
"""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from oslo_utils import timeutils

from scheduler.exceptions import NoValidHost
from scheduler.hosts.table import service_is_up
from scheduler.objects import RequestSpec

LOG = logging.getLogger(__name__)

# seconds the search may take; the hosts named per change
BUDGET_SECONDS = 2.0
BEST_HOSTS = 3
# hints nova sets for itself, not the user's
_INTERNAL_HINTS = frozenset({"_nova_check_type"})


# how each kind of change reads
_PHRASES = {
    "enable_host": "enable host {}",
    "hint": "without hint {}",
    "availability_zone": "without availability zone {}",
    "image_property": "without image property {}",
    "extra_spec": "without extra spec {}",
}


@dataclass(slots=True)
class Relaxation:
    """One change, how many hosts it opens, and the ones the request would then choose,
    best first."""

    kind: str  # "enable_host", "hint", "availability_zone", "image_property", "extra_spec"
    name: str  # the host, the hint's key, the zone, the property's or extra spec's key
    hosts: list[dict[str, str]] = field(default_factory=list)  # host, node
    opened: int = 0  # hosts the request would then pass the filters on

    def as_dict(self) -> dict[str, Any]:
        return {
            "change": _PHRASES[self.kind].format(self.name),
            "kind": self.kind,
            "name": self.name,
            "hosts_opened": self.opened,
            "hosts": list(self.hosts),
        }


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

    def in_time() -> bool:
        if time.monotonic() < deadline:
            return True
        out.complete = False
        return False

    enableable = _enableable(driver, report)
    if enableable and in_time():
        # the disabled hosts through every other filter at once; each that passes is a
        # change of its own, the best weighed first
        out.tried += 1
        req = driver.new_request(context, spec)
        req.scratch.allocation_candidates = dict(answered)
        step = driver.framework.step(req, enableable, 0, without="ComputeFilter")
        for host in step.hosts[:BEST_HOSTS]:
            where = [{"host": host.host, "node": host.nodename}]
            out.found.append(Relaxation("enable_host", host.host, where, 1))
    for kind, name, variant in _spec_changes(spec):
        if not in_time():
            break
        out.tried += 1
        req = driver.new_request(context, variant)
        try:
            candidates = hosts_of(req)
        except NoValidHost:
            continue
        opened, best = _best(driver, req, candidates)
        if best:
            out.found.append(Relaxation(kind, name, best, opened))
    out.elapsed = time.monotonic() - started
    return out


def _best(driver: Any, req: Any, hosts: list[Any]) -> tuple[int, list[dict[str, str]]]:
    """How many hosts the request's first instance passes on, and the best of them, through
    the driver's framework: narrowed (a host the request excludes is never offered),
    filtered and weighed; none: the change does not help."""
    if not hosts:
        return 0, []
    step = driver.framework.step(req, hosts, 0)
    best = step.hosts[:BEST_HOSTS]
    return len(step.hosts), [{"host": h.host, "node": h.nodename} for h in best]


def _enableable(driver: Any, report: Any) -> list[Any]:
    """The hosts the ComputeFilter removed for a disabled service whose compute is up."""
    if report is None:
        return []
    now = timeutils.utcnow()
    down_time = driver.conf.service_down_time
    out = []
    for step in report.steps:
        if step.name != "ComputeFilter":
            continue
        for host, _ in step.removed:
            service = host.service or {}
            if service.get("disabled") and service_is_up(
                {**service, "disabled": False}, now, down_time
            ):
                out.append(host)
    return out


def _spec_changes(spec: RequestSpec) -> list[tuple[str, str, RequestSpec]]:
    """Each single change of the spec: a hint left out, the AZ left out, an image property
    left out, an extra spec left out (in that order)."""
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
    properties = (spec.image.properties or {}) if spec.image is not None else {}
    for key in sorted(properties):
        variant = copy.deepcopy(spec)
        variant.image.properties.pop(key, None)
        out.append(("image_property", key, variant))
    for key in sorted(spec.flavor.extra_specs or {}):
        variant = copy.deepcopy(spec)
        variant.flavor.extra_specs.pop(key, None)
        out.append(("extra_spec", key, variant))
    return out
