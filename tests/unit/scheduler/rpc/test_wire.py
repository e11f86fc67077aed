"""The nova wire codec against nova 34's real select_destinations sample and hand-made
primitives in nova's shape."""

from __future__ import annotations

import copy
import json
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.exceptions import InvalidRequest
from scheduler.objects import (
    Destination,
    RequestGroup,
    RequestLevelParams,
    RequestSpec,
    SchedulerLimits,
    SchedulerRetries,
    Selection,
)
from scheduler.resources import numa, pci
from scheduler.rpc import wire
from tests.samples import nova_select_destinations

SAMPLE = nova_select_destinations()


def prim(name: str, data: dict, version: str = "1.0") -> dict:
    return {
        "nova_object.name": name,
        "nova_object.namespace": "nova",
        "nova_object.version": version,
        "nova_object.data": data,
        "nova_object.changes": list(data),
    }


@pytest.fixture
def spec_prim() -> dict:
    return copy.deepcopy(SAMPLE["decoded_message"]["args"]["spec_obj"])


def data_of(p: dict) -> dict:
    return p["nova_object.data"]


def normalised(primitive):
    """The primitive with every ``changes`` list turned into a set (their order is free)."""
    if isinstance(primitive, dict):
        return {
            k: set(v) if k == "nova_object.changes" else normalised(v) for k, v in primitive.items()
        }
    if isinstance(primitive, list):
        return [normalised(v) for v in primitive]
    return primitive


# -- the real sample -------------------------------------------------------------------------


def test_sample_request_spec_decodes_every_field(spec_prim):
    spec = wire.request_spec_from_primitive(spec_prim)

    assert isinstance(spec, RequestSpec)
    assert (spec.flavor.memory_mb, spec.flavor.vcpus, spec.flavor.root_gb) == (2048, 2, 20)
    assert spec.flavor.name == "m1.small" and spec.flavor.flavorid == "42"
    assert spec.flavor.extra_specs == {"hw:cpu_policy": "shared"}
    assert spec.flavor.id == 1 and spec.flavor.rxtx_factor == 1.0
    assert spec.num_instances == 1
    assert spec.project_id == "p-222222222222222222222222222222"
    assert spec.user_id == "u-111111111111111111111111111111"
    assert spec.availability_zone == "az1"
    assert spec.instance_uuid == "00000000-0000-0000-0000-00000000001f"
    assert spec.is_bfv is False
    assert spec.image.id == "00000000-0000-0000-0000-00000000000b"
    assert spec.image.disk_format == "qcow2" and spec.image.size == 21430272
    assert spec.image.properties == {"hw_architecture": "x86_64", "hw_vm_mode": "hvm"}
    group = spec.instance_group
    assert group.uuid == "00000000-0000-0000-0000-000000000015"
    assert group.policy == "anti-affinity" and group.policies == ["anti-affinity"]
    assert group.hosts == ["compute-0007"]
    assert group.members == ["00000000-0000-0000-0000-00000000001f"]
    assert group.max_server_per_host == 1
    assert spec.get_scheduler_hint("group") == "00000000-0000-0000-0000-000000000015"
    assert spec.limits == SchedulerLimits()
    assert spec.requested_destination is None and spec.retry is None
    assert spec.force_hosts is None and spec.ignore_hosts is None
    assert spec.requested_resources == []
    assert spec.root_required == set() and spec.root_forbidden == set()
    assert spec.pci_requests == ()
    assert spec.requested_networks == [{"network_id": "00000000-0000-0000-0000-000000000029"}]
    assert spec.numa_topology is None


def sample_selection() -> Selection:
    return Selection(
        compute_node_uuid="00000000-0000-0000-0000-00000000003d",
        service_host="compute-0001",
        nodename="compute-0001",
        cell_uuid="00000000-0000-0000-0000-000000000033",
        allocation_request={
            "allocations": {
                "00000000-0000-0000-0000-00000000003d": {
                    "resources": {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 20}
                }
            },
            "mappings": {"": ["00000000-0000-0000-0000-00000000003d"]},
        },
        allocation_request_version="1.36",
        limits=SchedulerLimits(),
        availability_zone="az1",
    )


def test_selection_primitive_equals_the_sample_reply():
    expected = SAMPLE["reply_return_objects_true"][0][0]
    got = wire.selection_to_primitive(sample_selection())
    assert normalised(got) == normalised(expected)
    # byte-for-byte: the JSON-encoded allocation request is the same string nova sends
    assert (
        got["nova_object.data"]["allocation_request"]
        == (expected["nova_object.data"]["allocation_request"])
    )


def test_selections_primitive_reply_equals_the_sample_and_is_json():
    got = wire.selections_to_primitive([[sample_selection()]])
    assert normalised(json.loads(json.dumps(got))) == normalised(
        SAMPLE["reply_return_objects_true"]
    )


def test_legacy_reply_equals_the_sample():
    sel = sample_selection()
    alternate = sample_selection()
    alternate.service_host = "compute-0002"
    assert wire.selections_to_legacy([[sel, alternate]]) == SAMPLE["reply_return_objects_false"]


def test_selection_without_limits_or_allocation_sends_null_limits_object():
    sel = sample_selection()
    sel.limits = None
    sel.allocation_request = None
    sel.allocation_request_version = None
    data = data_of(wire.selection_to_primitive(sel))
    # nova's Selection.from_host_state JSON-encodes the allocation request whatever it is:
    # a rebuild check (no claim) sends the string "null", not a JSON null
    assert data["allocation_request"] == "null"
    assert data["allocation_request_version"] is None
    assert (
        wire.selection_from_primitive(wire.selection_to_primitive(sel)).allocation_request is None
    )
    assert normalised(data["limits"]) == normalised(
        SAMPLE["reply_return_objects_true"][0][0]["nova_object.data"]["limits"]
    )


def test_limits_are_sent_as_floats_and_numa_limit_as_a_primitive():
    sel = sample_selection()
    sel.limits = SchedulerLimits(
        numa_topology={"cpu_allocation_ratio": 16.0, "ram_allocation_ratio": 1.5},
        vcpu=32,
        memory_mb=4096,
    )
    limits = data_of(data_of(wire.selection_to_primitive(sel))["limits"])
    assert limits["vcpu"] == 32.0 and isinstance(limits["vcpu"], float)
    assert limits["memory_mb"] == 4096.0 and limits["disk_gb"] is None
    numa = limits["numa_topology"]
    assert numa["nova_object.name"] == "NUMATopologyLimits"
    assert numa["nova_object.data"]["cpu_allocation_ratio"] == 16.0

    legacy = wire.selections_to_legacy([[sel]])[0]
    assert legacy["limits"]["vcpu"] == 32 and "disk_gb" not in legacy["limits"]
    assert legacy["limits"]["numa_topology"]["nova_object.name"] == "NUMATopologyLimits"
    json.dumps(legacy)


