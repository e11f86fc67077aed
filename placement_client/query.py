"""RequestSpec → GET /allocation_candidates query, as nova 34's ``ResourceRequest`` builds it.

``build_queries`` asks Placement what nova's ``resources_from_request_spec`` followed by
``ResourceRequest.to_querystring`` asks, in nova's order (the order matters: later steps set
amounts that earlier ones asked for):

1. flavor extra specs ``resources[$S]:RC=N``, ``trait[$S]:T=required|forbidden`` and
   ``group_policy``; image ``traits_required`` (unsuffixed group);
2. CPU pinning (first query only): ``hw:cpu_policy=dedicated`` asks for ``PCPU`` =
   flavor vCPUs, ``mixed`` for ``PCPU`` = the CPUs of ``hw:cpu_dedicated_mask`` (or, without
   one, of ``hw:cpu_realtime_mask`` when ``hw:cpu_realtime`` is on) and ``VCPU`` = the rest,
   one more ``PCPU`` with ``hw:emulator_threads_policy=isolate``; ``hw:cpu_thread_policy``
   require/isolate requires/forbids ``HW_CPU_HYPERTHREADING``;
3. ``requested_resources`` groups (ports, PCI devices, accelerators; suffix = requester_id);
   PCI request groups of flavor aliases also require ``OWNER_NOVA`` once the
   ``owner_nova_filter`` prefilter has required it on the root (nova's filter tags both);
4. ``VCPU`` = flavor vCPUs unless some group asks for ``VCPU`` or ``PCPU`` (a flavor with
   ``resources:PCPU=N`` gets no ``VCPU``, nor does one with ``resources1:VCPU=N``);
   ``MEMORY_MB`` and ``DISK_GB`` (ephemeral + swap rounded up to GiB + root unless boot from
   volume) likewise unless some group asks for them;
5. memory encryption (``hw:mem_encryption`` / ``hw_mem_encryption``): ``MEM_ENCRYPTION_CONTEXT=1``
   and the model's trait (``HW_CPU_X86_AMD_SEV`` by default; ``hw:mem_encryption_model``);
   ``hw:pmem`` labels: ``CUSTOM_PMEM_NAMESPACE_<LABEL>``, one per label; vTPM
   (``hw:tpm_version``/``hw:tpm_model``, ``hw_tpm_*``): ``COMPUTE_SECURITY_TPM_<VERSION>`` and
   ``COMPUTE_SECURITY_TPM_<TIS|CRB>``; PCI NUMA policy ``socket``:
   ``COMPUTE_SOCKET_PCI_NUMA_AFFINITY``; secure boot ``required`` (``os:secure_boot`` /
   ``os_secure_boot``): ``COMPUTE_SECURITY_UEFI_SECURE_BOOT``; ``hw:maxphysaddr_mode``:
   ``COMPUTE_ADDRESS_SPACE_PASSTHROUGH|EMULATED``; stateless UEFI firmware
   (``hw_firmware_stateless``): ``COMPUTE_SECURITY_STATELESS_FIRMWARE``;
6. zero amounts and then empty groups are dropped; ``request_level_params`` (root_required,
   root_forbidden, same_subtree), requested_destination aggregates and ``in_tree`` are added;
   ``limit`` = ``[scheduler] max_placement_results``, none for the ``group``, ``same_host``
   and ``different_host`` hints; two or more numbered groups without ``group_policy`` get
   ``none`` unless two of them come from the flavor.

With ``hw:cpu_policy=dedicated`` (flavor or image) a second query without step 2 is returned
too, unless ``[workarounds] disable_fallback_pcpu_query``: hosts still counting pinned CPUs
as VCPU answer it, and ``merge_candidates`` joins the two answers. ``mixed`` has no such
fallback, as in nova.

nova sends both queries and merges the candidates of those Placement takes; Placement
refuses (400) a query with a group that asks for no resources, which nova writes as
``resources$S=`` (a flavor's ``trait1:`` without ``resources1:``, a port's group of zero
amounts, an unnumbered group whose standard amounts are all zero, left with traits,
aggregates or ``in_tree``), or with a group that requires and forbids one trait (an image's
``HW_CPU_HYPERTHREADING`` and ``hw:cpu_thread_policy=isolate``). ``build_queries`` returns
only the queries Placement would take; when it takes neither, the first one is returned for
Placement to refuse, or NoValidHost is raised where Placement would take our form of it (our
query string leaves out a group with neither resources nor traits, aggregates and tree with
it, and Placement takes a resourceless group that a same_subtree names).

Where nova refuses the request (a flavor/image conflict, a TPM model CRB with version 1.2,
memory encryption without UEFI firmware, a dedicated mask that pins every CPU or none, an
image CPU policy the flavor forbids, two request groups with one suffix...), ``InvalidRequest``
is raised with the reason.

Deliberate differences from nova 34:

* A ``resources[$S]`` extra spec whose amount is not a whole number, or whose name is neither
  a standard resource class nor ``CUSTOM_`` followed by capitals, digits and ``_``, and a
  ``group_policy`` other than ``none`` or ``isolate``, are refused (``InvalidRequest`` naming
  the key). nova-api refuses these since microversion 2.86; nova's scheduler logs a warning
  and drops them, so an older flavor that asks for ``resources:CUSTOM_GPU=1.0`` would be
  placed on a host without the GPU and fail there. A negative amount, which nova-api
  accepts, is dropped with a warning as nova does.
* ``OWNER_NOVA`` is required on the PCI request groups whenever ``owner_nova_filter`` finds
  every nova-compute new enough. nova's filter skips them when the root already required
  ``OWNER_NOVA`` (an aggregate isolating on ``trait:OWNER_NOVA``): it returns early, and the
  same request asks differently depending on an aggregate's metadata. Computes that recent
  report ``OWNER_NOVA`` on their PCI providers, so only providers nova does not own are
  left out.
* When the fallback query is the same as the first one it is not sent (nova sends it and
  adds the same candidates twice).
"""

