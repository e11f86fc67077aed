"""PciPassthroughFilter over nova-shaped PCI pools and requests."""

from __future__ import annotations

from typing import Any

import pytest

from filters.pci_passthrough_filter import PciPassthroughFilter
from scheduler.objects import RequestSpec
from scheduler.resources import pci
from tests.unit.filters.fakes import make_host, make_spec, run_filter
from tests.unit.scheduler.resources.builders import (
    GPU,
    NIC,
    alias_request,
    pool,
    pool_list,
    port_request,
)

FLT = PciPassthroughFilter()


def host(name: str = "host1", stats: Any = None):
    return make_host(name, uuid=f"{name}-uuid", pci_stats=stats)


def spec(*requests: dict[str, Any]) -> RequestSpec:
    s = make_spec()
    s.pci_requests = pci.requests_from_primitive(requests)
    return s


def candidate(rp: str, **mappings: list[str]) -> dict[str, Any]:
    return {"allocations": {rp: {"resources": {"VCPU": 1}}}, "mappings": {"": [rp], **mappings}}


SRIOV_HOST = pool_list(
    pool(*NIC, 8, 0, dev_type="type-VF", physical_network="physnet1"),
    pool(*NIC, 1, 0, dev_type="type-PF", physical_network="physnet1"),
)
GPU_HOST = pool_list(pool(*GPU, 2, 1))
GPU_REQ = alias_request("gpu", vendor_id=GPU[0], product_id=GPU[1])


def test_plugin_flags() -> None:
    assert PciPassthroughFilter.RUN_ON_REBUILD is False
    assert PciPassthroughFilter.run_filter_once_per_request is False


def test_no_pci_request_passes_everywhere() -> None:
    assert FLT.host_passes(host(stats=None), spec()) is True
    assert FLT.host_passes(host(stats=GPU_HOST), spec()) is True


def test_host_without_devices() -> None:
    result = FLT.host_passes(host(stats=None), spec(GPU_REQ))
    assert not result and result.reason == "host has no PCI devices"
    result = FLT.host_passes(host(stats=pool_list()), spec(GPU_REQ))
    assert not result and result.reason == "host has no PCI devices"


def test_alias_request() -> None:
    assert FLT.host_passes(host(stats=GPU_HOST), spec(GPU_REQ)) is True
    result = FLT.host_passes(host(stats=SRIOV_HOST), spec(GPU_REQ))
    assert not result and result.reason == "no PCI device matching alias gpu"


def test_count_beyond_the_free_devices() -> None:
    three = alias_request("gpu", count=3, vendor_id=GPU[0], product_id=GPU[1])
    result = FLT.host_passes(host(stats=GPU_HOST), spec(three))
    assert not result and result.reason == "no PCI device matching alias gpu"


def test_every_request_must_be_met_and_the_first_missing_is_named() -> None:
    fpga = alias_request("fpga", vendor_id="1172", product_id="0001")
    result = FLT.host_passes(host(stats=GPU_HOST), spec(GPU_REQ, fpga))
    assert not result and result.reason == "no PCI device matching alias fpga"


def test_sriov_port_request() -> None:
    assert FLT.host_passes(host(stats=SRIOV_HOST), spec(port_request("physnet1")))
    result = FLT.host_passes(host(stats=SRIOV_HOST), spec(port_request("physnet2")))
    assert not result and result.reason == "no PCI device for a requested port"


def test_pf_is_not_handed_out_for_a_vf_style_request() -> None:
    only_pf = pool_list(pool(*NIC, 1, 0, dev_type="type-PF", physical_network="physnet1"))
    result = FLT.host_passes(host(stats=only_pf), spec(port_request("physnet1")))
    assert not result


def test_no_numa_restriction_in_this_filter() -> None:
    # NUMA affinity is NUMATopologyFilter's business: a "required" policy passes here
    required = alias_request("gpu", numa_policy="required", vendor_id=GPU[0], product_id=GPU[1])
    assert FLT.host_passes(host(stats=GPU_HOST), spec(required))


# -- allocation candidates ------------------------------------------------------------------


def test_candidates_follow_the_placement_pci_providers() -> None:
    stats = pool_list(pool(*GPU, 1, 0, rp_uuid="rp-gpu-0"), pool(*GPU, 0, 1, rp_uuid="rp-gpu-1"))
    gpu = alias_request("gpu", request_id="r1", vendor_id=GPU[0], product_id=GPU[1])
    s = spec(gpu)
    good = candidate("host1-uuid", **{"r1-0": ["rp-gpu-0"]})
    empty = candidate("host1-uuid", **{"r1-0": ["rp-gpu-1"]})
    s.scratch.allocation_candidates = {"host1-uuid": [empty, good], "host2-uuid": [{}]}
    assert FLT.host_passes(host(stats=stats), s)
    assert s.scratch.allocation_candidates["host1-uuid"] == [good]
    assert s.scratch.allocation_candidates["host2-uuid"] == [{}]

    s.scratch.allocation_candidates = {"host1-uuid": [empty]}
    result = FLT.host_passes(host(stats=stats), s)
    assert not result and result.reason == "no PCI device matching alias gpu"
    assert s.scratch.allocation_candidates["host1-uuid"] == []


