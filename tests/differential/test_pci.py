"""PCI: nova 34's ``PciDeviceStats`` and ours (``scheduler/resources/pci.py``) on the same
Hypothesis-generated hosts and requests (nova's side: ``nova_side/diff_pci.py``).

The pools are what a compute writes to ``compute_nodes.pci_stats`` (per-device-address
pools tagged with ``dev_type``, ``remote_managed`` -- as the operator spelled it --,
``physical_network``, ``trusted``, ``live_migratable`` and, with PCI in Placement, the
``rp_uuid`` of their provider; counts of 0 included, as a compute reports pools it gave away
whole); the requests, what nova's API makes of flavor aliases (with ``resource_class`` and
``traits`` under PCI in Placement, several ORed specs otherwise) and SR-IOV ports, several at
once. Three levels are compared:

* ``support_requests`` (with and without the instance's NUMA cells and a provider mapping)
  and ``apply_requests``: the answer, whether the consumption applied, and the pools after it
  -- in order, with their counts;
* PciPassthroughFilter over a host's allocation candidates: pass or not, and the candidates
  kept;
* HostState.consume_from_request: the NUMA fit (host cells ordered by their free PCI
  devices, each assignment checked with ``support_requests``), then the requests applied to
  the fitted cells with the request groups' providers. The guest and host cells are small
  and roomy: which cells fit depends on their usage order and the PCI devices, not on CPU or
  memory arithmetic (the NUMA differential's business).

No case has shown a nova bug to set aside: none is excluded. Hunt mode (2,000 cases per
test, about a minute and a half)::

    NOVASCHED_HUNT=1 .venv/bin/pytest -p no:cacheprovider tests/differential/test_pci.py
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from filters.pci_passthrough_filter import PciPassthroughFilter
from scheduler.hosts.state import HostState
from scheduler.objects import Flavor, RequestGroup, RequestSpec
from scheduler.resources import numa, pci
from tests.hunt import examples
from tests.unit.filters.fakes import make_host, make_spec

SETTINGS = settings(
    max_examples=examples(150),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# (vendor, product): VF-capable NICs, a GPU; the spellings differ in case on purpose
DEVICES = [("8086", "1520"), ("8086", "1521"), ("10de", "1EB8"), ("15b3", "101e")]
PHYSNETS = ["physnet1", "physnet2"]
POLICIES = [None, "legacy", "required", "preferred", "socket"]
PROVIDERS = [f"rp-{i}" for i in range(5)]
ELSEWHERE = "rp-elsewhere"  # a provider no pool of the host has


def _env(name: str, data: dict[str, Any], version: str = "1.1") -> dict[str, Any]:
    return {
        "nova_object.name": name,
        "nova_object.namespace": "nova",
        "nova_object.version": version,
        "nova_object.data": data,
        "nova_object.changes": sorted(data),
    }


def _respell(draw: st.DrawFn, value: str) -> str:
    """The value, now and then in other case (nova compares strings case-insensitively)."""
    return value.swapcase() if draw(st.integers(0, 4)) == 0 else value


def _chance(draw: st.DrawFn, one_in: int) -> bool:
    """True about once in ``one_in`` draws (small integers come up more often)."""
    return draw(st.sampled_from([True] + [False] * (one_in - 1)))


# -- strategies -----------------------------------------------------------------------------


@st.composite
def pool_lists(
    draw: st.DrawFn, placement: bool, nodes: tuple[int | None, ...] = (None, 0, 0, 1, 1, 2)
) -> dict[str, Any]:
    """A PciDevicePoolList primitive as a compute writes it, its pools on ``nodes``."""
    objects = []
    for i in range(draw(st.integers(1, 5))):
        vendor, product = draw(st.sampled_from(DEVICES))
        dev_type = draw(st.sampled_from(["type-PCI", "type-VF", "type-VF", "type-PF", "vdpa"]))
        tags: dict[str, str] = {"dev_type": dev_type, "address": f"0000:{i:02x}:00.0"}
        if dev_type != "type-PCI":
            # nova-compute adds remote_managed=false to network devices; an operator's
            # device_spec may spell it any way bool_from_string reads
            tags["remote_managed"] = (
                draw(st.sampled_from(["true", "True", "yes", "0", "False"]))
                if _chance(draw, 4)
                else "false"
            )
            if not _chance(draw, 3):
                tags["physical_network"] = _respell(draw, draw(st.sampled_from(PHYSNETS)))
            if dev_type == "type-VF" and _chance(draw, 3):
                tags["trusted"] = draw(st.sampled_from(["true", "false"]))
        if _chance(draw, 4):
            tags["live_migratable"] = draw(st.sampled_from(["true", "false"]))
        # devices with a physical_network are not in Placement; providers are per pool,
        # now and then (a bug report's case) shared by two pools
        if placement and "physical_network" not in tags:
            tags["rp_uuid"] = draw(st.sampled_from(PROVIDERS)) if _chance(draw, 10) else f"rp-{i}"
        data = {
            "vendor_id": _respell(draw, vendor),
            "product_id": product,
            "numa_node": draw(st.sampled_from(nodes)),
            "count": draw(st.integers(0, 4)) if _chance(draw, 6) else draw(st.integers(1, 4)),
            "tags": tags,
        }
        objects.append(_env("PciDevicePool", data))
    return _env("PciDevicePoolList", {"objects": objects})


def _pools(pci_stats: dict[str, Any]) -> list[dict[str, Any]]:
    """The pools of the primitive, tags merged (for the strategies to aim at)."""
    out = []
    for obj in pci_stats["nova_object.data"]["objects"]:
        data = obj["nova_object.data"]
        out.append({**{k: v for k, v in data.items() if k != "tags"}, **data["tags"]})
    return out


def _request_id(index: int) -> str:
    return f"00000000-0000-4000-8000-{index:012d}"


def _bool_text(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "t", "true", "on", "y", "yes"}


@st.composite
def port_requests(draw: st.DrawFn, index: int, pools: list[dict[str, Any]]) -> dict[str, Any]:
    """An SR-IOV port's request, as nova's neutron API makes it: mostly for the kind of
    device (vnic type, physnet) one of the host's network pools has."""
    networked = [p for p in pools if p.get("physical_network")]
    target: dict[str, Any] = {}
    if networked and not _chance(draw, 4):
        target = draw(st.sampled_from(networked))
        physnet = _respell(draw, target["physical_network"])
        remote = _bool_text(target.get("remote_managed")) != _chance(draw, 8)
        dev_type = {"type-PF": "type-PF", "vdpa": "vdpa"}.get(target["dev_type"])
    else:
        physnet = draw(st.sampled_from(PHYSNETS))
        remote = _chance(draw, 4)
        dev_type = draw(st.sampled_from([None, None, "type-PF", "vdpa"]))
    spec = {"physical_network": physnet, "remote_managed": str(remote)}
    if dev_type:
        spec["dev_type"] = dev_type
    if target.get("trusted") and not _chance(draw, 3):
        spec["trusted"] = str(_bool_text(target["trusted"]))
    elif _chance(draw, 8):
        spec["trusted"] = draw(st.sampled_from(["True", "False"]))
    return {
        "count": 1,
        "spec": [spec],
        "alias_name": None,
        "numa_policy": draw(st.sampled_from(POLICIES)),
        "request_id": _request_id(index),
        "requester_id": f"port-{index}",
    }


