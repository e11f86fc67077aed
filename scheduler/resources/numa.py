"""Fitting an instance's NUMA topology onto a host's NUMA cells: pure functions over plain data.

Inputs are the shapes nova stores and sends:

* the host: ``compute_nodes.numa_topology``, JSON-decoded -- a ``NUMATopology`` primitive (or
  its unwrapped data) whose cells carry ``id``, ``cpuset``, ``pcpuset``, ``memory`` (MiB),
  ``cpu_usage``, ``memory_usage``, ``pinned_cpus``, ``siblings`` (lists of thread ids per
  core), ``mempages`` (``size_kb``, ``total``, ``used``, ``reserved``) and
  ``network_metadata`` (the physnets and tunnels NUMA-affine to the cell);
* the instance: ``RequestSpec.numa_topology``, the ``InstanceNUMATopology`` nova sent, decoded
  at the RPC edge (:func:`instance_topology_from_primitive`, into
  ``scheduler.resources.shapes.InstanceTopology``) or, when the request carries none, the
  flavor extra specs and image properties it was built from
  (:func:`instance_topology_from_request`, nova's ``hardware.numa_get_constraints``);
* the request's ``network_metadata`` (physnets and tunnels of its ports), carried in the
  limits as nova's NUMATopologyFilter carries it.

The rules are nova 34's (``nova.virt.hardware.numa_fit_instance_to_host``), proven against
nova's own function by ``tests/differential/test_numa.py``:

* an instance never overcommits against itself: a guest node must fit a host cell's total
  memory and CPUs;
* page sizes: ``small``/``large``/``any``/an explicit size must have enough *free* pages
  (``total - used - reserved``) in the cell; without a page size, an unpinned guest's memory
  must fit the cell's small pages in total (overcommit allowed), a pinned guest's the *free*
  small pages (hugepage memory is usable by neither);
* pinned CPUs (``dedicated``, and the dedicated part of ``mixed``) come from ``pcpuset`` minus
  ``pinned_cpus``, never overcommitted, core by core in the order the cores are reported (a
  free CPU in no sibling set is never pinned); the thread policy (``prefer``/``require``/
  ``isolate``) decides how they are packed on cores, and an isolated emulator thread takes
  one more free pCPU of the first guest node's cell, wherever the guest's pinning left one.
  A guest node of a ``mixed`` guest without dedicated vCPUs gets no pinning: ``isolate``
  refuses it, ``require`` wants a free sibling pair in the cell, and neither can hold the
  emulator thread;
* shared CPUs and memory of unpinned guests, and of the shared part of ``mixed`` guests, are
  checked against the cell's capacity times the ``cpu_allocation_ratio``/
  ``ram_allocation_ratio``;
* guest nodes go to distinct host cells, tried in nova's order: when the host has more cells
  than the guest nodes, the emptier cells first (or the fuller ones with ``[compute]
  packing_host_numa_cells_allocation_strategy``), cells with PCI devices last (first when
  the request asks for PCI devices); every assignment is tried, and the PCI check and the
  network NUMA affinity can veto one.

Deliberate differences from nova 34 (each a bug of nova's that refuses fits that exist, or
crashes; ``tests/differential/test_numa.py`` recognises each by re-running nova's function
with the bug patched out):

* **page size rewritten while trying cells.** nova's ``_numa_fit_instance_cell`` writes the
  page size it picked on one host cell (``large``/``any``/``small`` -> 2048, say) into the
  requested guest cell, also when that cell then fails on CPUs; the next host cells are tried
  with that size, so a guest asking ``large`` is refused by a host whose other cell has free
  1 GiB pages (and nova's filter carries the rewritten size on to the host's next allocation
  candidate). Every host cell is tried here with the page size as requested.
* **fit cache keyed by an overwritten id.** nova caches "guest node N fits/does not fit host
  cell H" by the guest cell's ``id``, which it overwrites with the host cell's id on every
  fit; later lookups then read another node's answer (and a cached fit keeps the pinning of
  another host cell). Here every (guest node, host cell) pair is decided once, by its own
  inputs.
* **a host cell without sibling data.** nova raises ValueError for a pinned guest on a cell
  whose ``siblings`` list is empty; here each of its CPUs is a core of its own.

Nothing here mutates its inputs. :func:`host_topology_of` caches one parsed topology per
HostState, keyed by the identity of its ``numa_topology`` object (the host cache replaces that
object whenever the compute node reports, so a cached parse is never stale).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.conf import CONF
from scheduler.primitives import unwrap
from scheduler.resources.shapes import (
    DEDICATED,
    MIXED,
    PINNED_POLICIES,
    SHARED,
    InstanceCell,
    InstanceTopology,
)

# nova's InstanceNUMACell.pagesize codes for the symbolic hw:mem_page_size values
MEMPAGES_SMALL = -1
MEMPAGES_LARGE = -2
MEMPAGES_ANY = -3

CPU_POLICIES = (SHARED, DEDICATED, MIXED)

PREFER = "prefer"
ISOLATE = "isolate"
REQUIRE = "require"
THREAD_POLICIES = (PREFER, ISOLATE, REQUIRE)

EMULATOR_SHARE = "share"
EMULATOR_POLICIES = (EMULATOR_SHARE, ISOLATE)

# -- reasons (fixed phrases; a number in them is the request's, so they still group) --------

TOO_MANY_NODES = "more NUMA nodes requested than the host has"
PAGESIZE_MISSING = "no pages of the requested size"
NOT_ENOUGH_HUGEPAGES = "not enough free huge pages"
NOT_ENOUGH_SMALLPAGES = "not enough free small pages"
NOT_ENOUGH_ANYPAGES = "not enough free memory pages"
NODE_MEMORY_TOO_BIG = "NUMA node memory larger than a host NUMA cell"
NODE_CPUS_TOO_MANY = "NUMA node has more CPUs than a host NUMA cell"
NOT_ENOUGH_CELL_MEMORY = "not enough free NUMA cell memory"
NOT_ENOUGH_CELL_CPUS = "not enough free NUMA cell CPUs"
REQUIRE_NO_SMT = "thread policy require: no SMT siblings"
REQUIRE_NO_FREE_SIBLINGS = "thread policy require: no free SMT siblings"
ISOLATE_HOST_SMT = "thread policy isolate: host has SMT"
ISOLATE_NO_FREE_CORES = "thread policy isolate: not enough free cores"
CELLS_TAKEN = "NUMA nodes do not fit on distinct host cells"
PCI_NOT_LOCAL = "PCI devices not local to the fitting NUMA cells"
NETWORKS_NOT_LOCAL = "networks not NUMA-local to the fitting NUMA cells"


def no_pinned_cpus(count: int) -> str:
    """The reason for a guest node whose pinned CPUs no host cell has free."""
    return f"no NUMA cell with {count} free pinned CPUs"


class InvalidNUMARequest(ValueError):
    """The flavor/image NUMA settings do not describe a valid topology (nova's
    ``numa_get_constraints`` raises for them)."""


def packing_strategy() -> bool:
    """``[compute] packing_host_numa_cells_allocation_strategy``: fill the most used host
    cells first instead of the least used."""
    return bool(CONF.compute.packing_host_numa_cells_allocation_strategy)


# -- networks ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NetworkMetadata:
    """nova's NetworkMetadata: the physnets of a request's ports and whether it has tunneled
    ones; on a host cell, the physnets and tunnels NUMA-affine to it."""

    physnets: frozenset[str] = frozenset()
    tunneled: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"physnets": sorted(self.physnets), "tunneled": self.tunneled}


def network_metadata_from_primitive(value: Any) -> NetworkMetadata | None:
    """A :class:`NetworkMetadata` from a NetworkMetadata primitive, its data (or JSON text),
    or an object with ``physnets``/``tunneled``; None when there is none."""
    if value is None or value == "":
        return None
    if isinstance(value, (str, bytes)):
        value = json.loads(value)
    if isinstance(value, NetworkMetadata):
        return value
    if isinstance(value, dict):
        data = _inner(value)
        physnets, tunneled = data.get("physnets"), data.get("tunneled")
    else:
        physnets = getattr(value, "physnets", None)
        tunneled = getattr(value, "tunneled", None)
    return NetworkMetadata(frozenset(str(p) for p in physnets or ()), bool(tunneled))


# -- the host ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PageSize:
    size_kb: int
    total: int
    used: int = 0
    reserved: int = 0

    @property
    def free(self) -> int:
        return self.total - self.used - self.reserved


@dataclass(frozen=True, slots=True)
class HostCell:
    id: int
    cpuset: frozenset[int]
    pcpuset: frozenset[int]
    memory: int
    cpu_usage: int = 0
    memory_usage: int = 0
    pinned_cpus: frozenset[int] = frozenset()
    siblings: tuple[frozenset[int], ...] = ()
    mempages: tuple[PageSize, ...] = ()
    socket: int | None = None
    network: NetworkMetadata | None = None
    # derived once at construction (fitting reads them for every request)
    free_pcpus: frozenset[int] = field(init=False, compare=False, repr=False)
    threads_per_core: int = field(init=False, compare=False, repr=False)
    has_threads: bool = field(init=False, compare=False, repr=False)
    free_cores: tuple[tuple[int, ...], ...] = field(init=False, compare=False, repr=False)
    smallest_page: PageSize | None = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        free = self.pcpuset - self.pinned_cpus
        set_(self, "free_pcpus", free)
        set_(self, "threads_per_core", max((len(s) for s in self.siblings), default=1) or 1)
        set_(self, "has_threads", any(len(s) > 1 for s in self.siblings))
        # The free dedicated CPUs grouped by core, in the order the compute reported the cores
        # (nova pins in that order). As nova, a free CPU that no sibling set names is never
        # pinned; a cell with no sibling data at all (nova raises there) has one core per CPU.
        if self.siblings:
            cores = [tuple(sorted(s & free)) for s in self.siblings]
        else:
            cores = [(cpu,) for cpu in sorted(free)]
        set_(self, "free_cores", tuple(c for c in cores if c))
        smallest = None
        for page in self.mempages:
            if smallest is None or page.size_kb < smallest.size_kb:
                smallest = page
        # nova reads the first page entry of the smallest size
        if smallest is not None:
            smallest = self.page(smallest.size_kb)
        set_(self, "smallest_page", smallest)

    @property
    def avail_memory(self) -> int:
        return self.memory - self.memory_usage

    def page(self, size_kb: int) -> PageSize | None:
        for page in self.mempages:
            if page.size_kb == size_kb:
                return page
        return None


@dataclass(frozen=True, slots=True)
class HostTopology:
    cells: tuple[HostCell, ...]
    # hosts with equal topologies share fitting work within a request: hash once
    _hash: int = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash(self.cells))

    def __hash__(self) -> int:
        return self._hash

    @property
    def has_threads(self) -> bool:
        return any(cell.has_threads for cell in self.cells)


def _ints(value: Any) -> frozenset[int]:
    if not value:
        return frozenset()
    return frozenset(map(int, value))


_DATA = "nova_object.data"


def _inner(value: Any) -> Any:
    """The data of a nova object primitive (one level), or the value as it is."""
    if isinstance(value, dict) and _DATA in value:
        return value[_DATA]
    return value


def _data(value: Any) -> Any:
    """The data of a (possibly enveloped, possibly JSON-encoded) nova object, all levels."""
    if isinstance(value, (str, bytes)):
        value = json.loads(value)
    return unwrap(value)


def _page(page: Any) -> PageSize:
    page = _inner(page)
    return PageSize(
        size_kb=int(page["size_kb"]),
        total=int(page.get("total") or 0),
        used=int(page.get("used") or 0),
        reserved=int(page.get("reserved") or 0),
    )


def _host_cell(cell: Mapping[str, Any]) -> HostCell:
    cell = _inner(cell)
    cpuset = _ints(cell.get("cpuset"))
    # cells from before NUMACell 1.5 have no pcpuset: nova migrates them with the same CPUs
    # serving pinned and unpinned guests (the legacy vcpu_pin_set configuration)
    pcpuset = _ints(cell["pcpuset"]) if cell.get("pcpuset") is not None else cpuset
    pages = tuple(_page(p) for p in cell.get("mempages") or ())
    socket = cell.get("socket")
    return HostCell(
        id=int(cell["id"]),
        cpuset=cpuset,
        pcpuset=pcpuset,
        memory=int(cell.get("memory") or 0),
        cpu_usage=int(cell.get("cpu_usage") or 0),
        memory_usage=int(cell.get("memory_usage") or 0),
        pinned_cpus=_ints(cell.get("pinned_cpus")),
        siblings=tuple(_ints(s) for s in cell.get("siblings") or ()),
        mempages=pages,
        socket=None if socket is None else int(socket),
        network=network_metadata_from_primitive(cell.get("network_metadata")),
    )


def host_topology_from_primitive(value: Any) -> HostTopology | None:
    """A :class:`HostTopology` from ``compute_nodes.numa_topology`` as decoded (a NUMATopology
    primitive, its data, or the JSON text); None when the host reports none or no cells."""
    if value is None or value == "" or value == {}:
        return None
    if isinstance(value, (str, bytes)):
        value = json.loads(value)
    data = _inner(value)
    cells = data.get("cells") if isinstance(data, dict) else None
    return HostTopology(tuple(_host_cell(c) for c in cells)) if cells else None


# owner id -> (raw, parsed): one entry per HostState, replaced when its topology object is
# (the raw object is kept, so an id is never reused while its entry is alive)
_HOST_CACHE: dict[int, tuple[Any, HostTopology | None]] = {}
_HOST_CACHE_MAX = 1_000_000


def host_topology_of(owner: Any, value: Any) -> HostTopology | None:
    """:func:`host_topology_from_primitive`, parsed once per topology object of ``owner``
    (a HostState). The host cache replaces ``numa_topology`` by a new object whenever the
    compute node reports (and consumption must do the same), so an entry is never stale."""
    if value is None:
        return None
    key = id(owner)
    hit = _HOST_CACHE.get(key)
    if hit is not None and hit[0] is value:
        return hit[1]
    topology = host_topology_from_primitive(value)
    if len(_HOST_CACHE) >= _HOST_CACHE_MAX:
        _HOST_CACHE.clear()
    _HOST_CACHE[key] = (value, topology)
    return topology


# -- the instance -----------------------------------------------------------------------------


# (InstanceCell and InstanceTopology are in scheduler.resources.shapes: the request model
# names them)


def instance_topology_from_primitive(value: Any) -> InstanceTopology | None:
    """An :class:`InstanceTopology` from nova's ``RequestSpec.numa_topology`` (an
    InstanceNUMATopology primitive or its plain data), keeping that data as its
    ``primitive``; None for no topology. The RPC edge decodes a request's with it. Raises
    InvalidNUMARequest for one that is not an InstanceNUMATopology."""
    if not value:
        return None
    try:
        data = _data(value)
        return _instance_topology(data)
    except InvalidNUMARequest:
        raise
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise InvalidNUMARequest(f"not an InstanceNUMATopology: {exc}") from exc


def _instance_topology(data: Any) -> InstanceTopology | None:
    if not isinstance(data, Mapping):
        raise InvalidNUMARequest(f"not an InstanceNUMATopology: {type(data).__name__}")
    cells = []
    for i, cell in enumerate(data.get("cells") or ()):
        cpuset = _ints(cell.get("cpuset"))
        pcpuset = _ints(cell.get("pcpuset"))
        policy = cell.get("cpu_policy")
        if policy == DEDICATED and not pcpuset and cpuset:
            # InstanceNUMACell < 1.5 kept pinned CPUs in cpuset
            cpuset, pcpuset = frozenset(), cpuset
        pagesize = cell.get("pagesize")
        cells.append(
            InstanceCell(
                id=int(cell["id"]) if cell.get("id") is not None else i,
                cpuset=cpuset,
                pcpuset=pcpuset,
                memory=int(cell.get("memory") or 0),
                pagesize=int(pagesize) if pagesize else None,
                cpu_policy=policy,
                cpu_thread_policy=cell.get("cpu_thread_policy"),
            )
        )
    if not cells:
        return None
    return InstanceTopology(cells, data.get("emulator_threads_policy"), primitive=data)


def parse_cpu_spec(spec: str) -> frozenset[int]:
    """CPU ids from nova's CPU spec syntax: ``"0-3,^2,6"`` -> {0, 1, 3, 6}."""
    include: set[int] = set()
    exclude: set[int] = set()
    for part in str(spec).split(","):
        part = part.strip()
        if not part:
            continue
        target = include
        if part.startswith("^"):
            target = exclude
            part = part[1:].strip()
        try:
            if "-" in part:
                low, high = (int(x) for x in part.split("-", 1))
                if low > high:
                    raise InvalidNUMARequest(f"invalid CPU range {part!r}")
                target.update(range(low, high + 1))
            else:
                target.add(int(part))
        except ValueError as exc:
            if isinstance(exc, InvalidNUMARequest):
                raise
            raise InvalidNUMARequest(f"invalid CPU spec {spec!r}") from None
    return frozenset(include - exclude)