def test_numa_limit_that_already_is_a_primitive_is_sent_unchanged():
    numa = prim("NUMATopologyLimits", {"cpu_allocation_ratio": 2.0}, "1.1")
    sel = sample_selection()
    sel.limits = SchedulerLimits(numa_topology=numa)
    assert data_of(data_of(wire.selection_to_primitive(sel))["limits"])["numa_topology"] == numa


# -- versions and envelopes ------------------------------------------------------------------


def test_newer_minor_version_with_unknown_fields_is_accepted(spec_prim):
    spec_prim["nova_object.version"] = "1.99"
    data_of(spec_prim)["some_future_field"] = {"x": 1}
    data_of(data_of(spec_prim)["flavor"])["future_flavor_field"] = "y"
    spec = wire.request_spec_from_primitive(spec_prim)
    assert spec.flavor.vcpus == 2


def test_older_request_spec_without_lazy_fields_gets_defaults(spec_prim):
    spec_prim["nova_object.version"] = "1.8"
    for key in ("request_level_params", "requested_resources", "requested_networks", "is_bfv"):
        data_of(spec_prim).pop(key)
    spec = wire.request_spec_from_primitive(spec_prim)
    assert spec.requested_resources == [] and spec.requested_networks == []
    assert spec.is_bfv is False and spec.root_required == set()


@pytest.mark.parametrize(
    "mutate, words",
    [
        (lambda p: p.update({"nova_object.version": "2.0"}), ["RequestSpec", "2.0"]),
        (lambda p: p.update({"nova_object.name": "Flavor"}), ["RequestSpec", "'Flavor'"]),
        (lambda p: p.update({"nova_object.namespace": "cinder"}), ["namespace", "cinder"]),
        (lambda p: p.pop("nova_object.name"), ["RequestSpec", "nova_object.name"]),
        (lambda p: p.update({"nova_object.data": []}), ["nova_object.data", "dict"]),
    ],
)
def test_a_primitive_that_is_not_a_request_spec_is_refused(spec_prim, mutate, words):
    mutate(spec_prim)
    with pytest.raises(InvalidRequest) as err:
        wire.request_spec_from_primitive(spec_prim)
    for word in words:
        assert word in str(err.value)


def test_a_non_dict_is_refused():
    with pytest.raises(InvalidRequest, match="RequestSpec"):
        wire.request_spec_from_primitive("spec")  # type: ignore[arg-type]


# -- strict field checks ---------------------------------------------------------------------


def test_missing_flavor_is_refused(spec_prim):
    del data_of(spec_prim)["flavor"]
    with pytest.raises(InvalidRequest, match=r"RequestSpec\.flavor: is required"):
        wire.request_spec_from_primitive(spec_prim)


@pytest.mark.parametrize("field", ["memory_mb", "vcpus"])
def test_flavor_without_memory_or_vcpus_is_refused(spec_prim, field):
    del data_of(data_of(spec_prim)["flavor"])[field]
    with pytest.raises(InvalidRequest, match=rf"RequestSpec\.flavor\.{field}: is required"):
        wire.request_spec_from_primitive(spec_prim)


def test_flavor_with_wrong_name_is_refused(spec_prim):
    data_of(spec_prim)["flavor"]["nova_object.name"] = "ImageMeta"
    with pytest.raises(InvalidRequest, match=r"RequestSpec\.flavor: expected a Flavor"):
        wire.request_spec_from_primitive(spec_prim)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("num_instances", "two", r"RequestSpec\.num_instances: expected an integer, got 'two'"),
        ("num_instances", 0, r"RequestSpec\.num_instances: must be at least 1"),
        ("num_instances", True, r"RequestSpec\.num_instances: expected an integer"),
        ("scheduler_hints", ["group"], r"RequestSpec\.scheduler_hints: expected a dict"),
        ("force_hosts", "compute-1", r"RequestSpec\.force_hosts: expected a list of strings"),
        ("is_bfv", "maybe", r"RequestSpec\.is_bfv: expected a boolean"),
        ("project_id", {"id": 1}, r"RequestSpec\.project_id: expected a string"),
        ("requested_resources", {}, r"RequestSpec\.requested_resources: expected a list"),
        ("image", {"id": "x"}, r"RequestSpec\.image: expected a ImageMeta object primitive"),
    ],
)
def test_wrong_types_are_refused_naming_the_field(spec_prim, field, value, message):
    data_of(spec_prim)[field] = value
    with pytest.raises(InvalidRequest, match=message):
        wire.request_spec_from_primitive(spec_prim)


def test_wrong_type_in_a_flavor_field_names_the_nested_field(spec_prim):
    data_of(data_of(spec_prim)["flavor"])["vcpus"] = "lots"
    with pytest.raises(InvalidRequest, match=r"RequestSpec\.flavor\.vcpus: expected an integer"):
        wire.request_spec_from_primitive(spec_prim)


def test_numeric_strings_are_coerced_as_nova_fields_do(spec_prim):
    data_of(spec_prim)["num_instances"] = "3"
    data_of(data_of(spec_prim)["flavor"])["extra_specs"] = {"quota:cpu_shares": 1024}
    spec = wire.request_spec_from_primitive(spec_prim)
    assert spec.num_instances == 3
    assert spec.flavor.extra_specs == {"quota:cpu_shares": "1024"}


def test_scheduler_hints_bare_values_are_wrapped_and_null_hints_become_empty(spec_prim):
    data_of(spec_prim)["scheduler_hints"] = {"same_host": ["a", "b"], "query": '[">="]'}
    spec = wire.request_spec_from_primitive(spec_prim)
    assert spec.scheduler_hints == {"same_host": ["a", "b"], "query": ['[">="]']}
    data_of(spec_prim)["scheduler_hints"] = None
    assert wire.request_spec_from_primitive(spec_prim).scheduler_hints == {}


# -- nested objects --------------------------------------------------------------------------