from __future__ import annotations

import logging
import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

import os_resource_classes as orc
import os_traits
from oslo_config import cfg
from oslo_utils import strutils

from placement_client.api import AllocationCandidates, AllocationCandidatesQuery, QueryGroup
from scheduler.conf import CONF
from scheduler.exceptions import InvalidRequest, NoValidHost
from scheduler.objects import RequestGroup, RequestSpec

LOG = logging.getLogger(__name__)

# resources[$S]:RC=N and trait[$S]:T=required|forbidden (nova's XS_KEYPAT)
_EXTRA_SPEC_KEY = re.compile(r"^(resources|trait)([a-zA-Z0-9_-]{1,64})?:(.*)$")
_CUSTOM_RESOURCE_CLASS = re.compile(r"^CUSTOM_[A-Z0-9_]+$")
_STANDARD_RESOURCE_CLASSES = frozenset(orc.STANDARDS)
_SUFFIX = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_GROUP_POLICIES = ("none", "isolate")
# hints under which nova asks for every candidate, so that the filters see all hosts
_UNLIMITED_HINTS = ("group", "same_host", "different_host")
# the request filter that requires OWNER_NOVA on the root (scheduler/drivers/request_filters.py)
_OWNER_NOVA_FILTER = "owner_nova_filter"

_CPU_POLICIES = ("dedicated", "shared", "mixed")
_CPU_THREAD_POLICIES = ("prefer", "isolate", "require")
_EMULATOR_THREADS_POLICIES = ("share", "isolate")
_THREAD_POLICY_TRAIT = {"require": "required", "isolate": "forbidden"}

_TPM_VERSION_TRAITS = {
    "1.2": os_traits.COMPUTE_SECURITY_TPM_1_2,
    "2.0": os_traits.COMPUTE_SECURITY_TPM_2_0,
}
_TPM_MODEL_TRAITS = {
    "tpm-tis": os_traits.COMPUTE_SECURITY_TPM_TIS,
    "tpm-crb": os_traits.COMPUTE_SECURITY_TPM_CRB,
}
_SECURE_BOOT_POLICIES = ("required", "disabled", "optional")
_MAXPHYSADDR_TRAITS = {
    "passthrough": os_traits.COMPUTE_ADDRESS_SPACE_PASSTHROUGH,
    "emulate": os_traits.COMPUTE_ADDRESS_SPACE_EMULATED,
}
_PCI_NUMA_POLICIES = ("required", "legacy", "preferred", "socket")
# memory encryption model -> (trait, needs stateless firmware); all need UEFI and q35
_MEM_ENCRYPTION_MODELS = {
    "amd-sev": (os_traits.HW_CPU_X86_AMD_SEV, False),
    "amd-sev-es": (os_traits.HW_CPU_X86_AMD_SEV_ES, False),
    "amd-sev-snp": (os_traits.HW_CPU_X86_AMD_SEV_SNP, True),
    "intel-tdx": (os_traits.HW_CPU_X86_INTEL_TDX, True),
}