def test_candidates_without_pci_groups_all_kept() -> None:
    s = spec(GPU_REQ)
    cands = [candidate("host1-uuid"), candidate("host1-uuid")]
    s.scratch.allocation_candidates = {"host1-uuid": list(cands)}
    assert FLT.host_passes(host(stats=GPU_HOST), s)
    assert s.scratch.allocation_candidates["host1-uuid"] == cands


def test_host_without_own_candidates_in_a_placement_request() -> None:
    s = spec(GPU_REQ)
    s.scratch.allocation_candidates = {"other-uuid": [candidate("other-uuid")]}
    result = FLT.host_passes(host(stats=GPU_HOST), s)
    assert not result and result.reason == "no allocation candidate left"
    result = FLT.host_passes(host(stats=SRIOV_HOST), s)
    assert not result and result.reason == "no PCI device matching alias gpu"


@pytest.mark.parametrize("with_candidates", [False, True])
def test_run_filter_agrees_with_host_passes(with_candidates: bool) -> None:
    hosts = [
        host("gpu", GPU_HOST),
        host("nic", SRIOV_HOST),
        host("none", None),
        host("gpu2", pool_list(pool(*GPU, 1, None))),
    ]

    def fresh() -> RequestSpec:
        s = spec(GPU_REQ)
        if with_candidates:
            s.scratch.allocation_candidates = {h.uuid: [candidate(h.uuid)] for h in hosts}
        return s

    one = fresh()
    singles = [(h.host, FLT.host_passes(h, one)) for h in hosts]
    batch_spec = fresh()
    outcome = run_filter(FLT, hosts, batch_spec)
    assert [h.host for h in outcome.passed] == [name for name, r in singles if r]
    assert [(h.host, why) for h, why in outcome.rejected] == [
        (name, r.reason) for name, r in singles if not r
    ]
    assert [h.host for h in outcome.passed] == ["gpu", "gpu2"]
    assert batch_spec.scratch.allocation_candidates == one.scratch.allocation_candidates


def test_run_filter_without_requests_passes_all() -> None:
    hosts = [host("a", None), host("b", GPU_HOST)]
    outcome = run_filter(FLT, hosts, spec())
    assert outcome.passed == hosts and outcome.rejected == []


def test_multi_create_consumption_takes_the_devices_of_the_first_instance() -> None:
    h = host(stats=pool_list(pool(*GPU, 1, 0)))  # one GPU
    s = spec(GPU_REQ)
    assert FLT.host_passes(h, s)
    h.consume_from_request(s)
    assert not FLT.host_passes(h, spec(GPU_REQ))


# -- as nova 34 decides -----------------------------------------------------------------------


def test_the_requests_must_fit_together() -> None:
    # one GPU and then two more: each alone fits the host's two GPUs, together they do not
    two = alias_request("gpu", count=2, vendor_id=GPU[0], product_id=GPU[1])
    assert FLT.host_passes(host(stats=GPU_HOST), spec(two))
    result = FLT.host_passes(host(stats=GPU_HOST), spec(GPU_REQ, two))
    assert not result and result.reason == "no PCI device matching alias gpu"
    # two ports and a VF alias on a host with two VFs
    two_vfs = pool_list(pool(*NIC, 2, 0, dev_type="type-VF", physical_network="physnet1"))
    vf = alias_request("vf", vendor_id=NIC[0], product_id=NIC[1])
    assert FLT.host_passes(host(stats=two_vfs), spec(port_request("physnet1"), vf))
    ports = [port_request("physnet1", "p1"), port_request("physnet1", "p2")]
    assert not FLT.host_passes(host(stats=two_vfs), spec(*ports, vf))


def test_an_alias_naming_a_resource_class_follows_its_placement_candidates() -> None:
    stats = pool_list(pool(*GPU, 1, 0, rp_uuid="rp-gpu-0"), pool(*GPU, 1, 1, rp_uuid="rp-gpu-1"))
    gpu = alias_request("gpu", request_id="r1", resource_class="CUSTOM_A16", traits="CUSTOM_X")
    s = spec(gpu)
    on_0 = candidate("host1-uuid", **{"r1-0": ["rp-gpu-0"]})
    elsewhere = candidate("host1-uuid", **{"r1-0": ["rp-other"]})
    s.scratch.allocation_candidates = {"host1-uuid": [elsewhere, on_0]}
    assert FLT.host_passes(host(stats=stats), s) is True
    assert s.scratch.allocation_candidates["host1-uuid"] == [on_0]


def test_a_port_needs_a_pool_tagged_remote_managed_as_it_asks() -> None:
    # a type-PCI device on the physnet has no remote_managed tag: nova's port spec says
    # remote_managed "False", which it does not match
    untagged = pool_list(pool(*NIC, 2, 0, physical_network="physnet1"))
    result = FLT.host_passes(host(stats=untagged), spec(port_request("physnet1")))
    assert not result and result.reason == "no PCI device for a requested port"


def test_a_host_without_devices_is_left_with_no_candidate() -> None:
    s = spec(GPU_REQ)
    s.scratch.allocation_candidates = {"host1-uuid": [candidate("host1-uuid")]}
    assert not FLT.host_passes(host(stats=None), s)
    assert s.scratch.allocation_candidates["host1-uuid"] == []
