"""Decoding the request: nova object primitives to our typed model.

Decoding is strict about the values the scheduler computes with (a flavor with its memory
and vcpus, integer counts, string host names, dict hints) and lenient about everything else
(unknown fields and newer minor versions are ignored). A bad payload raises
:class:`~scheduler.exceptions.InvalidRequest` naming the field and what was wrong.

:func:`request_spec_from_primitive` reads a RequestSpec (RPC 4.3 and later); the other
RPCs' arguments are read here too (aggregates, instance lists).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from scheduler.objects import (
    Aggregate,
    Destination,
    Flavor,
    ImageMeta,
    InstanceGroup,
    RequestGroup,
    RequestLevelParams,
    RequestSpec,
    SchedulerLimits,
    SchedulerRetries,
)
from scheduler.primitives import NAME, unwrap
from scheduler.resources import numa, pci
from scheduler.resources.shapes import InstanceTopology, PciRequest
from scheduler.rpc.wire.limits import (
    MAX_EXTRA_SPECS,
    MAX_FLAVOR_NUMBER,
    MAX_HINT_LENGTH,
    MAX_HINT_VALUES,
    MAX_HINTS,
)
from scheduler.rpc.wire.values import (
    as_bool,
    as_dict,
    as_float,
    as_int,
    as_str,
    as_str_list,
    as_text,
    as_text_list,
    bad,
    fail,
    field,
    is_primitive,
    key_excerpt,
    list_objects,
    object_data,
    required,
    str_dict,
    too_many,
)

# -- decoding the request --------------------------------------------------------------------


def _extra_specs(value: Any, where: str) -> dict[str, str]:
    return str_dict(value, where, MAX_EXTRA_SPECS)


def _flavor_count(minimum: int) -> Callable[[Any, str], int]:
    """An integer flavor field: at least ``minimum`` (nova's flavor API: vcpus and memory_mb
    at least 1, disks and swap at least 0) and at most the database's INT."""

    def convert(value: Any, where: str) -> int:
        number = as_int(value, where)
        if number < minimum:
            fail(where, f"must be at least {minimum}, got {number}")
        if number > MAX_FLAVOR_NUMBER:
            fail(where, f"must be at most {MAX_FLAVOR_NUMBER}, got {number}")
        return number

    return convert


_positive = _flavor_count(1)
_non_negative = _flavor_count(0)


def flavor_from_primitive(prim: Any, where: str = "Flavor") -> Flavor:
    """A :class:`Flavor` from a Flavor 1.x primitive."""
    return _flavor_from_data(object_data(prim, "Flavor", where), where)


def _flavor_from_data(data: Mapping[str, Any], where: str) -> Flavor:
    vcpu_weight = data.get("vcpu_weight", 0)
    return Flavor(
        memory_mb=required(data, "memory_mb", where, _positive),
        vcpus=required(data, "vcpus", where, _positive),
        root_gb=field(data, "root_gb", where, _non_negative, 0),
        ephemeral_gb=field(data, "ephemeral_gb", where, _non_negative, 0),
        swap=field(data, "swap", where, _non_negative, 0),
        name=field(data, "name", where, as_str, ""),
        flavorid=field(data, "flavorid", where, as_str, ""),
        id=field(data, "id", where, as_int),
        extra_specs=field(data, "extra_specs", where, _extra_specs, {}),
        rxtx_factor=field(data, "rxtx_factor", where, as_float, 1.0),
        vcpu_weight=None if vcpu_weight is None else as_int(vcpu_weight, f"{where}.vcpu_weight"),
        disabled=field(data, "disabled", where, as_bool, False),
        is_public=field(data, "is_public", where, as_bool, True),
        description=field(data, "description", where, as_text),
    )


def flavor_from_any(value: Any, where: str) -> Flavor:
    if is_primitive(value):
        return flavor_from_primitive(value, where)
    return _flavor_from_data(as_dict(value, where), where)


IMAGE_SCALARS: tuple[tuple[str, Callable[[Any, str], Any]], ...] = (
    ("id", as_str),
    ("name", as_str),
    ("status", as_str),
    ("disk_format", as_str),
    ("container_format", as_str),
    ("size", as_int),
    ("virtual_size", as_int),
    ("min_disk", as_int),
    ("min_ram", as_int),
    ("owner", as_str),
)


def image_meta_from_primitive(prim: Any, where: str = "ImageMeta") -> ImageMeta:
    """An :class:`ImageMeta` from an ImageMeta 1.x primitive; ``properties`` keeps the
    ImageMetaProps fields that were set, under nova's names and with their values."""
    data = object_data(prim, "ImageMeta", where)
    image = image_scalars(data, where)
    props = data.get("properties")
    if props is not None:
        props_data = object_data(props, "ImageMetaProps", f"{where}.properties")
        image.properties = unwrap(props_data)
    return image