def build_queries(
    spec: RequestSpec,
    conf: cfg.ConfigOpts = CONF,
    in_tree: str | None = None,
    unlimited: bool = False,
) -> list[AllocationCandidatesQuery]:
    """The Placement queries for ``spec``: one, or two when a dedicated-CPU request also gets
    the VCPU fallback query (ask both, merge the answers with ``merge_candidates``).

    ``in_tree``: restrict the unsuffixed group to this provider tree (a forced or requested
    host with a single node). ``unlimited``: send no ``limit`` (nova does so when a forced
    host has several nodes). Raises ``InvalidRequest`` where nova refuses the request, and
    NoValidHost where Placement would refuse nova's query but take ours (see the module
    docstring). ``spec`` is not changed.
    """
    query, dedicated = _build(spec, conf, in_tree, unlimited, translate_pinning=True)
    queries = [query]
    if dedicated and not conf.workarounds.disable_fallback_pcpu_query:
        fallback, _ = _build(spec, conf, in_tree, unlimited, translate_pinning=False)
        if fallback.to_params() != query.to_params():
            queries.append(fallback)
    # nova sends each query and merges the candidates of those Placement takes
    refusals = [_refused(q) for q in queries]
    taken = [q for q, refusal in zip(queries, refusals, strict=True) if refusal is None]
    if taken:
        for name, refusal in zip(("PCPU", "VCPU fallback"), refusals, strict=False):
            if refusal is not None:
                LOG.warning(
                    "Not asking Placement for the %s candidates: it would refuse the query, "
                    "as it refuses nova's (%s)",
                    name,
                    refusal,
                )
        return taken
    unseen = next((g for g in query.groups if _taken_without_resources(g, query)), None)
    if unseen is not None:
        raise NoValidHost(
            f"The Placement query has a request group that asks for no resources "
            f"({unseen.describe()}): Placement refuses such a query, as it refuses nova's. "
            "Leave the flavor's standard amounts (VCPU, MEMORY_MB, DISK_GB) non-zero, or give "
            "the group resources",
            "other",
        )
    # Placement refuses it with its own reason, as it refuses nova's
    return [query]


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


def _refused(query: AllocationCandidatesQuery) -> str | None:
    """Why Placement would refuse the query as nova writes it (400), or None: a group with
    no resources (nova writes ``resources$S=``, an empty value), or a group that requires and
    forbids one trait (an image's ``HW_CPU_HYPERTHREADING`` with an isolating thread
    policy)."""
    for group in query.groups:
        name = f"group {group.suffix}" if group.suffix else "the unnumbered group"
        if not group.resources:
            return f"{name} asks for no resources"
        both = group.required_traits & group.forbidden_traits
        if both:
            return f"{name} requires and forbids {', '.join(sorted(both))}"
    return None


def _taken_without_resources(group: QueryGroup, query: AllocationCandidatesQuery) -> bool:
    """A group without resources that Placement would take in our query string, although it
    refuses nova's: ours leaves out a group with neither resources nor traits (its aggregates
    and tree with it), and Placement takes a resourceless group that a same_subtree names."""
    if group.resources:
        return False
    in_subtree = any(group.suffix in subtree for subtree in query.same_subtree)
    return in_subtree or not (group.required_traits or group.forbidden_traits)


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
) -> tuple[AllocationCandidatesQuery, bool]:
    """One query, and whether the request pins all its CPUs (``dedicated``: nova's
    ``cpu_pinning_requested``, which calls for the fallback query)."""
    query = AllocationCandidatesQuery()
    flavor_suffixes = _add_flavor_extra_specs(query, spec)
    query.group("").required_traits.update(_image_traits_required(spec))
    dedicated = False
    if translate_pinning:
        dedicated = _translate_pinning(spec, query.group(""))
    for request_group in spec.requested_resources or []:
        _add_requested_group(query, request_group)
    _add_standard_resources(query, spec)

    base = query.group("")
    _translate_mem_encryption(spec, base)
    _translate_pmem(spec, base)
    _translate_vtpm(spec, base)
    _translate_pci_numa_policy(spec, base)
    _translate_secure_boot(spec, base)
    _translate_maxphysaddr(spec, base)
    if _stateless_firmware(_image_properties(spec)):
        base.required_traits.add(os_traits.COMPUTE_SECURITY_STATELESS_FIRMWARE)
    _require_owner_on_pci_groups(query, spec)
    _strip_zeros(query)

    params = spec.request_level_params
    if params is not None:
        query.root_required.update(params.root_required)
        query.root_forbidden.update(params.root_forbidden)
        query.same_subtree.extend([list(s) for s in params.same_subtree])
    _add_destination(query, spec)
    if in_tree:
        query.group("").in_tree = in_tree
    if not unlimited and not _has_unlimited_hint(spec):
        query.limit = conf.scheduler.max_placement_results
    _default_group_policy(query, len(flavor_suffixes))
    return query, dedicated