def test_instance_group_old_policies_and_rules(spec_prim):
    group = data_of(data_of(spec_prim)["instance_group"])
    del group["policy"]
    group["policies"] = ["soft-anti-affinity"]
    group["_rules"] = {"max_server_per_host": "3"}
    spec = wire.request_spec_from_primitive(spec_prim)
    assert spec.instance_group.policy == "soft-anti-affinity"
    assert spec.instance_group.rules == {"max_server_per_host": 3}
    assert spec.instance_group.max_server_per_host == 3


def test_instance_group_rule_that_is_not_a_number_is_refused(spec_prim):
    data_of(data_of(spec_prim)["instance_group"])["_rules"] = {"max_server_per_host": "many"}
    with pytest.raises(InvalidRequest, match=r"instance_group\._rules\['max_server_per_host'\]"):
        wire.request_spec_from_primitive(spec_prim)


def test_destination_with_cell_and_aggregates(spec_prim):
    cell = prim("CellMapping", {"uuid": "cell-1", "name": "cell1"}, "1.1")
    data_of(spec_prim)["requested_destination"] = prim(
        "Destination",
        {
            "host": "compute-3",
            "node": "compute-3.local",
            "cell": cell,
            "aggregates": ["a1,a2", "a3"],
            "forbidden_aggregates": ["f1", "f2"],
            "allow_cross_cell_move": True,
        },
        "1.4",
    )
    dest = wire.request_spec_from_primitive(spec_prim).requested_destination
    assert (dest.host, dest.node, dest.cell_uuid) == ("compute-3", "compute-3.local", "cell-1")
    assert dest.aggregates == ["a1,a2", "a3"]
    assert dest.forbidden_aggregates == {"f1", "f2"}
    assert dest.allow_cross_cell_move is True


def test_retry_hosts_come_from_the_compute_node_list(spec_prim):
    nodes = [
        prim("ComputeNode", {"host": "h1", "hypervisor_hostname": "n1"}, "1.19"),
        prim("ComputeNode", {"host": "h2", "hypervisor_hostname": "n2"}, "1.19"),
    ]
    data_of(spec_prim)["retry"] = prim(
        "SchedulerRetries",
        {"num_attempts": 2, "hosts": prim("ComputeNodeList", {"objects": nodes}, "1.17")},
        "1.1",
    )
    retry = wire.request_spec_from_primitive(spec_prim).retry
    assert retry.num_attempts == 2
    assert retry.hosts == [("h1", "n1"), ("h2", "n2")]


def test_request_groups_and_request_level_params(spec_prim):
    data_of(spec_prim)["requested_resources"] = [
        prim(
            "RequestGroup",
            {
                "requester_id": "port-1",
                "use_same_provider": True,
                "resources": {"NET_BW_EGR_KILOBIT_PER_SEC": 1000},
                "required_traits": ["CUSTOM_PHYSNET_A", "CUSTOM_VNIC_TYPE_NORMAL"],
                "forbidden_traits": [],
                "aggregates": [["agg1", "agg2"]],
                "forbidden_aggregates": ["agg9"],
                "in_tree": None,
                "provider_uuids": ["rp-1"],
            },
            "1.3",
        )
    ]
    data_of(spec_prim)["request_level_params"] = prim(
        "RequestLevelParams",
        {
            "root_required": ["HW_CPU_X86_AVX"],
            "root_forbidden": ["COMPUTE_STATUS_DISABLED"],
            "same_subtree": [["port-1", "port-2"]],
        },
        "1.1",
    )
    spec = wire.request_spec_from_primitive(spec_prim)
    (group,) = spec.requested_resources
    assert group.requester_id == "port-1"
    assert group.resources == {"NET_BW_EGR_KILOBIT_PER_SEC": 1000}
    assert group.required_traits == {"CUSTOM_PHYSNET_A", "CUSTOM_VNIC_TYPE_NORMAL"}
    assert group.aggregates == [["agg1", "agg2"]]
    assert group.forbidden_aggregates == {"agg9"}
    assert group.provider_uuids == ["rp-1"] and group.in_tree is None
    assert spec.root_required == {"HW_CPU_X86_AVX"}
    assert spec.root_forbidden == {"COMPUTE_STATUS_DISABLED"}
    assert spec.request_level_params.same_subtree == [["port-1", "port-2"]]


def test_request_group_with_non_integer_amount_is_refused(spec_prim):
    data_of(spec_prim)["requested_resources"] = [
        prim("RequestGroup", {"resources": {"VCPU": "one"}}, "1.3")
    ]
    with pytest.raises(
        InvalidRequest, match=r"requested_resources\[0\]\.resources\['VCPU'\]: expected an int"
    ):
        wire.request_spec_from_primitive(spec_prim)


def _with_numa_and_pci(spec_prim, cell_data=None, request_data=None):
    cell = prim(
        "InstanceNUMACell",
        cell_data or {"id": 0, "cpuset": [0, 1], "pcpuset": [], "memory": 2048, "cpu_policy": None},
        "1.6",
    )
    data_of(spec_prim)["numa_topology"] = prim(
        "InstanceNUMATopology",
        {"cells": [cell], "instance_uuid": "i-1", "emulator_threads_policy": None},
        "1.3",
    )
    pci_request = prim(
        "InstancePCIRequest",
        request_data
        or {"count": 2, "spec": [{"vendor_id": "8086", "product_id": "1520"}], "alias_name": "nic"},
        "1.3",
    )
    data_of(spec_prim)["pci_requests"] = prim(
        "InstancePCIRequests", {"instance_uuid": "i-1", "requests": [pci_request]}, "1.1"
    )
    return spec_prim


def test_numa_topology_and_pci_requests_are_decoded_at_the_edge(spec_prim):
    spec = wire.request_spec_from_primitive(_with_numa_and_pci(spec_prim))
    # typed: nothing past the edge parses nova's primitives
    (cell,) = spec.numa_topology.cells
    assert (cell.id, cell.cpuset, cell.pcpuset, cell.memory) == (
        0,
        frozenset({0, 1}),
        frozenset(),
        2048,
    )
    (request,) = spec.pci_requests
    assert request == pci.PciRequest(
        count=2, specs=({"vendor_id": "8086", "product_id": "1520"},), alias_name="nic"
    )
    assert not request.is_port
    # nova's data is kept for the way back (encoders, notifications, nova's plugins)
    assert spec.numa_topology.as_data() == {
        "cells": [{"id": 0, "cpuset": [0, 1], "pcpuset": [], "memory": 2048, "cpu_policy": None}],
        "instance_uuid": "i-1",
        "emulator_threads_policy": None,
    }
    assert request.as_data() == {
        "count": 2,
        "spec": [{"vendor_id": "8086", "product_id": "1520"}],
        "alias_name": "nic",
    }