def _cpu_mask(mask: str, vcpus: int) -> frozenset[int]:
    """A guest CPU mask as nova reads ``hw:cpu_dedicated_mask``/``hw:cpu_realtime_mask``: a
    mask starting with ``^`` excludes from all the guest's CPUs."""
    if mask.strip().startswith("^"):
        return parse_cpu_spec(f"0-{vcpus - 1},{mask}")
    return parse_cpu_spec(mask)


# oslo.utils' string_to_bytes (IEC), the parser nova gives hw:mem_page_size
_SIZE_RE = re.compile(r"(^[-+]?\d*\.?\d+)([KMGTPEZYRQ]i?)?(b|bit|B)$")
_SIZE_EXPONENT = {p: i + 1 for i, p in enumerate("KMGTPEZYRQ")}


def parse_pagesize(value: Any) -> int:
    """``hw:mem_page_size`` as nova's InstanceNUMACell.pagesize: the small/large/any codes, a
    bare number of KiB, or a size with a unit as oslo.utils reads it (``2MB``, ``1GiB``,
    ``2048KB``; ``b``/``bit`` are bits)."""
    text = str(value)
    if text == "any":
        return MEMPAGES_ANY
    if text == "large":
        return MEMPAGES_LARGE
    if text == "small":
        return MEMPAGES_SMALL
    if text.isdigit():
        return int(text)
    match = _SIZE_RE.match(text)
    if not match:
        raise InvalidNUMARequest(f"invalid memory page size {value!r}")
    size = float(match.group(1))
    if match.group(3) in ("b", "bit"):
        size /= 8
    if match.group(2):
        size *= 1024 ** _SIZE_EXPONENT[match.group(2)[0]]
    return int(math.ceil(size) / 1024)


