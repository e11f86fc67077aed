"""nova's ``scheduler.select_destinations.start`` and ``.end`` notifications.

nova's scheduler sends them in the formats ``[notifications] notification_format`` asks for:
the legacy (unversioned) one from publisher ``scheduler.<host>`` with
``{"request_spec": <legacy dict>}``, and the versioned one from publisher
``nova-scheduler:<host>`` to each of ``[notifications] versioned_notifications_topics``, whose
payload is nova's ``RequestSpecPayload`` 1.1 primitive (the payload of nova's
``SelectDestinationsNotification``). This module only builds and sends them; the manager says
when. The versioned payload is built from the request being scheduled (after the
prefilters, as nova's), with the fields our model does not keep (security groups, image
dates and tags, flavor projects, the destination cell's name) taken from the RequestSpec
primitive nova sent, when there is one.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from scheduler.objects import (
    Destination,
    Flavor,
    ImageMeta,
    InstanceGroup,
    RequestSpec,
    SchedulerRetries,
    jsonable,
)
from scheduler.primitives import DATA, NAME, NAMESPACE, VERSION
from scheduler.resources.shapes import PciRequest
from scheduler.rpc import wire

LOG = logging.getLogger(__name__)

FORMATS = ("unversioned", "versioned", "both")
LEGACY_PUBLISHER = "scheduler"
VERSIONED_SOURCE = "nova-scheduler"
EVENT_PREFIX = "scheduler.select_destinations"

# nova 34's versions of the payload objects
_VERSIONS = {
    "RequestSpecPayload": "1.1",
    "FlavorPayload": "1.4",
    "ImageMetaPayload": "1.0",
    "ImageMetaPropsPayload": "1.20",
    "ServerGroupPayload": "1.1",
    "InstanceNUMATopologyPayload": "1.0",
    "InstanceNUMACellPayload": "1.2",
    "VirtCPUTopologyPayload": "1.0",
    "InstancePCIRequestsPayload": "1.0",
    "InstancePCIRequestPayload": "1.1",
    "DestinationPayload": "1.0",
    "CellMappingPayload": "2.0",
    "SchedulerRetriesPayload": "1.0",
}

# ImageMetaPropsPayload carries every ImageMetaProps field but this secret's reference
_HIDDEN_IMAGE_PROPERTIES = frozenset({"hw_ephemeral_encryption_secret_uuid"})
# ImageMetaPayload fields our ImageMeta does not keep: read from nova's primitive
_IMAGE_EXTRAS = (
    "visibility",
    "protected",
    "checksum",
    "created_at",
    "updated_at",
    "tags",
    "direct_url",
)


def _payload(name: str, data: dict[str, Any]) -> dict[str, Any]:
    """A notification object primitive as nova emits it: its changes were reset, so there
    is no ``nova_object.changes``."""
    return {NAME: name, NAMESPACE: "nova", VERSION: _VERSIONS[name], DATA: data}


def _data(prim: Any) -> Mapping[str, Any]:
    """The ``nova_object.data`` of a primitive nova sent, or nothing."""
    if isinstance(prim, Mapping):
        data = prim.get(DATA)
        if isinstance(data, Mapping):
            return data
    return {}


def _strings(values: Any) -> list[str] | None:
    if values is None:
        return None
    return [str(v) for v in values]


# -- the versioned payload -------------------------------------------------------------------


def request_spec_payload(spec: RequestSpec, raw: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """nova's ``RequestSpecPayload`` 1.1 primitive for ``spec``; ``raw`` is the
    ``nova_object.data`` of the RequestSpec primitive nova sent (None for legacy dicts)."""
    raw = raw or {}
    hints = spec.scheduler_hints
    data: dict[str, Any] = {
        "instance_uuid": spec.instance_uuid,
        "project_id": spec.project_id,
        "user_id": spec.user_id,
        "availability_zone": spec.availability_zone,
        "flavor": _flavor_payload(spec.flavor, _data(raw.get("flavor"))),
        "force_hosts": spec.force_hosts[0] if spec.force_hosts else None,
        "force_nodes": spec.force_nodes[0] if spec.force_nodes else None,
        "ignore_hosts": _strings(spec.ignore_hosts),
        "instance_group": (
            _group_payload(spec.instance_group) if spec.instance_group is not None else None
        ),
        "image": (
            _image_payload(spec.image, _data(raw.get("image"))) if spec.image is not None else None
        ),
        "numa_topology": (
            _numa_payload(spec.numa_topology.as_data(), spec.instance_uuid)
            if spec.numa_topology is not None
            else None
        ),
        "pci_requests": _pci_payload(spec.pci_requests, spec.instance_uuid),
        "num_instances": spec.num_instances,
        "requested_destination": (
            _destination_payload(spec.requested_destination, raw.get("requested_destination"))
            if spec.requested_destination is not None
            else None
        ),
        "retry": _retry_payload(spec.retry) if spec.retry is not None else None,
        "scheduler_hints": None if hints is None else _hints(hints),
        "security_groups": _security_groups(raw.get("security_groups")),
    }
    return _payload("RequestSpecPayload", data)


def _hints(hints: Mapping[str, Any]) -> dict[str, list[str]]:
    """nova's DictOfListOfStringsField: every value a list of strings."""
    return {
        str(name): [str(v) for v in (values if isinstance(values, list) else [values])]
        for name, values in hints.items()
    }


