"""Encoding the reply: the Selection and SchedulerLimits primitives nova's scheduler
replies to ``select_destinations`` with ``return_objects=True``. The legacy reply
(``return_objects=False``) is in ``legacy``.
"""

from __future__ import annotations

import json
from typing import Any

from scheduler.objects import SchedulerLimits, Selection, jsonable
from scheduler.rpc.wire.values import is_primitive, primitive, type_name

_SELECTION_VERSION = "1.1"
_SCHEDULER_LIMITS_VERSION = "1.0"
_NUMA_LIMITS_VERSION = "1.1"
NETWORK_METADATA_VERSION = "1.0"


def numa_limits_primitive(value: Any) -> Any:
    """NUMATopologyLimits as nova expects it inside SchedulerLimits: an existing primitive
    is kept, an object with ``obj_to_primitive`` is asked, a plain dict is wrapped."""
    if value is None or is_primitive(value):
        return value
    to_primitive = getattr(value, "obj_to_primitive", None)
    if callable(to_primitive):
        return to_primitive()
    if isinstance(value, dict):
        data = dict(value)
        network = data.get("network_metadata")
        if isinstance(network, dict) and not is_primitive(network):
            data["network_metadata"] = primitive(
                "NetworkMetadata", NETWORK_METADATA_VERSION, jsonable(network)
            )
        return primitive("NUMATopologyLimits", _NUMA_LIMITS_VERSION, data)
    raise TypeError(f"cannot encode limits numa_topology of type {type_name(value)}")


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)


def limits_to_primitive(limits: SchedulerLimits | None) -> dict[str, Any]:
    """A SchedulerLimits 1.0 primitive with all four fields set (nulls included), as nova's
    ``SchedulerLimits.from_dict`` makes it."""
    if limits is None:
        limits = SchedulerLimits()
    data = {
        "numa_topology": numa_limits_primitive(limits.numa_topology),
        "vcpu": _float_or_none(limits.vcpu),
        "disk_gb": _float_or_none(limits.disk_gb),
        "memory_mb": _float_or_none(limits.memory_mb),
    }
    return primitive("SchedulerLimits", _SCHEDULER_LIMITS_VERSION, data)


def selection_to_primitive(sel: Selection) -> dict[str, Any]:
    """A Selection 1.1 primitive as nova's scheduler replies it.

    ``allocation_request`` is always a JSON string: nova's ``Selection.from_host_state``
    encodes whatever it has, so a selection without a claim (a rebuild check) carries the
    string ``"null"``, never a JSON null.
    """
    data = {
        "allocation_request": json.dumps(sel.allocation_request),
        "allocation_request_version": sel.allocation_request_version,
        "availability_zone": sel.availability_zone,
        "cell_uuid": sel.cell_uuid,
        "compute_node_uuid": sel.compute_node_uuid,
        "limits": limits_to_primitive(sel.limits),
        "nodename": sel.nodename,
        "service_host": sel.service_host,
    }
    return primitive("Selection", _SELECTION_VERSION, data)


def selections_to_primitive(selections: list[list[Selection]]) -> list[list[dict[str, Any]]]:
    """The ``return_objects=True`` reply: per instance, the chosen host then alternates."""
    return [[selection_to_primitive(sel) for sel in per_instance] for per_instance in selections]