def _bool(value: Any) -> bool:
    """oslo.utils' bool_from_string (not strict)."""
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "t", "true", "on", "y", "yes")


def _cpu_policy(specs: Mapping[str, Any], props: Mapping[str, Any]) -> str | None:
    """nova's ``get_cpu_policy_constraint``: the flavor's policy, unless the image asks for
    more pinning than the flavor allows."""
    flavor, image = specs.get("hw:cpu_policy"), props.get("hw_cpu_policy")
    for value in (flavor, image):
        if value and value not in CPU_POLICIES:
            raise InvalidNUMARequest(f"invalid CPU policy {value!r}")
    if flavor == MIXED and image == DEDICATED:
        raise InvalidNUMARequest("the image asks for dedicated CPUs, the flavor for mixed")
    if flavor == SHARED and image in PINNED_POLICIES:
        raise InvalidNUMARequest(f"the image asks for {image} CPUs, the flavor for shared")
    if flavor in CPU_POLICIES:
        return flavor
    return image if image in CPU_POLICIES else None


def _thread_policy(specs: Mapping[str, Any], props: Mapping[str, Any]) -> str | None:
    """nova's ``get_cpu_thread_policy_constraint``: the image may only add to an unset or
    ``prefer`` flavor policy."""
    flavor, image = specs.get("hw:cpu_thread_policy"), props.get("hw_cpu_thread_policy")
    for value in (flavor, image):
        if value and value not in THREAD_POLICIES:
            raise InvalidNUMARequest(f"invalid CPU thread policy {value!r}")
    if flavor in (None, PREFER):
        return flavor or image or None
    if image and image != flavor:
        raise InvalidNUMARequest("the flavor's and the image's CPU thread policies conflict")
    return flavor or None


def _emulator_policy(specs: Mapping[str, Any]) -> str | None:
    value = specs.get("hw:emulator_threads_policy")
    if not value:
        return None
    if value not in EMULATOR_POLICIES:
        raise InvalidNUMARequest(f"invalid emulator threads policy {value!r}")
    return str(value)


def _realtime_cpus(
    specs: Mapping[str, Any], props: Mapping[str, Any], vcpus: int
) -> frozenset[int] | None:
    """nova's ``get_realtime_cpu_constraint``: the realtime vCPUs of ``hw:cpu_realtime``
    (the image's mask before the flavor's)."""
    if not _bool(specs.get("hw:cpu_realtime")):
        return None
    mask = props.get("hw_cpu_realtime_mask") or specs.get("hw:cpu_realtime_mask")
    every = frozenset(range(vcpus))
    realtime = _cpu_mask(str(mask), vcpus) if mask else every
    if not realtime:
        raise InvalidNUMARequest("the realtime CPU mask selects no CPU")
    if realtime == every and not _emulator_policy(specs):
        raise InvalidNUMARequest("a realtime guest needs a non-realtime CPU or emulator policy")
    if not realtime <= every:
        raise InvalidNUMARequest("the realtime CPU mask names CPUs the flavor does not have")
    return realtime


