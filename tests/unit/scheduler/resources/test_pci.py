"""scheduler.resources.pci: matching PCI requests against a host's PCI device pools."""

from __future__ import annotations

import json
from typing import Any

from scheduler.resources import pci

# -- builders of nova-shaped data (also used by the filter tests) ---------------------------


def pool(
    vendor_id: str,
    product_id: str,
    count: int,
    numa_node: int | None = 0,
    **tags: str,
) -> dict[str, Any]:
    """A PciDevicePool 1.1 primitive as nova-compute stores it in compute_nodes.pci_stats."""
    return {
        "nova_object.name": "PciDevicePool",
        "nova_object.namespace": "nova",
        "nova_object.version": "1.1",
        "nova_object.data": {
            "product_id": product_id,
            "vendor_id": vendor_id,
            "numa_node": numa_node,
            "tags": {"dev_type": "type-PCI", **tags},
            "count": count,
        },
        "nova_object.changes": ["product_id", "vendor_id", "numa_node", "tags", "count"],
    }


def pool_list(*pools: dict[str, Any]) -> dict[str, Any]:
    return {
        "nova_object.name": "PciDevicePoolList",
        "nova_object.namespace": "nova",
        "nova_object.version": "1.1",
        "nova_object.data": {"objects": list(pools)},
        "nova_object.changes": ["objects"],
    }


