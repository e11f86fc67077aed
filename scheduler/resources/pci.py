"""PCI pools: can a host's free PCI devices satisfy an instance's PCI requests, and what is
left of them once the instance is counted there?

Pure functions over plain data that decide as nova 34's ``PciDeviceStats`` does in the
scheduler (``support_requests`` and ``apply_requests``):

* the host's pools are the JSON-decoded ``compute_nodes.pci_stats`` column -- a
  ``PciDevicePoolList`` primitive (``objects`` of ``PciDevicePool``: ``vendor_id``,
  ``product_id``, ``numa_node``, ``count``, ``tags``) or a plain list of pools; tags
  (``dev_type``, ``physical_network``, ``remote_managed``, ``rp_uuid`` ...) are flattened into
  the pool (a tag named like a field wins), and the pools are ordered by their number of keys,
  as nova's PciDeviceStats holds them: that order is the order devices are taken in;
* the requests (``InstancePCIRequest``: ``count``, ``spec`` -- a list of dicts, any one of
  which may match --, ``alias_name``, ``numa_policy``, ``request_id``), decoded at the RPC
  edge (:func:`request_from_primitive`, into ``scheduler.resources.shapes.PciRequest``), are
  applied one after the other on a working copy of the pools: a host supports them when
  every one can take its devices from what the ones before it left (two ports wanting 1 + 2
  devices do not fit a pool of 2);
* a pool matches a spec dict when every key of it equals the pool's value, strings
  case-insensitively (``remote_managed: "False"`` needs a pool tagged ``false``: a pool
  without the tag, such as a type-PCI pool, does not match it), a list value being a subset
  of the pool's list; ``resource_class``, ``traits``, ``rp_uuids`` and ``rp_uuid`` are not
  compared (Placement matched them when PCI is tracked there);
* then, in nova's order: the request's ``numa_policy`` against the instance's NUMA cells
  (``required``; ``legacy``, the default, which also takes devices without a NUMA node;
  ``preferred``, which takes any device, local ones first; ``socket``, the cells' sockets --
  no device when a host cell reports no socket); PF pools only for specs asking for
  ``dev_type: type-PF``, vDPA pools only for ``vdpa``, remote-managed pools only when a spec
  asks for them (tags read as booleans here); with PCI in Placement, only the pools of the
  providers the request's groups were allocated from; ``live_migratable`` when every spec
  sets it;
* the providers of a request: for a flavor alias, the first provider of every group of the
  provider mapping whose name starts with its ``request_id`` (nova's ``<request_id>-<n>``
  groups), or the ``rp_uuids`` of its first spec when there is no mapping; none for a port,
  whose devices Placement does not track (yet). With providers, each pool gives exactly as
  many devices as Placement allocated from its provider, and a host whose pools share a
  provider supports nothing; without, devices are taken pool after pool;
* a pool emptied by a request is dropped from the list, as nova drops it.

Deliberate differences, where nova fails with an exception instead of deciding:

* a provider-mapping group with no provider, or an alias request without ``request_id``
  while there is a mapping: nova raises (IndexError, TypeError) out of the filter; here such
  a group restricts nothing;
* the ``socket`` policy on a host without a NUMA topology: nova raises AttributeError; here
  no device qualifies.

And at consumption (``scheduler/hosts/state.py``), when the instance asks for a NUMA topology
and the host reports none: nova applies the requests with the *unfitted* guest cell ids taken
for host NUMA nodes; we apply them without NUMA cells, as for an instance without topology
(NUMATopologyFilter refuses such hosts, so only a deployment without it gets there).

The compute's claim (``consume_requests``: real devices, a PF taking its VFs with it) is not
done here: the scheduler sees pools, never devices.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.resources.shapes import PciRequest

_DATA = "nova_object.data"

PF = "type-PF"
VDPA = "vdpa"
REMOTE_MANAGED = "remote_managed"
LIVE_MIGRATABLE = "live_migratable"
RP_UUID = "rp_uuid"

REQUIRED = "required"
LEGACY = "legacy"
PREFERRED = "preferred"
SOCKET = "socket"

# spec keys nova leaves to Placement (resource_class, traits) or reads apart (rp_uuids)
IGNORED_SPEC_KEYS = frozenset({"resource_class", "traits", "rp_uuids", "rp_uuid"})

Pool = dict[str, Any]
ProviderMapping = Mapping[str, Sequence[str]]

_TRUE = {"1", "t", "true", "on", "y", "yes"}


def _bool(value: Any) -> bool:
    """oslo's ``bool_from_string`` (not strict): unset and unknown words are false."""
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in _TRUE if value is not None else False