def _dedicated_cpus(specs: Mapping[str, Any], vcpus: int) -> frozenset[int] | None:
    """nova's ``get_dedicated_cpu_constraint``: ``hw:cpu_dedicated_mask``, which must leave
    both shared and dedicated CPUs."""
    mask = specs.get("hw:cpu_dedicated_mask")
    if not mask:
        return None
    dedicated = _cpu_mask(str(mask), vcpus)
    every = frozenset(range(vcpus))
    if not dedicated or not every - dedicated:
        raise InvalidNUMARequest("the dedicated CPU mask must leave shared and dedicated CPUs")
    if not dedicated <= every:
        raise InvalidNUMARequest("the dedicated CPU mask names CPUs the flavor does not have")
    return dedicated


_VCPU_RE = re.compile(r"resources([1-9][0-9]*)?:VCPU")
_PCPU_RE = re.compile(r"resources([1-9][0-9]*)?:PCPU")
_HT_RE = re.compile(r"trait([1-9][0-9]*)?:HW_CPU_HYPERTHREADING")


def _resource_total(specs: Mapping[str, Any], pattern: re.Pattern[str]) -> int:
    total = 0
    for key, value in specs.items():
        if pattern.match(key):
            try:
                total += int(value)
            except (TypeError, ValueError):
                pass  # the Placement query refuses it
    return total


def _hyperthreading_trait(specs: Mapping[str, Any], props: Mapping[str, Any]) -> str | None:
    for key, value in specs.items():
        if _HT_RE.match(key):
            return str(value)
    if "HW_CPU_HYPERTHREADING" in (props.get("traits_required") or ()):
        return "required"
    return None


def _cpu_policies(
    vcpus: int, specs: Mapping[str, Any], props: Mapping[str, Any]
) -> tuple[str | None, str | None, str | None, frozenset[int]]:
    """The CPU policy, thread policy, emulator threads policy and dedicated vCPUs, with
    nova's sanity checks (``numa_get_constraints`` up to the node count)."""
    cpu_policy = _cpu_policy(specs, props)
    thread_policy = _thread_policy(specs, props)
    realtime = _realtime_cpus(specs, props, vcpus)
    dedicated = _dedicated_cpus(specs, vcpus)
    emulator = _emulator_policy(specs)

    # explicit VCPU/PCPU resources and the HW_CPU_HYPERTHREADING trait stand for the policies
    vcpu_resources = _resource_total(specs, _VCPU_RE)
    pcpu_resources = _resource_total(specs, _PCPU_RE)
    if cpu_policy and (vcpu_resources or pcpu_resources):
        raise InvalidNUMARequest("resources:VCPU/PCPU cannot be combined with a CPU policy")
    if vcpu_resources and pcpu_resources:
        raise InvalidNUMARequest("resources:VCPU and resources:PCPU cannot both be given")
    if pcpu_resources:
        if pcpu_resources != vcpus + (1 if emulator == ISOLATE else 0):
            raise InvalidNUMARequest("resources:PCPU does not match the flavor's vCPUs")
        cpu_policy = DEDICATED
    if vcpu_resources:
        cpu_policy = SHARED
    trait = _hyperthreading_trait(specs, props)
    if thread_policy and trait:
        raise InvalidNUMARequest(
            "trait:HW_CPU_HYPERTHREADING cannot be combined with a thread policy"
        )
    if trait == "forbidden":
        thread_policy = ISOLATE
    elif trait == "required":
        thread_policy = REQUIRE

    if cpu_policy in (SHARED, None):
        if thread_policy:
            raise InvalidNUMARequest("a CPU thread policy needs pinned CPUs")
        if emulator == ISOLATE:
            raise InvalidNUMARequest("isolated emulator threads need pinned CPUs")
        if dedicated:
            raise InvalidNUMARequest("hw:cpu_dedicated_mask needs the mixed CPU policy")
        if realtime:
            raise InvalidNUMARequest("a realtime guest needs pinned CPUs")
    elif cpu_policy == DEDICATED:
        if dedicated:
            raise InvalidNUMARequest("hw:cpu_dedicated_mask needs the mixed CPU policy")
        dedicated = frozenset(range(vcpus))
    else:  # mixed: the dedicated mask, or else the realtime one
        if bool(realtime) == bool(dedicated):
            raise InvalidNUMARequest("the mixed CPU policy needs one dedicated or realtime mask")
        dedicated = dedicated or realtime
    return cpu_policy, thread_policy, emulator, dedicated or frozenset()


def _node_count(specs: Mapping[str, Any], props: Mapping[str, Any]) -> int | None:
    flavor, image = specs.get("hw:numa_nodes"), props.get("hw_numa_nodes")
    if flavor and image:
        raise InvalidNUMARequest("hw:numa_nodes is set in both the flavor and the image")
    nodes = flavor or image
    if nodes is None or nodes == "":
        return None
    try:
        count = int(nodes)
    except (TypeError, ValueError):
        count = 0
    if str(count) != str(nodes) or count < 1:
        raise InvalidNUMARequest(f"invalid number of NUMA nodes {nodes!r}")
    return count


def _requested_pagesize(specs: Mapping[str, Any], props: Mapping[str, Any]) -> int | None:
    """nova's ``_get_numa_pagesize_constraint``: the image may choose a size only where the
    flavor allows ``large`` or ``any``."""
    flavor, image = specs.get("hw:mem_page_size"), props.get("hw_mem_page_size")
    if not flavor:
        if image:
            raise InvalidNUMARequest("the image asks for a page size the flavor does not allow")
        return None
    pagesize = parse_pagesize(flavor)
    if image:
        if pagesize not in (MEMPAGES_ANY, MEMPAGES_LARGE):
            raise InvalidNUMARequest("the image asks for a page size the flavor does not allow")
        return parse_pagesize(image)
    return pagesize


def _per_node(
    specs: Mapping[str, Any], props: Mapping[str, Any], name: str, convert: Callable[[Any], Any]
) -> list[Any] | None:
    """Explicit per-node values: the flavor's ``hw:<name>.0``, ``.1``, ... (up to the first
    missing one), or the image's ``hw_<name>`` list (or its ``hw_<name>.N`` properties, as
    nova's ImageMetaProps reads them); both at once is refused."""
    flavor = []
    while f"hw:{name}.{len(flavor)}" in specs:
        flavor.append(convert(specs[f"hw:{name}.{len(flavor)}"]))
    image = props.get(f"hw_{name}")
    if image is None:
        listed = []
        while f"hw_{name}.{len(listed)}" in props:
            listed.append(convert(props[f"hw_{name}.{len(listed)}"]))
        image = listed or None
    else:
        image = [convert(v) for v in image]
    if not flavor:
        return image
    if image is not None:
        raise InvalidNUMARequest(f"hw:{name}.N is set in both the flavor and the image")
    return flavor


def _cpus(value: Any) -> frozenset[int]:
    if isinstance(value, (list, tuple, set, frozenset)):
        return frozenset(int(c) for c in value)
    return parse_cpu_spec(value)