def alias_request(
    alias: str,
    count: int = 1,
    numa_policy: str | None = None,
    request_id: str | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """An InstancePCIRequest from a flavor's ``pci_passthrough:alias`` (unwrapped)."""
    return {
        "count": count,
        "spec": [spec],
        "alias_name": alias,
        "is_new": False,
        "numa_policy": numa_policy,
        "request_id": request_id,
        "requester_id": None,
    }


def port_request(physnet: str, request_id: str = "req-port") -> dict[str, Any]:
    """An InstancePCIRequest for an SR-IOV (vnic_type=direct) port."""
    return {
        "count": 1,
        "spec": [{"physical_network": physnet, "remote_managed": "False"}],
        "alias_name": None,
        "numa_policy": None,
        "request_id": request_id,
        "requester_id": "port-uuid-1",
    }


NIC = ("8086", "1520")  # an SR-IOV capable NIC (VFs)
GPU = ("10de", "1eb8")  # a GPU passed through whole


def fleet_pools() -> list[dict[str, Any]]:
    """A 2-cell host: 4 VFs on physnet1 per cell, their PFs, and one GPU on cell 1."""
    return pci.pools_from_stats(
        pool_list(
            pool(*NIC, 4, 0, dev_type="type-VF", physical_network="physnet1"),
            pool(*NIC, 4, 1, dev_type="type-VF", physical_network="physnet1"),
            pool(*NIC, 1, 0, dev_type="type-PF", physical_network="physnet1"),
            pool(*GPU, 1, 1),
        )
    )


# -- pools ----------------------------------------------------------------------------------


def test_pools_are_flattened_from_the_primitive() -> None:
    pools = fleet_pools()
    assert len(pools) == 4
    first = pools[0]
    assert first["vendor_id"] == "8086" and first["numa_node"] == 0 and first["count"] == 4
    assert first["dev_type"] == "type-VF" and first["physical_network"] == "physnet1"
    assert "tags" not in first


def test_pools_from_other_shapes() -> None:
    listed = [{"vendor_id": "8086", "product_id": "1520", "numa_node": 1, "count": 2}]
    assert pci.pools_from_stats(listed)[0]["count"] == 2
    as_text = json.dumps(pool_list(pool(*GPU, 3)))
    assert pci.pools_from_stats(as_text)[0]["count"] == 3
    unwrapped = {"objects": [{"vendor_id": "1", "product_id": "2", "count": 1, "tags": {}}]}
    assert pci.pools_from_stats(unwrapped)[0]["vendor_id"] == "1"
    assert pci.pools_from_stats(None) == []
    assert pci.pools_from_stats(pool_list()) == []


def test_pools_cache_per_owner_follows_object_identity() -> None:
    owner = object()
    stats = pool_list(pool(*GPU, 1))
    first = pci.pools_of(owner, stats)
    assert pci.pools_of(owner, stats) is first
    assert pci.pools_of(owner, pool_list(pool(*GPU, 5)))[0]["count"] == 5
    assert pci.pools_of(owner, None) == []


# -- matching -------------------------------------------------------------------------------


def test_alias_request_matches_vendor_and_product() -> None:
    pools = fleet_pools()
    assert pci.support_requests(pools, [alias_request("gpu", vendor_id="10de", product_id="1eb8")])
    assert not pci.support_requests(
        pools, [alias_request("gpu", count=2, vendor_id="10de", product_id="1eb8")]
    )
    assert not pci.support_requests(pools, [alias_request("x", vendor_id="10de", product_id="0")])


def test_string_values_match_case_insensitively() -> None:
    pools = pci.pools_from_stats([{"vendor_id": "15B3", "product_id": "101E", "count": 1}])
    assert pci.support_requests(pools, [alias_request("mlx", vendor_id="15b3", product_id="101e")])


def test_count_adds_up_over_matching_pools() -> None:
    pools = fleet_pools()
    vf = {"vendor_id": "8086", "product_id": "1520", "dev_type": "type-VF"}
    assert pci.support_requests(pools, [alias_request("vf", count=8, **vf)])
    assert not pci.support_requests(pools, [alias_request("vf", count=9, **vf)])


def test_any_spec_of_the_request_may_match() -> None:
    pools = fleet_pools()
    request = alias_request("either", vendor_id="dead", product_id="beef")
    request["spec"].append({"vendor_id": "10de", "product_id": "1eb8"})
    assert pci.support_requests(pools, [request])


def test_list_values_must_be_a_subset() -> None:
    pools = pci.pools_from_stats(
        [{"vendor_id": "8086", "count": 1, "capabilities_network": ["rx", "tx", "tso"]}]
    )
    ok = alias_request("nic", vendor_id="8086", capabilities_network=["rx", "tso"])
    bad = alias_request("nic", vendor_id="8086", capabilities_network=["rx", "gso"])
    assert pci.support_requests(pools, [ok])
    assert not pci.support_requests(pools, [bad])


def test_port_request_by_physical_network() -> None:
    pools = fleet_pools()
    assert pci.support_requests(pools, [port_request("physnet1")])
    assert not pci.support_requests(pools, [port_request("physnet2")])


def test_pf_pools_only_when_asked_for() -> None:
    pools = pci.pools_from_stats(pool_list(pool(*NIC, 2, 0, dev_type="type-PF")))
    assert not pci.support_requests(pools, [alias_request("nic", vendor_id="8086")])
    pf = alias_request("pf", vendor_id="8086", dev_type="type-PF")
    assert pci.support_requests(pools, [pf])


def test_vdpa_and_remote_managed_pools_only_when_asked_for() -> None:
    vdpa = pci.pools_from_stats(pool_list(pool(*NIC, 2, 0, dev_type="vdpa")))
    assert not pci.support_requests(vdpa, [alias_request("nic", vendor_id="8086")])
    assert pci.support_requests(vdpa, [alias_request("v", vendor_id="8086", dev_type="vdpa")])
    remote = pci.pools_from_stats(
        pool_list(pool(*NIC, 2, 0, dev_type="type-VF", physical_network="p", remote_managed="true"))
    )
    assert not pci.support_requests(remote, [port_request("p")])
    smartnic = port_request("p")
    smartnic["spec"][0]["remote_managed"] = "True"
    assert pci.support_requests(remote, [smartnic])


def test_requests_are_checked_each_on_its_own_as_nova_does() -> None:
    pools = pci.pools_from_stats(pool_list(pool(*GPU, 1, 0)))
    one = alias_request("gpu", vendor_id="10de", product_id="1eb8")
    assert pci.support_requests(pools, [one, dict(one)])


def test_first_unsupported_and_reasons() -> None:
    pools = fleet_pools()
    gpu = alias_request("gpu", vendor_id="10de", product_id="1eb8")
    fpga = alias_request("fpga", vendor_id="1172", product_id="0001")
    assert pci.first_unsupported(pools, [gpu, fpga]) is fpga
    assert pci.request_reason(fpga) == "no PCI device matching alias fpga"
    assert pci.request_reason(port_request("x")) == "no PCI device for a requested port"
    assert pci.request_reason({"count": 1, "spec": []}) == "no matching PCI device"


# -- NUMA affinity --------------------------------------------------------------------------


def test_numa_policy_required() -> None:
    pools = fleet_pools()
    gpu = alias_request("gpu", numa_policy="required", vendor_id="10de", product_id="1eb8")
    assert pci.support_requests(pools, [gpu], numa_cell_ids=[1])
    assert not pci.support_requests(pools, [gpu], numa_cell_ids=[0])


def test_numa_policy_legacy_allows_devices_without_numa_node() -> None:
    pools = pci.pools_from_stats(pool_list(pool(*GPU, 1, None), pool(*GPU, 1, 1)))
    gpu = alias_request("gpu", vendor_id="10de", product_id="1eb8")  # no policy: legacy
    assert pci.support_requests(pools, [gpu], numa_cell_ids=[0])
    gpu2 = alias_request("gpu", count=2, vendor_id="10de", product_id="1eb8")
    assert not pci.support_requests(pools, [gpu2], numa_cell_ids=[0])
    required = alias_request("gpu", numa_policy="required", vendor_id="10de", product_id="1eb8")
    assert not pci.support_requests(pools, [required], numa_cell_ids=[0])


def test_numa_policy_preferred_takes_remote_devices_when_needed() -> None:
    pools = fleet_pools()
    gpu = alias_request("gpu", numa_policy="preferred", vendor_id="10de", product_id="1eb8")
    assert pci.support_requests(pools, [gpu], numa_cell_ids=[0])
    legacy = alias_request("gpu", numa_policy="legacy", vendor_id="10de", product_id="1eb8")
    assert not pci.support_requests(pools, [legacy], numa_cell_ids=[0])


def test_numa_policy_socket() -> None:
    # cells 0 and 1 on socket 0, cell 2 on socket 1; the GPU is on cell 1
    pools = fleet_pools()
    sockets = {0: 0, 1: 0, 2: 1}
    gpu = alias_request("gpu", numa_policy="socket", vendor_id="10de", product_id="1eb8")
    assert pci.support_requests(pools, [gpu], numa_cell_ids=[0], socket_of=sockets)
    assert not pci.support_requests(pools, [gpu], numa_cell_ids=[2], socket_of=sockets)


# -- PCI in Placement -----------------------------------------------------------------------


def test_placement_mapping_restricts_to_allocated_providers() -> None:
    pools = pci.pools_from_stats(
        pool_list(pool(*GPU, 1, 0, rp_uuid="rp-gpu-0"), pool(*GPU, 1, 1, rp_uuid="rp-gpu-1"))
    )
    gpu = alias_request("gpu", request_id="r1", vendor_id="10de", product_id="1eb8")
    assert pci.rp_uuids_for_request({"r1-0": ["rp-gpu-1"], "other": ["x"]}, gpu) == ["rp-gpu-1"]
    assert pci.support_requests(pools, [gpu], {"r1-0": ["rp-gpu-1"]})
    # NUMA cell 0 only, but Placement allocated the device of cell 1
    assert pci.support_requests(pools, [gpu], {"r1-0": ["rp-gpu-0"]}, numa_cell_ids=[0])
    assert not pci.support_requests(pools, [gpu], {"r1-0": ["rp-gpu-1"]}, numa_cell_ids=[0])
    # two devices allocated from a provider whose pool has one left
    gpu2 = alias_request("gpu", count=2, request_id="r1", vendor_id="10de", product_id="1eb8")
    assert not pci.support_requests(pools, [gpu2], {"r1-0": ["rp-gpu-0"], "r1-1": ["rp-gpu-0"]})
    # no PCI groups in the mapping (PCI not in Placement): no restriction
    assert pci.support_requests(pools, [gpu2], {"": ["compute-rp"]})


def test_placement_signature_groups_candidates() -> None:
    gpu = alias_request("gpu", request_id="r1", vendor_id="10de", product_id="1eb8")
    a = pci.placement_signature({"": ["cn"], "r1-0": ["rp-a"]}, [gpu])
    b = pci.placement_signature({"": ["cn2"], "r1-0": ["rp-a"]}, [gpu])
    c = pci.placement_signature({"": ["cn"], "r1-0": ["rp-b"]}, [gpu])
    assert a == b != c


def test_apply_requests_takes_devices_cumulatively() -> None:
    pools = fleet_pools()
    vf = alias_request("vf", count=6, vendor_id="8086", product_id="1520", dev_type="type-VF")
    after = pci.apply_requests(pools, [vf])
    assert after is not None
    assert sum(p["count"] for p in after if p.get("dev_type") == "type-VF") == 2
    assert pools[0]["count"] == 4  # input untouched
    assert pci.apply_requests(after, [vf]) is None
    gpu = alias_request("gpu", vendor_id="10de", product_id="1eb8")
    after_gpu = pci.apply_requests(pools, [gpu])
    assert after_gpu is not None and pci.apply_requests(after_gpu, [gpu]) is None
    # NUMA-restricted: the cell 0 VFs only
    assert pci.apply_requests(pools, [dict(vf, count=5, numa_policy="required")], [0]) is None
