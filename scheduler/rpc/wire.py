"""The nova wire codec: nova object primitives (and legacy dicts) to and from our typed model.

A nova object travels as ``{"nova_object.name", "nova_object.namespace": "nova",
"nova_object.version", "nova_object.data": {set fields only}, "nova_object.changes": [...]}``;
sets arrive as lists and datetimes as ISO strings. This module only encodes and decodes:
the RPC manager calls it at the edge, and nothing past the manager sees a primitive.

Decoding is strict about the values the scheduler computes with (a flavor with its memory
and vcpus, integer counts, string host names, dict hints) and lenient about everything else
(unknown fields and newer minor versions are ignored). A bad payload raises
:class:`~scheduler.exceptions.InvalidRequest` naming the field and what was wrong.
"""

from __future__ import annotations

import json
import logging
import reprlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NoReturn

from oslo_utils import uuidutils

from scheduler.exceptions import InvalidRequest
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
    Selection,
    jsonable,
)
from scheduler.primitives import CHANGES, DATA, NAME, NAMESPACE, VERSION, unwrap

LOG = logging.getLogger(__name__)


# The major version we understand for each object; any minor version of it is accepted
# (fields added by newer minors are ignored). Objects not listed are read as plain data.
_MAJOR_VERSIONS = {
    "RequestSpec": 1,
    "Flavor": 1,
    "ImageMeta": 1,
    "ImageMetaProps": 1,
    "InstanceGroup": 1,
    "Destination": 1,
    "CellMapping": 1,
    "SchedulerRetries": 1,
    "ComputeNodeList": 1,
    "ComputeNode": 1,
    "SchedulerLimits": 1,
    "RequestGroup": 1,
    "RequestLevelParams": 1,
    "InstancePCIRequests": 1,
    "NetworkRequestList": 1,
    "Aggregate": 1,
    "AggregateList": 1,
    "InstanceList": 2,
    "Instance": 2,
}

_SELECTION_VERSION = "1.1"
_SCHEDULER_LIMITS_VERSION = "1.0"
_NUMA_LIMITS_VERSION = "1.1"
_NETWORK_METADATA_VERSION = "1.0"
_LIMIT_FIELDS = ("numa_topology", "vcpu", "disk_gb", "memory_mb")

_MISSING: Any = object()


# -- limits on input ---------------------------------------------------------------------------
# Checked while decoding (strings, counts, flavor numbers) or around it
# (:func:`check_request_size` before, :func:`check_instances` after), so a request past
# them is an InvalidRequest before the driver does any work.

# nova's column sizes: project_id, user_id, availability_zone, flavor name, flavor extra-spec
# keys and values are String(255); we use the same for every other short string.
MAX_STRING_LENGTH = 255
# nova's Text columns (a flavor's description) and comma-joined aggregate uuid lists
MAX_TEXT_LENGTH = 65535
MAX_EXTRA_SPECS = 1000
MAX_HINTS = 1000
MAX_HINT_VALUES = 1000
# JsonFilter's ``query`` hint is a JSON document, not a name
_LONG_HINTS = frozenset({"query"})
# nova's flavor API: integers up to the database's INT
MAX_FLAVOR_NUMBER = 2**31 - 1
MAX_DEPTH = 32
EXCERPT_CHARS = 200

_REPR = reprlib.Repr()
_REPR.maxstring = EXCERPT_CHARS
_REPR.maxother = EXCERPT_CHARS
_REPR.maxlevel = 3
_REPR.maxdict = _REPR.maxlist = _REPR.maxtuple = _REPR.maxset = _REPR.maxfrozenset = 6


def excerpt(value: Any, limit: int = EXCERPT_CHARS) -> str:
    """A repr of ``value`` of at most about ``limit`` characters, for messages and log lines:
    a longer value is cut and says how long it was (``'aaaa'... (20971520 chars)``).
    Never builds a copy of a large value."""
    if isinstance(value, str):
        if len(value) <= limit:
            return repr(value)
        return f"{value[:limit]!r}... ({len(value)} chars)"
    try:
        text = _REPR.repr(value)
    except Exception:  # a broken __repr__ must not turn a rejection into a crash
        text = f"<{_type_name(value)}>"
    if len(text) > limit:
        text = text[:limit] + "..."
    if isinstance(value, (dict, list, tuple, set, frozenset)) and "..." in text:
        text += f" ({len(value)} items)"
    return text


def _key(name: Any) -> str:
    """A dict key as it goes into a field path, bounded."""
    return excerpt(name, 60)


# -- checking values -------------------------------------------------------------------------


def _type_name(value: Any) -> str:
    return type(value).__name__


def _fail(where: str, problem: str) -> NoReturn:
    raise InvalidRequest(f"{where}: {problem}")


def _bad(where: str, expected: str, value: Any) -> NoReturn:
    _fail(where, f"expected {expected}, got {excerpt(value)} ({_type_name(value)})")


def _too_long(where: str, length: int, limit: int) -> NoReturn:
    _fail(where, f"is {length} characters long; the limit is {limit}")


