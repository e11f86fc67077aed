"""scheduler.resources.pci: matching PCI requests against a host's PCI device pools."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from scheduler.objects import RequestGroup
from scheduler.resources import pci
from tests.unit.scheduler.resources import pci_edge
from tests.unit.scheduler.resources.builders import (
    GPU,
    NIC,
    alias_request,
    pool,
    pool_list,
    port_request,
)


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
    vfs = pools[1]
    assert vfs["vendor_id"] == "8086" and vfs["numa_node"] == 0 and vfs["count"] == 4
    assert vfs["dev_type"] == "type-VF" and vfs["physical_network"] == "physnet1"
    assert vfs["remote_managed"] == "false"
    assert "tags" not in vfs


def test_pools_are_held_in_novas_order_fewest_keys_first() -> None:
    # nova's PciDeviceStats sorts the pools by their number of keys (a stable sort): that
    # is the order devices are taken in
    pools = fleet_pools()
    assert [(p["vendor_id"], p["dev_type"]) for p in pools] == [
        ("10de", "type-PCI"),
        ("8086", "type-VF"),
        ("8086", "type-VF"),
        ("8086", "type-PF"),
    ]
    assert [p["numa_node"] for p in pools[1:3]] == [0, 1]


def test_a_tag_named_like_a_field_wins_as_in_novas_to_dict() -> None:
    stats = pool_list(pool(*GPU, 1, 0))
    stats["nova_object.data"]["objects"][0]["nova_object.data"]["tags"]["product_id"] = "1EB9"
    assert pci.pools_from_stats(stats)[0]["product_id"] == "1EB9"


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


def test_a_request_is_decoded_once_and_keeps_novas_data() -> None:
    data = alias_request("gpu", count=2, request_id="r1", vendor_id="10de")
    enveloped = {"nova_object.name": "InstancePCIRequest", "nova_object.data": data}
    request = pci.request_from_primitive(enveloped)
    assert (request.count, request.alias_name, request.request_id) == (2, "gpu", "r1")
    assert request.specs == ({"vendor_id": "10de"},) and not request.is_port
    assert request.as_data() is data
    assert pci.request_from_primitive(port_request("physnet1")).is_port
    # one made in code (not decoded) gives nova's shape back from its fields
    made = pci.PciRequest(count=1, specs=({"vendor_id": "8086"},), requester_id="port-1")
    assert made.as_data() == {"count": 1, "spec": [{"vendor_id": "8086"}], "requester_id": "port-1"}
    # a missing count is nova's default of one; a spec given as one dict is a list of one
    assert pci.request_from_primitive({"spec": {"vendor_id": "8086"}}) == pci.PciRequest(
        count=1, specs=({"vendor_id": "8086"},)
    )


def test_alias_request_matches_vendor_and_product() -> None:
    pools = fleet_pools()
    assert pci_edge.support_requests(
        pools, [alias_request("gpu", vendor_id="10de", product_id="1eb8")]
    )
    assert not pci_edge.support_requests(
        pools, [alias_request("gpu", count=2, vendor_id="10de", product_id="1eb8")]
    )
    assert not pci_edge.support_requests(
        pools, [alias_request("x", vendor_id="10de", product_id="0")]
    )


def test_string_values_match_case_insensitively() -> None:
    pools = pci.pools_from_stats([{"vendor_id": "15B3", "product_id": "101E", "count": 1}])
    assert pci_edge.support_requests(
        pools, [alias_request("mlx", vendor_id="15b3", product_id="101e")]
    )


def test_count_adds_up_over_matching_pools() -> None:
    pools = fleet_pools()
    vf = {"vendor_id": "8086", "product_id": "1520", "dev_type": "type-VF"}
    assert pci_edge.support_requests(pools, [alias_request("vf", count=8, **vf)])
    assert not pci_edge.support_requests(pools, [alias_request("vf", count=9, **vf)])


def test_any_spec_of_the_request_may_match() -> None:
    pools = fleet_pools()
    request = alias_request("either", vendor_id="dead", product_id="beef")
    request["spec"].append({"vendor_id": "10de", "product_id": "1eb8"})
    assert pci_edge.support_requests(pools, [request])


def test_list_values_must_be_a_subset() -> None:
    pools = pci.pools_from_stats(
        [{"vendor_id": "8086", "count": 1, "capabilities_network": ["rx", "tx", "tso"]}]
    )
    ok = alias_request("nic", vendor_id="8086", capabilities_network=["rx", "tso"])
    bad = alias_request("nic", vendor_id="8086", capabilities_network=["rx", "gso"])
    assert pci_edge.support_requests(pools, [ok])
    assert not pci_edge.support_requests(pools, [bad])


def test_port_request_by_physical_network() -> None:
    pools = fleet_pools()
    assert pci_edge.support_requests(pools, [port_request("physnet1")])
    assert not pci_edge.support_requests(pools, [port_request("physnet2")])


def test_pf_pools_only_when_asked_for() -> None:
    pools = pci.pools_from_stats(pool_list(pool(*NIC, 2, 0, dev_type="type-PF")))
    assert not pci_edge.support_requests(pools, [alias_request("nic", vendor_id="8086")])
    pf = alias_request("pf", vendor_id="8086", dev_type="type-PF")
    assert pci_edge.support_requests(pools, [pf])


def test_alias_resource_class_and_traits_are_left_to_placement() -> None:
    # with PCI in Placement an alias names a resource class and traits; nova does not look
    # for them in the pools (Placement matched them), it follows the allocation
    pools = pci.pools_from_stats(
        pool_list(pool(*GPU, 1, 0, rp_uuid="rp-gpu-0"), pool(*GPU, 1, 1, rp_uuid="rp-gpu-1"))
    )
    by_ids = alias_request(
        "gpu",
        request_id="r1",
        vendor_id=GPU[0],
        product_id=GPU[1],
        resource_class="CUSTOM_A16",
        traits="CUSTOM_FAST,CUSTOM_BIG",
    )
    assert pci_edge.support_requests(pools, [by_ids], {"r1-0": ["rp-gpu-1"]})
    assert pci_edge.support_requests(pools, [by_ids])
    by_class_only = alias_request("gpu", request_id="r1", resource_class="CUSTOM_A16")
    assert pci_edge.support_requests(pools, [by_class_only], {"r1-0": ["rp-gpu-0"]})
    # the providers still decide: none of the host's
    assert not pci_edge.support_requests(pools, [by_class_only], {"r1-0": ["rp-elsewhere"]})


def test_remote_managed_matches_as_a_string_and_excludes_as_a_boolean() -> None:
    # a port's spec says remote_managed "False"/"True": it matches the pool's tag as a
    # string, case-insensitively; a pool without the tag (a type-PCI device) does not match
    untagged = pci.pools_from_stats(
        [{"vendor_id": "8086", "product_id": "1520", "count": 1, "physical_network": "p"}]
    )
    assert not pci_edge.support_requests(untagged, [port_request("p")])
    smartnic = port_request("p")
    smartnic["spec"][0]["remote_managed"] = "True"
    spelled_yes = pci.pools_from_stats(
        pool_list(pool(*NIC, 2, 0, dev_type="type-VF", physical_network="p", remote_managed="yes"))
    )
    # "yes" is not "true" for matching, but it is a remote-managed device for the exclusion
    assert not pci_edge.support_requests(spelled_yes, [smartnic])
    assert not pci_edge.support_requests(spelled_yes, [port_request("p")])
    capitals = pci.pools_from_stats(
        pool_list(pool(*NIC, 2, 0, dev_type="type-VF", physical_network="p", remote_managed="TRUE"))
    )
    assert pci_edge.support_requests(capitals, [smartnic])


def test_vdpa_and_remote_managed_pools_only_when_asked_for() -> None:
    vdpa = pci.pools_from_stats(pool_list(pool(*NIC, 2, 0, dev_type="vdpa")))
    assert not pci_edge.support_requests(vdpa, [alias_request("nic", vendor_id="8086")])
    assert pci_edge.support_requests(vdpa, [alias_request("v", vendor_id="8086", dev_type="vdpa")])
    remote = pci.pools_from_stats(
        pool_list(pool(*NIC, 2, 0, dev_type="type-VF", physical_network="p", remote_managed="true"))
    )
    assert not pci_edge.support_requests(remote, [port_request("p")])
    smartnic = port_request("p")
    smartnic["spec"][0]["remote_managed"] = "True"
    assert pci_edge.support_requests(remote, [smartnic])


def test_requests_are_applied_one_after_the_other() -> None:
    # nova applies the requests in turn on a copy of the pools: 1 + 2 devices do not fit a
    # pool of 2, though each alone does
    pools = pci.pools_from_stats(pool_list(pool(*GPU, 2, 0)))
    one = alias_request("gpu", vendor_id=GPU[0], product_id=GPU[1])
    two = alias_request("gpu", count=2, vendor_id=GPU[0], product_id=GPU[1])
    assert pci_edge.support_requests(pools, [one]) and pci_edge.support_requests(pools, [two])
    assert not pci_edge.support_requests(pools, [one, two])
    assert pci_edge.first_unsupported(pools, [one, two]).primitive is two
    assert pci_edge.support_requests(pools, [one, dict(one)])
    assert not pci_edge.support_requests(pools, [one, dict(one), dict(one)])


def test_two_ports_and_an_alias_share_the_vfs() -> None:
    pools = pci.pools_from_stats(
        pool_list(pool(*NIC, 2, 0, dev_type="type-VF", physical_network="physnet1"))
    )
    vf = alias_request("vf", vendor_id=NIC[0], product_id=NIC[1])
    assert pci_edge.support_requests(pools, [port_request("physnet1"), vf])
    assert not pci_edge.support_requests(pools, [port_request("physnet1")] * 2 + [vf])


def test_first_unsupported_and_reasons() -> None:
    pools = fleet_pools()
    gpu = alias_request("gpu", vendor_id="10de", product_id="1eb8")
    fpga = alias_request("fpga", vendor_id="1172", product_id="0001")
    assert pci_edge.first_unsupported(pools, [gpu, fpga]).primitive is fpga
    assert pci_edge.request_reason(fpga) == "no PCI device matching alias fpga"
    assert pci_edge.request_reason(port_request("x")) == "no PCI device for a requested port"
    assert pci_edge.request_reason({"count": 1, "spec": []}) == "no matching PCI device"


# -- NUMA affinity --------------------------------------------------------------------------


def test_numa_policy_required() -> None:
    pools = fleet_pools()
    gpu = alias_request("gpu", numa_policy="required", vendor_id="10de", product_id="1eb8")
    assert pci_edge.support_requests(pools, [gpu], numa_cell_ids=[1])
    assert not pci_edge.support_requests(pools, [gpu], numa_cell_ids=[0])


def test_numa_policy_legacy_allows_devices_without_numa_node() -> None:
    pools = pci.pools_from_stats(pool_list(pool(*GPU, 1, None), pool(*GPU, 1, 1)))
    gpu = alias_request("gpu", vendor_id="10de", product_id="1eb8")  # no policy: legacy
    assert pci_edge.support_requests(pools, [gpu], numa_cell_ids=[0])
    gpu2 = alias_request("gpu", count=2, vendor_id="10de", product_id="1eb8")
    assert not pci_edge.support_requests(pools, [gpu2], numa_cell_ids=[0])
    required = alias_request("gpu", numa_policy="required", vendor_id="10de", product_id="1eb8")
    assert not pci_edge.support_requests(pools, [required], numa_cell_ids=[0])


def test_numa_policy_preferred_takes_remote_devices_when_needed() -> None:
    pools = fleet_pools()
    gpu = alias_request("gpu", numa_policy="preferred", vendor_id="10de", product_id="1eb8")
    assert pci_edge.support_requests(pools, [gpu], numa_cell_ids=[0])
    legacy = alias_request("gpu", numa_policy="legacy", vendor_id="10de", product_id="1eb8")
    assert not pci_edge.support_requests(pools, [legacy], numa_cell_ids=[0])


def test_numa_policy_socket() -> None:
    # cells 0 and 1 on socket 0, cell 2 on socket 1; the GPU is on cell 1
    pools = fleet_pools()
    sockets = {0: 0, 1: 0, 2: 1}
    gpu = alias_request("gpu", numa_policy="socket", vendor_id="10de", product_id="1eb8")
    assert pci_edge.support_requests(pools, [gpu], numa_cell_ids=[0], socket_of=sockets)
    assert not pci_edge.support_requests(pools, [gpu], numa_cell_ids=[2], socket_of=sockets)


def test_numa_policy_socket_without_socket_information_finds_no_device() -> None:
    # nova gives up on the socket policy when any host cell reports no socket, even when
    # the guest's own cells report one; a device without NUMA node never qualifies
    pools = fleet_pools()
    gpu = alias_request("gpu", numa_policy="socket", vendor_id="10de", product_id="1eb8")
    assert pci_edge.support_requests(pools, [gpu], numa_cell_ids=[0], socket_of={0: 0, 1: 0})
    unknown = {0: 0, 1: 0, 2: None}
    assert not pci_edge.support_requests(pools, [gpu], numa_cell_ids=[0], socket_of=unknown)
    assert not pci_edge.support_requests(pools, [gpu], numa_cell_ids=[0], socket_of=None)
    anywhere = pci.pools_from_stats(pool_list(pool(*GPU, 1, None)))
    assert not pci_edge.support_requests(anywhere, [gpu], numa_cell_ids=[0], socket_of={0: 0})


def test_no_numa_cells_means_no_numa_restriction() -> None:
    pools = fleet_pools()
    gpu = alias_request("gpu", numa_policy="required", vendor_id="10de", product_id="1eb8")
    assert pci_edge.support_requests(pools, [gpu], numa_cell_ids=[])
    assert pci_edge.support_requests(pools, [gpu], numa_cell_ids=None)


def test_live_migratable_when_every_spec_sets_it() -> None:
    pools = pci.pools_from_stats(
        pool_list(pool(*GPU, 1, 0, live_migratable="true"), pool(*GPU, 1, 0))
    )
    movable = alias_request("gpu", count=2, vendor_id=GPU[0], product_id=GPU[1])
    assert pci_edge.support_requests(pools, [movable])
    movable["spec"][0]["live_migratable"] = "true"
    assert not pci_edge.support_requests(pools, [movable])
    assert pci_edge.support_requests(pools, [dict(movable, count=1)])


# -- PCI in Placement -----------------------------------------------------------------------


def test_placement_mapping_restricts_to_allocated_providers() -> None:
    pools = pci.pools_from_stats(
        pool_list(pool(*GPU, 1, 0, rp_uuid="rp-gpu-0"), pool(*GPU, 1, 1, rp_uuid="rp-gpu-1"))
    )
    gpu = alias_request("gpu", request_id="r1", vendor_id="10de", product_id="1eb8")
    assert pci_edge.rp_uuids_for_request({"r1-0": ["rp-gpu-1"], "other": ["x"]}, gpu) == [
        "rp-gpu-1"
    ]
    assert pci_edge.support_requests(pools, [gpu], {"r1-0": ["rp-gpu-1"]})
    # NUMA cell 0 only, but Placement allocated the device of cell 1
    assert pci_edge.support_requests(pools, [gpu], {"r1-0": ["rp-gpu-0"]}, numa_cell_ids=[0])
    assert not pci_edge.support_requests(pools, [gpu], {"r1-0": ["rp-gpu-1"]}, numa_cell_ids=[0])
    # two devices allocated from a provider whose pool has one left
    gpu2 = alias_request("gpu", count=2, request_id="r1", vendor_id="10de", product_id="1eb8")
    assert not pci_edge.support_requests(
        pools, [gpu2], {"r1-0": ["rp-gpu-0"], "r1-1": ["rp-gpu-0"]}
    )
    # no PCI groups in the mapping (PCI not in Placement): no restriction
    assert pci_edge.support_requests(pools, [gpu2], {"": ["compute-rp"]})


def test_providers_of_a_request_as_nova_reads_them() -> None:
    gpu = alias_request("gpu", request_id="r1", vendor_id=GPU[0], product_id=GPU[1])
    # each group's first provider, for every group named after the request
    mapping = {"": ["cn"], "r1-0": ["rp-a", "rp-x"], "r1-1": ["rp-b"], "r2-0": ["rp-c"]}
    assert pci_edge.rp_uuids_for_request(mapping, gpu) == ["rp-a", "rp-b"]
    # a port's devices are not tracked in Placement: its QoS group is not a PCI provider
    port = port_request("physnet1", request_id="r1")
    assert pci_edge.rp_uuids_for_request({"r1-0": ["rp-a"], "port-uuid-1": ["rp-bw"]}, port) == []
    # without a mapping (a move's request): the providers its spec recorded
    recorded = alias_request("gpu", request_id="r1", rp_uuids="rp-a,rp-b", vendor_id=GPU[0])
    assert pci_edge.rp_uuids_for_request(None, recorded) == ["rp-a", "rp-b"]
    assert pci_edge.rp_uuids_for_request({}, recorded) == ["rp-a", "rp-b"]
    assert pci_edge.rp_uuids_for_request({"": ["cn"]}, recorded) == []


def test_a_provider_shared_by_two_pools_supports_nothing_placed() -> None:
    pools = pci.pools_from_stats(
        pool_list(pool(*GPU, 1, 0, rp_uuid="rp-a"), pool(*NIC, 1, 0, rp_uuid="rp-a"))
    )
    gpu = alias_request("gpu", request_id="r1", vendor_id=GPU[0], product_id=GPU[1])
    assert not pci_edge.support_requests(pools, [gpu], {"r1-0": ["rp-a"]})
    assert pci_edge.support_requests(pools, [gpu])  # not following Placement: fine


def test_placement_signature_groups_candidates() -> None:
    gpu = alias_request("gpu", request_id="r1", vendor_id="10de", product_id="1eb8")
    a = pci_edge.placement_signature({"": ["cn"], "r1-0": ["rp-a"]}, [gpu])
    b = pci_edge.placement_signature({"": ["cn2"], "r1-0": ["rp-a"]}, [gpu])
    c = pci_edge.placement_signature({"": ["cn"], "r1-0": ["rp-b"]}, [gpu])
    assert a == b != c


# -- consumption ----------------------------------------------------------------------------


def _counts(pools: list[dict[str, Any]]) -> list[tuple[Any, Any, int]]:
    return [(p["vendor_id"], p["numa_node"], p["count"]) for p in pools]


def test_apply_requests_takes_devices_cumulatively() -> None:
    pools = fleet_pools()
    vf = alias_request("vf", count=6, vendor_id="8086", product_id="1520", dev_type="type-VF")
    after = pci_edge.apply_requests(pools, [vf])
    assert after.ok
    assert sum(p["count"] for p in after.pools if p.get("dev_type") == "type-VF") == 2
    assert pools[1]["count"] == 4  # input untouched
    assert not pci_edge.apply_requests(after.pools, [vf]).ok
    gpu = alias_request("gpu", vendor_id="10de", product_id="1eb8")
    after_gpu = pci_edge.apply_requests(pools, [gpu])
    assert after_gpu.ok and not pci_edge.apply_requests(after_gpu.pools, [gpu]).ok
    # NUMA-restricted: the cell 0 VFs only
    required = dict(vf, count=5, numa_policy="required")
    assert not pci_edge.apply_requests(pools, [required], numa_cell_ids=[0]).ok


def test_consumption_takes_pools_in_novas_order_and_drops_emptied_ones() -> None:
    # the pool with fewer keys comes first, whatever the compute's order
    stats = pool_list(
        pool(*GPU, 2, 1, physical_network="x"),  # 6 keys
        pool(*GPU, 1, 0),  # 5 keys: taken first
    )
    gpu = alias_request("gpu", count=2, vendor_id=GPU[0], product_id=GPU[1])
    after = pci_edge.apply_requests(pci.pools_from_stats(stats), [gpu])
    assert after.ok and _counts(after.pools) == [("10de", 1, 1)]


def test_preferred_policy_takes_the_local_devices_first() -> None:
    pools = pci.pools_from_stats(pool_list(pool(*GPU, 1, 0), pool(*GPU, 2, 1)))
    gpu = alias_request("gpu", count=2, numa_policy="preferred", vendor_id=GPU[0])
    after = pci_edge.apply_requests(pools, [gpu], numa_cell_ids=[1])
    assert after.ok and _counts(after.pools) == [("10de", 0, 1)]
    # legacy takes only local ones, required too
    legacy = dict(gpu, numa_policy="legacy")
    assert _counts(pci_edge.apply_requests(pools, [legacy], numa_cell_ids=[1]).pools) == [
        ("10de", 0, 1)
    ]
    assert not pci_edge.apply_requests(
        pools, [dict(gpu, count=3, numa_policy="legacy")], None, [1]
    ).ok


def test_consumption_follows_the_placement_allocation() -> None:
    pools = pci.pools_from_stats(
        pool_list(pool(*GPU, 2, 0, rp_uuid="rp-a"), pool(*GPU, 2, 1, rp_uuid="rp-b"))
    )
    gpu = alias_request("gpu", count=2, request_id="r1", vendor_id=GPU[0], product_id=GPU[1])
    after = pci_edge.apply_requests(pools, [gpu], {"r1-0": ["rp-b"], "r1-1": ["rp-b"]})
    assert after.ok and _counts(after.pools) == [("10de", 0, 2)]
    split = pci_edge.apply_requests(pools, [gpu], {"r1-0": ["rp-a"], "r1-1": ["rp-b"]})
    assert _counts(split.pools) == [("10de", 0, 1), ("10de", 1, 1)]


def test_a_failed_consumption_keeps_what_the_requests_before_took() -> None:
    pools = pci.pools_from_stats(pool_list(pool(*GPU, 2, 0), pool(*NIC, 1, 0)))
    gpu = alias_request("gpu", count=2, vendor_id=GPU[0], product_id=GPU[1])
    fpga = alias_request("fpga", vendor_id="1172", product_id="0001")
    after = pci_edge.apply_requests(pools, [gpu, fpga])
    assert after.failed.primitive is fpga and not after.ok
    assert _counts(after.pools) == [("8086", 0, 1)]


def test_a_pool_reported_empty_is_dropped_when_reached() -> None:
    # computes report pools they gave away whole with a count of 0; nova drops such a pool
    # from its list when a request goes through it
    pools = pci.pools_from_stats(pool_list(pool(*GPU, 0, 0), pool(*GPU, 1, 1)))
    gpu = alias_request("gpu", vendor_id=GPU[0], product_id=GPU[1])
    assert _counts(pci_edge.apply_requests(pools, [gpu]).pools) == []
    nic = alias_request("nic", vendor_id=NIC[0], product_id=NIC[1])
    assert _counts(pci_edge.apply_requests(pools, [nic]).pools) == [("10de", 0, 0), ("10de", 1, 1)]


def test_matching_pools_lists_what_one_request_may_take() -> None:
    pools = fleet_pools()
    vf = alias_request("vf", vendor_id=NIC[0], product_id=NIC[1])
    chosen = pci_edge.matching_pools(pools, vf, numa_cell_ids=[1])
    assert chosen is not None and [p["numa_node"] for p in chosen] == [1]
    assert pci_edge.matching_pools(pools, dict(vf, count=9)) is None


def test_request_group_mapping_as_novas_request_spec_gives_it() -> None:
    spec = SimpleNamespace(
        requested_resources=[
            RequestGroup(requester_id="r1-0", provider_uuids=["rp-a"]),
            RequestGroup(requester_id="port-1", provider_uuids=["rp-bw"]),
        ]
    )
    mapping = pci.request_group_mapping(spec)
    assert mapping == {"r1-0": ["rp-a"], "port-1": ["rp-bw"]}
    spec.requested_resources[0].provider_uuids.append("changed later")
    assert mapping["r1-0"] == ["rp-a"]  # a copy
    assert pci.request_group_mapping(SimpleNamespace(requested_resources=None)) is None
    assert pci.request_group_mapping(SimpleNamespace(requested_resources=[])) == {}