def image_scalars(data: Mapping[str, Any], where: str) -> ImageMeta:
    image = ImageMeta()
    for key, convert in IMAGE_SCALARS:
        value = data.get(key)
        if value is not None:
            setattr(image, key, convert(value, f"{where}.{key}"))
    return image


def instance_group_from_primitive(prim: Any, where: str = "InstanceGroup") -> InstanceGroup:
    """An :class:`InstanceGroup` from an InstanceGroup 1.x primitive (``policy``, or the
    first of the old ``policies``; ``_rules`` with ``max_server_per_host`` as an int)."""
    data = object_data(prim, "InstanceGroup", where)
    policy = field(data, "policy", where, as_str)
    if policy is None:
        policies = field(data, "policies", where, as_str_list, [])
        policy = policies[0] if policies else None
    return InstanceGroup(
        uuid=field(data, "uuid", where, as_str, ""),
        policy=policy,
        name=field(data, "name", where, as_str),
        user_id=field(data, "user_id", where, as_str),
        project_id=field(data, "project_id", where, as_str),
        rules=_group_rules(data.get("_rules"), f"{where}._rules"),
        members=field(data, "members", where, as_str_list, []),
        hosts=field(data, "hosts", where, as_str_list, []),
    )


def _group_rules(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    rules: dict[str, Any] = str_dict(value, where)
    if "max_server_per_host" in rules:
        rules["max_server_per_host"] = as_int(
            rules["max_server_per_host"], f"{where}['max_server_per_host']"
        )
    return rules


def destination_from_primitive(prim: Any, where: str = "Destination") -> Destination:
    """A :class:`Destination` from a Destination 1.x primitive (``cell`` → ``cell_uuid``)."""
    data = object_data(prim, "Destination", where)
    cell_uuid = None
    cell = data.get("cell")
    if cell is not None:
        cell_data = object_data(cell, "CellMapping", f"{where}.cell")
        cell_uuid = field(cell_data, "uuid", f"{where}.cell", as_str)
    return Destination(
        host=field(data, "host", where, as_str),
        node=field(data, "node", where, as_str),
        cell_uuid=cell_uuid,
        aggregates=field(data, "aggregates", where, as_text_list),
        forbidden_aggregates=set(field(data, "forbidden_aggregates", where, as_str_list, ())),
        allow_cross_cell_move=field(data, "allow_cross_cell_move", where, as_bool, False),
    )


def retry_from_primitive(prim: Any, where: str) -> SchedulerRetries:
    data = object_data(prim, "SchedulerRetries", where)
    hosts: list[tuple[str, str]] = []
    if data.get("hosts") is not None:
        for i, node in enumerate(list_objects(data["hosts"], "ComputeNodeList", f"{where}.hosts")):
            node_where = f"{where}.hosts[{i}]"
            node_data = object_data(node, "ComputeNode", node_where)
            hosts.append(
                (
                    field(node_data, "host", node_where, as_str, ""),
                    field(node_data, "hypervisor_hostname", node_where, as_str, ""),
                )
            )
    return SchedulerRetries(num_attempts=field(data, "num_attempts", where, as_int, 0), hosts=hosts)


def limits_from_data(data: Mapping[str, Any], where: str) -> SchedulerLimits:
    # numa_topology stays what it was (a NUMATopologyLimits primitive): the scheduler only
    # passes it through, and re-encoding it must give nova back the same object.
    return SchedulerLimits(
        numa_topology=data.get("numa_topology"),
        vcpu=field(data, "vcpu", where, as_float),
        disk_gb=field(data, "disk_gb", where, as_float),
        memory_mb=field(data, "memory_mb", where, as_float),
    )


def limits_from_primitive(prim: Any, where: str) -> SchedulerLimits:
    return limits_from_data(object_data(prim, "SchedulerLimits", where), where)


def _resources(value: Any, where: str) -> dict[str, int]:
    value = as_dict(value, where)
    return {
        as_str(rc, f"{where} key {key_excerpt(rc)}"): as_int(amount, f"{where}[{key_excerpt(rc)}]")
        for rc, amount in value.items()
    }


def _list_of_str_lists(value: Any, where: str) -> list[list[str]]:
    if not isinstance(value, list):
        bad(where, "a list of lists of strings", value)
    return [as_text_list(item, f"{where}[{i}]") for i, item in enumerate(value)]


def _request_group_from_primitive(prim: Any, where: str) -> RequestGroup:
    data = object_data(prim, "RequestGroup", where)
    return RequestGroup(
        requester_id=field(data, "requester_id", where, as_str),
        use_same_provider=field(data, "use_same_provider", where, as_bool, True),
        resources=field(data, "resources", where, _resources, {}),
        required_traits=set(field(data, "required_traits", where, as_str_list, ())),
        forbidden_traits=set(field(data, "forbidden_traits", where, as_str_list, ())),
        aggregates=field(data, "aggregates", where, _list_of_str_lists, []),
        forbidden_aggregates=set(field(data, "forbidden_aggregates", where, as_str_list, ())),
        in_tree=field(data, "in_tree", where, as_str),
        provider_uuids=field(data, "provider_uuids", where, as_str_list, []),
    )


def _request_level_params_from_primitive(prim: Any, where: str) -> RequestLevelParams:
    data = object_data(prim, "RequestLevelParams", where)
    return RequestLevelParams(
        root_required=set(field(data, "root_required", where, as_str_list, ())),
        root_forbidden=set(field(data, "root_forbidden", where, as_str_list, ())),
        same_subtree=field(data, "same_subtree", where, _list_of_str_lists, []),
    )


def scheduler_hints(value: Any, where: str) -> dict[str, list[Any]]:
    # nova's DictOfListOfStringsField; a bare value is wrapped in a list as nova's
    # from_primitives does for legacy hints.
    value = as_dict(value, where)
    if len(value) > MAX_HINTS:
        too_many(where, len(value), MAX_HINTS, "hints")
    hints: dict[str, list[Any]] = {}
    for name, hint in value.items():
        hint_where = f"{where}[{key_excerpt(name)}]"
        name = as_str(name, f"{where} key {key_excerpt(name)}", MAX_HINT_LENGTH)
        if isinstance(hint, (list, tuple)):
            hints[name] = as_str_list(hint, hint_where, MAX_HINT_LENGTH, MAX_HINT_VALUES)
        else:
            hints[name] = [as_str(hint, hint_where, MAX_HINT_LENGTH)]
    return hints


def pci_requests(value: Any, where: str) -> tuple[PciRequest, ...]:
    """An InstancePCIRequests (or its list of requests), decoded (``pci.PciRequest``)."""
    if is_primitive(value):
        requests = object_data(value, "InstancePCIRequests", where).get("requests") or []
    elif isinstance(value, dict):
        requests = value.get("requests") or []
    else:
        requests = value
    if not isinstance(requests, list):
        bad(f"{where}.requests", "a list", requests)
    out = []
    for i, request in enumerate(requests):
        request = unwrap(request)
        if not isinstance(request, dict):
            bad(f"{where}.requests[{i}]", "an InstancePCIRequest", request)
        try:
            out.append(pci.request_from_primitive(request))
        except ValueError as exc:
            fail(f"{where}.requests[{i}]", str(exc))
    return tuple(out)


def _requested_networks(value: Any, where: str) -> list[dict[str, Any]]:
    objects = list_objects(value, "NetworkRequestList", where)
    out = []
    for i, request in enumerate(objects):
        request = unwrap(request)
        if not isinstance(request, dict):
            bad(f"{where}.objects[{i}]", "a NetworkRequest", request)
        out.append(request)
    return out


def _network_metadata(value: Any, where: str) -> dict[str, Any]:
    data = unwrap(value)
    if not isinstance(data, dict):
        bad(where, "a NetworkMetadata", value)
    physnets = data.get("physnets") or []
    if not isinstance(physnets, list | tuple) or not all(isinstance(p, str) for p in physnets):
        bad(f"{where}.physnets", "a list of strings", physnets)
    return {"physnets": sorted(physnets), "tunneled": as_bool(data.get("tunneled", False), where)}


def numa_topology(value: Any, where: str) -> InstanceTopology | None:
    """An InstanceNUMATopology, decoded (``numa.InstanceTopology``; None without cells)."""
    topology = unwrap(value)
    if not isinstance(topology, dict):
        bad(where, "an InstanceNUMATopology", value)
    try:
        return numa.instance_topology_from_primitive(topology)
    except numa.InvalidNUMARequest as exc:
        fail(where, str(exc))


def num_instances(value: Any, where: str) -> int:
    count = as_int(value, where)
    if count < 1:
        fail(where, f"must be at least 1, got {count}")
    return count


def request_spec_from_primitive(prim: dict[str, Any]) -> RequestSpec:
    """A :class:`RequestSpec` from a RequestSpec 1.x primitive (RPC 4.3 and later)."""
    where = "RequestSpec"
    data = object_data(prim, "RequestSpec", where)
    if data.get("flavor") is None:
        fail(f"{where}.flavor", "is required but missing")
    spec = RequestSpec(flavor=flavor_from_primitive(data["flavor"], f"{where}.flavor"))
    # Walk only the fields that are set: most requests leave most of them out or null.
    for key, value in data.items():
        if value is None:
            continue
        decode = _SPEC_FIELDS.get(key)
        if decode is not None:
            decode(spec, value, f"{where}.{key}")
    return spec


def _setter(
    attr: str, convert: Callable[[Any, str], Any]
) -> Callable[[RequestSpec, Any, str], None]:
    def decode(spec: RequestSpec, value: Any, where: str) -> None:
        setattr(spec, attr, convert(value, where))

    return decode


def _list_of(convert: Callable[[Any, str], Any]) -> Callable[[Any, str], list[Any]]:
    def decode(value: Any, where: str) -> list[Any]:
        if not isinstance(value, list):
            bad(where, "a list", value)
        return [convert(item, f"{where}[{i}]") for i, item in enumerate(value)]

    return decode


_SPEC_FIELDS: dict[str, Callable[[RequestSpec, Any, str], None]] = {
    "id": _setter("id", as_int),
    "num_instances": _setter("num_instances", num_instances),
    "project_id": _setter("project_id", as_str),
    "user_id": _setter("user_id", as_str),
    "availability_zone": _setter("availability_zone", as_str),
    "instance_uuid": _setter("instance_uuid", as_str),
    "is_bfv": _setter("is_bfv", as_bool),
    "image": _setter("image", image_meta_from_primitive),
    "instance_group": _setter("instance_group", instance_group_from_primitive),
    "scheduler_hints": _setter("scheduler_hints", scheduler_hints),
    "ignore_hosts": _setter("ignore_hosts", as_str_list),
    "force_hosts": _setter("force_hosts", as_str_list),
    "force_nodes": _setter("force_nodes", as_str_list),
    "requested_destination": _setter("requested_destination", destination_from_primitive),
    "retry": _setter("retry", retry_from_primitive),
    "limits": _setter("limits", limits_from_primitive),
    "requested_resources": _setter("requested_resources", _list_of(_request_group_from_primitive)),
    "request_level_params": _setter("request_level_params", _request_level_params_from_primitive),
    "numa_topology": _setter("numa_topology", numa_topology),
    "pci_requests": _setter("pci_requests", pci_requests),
    "requested_networks": _setter("requested_networks", _requested_networks),
    "network_metadata": _setter("network_metadata", _network_metadata),
}


# -- other RPCs --------------------------------------------------------------------------------


def _aggregate_from_data(data: Mapping[str, Any], where: str) -> Aggregate:
    return Aggregate(
        id=required(data, "id", where, as_int),
        uuid=field(data, "uuid", where, as_str, ""),
        name=field(data, "name", where, as_str, ""),
        hosts=set(field(data, "hosts", where, as_str_list, ())),
        metadata=field(data, "metadata", where, str_dict, {}),
    )


def aggregate_from_primitive(prim: Any) -> Aggregate:
    """An :class:`Aggregate` from an Aggregate 1.x primitive."""
    return _aggregate_from_data(object_data(prim, "Aggregate", "Aggregate"), "Aggregate")


def aggregates_from_primitive(prim: Any) -> list[Aggregate]:
    """The aggregates of an ``update_aggregates``/``delete_aggregate`` cast.

    nova sends three forms: nova-api's aggregate API casts a plain list of Aggregate
    primitives (``update_aggregates(ctxt, aggregates=[aggregate])``), nova's RPC API
    documents an AggregateList, and ``delete_aggregate`` sends one Aggregate.
    """
    if isinstance(prim, list):
        items, where = prim, "aggregates"
    elif isinstance(prim, dict) and prim.get(NAME) == "AggregateList":
        items, where = list_objects(prim, "AggregateList", "AggregateList"), "AggregateList"
    else:
        return [aggregate_from_primitive(prim)]
    return [
        _aggregate_from_data(object_data(item, "Aggregate", f"{where}[{i}]"), f"{where}[{i}]")
        for i, item in enumerate(items)
    ]


def instance_uuids_from_instance_list(prim: Any) -> list[str]:
    """The instance uuids of an InstanceList (or a single Instance) primitive."""
    if isinstance(prim, dict) and prim.get(NAME) == "Instance":
        objects = [prim]
    else:
        objects = list_objects(prim, "InstanceList", "InstanceList")
    uuids = []
    for i, item in enumerate(objects):
        where = f"InstanceList[{i}]"
        uuids.append(required(object_data(item, "Instance", where), "uuid", where, as_str))
    return uuids
