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
5. **one flavor extra spec** left out;
6. **a smaller amount** of the flavor's RAM, vCPUs or root disk: the largest that fits
   (asked of Placement: its answer for the amount at 1 says what each host has free).

Changes of the request (2-6) ask for its candidates again (an extra spec can change the
Placement query). Dropping a filter is not offered: it is not a change of one boot, and the
NoValidHost already names the filters in the way. Every change that makes the first
instance fit is reported, in that order, with how many hosts it would open and the ones it
would then choose (the best weighed, at most ``BEST_HOSTS``); a host the request excludes
(``ignore_hosts``, a requested destination) is never named. The search stops at its time
budget, and says so. It is computed on a NoValidHost the filters caused or Placement's empty
answer: by explain at once, and for the decision record on a thread of its own after the
reply is sent.
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
# the search's requests: their Placement failures are the search's to report (the request it
# looks for a change of has logged them)
SEARCH = "smallest_change"

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
    "smaller": "with {}",
}
# the flavor's amounts a smaller one of which may fit, and the class Placement counts them in
_AMOUNTS = (("memory_mb", "MEMORY_MB"), ("vcpus", "VCPU"), ("root_gb", "DISK_GB"))


@dataclass(slots=True)
class Relaxation:
    """One change, how many hosts it opens, and the ones the request would then choose,
    best first."""

    kind: str  # "enable_host", "hint", "availability_zone", "image_property", "extra_spec"
    name: str  # the host, the hint's key, the zone, the property's or extra spec's key
    hosts: list[dict[str, str]] = field(default_factory=list)  # host, node
    opened: int = 0  # hosts the request would then pass the filters on
    amount: int | None = None  # a smaller amount: the largest that fits
    asked: int | None = None  # and the amount asked

    def as_dict(self) -> dict[str, Any]:
        name = self.name
        if self.kind == "smaller":
            name = f"{self.name} = {self.amount}, the largest that fits (asked {self.asked})"
        out = {
            "change": _PHRASES[self.kind].format(name),
            "kind": self.kind,
            "name": self.name,
            "hosts_opened": self.opened,
            "hosts": list(self.hosts),
        }
        if self.kind == "smaller":
            out.update(amount=self.amount, asked=self.asked)
        return out


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
    base = driver.new_request(context, spec, purpose=SEARCH)
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
        req = driver.new_request(context, spec, purpose=SEARCH)
        req.scratch.allocation_candidates = dict(answered)
        step = driver.framework.step(req, enableable, 0, without="ComputeFilter")
        for host in step.hosts[:BEST_HOSTS]:
            where = [{"host": host.host, "node": host.nodename}]
            out.found.append(Relaxation("enable_host", host.host, where, 1))
    for kind, name, variant in _spec_changes(spec):
        if not in_time():
            break
        out.tried += 1
        req = driver.new_request(context, variant, purpose=SEARCH)
        try:
            candidates = hosts_of(req)
        except NoValidHost:
            continue
        opened, best = _best(driver, req, candidates)
        if best:
            out.found.append(Relaxation(kind, name, best, opened))
    if not all_hosts:
        # the amounts Placement counts: the largest of each that fits, from its answer
        for name, rc in _AMOUNTS:
            if not in_time():
                break
            found = _smaller(driver, context, spec, name, rc)
            if found is False:
                continue
            out.tried += 1
            if found is not None:
                out.found.append(found)
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


def _smaller(driver: Any, context: Any, spec: RequestSpec, name: str, rc: str) -> Any:
    """The largest amount of the flavor's ``name`` (Placement's class ``rc``) that fits, as
    a Relaxation with the hosts it opens; None: none fits; False: not tried (the amount is
    1 or less, a boot from volume's root disk). One query with the amount at 1 gives every
    host that could take some and, in its provider summaries, what each has free; the
    largest free amount among the hosts that pass the filters is then asked for in full."""
    asked = getattr(spec.flavor, name) or 0
    if asked <= 1 or (rc == "DISK_GB" and spec.is_bfv):
        return False
    other_disk = 0
    if rc == "DISK_GB":
        flavor = spec.flavor
        other_disk = (flavor.ephemeral_gb or 0) + -(-(flavor.swap or 0) // 1024)
    probe = copy.deepcopy(spec)
    setattr(probe.flavor, name, 1)
    req = driver.new_request(context, probe, purpose=SEARCH)
    try:
        hosts = driver.placement_hosts(req)
    except NoValidHost:
        return None
    summaries = req.scratch.provider_summaries or {}
    room = 0
    for host in driver.framework.step(req, hosts, 0).hosts:
        resources = (summaries.get(host.uuid) or {}).get("resources") or {}
        # a dedicated-CPU flavor's vCPUs are PCPU in Placement
        entry = resources.get(rc) or (resources.get("PCPU") if rc == "VCPU" else None)
        if entry:
            room = max(room, int(entry.get("capacity", 0)) - int(entry.get("used", 0)))
    largest = min(room - other_disk, asked - 1)
    if largest < 1:
        return None
    variant = copy.deepcopy(spec)
    setattr(variant.flavor, name, largest)
    req = driver.new_request(context, variant, purpose=SEARCH)
    try:
        opened, best = _best(driver, req, driver.placement_hosts(req))
    except NoValidHost:
        return None
    if not best:
        return None
    return Relaxation("smaller", name, best, opened, amount=largest, asked=asked)


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
