"""Fitting an instance's NUMA topology onto a host's NUMA cells: pure functions over plain data.

Inputs are the shapes nova stores and sends:

* the host: ``compute_nodes.numa_topology``, JSON-decoded -- a ``NUMATopology`` primitive (or
  its unwrapped data) whose cells carry ``id``, ``cpuset``, ``pcpuset``, ``memory`` (MiB),
  ``cpu_usage``, ``memory_usage``, ``pinned_cpus``, ``siblings`` (lists of thread ids per
  core) and ``mempages`` (``size_kb``, ``total``, ``used``, ``reserved``);
* the instance: ``RequestSpec.numa_topology`` (an ``InstanceNUMATopology``, unwrapped) or, when
  the request carries none, the flavor extra specs and image properties it was built from
  (:func:`instance_topology_from_request`).

The rules are nova's (``nova.virt.hardware.numa_fit_instance_to_host``), as documented:

* an instance never overcommits against itself: a guest node must fit a host cell's total
  memory and CPUs;
* page sizes: ``small``/``large``/``any``/an explicit size must have enough *free* pages
  (``total - used - reserved``) in the cell; without a page size, the memory must fit the
  cell's small pages (hugepage memory is not usable by ordinary guests);
* pinned CPUs (``dedicated``, and the dedicated part of ``mixed``) come from ``pcpuset`` minus
  ``pinned_cpus``, never overcommitted, and the cell's free memory must hold the guest node;
  the thread policy (``prefer``/``require``/``isolate``) decides how they are packed on cores;
* shared CPUs and memory of unpinned guests are checked against the cell's capacity times the
  host's ``cpu_allocation_ratio``/``ram_allocation_ratio``;
* guest nodes go to distinct host cells; every assignment is tried, and an optional PCI check
  (NUMA affinity of the instance's PCI devices) can veto one.

Nothing here mutates its inputs. :func:`host_topology_of` caches one parsed topology per
HostState, keyed by the identity of its ``numa_topology`` object (the host cache replaces that
object whenever the compute node reports, so a cached parse is never stale).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.primitives import unwrap

# nova's InstanceNUMACell.pagesize codes for the symbolic hw:mem_page_size values
MEMPAGES_SMALL = -1
MEMPAGES_LARGE = -2
MEMPAGES_ANY = -3

SHARED = "shared"
DEDICATED = "dedicated"
MIXED = "mixed"
PINNED_POLICIES = (DEDICATED, MIXED)

PREFER = "prefer"
ISOLATE = "isolate"
REQUIRE = "require"

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


def no_pinned_cpus(count: int) -> str:
    """The reason for a guest node whose pinned CPUs no host cell has free."""
    return f"no NUMA cell with {count} free pinned CPUs"


class InvalidNUMARequest(ValueError):
    """The flavor/image NUMA settings do not describe a valid topology (nova's API would have
    refused them)."""


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
    # derived once at construction (fitting reads them for every request)
    free_pcpus: frozenset[int] = field(init=False, compare=False, repr=False)
    threads_per_core: int = field(init=False, compare=False, repr=False)
    has_threads: bool = field(init=False, compare=False, repr=False)
    free_cores: tuple[tuple[int, ...], ...] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        free = self.pcpuset - self.pinned_cpus
        set_(self, "free_pcpus", free)
        set_(self, "threads_per_core", max((len(s) for s in self.siblings), default=1) or 1)
        set_(self, "has_threads", any(len(s) > 1 for s in self.siblings))
        # The free dedicated CPUs grouped by core: the sibling sets cut to the free pCPUs,
        # plus a core of its own for a dedicated CPU that no sibling set names (nova would
        # not pin those at all; libvirt reports a sibling set for every CPU, so this only
        # matters for odd data).
        cores = [tuple(sorted(s & free)) for s in self.siblings]
        covered = frozenset().union(*self.siblings) if self.siblings else frozenset()
        cores.extend((cpu,) for cpu in sorted(free - covered))
        set_(self, "free_cores", tuple(c for c in cores if c))

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


@dataclass(slots=True)
class InstanceCell:
    id: int
    cpuset: frozenset[int]  # shared (floating) guest CPUs
    pcpuset: frozenset[int]  # pinned guest CPUs
    memory: int  # MiB
    pagesize: int | None = None
    cpu_policy: str | None = None
    cpu_thread_policy: str | None = None

    @property
    def pinned(self) -> bool:
        return self.cpu_policy in PINNED_POLICIES


@dataclass(slots=True)
class InstanceTopology:
    cells: list[InstanceCell]
    emulator_threads_policy: str | None = None

    @property
    def emulator_threads_isolated(self) -> bool:
        return self.emulator_threads_policy == ISOLATE


def instance_topology_from_primitive(value: Any) -> InstanceTopology | None:
    """An :class:`InstanceTopology` from ``RequestSpec.numa_topology`` (an
    InstanceNUMATopology primitive or its plain data); None for no topology."""
    if not value:
        return None
    data = _data(value)
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
    return InstanceTopology(cells, data.get("emulator_threads_policy"))


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


_SIZE_RE = re.compile(r"^\s*(\d+)\s*([KMGT])i?[Bb]?\s*$", re.IGNORECASE)
_SIZE_SHIFT = {"K": 0, "M": 10, "G": 20, "T": 30}


def parse_pagesize(value: Any) -> int:
    """``hw:mem_page_size`` as nova's InstanceNUMACell.pagesize: small/large/any codes, or a
    size in KiB (a bare number is KiB; ``2MB``, ``1GiB``, ``2048KB`` are accepted)."""
    text = str(value).strip().lower()
    if text == "small":
        return MEMPAGES_SMALL
    if text == "large":
        return MEMPAGES_LARGE
    if text == "any":
        return MEMPAGES_ANY
    if text.isdigit():
        return int(text)
    match = _SIZE_RE.match(text)
    if not match:
        raise InvalidNUMARequest(f"invalid memory page size {value!r}")
    return int(match.group(1)) << _SIZE_SHIFT[match.group(2).upper()]


def _pick(extra_specs: Mapping[str, Any], image_props: Mapping[str, Any], name: str) -> Any:
    """The flavor's ``hw:<name>`` if set, else the image's ``hw_<name>``."""
    value = extra_specs.get(f"hw:{name}")
    if value is None or value == "":
        value = image_props.get(f"hw_{name}")
    return None if value == "" else value


def _per_node(
    extra_specs: Mapping[str, Any], image_props: Mapping[str, Any], name: str, nodes: int
) -> list[Any] | None:
    """Explicit per-node values (``hw:numa_cpus.N`` / ``hw:numa_mem.N``), from the flavor or
    else the image (``hw_numa_cpus`` list, or ``hw_numa_cpus.N`` keys); None if none given."""
    values = [extra_specs.get(f"hw:{name}.{n}") for n in range(nodes)]
    if all(v is None for v in values):
        listed = image_props.get(f"hw_{name}")
        if isinstance(listed, (list, tuple)) and listed:
            values = list(listed)
        else:
            values = [image_props.get(f"hw_{name}.{n}") for n in range(nodes)]
    if all(v is None for v in values):
        return None
    if len(values) != nodes or any(v is None for v in values):
        raise InvalidNUMARequest(f"{name} must be given for all {nodes} NUMA nodes")
    return values


def instance_topology_from_request(
    vcpus: int,
    memory_mb: int,
    extra_specs: Mapping[str, Any] | None,
    image_props: Mapping[str, Any] | None,
) -> InstanceTopology | None:
    """The instance NUMA topology nova's API derives from the flavor and image (a documented
    subset of ``hardware.numa_get_constraints``): ``numa_nodes``, ``numa_cpus.N``,
    ``numa_mem.N``, ``cpu_policy`` (shared/dedicated/mixed, with ``hw:cpu_dedicated_mask``),
    ``cpu_thread_policy``, ``mem_page_size`` and ``hw:emulator_threads_policy``. The flavor's
    value wins over the image's. None when nothing asks for a topology."""
    specs = extra_specs or {}
    props = image_props or {}
    nodes_value = _pick(specs, props, "numa_nodes")
    page_value = _pick(specs, props, "mem_page_size")
    cpu_policy = _pick(specs, props, "cpu_policy")
    thread_policy = _pick(specs, props, "cpu_thread_policy")
    if cpu_policy is not None:
        cpu_policy = str(cpu_policy).lower()
        if cpu_policy not in (SHARED, DEDICATED, MIXED):
            raise InvalidNUMARequest(f"invalid CPU policy {cpu_policy!r}")
    if thread_policy is not None:
        thread_policy = str(thread_policy).lower()
        if thread_policy not in (PREFER, ISOLATE, REQUIRE):
            raise InvalidNUMARequest(f"invalid CPU thread policy {thread_policy!r}")
    pagesize = parse_pagesize(page_value) if page_value is not None else None

    if nodes_value is None and pagesize is None and cpu_policy not in PINNED_POLICIES:
        return None
    try:
        nodes = int(nodes_value) if nodes_value is not None else 1
    except (TypeError, ValueError):
        raise InvalidNUMARequest(f"invalid number of NUMA nodes {nodes_value!r}") from None
    if nodes < 1 or nodes > max(vcpus, 1):
        raise InvalidNUMARequest(f"cannot split {vcpus} vCPUs into {nodes} NUMA nodes")

    cpus_per_node = _per_node(specs, props, "numa_cpus", nodes)
    mem_per_node = _per_node(specs, props, "numa_mem", nodes)
    if (cpus_per_node is None) != (mem_per_node is None):
        raise InvalidNUMARequest("numa_cpus.N and numa_mem.N must be given together")
    if cpus_per_node is None or mem_per_node is None:
        if vcpus % nodes or memory_mb % nodes:
            raise InvalidNUMARequest(
                f"{vcpus} vCPUs / {memory_mb} MiB do not split evenly into {nodes} NUMA nodes"
            )
        per_cpu, per_mem = vcpus // nodes, memory_mb // nodes
        cell_cpus = [frozenset(range(n * per_cpu, (n + 1) * per_cpu)) for n in range(nodes)]
        cell_mem = [per_mem] * nodes
    else:
        cell_cpus = [
            frozenset(int(c) for c in v) if isinstance(v, (list, tuple, set)) else parse_cpu_spec(v)
            for v in cpus_per_node
        ]
        cell_mem = [int(v) for v in mem_per_node]
        all_cpus = [c for cpus in cell_cpus for c in cpus]
        if len(all_cpus) != len(set(all_cpus)) or set(all_cpus) != set(range(vcpus)):
            raise InvalidNUMARequest("numa_cpus.N must name every vCPU exactly once")
        if sum(cell_mem) != memory_mb:
            raise InvalidNUMARequest("numa_mem.N must add up to the flavor's memory")

    dedicated_mask: frozenset[int] | None = None
    if cpu_policy == MIXED:
        mask = specs.get("hw:cpu_dedicated_mask")
        if not mask:
            raise InvalidNUMARequest("the mixed CPU policy needs hw:cpu_dedicated_mask")
        mask = str(mask).strip()
        if mask.startswith("^"):
            dedicated_mask = frozenset(range(vcpus)) - parse_cpu_spec(mask[1:].replace("^", ""))
        else:
            dedicated_mask = parse_cpu_spec(mask)
        if not dedicated_mask or dedicated_mask >= frozenset(range(vcpus)):
            raise InvalidNUMARequest("the mixed CPU policy needs shared and dedicated CPUs")

    cells = []
    for n in range(nodes):
        cpus = cell_cpus[n]
        if cpu_policy == DEDICATED:
            shared, pinned = frozenset(), cpus
        elif cpu_policy == MIXED and dedicated_mask is not None:
            pinned = cpus & dedicated_mask
            shared = cpus - pinned
        else:
            shared, pinned = cpus, frozenset()
        cells.append(
            InstanceCell(
                id=n,
                cpuset=shared,
                pcpuset=pinned,
                memory=cell_mem[n],
                pagesize=pagesize,
                cpu_policy=cpu_policy,
                cpu_thread_policy=thread_policy if cpu_policy in PINNED_POLICIES else None,
            )
        )
    emulator = None
    if cpu_policy in PINNED_POLICIES:
        emulator = specs.get("hw:emulator_threads_policy") or None
    return InstanceTopology(cells, emulator)