@pytest.mark.parametrize(
    ("cell", "request_data", "named"),
    [
        ({"id": 0, "cpuset": "zero", "memory": 2048}, None, "RequestSpec.numa_topology"),
        ({"id": 0, "cpuset": [0], "memory": "lots"}, None, "RequestSpec.numa_topology"),
        (None, {"count": "two", "spec": [{}], "alias_name": "a"}, "pci_requests.requests[0]"),
        (None, {"count": 1, "spec": "vendor", "alias_name": "a"}, "pci_requests.requests[0]"),
        (None, {"count": 1, "spec": [], "alias_name": 7}, "pci_requests.requests[0]"),
    ],
)
def test_a_numa_topology_or_pci_request_the_maths_cannot_read_is_refused_at_the_edge(
    spec_prim, cell, request_data, named
):
    with pytest.raises(InvalidRequest) as err:
        wire.request_spec_from_primitive(_with_numa_and_pci(spec_prim, cell, request_data))
    assert named in str(err.value)


def test_image_properties_keep_lists(spec_prim):
    props = data_of(data_of(data_of(spec_prim)["image"])["properties"])
    props["traits_required"] = ["CUSTOM_GOLD", "HW_CPU_X86_SGX"]
    props["hw_numa_cpus"] = [[0, 1], [2, 3]]
    image = wire.request_spec_from_primitive(spec_prim).image
    assert image.properties["traits_required"] == ["CUSTOM_GOLD", "HW_CPU_X86_SGX"]
    assert image.properties["hw_numa_cpus"] == [[0, 1], [2, 3]]


# -- legacy RPC 4.0-4.2 ----------------------------------------------------------------------


def legacy_request() -> tuple[dict, dict]:
    flavor = copy.deepcopy(
        SAMPLE["decoded_message"]["args"]["spec_obj"]["nova_object.data"]["flavor"]
    )
    request_spec = {
        "instance_type": flavor,
        "image": {
            "id": "img-1",
            "disk_format": "raw",
            "min_ram": "0",
            "properties": {
                "architecture": "x86_64",
                "hypervisor_type": "qemu",
                "vm_mode": "hvm",
                "trait:CUSTOM_GOLD": "required",
                "trait:CUSTOM_IGNORED": "forbidden",
                "hw_disk_bus": "virtio",
            },
        },
        "instance_properties": {
            "uuid": "inst-1",
            "project_id": "p1",
            "user_id": "u1",
            "availability_zone": "az2",
            "memory_mb": 2048,
        },
        "num_instances": 2,
        "instance_uuids": ["inst-1", "inst-2"],
    }
    filter_properties = {
        "scheduler_hints": {"same_host": "inst-0", "different_host": ["x", "y"]},
        "ignore_hosts": ["h9"],
        "force_hosts": ["h1"],
        "force_nodes": ["n1"],
        "retry": {"num_attempts": 2, "hosts": [["h3", "n3"]]},
        "limits": {"vcpu": 16, "memory_mb": 4096},
        "group_updated": True,
        "group_policies": {"anti-affinity"},
        "group_hosts": ["h4"],
        "group_members": ["inst-0"],
        "group_uuid": "g-1",
    }
    return request_spec, filter_properties


def test_legacy_dicts_decode_like_nova_from_primitives():
    spec = wire.request_spec_from_legacy(*legacy_request())
    assert spec.flavor.memory_mb == 2048 and spec.flavor.vcpus == 2
    assert spec.num_instances == 2
    assert spec.instance_uuid == "inst-1"
    assert (spec.project_id, spec.user_id, spec.availability_zone) == ("p1", "u1", "az2")
    assert spec.image.id == "img-1" and spec.image.min_ram == 0
    assert spec.image.properties == {
        "hw_architecture": "x86_64",
        "img_hv_type": "qemu",
        "hw_vm_mode": "hvm",
        "hw_disk_bus": "virtio",
        "traits_required": ["CUSTOM_GOLD"],
    }
    assert spec.scheduler_hints == {"same_host": ["inst-0"], "different_host": ["x", "y"]}
    assert spec.ignore_hosts == ["h9"]
    assert (spec.force_hosts, spec.force_nodes) == (["h1"], ["n1"])
    assert spec.retry.num_attempts == 2 and spec.retry.hosts == [("h3", "n3")]
    assert spec.limits == SchedulerLimits(vcpu=16.0, memory_mb=4096.0)
    group = spec.instance_group
    assert (group.uuid, group.policy, group.hosts, group.members) == (
        "g-1",
        "anti-affinity",
        ["h4"],
        ["inst-0"],
    )


def test_legacy_flavor_can_be_a_plain_dict_in_filter_properties():
    request_spec, filter_properties = legacy_request()
    del request_spec["instance_type"]
    filter_properties["instance_type"] = {"memory_mb": 512, "vcpus": 1, "name": "tiny"}
    spec = wire.request_spec_from_legacy(request_spec, filter_properties)
    assert (spec.flavor.memory_mb, spec.flavor.vcpus, spec.flavor.name) == (512, 1, "tiny")


def test_legacy_without_flavor_or_group_update():
    request_spec, filter_properties = legacy_request()
    filter_properties["group_updated"] = False
    spec = wire.request_spec_from_legacy(request_spec, filter_properties)
    assert spec.instance_group is None
    del request_spec["instance_type"]
    with pytest.raises(InvalidRequest, match="instance_type: is required"):
        wire.request_spec_from_legacy(request_spec, filter_properties)


def test_legacy_bad_retry_is_refused():
    request_spec, filter_properties = legacy_request()
    filter_properties["retry"] = {"num_attempts": 1, "hosts": ["h3"]}
    with pytest.raises(InvalidRequest, match=r"filter_properties\.retry\.hosts\[0\]"):
        wire.request_spec_from_legacy(request_spec, filter_properties)


