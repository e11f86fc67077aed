"""The legacy dicts of RPC 4.0-4.2: the ``request_spec`` and ``filter_properties`` dicts
nova's ``RequestSpec.from_primitives`` reads (:func:`request_spec_from_legacy`) and its
``to_legacy_*`` helpers write (:func:`legacy_request_spec_dict` for the notifications,
:func:`legacy_filter_properties_dict` for our client), and the ``{host, nodename, limits}``
reply of ``return_objects=False`` (:func:`selections_to_legacy`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from scheduler.objects import (
    Destination,
    Flavor,
    ImageMeta,
    InstanceGroup,
    RequestSpec,
    SchedulerLimits,
    SchedulerRetries,
    Selection,
    jsonable,
)
from scheduler.primitives import unwrap
from scheduler.rpc.wire.decode import (
    IMAGE_SCALARS,
    destination_from_primitive,
    flavor_from_any,
    image_meta_from_primitive,
    image_scalars,
    instance_group_from_primitive,
    limits_from_data,
    limits_from_primitive,
    num_instances,
    numa_topology,
    pci_requests,
    retry_from_primitive,
    scheduler_hints,
)
from scheduler.rpc.wire.encode import numa_limits_primitive
from scheduler.rpc.wire.values import (
    as_dict,
    as_int,
    as_str,
    as_str_list,
    bad,
    fail,
    field,
    is_primitive,
    object_data,
    primitive,
)

# -- the legacy request -----------------------------------------------------------------------

# ImageMetaProps.from_dict renames these old Glance property names.
_LEGACY_IMAGE_PROPERTIES = {
    "architecture": "hw_architecture",
    "owner_id": "img_owner_id",
    "vmware_disktype": "hw_disk_type",
    "vmware_image_version": "img_version",
    "vmware_ostype": "os_distro",
    "auto_disk_config": "hw_auto_disk_config",
    "ipxe_boot": "hw_ipxe_boot",
    "xenapi_device_id": "hw_device_id",
    "xenapi_image_compression_level": "img_compression_level",
    "vmware_linked_clone": "img_linked_clone",
    "xenapi_use_agent": "img_use_agent",
    "hypervisor_type": "img_hv_type",
    "hypervisor_version_requires": "img_hv_requested_version",
    "vm_mode": "hw_vm_mode",
}


def _legacy_image(value: Any, where: str) -> ImageMeta | None:
    if value is None:
        return None
    if is_primitive(value):
        return image_meta_from_primitive(value, where)
    data = as_dict(value, where)
    if not data:
        return None
    image = image_scalars(data, where)
    props = data.get("properties")
    if props is None:
        return image
    if is_primitive(props):
        image.properties = unwrap(object_data(props, "ImageMetaProps", f"{where}.properties"))
        return image
    properties: dict[str, Any] = {}
    traits_required: list[str] = []
    for key, prop in as_dict(props, f"{where}.properties").items():
        if key.startswith("trait:"):
            # Glance's "trait:CUSTOM_X=required" is ImageMetaProps.traits_required.
            if prop == "required":
                traits_required.append(key[len("trait:") :])
            continue
        properties[_LEGACY_IMAGE_PROPERTIES.get(key, key)] = prop
    if traits_required:
        properties["traits_required"] = traits_required
    image.properties = properties
    return image


def _legacy_retry(value: Any, where: str) -> SchedulerRetries | None:
    if not value:
        return None
    if is_primitive(value):
        return retry_from_primitive(value, where)
    data = as_dict(value, where)
    if "num_attempts" not in data:
        return None
    hosts: list[tuple[str, str]] = []
    entries = data.get("hosts") or []
    if not isinstance(entries, list):
        bad(f"{where}.hosts", "a list of [host, node] pairs", entries)
    for i, entry in enumerate(entries):
        if not isinstance(entry, (list, tuple)) or len(entry) != 2:
            bad(f"{where}.hosts[{i}]", "a [host, node] pair", entry)
        hosts.append(
            (
                as_str(entry[0], f"{where}.hosts[{i}][0]"),
                as_str(entry[1], f"{where}.hosts[{i}][1]"),
            )
        )
    return SchedulerRetries(
        num_attempts=as_int(data["num_attempts"], f"{where}.num_attempts"), hosts=hosts
    )


def _legacy_limits(value: Any, where: str) -> SchedulerLimits | None:
    if not value:
        return None
    if is_primitive(value):
        return limits_from_primitive(value, where)
    return limits_from_data(as_dict(value, where), where)


def _legacy_group(filter_properties: Mapping[str, Any], where: str) -> InstanceGroup | None:
    group = filter_properties.get("instance_group")
    if group:
        return instance_group_from_primitive(group, f"{where}.instance_group")
    if filter_properties.get("group_updated") is not True:
        return None
    policies = field(filter_properties, "group_policies", where, as_str_list, [])
    return InstanceGroup(
        uuid=field(filter_properties, "group_uuid", where, as_str, ""),
        policy=policies[0] if policies else None,
        hosts=field(filter_properties, "group_hosts", where, as_str_list, []),
        members=field(filter_properties, "group_members", where, as_str_list, []),
    )


def _legacy_destination(value: Any, where: str) -> Destination | None:
    if value is None:
        return None
    if is_primitive(value):
        return destination_from_primitive(value, where)
    return destination_from_primitive(primitive("Destination", "1.4", as_dict(value, where)), where)


def request_spec_from_legacy(
    request_spec: dict[str, Any], filter_properties: dict[str, Any] | None
) -> RequestSpec:
    """A :class:`RequestSpec` from the legacy dicts of RPC 4.0-4.2, as nova's
    ``RequestSpec.from_primitives`` reads them.

    From ``request_spec``: ``num_instances``; ``image`` (dict or ImageMeta primitive; old
    Glance property names such as ``architecture``/``hypervisor_type``/``vm_mode`` are renamed
    to ``hw_architecture``/``img_hv_type``/``hw_vm_mode`` and ``trait:X=required`` becomes
    ``traits_required``); ``instance_properties`` → ``uuid`` (instance_uuid), ``project_id``,
    ``user_id``, ``availability_zone``, ``numa_topology``, ``pci_requests``; ``instance_type``
    (Flavor primitive or dict; else ``filter_properties["instance_type"]``).
    From ``filter_properties``: ``ignore_hosts``, ``force_hosts``, ``force_nodes``, ``retry``
    (``{num_attempts, hosts: [[host, node]]}``), ``limits``, ``scheduler_hints`` (bare values
    wrapped in lists), ``requested_destination``, and the group: ``instance_group`` (a
    primitive) or, when ``group_updated`` is True, ``group_policies`` (first one),
    ``group_hosts``, ``group_members``, ``group_uuid``.
    """
    where = "request_spec"
    request_spec = as_dict(request_spec, where)
    filter_properties = as_dict(filter_properties or {}, "filter_properties")
    flavor_value = request_spec.get("instance_type")
    flavor_where = f"{where}.instance_type"
    if flavor_value is None:
        flavor_value = filter_properties.get("instance_type")
        flavor_where = "filter_properties.instance_type"
    if flavor_value is None:
        fail(flavor_where, "is required but missing")
    spec = RequestSpec(flavor=flavor_from_any(flavor_value, flavor_where))
    spec.num_instances = field(request_spec, "num_instances", where, num_instances, 1)
    spec.image = _legacy_image(request_spec.get("image"), f"{where}.image")

    instance = request_spec.get("instance_properties")
    if instance is not None:
        inst_where = f"{where}.instance_properties"
        if is_primitive(instance):
            instance = object_data(instance, "Instance", inst_where)
        instance = as_dict(instance, inst_where)
        spec.instance_uuid = field(instance, "uuid", inst_where, as_str)
        spec.project_id = field(instance, "project_id", inst_where, as_str)
        spec.user_id = field(instance, "user_id", inst_where, as_str)
        spec.availability_zone = field(instance, "availability_zone", inst_where, as_str)
        spec.numa_topology = field(instance, "numa_topology", inst_where, numa_topology)
        spec.pci_requests = field(instance, "pci_requests", inst_where, pci_requests, ())

    fp = "filter_properties"
    spec.ignore_hosts = field(filter_properties, "ignore_hosts", fp, as_str_list)
    spec.force_hosts = field(filter_properties, "force_hosts", fp, as_str_list)
    spec.force_nodes = field(filter_properties, "force_nodes", fp, as_str_list)
    spec.retry = _legacy_retry(filter_properties.get("retry"), f"{fp}.retry")
    spec.limits = _legacy_limits(filter_properties.get("limits"), f"{fp}.limits")
    spec.instance_group = _legacy_group(filter_properties, fp)
    spec.scheduler_hints = field(filter_properties, "scheduler_hints", fp, scheduler_hints, {})
    spec.requested_destination = _legacy_destination(
        filter_properties.get("requested_destination"), f"{fp}.requested_destination"
    )
    return spec


def flavor_dict(flavor: Flavor) -> dict[str, Any]:
    return {
        "id": flavor.id,
        "name": flavor.name,
        "memory_mb": flavor.memory_mb,
        "vcpus": flavor.vcpus,
        "root_gb": flavor.root_gb,
        "ephemeral_gb": flavor.ephemeral_gb,
        "flavorid": flavor.flavorid,
        "swap": flavor.swap,
        "rxtx_factor": flavor.rxtx_factor,
        "vcpu_weight": flavor.vcpu_weight,
        "disabled": flavor.disabled,
        "is_public": flavor.is_public,
        "extra_specs": dict(flavor.extra_specs),
        "description": flavor.description,
    }


def image_dict(image: ImageMeta) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, _convert in IMAGE_SCALARS:
        value = getattr(image, key)
        if value is not None:
            out[key] = value
    out["properties"] = jsonable(image.properties)
    return out


def legacy_request_spec_dict(spec: RequestSpec) -> dict[str, Any]:
    """The legacy request_spec dict of the ``scheduler.select_destinations.start/.end``
    notifications (nova's ``to_legacy_request_spec_dict``), JSON-serialisable."""
    flavor = spec.flavor
    instance_properties = {
        "numa_topology": (
            jsonable(spec.numa_topology.as_data()) if spec.numa_topology is not None else None
        ),
        "pci_requests": (
            {
                "instance_uuid": spec.instance_uuid,
                "requests": [jsonable(r.as_data()) for r in spec.pci_requests],
            }
            if spec.pci_requests
            else None
        ),
        "project_id": spec.project_id,
        "user_id": spec.user_id,
        "availability_zone": spec.availability_zone,
        "uuid": spec.instance_uuid,
        "root_gb": flavor.root_gb,
        "ephemeral_gb": flavor.ephemeral_gb,
        "memory_mb": flavor.memory_mb,
        "vcpus": flavor.vcpus,
    }
    return {
        "image": image_dict(spec.image) if spec.image is not None else {},
        "instance_properties": instance_properties,
        "instance_type": flavor_dict(flavor),
        "num_instances": spec.num_instances,
    }


def legacy_filter_properties_dict(spec: RequestSpec) -> dict[str, Any]:
    """nova's legacy ``filter_properties`` dict (RPC 4.0) for ``spec``."""
    props: dict[str, Any] = {}
    if spec.ignore_hosts:
        props["ignore_hosts"] = list(spec.ignore_hosts)
    if spec.force_hosts:
        props["force_hosts"] = list(spec.force_hosts)
    if spec.force_nodes:
        props["force_nodes"] = list(spec.force_nodes)
    if spec.retry is not None:
        props["retry"] = {
            "num_attempts": spec.retry.num_attempts,
            "hosts": [[host, node] for host, node in spec.retry.hosts],
        }
    if spec.limits is not None:
        props["limits"] = spec.limits.to_dict()
    if spec.instance_group is not None:
        group = spec.instance_group
        props["group_updated"] = True
        # not in nova's dict; our decoder reads it back so the group keeps its identity
        props["group_uuid"] = group.uuid
        props["group_policies"] = group.policies
        props["group_hosts"] = list(group.hosts)
        props["group_members"] = list(group.members)
    if spec.scheduler_hints:
        props["scheduler_hints"] = {
            name: spec.get_scheduler_hint(name) for name in spec.scheduler_hints
        }
    return props


# -- the legacy reply -------------------------------------------------------------------------


def selection_to_legacy(sel: Selection) -> dict[str, Any]:
    """One ``{host, nodename, limits}`` dict; a NUMA limit goes as its primitive."""
    legacy = sel.to_legacy_dict()
    limits = legacy["limits"]
    if limits.get("numa_topology") is not None:
        limits["numa_topology"] = numa_limits_primitive(limits["numa_topology"])
    return legacy


def selections_to_legacy(
    selections: Iterable[list[Selection] | Selection],
) -> list[dict[str, Any]]:
    """The ``return_objects=False`` reply: the chosen host of each instance as
    ``{host, nodename, limits}`` (alternates are dropped, as nova does)."""
    out = []
    for per_instance in selections:
        sel = per_instance if isinstance(per_instance, Selection) else per_instance[0]
        out.append(selection_to_legacy(sel))
    return out
