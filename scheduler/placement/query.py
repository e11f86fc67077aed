"""RequestSpec → GET /allocation_candidates query, as nova's ``ResourceRequest`` builds it.

What goes in (nova's ``resources_from_request_spec``):

* the unsuffixed group: VCPU = flavor.vcpus, MEMORY_MB, DISK_GB = ephemeral + swap (MiB,
  rounded up to GiB) + root (unless boot from volume); zero amounts are dropped;
* flavor extra specs ``resources[$S]:RC=N`` (unsuffixed ones replace the standard amounts),
  ``trait[$S]:T=required|forbidden`` and ``group_policy``; image ``traits_required``;
* CPU pinning: ``hw:cpu_policy=dedicated`` asks for PCPU instead of VCPU (plus one PCPU for
  ``hw:emulator_threads_policy=isolate``), ``mixed`` splits per ``hw:cpu_dedicated_mask``,
  ``hw:cpu_thread_policy`` require/isolate requires/forbids HW_CPU_HYPERTHREADING; unless
  ``[workarounds] disable_fallback_pcpu_query``, a second query without that translation
  (plain VCPU) is returned too and the two answers are merged with ``merge_candidates``;
* ``requested_resources`` groups (suffix = requester_id), ``request_level_params``
  (root_required, root_forbidden, same_subtree), requested_destination aggregates;
* ``limit`` = ``[scheduler] max_placement_results``, dropped for affinity-type hints.

Not translated (as yet): memory encryption, vPMEM, vTPM, PCI-NUMA, secure boot, maxphysaddr
and stateless-firmware traits, and ``hw:cpu_realtime_mask`` as the mixed-policy mask.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence
from typing import Any

from oslo_config import cfg

from placement_client import AllocationCandidates, AllocationCandidatesQuery, QueryGroup
from scheduler.conf import CONF
from scheduler.exceptions import InvalidRequest
from scheduler.objects import RequestGroup, RequestSpec

LOG = logging.getLogger(__name__)

# resources[$S]:RC=N and trait[$S]:T=required|forbidden (nova's XS_KEYPAT)
_EXTRA_SPEC_KEY = re.compile(r"^(resources|trait)([a-zA-Z0-9_-]{1,64})?:(.+)$")
_RESOURCE_CLASS = re.compile(r"^(?:[A-Z][A-Z0-9_]*)$")
_GROUP_POLICIES = ("none", "isolate")
# hints under which nova asks for every candidate, so that the filters see all hosts
_UNLIMITED_HINTS = ("group", "same_host", "different_host")
_HYPERTHREADING = "HW_CPU_HYPERTHREADING"


def build_queries(
    spec: RequestSpec,
    conf: cfg.ConfigOpts = CONF,
    in_tree: str | None = None,
    unlimited: bool = False,
) -> list[AllocationCandidatesQuery]:
    """The Placement queries for ``spec``: one, or two when a dedicated-CPU flavor also gets
    the VCPU fallback query (ask both, merge the answers with ``merge_candidates``).

    ``in_tree``: restrict the unsuffixed group to this provider tree (a forced or requested
    host with a single node). ``unlimited``: send no ``limit`` (nova does so when a forced
    host has several nodes). Raises ``InvalidRequest`` for malformed extra specs.
    """
    query = _build(spec, conf, in_tree, unlimited, translate_pinning=True)
    queries = [query]
    if _pinning_translated(spec) and not conf.workarounds.disable_fallback_pcpu_query:
        fallback = _build(spec, conf, in_tree, unlimited, translate_pinning=False)
        if fallback.to_params() != query.to_params():
            queries.append(fallback)
    return queries


def merge_candidates(answers: Sequence[AllocationCandidates]) -> AllocationCandidates:
    """One answer from several (the PCPU query and its VCPU fallback): allocation requests
    in order without duplicates, provider summaries united."""
    answers = [a for a in answers if a is not None]
    if len(answers) == 1:
        return answers[0]
    seen: set[tuple] = set()
    requests: list[dict[str, Any]] = []
    summaries: dict[str, dict[str, Any]] = {}
    elapsed = 0.0
    for answer in answers:
        elapsed += answer.elapsed
        for request in answer.allocation_requests:
            key = _request_key(request)
            if key not in seen:
                seen.add(key)
                requests.append(request)
        for rp, summary in answer.provider_summaries.items():
            summaries.setdefault(rp, summary)
    return AllocationCandidates(requests, summaries, elapsed)


def _request_key(request: dict[str, Any]) -> tuple:
    """A hashable identity of an allocation request (cheaper than serializing it)."""
    allocations = tuple(
        (rp, tuple(sorted((a.get("resources") or {}).items())))
        for rp, a in sorted(request.get("allocations", {}).items())
    )
    mappings = tuple(
        (suffix, tuple(rps)) for suffix, rps in sorted((request.get("mappings") or {}).items())
    )
    return allocations, mappings


# -- building ----------------------------------------------------------------------------------
def _build(
    spec: RequestSpec,
    conf: cfg.ConfigOpts,
    in_tree: str | None,
    unlimited: bool,
    translate_pinning: bool,
) -> AllocationCandidatesQuery:
    flavor = spec.flavor
    extra_specs = flavor.extra_specs or {}
    query = AllocationCandidatesQuery()
    base = query.group("")
    base.resources.update(_standard_resources(spec))

    flavor_suffixes: set[str] = set()
    explicit_cpu = False
    for key, value in sorted(extra_specs.items()):
        match = _EXTRA_SPEC_KEY.match(key)
        if match is None:
            continue
        kind, suffix, name = match.group(1), match.group(2) or "", match.group(3)
        group = query.group(suffix)
        if suffix:
            flavor_suffixes.add(suffix)
        if kind == "resources":
            if not _RESOURCE_CLASS.match(name):
                raise InvalidRequest(
                    f"Flavor extra spec {key!r}: {name!r} is not a resource class name "
                    "(a standard class such as VCPU, or CUSTOM_*)"
                )
            group.resources[name] = _amount(key, value)
            if not suffix and name in ("VCPU", "PCPU"):
                explicit_cpu = True
        else:
            if value == "required":
                group.required_traits.add(name)
            elif value == "forbidden":
                group.forbidden_traits.add(name)
            else:
                LOG.warning(
                    "Ignoring flavor extra spec %s=%s: the value must be 'required' or 'forbidden'",
                    key,
                    value,
                )

    policy = extra_specs.get("group_policy")
    if policy is not None:
        if policy not in _GROUP_POLICIES:
            raise InvalidRequest(
                f"Flavor extra spec group_policy={policy!r}: must be 'none' or 'isolate'"
            )
        query.group_policy = policy

    image_traits = _image_traits_required(spec)
    base.required_traits.update(image_traits)

    if translate_pinning and not explicit_cpu:
        _translate_pinning(spec, base)

    for request_group in spec.requested_resources or []:
        _add_requested_group(query, request_group)

    params = spec.request_level_params
    if params is not None:
        query.root_required.update(params.root_required)
        query.root_forbidden.update(params.root_forbidden)
        query.same_subtree.extend([list(s) for s in params.same_subtree])

    destination = spec.requested_destination
    if destination is not None:
        for or_set in destination.aggregates or []:
            uuids = [u.strip() for u in or_set.split(",") if u.strip()]
            if uuids:
                base.member_of.append(uuids)
        base.forbidden_aggregates.update(destination.forbidden_aggregates or ())

    if in_tree:
        base.in_tree = in_tree

    # Drop zero amounts ("resources:VCPU=0" removes VCPU from the query, as in nova).
    for group in query.groups:
        for rc in [rc for rc, n in group.resources.items() if not n]:
            del group.resources[rc]

    if not unlimited and not _has_unlimited_hint(spec):
        query.limit = conf.scheduler.max_placement_results

    suffixed = [g for g in query.effective_groups() if g.suffix]
    if len(suffixed) >= 2 and not query.group_policy:
        from_flavor = sum(1 for g in suffixed if g.suffix in flavor_suffixes)
        LOG.warning(
            "The placement query has %d numbered request groups but the flavor sets no "
            "group_policy. Set group_policy=none in the flavor if the groups may share a "
            "resource provider, or group_policy=isolate if they must not.",
            len(suffixed),
        )
        if from_flavor <= 1:
            # groups from ports or devices: nova defaults the policy rather than fail
            query.group_policy = "none"
    return query


def _standard_resources(spec: RequestSpec) -> dict[str, int]:
    flavor = spec.flavor
    disk = (flavor.ephemeral_gb or 0) + math.ceil((flavor.swap or 0) / 1024)
    if not spec.is_bfv:
        disk += flavor.root_gb or 0
    return {"VCPU": flavor.vcpus or 0, "MEMORY_MB": flavor.memory_mb or 0, "DISK_GB": disk}


def _amount(key: str, value: Any) -> int:
    try:
        amount = int(str(value).strip())
    except (TypeError, ValueError):
        raise InvalidRequest(
            f"Flavor extra spec {key}={value!r}: the amount must be a whole number"
        ) from None
    if amount < 0:
        raise InvalidRequest(f"Flavor extra spec {key}={value!r}: the amount must not be negative")
    return amount


def _image_traits_required(spec: RequestSpec) -> list[str]:
    if spec.image is None:
        return []
    traits = (spec.image.properties or {}).get("traits_required") or []
    if isinstance(traits, str):
        traits = [t.strip() for t in traits.split(",") if t.strip()]
    return list(traits)


def _add_requested_group(query: AllocationCandidatesQuery, request_group: RequestGroup) -> None:
    suffix = request_group.requester_id or ""
    if suffix and not re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", suffix):
        raise InvalidRequest(
            f"Request group requester_id {suffix!r} is not a valid Placement group suffix "
            "(1-64 characters of A-Z a-z 0-9 _ -)"
        )
    group = query.group(suffix)
    for rc, amount in (request_group.resources or {}).items():
        group.resources[rc] = group.resources.get(rc, 0) + int(amount)
    group.required_traits.update(request_group.required_traits or ())
    group.forbidden_traits.update(request_group.forbidden_traits or ())
    group.member_of.extend([list(a) for a in request_group.aggregates or [] if a])
    group.forbidden_aggregates.update(request_group.forbidden_aggregates or ())
    if request_group.in_tree:
        group.in_tree = request_group.in_tree


# -- CPU pinning -------------------------------------------------------------------------------
def _cpu_setting(spec: RequestSpec, flavor_key: str, image_key: str) -> str | None:
    value = (spec.flavor.extra_specs or {}).get(flavor_key)
    if value is None and spec.image is not None:
        value = (spec.image.properties or {}).get(image_key)
    return str(value).lower() if value is not None else None


def _pinning_translated(spec: RequestSpec) -> bool:
    """True if the first query asks for PCPU in place of VCPU."""
    extra_specs = spec.flavor.extra_specs or {}
    if "resources:VCPU" in extra_specs or "resources:PCPU" in extra_specs:
        return False
    return _cpu_setting(spec, "hw:cpu_policy", "hw_cpu_policy") in ("dedicated", "mixed")


def _translate_pinning(spec: RequestSpec, base: QueryGroup) -> None:
    policy = _cpu_setting(spec, "hw:cpu_policy", "hw_cpu_policy")
    if policy not in ("dedicated", "mixed"):
        return
    vcpus = spec.flavor.vcpus or 0
    if policy == "dedicated":
        pcpus, shared = vcpus, 0
    else:
        pcpus = _dedicated_count(spec, vcpus)
        shared = vcpus - pcpus
    extra_specs = spec.flavor.extra_specs or {}
    emulator = extra_specs.get("hw:emulator_threads_policy")
    if emulator is not None and str(emulator).lower() == "isolate":
        pcpus += 1
    base.resources["VCPU"] = shared
    base.resources["PCPU"] = pcpus
    thread_policy = _cpu_setting(spec, "hw:cpu_thread_policy", "hw_cpu_thread_policy")
    if thread_policy == "require":
        base.required_traits.add(_HYPERTHREADING)
    elif thread_policy == "isolate":
        base.forbidden_traits.add(_HYPERTHREADING)


def _dedicated_count(spec: RequestSpec, vcpus: int) -> int:
    """How many of the guest's CPUs a mixed policy pins (``hw:cpu_dedicated_mask``)."""
    mask = (spec.flavor.extra_specs or {}).get("hw:cpu_dedicated_mask")
    if not mask:
        raise InvalidRequest(
            "hw:cpu_policy=mixed needs hw:cpu_dedicated_mask (e.g. '^0' or '2-3') to say which "
            "guest CPUs are dedicated"
        )
    mask = str(mask).strip()
    try:
        if mask.startswith("^"):
            dedicated = set(range(vcpus)) - _parse_cpu_set(mask[1:])
        else:
            dedicated = _parse_cpu_set(mask)
    except ValueError:
        raise InvalidRequest(f"hw:cpu_dedicated_mask={mask!r} is not a CPU set") from None
    dedicated &= set(range(vcpus))
    if not dedicated or len(dedicated) >= vcpus:
        raise InvalidRequest(
            f"hw:cpu_dedicated_mask={mask!r} must leave at least one dedicated and one shared "
            f"CPU out of {vcpus}"
        )
    return len(dedicated)


def _parse_cpu_set(text: str) -> set[int]:
    """``"0-3,^2,5"`` → {0, 1, 3, 5}."""
    included: set[int] = set()
    excluded: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        target = included
        if part.startswith("^"):
            target, part = excluded, part[1:]
        if "-" in part:
            low, high = part.split("-", 1)
            start, end = int(low), int(high)
            if end < start:
                raise ValueError(part)
            target.update(range(start, end + 1))
        else:
            target.add(int(part))
    return included - excluded


def _has_unlimited_hint(spec: RequestSpec) -> bool:
    hints = spec.scheduler_hints or {}
    return any(hints.get(name) not in (None, [], "") for name in _UNLIMITED_HINTS)