def requested_instance_topology(spec_obj: Any) -> InstanceTopology | None:
    """The request's instance topology: ``spec_obj.numa_topology`` when set, else derived from
    the flavor extra specs and image properties. Raises :class:`InvalidNUMARequest`."""
    topology = instance_topology_from_primitive(getattr(spec_obj, "numa_topology", None))
    if topology is not None:
        return topology
    flavor = spec_obj.flavor
    image = getattr(spec_obj, "image", None)
    props = image.properties if image is not None else {}
    return instance_topology_from_request(flavor.vcpus, flavor.memory_mb, flavor.extra_specs, props)


def requires_smt(extra_specs: Mapping[str, Any], image_props: Mapping[str, Any]) -> bool:
    """nova's pre-check: a dedicated CPU policy with the ``require`` thread policy in the
    flavor or the image (either one suffices, as nova looks at both)."""
    policies = {extra_specs.get("hw:cpu_policy"), image_props.get("hw_cpu_policy")}
    threads = {extra_specs.get("hw:cpu_thread_policy"), image_props.get("hw_cpu_thread_policy")}
    return DEDICATED in policies and REQUIRE in threads


# -- fitting ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Limits:
    """nova's NUMATopologyLimits: the host's overcommit ratios, applied per NUMA cell."""

    cpu_allocation_ratio: float
    ram_allocation_ratio: float

    def to_dict(self) -> dict[str, float]:
        return {
            "cpu_allocation_ratio": self.cpu_allocation_ratio,
            "ram_allocation_ratio": self.ram_allocation_ratio,
        }


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
    """The page size the guest node gets on this host cell for a requested page size."""
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


