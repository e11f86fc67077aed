"""The nova wire codec: nova object primitives (and legacy dicts) to and from our typed model.

A nova object travels as ``{"nova_object.name", "nova_object.namespace": "nova",
"nova_object.version", "nova_object.data": {set fields only}, "nova_object.changes": [...]}``;
sets arrive as lists and datetimes as ISO strings. This package only encodes and decodes:
the RPC manager calls it at the edge, and nothing past the manager sees a primitive.

Decoding is strict about the values the scheduler computes with (a flavor with its memory
and vcpus, integer counts, string host names, dict hints) and lenient about everything else
(unknown fields and newer minor versions are ignored). A bad payload raises
:class:`~scheduler.exceptions.InvalidRequest` naming the field and what was wrong.

* ``values``: checking values (``as_int``, ``as_str``, ``field``, ``required``...: a bad
  value is an InvalidRequest naming the field), quoting them in messages (``excerpt``), and
  nova's object envelopes (``object_data`` opens one, ``primitive`` makes one).
* ``limits``: the limits on input (string lengths, counts, flavor numbers, nesting) and the
  checks on the whole request (``check_request_size`` before decoding, ``check_instances``
  after).
* ``decode``: decoding the request (``request_spec_from_primitive``, RPC 4.3 and later) and
  the arguments of the other RPCs (``aggregates_from_primitive``,
  ``instance_uuids_from_instance_list``).
* ``encode``: encoding the reply (``selections_to_primitive``, ``return_objects=True``).
* ``legacy``: the dicts of RPC 4.0-4.2: reading them (``request_spec_from_legacy``), writing
  them (``legacy_request_spec_dict`` for the notifications, ``legacy_filter_properties_dict``
  for our client), and the ``return_objects=False`` reply (``selections_to_legacy``).
* ``conductor``: the conductor's side, for our client and the tests: encoding a request
  (``request_spec_to_primitive``) and decoding a reply (``selections_from_primitive``).

Each module imports only the ones before it in that list (``values`` none of them). Callers
use the names re-exported here: ``from scheduler.rpc import wire`` and
``wire.request_spec_from_primitive(...)``.
"""

from scheduler.rpc.wire.conductor import (
    request_spec_to_primitive,
    selection_from_primitive,
    selections_from_primitive,
)
from scheduler.rpc.wire.decode import (
    aggregate_from_primitive,
    aggregates_from_primitive,
    destination_from_primitive,
    flavor_from_primitive,
    image_meta_from_primitive,
    instance_group_from_primitive,
    instance_uuids_from_instance_list,
    request_spec_from_primitive,
)
from scheduler.rpc.wire.encode import (
    limits_to_primitive,
    selection_to_primitive,
    selections_to_primitive,
)
from scheduler.rpc.wire.legacy import (
    legacy_filter_properties_dict,
    legacy_request_spec_dict,
    request_spec_from_legacy,
    selection_to_legacy,
    selections_to_legacy,
)
from scheduler.rpc.wire.limits import (
    EXCERPT_CHARS,
    MAX_DEPTH,
    MAX_EXTRA_SPECS,
    MAX_FLAVOR_NUMBER,
    MAX_HINT_LENGTH,
    MAX_HINT_VALUES,
    MAX_HINTS,
    MAX_STRING_LENGTH,
    MAX_TEXT_LENGTH,
    NOVA_API_BODY_BYTES,
    check_instances,
    check_request_size,
    instances_limit,
)
from scheduler.rpc.wire.values import excerpt, is_primitive

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
    "aggregate_from_primitive",
    "aggregates_from_primitive",
    "check_instances",
    "check_request_size",
    "instances_limit",
    "destination_from_primitive",
    "excerpt",
    "flavor_from_primitive",
    "image_meta_from_primitive",
    "instance_group_from_primitive",
    "instance_uuids_from_instance_list",
    "is_primitive",
    "legacy_filter_properties_dict",
    "legacy_request_spec_dict",
    "limits_to_primitive",
    "request_spec_from_legacy",
    "request_spec_from_primitive",
    "request_spec_to_primitive",
    "selection_from_primitive",
    "selection_to_legacy",
    "selection_to_primitive",
    "selections_from_primitive",
    "selections_to_legacy",
    "selections_to_primitive",
]