def _add_flavor_extra_specs(query: AllocationCandidatesQuery, spec: RequestSpec) -> set[str]:
    """``resources[$S]``, ``trait[$S]`` and ``group_policy``; returns the suffixes the flavor
    names (every one counts for the group policy default, even one left empty)."""
    suffixes: set[str] = set()
    for key, value in (spec.flavor.extra_specs or {}).items():
        if key == "group_policy":
            if value not in _GROUP_POLICIES:
                raise InvalidRequest(
                    f"Flavor extra spec group_policy={value!r}: must be 'none' or 'isolate'"
                )
            query.group_policy = value
            continue
        match = _EXTRA_SPEC_KEY.match(key)
        if match is None:
            continue
        kind, suffix, name = match.group(1), match.group(2) or "", match.group(3)
        group = query.group(suffix)
        if suffix:
            suffixes.add(suffix)
        if kind == "resources":
            amount = _amount(key, name, value)
            if amount is not None:
                group.resources[name] = amount
        elif value == "required":
            group.required_traits.add(name)
        elif value == "forbidden":
            group.forbidden_traits.add(name)
        else:
            LOG.warning(
                "Ignoring flavor extra spec %s=%s: the value must be 'required' or 'forbidden'",
                key,
                value,
            )
    return suffixes


def _amount(key: str, name: str, value: Any) -> int | None:
    """The amount of a ``resources`` extra spec; None (with a warning) for a negative one,
    which nova drops."""
    if name not in _STANDARD_RESOURCE_CLASSES and not _CUSTOM_RESOURCE_CLASS.match(name):
        raise InvalidRequest(
            f"Flavor extra spec {key!r}: {name!r} is not a resource class name "
            "(a standard class such as VCPU, or CUSTOM_*)"
        )
    try:
        amount = int(value)
    except (TypeError, ValueError):
        raise InvalidRequest(
            f"Flavor extra spec {key}={value!r}: the amount must be a whole number"
        ) from None
    if amount < 0:
        LOG.warning("Ignoring flavor extra spec %s=%s: amounts must not be negative", key, value)
        return None
    return amount


def _image_properties(spec: RequestSpec) -> dict[str, Any]:
    if spec.image is None:
        return {}
    return spec.image.properties or {}


def _image_traits_required(spec: RequestSpec) -> list[str]:
    traits = _image_properties(spec).get("traits_required") or []
    if isinstance(traits, str):
        traits = [t.strip() for t in traits.split(",") if t.strip()]
    return list(traits)


def _add_requested_group(query: AllocationCandidatesQuery, request_group: RequestGroup) -> None:
    """A group from outside the flavor (a port, a PCI device, a device profile), under its
    requester_id, which no other group may have."""
    suffix = request_group.requester_id or ""
    if not suffix:
        raise InvalidRequest(
            "A requested resource group has no requester_id: it would merge into the "
            "unnumbered group (nova refuses it as well)"
        )
    if not _SUFFIX.match(suffix):
        raise InvalidRequest(
            f"Request group requester_id {suffix!r} is not a valid Placement group suffix "
            "(1-64 characters of A-Z a-z 0-9 _ -)"
        )
    # the flavor's groups are all there already, empty ones included
    if any(g.suffix == suffix for g in query.groups):
        raise InvalidRequest(
            f"Request group suffix {suffix!r} is used twice (by the flavor's resources{suffix}/"
            f"trait{suffix} extra specs or by another requested group)"
        )
    group = QueryGroup(
        suffix=suffix,
        resources={rc: int(amount) for rc, amount in (request_group.resources or {}).items()},
        required_traits=set(request_group.required_traits or ()),
        forbidden_traits=set(request_group.forbidden_traits or ()),
        member_of=[list(a) for a in request_group.aggregates or []],
        forbidden_aggregates=set(request_group.forbidden_aggregates or ()),
        in_tree=request_group.in_tree,
    )
    if _is_empty(group):
        raise InvalidRequest(
            f"Request group {suffix!r} asks for no resources, traits or aggregates"
        )
    query.groups.append(group)


def _add_standard_resources(query: AllocationCandidatesQuery, spec: RequestSpec) -> None:
    """The flavor's VCPU, MEMORY_MB and DISK_GB, each unless some group asks for that class
    already (any amount, zero included; PCPU counts as VCPU)."""
    asked = {rc for group in query.groups for rc in group.resources}
    base = query.group("")
    flavor = spec.flavor
    if "VCPU" not in asked and "PCPU" not in asked:
        base.resources["VCPU"] = flavor.vcpus or 0
    if "MEMORY_MB" not in asked:
        base.resources["MEMORY_MB"] = flavor.memory_mb or 0
    if "DISK_GB" not in asked:
        disk = (flavor.ephemeral_gb or 0) + math.ceil((flavor.swap or 0) / 1024)
        if not spec.is_bfv:
            disk += flavor.root_gb or 0
        if disk:
            base.resources["DISK_GB"] = disk