def _flavor_payload(flavor: Flavor, raw: Mapping[str, Any]) -> dict[str, Any]:
    return _payload(
        "FlavorPayload",
        {
            "flavorid": flavor.flavorid,
            "memory_mb": flavor.memory_mb,
            "vcpus": flavor.vcpus,
            "root_gb": flavor.root_gb,
            "ephemeral_gb": flavor.ephemeral_gb,
            "name": flavor.name,
            "swap": flavor.swap,
            "rxtx_factor": flavor.rxtx_factor,
            "vcpu_weight": flavor.vcpu_weight,
            "disabled": flavor.disabled,
            "is_public": flavor.is_public,
            "extra_specs": {str(k): str(v) for k, v in flavor.extra_specs.items()},
            # nova cannot load a flavor's projects in the scheduler: None unless sent
            "projects": _strings(raw.get("projects")),
            "description": flavor.description,
        },
    )


def _image_payload(image: ImageMeta, raw: Mapping[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": image.id,
        "name": image.name,
        "status": image.status,
    }
    for key in ("visibility", "protected", "checksum"):
        data[key] = raw.get(key)
    data.update(
        {
            "owner": image.owner,
            "size": image.size,
            "virtual_size": image.virtual_size,
            "container_format": image.container_format,
            "disk_format": image.disk_format,
        }
    )
    for key in ("created_at", "updated_at", "tags", "direct_url"):
        data[key] = raw.get(key)
    data["min_ram"] = image.min_ram
    data["min_disk"] = image.min_disk
    properties = {
        k: jsonable(v)
        for k, v in image.properties.items()
        if k not in _HIDDEN_IMAGE_PROPERTIES and v is not None
    }
    data["properties"] = _payload("ImageMetaPropsPayload", properties)
    return _payload("ImageMetaPayload", data)


def _group_payload(group: InstanceGroup) -> dict[str, Any]:
    return _payload(
        "ServerGroupPayload",
        {
            "uuid": group.uuid,
            "name": group.name,
            "user_id": group.user_id,
            "project_id": group.project_id,
            "policies": group.policies,
            "members": list(group.members),
            "hosts": list(group.hosts),
            "policy": group.policy,
            # nova's InstanceGroup.rules: strings, as its DictOfStringsField keeps them
            "rules": {str(k): str(v) for k, v in group.rules.items()},
        },
    )


def _numa_payload(topology: Mapping[str, Any], instance_uuid: str | None) -> dict[str, Any]:
    cells = [_numa_cell_payload(cell) for cell in topology.get("cells") or []]
    return _payload(
        "InstanceNUMATopologyPayload",
        {
            "instance_uuid": topology.get("instance_uuid") or instance_uuid,
            "cells": cells,
            "emulator_threads_policy": topology.get("emulator_threads_policy"),
        },
    )


def _numa_cell_payload(cell: Mapping[str, Any]) -> dict[str, Any]:
    topology = cell.get("cpu_topology")
    if isinstance(topology, Mapping):
        topology = _payload(
            "VirtCPUTopologyPayload",
            {k: topology.get(k) for k in ("sockets", "cores", "threads")},
        )
    else:
        topology = None
    return _payload(
        "InstanceNUMACellPayload",
        {
            "id": cell.get("id"),
            "cpuset": sorted(cell.get("cpuset") or ()),
            "pcpuset": sorted(cell.get("pcpuset") or ()),
            "cpuset_reserved": (
                None if cell.get("cpuset_reserved") is None else sorted(cell["cpuset_reserved"])
            ),
            "memory": cell.get("memory"),
            "pagesize": cell.get("pagesize"),
            "cpu_topology": topology,
            "cpu_pinning_raw": cell.get("cpu_pinning_raw"),
            "cpu_policy": cell.get("cpu_policy"),
            "cpu_thread_policy": cell.get("cpu_thread_policy"),
        },
    )


def _pci_payload(requests: Sequence[PciRequest], instance_uuid: str | None) -> dict[str, Any]:
    return _payload(
        "InstancePCIRequestsPayload",
        {
            "instance_uuid": instance_uuid,
            "requests": [
                _payload(
                    "InstancePCIRequestPayload",
                    {
                        "count": request.count,
                        "spec": jsonable(request.as_data().get("spec")),
                        "alias_name": request.alias_name,
                        "request_id": request.request_id,
                        "numa_policy": request.numa_policy,
                    },
                )
                for request in requests
            ],
        },
    )


def _destination_payload(dest: Destination, raw: Any) -> dict[str, Any]:
    data: dict[str, Any] = {}
    if dest.host is not None:
        data["host"] = dest.host
    if dest.node is not None:
        data["node"] = dest.node
    if dest.cell_uuid is not None:
        cell = _data(_data(raw).get("cell"))
        data["cell"] = _payload(
            "CellMappingPayload",
            {
                "uuid": dest.cell_uuid,
                "name": cell.get("name"),
                "disabled": bool(cell.get("disabled", False)),
            },
        )
    data["aggregates"] = _strings(dest.aggregates)
    return _payload("DestinationPayload", data)


def _retry_payload(retry: SchedulerRetries) -> dict[str, Any]:
    return _payload(
        "SchedulerRetriesPayload",
        {"num_attempts": retry.num_attempts, "hosts": [node for _host, node in retry.hosts]},
    )


def _security_groups(raw: Any) -> list[str]:
    """The groups' identifiers as nova's payload has them: the uuid, else the name."""
    out = []
    for group in _data(raw).get("objects") or []:
        data = _data(group)
        identifier = data.get("uuid") or data.get("name")
        if identifier is not None:
            out.append(str(identifier))
    return out


# -- sending ---------------------------------------------------------------------------------


class SelectDestinationsNotifier:
    """Sends ``scheduler.select_destinations.start``/``.end`` through the legacy notifier,
    the versioned one, or both (either may be None: that format is not sent)."""

    def __init__(self, legacy: Any = None, versioned: Any = None):
        self.legacy = legacy
        self.versioned = versioned

    @staticmethod
    def _enabled(notifier: Any) -> bool:
        if notifier is None:
            return False
        is_enabled = getattr(notifier, "is_enabled", None)
        return bool(is_enabled()) if callable(is_enabled) else True

    def is_enabled(self) -> bool:
        """Whether anything will be sent (so that no payload is built otherwise)."""
        return self._enabled(self.legacy) or self._enabled(self.versioned)

    def notify(
        self,
        ctxt: Any,
        phase: str,
        spec: RequestSpec,
        raw: Mapping[str, Any] | None = None,
    ) -> None:
        """Send the ``phase`` (start, end) notification of ``spec`` in each enabled format.
        Never raises: a notification must not fail the scheduling it reports on."""
        event_type = f"{EVENT_PREFIX}.{phase}"
        if self._enabled(self.legacy):
            try:
                payload = {"request_spec": wire.legacy_request_spec_dict(spec)}
                self.legacy.info(ctxt, event_type, payload)
            except Exception:
                LOG.warning("Could not emit the legacy %s notification", event_type, exc_info=True)
        if self._enabled(self.versioned):
            try:
                self.versioned.info(ctxt, event_type, request_spec_payload(spec, raw))
            except Exception:
                LOG.warning(
                    "Could not emit the versioned %s notification", event_type, exc_info=True
                )


def for_format(notification_format: str, legacy: Any, versioned: Any) -> SelectDestinationsNotifier:
    """The notifier for ``[notifications] notification_format``: the legacy notifier for
    unversioned or both, the versioned one for versioned or both."""
    if notification_format not in FORMATS:
        raise ValueError(f"unknown notification_format {notification_format!r}")
    return SelectDestinationsNotifier(
        legacy=legacy if notification_format in ("unversioned", "both") else None,
        versioned=versioned if notification_format in ("versioned", "both") else None,
    )
