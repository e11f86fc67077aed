"""The NUMA fit, ours against nova 34's own functions (tests/differential/harness.py).

Each example is a host NUMA topology as nova-compute's libvirt driver reports it (cells of
cores and their SMT siblings, shared and dedicated CPU sets, page sizes, partly used, with
the physnets and tunnels NUMA-affine to each cell), a flavor and image with the NUMA extra
specs and properties nova's API accepts (and some conflicting ones nova refuses), the
limits NUMATopologyFilter builds (allocation ratios, the request's network metadata), the
``[compute] packing_host_numa_cells_allocation_strategy`` option and the host's PCI pools,
which order the cells. nova's side (``nova_side/diff_numa.py``) runs
``hardware.numa_get_constraints`` then ``hardware.numa_fit_instance_to_host``; ours runs
``instance_topology_from_request`` then ``HostFit``. They must agree on:

* refusing the flavor/image (nova raises), or no NUMA topology at all, or the guest
  topology (each node's shared and dedicated vCPUs, memory, page size and policies);
* fit or no fit, and for a fit, each guest node's host cell, page size, the core each
  pinned vCPU landed on and the core of the emulator threads' pCPU. Cores, not threads:
  which thread of a core nova takes first follows the iteration order of a Python set,
  which is not a rule of the fit.

nova's documented bugs (scheduler/resources/numa.py's docstring) are recognised precisely:
a disagreement is accepted only when nova, re-run with that bug patched out, decides as we
do. Hunt mode: ``NOVASCHED_HUNT=1 .venv/bin/pytest tests/differential/test_numa.py
--hypothesis-show-statistics`` (2,000 examples; the statistics count the bug cases).
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from scheduler.resources import numa
from tests.hunt import examples

PHYSNETS = ("physnet0", "physnet1", "physnet2")
PAGE_2M = 2048
PAGE_1G = 1048576


def _one_in(draw: st.DrawFn, n: int) -> bool:
    """True about once in ``n`` draws (Hypothesis favours the ends of a range, so the middle
    value is the rare one)."""
    return draw(st.integers(0, n - 1)) == n // 2


# -- hosts, as the libvirt driver reports them ------------------------------------------------


@st.composite
def _cpu_roles(draw: st.DrawFn, cores: list[list[int]]) -> tuple[set[int], set[int]]:
    """The shared and dedicated CPU sets: vcpu_pin_set (both the same), or cpu_shared_set and
    cpu_dedicated_set (disjoint, by core, now and then by thread), some CPUs in neither."""
    every = [cpu for core in cores for cpu in core]
    mode = draw(st.sampled_from(["legacy", "legacy", "split", "split", "split", "shared_only"]))
    if mode == "legacy":
        if draw(st.booleans()):
            return set(every), set(every)
        pinned = set(draw(st.lists(st.sampled_from(every), min_size=1, unique=True)))
        return pinned, set(pinned)
    if mode == "shared_only":
        return set(every), set()
    by_thread = _one_in(draw, 10)
    roles = ["shared", "dedicated", "dedicated", "dedicated", "neither"]
    shared: set[int] = set()
    dedicated: set[int] = set()
    for core in cores:
        role = draw(st.sampled_from(roles))
        for cpu in core:
            if by_thread:
                role = draw(st.sampled_from(roles))
            if role == "shared":
                shared.add(cpu)
            elif role == "dedicated":
                dedicated.add(cpu)
    return shared, dedicated


@st.composite
def _mempages(draw: st.DrawFn, memory: int, memory_usage: int) -> list[dict[str, int]]:
    """4 KiB pages for what the huge pages leave, 2 MiB and 1 GiB pages (usually listed even
    with none configured), part used or reserved."""
    sizes = draw(st.sampled_from([[PAGE_2M, PAGE_1G], [PAGE_2M, PAGE_1G], [PAGE_2M], []]))
    huge: list[dict[str, int]] = []
    left = memory
    for size in sizes:
        size_mb = size // 1024
        most = left // size_mb
        total = draw(st.sampled_from([0, most // 4, most // 2, most])) if most else 0
        if _one_in(draw, 3):
            total = draw(st.integers(0, most))
        left -= total * size_mb
        reserved = draw(st.integers(0, total)) if total and _one_in(draw, 5) else 0
        used = 0
        if total and not _one_in(draw, 3):
            used = draw(st.integers(0, total - reserved))
        huge.append({"size_kb": size, "total": total, "used": used, "reserved": reserved})
    small_total = left * 256
    # the small pages in use follow the cell's memory usage, now and then not quite
    small_used = min(small_total, memory_usage * 256)
    if _one_in(draw, 4):
        small_used = draw(st.integers(0, small_total))
    small = {"size_kb": 4, "total": small_total, "used": small_used, "reserved": 0}
    return [small, *huge]


@st.composite
def _pinned(draw: st.DrawFn, siblings: list[list[int]], pcpuset: set[int]) -> list[int]:
    """The pinned CPUs of the guests already there: none, whole cores (``isolate`` guests and
    sibling-packed ones), one thread of some cores, or any."""
    if not pcpuset:
        return []
    cores = [[cpu for cpu in core if cpu in pcpuset] for core in siblings]
    cores = [core for core in cores if core]
    pattern = draw(st.sampled_from(["none", "none", "whole", "threads", "threads", "any"]))
    if pattern == "none":
        return []
    if pattern == "any":
        return sorted(draw(st.sets(st.sampled_from(sorted(pcpuset)))))
    taken = draw(st.lists(st.booleans(), min_size=len(cores), max_size=len(cores)))
    pinned = []
    for core, take in zip(cores, taken, strict=True):
        if take:
            pinned.extend(core if pattern == "whole" else core[:1])
    return sorted(pinned)


@st.composite
def hosts(draw: st.DrawFn, pinning: bool = False) -> dict[str, Any]:
    """A host; with ``pinning``, one whose memory never decides (the CPUs do)."""
    n_cells = draw(st.sampled_from([1, 2, 2, 2, 3, 4]))
    threads = draw(st.sampled_from([1, 2, 2, 2, 4]))
    cores_per_cell = draw(st.sampled_from([1, 2, 3, 4, 4, 6, 8]))
    total_cores = n_cells * cores_per_cell
    intel = draw(st.booleans())  # thread t of core c: c + t * cores, or c * threads + t

    def cpu(core: int, thread: int) -> int:
        return core + thread * total_cores if intel else core * threads + thread

    all_cores = [[cpu(c, t) for t in range(threads)] for c in range(total_cores)]
    shared, dedicated = draw(_cpu_roles(all_cores))
    with_networks = not _one_in(draw, 5)
    cells = []
    for cell_id in range(n_cells):
        cores = all_cores[cell_id * cores_per_cell : (cell_id + 1) * cores_per_cell]
        usable = shared | dedicated
        siblings = [sorted(set(core) & usable) for core in cores]
        siblings = [s for s in siblings if s]
        if len(siblings) > 1 and _one_in(draw, 4):
            siblings = draw(st.permutations(siblings))
        cpuset = sorted(cpu for core in cores for cpu in core if cpu in shared)
        pcpuset = sorted(cpu for core in cores for cpu in core if cpu in dedicated)
        memory = draw(st.sampled_from([1024, 2048, 4096, 8192, 8192, 16384, 32768]))
        memory_usage = draw(
            st.sampled_from([0, 0, 0, memory // 4, memory // 2, memory - 1024, memory + 512])
        )
        memory_usage = max(memory_usage, 0)
        if pinning:
            memory, memory_usage = 32768, 0
        cpu_usage = draw(st.integers(0, 4 * len(cpuset) + 1)) if not _one_in(draw, 3) else 0
        pinned = draw(_pinned(siblings, set(pcpuset)))
        network = None
        if with_networks:
            network = {
                "physnets": sorted(draw(st.sets(st.sampled_from(PHYSNETS[:2])))),
                "tunneled": draw(st.booleans()),
            }
        cells.append(
            {
                "id": cell_id,
                "cpuset": cpuset,
                "pcpuset": pcpuset,
                "memory": memory,
                "cpu_usage": cpu_usage,
                "memory_usage": memory_usage,
                "pinned_cpus": pinned,
                "siblings": siblings,
                "mempages": (
                    [{"size_kb": 4, "total": memory * 256, "used": 0, "reserved": 0}]
                    if pinning
                    else draw(_mempages(memory, memory_usage))
                ),
                "network_metadata": network,
                "socket": cell_id,
            }
        )
    return {"cells": cells}


# -- flavors and images -----------------------------------------------------------------------


def _cpu_list(cpus: list[int] | set[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


@st.composite
def _mask(draw: st.DrawFn, vcpus: int) -> str:
    """A CPU mask naming a proper, non-empty subset of the vCPUs: listed, as a range, or in
    the ``^`` form (exclusions from all vCPUs)."""
    chosen = draw(st.sets(st.integers(0, vcpus - 1), min_size=1, max_size=vcpus - 1))
    form = draw(st.sampled_from(["list", "caret", "mixed"]))
    if form == "caret":
        return ",".join(f"^{c}" for c in sorted(set(range(vcpus)) - chosen))
    if form == "mixed" and len(chosen) < vcpus - 1:
        # "^a,b": all but a, plus b (which is already there)
        excluded = sorted(set(range(vcpus)) - chosen)
        return f"^{excluded[0]}," + _cpu_list(chosen)
    return _cpu_list(chosen)


@st.composite
def _explicit_nodes(
    draw: st.DrawFn, vcpus: int, memory_mb: int, nodes: int
) -> tuple[list[set[int]], list[int]]:
    """A valid hw:numa_cpus.N / hw:numa_mem.N split: every vCPU in one node, memory adding
    up to the flavor's."""
    order = draw(st.permutations(list(range(vcpus))))
    cuts = sorted(draw(st.sets(st.integers(1, vcpus - 1), min_size=nodes - 1, max_size=nodes - 1)))
    bounds = [0, *cuts, vcpus]
    cpus = [set(order[bounds[i] : bounds[i + 1]]) for i in range(nodes)]
    units = memory_mb // 256
    mem_cuts = sorted(
        draw(st.sets(st.integers(1, units - 1), min_size=nodes - 1, max_size=nodes - 1))
    )
    mem_bounds = [0, *mem_cuts, units]
    memory = [(mem_bounds[i + 1] - mem_bounds[i]) * 256 for i in range(nodes)]
    return cpus, memory