def test_legacy_request_spec_dict_for_notifications(spec_prim):
    spec = wire.request_spec_from_primitive(spec_prim)
    legacy = json.loads(json.dumps(wire.legacy_request_spec_dict(spec)))
    assert set(legacy) == {"image", "instance_properties", "instance_type", "num_instances"}
    assert legacy["num_instances"] == 1
    assert legacy["image"]["id"] == "00000000-0000-0000-0000-00000000000b"
    assert legacy["image"]["properties"] == {"hw_architecture": "x86_64", "hw_vm_mode": "hvm"}
    props = legacy["instance_properties"]
    assert props["uuid"] == "00000000-0000-0000-0000-00000000001f"
    assert props["availability_zone"] == "az1"
    assert (props["memory_mb"], props["vcpus"], props["root_gb"], props["ephemeral_gb"]) == (
        2048,
        2,
        20,
        0,
    )
    assert legacy["instance_type"]["extra_specs"] == {"hw:cpu_policy": "shared"}
    assert legacy["instance_type"]["flavorid"] == "42"


def test_legacy_request_spec_dict_round_trips_through_the_legacy_decoder(spec_prim):
    spec = wire.request_spec_from_primitive(spec_prim)
    again = wire.request_spec_from_legacy(wire.legacy_request_spec_dict(spec), {})
    assert again.flavor == spec.flavor
    assert again.image == spec.image
    assert again.instance_uuid == spec.instance_uuid
    assert again.availability_zone == spec.availability_zone


def test_legacy_request_spec_dict_without_image():
    spec = RequestSpec(
        flavor=wire.flavor_from_primitive(prim("Flavor", {"memory_mb": 1, "vcpus": 1}))
    )
    assert wire.legacy_request_spec_dict(spec)["image"] == {}


# -- aggregates and instances ----------------------------------------------------------------


def aggregate(agg_id: int, hosts: list[str]) -> dict:
    return prim(
        "Aggregate",
        {
            "id": agg_id,
            "uuid": f"agg-{agg_id}",
            "name": f"a{agg_id}",
            "hosts": hosts,
            "metadata": {"availability_zone": "az1", "ratio": 2},
            "created_at": "2026-01-01T00:00:00Z",
        },
        "1.3",
    )


def test_aggregate_and_aggregate_list():
    agg = wire.aggregate_from_primitive(aggregate(1, ["h1", "h2"]))
    assert (agg.id, agg.uuid, agg.name) == (1, "agg-1", "a1")
    assert agg.hosts == {"h1", "h2"}
    assert agg.metadata == {"availability_zone": "az1", "ratio": "2"}
    assert agg.availability_zone == "az1"

    listed = wire.aggregates_from_primitive(
        prim("AggregateList", {"objects": [aggregate(1, []), aggregate(2, ["h3"])]}, "1.3")
    )
    assert [a.id for a in listed] == [1, 2] and listed[1].hosts == {"h3"}
    assert [a.id for a in wire.aggregates_from_primitive(aggregate(5, []))] == [5]


def test_aggregates_as_nova_api_casts_them_a_plain_list():
    # nova-api's AggregateAPI: query_client.update_aggregates(context, [aggregate])
    listed = wire.aggregates_from_primitive([aggregate(3, ["h1"]), aggregate(4, [])])
    assert [(a.id, a.hosts, a.availability_zone) for a in listed] == [
        (3, {"h1"}, "az1"),
        (4, set(), "az1"),
    ]
    assert wire.aggregates_from_primitive([]) == []
    with pytest.raises(InvalidRequest, match=r"aggregates\[1\]"):
        wire.aggregates_from_primitive([aggregate(3, []), {"nova_object.name": "Flavor"}])


def test_aggregate_without_id_is_refused():
    bad = aggregate(1, [])
    del bad["nova_object.data"]["id"]
    with pytest.raises(InvalidRequest, match=r"Aggregate\.id: is required"):
        wire.aggregate_from_primitive(bad)


def test_instance_uuids_from_instance_list():
    instances = [prim("Instance", {"uuid": f"i-{n}", "host": "h1"}, "2.8") for n in range(3)]
    listed = prim("InstanceList", {"objects": instances}, "2.6")
    assert wire.instance_uuids_from_instance_list(listed) == ["i-0", "i-1", "i-2"]
    assert wire.instance_uuids_from_instance_list(instances[0]) == ["i-0"]
    with pytest.raises(InvalidRequest, match="InstanceList version 1.0 is not supported"):
        wire.instance_uuids_from_instance_list(prim("InstanceList", {"objects": []}, "1.0"))


# -- malformed input never escapes as anything but InvalidRequest ----------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.text(max_size=5), children, max_size=3)
        | st.builds(
            lambda name, data: prim(name, data),
            st.sampled_from(["Flavor", "RequestGroup", "Destination", "ComputeNodeList", "X"]),
            st.dictionaries(st.sampled_from(["objects", "uuid", "host", "resources"]), children),
        )
    ),
    max_leaves=8,
)

SPEC_DATA = SAMPLE["decoded_message"]["args"]["spec_obj"]["nova_object.data"]
NESTED = ["flavor", "image", "instance_group", "limits", "pci_requests", "requested_networks"]
FIELD_PATHS = [(key,) for key in [*SPEC_DATA, "requested_destination", "retry", "extra"]] + [
    (outer, key) for outer in NESTED for key in data_of(SPEC_DATA[outer])
]


@settings(max_examples=300, deadline=None)
@given(path=st.sampled_from(FIELD_PATHS), value=json_values)
def test_any_malformed_field_gives_invalid_request_or_a_spec(path, value):
    spec_prim = copy.deepcopy(SAMPLE["decoded_message"]["args"]["spec_obj"])
    target = data_of(spec_prim)
    for key in path[:-1]:
        target = data_of(target[key])
    target[path[-1]] = value
    try:
        spec = wire.request_spec_from_primitive(spec_prim)
    except InvalidRequest:
        return
    assert isinstance(spec.flavor.memory_mb, int) and isinstance(spec.num_instances, int)


LEGACY_KEYS = [
    ("request_spec", key)
    for key in ["image", "instance_properties", "num_instances", "instance_type"]
] + [
    ("filter_properties", key)
    for key in [
        "scheduler_hints",
        "ignore_hosts",
        "force_hosts",
        "retry",
        "limits",
        "group_policies",
        "group_hosts",
        "instance_group",
        "requested_destination",
    ]
]


