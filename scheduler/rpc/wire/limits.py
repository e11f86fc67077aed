"""The limits on a request: the constants the decoder checks strings, counts and flavor
numbers against, and the checks on the whole request that run around decoding
(:func:`check_request_size` before it, :func:`check_instances` after it), so a request past
them is an InvalidRequest before the driver does any work.

``MAX_STRING_LENGTH``, ``MAX_TEXT_LENGTH`` and ``EXCERPT_CHARS`` are defined in ``values``,
whose checks apply them, and re-exported here with the others.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from oslo_utils import uuidutils

from scheduler.objects import RequestSpec
from scheduler.primitives import DATA
from scheduler.rpc.wire.values import (
    EXCERPT_CHARS,
    MAX_STRING_LENGTH,
    MAX_TEXT_LENGTH,
    bad,
    excerpt,
    fail,
    key_excerpt,
    too_long,
)

__all__ = [
    "EXCERPT_CHARS",
    "MAX_DEPTH",
    "MAX_EXTRA_SPECS",
    "MAX_FLAVOR_NUMBER",
    "MAX_HINTS",
    "MAX_HINT_LENGTH",
    "MAX_HINT_VALUES",
    "MAX_STRING_LENGTH",
    "MAX_TEXT_LENGTH",
    "NOVA_API_BODY_BYTES",
    "UUID_BYTES",
    "check_instances",
    "instances_limit",
    "check_request_size",
]


# -- limits on input ---------------------------------------------------------------------------

# Each limit sits above what nova's own API and conductor can send, and says which of nova's
# bounds it follows; where nova has none, the size guard ([scheduler] max_request_bytes) alone
# bounds the request (docs/operations.md, "Limits on a request").

# nova-api's request body limit: oslo.middleware's [oslo_middleware] max_request_body_size,
# 114,688 bytes by default. It bounds what one boot carries in scheduler hints.
NOVA_API_BODY_BYTES = 114_688
# nova puts no bound on a flavor's extra specs (any number of calls may add them): the size
# guard alone (None)
MAX_EXTRA_SPECS: int | None = None
# nova-api's schema takes any hints (additionalProperties), any JSON: their number, each
# one's number of values, and the length of a name or a value are bounded by the body alone
# (a hint or a value takes at least 2 bytes of it, "0,")
MAX_HINTS = NOVA_API_BODY_BYTES // 2
MAX_HINT_VALUES = NOVA_API_BODY_BYTES // 2
MAX_HINT_LENGTH = NOVA_API_BODY_BYTES
# an instance uuid in a JSON list ("...",): the size guard bounds instance_uuids to
# max_request_bytes // this when [scheduler] max_instances_per_request is 0
UUID_BYTES = 39
# nova's flavor API: integers up to the database's INT
MAX_FLAVOR_NUMBER = 2**31 - 1
MAX_DEPTH = 32


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
                fail(_path_text(node), f"is nested deeper than {max_depth} levels")
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
                        (item, (node, f"[{key_excerpt(key)}]" if step is None else step), depth + 1)
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
            fail(
                _path_text(node),
                f"the request is larger than {max_bytes} bytes "
                "([scheduler] max_request_bytes) at this field",
            )


def instances_limit(max_instances_per_request: int, max_request_bytes: int) -> int:
    """The most instances one request may ask for: ``[scheduler]
    max_instances_per_request``, or with 0 (the default) as many instance uuids as the size
    guard lets a request carry (nova bounds the number only by the project's quota, which
    may be unlimited, and sends one uuid per instance)."""
    if max_instances_per_request > 0:
        return max_instances_per_request
    return max(1, max_request_bytes // UUID_BYTES)


def check_instances(
    spec: RequestSpec,
    instance_uuids: Any,
    max_instances: int,
) -> list[str] | None:
    """The instance uuids of a ``select_destinations`` call, checked against the decoded
    spec: ``num_instances`` at most ``max_instances`` (``instances_limit``); ``instance_uuids``
    null or a list of at most ``max_instances`` distinct UUID strings.

    ``num_instances`` and the length of ``instance_uuids`` may differ, as nova allows: the
    driver schedules one instance per uuid when uuids are given (a move sends one uuid, and
    its RequestSpec may keep the ``num_instances`` of the boot that made it).
    """
    if spec.num_instances > max_instances:
        fail(
            "RequestSpec.num_instances",
            f"is {spec.num_instances}; the limit is {max_instances} "
            "([scheduler] max_instances_per_request)",
        )
    if instance_uuids is None:
        return None
    where = "instance_uuids"
    if not isinstance(instance_uuids, (list, tuple)):
        bad(where, "a list of instance UUIDs or null", instance_uuids)
    if len(instance_uuids) > max_instances:
        fail(
            where,
            f"has {len(instance_uuids)} items; the limit is {max_instances} "
            "([scheduler] max_instances_per_request)",
        )
    seen: dict[str, int] = {}
    for i, instance_uuid in enumerate(instance_uuids):
        item_where = f"{where}[{i}]"
        if not isinstance(instance_uuid, str):
            bad(item_where, "an instance UUID string", instance_uuid)
        if len(instance_uuid) > MAX_STRING_LENGTH:
            too_long(item_where, len(instance_uuid), MAX_STRING_LENGTH)
        if not uuidutils.is_uuid_like(instance_uuid):
            bad(item_where, "an instance UUID", instance_uuid)
        first = seen.setdefault(instance_uuid, i)
        if first != i:
            fail(item_where, f"repeats {where}[{first}] ({excerpt(instance_uuid)})")
    return list(instance_uuids)