PAGE_SIZES = ["small", "large", "large", "any", "any", "2048", "1048576", "4", "2MB", "1GB"]


@st.composite
def requests(draw: st.DrawFn, pinning: bool = False) -> dict[str, Any]:
    """A flavor and image; with ``pinning``, a pinned guest with no page size, the flavor
    alone deciding."""
    vcpus = draw(st.sampled_from([1, 2, 2, 3, 4, 4, 6, 8]))
    memory_mb = draw(st.sampled_from([512, 1024, 1024, 1536, 2048, 2048, 3072, 4096, 8192]))
    specs: dict[str, str] = {}
    props: dict[str, Any] = {}
    policies = ["dedicated", "mixed"] if pinning else [None, None, "shared", "dedicated", "mixed"]
    policy = draw(st.sampled_from(policies))
    if policy == "mixed" and vcpus < 2:
        policy = "dedicated"
    if policy is not None:
        specs["hw:cpu_policy"] = policy
    pinned = policy in ("dedicated", "mixed")
    if policy == "mixed":
        mask = draw(_mask(vcpus))
        if vcpus >= 2 and _one_in(draw, 3):
            # the dedicated vCPUs at one end: some guest nodes get none
            count = draw(st.integers(1, vcpus - 1))
            first = draw(st.booleans())
            mask = f"0-{count - 1}" if first else f"{vcpus - count}-{vcpus - 1}"
        if not _one_in(draw, 4):
            specs["hw:cpu_dedicated_mask"] = mask
        else:
            specs["hw:cpu_realtime"] = "yes"
            specs["hw:cpu_realtime_mask"] = mask
    threads = draw(st.sampled_from([None, None, "prefer", "isolate", "require", "require"]))
    if threads is not None and (pinned or _one_in(draw, 10)):
        specs["hw:cpu_thread_policy"] = threads
    emulator = draw(st.sampled_from([None, None, None, "share", "isolate"]))
    if emulator is not None and (pinned or _one_in(draw, 10)):
        specs["hw:emulator_threads_policy"] = emulator
    nodes = draw(st.sampled_from([None, None, 1, 2, 2, 3, 4]))
    if nodes is not None:
        nodes = min(nodes, vcpus, memory_mb // 256)
        if vcpus % nodes and not _one_in(draw, 5):
            # mostly a node count that splits the flavor evenly
            nodes = max(n for n in range(1, nodes + 1) if vcpus % n == 0)
        in_image = _one_in(draw, 10)
        if draw(st.booleans()) and nodes > 1:
            cpus, memory = draw(_explicit_nodes(vcpus, memory_mb, nodes))
            if in_image:
                props["hw_numa_cpus"] = [sorted(c) for c in cpus]
                props["hw_numa_mem"] = memory
            else:
                for n in range(nodes):
                    specs[f"hw:numa_cpus.{n}"] = _cpu_list(cpus[n])
                    specs[f"hw:numa_mem.{n}"] = str(memory[n])
        if in_image:
            props["hw_numa_nodes"] = nodes
        else:
            specs["hw:numa_nodes"] = str(nodes)
    if pinning:
        return {
            "flavor": {"vcpus": vcpus, "memory_mb": memory_mb, "extra_specs": specs},
            "image": {"properties": props},
        }
    page_size = draw(st.sampled_from([None, None, *PAGE_SIZES]))
    if page_size is not None:
        specs["hw:mem_page_size"] = page_size
    # the image's own settings: mostly where the flavor allows them, now and then a conflict
    image_page = page_size in ("large", "any") or _one_in(draw, 20)
    if image_page and _one_in(draw, 3):
        props["hw_mem_page_size"] = draw(st.sampled_from(["small", "large", "2048", "1GB"]))
    if _one_in(draw, 15):
        props["hw_cpu_policy"] = draw(st.sampled_from(["shared", "dedicated", "mixed"]))
    if _one_in(draw, 15) or (pinned and _one_in(draw, 5)):
        props["hw_cpu_thread_policy"] = draw(st.sampled_from(["prefer", "isolate", "require"]))
    if _one_in(draw, 10) and not policy:
        pcpus = vcpus + (1 if specs.get("hw:emulator_threads_policy") == "isolate" else 0)
        specs["resources:PCPU"] = str(pcpus)
    return {
        "flavor": {"vcpus": vcpus, "memory_mb": memory_mb, "extra_specs": specs},
        "image": {"properties": props},
    }


@st.composite
def cases(draw: st.DrawFn, pinning: bool = False) -> dict[str, Any]:
    host = draw(hosts(pinning))
    request = draw(requests(pinning))
    limits: dict[str, Any] = {
        "cpu_allocation_ratio": draw(st.sampled_from([1.0, 1.5, 2.0, 4.0, 16.0])),
        "ram_allocation_ratio": draw(st.sampled_from([1.0, 1.0, 1.5, 2.0])),
    }
    if _one_in(draw, 3):
        limits["network_metadata"] = {
            "physnets": sorted(draw(st.sets(st.sampled_from(PHYSNETS)))),
            "tunneled": draw(st.booleans()),
        }
    pools = None
    if draw(st.booleans()):
        nodes = [c["id"] for c in host["cells"]] + [None]
        pools = [
            {"numa_node": draw(st.sampled_from(nodes)), "count": draw(st.integers(0, 3))}
            for _ in range(draw(st.integers(0, 3)))
        ]
    return {
        "host": host,
        **request,
        "limits": limits,
        "pack": draw(st.booleans()),
        "pci_pools": pools,
        "pci_requested": pools is not None and draw(st.booleans()),
    }


# -- our side, in nova's answer's shape ---------------------------------------------------------


def _our_topology(topology: numa.InstanceTopology) -> dict[str, Any]:
    return {
        "emulator_threads_policy": topology.emulator_threads_policy,
        "cells": [
            {
                "cpuset": sorted(cell.cpuset),
                "pcpuset": sorted(cell.pcpuset),
                "memory": cell.memory,
                "pagesize": cell.pagesize,
                "cpu_policy": cell.cpu_policy,
                "cpu_thread_policy": cell.cpu_thread_policy,
            }
            for cell in topology.cells
        ],
    }


def _our_fit(case: dict[str, Any], topology: numa.InstanceTopology) -> list[dict[str, Any]] | None:
    host = numa.host_topology_from_primitive(case["host"])
    assert host is not None
    limits = numa.Limits(
        case["limits"]["cpu_allocation_ratio"],
        case["limits"]["ram_allocation_ratio"],
        numa.network_metadata_from_primitive(case["limits"].get("network_metadata")),
    )
    pools = case["pci_pools"]
    counts = numa.pci_device_counts(pools) if pools is not None else None
    requested = case["pci_requested"]
    fitter = numa.HostFit(host, topology, limits, counts, requested, case["pack"])
    result = fitter.fit((lambda cell_ids: True) if requested else None)
    if result.cells is None:
        return None
    return [
        {
            "host_cell": cell.host_cell_id,
            "pagesize": cell.pagesize,
            "pinning": sorted([v, p] for v, p in cell.pinning),
            "reserved": sorted(cell.reserved),
        }
        for cell in result.cells
    ]


def _by_core(case: dict[str, Any], fit: list[dict[str, Any]] | None) -> Any:
    """A fit with each pCPU replaced by its core in the host cell the node landed on (the
    index of its sibling set there; the pCPU itself where it is not of that cell)."""
    if fit is None:
        return None
    cells = {c["id"]: c for c in case["host"]["cells"]}

    def core(cell_id: int, cpu: int) -> Any:
        for index, siblings in enumerate(cells[cell_id]["siblings"]):
            if cpu in siblings:
                return index
        return f"pCPU {cpu} outside host cell {cell_id}"

    return [
        {
            "host_cell": node["host_cell"],
            "pagesize": node["pagesize"],
            "pinning": [[v, core(node["host_cell"], p)] for v, p in node["pinning"]],
            "reserved": sorted(core(node["host_cell"], p) for p in node["reserved"]),
        }
        for node in fit
    ]


def _novas_bug(case: dict[str, Any], answer: dict[str, Any], ours: Any) -> str | None:
    """The documented nova bug that explains a disagreement: nova's own fit re-decided with
    the bug patched out is ours. None when none does."""
    fixed = _by_core(case, answer["fixed"])
    if ours != fixed or fixed == _by_core(case, answer["real"]):
        return None
    pagesize = _by_core(case, answer["pagesize"]) == fixed
    cache = _by_core(case, answer["cache"]) == fixed
    if pagesize and not cache:
        return "nova bug: page size rewritten while trying cells"
    if cache and not pagesize:
        return "nova bug: fit cache keyed by an overwritten id"
    return "nova bugs: page size rewritten and fit cache"


SETTINGS = settings(
    max_examples=examples(300),
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@SETTINGS
@given(case=cases())
def test_numa_fit_equals_novas(nova, case: dict[str, Any]) -> None:
    _compare(nova, case)


@SETTINGS
@given(case=cases(pinning=True))
def test_cpu_pinning_equals_novas(nova, case: dict[str, Any]) -> None:
    """Pinned guests on hosts where only the CPUs decide: thread policies, isolated
    emulator threads, mixed guests, cores partly pinned already."""
    _compare(nova, case)


def _compare(nova: Any, case: dict[str, Any]) -> None:
    answer = nova.call("numa", "fit", case)
    flavor = case["flavor"]
    try:
        topology = numa.instance_topology_from_request(
            flavor["vcpus"],
            flavor["memory_mb"],
            flavor["extra_specs"],
            case["image"]["properties"],
        )
    except numa.InvalidNUMARequest as exc:
        assert "error" in answer, f"we refuse ({exc}), nova does not: {answer}"
        event(f"both refuse the request (nova: {answer['error']})")
        return
    assert "error" not in answer, f"nova refuses ({answer}), we do not"
    if topology is None:
        assert answer["topology"] is None, f"nova has a NUMA topology, we none: {answer}"
        event("no NUMA topology")
        return
    assert answer["topology"] == _our_topology(topology)

    ours = _by_core(case, _our_fit(case, topology))
    if ours == _by_core(case, answer["real"]):
        event("fits" if ours is not None else "does not fit")
        return
    bug = _novas_bug(case, answer, ours)
    assert bug is not None, (
        f"NUMA fit differs from nova's:\n ours: {ours}\n nova: {_by_core(case, answer['real'])}"
        f"\n nova without its bugs: {_by_core(case, answer['fixed'])}"
    )
    event(bug)