@settings(max_examples=300, deadline=None)
@given(where=st.sampled_from(LEGACY_KEYS), value=json_values)
def test_any_malformed_legacy_field_gives_invalid_request_or_a_spec(where, value):
    request_spec, filter_properties = legacy_request()
    (request_spec if where[0] == "request_spec" else filter_properties)[where[1]] = value
    try:
        wire.request_spec_from_legacy(request_spec, filter_properties)
    except InvalidRequest:
        pass


# -- the conductor's side --------------------------------------------------------------------


def test_encoded_request_spec_matches_the_sample_objects(spec_prim):
    spec = wire.request_spec_from_primitive(spec_prim)
    encoded = data_of(wire.request_spec_to_primitive(spec))
    sample = data_of(spec_prim)
    for key in ("flavor", "image", "instance_group", "limits", "requested_networks"):
        assert normalised(encoded[key]) == normalised(sample[key]), key
    for key in ("scheduler_hints", "num_instances", "instance_uuid", "availability_zone"):
        assert encoded[key] == sample[key]
    assert set(encoded) <= set(sample) | {"id"}


def test_request_spec_round_trips_with_every_member_set(spec_prim):
    spec = wire.request_spec_from_primitive(spec_prim)
    spec.id = 7
    spec.requested_destination = Destination(
        host="h", node="n", cell_uuid="c", aggregates=["a,b"], forbidden_aggregates={"f"}
    )
    spec.retry = SchedulerRetries(num_attempts=1, hosts=[("h1", "n1")])
    spec.requested_resources = [
        RequestGroup(requester_id="p", resources={"VF": 1}, required_traits={"T"})
    ]
    spec.request_level_params = RequestLevelParams(root_required={"R"}, same_subtree=[["p", "q"]])
    spec.numa_topology = numa.instance_topology_from_primitive(
        {"cells": [{"id": 0, "cpuset": [0, 1], "memory": 1024}]}
    )
    spec.pci_requests = pci.requests_from_primitive([{"count": 1, "spec": [{"vendor_id": "8086"}]}])
    spec.instance_group.rules = {"max_server_per_host": 2}
    encoded = json.loads(json.dumps(wire.request_spec_to_primitive(spec)))
    assert data_of(data_of(encoded)["instance_group"])["_rules"] == {"max_server_per_host": "2"}
    assert wire.request_spec_from_primitive(encoded) == spec


def test_selection_round_trips_and_sample_reply_decodes():
    sel = sample_selection()
    sel.limits = SchedulerLimits(vcpu=8.0)
    assert wire.selection_from_primitive(wire.selection_to_primitive(sel)) == sel
    (chosen,) = wire.selections_from_primitive(SAMPLE["reply_return_objects_true"])[0]
    assert chosen == sample_selection()


def test_selection_with_bad_allocation_request_is_refused():
    bad = wire.selection_to_primitive(sample_selection())
    bad["nova_object.data"]["allocation_request"] = "{not json"
    with pytest.raises(InvalidRequest, match=r"Selection\.allocation_request"):
        wire.selection_from_primitive(bad)


# -- limits on input (issue 10) --------------------------------------------------------------

BIG = 20 * 1024 * 1024
MAX_INSTANCES = 1000


def _flavor_data(spec_prim: dict) -> dict:
    return data_of(data_of(spec_prim)["flavor"])


def test_excerpt_is_bounded_and_says_how_long():
    huge = "x" * BIG
    text = wire.excerpt(huge)
    assert len(text) < 300 and f"({BIG} chars)" in text
    assert wire.excerpt("short") == "'short'"
    listed = wire.excerpt(list(range(200_000)))
    assert len(listed) < 300 and "(200000 items)" in listed
    assert len(wire.excerpt({f"k{i}": huge for i in range(1000)})) < 300


@pytest.mark.parametrize(
    ("field", "limit"),
    [("project_id", 255), ("user_id", 255), ("availability_zone", 255), ("instance_uuid", 255)],
)
def test_long_spec_strings_are_refused_naming_field_and_limit(spec_prim, field, limit):
    data_of(spec_prim)[field] = "x" * (limit + 1)
    with pytest.raises(InvalidRequest) as excinfo:
        wire.request_spec_from_primitive(spec_prim)
    message = str(excinfo.value)
    assert message == (f"RequestSpec.{field}: is {limit + 1} characters long; the limit is {limit}")
    data_of(spec_prim)[field] = "x" * limit
    assert getattr(wire.request_spec_from_primitive(spec_prim), field) == "x" * limit


def test_twenty_megabyte_project_id_message_is_short(spec_prim):
    data_of(spec_prim)["project_id"] = "p" * BIG
    with pytest.raises(InvalidRequest) as excinfo:
        wire.request_spec_from_primitive(spec_prim)
    assert len(str(excinfo.value)) < 200
    assert "RequestSpec.project_id" in str(excinfo.value) and "255" in str(excinfo.value)


def test_long_flavor_name_is_refused(spec_prim):
    _flavor_data(spec_prim)["name"] = "n" * 256
    with pytest.raises(InvalidRequest, match=r"RequestSpec\.flavor\.name: .*limit is 255"):
        wire.request_spec_from_primitive(spec_prim)


def test_long_extra_spec_key_or_value_is_refused(spec_prim):
    _flavor_data(spec_prim)["extra_specs"] = {"hw:x": "v" * 256}
    with pytest.raises(
        InvalidRequest, match=r"RequestSpec\.flavor\.extra_specs\['hw:x'\]: .*limit is 255"
    ):
        wire.request_spec_from_primitive(spec_prim)
    _flavor_data(spec_prim)["extra_specs"] = {"k" * BIG: "v"}
    with pytest.raises(InvalidRequest) as excinfo:
        wire.request_spec_from_primitive(spec_prim)
    message = str(excinfo.value)
    assert "RequestSpec.flavor.extra_specs key" in message and "limit is 255" in message
    assert len(message) < 300


def test_extra_specs_have_no_count_of_their_own(spec_prim):
    # nova puts no bound on a flavor's extra specs; the size guard (the manager's) bounds them
    _flavor_data(spec_prim)["extra_specs"] = {f"k{i}": "v" for i in range(20_000)}
    assert len(wire.request_spec_from_primitive(spec_prim).flavor.extra_specs) == 20_000