def _alias_spec(
    draw: st.DrawFn, placement: bool, target: dict[str, Any], dev_type: str | None
) -> dict[str, str]:
    spec: dict[str, str] = {}
    if not placement or not _chance(draw, 3):
        spec["vendor_id"] = _respell(draw, target["vendor_id"])
        spec["product_id"] = _respell(draw, target["product_id"])
    if placement and ("vendor_id" not in spec or draw(st.booleans())):
        spec["resource_class"] = draw(st.sampled_from(["CUSTOM_GPU", "CUSTOM_NIC_VF", "PGPU"]))
    if _chance(draw, 4):
        spec["traits"] = draw(st.sampled_from(["CUSTOM_FAST", "CUSTOM_A,CUSTOM_B"]))
    if dev_type:
        spec["dev_type"] = dev_type
    return spec


def _a_target(draw: st.DrawFn, pools: list[dict[str, Any]]) -> dict[str, Any]:
    """Mostly one of the host's pools, else some device."""
    if pools and not _chance(draw, 4):
        return draw(st.sampled_from(pools))
    vendor, product = draw(st.sampled_from(DEVICES))
    return {"vendor_id": vendor, "product_id": product, "dev_type": "type-PCI"}


@st.composite
def alias_requests(
    draw: st.DrawFn, index: int, placement: bool, pools: list[dict[str, Any]]
) -> dict[str, Any]:
    """A flavor alias's request, with the keys nova's alias schema allows: one spec under
    PCI in Placement, else one or two ORed specs (of the same device type)."""
    first = _a_target(draw, pools)
    dev_type = first["dev_type"] if first["dev_type"] != "vdpa" and _chance(draw, 2) else None
    if _chance(draw, 6):
        dev_type = draw(st.sampled_from(["type-PCI", "type-VF", "type-PF"]))
    live = first.get("live_migratable") if _chance(draw, 2) else None
    if _chance(draw, 8):
        live = draw(st.sampled_from(["true", "false"]))
    specs = []
    for n in range(1 if placement else draw(st.integers(1, 2))):
        target = first if n == 0 else _a_target(draw, pools)
        spec = _alias_spec(draw, placement, target, dev_type)
        if live:
            spec["live_migratable"] = live
        specs.append(spec)
    return {
        "count": draw(st.integers(1, 3)) if _chance(draw, 3) else 1,
        "spec": specs,
        "alias_name": draw(st.sampled_from(["gpu", "nic"])),
        "numa_policy": draw(st.sampled_from(POLICIES)),
        "request_id": _request_id(index),
        "requester_id": None,
    }