def _pin(
    host: HostCell, cell: InstanceCell, reserved: int, pagesize: int | None
) -> FittedCell | _Miss:
    """Choose host CPUs for the guest node's pinned CPUs (and the emulator thread's), by the
    thread policy. Assumes enough free dedicated CPUs were already checked."""
    want = len(cell.pcpuset)
    need = want + reserved
    tpc = host.threads_per_core
    free_cores = host.free_cores
    policy = cell.cpu_thread_policy
    usable: list[int] | None = None
    isolate = policy == ISOLATE

    if isolate:
        if tpc > 1 and host.pcpuset != host.cpuset:
            # dedicated and shared sets are disjoint (cpu_dedicated_set): nova cannot emulate a
            # non-SMT guest here; Placement's HW_CPU_HYPERTHREADING forbidden trait keeps
            # such hosts out already
            return _Miss(5, ISOLATE_HOST_SMT)
        whole = [c for c in free_cores if len(c) >= tpc]
        if len(whole) < need:
            return _Miss(5, ISOLATE_NO_FREE_CORES)
        usable = [c[0] for c in whole]  # one thread per fully free core
    else:
        most = max((len(c) for c in free_cores), default=0)
        for threads in range(most, 0, -1):
            if policy == REQUIRE and threads <= 1:
                break
            cores = [c for c in free_cores if len(c) >= threads]
            if threads * len(cores) >= need:
                usable = [cpu for c in cores for cpu in c[:threads]]
                break
        if usable is None:
            if policy == REQUIRE:
                return _Miss(5, REQUIRE_NO_SMT if tpc <= 1 else REQUIRE_NO_FREE_SIBLINGS)
            usable = [cpu for c in free_cores for cpu in c]
            if len(usable) < need:  # free_cores covers every free pCPU: cannot happen
                return _Miss(5, no_pinned_cpus(need))
    return FittedCell(
        guest_id=cell.id,
        host_cell_id=host.id,
        memory=cell.memory,
        pagesize=pagesize,
        shared_cpus=len(cell.cpuset),
        pinning=tuple(zip(sorted(cell.pcpuset), usable, strict=False)),
        reserved=frozenset(usable[want:need]),
        isolate=isolate,
    )


