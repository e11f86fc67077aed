"""Runs under nova 34's own venv (not ours): nova's own objects read our versioned payloads.

Usage: python notification_check.py '<json args>' where args["payloads"] is a list of the
payloads novasched sent as versioned select_destinations notifications. Each is rebuilt with
nova's NovaObject.obj_from_primitive (nova's field types check every value) and written back
with obj_to_primitive; prints one JSON line with, per payload, the object's class, version,
a few fields, and whether nova's primitive equals ours.
"""

import json
import sys


def _bare_init(self, *args, **kwargs):
    from nova.objects import base

    base.NovaObject.__init__(self)


def main() -> int:
    args = json.loads(sys.argv[1])
    from nova import objects
    from nova.notifications.objects import request_spec, scheduler  # noqa: F401 - registers
    from nova.objects import base

    objects.register_all()
    # nova registers notification objects for its tests and docs only, through this
    base.NovaObjectRegistry.register_notification_objects()
    # a payload's constructor takes the nova object it is built from; obj_from_primitive
    # needs a bare one (the fields, and their type checks, are nova's as they are)
    for cls in base.NovaObjectRegistry.notification_classes:
        cls.__init__ = _bare_init
    out = []
    for payload in args["payloads"]:
        obj = base.NovaObject.obj_from_primitive(payload)
        again = json.loads(json.dumps(obj.obj_to_primitive(), default=str))
        out.append(
            {
                "class": type(obj).__name__,
                "version": obj.VERSION,
                "is_request_spec_payload": isinstance(obj, request_spec.RequestSpecPayload),
                "flavor_class": type(obj.flavor).__name__,
                "flavor_name": obj.flavor.name,
                "image_class": type(obj.image).__name__ if obj.image else None,
                "image_properties_class": (
                    type(obj.image.properties).__name__ if obj.image else None
                ),
                "instance_group_policy": (
                    obj.instance_group.policy if obj.instance_group else None
                ),
                "security_groups": list(obj.security_groups),
                "instance_uuid": obj.instance_uuid,
                "num_instances": obj.num_instances,
                "round_trip_equal": again == payload,
                "round_trip": again,
            }
        )
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