@st.composite
def request_lists(
    draw: st.DrawFn, placement: bool, pci_stats: dict[str, Any]
) -> list[dict[str, Any]]:
    """One to three requests, ports and aliases mixed."""
    pools = _pools(pci_stats)
    # ports mostly on hosts with network devices
    ports = 2 if any(p.get("physical_network") for p in pools) else 5
    requests = []
    for index in range(draw(st.sampled_from([1, 1, 1, 2, 2, 3]))):
        if _chance(draw, ports):
            requests.append(draw(port_requests(index, pools)))
        else:
            requests.append(draw(alias_requests(index, placement, pools)))
    return requests


def _providers_for(pci_stats: dict[str, Any], request: dict[str, Any]) -> list[str]:
    """The host's providers whose pools match the request's first spec, else all of them."""
    spec = request["spec"][0]
    pools = [p for p in _pools(pci_stats) if "rp_uuid" in p]
    ids = ("vendor_id", "product_id")
    fitting = (
        [p["rp_uuid"] for p in pools if all(str(p[k]).lower() == spec[k].lower() for k in ids)]
        if all(k in spec for k in ids)
        else []
    )
    return sorted(set(fitting or [p["rp_uuid"] for p in pools]))


def _a_provider(draw: st.DrawFn, pci_stats: dict[str, Any], request: dict[str, Any]) -> str:
    providers = _providers_for(pci_stats, request)
    if not providers or _chance(draw, 8):
        return ELSEWHERE
    return draw(st.sampled_from(providers))


@st.composite
def provider_mappings(
    draw: st.DrawFn,
    pci_stats: dict[str, Any],
    requests: list[dict[str, Any]],
    kinds: tuple[str, ...] = ("none", "empty", "groups", "groups", "groups"),
) -> dict[str, list[str]] | None:
    """An allocation candidate's ``mappings`` (or a RequestSpec's group providers): the
    root's group, one group per device of each alias (``<request_id>-<n>``, mostly a
    provider of the host fit for it), and a QoS port's group. Or no mapping."""
    kind = draw(st.sampled_from(kinds))
    if kind == "none":
        return None
    mapping: dict[str, list[str]] = {}
    if kind == "empty":
        return mapping
    mapping[""] = ["compute-rp"]
    for request in requests:
        if request["alias_name"] is None:
            if draw(st.booleans()):
                mapping[request["requester_id"]] = ["rp-bandwidth"]
            continue
        for n in range(request["count"]):
            mapping[f"{request['request_id']}-{n}"] = [_a_provider(draw, pci_stats, request)]
    return mapping