def fit_cell(
    host: HostCell, cell: InstanceCell, limits: Limits | None = None, reserved: int = 0
) -> FittedCell | _Miss:
    """Fit one guest node on one host cell (nova's ``_numa_fit_instance_cell``);
    ``reserved`` is the number of extra pinned CPUs for the emulator threads."""
    # memory: never more than the cell holds; with page sizes, in pages of the right size
    pagesize: int | None = None
    if cell.pagesize:
        chosen = _pagesize_for(host, cell)
        if isinstance(chosen, _Miss):
            return chosen
        pagesize = chosen
    elif host.mempages:
        # no page size asked: ordinary (smallest) pages, overcommit allowed, so their total
        smallest = min(p.size_kb for p in host.mempages)
        page = host.page(smallest)
        memory_kb = cell.memory * 1024
        if page is None or memory_kb > page.total * smallest or memory_kb % smallest:
            return _Miss(1, NODE_MEMORY_TOO_BIG)
    elif cell.memory > host.memory:
        return _Miss(1, NODE_MEMORY_TOO_BIG)

    # CPUs: never more than the cell has
    if cell.pinned and len(cell.pcpuset) + reserved > len(host.pcpuset):
        return _Miss(2, NODE_CPUS_TOO_MANY)
    if cell.cpu_policy in (SHARED, MIXED, None) and len(cell.cpuset) > len(host.cpuset):
        return _Miss(2, NODE_CPUS_TOO_MANY)

    if cell.pinned:
        # pinned CPUs and their memory are never overcommitted
        if len(cell.pcpuset) + reserved > len(host.free_pcpus):
            return _Miss(3, no_pinned_cpus(len(cell.pcpuset) + reserved))
        if cell.memory > host.avail_memory:
            return _Miss(4, NOT_ENOUGH_CELL_MEMORY)
        return _pin(host, cell, reserved, pagesize)
    if limits is not None:
        cpu_limit = len(host.cpuset) * limits.cpu_allocation_ratio
        if host.cpu_usage + len(cell.cpuset) > cpu_limit:
            return _Miss(3, NOT_ENOUGH_CELL_CPUS)
        ram_limit = host.memory * limits.ram_allocation_ratio
        if host.memory_usage + cell.memory > ram_limit:
            return _Miss(4, NOT_ENOUGH_CELL_MEMORY)
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