def _is_empty(group: QueryGroup) -> bool:
    """nova's RequestGroup.is_empty: nothing to ask Placement (in_tree alone does not count)."""
    return not (
        group.resources
        or group.required_traits
        or group.forbidden_traits
        or group.member_of
        or group.forbidden_aggregates
    )


def _strip_zeros(query: AllocationCandidatesQuery) -> None:
    """Zero amounts go ("resources:VCPU=0" removes VCPU), then groups left asking nothing."""
    for group in query.groups:
        for rc in [rc for rc, n in group.resources.items() if n == 0]:
            del group.resources[rc]
    query.groups[:] = [g for g in query.groups if not _is_empty(g)]


def _add_destination(query: AllocationCandidatesQuery, spec: RequestSpec) -> None:
    destination = spec.requested_destination
    if destination is None:
        return
    if destination.aggregates:
        base = query.group("")
        base.member_of = []
        for or_set in destination.aggregates:
            uuids = [u.strip() for u in or_set.split(",") if u.strip()]
            if uuids:
                base.member_of.append(uuids)
    if destination.forbidden_aggregates:
        query.group("").forbidden_aggregates.update(destination.forbidden_aggregates)


def _has_unlimited_hint(spec: RequestSpec) -> bool:
    hints = spec.scheduler_hints or {}
    return any(name in hints for name in _UNLIMITED_HINTS)


def _default_group_policy(query: AllocationCandidatesQuery, flavor_groups: int) -> None:
    """Two or more numbered groups need a group_policy; nova defaults it to ``none`` when at
    most one of them comes from the flavor (ports or devices may share a provider), and
    otherwise leaves the query for Placement to refuse."""
    numbered = [g for g in query.groups if g.suffix]
    if len(numbered) < 2 or query.group_policy:
        return
    LOG.warning(
        "The placement query has %d numbered request groups but the flavor sets no "
        "group_policy. Set group_policy=none in the flavor if the groups may share a "
        "resource provider, or group_policy=isolate if they must not.",
        len(numbered),
    )
    if flavor_groups <= 1:
        query.group_policy = "none"


# -- flavor and image settings -----------------------------------------------------------------
def _flavor_and_image(spec: RequestSpec, key: str, prefix: str = "hw") -> tuple[Any, Any]:
    """``<prefix>:<key>`` of the flavor's extra specs and ``<prefix>_<key>`` of the image."""
    flavor_value = (spec.flavor.extra_specs or {}).get(f"{prefix}:{key}")
    image_value = _image_properties(spec).get(f"{prefix}_{key}")
    return flavor_value, image_value


def _conflict(key: str, flavor_value: Any, image_value: Any, prefix: str = "hw") -> InvalidRequest:
    return InvalidRequest(
        f"The flavor's {prefix}:{key}={flavor_value} conflicts with the image's "
        f"{prefix}_{key}={image_value}: set one of them, or both to the same value"
    )


def _unique_setting(spec: RequestSpec, key: str, prefix: str = "hw") -> Any:
    """The flavor's or else the image's value; both set and different is refused."""
    flavor_value, image_value = _flavor_and_image(spec, key, prefix)
    if flavor_value and image_value and flavor_value != image_value:
        raise _conflict(key, flavor_value, image_value, prefix)
    return flavor_value or image_value


def _as_bool(value: Any) -> bool:
    """An image boolean (nova's FlexibleBooleanField): a bool on the wire, text when typed
    in by hand."""
    if isinstance(value, str):
        return strutils.bool_from_string(value)
    return bool(value)


def _translate_vtpm(spec: RequestSpec, base: QueryGroup) -> None:
    """A vTPM needs a host with the version's and the model's (TIS by default) traits."""
    version = _unique_setting(spec, "tpm_version")
    if version is None:
        return
    if version not in _TPM_VERSION_TRAITS:
        raise InvalidRequest(
            f"Invalid TPM version {version!r} (hw:tpm_version / hw_tpm_version): "
            f"allowed values are {', '.join(_TPM_VERSION_TRAITS)}"
        )
    model = _unique_setting(spec, "tpm_model")
    if model is None:
        model = "tpm-tis"
    elif model not in _TPM_MODEL_TRAITS:
        raise InvalidRequest(
            f"Invalid TPM model {model!r} (hw:tpm_model / hw_tpm_model): "
            f"allowed values are {', '.join(_TPM_MODEL_TRAITS)}"
        )
    elif model == "tpm-crb" and version != "2.0":
        raise InvalidRequest(f"TPM model tpm-crb needs TPM version 2.0, not {version}")
    base.required_traits.update((_TPM_MODEL_TRAITS[model], _TPM_VERSION_TRAITS[version]))