def test_long_hint_key_or_value_is_refused(spec_prim):
    # nova-api takes any hint, any JSON: a name or a value as long as its request body
    limit = wire.MAX_HINT_LENGTH
    assert limit == wire.NOVA_API_BODY_BYTES == 114_688
    data_of(spec_prim)["scheduler_hints"] = {"group": ["g" * BIG]}
    with pytest.raises(InvalidRequest) as excinfo:
        wire.request_spec_from_primitive(spec_prim)
    message = str(excinfo.value)
    assert message == (
        f"RequestSpec.scheduler_hints['group'][0]: is {BIG} characters long; the limit is {limit}"
    )
    data_of(spec_prim)["scheduler_hints"] = {"h" * (limit + 1): "v"}
    with pytest.raises(InvalidRequest, match=rf"scheduler_hints key .*limit is {limit}"):
        wire.request_spec_from_primitive(spec_prim)
    # a bare hint value is checked as well
    data_of(spec_prim)["scheduler_hints"] = {"vendor:note": "c" * (limit + 1)}
    with pytest.raises(InvalidRequest, match=rf"scheduler_hints\['vendor:note'\]: .*{limit}"):
        wire.request_spec_from_primitive(spec_prim)
    # at the bound: taken
    data_of(spec_prim)["scheduler_hints"] = {"h" * 300: "c" * limit}
    assert wire.request_spec_from_primitive(spec_prim).scheduler_hints == {"h" * 300: ["c" * limit]}


def test_json_filter_query_hint_may_be_longer(spec_prim):
    query = json.dumps(["and"] + [[">=", "$free_ram_mb", n] for n in range(40)])
    assert len(query) > 255
    data_of(spec_prim)["scheduler_hints"] = {"query": [query]}
    assert wire.request_spec_from_primitive(spec_prim).scheduler_hints == {"query": [query]}


def test_too_many_hints_or_hint_values_are_refused(spec_prim):
    # each takes at least 2 bytes of nova-api's body: half of it is the bound
    most = wire.MAX_HINTS
    assert most == wire.MAX_HINT_VALUES == wire.NOVA_API_BODY_BYTES // 2
    data_of(spec_prim)["scheduler_hints"] = {f"h{i}": ["v"] for i in range(most + 1)}
    with pytest.raises(InvalidRequest) as excinfo:
        wire.request_spec_from_primitive(spec_prim)
    assert str(excinfo.value) == (
        f"RequestSpec.scheduler_hints: has {most + 1} hints; the limit is {most}"
    )
    data_of(spec_prim)["scheduler_hints"] = {"different_host": ["u"] * (most + 1)}
    with pytest.raises(InvalidRequest) as excinfo:
        wire.request_spec_from_primitive(spec_prim)
    assert str(excinfo.value) == (
        f"RequestSpec.scheduler_hints['different_host']: has {most + 1} items; the limit is {most}"
    )
    # the issue's same_host list of 1,313 instance uuids: decided as nova decides it
    uuids = [str(uuid.UUID(int=n)) for n in range(1313)]
    data_of(spec_prim)["scheduler_hints"] = {"same_host": uuids}
    assert wire.request_spec_from_primitive(spec_prim).scheduler_hints["same_host"] == uuids


def test_legacy_strings_and_hints_have_the_same_limits():
    request_spec, filter_properties = legacy_request()
    request_spec["instance_properties"]["project_id"] = "p" * 256
    with pytest.raises(InvalidRequest, match=r"instance_properties\.project_id: .*limit is 255"):
        wire.request_spec_from_legacy(request_spec, filter_properties)
    request_spec, filter_properties = legacy_request()
    filter_properties["scheduler_hints"] = {"h": "v" * (wire.MAX_HINT_LENGTH + 1)}
    with pytest.raises(InvalidRequest, match=r"filter_properties\.scheduler_hints\['h'\]"):
        wire.request_spec_from_legacy(request_spec, filter_properties)


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("vcpus", -1, "must be at least 1, got -1"),
        ("vcpus", 0, "must be at least 1, got 0"),
        ("memory_mb", 0, "must be at least 1, got 0"),
        ("memory_mb", -512, "must be at least 1, got -512"),
        ("root_gb", -1, "must be at least 0, got -1"),
        ("ephemeral_gb", -1, "must be at least 0, got -1"),
        ("swap", -1, "must be at least 0, got -1"),
        ("vcpus", 2**31, f"must be at most {2**31 - 1}, got {2**31}"),
        ("vcpus", 1.5, "expected an integer, got 1.5 (float)"),
        ("memory_mb", "9" * 100, "expected an integer"),
    ],
)
def test_flavor_numbers_are_refused_out_of_nova_range(spec_prim, field, value, problem):
    _flavor_data(spec_prim)[field] = value
    with pytest.raises(InvalidRequest) as excinfo:
        wire.request_spec_from_primitive(spec_prim)
    assert str(excinfo.value).startswith(f"RequestSpec.flavor.{field}: {problem}")


def test_flavor_numbers_at_their_bounds_pass(spec_prim):
    flavor = _flavor_data(spec_prim)
    flavor.update(vcpus=1, memory_mb=1, root_gb=0, ephemeral_gb=0, swap=0)
    spec = wire.request_spec_from_primitive(spec_prim)
    assert (spec.flavor.vcpus, spec.flavor.memory_mb, spec.flavor.root_gb) == (1, 1, 0)


def test_legacy_flavor_numbers_have_the_same_rule():
    request_spec, filter_properties = legacy_request()
    data_of(request_spec["instance_type"])["vcpus"] = 0
    with pytest.raises(InvalidRequest, match=r"request_spec\.instance_type\.vcpus: must be at"):
        wire.request_spec_from_legacy(request_spec, filter_properties)


# the request size: measured by a bounded walk, before decoding


def test_request_within_the_size_limit_passes(spec_prim):
    wire.check_request_size({"spec_obj": spec_prim, "instance_uuids": ["u"]}, 1024 * 1024)


def test_request_over_the_size_limit_names_the_field_and_the_limit(spec_prim):
    data_of(spec_prim)["scheduler_hints"] = {"big": ["x" * 5000]}
    with pytest.raises(InvalidRequest) as excinfo:
        wire.check_request_size({"spec_obj": spec_prim}, 4096)
    message = str(excinfo.value)
    assert "scheduler_hints" in message and "4096 bytes" in message
    assert "[scheduler] max_request_bytes" in message


def test_size_walk_stops_as_soon_as_the_limit_is_passed():
    class Counting(list):
        seen = 0

        def __iter__(self):
            for item in super().__iter__():
                Counting.seen += 1
                yield item

    payload = Counting(range(1_000_000))
    with pytest.raises(InvalidRequest, match=r"instance_uuids: the request is larger than 1024"):
        wire.check_request_size({"instance_uuids": payload}, 1024)
    assert Counting.seen <= 1100