class HostFit:
    """The fit of one instance topology on one host: every (guest node, host cell) pair is
    evaluated once, then assignments of guest nodes to distinct host cells are searched,
    optionally vetoed by a PCI check (which may differ per allocation candidate)."""

    __slots__ = ("host", "instance", "order", "options", "reason")

    def __init__(
        self,
        host: HostTopology,
        instance: InstanceTopology,
        limits: Limits | None = None,
        pci_numa_nodes: Iterable[int | None] | None = None,
    ):
        self.host = host
        self.instance = instance
        self.reason: str | None = None
        # Host cells in preference order: without PCI requests, cells without PCI devices
        # first (``pci_numa_nodes`` is given only then); then, spreading, the cells with the
        # most free pinned CPUs (pinned guests) or the fewest used CPUs, then most memory.
        pci_nodes = set(pci_numa_nodes or ())
        pinned = any(c.pinned for c in instance.cells)

        def preference(cell: HostCell) -> tuple[bool, int, int]:
            cpus = -len(cell.free_pcpus) if pinned else cell.cpu_usage
            return (cell.id in pci_nodes, cpus, -cell.avail_memory)

        self.order = sorted(host.cells, key=preference)
        self.options: list[list[FittedCell]] = []
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
        """Does every guest node fit some host cell (ignoring distinctness and PCI)?"""
        return self.reason is None

    def fit(self, pci_check: PciCheck | None = None) -> FitResult:
        """The first assignment of guest nodes to distinct host cells (in preference order)
        that the PCI check accepts."""
        if self.reason is not None:
            return FitResult(reason=self.reason)
        vetoed = False
        for combo in self._assignments():
            if pci_check is not None and not pci_check([c.host_cell_id for c in combo]):
                vetoed = True
                continue
            return FitResult(cells=combo)
        return FitResult(reason=PCI_NOT_LOCAL if vetoed else CELLS_TAKEN)

    def _assignments(self) -> Iterator[list[FittedCell]]:
        """Every way to give each guest node its own host cell, depth first."""
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
    pci_numa_nodes: Iterable[int | None] | None = None,
) -> FitResult:
    """Fit an instance topology on a host topology (both parsed); see :class:`HostFit`."""
    if host is None or instance is None:
        return FitResult(reason="no NUMA topology")
    return HostFit(host, instance, limits, pci_numa_nodes).fit(pci_check)


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
    for ``isolate``, their whole cores) in ``pinned_cpus``, huge pages in ``used``. For the
    host cache's ``consume_from_request``; the input is not modified."""
    host = host or host_topology_from_primitive(raw_host)
    if host is None:
        return raw_host
    cells_by_id = {c.id: c for c in host.cells}
    usage: dict[int, _CellUsage] = {}
    for fc in fitted:
        u = usage.setdefault(fc.host_cell_id, _CellUsage())
        u.cpu_usage += fc.shared_cpus
        u.memory_usage += fc.memory
        pinned = {p for _, p in fc.pinning} | set(fc.reserved)
        if fc.isolate:
            cell = cells_by_id[fc.host_cell_id]
            for core in cell.siblings:
                if core & pinned:
                    pinned |= set(core)
        u.pinned |= pinned
        if fc.pagesize:
            u.pages[fc.pagesize] = u.pages.get(fc.pagesize, 0) + fc.memory * 1024 // fc.pagesize

    data_raw = json.loads(raw_host) if isinstance(raw_host, (str, bytes)) else raw_host
    return _with_usage(data_raw, usage)


