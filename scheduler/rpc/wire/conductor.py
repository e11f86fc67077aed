"""The conductor's side: a RequestSpec encoded as nova's conductor sends it, and the
Selections of the reply decoded, for our own client (``scheduler/rpc/rpcapi.py``) and the
tests. Plain-data members of our model are wrapped back in the envelopes nova uses, at the
versions nova 34 sends.
"""

from __future__ import annotations

import json
from typing import Any

from scheduler.objects import (
    Destination,
    Flavor,
    ImageMeta,
    InstanceGroup,
    RequestGroup,
    RequestLevelParams,
    RequestSpec,
    SchedulerRetries,
    Selection,
    jsonable,
)
from scheduler.resources.shapes import InstanceTopology
from scheduler.rpc.wire.decode import limits_from_primitive
from scheduler.rpc.wire.encode import NETWORK_METADATA_VERSION, limits_to_primitive
from scheduler.rpc.wire.legacy import flavor_dict, image_dict
from scheduler.rpc.wire.values import (
    as_str,
    bad,
    fail,
    field,
    object_data,
    primitive,
    required,
)

# The versions nova 34 sends; a real nova scheduler accepts these.
_SENT_VERSIONS = {
    "RequestSpec": "1.15",
    "Flavor": "1.2",
    "ImageMeta": "1.8",
    "ImageMetaProps": "1.44",
    "InstanceGroup": "1.11",
    "Destination": "1.4",
    "CellMapping": "1.1",
    "SchedulerRetries": "1.1",
    "ComputeNodeList": "1.17",
    "ComputeNode": "1.19",
    "RequestGroup": "1.3",
    "RequestLevelParams": "1.1",
    "InstanceNUMATopology": "1.3",
    "InstanceNUMACell": "1.6",
    "InstancePCIRequests": "1.1",
    "InstancePCIRequest": "1.3",
    "NetworkRequestList": "1.1",
    "NetworkRequest": "1.3",
    "NetworkMetadata": NETWORK_METADATA_VERSION,
}


def _sent(name: str, data: dict[str, Any]) -> dict[str, Any]:
    return primitive(name, _SENT_VERSIONS[name], data)


def _flavor_primitive(flavor: Flavor) -> dict[str, Any]:
    return _sent("Flavor", flavor_dict(flavor))


def _image_primitive(image: ImageMeta) -> dict[str, Any]:
    data = image_dict(image)
    data["properties"] = _sent("ImageMetaProps", data["properties"])
    return _sent("ImageMeta", data)


def _group_primitive(group: InstanceGroup) -> dict[str, Any]:
    data: dict[str, Any] = {"uuid": group.uuid} if group.uuid else {}
    for key in ("name", "user_id", "project_id"):
        value = getattr(group, key)
        if value is not None:
            data[key] = value
    data.update(
        {
            "policy": group.policy,
            "policies": group.policies,
            # nova keeps rules as strings; the ``rules`` property turns them back into ints
            "_rules": {str(k): str(v) for k, v in group.rules.items()},
            "members": list(group.members),
            "hosts": list(group.hosts),
        }
    )
    return _sent("InstanceGroup", data)


def _destination_primitive(dest: Destination) -> dict[str, Any]:
    data: dict[str, Any] = {"host": dest.host, "node": dest.node}
    if dest.cell_uuid is not None:
        data["cell"] = _sent("CellMapping", {"uuid": dest.cell_uuid})
    data["aggregates"] = None if dest.aggregates is None else list(dest.aggregates)
    data["forbidden_aggregates"] = sorted(dest.forbidden_aggregates)
    data["allow_cross_cell_move"] = dest.allow_cross_cell_move
    return _sent("Destination", data)


def _retry_primitive(retry: SchedulerRetries) -> dict[str, Any]:
    nodes = [
        _sent("ComputeNode", {"host": host, "hypervisor_hostname": node})
        for host, node in retry.hosts
    ]
    return _sent(
        "SchedulerRetries",
        {"num_attempts": retry.num_attempts, "hosts": _sent("ComputeNodeList", {"objects": nodes})},
    )


def _request_group_primitive(group: RequestGroup) -> dict[str, Any]:
    return _sent(
        "RequestGroup",
        {
            "use_same_provider": group.use_same_provider,
            "resources": dict(group.resources),
            "required_traits": sorted(group.required_traits),
            "forbidden_traits": sorted(group.forbidden_traits),
            "aggregates": [list(ors) for ors in group.aggregates],
            "forbidden_aggregates": sorted(group.forbidden_aggregates),
            "in_tree": group.in_tree,
            "requester_id": group.requester_id,
            "provider_uuids": list(group.provider_uuids),
        },
    )