def _translate_secure_boot(spec: RequestSpec, base: QueryGroup) -> None:
    policy = _unique_setting(spec, "secure_boot", prefix="os")
    if policy is None:
        return
    if policy not in _SECURE_BOOT_POLICIES:
        raise InvalidRequest(
            f"Invalid secure boot policy {policy!r} (os:secure_boot / os_secure_boot): "
            f"allowed values are {', '.join(_SECURE_BOOT_POLICIES)}"
        )
    if policy == "required":
        base.required_traits.add(os_traits.COMPUTE_SECURITY_UEFI_SECURE_BOOT)


def _translate_maxphysaddr(spec: RequestSpec, base: QueryGroup) -> None:
    """``hw:maxphysaddr_mode`` needs a host that can pass the address size through or emulate
    it (``hw:maxphysaddr_bits`` is the compute node's business, not Placement's)."""
    mode = _unique_setting(spec, "maxphysaddr_mode")
    if mode is None:
        return
    if mode not in _MAXPHYSADDR_TRAITS:
        raise InvalidRequest(
            f"Invalid maxphysaddr mode {mode!r} (hw:maxphysaddr_mode / hw_maxphysaddr_mode): "
            f"allowed values are {', '.join(_MAXPHYSADDR_TRAITS)}"
        )
    base.required_traits.add(_MAXPHYSADDR_TRAITS[mode])


def _translate_pci_numa_policy(spec: RequestSpec, base: QueryGroup) -> None:
    """Only the ``socket`` policy has a trait; the others are checked by the PCI filter."""
    flavor_policy, image_policy = _flavor_and_image(spec, "pci_numa_affinity_policy")
    if flavor_policy and image_policy and flavor_policy != image_policy:
        raise _conflict("pci_numa_affinity_policy", flavor_policy, image_policy)
    policy = flavor_policy or image_policy
    if policy and policy not in _PCI_NUMA_POLICIES:
        raise InvalidRequest(
            f"Invalid PCI NUMA affinity policy {policy!r}: allowed values are "
            f"{', '.join(_PCI_NUMA_POLICIES)}"
        )
    if policy == "socket":
        base.required_traits.add(os_traits.COMPUTE_SOCKET_PCI_NUMA_AFFINITY)


def _stateless_firmware(properties: dict[str, Any]) -> bool:
    """The image asks for stateless firmware (ignored, as by nova, unless it boots UEFI)."""
    value = properties.get("hw_firmware_stateless")
    if value is None:
        return False
    if properties.get("hw_firmware_type") != "uefi":
        LOG.warning(
            "The image property hw_firmware_stateless is set for a firmware type other than "
            "uefi: it is ignored"
        )
        return False
    return _as_bool(value)


def _translate_mem_encryption(spec: RequestSpec, base: QueryGroup) -> None:
    """Memory encryption takes one encryption context of the host and its model's CPU trait;
    the image must boot UEFI on a q35 machine, with stateless firmware for SEV-SNP and TDX,
    and without a video device for TDX."""
    flavor_text, image_value = _flavor_and_image(spec, "mem_encryption")
    flavor_wants = None if flavor_text is None else strutils.bool_from_string(flavor_text)
    image_wants = None if image_value is None else _as_bool(image_value)
    if not flavor_wants and not image_wants:
        return
    if flavor_wants is not None and image_wants is not None and flavor_wants != image_wants:
        raise _conflict("mem_encryption", flavor_text, image_value)

    flavor_model, image_model = _flavor_and_image(spec, "mem_encryption_model")
    if flavor_model is not None and image_model is not None and flavor_model != image_model:
        raise _conflict("mem_encryption_model", flavor_model, image_model)
    model = image_model or flavor_model or "amd-sev"
    if model not in _MEM_ENCRYPTION_MODELS:
        raise InvalidRequest(
            f"Invalid memory encryption model {model!r}: allowed values are "
            f"{', '.join(_MEM_ENCRYPTION_MODELS)}"
        )
    trait, needs_stateless = _MEM_ENCRYPTION_MODELS[model]
    properties = _image_properties(spec)
    if properties.get("hw_firmware_type") != "uefi":
        raise InvalidRequest(
            f"Memory encryption ({model}) needs the image property hw_firmware_type=uefi"
        )
    machine = properties.get("hw_machine_type")
    if machine is not None and "q35" not in machine:
        raise InvalidRequest(
            f"Memory encryption ({model}) needs a q35 machine type, not the image's "
            f"hw_machine_type={machine}"
        )
    if needs_stateless and not _stateless_firmware(properties):
        raise InvalidRequest(
            f"Memory encryption ({model}) needs stateless firmware: set the image property "
            "hw_firmware_stateless=true"
        )
    if model == "intel-tdx" and properties.get("hw_video_model") != "none":
        raise InvalidRequest(
            "Memory encryption (intel-tdx) cannot have a video device: set the image property "
            "hw_video_model=none"
        )
    base.resources[orc.MEM_ENCRYPTION_CONTEXT] = 1
    base.required_traits.add(trait)