def _record_rp_uuids(draw: st.DrawFn, pci_stats: Any, requests: list[dict[str, Any]]) -> None:
    """Now and then, the providers a move's request recorded in its spec (``rp_uuids``),
    read when there is no mapping."""
    for request in requests:
        if request["alias_name"] is not None and _chance(draw, 3):
            chosen = [_a_provider(draw, pci_stats, request) for _ in range(request["count"])]
            request["spec"][0]["rp_uuids"] = ",".join(chosen)


@st.composite
def host_cell_lists(draw: st.DrawFn) -> list[list[Any]]:
    """``[[cell id, socket], ...]``: one to three cells, sockets now and then unknown."""
    n = draw(st.integers(1, 3))
    unknown = _chance(draw, 8)
    return [
        [i, None if unknown and i == n - 1 else draw(st.sampled_from([0, 1]))] for i in range(n)
    ]


@st.composite
def cases(draw: st.DrawFn) -> dict[str, Any]:
    placement = draw(st.booleans())
    pci_stats = draw(pool_lists(placement))
    requests = draw(request_lists(placement, pci_stats))
    mapping = draw(provider_mappings(pci_stats, requests)) if placement else None
    if placement and mapping is None:
        _record_rp_uuids(draw, pci_stats, requests)
    host_cells = draw(host_cell_lists())
    ids = [c[0] for c in host_cells]
    numa_cells = draw(
        st.one_of(
            st.none(),
            st.lists(st.sampled_from(ids), min_size=1, max_size=len(ids), unique=True),
            st.just([]),
        )
    )
    return {
        "pci_stats": pci_stats,
        "requests": requests,
        "provider_mapping": mapping,
        "host_cells": host_cells,
        "numa_cells": numa_cells,
    }


# -- ours -----------------------------------------------------------------------------------


def ours_support_and_apply(case: dict[str, Any]) -> dict[str, Any]:
    pools = pci.pools_from_stats(case["pci_stats"])
    args = (
        # decoded, as the RPC edge decodes a request's
        pci.requests_from_primitive(case["requests"]),
        case["provider_mapping"],
        case["numa_cells"],
        {cell: socket for cell, socket in case["host_cells"]},
    )
    applied = pci.apply_requests(pools, *args)
    return {
        "pools": pools,
        "supported": pci.support_requests(pools, *args),
        "applied": applied.ok,
        "after": applied.pools,
    }


def test_support_and_apply_agree_with_nova(nova) -> None:
    @SETTINGS
    @given(case=cases())
    def check(case: dict[str, Any]) -> None:
        assert ours_support_and_apply(case) == nova.call("pci", "support_and_apply", case)

    check()


@st.composite
def filter_cases(draw: st.DrawFn) -> dict[str, Any]:
    placement = draw(st.booleans())
    pci_stats = draw(pool_lists(placement))
    requests = draw(request_lists(placement, pci_stats))
    if placement:
        mappings = provider_mappings(pci_stats, requests, ("empty", *["groups"] * 7))
        candidates = draw(st.lists(mappings, min_size=1, max_size=4))
    else:
        candidates = [{"": ["compute-rp"]}] * draw(st.integers(1, 2))
    return {"pci_stats": pci_stats, "requests": requests, "candidates": candidates}


def ours_filter(case: dict[str, Any]) -> dict[str, Any]:
    host = make_host("host1", uuid="host1-uuid", pci_stats=case["pci_stats"])
    spec = make_spec()
    spec.pci_requests = pci.requests_from_primitive(case["requests"])
    candidates = [{"mappings": m, "index": i} for i, m in enumerate(case["candidates"])]
    spec.scratch.allocation_candidates = {"host1-uuid": list(candidates)}
    passes = PciPassthroughFilter().host_passes(host, spec)
    kept = spec.scratch.allocation_candidates["host1-uuid"]
    return {"passes": bool(passes), "kept": [c["index"] for c in kept]}