def _node_layout(
    nodes: int, vcpus: int, memory_mb: int, specs: Mapping[str, Any], props: Mapping[str, Any]
) -> tuple[list[frozenset[int]], list[int]]:
    """The guest CPUs and memory of each node: an even split, or the explicit mapping."""
    cpu_list = _per_node(specs, props, "numa_cpus", _cpus)
    mem_list = _per_node(specs, props, "numa_mem", int)
    if cpu_list is None and mem_list is None:
        if vcpus % nodes or memory_mb % nodes:
            raise InvalidNUMARequest(
                f"{vcpus} vCPUs / {memory_mb} MiB do not split evenly into {nodes} NUMA nodes"
            )
        per_cpu, per_mem = vcpus // nodes, memory_mb // nodes
        cpus = [frozenset(range(n * per_cpu, (n + 1) * per_cpu)) for n in range(nodes)]
        return cpus, [per_mem] * nodes
    if cpu_list is None or mem_list is None or len(cpu_list) != nodes or len(mem_list) != nodes:
        raise InvalidNUMARequest(f"numa_cpus.N and numa_mem.N must be given for all {nodes} nodes")
    left = set(range(vcpus))
    for cpus in cpu_list:
        for cpu in cpus:
            if cpu > vcpus - 1 or cpu not in left:
                raise InvalidNUMARequest("numa_cpus.N must name every vCPU exactly once")
            left.discard(cpu)
    if left:
        raise InvalidNUMARequest("numa_cpus.N must name every vCPU exactly once")
    if sum(mem_list) != memory_mb:
        raise InvalidNUMARequest("numa_mem.N must add up to the flavor's memory")
    return cpu_list, mem_list


def instance_topology_from_request(
    vcpus: int,
    memory_mb: int,
    extra_specs: Mapping[str, Any] | None,
    image_props: Mapping[str, Any] | None,
) -> InstanceTopology | None:
    """The instance NUMA topology nova's API derives from the flavor and image (nova's
    ``hardware.numa_get_constraints``, raising :class:`InvalidNUMARequest` where it raises):
    ``numa_nodes``, ``numa_cpus.N``, ``numa_mem.N``, ``cpu_policy`` (shared/dedicated/mixed,
    with ``hw:cpu_dedicated_mask`` or the realtime mask), ``resources:PCPU``/``VCPU``, the
    ``HW_CPU_HYPERTHREADING`` trait, ``cpu_thread_policy``, ``mem_page_size``,
    ``hw:emulator_threads_policy`` and ``hw:pmem``. None when nothing asks for a topology.
    Not checked: locked memory and memory encryption (the API refuses those conflicts)."""
    specs = extra_specs or {}
    props = image_props or {}
    cpu_policy, thread_policy, emulator, dedicated = _cpu_policies(vcpus, specs, props)
    nodes = _node_count(specs, props)
    pagesize = _requested_pagesize(specs, props)
    pmem = any(label.strip() for label in str(specs.get("hw:pmem") or "").split(","))
    if not (nodes or pagesize or pmem or cpu_policy in PINNED_POLICIES):
        return None
    cell_cpus, cell_mem = _node_layout(nodes or 1, vcpus, memory_mb, specs, props)
    cells = [
        InstanceCell(
            id=n,
            cpuset=cpus - dedicated,
            pcpuset=cpus & dedicated,
            memory=cell_mem[n],
            pagesize=pagesize or None,
            cpu_policy=cpu_policy,
            cpu_thread_policy=thread_policy,
        )
        for n, cpus in enumerate(cell_cpus)
    ]
    return InstanceTopology(cells, emulator)


def requested_instance_topology(spec_obj: Any) -> InstanceTopology | None:
    """The request's instance topology: ``spec_obj.numa_topology`` (decoded at the RPC edge)
    when set, else derived from the flavor extra specs and image properties. Raises
    :class:`InvalidNUMARequest`."""
    topology = spec_obj.numa_topology
    if topology is not None:
        if not isinstance(topology, InstanceTopology):
            raise TypeError(
                "RequestSpec.numa_topology must be decoded at the RPC edge "
                f"(numa.instance_topology_from_primitive), not a {type(topology).__name__}"
            )
        return topology
    flavor = spec_obj.flavor
    image = spec_obj.image
    props = image.properties if image is not None else {}
    return instance_topology_from_request(flavor.vcpus, flavor.memory_mb, flavor.extra_specs, props)


def requested_network_metadata(spec_obj: Any) -> NetworkMetadata | None:
    """The physnets and tunnels of the request's ports (``RequestSpec.network_metadata``, set
    by nova's API for new instances), in whatever form the request carries it."""
    return network_metadata_from_primitive(getattr(spec_obj, "network_metadata", None))


def requires_smt(extra_specs: Mapping[str, Any], image_props: Mapping[str, Any]) -> bool:
    """nova's pre-check: a dedicated CPU policy with the ``require`` thread policy in the
    flavor or the image (either one suffices, as nova looks at both)."""
    policies = {extra_specs.get("hw:cpu_policy"), image_props.get("hw_cpu_policy")}
    threads = {extra_specs.get("hw:cpu_thread_policy"), image_props.get("hw_cpu_thread_policy")}
    return DEDICATED in policies and REQUIRE in threads


# -- fitting ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Limits:
    """nova's NUMATopologyLimits: the host's overcommit ratios, applied per NUMA cell, and the
    request's network metadata (whose NUMA affinity the fit must respect)."""

    cpu_allocation_ratio: float
    ram_allocation_ratio: float
    network_metadata: NetworkMetadata | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "cpu_allocation_ratio": self.cpu_allocation_ratio,
            "ram_allocation_ratio": self.ram_allocation_ratio,
        }
        if self.network_metadata is not None:
            out["network_metadata"] = self.network_metadata.to_dict()
        return out


@dataclass(frozen=True, slots=True)
class FittedCell:
    """One guest node placed on one host cell."""

    guest_id: int
    host_cell_id: int
    memory: int
    pagesize: int | None
    shared_cpus: int
    # (guest vCPU, host pCPU) pairs for pinned CPUs; the emulator-thread pCPU apart
    pinning: tuple[tuple[int, int], ...] = ()
    reserved: frozenset[int] = frozenset()
    # isolate: the whole cores of the pinned CPUs are taken
    isolate: bool = False


@dataclass(slots=True)
class FitResult:
    cells: list[FittedCell] | None = None
    reason: str | None = None

    def __bool__(self) -> bool:
        return self.cells is not None


@dataclass(frozen=True, slots=True)
class _Miss:
    stage: int  # how far the checks got: a higher stage is a nearer miss
    reason: str


def _pagesize_for(host: HostCell, cell: InstanceCell) -> int | _Miss:
    """The page size the guest node gets on this host cell for the page size it requested
    (always as requested: see the module docstring on nova's rewriting of it)."""
    sizes = sorted((p.size_kb for p in host.mempages), reverse=True)
    wanted = cell.pagesize
    if wanted == MEMPAGES_SMALL:
        choices, reason = sizes[-1:], NOT_ENOUGH_SMALLPAGES
    elif wanted == MEMPAGES_LARGE:
        choices, reason = sizes[:-1], NOT_ENOUGH_HUGEPAGES
    elif wanted == MEMPAGES_ANY:
        choices, reason = sizes, NOT_ENOUGH_ANYPAGES
    else:
        if wanted not in sizes:
            return _Miss(0, PAGESIZE_MISSING)
        choices = [wanted]
        reason = NOT_ENOUGH_SMALLPAGES if wanted == sizes[-1] else NOT_ENOUGH_HUGEPAGES
    memory_kb = cell.memory * 1024
    for size in choices:
        page = host.page(size)
        if page is not None and memory_kb % size == 0 and memory_kb <= page.free * size:
            return size
    return _Miss(1, reason)