def test_huge_extra_specs_are_refused_by_size_quickly(spec_prim):
    """Cheaply: the walk stops once the limit is passed, whatever the size (counted in
    items looked at, not timed: a timed test fails on a loaded machine)."""

    class Counting(dict):
        taken = 0

        def items(self):
            for pair in super().items():
                Counting.taken += 1
                yield pair

    specs = Counting((f"key-{i}", "v" * 20) for i in range(1_000_000))
    _flavor_data(spec_prim)["extra_specs"] = specs
    limit = 1024 * 1024
    with pytest.raises(InvalidRequest, match=r"^spec_obj\.flavor\.extra_specs: the request"):
        wire.check_request_size({"spec_obj": spec_prim}, limit)
    # each item counts its key and 4 bytes at least: no more than limit / 9 of them
    assert 0 < Counting.taken <= limit // 9 + 1


def test_nesting_deeper_than_32_is_refused():
    deep: list = []
    for _ in range(40):
        deep = [deep]
    with pytest.raises(InvalidRequest, match="is nested deeper than 32 levels"):
        wire.check_request_size({"spec_obj": deep}, 1024 * 1024)
    shallow: list = []
    for _ in range(30):
        shallow = [shallow]
    wire.check_request_size({"spec_obj": shallow}, 1024 * 1024)


# the instances of the request


def _spec(num_instances: int = 1) -> RequestSpec:
    spec = wire.request_spec_from_primitive(
        copy.deepcopy(SAMPLE["decoded_message"]["args"]["spec_obj"])
    )
    spec.num_instances = num_instances
    return spec


UUID_A = "00000000-0000-0000-0000-00000000001f"
UUID_B = "00000000-0000-0000-0000-000000000020"


def test_instances_within_the_limits_pass():
    assert wire.check_instances(_spec(2), [UUID_A, UUID_B], MAX_INSTANCES) == [UUID_A, UUID_B]
    assert wire.check_instances(_spec(3), None, MAX_INSTANCES) is None
    # a move sends one uuid with the num_instances its boot had: nova accepts it
    assert wire.check_instances(_spec(3), [UUID_A], MAX_INSTANCES) == [UUID_A]


@pytest.mark.parametrize(
    ("uuids", "message"),
    [
        (UUID_A, f"instance_uuids: expected a list of instance UUIDs or null, got '{UUID_A}'"),
        (7, "instance_uuids: expected a list of instance UUIDs or null, got 7 (int)"),
        ([UUID_A, None], "instance_uuids[1]: expected an instance UUID string, got None"),
        ([UUID_A, 5], "instance_uuids[1]: expected an instance UUID string, got 5 (int)"),
        ([UUID_A, UUID_B, UUID_A], f"instance_uuids[2]: repeats instance_uuids[0] ('{UUID_A}')"),
        (["not-a-uuid"], "instance_uuids[0]: expected an instance UUID, got 'not-a-uuid'"),
        (["u" * 256], "instance_uuids[0]: is 256 characters long; the limit is 255"),
    ],
)
def test_bad_instance_uuids_are_refused(uuids, message):
    with pytest.raises(InvalidRequest) as excinfo:
        wire.check_instances(_spec(), uuids, MAX_INSTANCES)
    assert str(excinfo.value).startswith(message)


def test_too_many_instance_uuids_are_refused():
    uuids = [str(uuid.UUID(int=n)) for n in range(10_000)]
    with pytest.raises(InvalidRequest) as excinfo:
        wire.check_instances(_spec(), uuids, MAX_INSTANCES)
    assert str(excinfo.value) == (
        "instance_uuids: has 10000 items; the limit is 1000 ([scheduler] max_instances_per_request)"
    )


def test_num_instances_over_the_limit_is_refused():
    with pytest.raises(InvalidRequest) as excinfo:
        wire.check_instances(_spec(2**31), [UUID_A], MAX_INSTANCES)
    assert str(excinfo.value) == (
        f"RequestSpec.num_instances: is {2**31}; the limit is 1000 "
        "([scheduler] max_instances_per_request)"
    )


def test_num_instances_below_one_is_refused(spec_prim):
    data_of(spec_prim)["num_instances"] = 0
    with pytest.raises(InvalidRequest, match=r"RequestSpec\.num_instances: must be at least 1"):
        wire.request_spec_from_primitive(spec_prim)


# -- network metadata (NUMA affinity of the ports' physnets) -----------------------------------


def _with_network_metadata(spec_prim: dict, data: dict) -> dict:
    data_of(spec_prim)["network_metadata"] = {
        "nova_object.name": "NetworkMetadata",
        "nova_object.namespace": "nova",
        "nova_object.version": "1.0",
        "nova_object.data": data,
    }
    return spec_prim


def test_network_metadata_is_decoded_and_sent_back_as_nova_sends_it(spec_prim):
    prim = _with_network_metadata(
        spec_prim, {"physnets": ["physnet2", "physnet1"], "tunneled": True}
    )

    spec = wire.request_spec_from_primitive(prim)

    assert spec.network_metadata == {"physnets": ["physnet1", "physnet2"], "tunneled": True}
    sent = data_of(wire.request_spec_to_primitive(spec))["network_metadata"]
    assert sent["nova_object.name"] == "NetworkMetadata" and sent["nova_object.version"] == "1.0"
    assert data_of(sent) == {"physnets": ["physnet1", "physnet2"], "tunneled": True}


def test_a_request_without_network_metadata_has_none(spec_prim):
    data_of(spec_prim).pop("network_metadata", None)
    spec = wire.request_spec_from_primitive(spec_prim)
    assert spec.network_metadata is None
    assert "network_metadata" not in data_of(wire.request_spec_to_primitive(spec))


@pytest.mark.parametrize(
    "data, words",
    [
        ({"physnets": "physnet1"}, "network_metadata.physnets"),
        ({"physnets": [1, 2]}, "network_metadata.physnets"),
        ({"physnets": [], "tunneled": "maybe"}, "network_metadata"),
    ],
)
def test_malformed_network_metadata_is_refused_by_name(spec_prim, data, words):
    with pytest.raises(InvalidRequest, match=words):
        wire.request_spec_from_primitive(_with_network_metadata(spec_prim, data))