def test_the_filter_agrees_with_novas_over_allocation_candidates(nova) -> None:
    @SETTINGS
    @given(case=filter_cases())
    def check(case: dict[str, Any]) -> None:
        assert ours_filter(case) == nova.call("pci", "filter", case)

    check()


@st.composite
def consume_cases(draw: st.DrawFn) -> dict[str, Any]:
    host_numa = None
    instance_numa = None
    nodes: tuple[int | None, ...] = (None, 0, 0, 1, 1, 2)
    if not _chance(draw, 6):
        n = draw(st.integers(1, 3))
        host_numa = [
            {
                "id": i,
                "socket": draw(st.sampled_from([0, 1])),
                "cpuset": [2 * i, 2 * i + 1],
                "memory": 1024,
                "cpu_usage": draw(st.integers(0, 1)),
                "memory_usage": draw(st.sampled_from([0, 256])),
            }
            for i in range(n)
        ]
        # the devices mostly on the host's cells
        nodes = (None, n, *range(n), *range(n))
        if not _chance(draw, 6):
            guest_nodes = draw(st.integers(1, n))
            instance_numa = [{"id": i, "cpuset": [i], "memory": 64} for i in range(guest_nodes)]
    placement = draw(st.booleans())
    pci_stats = draw(pool_lists(placement, nodes))
    requests = draw(request_lists(placement, pci_stats))
    mapping = draw(provider_mappings(pci_stats, requests)) if placement else None
    groups = [[rid, rps] for rid, rps in (mapping or {}).items() if rid]
    return {
        "pci_stats": pci_stats,
        "requests": requests,
        "requested_resources": groups,
        "host_numa": host_numa,
        "instance_numa": instance_numa,
    }


def _our_host_numa(cells: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "cells": [
            {
                "id": c["id"],
                "cpuset": c["cpuset"],
                "pcpuset": [],
                "memory": c["memory"],
                "cpu_usage": c["cpu_usage"],
                "memory_usage": c["memory_usage"],
                "pinned_cpus": [],
                "siblings": [[cpu] for cpu in c["cpuset"]],
                "mempages": [{"size_kb": 4, "total": c["memory"] * 256, "used": 0, "reserved": 0}],
                "socket": c["socket"],
            }
            for c in cells
        ]
    }


def _our_instance_numa(cells: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "cells": [
            {
                "id": c["id"],
                "cpuset": c["cpuset"],
                "pcpuset": [],
                "memory": c["memory"],
                "pagesize": None,
                "cpu_policy": None,
                "cpu_thread_policy": None,
                "cpuset_reserved": None,
                "cpu_pinning_raw": None,
            }
            for c in cells
        ],
        "emulator_threads_policy": None,
    }


def ours_consume(case: dict[str, Any]) -> dict[str, Any]:
    hs = HostState("host", "node")
    if case["host_numa"]:
        hs.numa_topology = _our_host_numa(case["host_numa"])
    hs.pci_stats = case["pci_stats"]
    hs.cpu_allocation_ratio = 16.0
    hs.ram_allocation_ratio = 1.5
    spec = RequestSpec(
        flavor=Flavor(memory_mb=64, vcpus=1, root_gb=0, ephemeral_gb=0),
        numa_topology=(
            numa.instance_topology_from_primitive(_our_instance_numa(case["instance_numa"]))
            if case["instance_numa"]
            else None
        ),
        pci_requests=pci.requests_from_primitive(case["requests"]),
        requested_resources=[
            RequestGroup(requester_id=rid, provider_uuids=list(rps))
            for rid, rps in case["requested_resources"]
        ],
    )
    hs.consume_from_request(spec)
    return {"after": pci.pools_from_stats(hs.pci_stats)}


def test_host_state_consumption_agrees_with_novas(nova) -> None:
    @SETTINGS
    @given(case=consume_cases())
    def check(case: dict[str, Any]) -> None:
        theirs = nova.call("pci", "consume", case)
        assert ours_consume(case) == {"after": theirs["after"]}

    check()