def _reserve(
    cores: Sequence[tuple[int, ...]], taken: Sequence[int], count: int, whole_cores: bool
) -> frozenset[int] | None:
    """The emulator threads' pCPUs (``count`` of them, 0 or 1), as nova picks them: the first
    free pCPUs, in core order, that the guest's pinning left -- outside the cores it took with
    ``isolate``. None when they are wanted and there is none, or the guest pinned nothing (nova
    reserves only next to a pinning)."""
    if not count:
        return frozenset()
    if not taken:
        return None
    used = set(taken)
    left: list[int] = []
    for core in cores:
        if whole_cores and not used.isdisjoint(core):
            continue
        left.extend(cpu for cpu in core if cpu not in used)
        if len(left) >= count:
            return frozenset(left[:count])
    return frozenset(left) or None


def _pin_isolate(
    host: HostCell, want: int, reserved: int
) -> tuple[list[int], frozenset[int] | None] | _Miss:
    """``isolate``: one thread of each of ``want`` fully free cores."""
    if host.threads_per_core != 1 and host.pcpuset != host.cpuset:
        # dedicated and shared sets are disjoint (cpu_dedicated_set): nova cannot emulate a
        # non-SMT guest here; Placement's HW_CPU_HYPERTHREADING forbidden trait keeps
        # such hosts out already
        return _Miss(5, ISOLATE_HOST_SMT)
    whole = [c for c in host.free_cores if len(c) >= host.threads_per_core]
    if not want or len(whole) < want:
        # nova pins nothing for a guest node without dedicated CPUs, and refuses that
        return _Miss(5, ISOLATE_NO_FREE_CORES)
    chosen = [core[0] for core in whole[:want]]
    return chosen, _reserve(host.free_cores, chosen, reserved, whole_cores=True)


def _pin_siblings(
    host: HostCell, want: int, reserved: int, require: bool
) -> tuple[list[int], frozenset[int] | None] | _Miss:
    """``prefer``/``require``: as many threads of a core as possible, the same number on
    each core (the emptiest cores first); ``prefer`` falls back to any free threads."""
    if require and host.threads_per_core <= 1:
        return _Miss(5, REQUIRE_NO_SMT)
    cores = host.free_cores
    most = max((len(c) for c in cores), default=0)
    chosen: list[int] | None = None
    extra: frozenset[int] | None = frozenset()
    for threads in range(most, 0, -1):
        if require and threads == 1:
            break
        level = [c for c in cores if len(c) >= threads]
        if threads * len(level) < want:
            continue
        candidate = [cpu for core in level for cpu in core[:threads]][:want]
        extra = _reserve(cores, candidate, reserved, whole_cores=False)
        if extra is None:
            continue
        chosen = candidate
        break
    if not chosen and not require:
        flat = [cpu for core in cores for cpu in core]
        if len(flat) < want:
            return _Miss(5, no_pinned_cpus(want + reserved))
        chosen = flat[:want]
        extra = _reserve(cores, chosen, reserved, whole_cores=False)
    if chosen is None:
        return _Miss(5, REQUIRE_NO_FREE_SIBLINGS)
    return chosen, extra


def _pin(
    host: HostCell, cell: InstanceCell, reserved: int, pagesize: int | None
) -> FittedCell | _Miss:
    """Choose host CPUs for the guest node's pinned CPUs (and the emulator thread's), by the
    thread policy, as nova's ``_pack_instance_onto_cores``. Assumes enough free dedicated
    CPUs were already checked. The emulator thread's pCPU is not one the thread policy packs:
    it is any free pCPU the pinning left."""
    vcpus = sorted(cell.pcpuset)
    policy = cell.cpu_thread_policy
    isolate = policy == ISOLATE
    if isolate:
        packed = _pin_isolate(host, len(vcpus), reserved)
    else:
        packed = _pin_siblings(host, len(vcpus), reserved, policy == REQUIRE)
    if isinstance(packed, _Miss):
        return packed
    chosen, extra = packed
    if extra is None:
        return _Miss(5, no_pinned_cpus(len(vcpus) + reserved))
    return FittedCell(
        guest_id=cell.id,
        host_cell_id=host.id,
        memory=cell.memory,
        pagesize=pagesize,
        shared_cpus=len(cell.cpuset),
        pinning=tuple(zip(vcpus, chosen, strict=True)),
        reserved=extra,
        isolate=isolate,
    )


def _memory_miss(host: HostCell, cell: InstanceCell) -> _Miss | None:
    """The memory check of a guest node that asks for no page size: the cell's small pages
    (all of them for an unpinned guest, which may overcommit; the free ones for a pinned
    guest, which may not), or without page data its memory (all / the free part)."""
    small = host.smallest_page
    if small is not None:
        memory_kb = cell.memory * 1024
        available = small.free if cell.pinned else small.total
        if memory_kb > available * small.size_kb or memory_kb % small.size_kb:
            return _Miss(1, NOT_ENOUGH_SMALLPAGES if cell.pinned else NODE_MEMORY_TOO_BIG)
        return None
    if cell.pinned:
        if cell.memory > host.avail_memory:
            return _Miss(1, NOT_ENOUGH_CELL_MEMORY)
    elif cell.memory > host.memory:
        return _Miss(1, NODE_MEMORY_TOO_BIG)
    return None


def fit_cell(
    host: HostCell, cell: InstanceCell, limits: Limits | None = None, reserved: int = 0
) -> FittedCell | _Miss:
    """Fit one guest node on one host cell (nova's ``_numa_fit_instance_cell``);
    ``reserved`` is the number of extra pinned CPUs for the emulator threads."""
    pagesize: int | None = None
    if cell.pagesize:
        chosen = _pagesize_for(host, cell)
        if isinstance(chosen, _Miss):
            return chosen
        pagesize = chosen
    else:
        miss = _memory_miss(host, cell)
        if miss is not None:
            return miss

    # CPUs: never more than the cell has
    pinned = cell.pinned
    has_shared = cell.cpu_policy in (SHARED, MIXED, None)
    if pinned and len(cell.pcpuset) + reserved > len(host.pcpuset):
        return _Miss(2, NODE_CPUS_TOO_MANY)
    if has_shared and len(cell.cpuset) > len(host.cpuset):
        return _Miss(2, NODE_CPUS_TOO_MANY)

    fitted: FittedCell | _Miss | None = None
    if pinned:
        # pinned CPUs are never overcommitted
        if len(cell.pcpuset) + reserved > len(host.free_pcpus):
            return _Miss(3, no_pinned_cpus(len(cell.pcpuset) + reserved))
        fitted = _pin(host, cell, reserved, pagesize)
        if isinstance(fitted, _Miss):
            return fitted
    if has_shared and limits is not None:
        # shared CPUs (of a mixed guest too) and memory, within the allocation ratios
        stage = 6 if pinned else 3
        cpu_limit = len(host.cpuset) * limits.cpu_allocation_ratio
        if host.cpu_usage + len(cell.cpuset) > cpu_limit:
            return _Miss(stage, NOT_ENOUGH_CELL_CPUS)
        ram_limit = host.memory * limits.ram_allocation_ratio
        if host.memory_usage + cell.memory > ram_limit:
            return _Miss(stage + 1, NOT_ENOUGH_CELL_MEMORY)
    if fitted is not None:
        return fitted
    return FittedCell(
        guest_id=cell.id,
        host_cell_id=host.id,
        memory=cell.memory,
        pagesize=pagesize,
        shared_cpus=len(cell.cpuset),
    )