def _inner(value: Any) -> Any:
    if isinstance(value, dict) and _DATA in value:
        return value[_DATA]
    return value


def _int_or(value: Any, default: Any) -> Any:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _flatten(pool: Any) -> Pool | None:
    pool = _inner(pool)
    if not isinstance(pool, dict):
        return None
    flat = {k: v for k, v in pool.items() if k != "tags"}
    tags = _inner(pool.get("tags"))
    if isinstance(tags, dict):
        flat.update(tags)  # nova's PciDevicePool.to_dict
    flat["count"] = _int_or(flat.get("count"), 0)
    if flat.get("numa_node") is not None:
        flat["numa_node"] = _int_or(flat["numa_node"], flat["numa_node"])
    return flat


def pools_from_stats(pci_stats: Any) -> list[Pool]:
    """The host's pools as flat dicts (tags merged in), in the order nova's PciDeviceStats
    keeps them (fewest keys first), from ``HostState.pci_stats`` in any form it comes in;
    empty when the host has no PCI devices."""
    if not pci_stats:
        return []
    raw = json.loads(pci_stats) if isinstance(pci_stats, (str, bytes)) else pci_stats
    raw = getattr(raw, "pools", raw)
    raw = _inner(raw)
    if isinstance(raw, dict):
        raw = raw.get("objects") or raw.get("pools") or []
    pools = [p for p in (_flatten(item) for item in raw or ()) if p is not None]
    pools.sort(key=len)  # stable: pools of equal size keep the compute's order
    return pools


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


# -- matching -------------------------------------------------------------------------------


def _value_matches(wanted: Any, have: Any) -> bool:
    if isinstance(wanted, list) and isinstance(have, list):
        return all(item in have for item in wanted)
    if isinstance(wanted, str):
        wanted = wanted.lower()
    if isinstance(have, str):
        have = have.lower()
    return have == wanted


def _spec_matches(pool: Mapping[str, Any], spec: Mapping[str, Any]) -> bool:
    return all(
        _value_matches(wanted, pool.get(key))
        for key, wanted in spec.items()
        if key not in IGNORED_SPEC_KEYS
    )


def pool_matches(pool: Mapping[str, Any], specs: Iterable[Mapping[str, Any]]) -> bool:
    """Does the pool match any of the spec dicts (nova's ``pci_device_prop_match``, the keys
    Placement matches left out)?"""
    return any(_spec_matches(pool, spec) for spec in specs)


# -- the requests, decoded at the RPC edge ------------------------------------------------------


