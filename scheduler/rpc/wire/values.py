"""Checking values, and nova's object envelopes: the helpers the rest of the codec uses.

Every check takes the value and ``where``, the field's path for the message (``as_int``,
``as_str``, ``as_str_list``, ``as_dict``; ``field`` and ``required`` read a key of a data
dict through one of them), and a bad value raises
:class:`~scheduler.exceptions.InvalidRequest` naming the field and what was wrong (``fail``,
``bad``); ``excerpt`` quotes a value in such a message, bounded. ``object_data`` opens a
nova object primitive after checking its name, namespace and major version; ``primitive``
makes one.
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from scheduler.exceptions import InvalidRequest
from scheduler.primitives import CHANGES, DATA, NAME, NAMESPACE, VERSION

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


# -- limits on input ---------------------------------------------------------------------------
# The ones the checks below apply themselves; limits.py holds the others and re-exports these.

# nova's column sizes: project_id, user_id, availability_zone, flavor name, flavor extra-spec
# keys and values are String(255); we use the same for every other short string.
MAX_STRING_LENGTH = 255
# nova's Text columns (a flavor's description) and comma-joined aggregate uuid lists
MAX_TEXT_LENGTH = 65535
# how much of a value a message or a log line quotes (excerpt)
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
        text = f"<{type_name(value)}>"
    if len(text) > limit:
        text = text[:limit] + "..."
    if isinstance(value, (dict, list, tuple, set, frozenset)) and "..." in text:
        text += f" ({len(value)} items)"
    return text


def key_excerpt(name: Any) -> str:
    """A dict key as it goes into a field path, bounded."""
    return excerpt(name, 60)


# -- checking values -------------------------------------------------------------------------


def type_name(value: Any) -> str:
    return type(value).__name__


def fail(where: str, problem: str) -> NoReturn:
    raise InvalidRequest(f"{where}: {problem}")


def bad(where: str, expected: str, value: Any) -> NoReturn:
    fail(where, f"expected {expected}, got {excerpt(value)} ({type_name(value)})")


def too_long(where: str, length: int, limit: int) -> NoReturn:
    fail(where, f"is {length} characters long; the limit is {limit}")


def too_many(where: str, count: int, limit: int, what: str) -> NoReturn:
    fail(where, f"has {count} {what}; the limit is {limit}")


def as_int(value: Any, where: str) -> int:
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
    bad(where, "an integer", value)


def as_float(value: Any, where: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and len(value) <= 64:
        try:
            return float(value)
        except ValueError:
            pass
    bad(where, "a number", value)


def as_bool(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    bad(where, "a boolean", value)


def as_str(value: Any, where: str, limit: int = MAX_STRING_LENGTH) -> str:
    # nova's StringField turns numbers into strings.
    if isinstance(value, str):
        if len(value) > limit:
            too_long(where, len(value), limit)
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    bad(where, "a string", value)


def as_text(value: Any, where: str) -> str:
    return as_str(value, where, MAX_TEXT_LENGTH)


def as_str_list(
    value: Any, where: str, limit: int = MAX_STRING_LENGTH, max_items: int | None = None
) -> list[str]:
    if isinstance(value, (set, frozenset)):
        # in-process legacy callers hand over real sets
        value = sorted(value, key=str)
    elif not isinstance(value, (list, tuple)):
        bad(where, "a list of strings", value)
    if max_items is not None and len(value) > max_items:
        too_many(where, len(value), max_items, "items")
    return [as_str(item, f"{where}[{i}]", limit) for i, item in enumerate(value)]


def as_text_list(value: Any, where: str) -> list[str]:
    # nova's Destination.aggregates and RequestGroup.aggregates: comma-joined uuid lists
    return as_str_list(value, where, MAX_TEXT_LENGTH)


def as_dict(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        bad(where, "a dict", value)
    return value


def field(
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


def required(
    data: Mapping[str, Any], key: str, where: str, convert: Callable[[Any, str], Any]
) -> Any:
    value = data.get(key)
    if value is None:
        fail(f"{where}.{key}", "is required but missing" if key not in data else "must not be null")
    return convert(value, f"{where}.{key}")


def str_dict(value: Any, where: str, max_items: int | None = None) -> dict[str, str]:
    value = as_dict(value, where)
    if max_items is not None and len(value) > max_items:
        too_many(where, len(value), max_items, "keys")
    out = {}
    for k, v in value.items():
        out[as_str(k, f"{where} key {key_excerpt(k)}")] = as_str(v, f"{where}[{key_excerpt(k)}]")
    return out


# -- nova object envelopes -------------------------------------------------------------------


def is_primitive(value: Any) -> bool:
    """Whether ``value`` is a nova object primitive (has a name and a data dict)."""
    return isinstance(value, dict) and NAME in value and DATA in value


def object_data(prim: Any, names: str | tuple[str, ...], where: str) -> dict[str, Any]:
    """The ``nova_object.data`` of ``prim`` after checking it is one of the named objects."""
    if isinstance(names, str):
        names = (names,)
    expected = " or ".join(names)
    if not isinstance(prim, dict):
        bad(where, f"a {expected} object primitive", prim)
    name = prim.get(NAME)
    if name is None:
        fail(where, f"expected a {expected} object primitive, got a dict without {NAME!r}")
    if name not in names:
        fail(where, f"expected a {expected} object primitive, got {excerpt(name)}")
    namespace = prim.get(NAMESPACE, "nova")
    if namespace != "nova":
        fail(where, f"expected the 'nova' object namespace, got {excerpt(namespace)}")
    version = prim.get(VERSION)
    major = _MAJOR_VERSIONS.get(name)
    if version is not None and major is not None:
        try:
            got_major = int(str(version)[:16].split(".", 1)[0])
        except ValueError:
            fail(where, f"unparsable {name} version {excerpt(version)}")
        if got_major != major:
            fail(where, f"{name} version {str(version)[:40]} is not supported (need {major}.x)")
    data = prim.get(DATA)
    if not isinstance(data, dict):
        bad(f"{where}.{DATA}", "a dict", data)
    return data


def list_objects(prim: Any, name: str, where: str) -> list[Any]:
    data = object_data(prim, name, where)
    objects = data.get("objects") or []
    if not isinstance(objects, list):
        bad(f"{where}.objects", "a list", objects)
    return objects


def primitive(name: str, version: str, data: dict[str, Any]) -> dict[str, Any]:
    return {
        NAME: name,
        NAMESPACE: "nova",
        VERSION: version,
        DATA: data,
        CHANGES: list(data),
    }