def _translate_pmem(spec: RequestSpec, base: QueryGroup) -> None:
    """``hw:pmem=4GB,4GB,SMALL``: one ``CUSTOM_PMEM_NAMESPACE_<LABEL>`` per namespace."""
    text = (spec.flavor.extra_specs or {}).get("hw:pmem")
    if not text:
        return
    labels = [label.strip() for label in str(text).split(",") if label.strip()]
    counts = Counter(orc.normalize_name(f"PMEM_NAMESPACE_{label}") for label in labels)
    base.resources.update(counts)


def _require_owner_on_pci_groups(query: AllocationCandidatesQuery, spec: RequestSpec) -> None:
    """Once the ``owner_nova_filter`` prefilter has required ``OWNER_NOVA`` on the root (the
    request's trace lists it among the prefilters that changed it), the groups of the PCI devices
    that flavor aliases ask for (requester_id ``<request_id>-<n>``) require it too, so that
    no provider outside nova's (Cyborg's) serves them."""
    if _OWNER_NOVA_FILTER not in getattr(getattr(spec, "trace", None), "prefilters", ()):
        return
    request_ids = {r.request_id for r in spec.pci_requests if not r.is_port and r.request_id}
    if not request_ids:
        return
    requested = {g.requester_id for g in spec.requested_resources or [] if g.requester_id}
    for group in query.groups:
        if group.suffix in requested and group.suffix.rsplit("-", 1)[0] in request_ids:
            group.required_traits.add(os_traits.OWNER_NOVA)


# -- CPU pinning -------------------------------------------------------------------------------
def _translate_pinning(spec: RequestSpec, base: QueryGroup) -> bool:
    """PCPU (and VCPU for ``mixed``) for the pinning policies, the hyperthreading trait of
    the thread policy; True for ``dedicated``."""
    policy = _cpu_policy(spec)
    thread_policy = _cpu_thread_policy(spec)
    emulator_policy = _emulator_threads_policy(spec)
    vcpus = spec.flavor.vcpus or 0
    if policy in ("dedicated", "mixed"):
        if policy == "dedicated":
            pcpus = vcpus
        else:
            dedicated = _dedicated_cpus(spec)
            realtime = _realtime_cpus(spec, emulator_policy)
            pcpus = len(dedicated or realtime or ())
            base.resources["VCPU"] = vcpus - pcpus
        if emulator_policy == "isolate":
            pcpus += 1
        base.resources["PCPU"] = pcpus
    trait = _THREAD_POLICY_TRAIT.get(thread_policy or "")
    if trait == "required":
        base.required_traits.add(os_traits.HW_CPU_HYPERTHREADING)
    elif trait == "forbidden":
        base.forbidden_traits.add(os_traits.HW_CPU_HYPERTHREADING)
    return policy == "dedicated"


def _valid_flavor_and_image(
    spec: RequestSpec, key: str, allowed: Sequence[str], what: str
) -> tuple[Any, Any]:
    """``_flavor_and_image``, each value set checked against ``allowed``."""
    flavor_value, image_value = _flavor_and_image(spec, key)
    for where, value in (("flavor", flavor_value), ("image", image_value)):
        if value and value not in allowed:
            raise InvalidRequest(
                f"Invalid {what} {value!r} in the {where}: allowed values are {', '.join(allowed)}"
            )
    return flavor_value, image_value


def _cpu_policy(spec: RequestSpec) -> str | None:
    """The flavor's CPU policy, or the image's where the flavor allows it."""
    flavor_policy, image_policy = _valid_flavor_and_image(
        spec, "cpu_policy", _CPU_POLICIES, "CPU policy"
    )
    forbidden = {"dedicated": (), "mixed": ("dedicated",), "shared": ("mixed", "dedicated")}
    if flavor_policy in forbidden:
        if image_policy in forbidden[flavor_policy]:
            raise InvalidRequest(
                f"The image's hw_cpu_policy={image_policy} is forbidden by the flavor's "
                f"hw:cpu_policy={flavor_policy}"
            )
        return flavor_policy
    return image_policy or None