def _optional_str(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{key} must be a string, not {type(value).__name__}")
    return value


def request_from_primitive(value: Any) -> PciRequest:
    """A :class:`PciRequest` from an InstancePCIRequest primitive or its plain data (its
    ``spec`` a list of dicts, or one dict), keeping that data as its ``primitive``. Raises
    ValueError for one that is not an InstancePCIRequest."""
    data = _inner(value)
    if not isinstance(data, Mapping):
        raise ValueError(f"not an InstancePCIRequest: {type(value).__name__}")
    specs = data.get("spec") or []
    if isinstance(specs, Mapping):
        specs = [specs]
    if not isinstance(specs, list | tuple):
        raise ValueError(f"spec must be a list of dicts, not {type(specs).__name__}")
    count = data.get("count", 1)
    if count is None:
        count = 1
    if isinstance(count, bool) or not isinstance(count, int | str):
        raise ValueError(f"count must be a whole number, not {count!r}")
    try:
        count = int(count)
    except ValueError:
        raise ValueError(f"count must be a whole number, not {count!r}") from None
    return PciRequest(
        count=count,
        specs=tuple(s for s in map(_inner, specs) if isinstance(s, Mapping)),
        alias_name=_optional_str(data, "alias_name"),
        numa_policy=_optional_str(data, "numa_policy"),
        request_id=_optional_str(data, "request_id"),
        requester_id=_optional_str(data, "requester_id"),
        primitive=data,
    )


def requests_from_primitive(values: Iterable[Any]) -> tuple[PciRequest, ...]:
    """:func:`request_from_primitive` of each request, in order."""
    return tuple(request_from_primitive(v) for v in values)


def rp_uuids_for_request(
    provider_mapping: ProviderMapping | None, request: PciRequest
) -> list[str]:
    """The providers Placement allocated the request's devices from, one entry per device:
    the first provider of each group named ``<request_id>...``, or without a mapping the
    ``rp_uuids`` its first spec records. Empty for ports and without PCI in Placement."""
    if request.is_port:
        return []
    if not provider_mapping:
        specs = request.specs
        recorded = specs[0].get("rp_uuids") if specs else None
        return str(recorded).split(",") if recorded else []
    request_id = request.request_id
    if not request_id:
        return []
    return [
        providers[0]
        for group, providers in provider_mapping.items()
        if providers and str(group).startswith(request_id)
    ]


class _Stock:
    """A working copy of a host's pools: the pools themselves are shared and read, the
    counts and the list of pools still held (by index, in order) are this copy's own."""

    __slots__ = ("pools", "counts", "held")

    def __init__(self, pools: Sequence[Pool]):
        self.pools = pools
        self.counts = [p["count"] for p in pools]
        self.held = list(range(len(pools)))

    def total(self, indexes: Iterable[int]) -> int:
        counts = self.counts
        return sum(counts[i] for i in indexes)

    def left(self) -> list[Pool]:
        """The pools still held, as new dicts with their counts now."""
        return [{**self.pools[i], "count": self.counts[i]} for i in self.held]


def _numa_node_in(pools: Sequence[Pool], indexes: list[int], nodes: set[Any]) -> list[int]:
    return [i for i in indexes if pools[i].get("numa_node") in nodes]


def _by_numa(
    stock: _Stock,
    indexes: list[int],
    request: PciRequest,
    numa_cell_ids: Sequence[int] | None,
    socket_of: Mapping[int, int | None] | None,
) -> list[int]:
    """nova's ``_filter_pools_for_numa_cells``: the strictest affinity that still gives
    enough devices, no looser than the request's policy allows."""
    if not numa_cell_ids:
        return indexes
    pools = stock.pools
    policy = request.numa_policy or LEGACY
    count = request.count
    cells = set(numa_cell_ids)
    local = _numa_node_in(pools, indexes, cells)
    if policy == REQUIRED or stock.total(local) >= count:
        return local
    if policy == SOCKET:
        return _by_socket(pools, indexes, cells, socket_of)
    # devices that report no NUMA node are fine for the legacy policy
    cells.add(None)
    relaxed = _numa_node_in(pools, indexes, cells)
    if policy == LEGACY or stock.total(relaxed) >= count:
        return relaxed
    # preferred: anything will do, the local devices (and those without a node) first
    return sorted(indexes, key=lambda i: pools[i].get("numa_node") not in cells)


def _by_socket(
    pools: Sequence[Pool],
    indexes: list[int],
    cells: set[int],
    socket_of: Mapping[int, int | None] | None,
) -> list[int]:
    if not socket_of or any(socket is None for socket in socket_of.values()):
        return []  # a host cell without socket information: nova gives up
    sockets = {socket_of[c] for c in cells if c in socket_of}
    nodes = {node for node, socket in socket_of.items() if socket in sockets}
    return _numa_node_in(pools, indexes, nodes)


def _unrequested_dropped(
    pools: Sequence[Pool], indexes: list[int], specs: list[Mapping[str, Any]]
) -> list[int]:
    """PF, vDPA and remote-managed pools serve only the requests that ask for them."""
    if all(spec.get("dev_type") != PF for spec in specs):
        indexes = [i for i in indexes if pools[i].get("dev_type") != PF]
    if all(spec.get("dev_type") != VDPA for spec in specs):
        indexes = [i for i in indexes if pools[i].get("dev_type") != VDPA]
    if all(not _bool(spec.get(REMOTE_MANAGED)) for spec in specs):
        indexes = [i for i in indexes if not _bool(pools[i].get(REMOTE_MANAGED))]
    return indexes


def _by_placement(stock: _Stock, indexes: list[int], rp_uuids: Sequence[str]) -> list[int]:
    if not rp_uuids:
        return indexes
    wanted = Counter(rp_uuids)
    pools, counts = stock.pools, stock.counts
    # a pool without rp_uuid is not tracked in Placement (e.g. physnet-tagged devices)
    return [
        i
        for i in indexes
        if pools[i].get(RP_UUID) in wanted and counts[i] >= wanted[pools[i][RP_UUID]]
    ]


def _by_live_migration(
    pools: Sequence[Pool], indexes: list[int], specs: list[Mapping[str, Any]]
) -> list[int]:
    for value in ("true", "false"):
        if all(spec.get(LIVE_MIGRATABLE) == value for spec in specs):
            return [i for i in indexes if pools[i].get(LIVE_MIGRATABLE) == value]
    return indexes


def _candidates(
    stock: _Stock,
    request: PciRequest,
    rp_uuids: Sequence[str],
    numa_cell_ids: Sequence[int] | None,
    socket_of: Mapping[int, int | None] | None,
) -> list[int] | None:
    """The held pools the request may take its devices from, in the order it takes them,
    or None when they hold fewer devices than it asks for (nova's ``_filter_pools``)."""
    pools = stock.pools
    specs = request.specs
    indexes = [i for i in stock.held if pool_matches(pools[i], specs)]
    indexes = _by_numa(stock, indexes, request, numa_cell_ids, socket_of)
    indexes = _unrequested_dropped(pools, indexes, specs)
    indexes = _by_placement(stock, indexes, rp_uuids)
    indexes = _by_live_migration(pools, indexes, specs)
    if stock.total(indexes) < request.count:
        return None
    return indexes


def _one_pool_per_provider(stock: _Stock) -> bool:
    providers = [stock.pools[i][RP_UUID] for i in stock.held if RP_UUID in stock.pools[i]]
    return len(providers) == len(set(providers))


def _apply_one(
    stock: _Stock,
    request: PciRequest,
    rp_uuids: Sequence[str],
    numa_cell_ids: Sequence[int] | None,
    socket_of: Mapping[int, int | None] | None,
) -> bool:
    """Take one request's devices from the stock (nova's ``_apply_request``)."""
    chosen = _candidates(stock, request, rp_uuids, numa_cell_ids, socket_of)
    if not chosen:
        return False
    counts, held = stock.counts, stock.held
    if not rp_uuids:
        # pool after pool; a pool given away whole leaves the list
        wanted = request.count
        for i in chosen:
            if counts[i] > wanted:
                counts[i] -= wanted
                wanted = 0
            else:
                wanted -= counts[i]
                held.remove(i)
            if not wanted:
                break
        return True
    # as Placement allocated: from each provider's pool, its number of devices
    if not _one_pool_per_provider(stock):
        return False
    per_provider = Counter(rp_uuids)
    for i in chosen:
        counts[i] -= per_provider.pop(stock.pools[i][RP_UUID], 0)
        if counts[i] == 0:
            held.remove(i)
    return True


@dataclass(frozen=True, slots=True)
class Applied:
    """The outcome of applying requests to a host's pools: the pools left (new dicts, in
    order) and the first request that could not be applied, if any. As nova's, a failed
    application keeps what the requests before the failing one took."""

    pools: list[Pool]
    failed: PciRequest | None = None

    @property
    def ok(self) -> bool:
        return self.failed is None


def _run(
    pools: Sequence[Pool],
    requests: Iterable[PciRequest],
    provider_mapping: ProviderMapping | None,
    numa_cell_ids: Sequence[int] | None,
    socket_of: Mapping[int, int | None] | None,
) -> tuple[_Stock, PciRequest | None]:
    stock = _Stock(pools)
    for request in requests:
        rps = rp_uuids_for_request(provider_mapping, request)
        if not _apply_one(stock, request, rps, numa_cell_ids, socket_of):
            return stock, request
    return stock, None


def apply_requests(
    pools: Sequence[Pool],
    requests: Iterable[PciRequest],
    provider_mapping: ProviderMapping | None = None,
    numa_cell_ids: Sequence[int] | None = None,
    socket_of: Mapping[int, int | None] | None = None,
) -> Applied:
    """The pools after taking the requests' devices one request after the other (nova's
    ``apply_requests``, as consume_from_request calls it). The input is not modified.

    ``provider_mapping``: ``{requester_id: [provider uuid]}`` of the request's groups (the
    allocation candidate's ``mappings``, or the RequestSpec's ``requested_resources``);
    ``numa_cell_ids``: the host cells the instance's NUMA nodes were fitted to;
    ``socket_of``: ``{host cell id: socket}`` of every host cell (for the socket policy)."""
    stock, failed = _run(pools, requests, provider_mapping, numa_cell_ids, socket_of)
    return Applied(stock.left(), failed)


def first_unsupported(
    pools: Sequence[Pool],
    requests: Iterable[PciRequest],
    provider_mapping: ProviderMapping | None = None,
    numa_cell_ids: Sequence[int] | None = None,
    socket_of: Mapping[int, int | None] | None = None,
) -> PciRequest | None:
    """The first request that cannot take its devices once the ones before it took theirs,
    or None when all can (see :func:`apply_requests` for the arguments)."""
    return _run(pools, requests, provider_mapping, numa_cell_ids, socket_of)[1]


def support_requests(
    pools: Sequence[Pool],
    requests: Iterable[PciRequest],
    provider_mapping: ProviderMapping | None = None,
    numa_cell_ids: Sequence[int] | None = None,
    socket_of: Mapping[int, int | None] | None = None,
) -> bool:
    """Can all the requests be met together (nova's ``support_requests``: applied one after
    the other on a copy)?"""
    return first_unsupported(pools, requests, provider_mapping, numa_cell_ids, socket_of) is None


def matching_pools(
    pools: Sequence[Pool],
    request: PciRequest,
    numa_cell_ids: Sequence[int] | None = None,
    socket_of: Mapping[int, int | None] | None = None,
    rp_uuids: Sequence[str] = (),
) -> list[Pool] | None:
    """The pools one request alone may take its devices from, in the order it takes them,
    or None when they hold fewer devices than it asks for (nova's ``_filter_pools``)."""
    stock = _Stock(pools)
    chosen = _candidates(stock, request, rp_uuids, numa_cell_ids, socket_of)
    return None if chosen is None else [pools[i] for i in chosen]


def placement_signature(
    provider_mapping: ProviderMapping | None,
    requests: Sequence[PciRequest],
) -> tuple[tuple[str, ...], ...]:
    """What of an allocation candidate matters to the PCI checks: per request, the providers
    its devices come from. Candidates with equal signatures get equal answers."""
    return tuple(tuple(sorted(rp_uuids_for_request(provider_mapping, r))) for r in requests)


def request_group_mapping(spec_obj: Any) -> dict[str, list[str]] | None:
    """nova's ``RequestSpec.get_request_group_mapping``: the providers of each of the
    request's groups (set from the claimed candidate before the host consumes it); None
    when the request has no ``requested_resources``."""
    groups = getattr(spec_obj, "requested_resources", None)
    if groups is None:
        return None
    return {
        g.requester_id: list(g.provider_uuids or ())
        for g in groups
        if getattr(g, "requester_id", None) is not None
    }


def request_reason(request: PciRequest | None) -> str:
    """Why a host fails a request, in words that group across hosts."""
    if request is None:
        return "no matching PCI device"
    alias = request.alias_name
    if alias:
        return f"no PCI device matching alias {alias}"
    if request.requester_id:
        return "no PCI device for a requested port"
    return "no matching PCI device"


def pool_numa_nodes(pools: Iterable[Mapping[str, Any]]) -> set[int | None]:
    """The NUMA nodes that have PCI devices."""
    return {p.get("numa_node") for p in pools}