# A PCI check: given the host cell ids the guest nodes landed on, can the PCI requests be
# met with the NUMA affinity they ask for?
PciCheck = Callable[[Sequence[int]], bool]


def pci_device_counts(pools: Iterable[Mapping[str, Any]]) -> dict[int | None, int]:
    """Free PCI devices per NUMA node (``numa_node`` -> sum of the pools' ``count``): what
    orders the host cells (:func:`host_cell_order`)."""
    counts: dict[int | None, int] = {}
    for pool in pools:
        node = pool.get("numa_node")
        counts[node] = counts.get(node, 0) + int(pool.get("count") or 0)
    return counts


def host_cell_order(
    host: HostTopology,
    instance: InstanceTopology,
    pci_counts: Mapping[int | None, int] | None = None,
    pci_requested: bool = False,
    pack: bool = False,
) -> list[HostCell]:
    """The host cells in the order nova tries them; reordered only when the host has more
    cells than the guest nodes. First the cells with the fewest free PCI devices (the most,
    when the request asks for PCI devices); among equals, spreading, the cells with the
    least used shared CPUs (unpinned guests) or the most free pinned CPUs (pinned guests),
    then the most free memory -- packing (``[compute]
    packing_host_numa_cells_allocation_strategy``), the other way round; then the reported
    order. nova sorts three times, each sort stable; one sort on the key tuple (the last
    sort's key first) is the same order."""
    cells = list(host.cells)
    if len(cells) <= len(instance.cells):
        return cells
    spread = -1 if not pack else 1
    shared_guest = instance.cells[0].cpu_policy in (None, SHARED)
    counts = pci_counts or {}
    pci_sign = -1 if pci_requested else 1

    def key(cell: HostCell) -> tuple[int, int, int]:
        if shared_guest:
            cpus = -spread * cell.cpu_usage
        else:
            cpus = spread * len(cell.free_pcpus)
        return (pci_sign * counts.get(cell.id, 0), cpus, spread * cell.avail_memory)

    return sorted(cells, key=key)


class _NetworkCheck:
    """nova's ``_numa_cells_support_network_metadata`` for one request on one host: a physnet
    or tunnel NUMA-affine to some host cell must be affine to one of the chosen cells."""

    __slots__ = ("physnets", "tunneled", "cells")

    def __init__(self, host: HostTopology, wanted: NetworkMetadata):
        affine_physnets: set[str] = set()
        any_tunnel = False
        for cell in host.cells:
            if cell.network is not None:
                affine_physnets |= cell.network.physnets
                any_tunnel = any_tunnel or cell.network.tunneled
        # only what some cell is affine to constrains the choice
        self.physnets = wanted.physnets & affine_physnets
        self.tunneled = wanted.tunneled and any_tunnel
        self.cells = {cell.id: cell for cell in host.cells}

    @property
    def needed(self) -> bool:
        return bool(self.physnets or self.tunneled)

    def __call__(self, cell_ids: Sequence[int]) -> bool:
        chosen = [self.cells[i].network for i in cell_ids]
        networks = [n for n in chosen if n is not None]
        if self.physnets and not self.physnets <= frozenset().union(
            *(n.physnets for n in networks)
        ):
            return False
        return not self.tunneled or any(n.tunneled for n in networks)


class HostFit:
    """The fit of one instance topology on one host: every (guest node, host cell) pair is
    evaluated once, then assignments of guest nodes to distinct host cells are searched in
    nova's order, optionally vetoed by a PCI check (which may differ per allocation
    candidate) and by the network NUMA affinity of the limits."""

    __slots__ = ("host", "instance", "order", "options", "reason", "network")

    def __init__(
        self,
        host: HostTopology,
        instance: InstanceTopology,
        limits: Limits | None = None,
        pci_counts: Mapping[int | None, int] | None = None,
        pci_requested: bool = False,
        pack: bool = False,
    ):
        self.host = host
        self.instance = instance
        self.reason: str | None = None
        self.order = host_cell_order(host, instance, pci_counts, pci_requested, pack)
        self.options: list[list[FittedCell]] = []
        self.network: _NetworkCheck | None = None
        wanted = limits.network_metadata if limits is not None else None
        if wanted is not None:
            check = _NetworkCheck(host, wanted)
            self.network = check if check.needed else None
        if len(instance.cells) > len(host.cells):
            self.reason = TOO_MANY_NODES
            return
        reserve_first = 1 if instance.emulator_threads_isolated else 0
        for index, cell in enumerate(instance.cells):
            reserved = reserve_first if index == 0 else 0
            fits: list[FittedCell] = []
            best: _Miss | None = None
            for host_cell in self.order:
                result = fit_cell(host_cell, cell, limits, reserved)
                if isinstance(result, _Miss):
                    if best is None or result.stage > best.stage:
                        best = result
                else:
                    fits.append(result)
            if not fits:
                self.reason = best.reason if best else TOO_MANY_NODES
                self.options = []
                return
            self.options.append(fits)

    @property
    def possible(self) -> bool:
        """Does every guest node fit some host cell (ignoring distinctness, PCI, networks)?"""
        return self.reason is None

    def fit(self, pci_check: PciCheck | None = None) -> FitResult:
        """The first assignment of guest nodes to distinct host cells (in nova's order) that
        the PCI check and the network NUMA affinity accept."""
        if self.reason is not None:
            return FitResult(reason=self.reason)
        vetoed: str | None = None
        network = self.network
        for combo in self._assignments():
            if pci_check is not None or network is not None:
                cell_ids = [c.host_cell_id for c in combo]
                if pci_check is not None and not pci_check(cell_ids):
                    vetoed = vetoed or PCI_NOT_LOCAL
                    continue
                if network is not None and not network(cell_ids):
                    vetoed = vetoed or NETWORKS_NOT_LOCAL
                    continue
            return FitResult(cells=combo)
        return FitResult(reason=vetoed or CELLS_TAKEN)

    def _assignments(self) -> Iterator[list[FittedCell]]:
        """Every way to give each guest node its own host cell, depth first (the order of
        ``itertools.permutations`` over the ordered cells, as nova's loop)."""
        options = self.options
        chosen: list[FittedCell] = []
        used: set[int] = set()

        def walk(index: int) -> Iterator[list[FittedCell]]:
            if index == len(options):
                yield list(chosen)
                return
            for fitted in options[index]:
                if fitted.host_cell_id in used:
                    continue
                used.add(fitted.host_cell_id)
                chosen.append(fitted)
                yield from walk(index + 1)
                chosen.pop()
                used.discard(fitted.host_cell_id)

        return walk(0)


def fit_instance_to_host(
    host: HostTopology | None,
    instance: InstanceTopology | None,
    limits: Limits | None = None,
    pci_check: PciCheck | None = None,
    pci_counts: Mapping[int | None, int] | None = None,
    pci_requested: bool = False,
    pack: bool = False,
) -> FitResult:
    """Fit an instance topology on a host topology (both parsed); see :class:`HostFit`."""
    if host is None or instance is None:
        return FitResult(reason="no NUMA topology")
    return HostFit(host, instance, limits, pci_counts, pci_requested, pack).fit(pci_check)


# -- usage: what placing the instance takes from the host -----------------------------------