def _too_many(where: str, count: int, limit: int, what: str) -> NoReturn:
    _fail(where, f"has {count} {what}; the limit is {limit}")


def _as_int(value: Any, where: str) -> int:
    # nova's IntegerField coerces with int(): numeric strings pass, words do not.
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and len(value) <= 64:
        try:
            return int(value.strip())
        except ValueError:
            pass
    _bad(where, "an integer", value)


def _as_float(value: Any, where: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and len(value) <= 64:
        try:
            return float(value)
        except ValueError:
            pass
    _bad(where, "a number", value)


def _as_bool(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    _bad(where, "a boolean", value)


def _as_str(value: Any, where: str, limit: int = MAX_STRING_LENGTH) -> str:
    # nova's StringField turns numbers into strings.
    if isinstance(value, str):
        if len(value) > limit:
            _too_long(where, len(value), limit)
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    _bad(where, "a string", value)


def _as_text(value: Any, where: str) -> str:
    return _as_str(value, where, MAX_TEXT_LENGTH)


def _as_str_list(
    value: Any, where: str, limit: int = MAX_STRING_LENGTH, max_items: int | None = None
) -> list[str]:
    if isinstance(value, (set, frozenset)):
        # in-process legacy callers hand over real sets
        value = sorted(value, key=str)
    elif not isinstance(value, (list, tuple)):
        _bad(where, "a list of strings", value)
    if max_items is not None and len(value) > max_items:
        _too_many(where, len(value), max_items, "items")
    return [_as_str(item, f"{where}[{i}]", limit) for i, item in enumerate(value)]


def _as_text_list(value: Any, where: str) -> list[str]:
    # nova's Destination.aggregates and RequestGroup.aggregates: comma-joined uuid lists
    return _as_str_list(value, where, MAX_TEXT_LENGTH)


def _as_dict(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        _bad(where, "a dict", value)
    return value


def _field(
    data: Mapping[str, Any],
    key: str,
    where: str,
    convert: Callable[[Any, str], Any],
    default: Any = None,
) -> Any:
    """``data[key]`` converted, or ``default`` when unset or null."""
    value = data.get(key)
    if value is None:
        return default
    return convert(value, f"{where}.{key}")


def _required(
    data: Mapping[str, Any], key: str, where: str, convert: Callable[[Any, str], Any]
) -> Any:
    value = data.get(key)
    if value is None:
        _fail(
            f"{where}.{key}", "is required but missing" if key not in data else "must not be null"
        )
    return convert(value, f"{where}.{key}")


def _str_dict(value: Any, where: str, max_items: int | None = None) -> dict[str, str]:
    value = _as_dict(value, where)
    if max_items is not None and len(value) > max_items:
        _too_many(where, len(value), max_items, "keys")
    out = {}
    for k, v in value.items():
        out[_as_str(k, f"{where} key {_key(k)}")] = _as_str(v, f"{where}[{_key(k)}]")
    return out


def _extra_specs(value: Any, where: str) -> dict[str, str]:
    return _str_dict(value, where, MAX_EXTRA_SPECS)


def _flavor_count(minimum: int) -> Callable[[Any, str], int]:
    """An integer flavor field: at least ``minimum`` (nova's flavor API: vcpus and memory_mb
    at least 1, disks and swap at least 0) and at most the database's INT."""

    def convert(value: Any, where: str) -> int:
        number = _as_int(value, where)
        if number < minimum:
            _fail(where, f"must be at least {minimum}, got {number}")
        if number > MAX_FLAVOR_NUMBER:
            _fail(where, f"must be at most {MAX_FLAVOR_NUMBER}, got {number}")
        return number

    return convert


_positive = _flavor_count(1)
_non_negative = _flavor_count(0)


# -- nova object envelopes -------------------------------------------------------------------


def is_primitive(value: Any) -> bool:
    """Whether ``value`` is a nova object primitive (has a name and a data dict)."""
    return isinstance(value, dict) and NAME in value and DATA in value


def _object_data(prim: Any, names: str | tuple[str, ...], where: str) -> dict[str, Any]:
    """The ``nova_object.data`` of ``prim`` after checking it is one of the named objects."""
    if isinstance(names, str):
        names = (names,)
    expected = " or ".join(names)
    if not isinstance(prim, dict):
        _bad(where, f"a {expected} object primitive", prim)
    name = prim.get(NAME)
    if name is None:
        _fail(where, f"expected a {expected} object primitive, got a dict without {NAME!r}")
    if name not in names:
        _fail(where, f"expected a {expected} object primitive, got {excerpt(name)}")
    namespace = prim.get(NAMESPACE, "nova")
    if namespace != "nova":
        _fail(where, f"expected the 'nova' object namespace, got {excerpt(namespace)}")
    version = prim.get(VERSION)
    major = _MAJOR_VERSIONS.get(name)
    if version is not None and major is not None:
        try:
            got_major = int(str(version)[:16].split(".", 1)[0])
        except ValueError:
            _fail(where, f"unparsable {name} version {excerpt(version)}")
        if got_major != major:
            _fail(where, f"{name} version {str(version)[:40]} is not supported (need {major}.x)")
    data = prim.get(DATA)
    if not isinstance(data, dict):
        _bad(f"{where}.{DATA}", "a dict", data)
    return data


def _list_objects(prim: Any, name: str, where: str) -> list[Any]:
    data = _object_data(prim, name, where)
    objects = data.get("objects") or []
    if not isinstance(objects, list):
        _bad(f"{where}.objects", "a list", objects)
    return objects


def _primitive(name: str, version: str, data: dict[str, Any]) -> dict[str, Any]:
    return {
        NAME: name,
        NAMESPACE: "nova",
        VERSION: version,
        DATA: data,
        CHANGES: list(data),
    }


# -- decoding the request --------------------------------------------------------------------


def flavor_from_primitive(prim: Any, where: str = "Flavor") -> Flavor:
    """A :class:`Flavor` from a Flavor 1.x primitive."""
    return _flavor_from_data(_object_data(prim, "Flavor", where), where)


def _flavor_from_data(data: Mapping[str, Any], where: str) -> Flavor:
    vcpu_weight = data.get("vcpu_weight", 0)
    return Flavor(
        memory_mb=_required(data, "memory_mb", where, _positive),
        vcpus=_required(data, "vcpus", where, _positive),
        root_gb=_field(data, "root_gb", where, _non_negative, 0),
        ephemeral_gb=_field(data, "ephemeral_gb", where, _non_negative, 0),
        swap=_field(data, "swap", where, _non_negative, 0),
        name=_field(data, "name", where, _as_str, ""),
        flavorid=_field(data, "flavorid", where, _as_str, ""),
        id=_field(data, "id", where, _as_int),
        extra_specs=_field(data, "extra_specs", where, _extra_specs, {}),
        rxtx_factor=_field(data, "rxtx_factor", where, _as_float, 1.0),
        vcpu_weight=None if vcpu_weight is None else _as_int(vcpu_weight, f"{where}.vcpu_weight"),
        disabled=_field(data, "disabled", where, _as_bool, False),
        is_public=_field(data, "is_public", where, _as_bool, True),
        description=_field(data, "description", where, _as_text),
    )


def _flavor_from_any(value: Any, where: str) -> Flavor:
    if is_primitive(value):
        return flavor_from_primitive(value, where)
    return _flavor_from_data(_as_dict(value, where), where)


_IMAGE_SCALARS: tuple[tuple[str, Callable[[Any, str], Any]], ...] = (
    ("id", _as_str),
    ("name", _as_str),
    ("status", _as_str),
    ("disk_format", _as_str),
    ("container_format", _as_str),
    ("size", _as_int),
    ("virtual_size", _as_int),
    ("min_disk", _as_int),
    ("min_ram", _as_int),
    ("owner", _as_str),
)


def image_meta_from_primitive(prim: Any, where: str = "ImageMeta") -> ImageMeta:
    """An :class:`ImageMeta` from an ImageMeta 1.x primitive; ``properties`` keeps the
    ImageMetaProps fields that were set, under nova's names and with their values."""
    data = _object_data(prim, "ImageMeta", where)
    image = _image_scalars(data, where)
    props = data.get("properties")
    if props is not None:
        props_data = _object_data(props, "ImageMetaProps", f"{where}.properties")
        image.properties = unwrap(props_data)
    return image


def _image_scalars(data: Mapping[str, Any], where: str) -> ImageMeta:
    image = ImageMeta()
    for key, convert in _IMAGE_SCALARS:
        value = data.get(key)
        if value is not None:
            setattr(image, key, convert(value, f"{where}.{key}"))
    return image


def instance_group_from_primitive(prim: Any, where: str = "InstanceGroup") -> InstanceGroup:
    """An :class:`InstanceGroup` from an InstanceGroup 1.x primitive (``policy``, or the
    first of the old ``policies``; ``_rules`` with ``max_server_per_host`` as an int)."""
    data = _object_data(prim, "InstanceGroup", where)
    policy = _field(data, "policy", where, _as_str)
    if policy is None:
        policies = _field(data, "policies", where, _as_str_list, [])
        policy = policies[0] if policies else None
    return InstanceGroup(
        uuid=_field(data, "uuid", where, _as_str, ""),
        policy=policy,
        name=_field(data, "name", where, _as_str),
        user_id=_field(data, "user_id", where, _as_str),
        project_id=_field(data, "project_id", where, _as_str),
        rules=_group_rules(data.get("_rules"), f"{where}._rules"),
        members=_field(data, "members", where, _as_str_list, []),
        hosts=_field(data, "hosts", where, _as_str_list, []),
    )


def _group_rules(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    rules: dict[str, Any] = _str_dict(value, where)
    if "max_server_per_host" in rules:
        rules["max_server_per_host"] = _as_int(
            rules["max_server_per_host"], f"{where}['max_server_per_host']"
        )
    return rules


def destination_from_primitive(prim: Any, where: str = "Destination") -> Destination:
    """A :class:`Destination` from a Destination 1.x primitive (``cell`` → ``cell_uuid``)."""
    data = _object_data(prim, "Destination", where)
    cell_uuid = None
    cell = data.get("cell")
    if cell is not None:
        cell_data = _object_data(cell, "CellMapping", f"{where}.cell")
        cell_uuid = _field(cell_data, "uuid", f"{where}.cell", _as_str)
    return Destination(
        host=_field(data, "host", where, _as_str),
        node=_field(data, "node", where, _as_str),
        cell_uuid=cell_uuid,
        aggregates=_field(data, "aggregates", where, _as_text_list),
        forbidden_aggregates=set(_field(data, "forbidden_aggregates", where, _as_str_list, ())),
        allow_cross_cell_move=_field(data, "allow_cross_cell_move", where, _as_bool, False),
    )


def _retry_from_primitive(prim: Any, where: str) -> SchedulerRetries:
    data = _object_data(prim, "SchedulerRetries", where)
    hosts: list[tuple[str, str]] = []
    if data.get("hosts") is not None:
        for i, node in enumerate(_list_objects(data["hosts"], "ComputeNodeList", f"{where}.hosts")):
            node_where = f"{where}.hosts[{i}]"
            node_data = _object_data(node, "ComputeNode", node_where)
            hosts.append(
                (
                    _field(node_data, "host", node_where, _as_str, ""),
                    _field(node_data, "hypervisor_hostname", node_where, _as_str, ""),
                )
            )
    return SchedulerRetries(
        num_attempts=_field(data, "num_attempts", where, _as_int, 0), hosts=hosts
    )


def _limits_from_data(data: Mapping[str, Any], where: str) -> SchedulerLimits:
    # numa_topology stays what it was (a NUMATopologyLimits primitive): the scheduler only
    # passes it through, and re-encoding it must give nova back the same object.
    return SchedulerLimits(
        numa_topology=data.get("numa_topology"),
        vcpu=_field(data, "vcpu", where, _as_float),
        disk_gb=_field(data, "disk_gb", where, _as_float),
        memory_mb=_field(data, "memory_mb", where, _as_float),
    )


def _limits_from_primitive(prim: Any, where: str) -> SchedulerLimits:
    return _limits_from_data(_object_data(prim, "SchedulerLimits", where), where)


def _resources(value: Any, where: str) -> dict[str, int]:
    value = _as_dict(value, where)
    return {
        _as_str(rc, f"{where} key {_key(rc)}"): _as_int(amount, f"{where}[{_key(rc)}]")
        for rc, amount in value.items()
    }


def _list_of_str_lists(value: Any, where: str) -> list[list[str]]:
    if not isinstance(value, list):
        _bad(where, "a list of lists of strings", value)
    return [_as_text_list(item, f"{where}[{i}]") for i, item in enumerate(value)]


def _request_group_from_primitive(prim: Any, where: str) -> RequestGroup:
    data = _object_data(prim, "RequestGroup", where)
    return RequestGroup(
        requester_id=_field(data, "requester_id", where, _as_str),
        use_same_provider=_field(data, "use_same_provider", where, _as_bool, True),
        resources=_field(data, "resources", where, _resources, {}),
        required_traits=set(_field(data, "required_traits", where, _as_str_list, ())),
        forbidden_traits=set(_field(data, "forbidden_traits", where, _as_str_list, ())),
        aggregates=_field(data, "aggregates", where, _list_of_str_lists, []),
        forbidden_aggregates=set(_field(data, "forbidden_aggregates", where, _as_str_list, ())),
        in_tree=_field(data, "in_tree", where, _as_str),
        provider_uuids=_field(data, "provider_uuids", where, _as_str_list, []),
    )


def _request_level_params_from_primitive(prim: Any, where: str) -> RequestLevelParams:
    data = _object_data(prim, "RequestLevelParams", where)
    return RequestLevelParams(
        root_required=set(_field(data, "root_required", where, _as_str_list, ())),
        root_forbidden=set(_field(data, "root_forbidden", where, _as_str_list, ())),
        same_subtree=_field(data, "same_subtree", where, _list_of_str_lists, []),
    )


def _scheduler_hints(value: Any, where: str) -> dict[str, list[Any]]:
    # nova's DictOfListOfStringsField; a bare value is wrapped in a list as nova's
    # from_primitives does for legacy hints.
    value = _as_dict(value, where)
    if len(value) > MAX_HINTS:
        _too_many(where, len(value), MAX_HINTS, "hints")
    hints: dict[str, list[Any]] = {}
    for name, hint in value.items():
        hint_where = f"{where}[{_key(name)}]"
        name = _as_str(name, f"{where} key {_key(name)}")
        limit = MAX_TEXT_LENGTH if name in _LONG_HINTS else MAX_STRING_LENGTH
        if isinstance(hint, (list, tuple)):
            hints[name] = _as_str_list(hint, hint_where, limit, MAX_HINT_VALUES)
        else:
            hints[name] = [_as_str(hint, hint_where, limit)]
    return hints


def _pci_requests(value: Any, where: str) -> list[dict[str, Any]]:
    if is_primitive(value):
        requests = _object_data(value, "InstancePCIRequests", where).get("requests") or []
    elif isinstance(value, dict):
        requests = value.get("requests") or []
    else:
        requests = value
    if not isinstance(requests, list):
        _bad(f"{where}.requests", "a list", requests)
    out = []
    for i, request in enumerate(requests):
        request = unwrap(request)
        if not isinstance(request, dict):
            _bad(f"{where}.requests[{i}]", "an InstancePCIRequest", request)
        out.append(request)
    return out


def _requested_networks(value: Any, where: str) -> list[dict[str, Any]]:
    objects = _list_objects(value, "NetworkRequestList", where)
    out = []
    for i, request in enumerate(objects):
        request = unwrap(request)
        if not isinstance(request, dict):
            _bad(f"{where}.objects[{i}]", "a NetworkRequest", request)
        out.append(request)
    return out


def _network_metadata(value: Any, where: str) -> dict[str, Any]:
    data = unwrap(value)
    if not isinstance(data, dict):
        _bad(where, "a NetworkMetadata", value)
    physnets = data.get("physnets") or []
    if not isinstance(physnets, list | tuple) or not all(isinstance(p, str) for p in physnets):
        _bad(f"{where}.physnets", "a list of strings", physnets)
    return {"physnets": sorted(physnets), "tunneled": _as_bool(data.get("tunneled", False), where)}


def _numa_topology(value: Any, where: str) -> dict[str, Any]:
    topology = unwrap(value)
    if not isinstance(topology, dict):
        _bad(where, "an InstanceNUMATopology", value)
    return topology


def _num_instances(value: Any, where: str) -> int:
    count = _as_int(value, where)
    if count < 1:
        _fail(where, f"must be at least 1, got {count}")
    return count


def request_spec_from_primitive(prim: dict[str, Any]) -> RequestSpec:
    """A :class:`RequestSpec` from a RequestSpec 1.x primitive (RPC 4.3 and later)."""
    where = "RequestSpec"
    data = _object_data(prim, "RequestSpec", where)
    if data.get("flavor") is None:
        _fail(f"{where}.flavor", "is required but missing")
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
            _bad(where, "a list", value)
        return [convert(item, f"{where}[{i}]") for i, item in enumerate(value)]

    return decode


_SPEC_FIELDS: dict[str, Callable[[RequestSpec, Any, str], None]] = {
    "id": _setter("id", _as_int),
    "num_instances": _setter("num_instances", _num_instances),
    "project_id": _setter("project_id", _as_str),
    "user_id": _setter("user_id", _as_str),
    "availability_zone": _setter("availability_zone", _as_str),
    "instance_uuid": _setter("instance_uuid", _as_str),
    "is_bfv": _setter("is_bfv", _as_bool),
    "image": _setter("image", image_meta_from_primitive),
    "instance_group": _setter("instance_group", instance_group_from_primitive),
    "scheduler_hints": _setter("scheduler_hints", _scheduler_hints),
    "ignore_hosts": _setter("ignore_hosts", _as_str_list),
    "force_hosts": _setter("force_hosts", _as_str_list),
    "force_nodes": _setter("force_nodes", _as_str_list),
    "requested_destination": _setter("requested_destination", destination_from_primitive),
    "retry": _setter("retry", _retry_from_primitive),
    "limits": _setter("limits", _limits_from_primitive),
    "requested_resources": _setter("requested_resources", _list_of(_request_group_from_primitive)),
    "request_level_params": _setter("request_level_params", _request_level_params_from_primitive),
    "numa_topology": _setter("numa_topology", _numa_topology),
    "pci_requests": _setter("pci_requests", _pci_requests),
    "requested_networks": _setter("requested_networks", _requested_networks),
    "network_metadata": _setter("network_metadata", _network_metadata),
}


# -- limits on the whole request -------------------------------------------------------------

# what a number, true, false or null costs in the size count (its JSON text is about as long)
_SCALAR_BYTES = 8


def _path_text(node: tuple[Any, ...] | None) -> str:
    parts: list[str] = []
    while node is not None:
        node, step = node
        parts.append(step)
    text = "".join(reversed(parts)) or "request"
    if len(text) > 400:  # deep paths of long keys: the start and the field itself
        text = f"{text[:150]}...{text[-200:]}"
    return text


def check_request_size(args: Mapping[str, Any], max_bytes: int, max_depth: int = MAX_DEPTH) -> None:
    """Refuse a request whose arguments (as oslo.messaging decoded them) are larger than
    ``max_bytes`` (``[scheduler] max_request_bytes``) or nested deeper than ``max_depth``.

    The size is about the length of the JSON text: string lengths plus a few bytes per
    item. The walk stops as soon as the limit is passed, so a huge request costs no more
    than ``max_bytes`` steps and no copy is made. The message names the field at which the
    limit was passed.
    """
    total = 0
    # (value, path node, depth); a path node is (parent node, step) and is only made into
    # text when the request is refused
    stack: list[tuple[Any, Any, int]] = [
        (value, (None, str(name)), 1) for name, value in args.items()
    ]
    while stack:
        value, node, depth = stack.pop()
        if isinstance(value, str):
            total += len(value) + 2
        elif isinstance(value, (dict, list, tuple, set, frozenset)):
            if depth > max_depth:
                _fail(_path_text(node), f"is nested deeper than {max_depth} levels")
            total += 2
            if isinstance(value, dict):
                for key, item in value.items():
                    total += (len(key) if isinstance(key, str) else _SCALAR_BYTES) + 4
                    if total > max_bytes:
                        break
                    if key == DATA:  # paths name fields as the decoder does
                        step = ""
                    elif isinstance(key, str) and len(key) <= 60 and key.isidentifier():
                        step = f".{key}"
                    else:
                        step = None
                    stack.append(
                        (item, (node, f"[{_key(key)}]" if step is None else step), depth + 1)
                    )
            else:
                for i, item in enumerate(value):
                    total += 1
                    if total > max_bytes:
                        break
                    stack.append((item, (node, f"[{i}]"), depth + 1))
        else:
            total += _SCALAR_BYTES
        if total > max_bytes:
            _fail(
                _path_text(node),
                f"the request is larger than {max_bytes} bytes "
                "([scheduler] max_request_bytes) at this field",
            )


def check_instances(
    spec: RequestSpec,
    instance_uuids: Any,
    max_instances: int,
) -> list[str] | None:
    """The instance uuids of a ``select_destinations`` call, checked against the decoded
    spec: ``num_instances`` at most ``max_instances``
    (``[scheduler] max_instances_per_request``); ``instance_uuids`` null or a list of at
    most ``max_instances`` distinct UUID strings.

    ``num_instances`` and the length of ``instance_uuids`` may differ, as nova allows: the
    driver schedules one instance per uuid when uuids are given (a move sends one uuid, and
    its RequestSpec may keep the ``num_instances`` of the boot that made it).
    """
    if spec.num_instances > max_instances:
        _fail(
            "RequestSpec.num_instances",
            f"is {spec.num_instances}; the limit is {max_instances} "
            "([scheduler] max_instances_per_request)",
        )
    if instance_uuids is None:
        return None
    where = "instance_uuids"
    if not isinstance(instance_uuids, (list, tuple)):
        _bad(where, "a list of instance UUIDs or null", instance_uuids)
    if len(instance_uuids) > max_instances:
        _fail(
            where,
            f"has {len(instance_uuids)} items; the limit is {max_instances} "
            "([scheduler] max_instances_per_request)",
        )
    seen: dict[str, int] = {}
    for i, instance_uuid in enumerate(instance_uuids):
        item_where = f"{where}[{i}]"
        if not isinstance(instance_uuid, str):
            _bad(item_where, "an instance UUID string", instance_uuid)
        if len(instance_uuid) > MAX_STRING_LENGTH:
            _too_long(item_where, len(instance_uuid), MAX_STRING_LENGTH)
        if not uuidutils.is_uuid_like(instance_uuid):
            _bad(item_where, "an instance UUID", instance_uuid)
        first = seen.setdefault(instance_uuid, i)
        if first != i:
            _fail(item_where, f"repeats {where}[{first}] ({excerpt(instance_uuid)})")
    return list(instance_uuids)


# -- the legacy dicts of RPC 4.0-4.2 ---------------------------------------------------------

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
    data = _as_dict(value, where)
    if not data:
        return None
    image = _image_scalars(data, where)
    props = data.get("properties")
    if props is None:
        return image
    if is_primitive(props):
        image.properties = unwrap(_object_data(props, "ImageMetaProps", f"{where}.properties"))
        return image
    properties: dict[str, Any] = {}
    traits_required: list[str] = []
    for key, prop in _as_dict(props, f"{where}.properties").items():
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
        return _retry_from_primitive(value, where)
    data = _as_dict(value, where)
    if "num_attempts" not in data:
        return None
    hosts: list[tuple[str, str]] = []
    entries = data.get("hosts") or []
    if not isinstance(entries, list):
        _bad(f"{where}.hosts", "a list of [host, node] pairs", entries)
    for i, entry in enumerate(entries):
        if not isinstance(entry, (list, tuple)) or len(entry) != 2:
            _bad(f"{where}.hosts[{i}]", "a [host, node] pair", entry)
        hosts.append(
            (
                _as_str(entry[0], f"{where}.hosts[{i}][0]"),
                _as_str(entry[1], f"{where}.hosts[{i}][1]"),
            )
        )
    return SchedulerRetries(
        num_attempts=_as_int(data["num_attempts"], f"{where}.num_attempts"), hosts=hosts
    )


def _legacy_limits(value: Any, where: str) -> SchedulerLimits | None:
    if not value:
        return None
    if is_primitive(value):
        return _limits_from_primitive(value, where)
    return _limits_from_data(_as_dict(value, where), where)


def _legacy_group(filter_properties: Mapping[str, Any], where: str) -> InstanceGroup | None:
    group = filter_properties.get("instance_group")
    if group:
        return instance_group_from_primitive(group, f"{where}.instance_group")
    if filter_properties.get("group_updated") is not True:
        return None
    policies = _field(filter_properties, "group_policies", where, _as_str_list, [])
    return InstanceGroup(
        uuid=_field(filter_properties, "group_uuid", where, _as_str, ""),
        policy=policies[0] if policies else None,
        hosts=_field(filter_properties, "group_hosts", where, _as_str_list, []),
        members=_field(filter_properties, "group_members", where, _as_str_list, []),
    )


def _legacy_destination(value: Any, where: str) -> Destination | None:
    if value is None:
        return None
    if is_primitive(value):
        return destination_from_primitive(value, where)
    return destination_from_primitive(
        _primitive("Destination", "1.4", _as_dict(value, where)), where
    )


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
    request_spec = _as_dict(request_spec, where)
    filter_properties = _as_dict(filter_properties or {}, "filter_properties")
    flavor_value = request_spec.get("instance_type")
    flavor_where = f"{where}.instance_type"
    if flavor_value is None:
        flavor_value = filter_properties.get("instance_type")
        flavor_where = "filter_properties.instance_type"
    if flavor_value is None:
        _fail(flavor_where, "is required but missing")
    spec = RequestSpec(flavor=_flavor_from_any(flavor_value, flavor_where))
    spec.num_instances = _field(request_spec, "num_instances", where, _num_instances, 1)
    spec.image = _legacy_image(request_spec.get("image"), f"{where}.image")

    instance = request_spec.get("instance_properties")
    if instance is not None:
        inst_where = f"{where}.instance_properties"
        if is_primitive(instance):
            instance = _object_data(instance, "Instance", inst_where)
        instance = _as_dict(instance, inst_where)
        spec.instance_uuid = _field(instance, "uuid", inst_where, _as_str)
        spec.project_id = _field(instance, "project_id", inst_where, _as_str)
        spec.user_id = _field(instance, "user_id", inst_where, _as_str)
        spec.availability_zone = _field(instance, "availability_zone", inst_where, _as_str)
        spec.numa_topology = _field(instance, "numa_topology", inst_where, _numa_topology)
        spec.pci_requests = _field(instance, "pci_requests", inst_where, _pci_requests, [])

    fp = "filter_properties"
    spec.ignore_hosts = _field(filter_properties, "ignore_hosts", fp, _as_str_list)
    spec.force_hosts = _field(filter_properties, "force_hosts", fp, _as_str_list)
    spec.force_nodes = _field(filter_properties, "force_nodes", fp, _as_str_list)
    spec.retry = _legacy_retry(filter_properties.get("retry"), f"{fp}.retry")
    spec.limits = _legacy_limits(filter_properties.get("limits"), f"{fp}.limits")
    spec.instance_group = _legacy_group(filter_properties, fp)
    spec.scheduler_hints = _field(filter_properties, "scheduler_hints", fp, _scheduler_hints, {})
    spec.requested_destination = _legacy_destination(
        filter_properties.get("requested_destination"), f"{fp}.requested_destination"
    )
    return spec


def _flavor_dict(flavor: Flavor) -> dict[str, Any]:
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


def _image_dict(image: ImageMeta) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, _convert in _IMAGE_SCALARS:
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
        "numa_topology": jsonable(spec.numa_topology),
        "pci_requests": (
            {"instance_uuid": spec.instance_uuid, "requests": jsonable(spec.pci_requests)}
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
        "image": _image_dict(spec.image) if spec.image is not None else {},
        "instance_properties": instance_properties,
        "instance_type": _flavor_dict(flavor),
        "num_instances": spec.num_instances,
    }


# -- encoding the reply ----------------------------------------------------------------------


def _numa_limits_primitive(value: Any) -> Any:
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
            data["network_metadata"] = _primitive(
                "NetworkMetadata", _NETWORK_METADATA_VERSION, jsonable(network)
            )
        return _primitive("NUMATopologyLimits", _NUMA_LIMITS_VERSION, data)
    raise TypeError(f"cannot encode limits numa_topology of type {_type_name(value)}")


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)


def limits_to_primitive(limits: SchedulerLimits | None) -> dict[str, Any]:
    """A SchedulerLimits 1.0 primitive with all four fields set (nulls included), as nova's
    ``SchedulerLimits.from_dict`` makes it."""
    if limits is None:
        limits = SchedulerLimits()
    data = {
        "numa_topology": _numa_limits_primitive(limits.numa_topology),
        "vcpu": _float_or_none(limits.vcpu),
        "disk_gb": _float_or_none(limits.disk_gb),
        "memory_mb": _float_or_none(limits.memory_mb),
    }
    return _primitive("SchedulerLimits", _SCHEDULER_LIMITS_VERSION, data)


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
    return _primitive("Selection", _SELECTION_VERSION, data)


def selections_to_primitive(selections: list[list[Selection]]) -> list[list[dict[str, Any]]]:
    """The ``return_objects=True`` reply: per instance, the chosen host then alternates."""
    return [[selection_to_primitive(sel) for sel in per_instance] for per_instance in selections]


def selection_to_legacy(sel: Selection) -> dict[str, Any]:
    """One ``{host, nodename, limits}`` dict; a NUMA limit goes as its primitive."""
    legacy = sel.to_legacy_dict()
    limits = legacy["limits"]
    if limits.get("numa_topology") is not None:
        limits["numa_topology"] = _numa_limits_primitive(limits["numa_topology"])
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


# -- the conductor's side: encoding a request, decoding a reply -------------------------------

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
    "NetworkMetadata": _NETWORK_METADATA_VERSION,
}


def _sent(name: str, data: dict[str, Any]) -> dict[str, Any]:
    return _primitive(name, _SENT_VERSIONS[name], data)


def _flavor_primitive(flavor: Flavor) -> dict[str, Any]:
    return _sent("Flavor", _flavor_dict(flavor))


def _image_primitive(image: ImageMeta) -> dict[str, Any]:
    data = _image_dict(image)
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


def _numa_topology_primitive(topology: dict[str, Any]) -> dict[str, Any]:
    # Our model keeps the topology as plain data; the envelopes are put back the way nova
    # nests them (cells are InstanceNUMACell objects).
    data = jsonable(topology)
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
                        _sent("InstancePCIRequest", jsonable(r)) for r in spec.pci_requests
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
    data = _object_data(prim, "Selection", where)
    allocation_request = data.get("allocation_request")
    if isinstance(allocation_request, str):
        try:
            allocation_request = json.loads(allocation_request)
        except ValueError:
            _fail(f"{where}.allocation_request", "is not valid JSON")
    if allocation_request is not None and not isinstance(allocation_request, dict):
        _bad(f"{where}.allocation_request", "a JSON object", allocation_request)
    limits = data.get("limits")
    return Selection(
        compute_node_uuid=_required(data, "compute_node_uuid", where, _as_str),
        service_host=_required(data, "service_host", where, _as_str),
        nodename=_required(data, "nodename", where, _as_str),
        cell_uuid=_required(data, "cell_uuid", where, _as_str),
        allocation_request=allocation_request,
        allocation_request_version=_field(data, "allocation_request_version", where, _as_str),
        limits=None if limits is None else _limits_from_primitive(limits, f"{where}.limits"),
        availability_zone=_field(data, "availability_zone", where, _as_str),
    )


def selections_from_primitive(prim: Any) -> list[list[Selection]]:
    """The ``return_objects=True`` reply decoded: per instance, chosen host then alternates."""
    if not isinstance(prim, list):
        _bad("selections", "a list of lists of Selection primitives", prim)
    out = []
    for i, per_instance in enumerate(prim):
        if not isinstance(per_instance, list):
            _bad(f"selections[{i}]", "a list of Selection primitives", per_instance)
        out.append([selection_from_primitive(sel) for sel in per_instance])
    return out


# -- other RPCs --------------------------------------------------------------------------------


def _aggregate_from_data(data: Mapping[str, Any], where: str) -> Aggregate:
    return Aggregate(
        id=_required(data, "id", where, _as_int),
        uuid=_field(data, "uuid", where, _as_str, ""),
        name=_field(data, "name", where, _as_str, ""),
        hosts=set(_field(data, "hosts", where, _as_str_list, ())),
        metadata=_field(data, "metadata", where, _str_dict, {}),
    )


def aggregate_from_primitive(prim: Any) -> Aggregate:
    """An :class:`Aggregate` from an Aggregate 1.x primitive."""
    return _aggregate_from_data(_object_data(prim, "Aggregate", "Aggregate"), "Aggregate")


def aggregates_from_primitive(prim: Any) -> list[Aggregate]:
    """The aggregates of an ``update_aggregates``/``delete_aggregate`` cast.

    nova sends three forms: nova-api's aggregate API casts a plain list of Aggregate
    primitives (``update_aggregates(ctxt, aggregates=[aggregate])``), nova's RPC API
    documents an AggregateList, and ``delete_aggregate`` sends one Aggregate.
    """
    if isinstance(prim, list):
        items, where = prim, "aggregates"
    elif isinstance(prim, dict) and prim.get(NAME) == "AggregateList":
        items, where = _list_objects(prim, "AggregateList", "AggregateList"), "AggregateList"
    else:
        return [aggregate_from_primitive(prim)]
    return [
        _aggregate_from_data(_object_data(item, "Aggregate", f"{where}[{i}]"), f"{where}[{i}]")
        for i, item in enumerate(items)
    ]


def instance_uuids_from_instance_list(prim: Any) -> list[str]:
    """The instance uuids of an InstanceList (or a single Instance) primitive."""
    if isinstance(prim, dict) and prim.get(NAME) == "Instance":
        objects = [prim]
    else:
        objects = _list_objects(prim, "InstanceList", "InstanceList")
    uuids = []
    for i, item in enumerate(objects):
        where = f"InstanceList[{i}]"
        uuids.append(_required(_object_data(item, "Instance", where), "uuid", where, _as_str))
    return uuids


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
