"""PCI pool matching: can a host's free PCI devices satisfy an instance's PCI requests?

Pure functions over plain data, following nova's ``PciDeviceStats.support_requests`` as
documented:

* the host's pools are the JSON-decoded ``compute_nodes.pci_stats`` column -- a
  ``PciDevicePoolList`` primitive (``objects`` of ``PciDevicePool``: ``vendor_id``,
  ``product_id``, ``numa_node``, ``count``, ``tags``) or a plain list of pools; tags
  (``dev_type``, ``physical_network``, ``remote_managed``, ``rp_uuid`` ...) are flattened into
  the pool, as nova's PciDeviceStats does;
* a request (``InstancePCIRequest``: ``count``, ``spec`` -- a list of dicts, any one of which
  may match --, ``alias_name``, ``numa_policy``, ``request_id``) matches a pool when every key
  of one spec dict equals the pool's value (strings case-insensitively; a list value must be a
  subset of the pool's list value; ``remote_managed`` compares as a boolean, unset = false);
* PF pools are used only when a spec asks for ``dev_type: type-PF``, vDPA pools only for
  ``vdpa``, and ``remote_managed`` pools only when the spec asks for remote-managed devices;
* with PCI in Placement, the request's groups (``<request_id>-<n>`` in an allocation
  candidate's ``mappings``) restrict it to the pools of the allocated providers;
* with the instance's NUMA cells (NUMATopologyFilter), the ``numa_policy`` (required, legacy
  -- the default --, preferred, socket) restricts the pools by NUMA node;
* each request is checked against the host's pools on its own, as nova does (two requests
  for the same single device both pass here; the compute's claim then fails).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

_DATA = "nova_object.data"

PF = "type-PF"
REMOTE_MANAGED = "remote_managed"
VDPA = "vdpa"

REQUIRED = "required"
LEGACY = "legacy"
PREFERRED = "preferred"
SOCKET = "socket"

Pool = dict[str, Any]

_TRUE = {"1", "t", "true", "on", "y", "yes"}


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in _TRUE if value is not None else False


def _inner(value: Any) -> Any:
    if isinstance(value, dict) and _DATA in value:
        return value[_DATA]
    return value


def _flatten(pool: Any) -> Pool | None:
    pool = _inner(pool)
    if not isinstance(pool, dict):
        return None
    flat = {k: v for k, v in pool.items() if k != "tags"}
    tags = _inner(pool.get("tags"))
    if isinstance(tags, dict):
        for key, value in tags.items():
            flat.setdefault(key, value)
    try:
        flat["count"] = int(flat.get("count") or 0)
    except (TypeError, ValueError):
        flat["count"] = 0
    return flat


def pools_from_stats(pci_stats: Any) -> list[Pool]:
    """The host's pools as flat dicts (tags merged in), from ``HostState.pci_stats`` in any
    form it comes in; empty when the host has no PCI devices."""
    if not pci_stats:
        return []
    raw = json.loads(pci_stats) if isinstance(pci_stats, (str, bytes)) else pci_stats
    raw = getattr(raw, "pools", raw)
    raw = _inner(raw)
    if isinstance(raw, dict):
        raw = raw.get("objects") or raw.get("pools") or []
    return [p for p in (_flatten(item) for item in raw or ()) if p is not None]


# owner id -> (raw, pools): one entry per HostState, as scheduler.resources.numa.host_topology_of
_POOL_CACHE: dict[int, tuple[Any, list[Pool]]] = {}
_POOL_CACHE_MAX = 1_000_000


def pools_of(owner: Any, pci_stats: Any) -> list[Pool]:
    """:func:`pools_from_stats`, parsed once per ``pci_stats`` object of ``owner`` (a
    HostState). The pools returned are shared: do not modify them."""
    if not pci_stats:
        return []
    key = id(owner)
    hit = _POOL_CACHE.get(key)
    if hit is not None and hit[0] is pci_stats:
        return hit[1]
    pools = pools_from_stats(pci_stats)
    if len(_POOL_CACHE) >= _POOL_CACHE_MAX:
        _POOL_CACHE.clear()
    _POOL_CACHE[key] = (pci_stats, pools)
    return pools


def _spec_matches(pool: Mapping[str, Any], spec: Mapping[str, Any]) -> bool:
    for key, wanted in spec.items():
        have = pool.get(key)
        if key == REMOTE_MANAGED:
            # a boolean tag; devices whose spec does not set it are not remote-managed
            if _bool(wanted) != _bool(have):
                return False
            continue
        if isinstance(wanted, list) and isinstance(have, list):
            if not all(item in have for item in wanted):
                return False
            continue
        if isinstance(wanted, str):
            wanted = wanted.lower()
        if isinstance(have, str):
            have = have.lower()
        if have != wanted:
            return False
    return True


def pool_matches(pool: Mapping[str, Any], specs: Iterable[Mapping[str, Any]]) -> bool:
    """Does the pool match any of the spec dicts (nova's ``pci_device_prop_match``)?"""
    return any(_spec_matches(pool, spec) for spec in specs)


def _specs(request: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    specs = request.get("spec") or []
    if isinstance(specs, dict):
        specs = [specs]
    return [_inner(s) for s in specs if isinstance(_inner(s), dict)]


def _count(request: Mapping[str, Any]) -> int:
    try:
        return int(request.get("count") or 1)
    except (TypeError, ValueError):
        return 1


def rp_uuids_for_request(
    provider_mapping: Mapping[str, Sequence[str]] | None, request: Mapping[str, Any]
) -> list[str]:
    """The providers Placement allocated the request's devices from (one entry per device):
    the mappings of its request groups ``<request_id>-<n>``. Empty without PCI in Placement."""
    request_id = request.get("request_id")
    if not provider_mapping or not request_id:
        return []
    prefix = f"{request_id}-"
    rps: list[str] = []
    for requester, providers in provider_mapping.items():
        if requester == request_id or str(requester).startswith(prefix):
            rps.extend(providers or ())
    return rps


def _filter_by_placement(pools: list[Pool], rp_uuids: Sequence[str]) -> list[Pool]:
    if not rp_uuids:
        return pools
    wanted = Counter(rp_uuids)
    # a pool without rp_uuid is not tracked in Placement (e.g. physnet-tagged devices)
    return [p for p in pools if p.get("rp_uuid") in wanted and p["count"] >= wanted[p["rp_uuid"]]]


def _filter_by_numa(
    pools: list[Pool],
    request: Mapping[str, Any],
    numa_cell_ids: Sequence[int],
    socket_of: Mapping[int, int | None] | None,
) -> list[Pool]:
    policy = (request.get("numa_policy") or LEGACY).lower()
    count = _count(request)
    cells = set(numa_cell_ids)
    strict = [p for p in pools if p.get("numa_node") in cells]
    if policy == REQUIRED or sum(p["count"] for p in strict) >= count:
        return strict
    if policy == SOCKET:
        sockets_of = socket_of or {}
        sockets = {sockets_of.get(c) for c in cells} - {None}
        nodes = {n for n, s in sockets_of.items() if s in sockets}
        return [p for p in pools if p.get("numa_node") in nodes]
    # devices that report no NUMA node are fine for the legacy policy
    relaxed = [p for p in pools if p.get("numa_node") in cells or p.get("numa_node") is None]
    if policy == LEGACY or sum(p["count"] for p in relaxed) >= count:
        return relaxed
    return pools  # preferred: anything will do


def matching_pools(
    pools: list[Pool],
    request: Mapping[str, Any],
    numa_cell_ids: Sequence[int] | None = None,
    socket_of: Mapping[int, int | None] | None = None,
    rp_uuids: Sequence[str] = (),
) -> list[Pool] | None:
    """The pools the request may take its devices from, or None when they hold fewer devices
    than it asks for (nova's ``_filter_pools``)."""
    specs = _specs(request)
    candidates = [p for p in pools if pool_matches(p, specs)]
    if numa_cell_ids is not None:
        candidates = _filter_by_numa(candidates, request, numa_cell_ids, socket_of)
    if all(spec.get("dev_type") != PF for spec in specs):
        candidates = [p for p in candidates if p.get("dev_type") != PF]
    if all(spec.get("dev_type") != VDPA for spec in specs):
        candidates = [p for p in candidates if p.get("dev_type") != VDPA]
    if not any(_bool(spec.get(REMOTE_MANAGED)) for spec in specs):
        candidates = [p for p in candidates if not _bool(p.get(REMOTE_MANAGED))]
    candidates = _filter_by_placement(candidates, rp_uuids)
    if sum(p["count"] for p in candidates) < _count(request):
        return None
    return candidates


def first_unsupported(
    pools: list[Pool],
    requests: Iterable[Mapping[str, Any]],
    provider_mapping: Mapping[str, Sequence[str]] | None = None,
    numa_cell_ids: Sequence[int] | None = None,
    socket_of: Mapping[int, int | None] | None = None,
) -> Mapping[str, Any] | None:
    """The first request the pools cannot satisfy, or None when all can be."""
    for request in requests:
        rps = rp_uuids_for_request(provider_mapping, request)
        if matching_pools(pools, request, numa_cell_ids, socket_of, rps) is None:
            return request
    return None


def support_requests(
    pools: list[Pool],
    requests: Iterable[Mapping[str, Any]],
    provider_mapping: Mapping[str, Sequence[str]] | None = None,
    numa_cell_ids: Sequence[int] | None = None,
    socket_of: Mapping[int, int | None] | None = None,
) -> bool:
    """Can every request be met from the pools (each on its own, as nova checks)?"""
    return first_unsupported(pools, requests, provider_mapping, numa_cell_ids, socket_of) is None


def placement_signature(
    provider_mapping: Mapping[str, Sequence[str]] | None,
    requests: Sequence[Mapping[str, Any]],
) -> tuple[tuple[str, ...], ...]:
    """What of an allocation candidate matters to the PCI checks: per request, the providers
    its devices come from. Candidates with equal signatures get equal answers."""
    return tuple(tuple(sorted(rp_uuids_for_request(provider_mapping, r))) for r in requests)


def request_reason(request: Mapping[str, Any]) -> str:
    """Why a host fails a request, in words that group across hosts."""
    alias = request.get("alias_name")
    if alias:
        return f"no PCI device matching alias {alias}"
    if request.get("requester_id"):
        return "no PCI device for a requested port"
    return "no matching PCI device"


def pool_numa_nodes(pools: Iterable[Mapping[str, Any]]) -> set[int | None]:
    """The NUMA nodes that have PCI devices."""
    return {p.get("numa_node") for p in pools}


def apply_requests(
    pools: list[Pool],
    requests: Iterable[Mapping[str, Any]],
    numa_cell_ids: Sequence[int] | None = None,
    socket_of: Mapping[int, int | None] | None = None,
) -> list[Pool] | None:
    """The pools after taking the requests' devices one request after the other (nova's
    ``apply_requests``, for consume_from_request in a multi-create); None when they do not
    all fit. New pool dicts are returned; the input is not modified."""
    remaining = [dict(p) for p in pools]
    for request in requests:
        chosen = matching_pools(remaining, request, numa_cell_ids, socket_of)
        if chosen is None:
            return None
        count = _count(request)
        for pool in chosen:
            take = min(pool["count"], count)
            pool["count"] -= take
            count -= take
            if not count:
                break
    return [p for p in remaining if p["count"] > 0]