@dataclass(slots=True)
class _CellUsage:
    cpu_usage: int = 0
    memory_usage: int = 0
    pinned: set[int] = field(default_factory=set)
    pages: dict[int, int] = field(default_factory=dict)


def host_topology_with_usage(
    raw_host: Any, fitted: Sequence[FittedCell], host: HostTopology | None = None
) -> Any:
    """A copy of ``compute_nodes.numa_topology`` (in the shape it came in: primitive or plain
    data) with the fitted instance's usage added, as nova's ``numa_usage_from_instance_numa``
    records it: shared CPUs in ``cpu_usage``, memory in ``memory_usage``, pinned CPUs (and,
    for ``isolate``, their whole cores) in ``pinned_cpus``, the pages of the size the guest
    node got (small pages when it asked for none) in ``used``. For the host cache's
    ``consume_from_request``; the input is not modified."""
    return _topology_changed(raw_host, fitted, host, 1)


def host_topology_without_usage(
    raw_host: Any, fitted: Sequence[FittedCell], host: HostTopology | None = None
) -> Any:
    """The inverse of :func:`host_topology_with_usage` (nova's ``free=True``): a copy with
    the instance's usage taken back (never below nothing). For a replay, which takes a
    recorded instance out of the host its compute reports it on."""
    return _topology_changed(raw_host, fitted, host, -1)


def _topology_changed(
    raw_host: Any, fitted: Sequence[FittedCell], host: HostTopology | None, sign: int
) -> Any:
    host = host or host_topology_from_primitive(raw_host)
    if host is None:
        return raw_host
    cells_by_id = {c.id: c for c in host.cells}
    usage: dict[int, _CellUsage] = {}
    for fc in fitted:
        cell = cells_by_id.get(fc.host_cell_id)
        if cell is None:  # (a stored topology of another host's cells)
            continue
        u = usage.setdefault(fc.host_cell_id, _CellUsage())
        u.cpu_usage += fc.shared_cpus
        u.memory_usage += fc.memory
        pinned = {p for _, p in fc.pinning} | set(fc.reserved)
        if fc.isolate:
            for core in cell.siblings:
                if core & pinned:
                    pinned |= set(core)
        u.pinned |= pinned
        # the page size it got, or else the cell's small pages (which every guest's memory
        # uses, as nova counts it)
        small = cell.smallest_page
        size = fc.pagesize or (small.size_kb if small is not None else None)
        if size:
            u.pages[size] = u.pages.get(size, 0) + fc.memory * 1024 // size

    data_raw = json.loads(raw_host) if isinstance(raw_host, (str, bytes)) else raw_host
    return _with_usage(data_raw, usage, sign)


def _with_usage(raw: Any, usage: Mapping[int, _CellUsage], sign: int = 1) -> Any:
    enveloped = isinstance(raw, dict) and _DATA in raw
    data = dict(raw[_DATA]) if enveloped else dict(raw)
    cells = []
    for raw_cell in data.get("cells") or ():
        cell_env = isinstance(raw_cell, dict) and _DATA in raw_cell
        cell = dict(raw_cell[_DATA]) if cell_env else dict(raw_cell)
        u = usage.get(int(cell["id"]))
        if u is not None:
            cell["cpu_usage"] = max(0, int(cell.get("cpu_usage") or 0) + sign * u.cpu_usage)
            cell["memory_usage"] = max(
                0, int(cell.get("memory_usage") or 0) + sign * u.memory_usage
            )
            if u.pinned:
                pinned = set(cell.get("pinned_cpus") or ())
                cell["pinned_cpus"] = sorted(pinned | u.pinned if sign > 0 else pinned - u.pinned)
            if u.pages:
                pages = cell.get("mempages") or ()
                cell["mempages"] = [_page_with_usage(p, u.pages, sign) for p in pages]
        cells.append({**raw_cell, _DATA: cell} if cell_env else cell)
    data["cells"] = cells
    return {**raw, _DATA: data} if enveloped else data


def _page_with_usage(raw_page: Any, pages: Mapping[int, int], sign: int = 1) -> Any:
    env = isinstance(raw_page, dict) and _DATA in raw_page
    page = dict(raw_page[_DATA]) if env else dict(raw_page)
    extra = pages.get(int(page["size_kb"]))
    if extra:
        page["used"] = max(0, int(page.get("used") or 0) + sign * extra)
    return {**raw_page, _DATA: page} if env else page


def fitted_cells_of_instance(value: Any) -> list[FittedCell]:
    """The guest nodes of an instance's stored NUMA topology (``instance_extra.
    numa_topology``: an InstanceNUMATopology primitive, its plain data or its JSON text) as
    the host cells they were placed on: for :func:`host_topology_without_usage`. Empty when
    there is none."""
    if not value:
        return []
    if isinstance(value, (str, bytes)):
        value = json.loads(value)
    data = _data(value)
    out = []
    for i, raw_cell in enumerate(data.get("cells") or ()):
        cell = _data(raw_cell)
        pcpus = _ints(cell.get("pcpuset"))
        cpus = _ints(cell.get("cpuset"))
        policy = cell.get("cpu_policy")
        if policy == DEDICATED and not pcpus and cpus:
            cpus, pcpus = frozenset(), cpus  # InstanceNUMACell < 1.5
        pinning = cell.get("cpu_pinning_raw") or {}
        pagesize = cell.get("pagesize")
        out.append(
            FittedCell(
                guest_id=i,
                host_cell_id=int(cell["id"]) if cell.get("id") is not None else i,
                memory=int(cell.get("memory") or 0),
                pagesize=int(pagesize) if pagesize else None,
                shared_cpus=0 if pcpus else len(cpus),
                pinning=tuple(sorted((int(g), int(h)) for g, h in pinning.items())),
                reserved=_ints(cell.get("cpuset_reserved")),
                isolate=cell.get("cpu_thread_policy") == ISOLATE,
            )
        )
    return out


def numa_topology_after_instance(
    raw_host: Any,
    spec_obj: Any,
    cpu_allocation_ratio: float,
    ram_allocation_ratio: float,
    pci_check: PciCheck | None = None,
    pci_counts: Mapping[int | None, int] | None = None,
    pack: bool | None = None,
) -> Any:
    """``HostState.numa_topology`` after placing ``spec_obj``'s instance there, as nova's
    ``consume_from_request`` records it (refit with the request's network metadata in the
    limits, then add the usage); the input when the request or the host has no NUMA
    topology or the instance no longer fits. ``pci_counts`` (:func:`pci_device_counts` of
    the host's pools) orders the host cells as nova's ``pci_stats`` does; ``pack`` defaults
    to the configured strategy. A new object is returned, never the input modified (see
    :func:`host_topology_of`)."""
    try:
        instance = requested_instance_topology(spec_obj)
        network = requested_network_metadata(spec_obj)
    except (InvalidNUMARequest, KeyError, TypeError, ValueError):
        return raw_host
    host = host_topology_from_primitive(raw_host)
    if instance is None or host is None:
        return raw_host
    limits = Limits(cpu_allocation_ratio, ram_allocation_ratio, network)
    requested = bool(getattr(spec_obj, "pci_requests", None))
    strategy = packing_strategy() if pack is None else pack
    result = HostFit(host, instance, limits, pci_counts, requested, strategy).fit(pci_check)
    if not result or result.cells is None:
        return raw_host
    return host_topology_with_usage(raw_host, result.cells, host)