def _with_usage(raw: Any, usage: Mapping[int, _CellUsage]) -> Any:
    enveloped = isinstance(raw, dict) and _DATA in raw
    data = dict(raw[_DATA]) if enveloped else dict(raw)
    cells = []
    for raw_cell in data.get("cells") or ():
        cell_env = isinstance(raw_cell, dict) and _DATA in raw_cell
        cell = dict(raw_cell[_DATA]) if cell_env else dict(raw_cell)
        u = usage.get(int(cell["id"]))
        if u is not None:
            cell["cpu_usage"] = int(cell.get("cpu_usage") or 0) + u.cpu_usage
            cell["memory_usage"] = int(cell.get("memory_usage") or 0) + u.memory_usage
            if u.pinned:
                cell["pinned_cpus"] = sorted(set(cell.get("pinned_cpus") or ()) | u.pinned)
            if u.pages:
                pages = cell.get("mempages") or ()
                cell["mempages"] = [_page_with_usage(p, u.pages) for p in pages]
        cells.append({**raw_cell, _DATA: cell} if cell_env else cell)
    data["cells"] = cells
    return {**raw, _DATA: data} if enveloped else data


def _page_with_usage(raw_page: Any, pages: Mapping[int, int]) -> Any:
    env = isinstance(raw_page, dict) and _DATA in raw_page
    page = dict(raw_page[_DATA]) if env else dict(raw_page)
    extra = pages.get(int(page["size_kb"]))
    if extra:
        page["used"] = int(page.get("used") or 0) + extra
    return {**raw_page, _DATA: page} if env else page


def numa_topology_after_instance(
    raw_host: Any,
    spec_obj: Any,
    cpu_allocation_ratio: float,
    ram_allocation_ratio: float,
    pci_check: PciCheck | None = None,
) -> Any:
    """``HostState.numa_topology`` after placing ``spec_obj``'s instance there, as nova's
    ``consume_from_request`` records it (refit, then add the usage); the input when the
    request or the host has no NUMA topology or the instance no longer fits. A new object
    is returned, never the input modified (see :func:`host_topology_of`)."""
    try:
        instance = requested_instance_topology(spec_obj)
    except (InvalidNUMARequest, KeyError, TypeError, ValueError):
        return raw_host
    host = host_topology_from_primitive(raw_host)
    if instance is None or host is None:
        return raw_host
    limits = Limits(cpu_allocation_ratio, ram_allocation_ratio)
    result = HostFit(host, instance, limits).fit(pci_check)
    if not result or result.cells is None:
        return raw_host
    return host_topology_with_usage(raw_host, result.cells, host)