def _request_level_params_primitive(params: RequestLevelParams) -> dict[str, Any]:
    return _sent(
        "RequestLevelParams",
        {
            "root_required": sorted(params.root_required),
            "root_forbidden": sorted(params.root_forbidden),
            "same_subtree": [list(group) for group in params.same_subtree],
        },
    )


def _numa_topology_primitive(topology: InstanceTopology) -> dict[str, Any]:
    # nova's data as it came in (or built from the cells); the envelopes are put back the
    # way nova nests them (cells are InstanceNUMACell objects).
    data = jsonable(topology.as_data())
    if isinstance(data.get("cells"), list):
        data["cells"] = [
            _sent("InstanceNUMACell", cell) if isinstance(cell, dict) else cell
            for cell in data["cells"]
        ]
    return _sent("InstanceNUMATopology", data)


def request_spec_to_primitive(spec: RequestSpec) -> dict[str, Any]:
    """A RequestSpec 1.15 primitive, as nova's conductor sends it (for our own client and
    tests; plain-data members are wrapped back in the envelopes nova uses)."""
    data: dict[str, Any] = {}
    if spec.id is not None:
        data["id"] = spec.id
    data.update(
        {
            "availability_zone": spec.availability_zone,
            "flavor": _flavor_primitive(spec.flavor),
            "force_hosts": jsonable(spec.force_hosts),
            "force_nodes": jsonable(spec.force_nodes),
            "ignore_hosts": jsonable(spec.ignore_hosts),
            "image": _image_primitive(spec.image) if spec.image is not None else None,
            "instance_group": (
                _group_primitive(spec.instance_group) if spec.instance_group is not None else None
            ),
            "instance_uuid": spec.instance_uuid,
            "is_bfv": spec.is_bfv,
            "limits": limits_to_primitive(spec.limits) if spec.limits is not None else None,
            "num_instances": spec.num_instances,
            "numa_topology": (
                _numa_topology_primitive(spec.numa_topology)
                if spec.numa_topology is not None
                else None
            ),
            "pci_requests": _sent(
                "InstancePCIRequests",
                {
                    "instance_uuid": spec.instance_uuid,
                    "requests": [
                        _sent("InstancePCIRequest", jsonable(r.as_data()))
                        for r in spec.pci_requests
                    ],
                },
            ),
            "project_id": spec.project_id,
            "request_level_params": _request_level_params_primitive(spec.request_level_params),
            "requested_destination": (
                _destination_primitive(spec.requested_destination)
                if spec.requested_destination is not None
                else None
            ),
            "requested_networks": _sent(
                "NetworkRequestList",
                {
                    "objects": [
                        _sent("NetworkRequest", jsonable(r)) for r in spec.requested_networks
                    ]
                },
            ),
            "requested_resources": [_request_group_primitive(g) for g in spec.requested_resources],
            "retry": _retry_primitive(spec.retry) if spec.retry is not None else None,
            "scheduler_hints": jsonable(spec.scheduler_hints),
            "user_id": spec.user_id,
        }
    )
    if spec.network_metadata is not None:  # (nova leaves the field out when it is not set)
        data["network_metadata"] = _sent("NetworkMetadata", jsonable(spec.network_metadata))
    return _sent("RequestSpec", data)


def selection_from_primitive(prim: Any) -> Selection:
    """A :class:`Selection` from a Selection 1.x primitive (the reply nova's client reads)."""
    where = "Selection"
    data = object_data(prim, "Selection", where)
    allocation_request = data.get("allocation_request")
    if isinstance(allocation_request, str):
        try:
            allocation_request = json.loads(allocation_request)
        except ValueError:
            fail(f"{where}.allocation_request", "is not valid JSON")
    if allocation_request is not None and not isinstance(allocation_request, dict):
        bad(f"{where}.allocation_request", "a JSON object", allocation_request)
    limits = data.get("limits")
    return Selection(
        compute_node_uuid=required(data, "compute_node_uuid", where, as_str),
        service_host=required(data, "service_host", where, as_str),
        nodename=required(data, "nodename", where, as_str),
        cell_uuid=required(data, "cell_uuid", where, as_str),
        allocation_request=allocation_request,
        allocation_request_version=field(data, "allocation_request_version", where, as_str),
        limits=None if limits is None else limits_from_primitive(limits, f"{where}.limits"),
        availability_zone=field(data, "availability_zone", where, as_str),
    )


def selections_from_primitive(prim: Any) -> list[list[Selection]]:
    """The ``return_objects=True`` reply decoded: per instance, chosen host then alternates."""
    if not isinstance(prim, list):
        bad("selections", "a list of lists of Selection primitives", prim)
    out = []
    for i, per_instance in enumerate(prim):
        if not isinstance(per_instance, list):
            bad(f"selections[{i}]", "a list of Selection primitives", per_instance)
        out.append([selection_from_primitive(sel) for sel in per_instance])
    return out