def _cpu_thread_policy(spec: RequestSpec) -> str | None:
    flavor_policy, image_policy = _valid_flavor_and_image(
        spec, "cpu_thread_policy", _CPU_THREAD_POLICIES, "CPU thread policy"
    )
    if flavor_policy in (None, "prefer"):
        return flavor_policy or image_policy
    if image_policy and image_policy != flavor_policy:
        raise InvalidRequest(
            f"The image's hw_cpu_thread_policy={image_policy} is forbidden by the flavor's "
            f"hw:cpu_thread_policy={flavor_policy}"
        )
    return flavor_policy


def _emulator_threads_policy(spec: RequestSpec) -> str | None:
    policy = (spec.flavor.extra_specs or {}).get("hw:emulator_threads_policy")
    if not policy:
        return None
    if policy not in _EMULATOR_THREADS_POLICIES:
        raise InvalidRequest(
            f"Invalid hw:emulator_threads_policy {policy!r}: allowed values are "
            f"{', '.join(_EMULATOR_THREADS_POLICIES)}"
        )
    return policy


def _guest_cpus(mask: str, vcpus: int) -> set[int]:
    """The guest CPUs of a mask; one starting with ``^`` excludes from all of them
    (``^0,^1`` of 4 CPUs is {2, 3})."""
    mask = str(mask)
    if mask.strip().startswith("^"):
        return _parse_cpu_set(f"0-{vcpus - 1},{mask}")
    return _parse_cpu_set(mask)


def _dedicated_cpus(spec: RequestSpec) -> set[int] | None:
    """The guest CPUs ``hw:cpu_dedicated_mask`` pins: at least one, not all."""
    mask = (spec.flavor.extra_specs or {}).get("hw:cpu_dedicated_mask")
    if not mask:
        return None
    vcpus = spec.flavor.vcpus or 0
    pinned = _guest_cpus(mask, vcpus)
    if not pinned or not set(range(vcpus)) - pinned:
        raise InvalidRequest(
            f"hw:cpu_dedicated_mask={mask!r} must leave at least one dedicated and one shared "
            f"CPU out of {vcpus}"
        )
    if not pinned <= set(range(vcpus)):
        raise InvalidRequest(
            f"hw:cpu_dedicated_mask={mask!r} names CPUs the flavor does not have "
            f"(it has {vcpus}: 0-{vcpus - 1})"
        )
    return pinned


def _realtime_cpus(spec: RequestSpec, emulator_policy: str | None) -> set[int] | None:
    """The realtime guest CPUs (``hw:cpu_realtime`` on): the image's mask, else the flavor's,
    else all of them; some CPU must be left for the emulator unless it has a policy."""
    if not strutils.bool_from_string((spec.flavor.extra_specs or {}).get("hw:cpu_realtime")):
        return None
    flavor_mask, image_mask = _flavor_and_image(spec, "cpu_realtime_mask")
    mask = image_mask or flavor_mask
    vcpus = spec.flavor.vcpus or 0
    every = set(range(vcpus))
    realtime = _guest_cpus(mask, vcpus) if mask else set(every)
    if not realtime:
        raise InvalidRequest(f"The realtime CPU mask {mask!r} leaves no realtime CPU")
    if realtime == every and not emulator_policy:
        raise InvalidRequest(
            "A realtime guest needs hw:cpu_realtime_mask to leave a CPU that is not realtime "
            "(e.g. '^0'), or hw:emulator_threads_policy"
        )
    if not realtime <= every:
        raise InvalidRequest(
            f"The realtime CPU mask {mask!r} names CPUs the flavor does not have "
            f"(it has {vcpus}: 0-{vcpus - 1})"
        )
    return realtime


def _parse_cpu_set(text: str) -> set[int]:
    """nova's CPU spec syntax: ``"0-3,^2,5"`` → {0, 1, 3, 5}; a ``^`` item or range
    excludes."""
    included: set[int] = set()
    excluded: set[int] = set()
    for rule in text.split(","):
        rule = rule.strip()
        if not rule:
            continue
        try:
            if "-" in rule:
                low, high = rule.split("-", 1)
                target = included
                if low.startswith("^"):
                    target, low = excluded, low[1:]
                start, end = int(low.strip()), int(high.strip())
                if start > end:
                    raise ValueError(rule)
                target.update(range(start, end + 1))
            elif rule.startswith("^"):
                excluded.add(int(rule[1:].strip()))
            else:
                included.add(int(rule))
        except ValueError:
            raise InvalidRequest(f"{rule!r} of CPU set {text!r} is not a CPU or range") from None
    return included - excluded
