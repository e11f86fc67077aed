"""Runs under nova 34's own venv (not ours): nova's conductor-side client meets a failure.

Usage: python exception_call.py '<json args>'; prints one JSON line: the class nova rebuilt,
which of nova's exception classes it is an instance of (what nova's conductor catches by
class), its kwargs, and the instance fault message nova would store for it
(nova.compute.utils.exception_to_dict), which the instance's owner sees.
"""

import json
import sys


def main() -> int:
    args = json.loads(sys.argv[1])
    from nova_setup import init_nova, nova_context, nova_flavor

    init_nova(args, long_rpc_timeout=(None, 60))
    import oslo_messaging as messaging
    from nova import exception, objects
    from nova.compute import utils as compute_utils
    from nova.scheduler import rpcapi

    ctx = nova_context(args)
    flavor = nova_flavor(args["flavor_name"])
    instance_uuids = args["instance_uuids"]
    spec = objects.RequestSpec.from_components(
        ctx,
        instance_uuids[0],
        {"id": "0c7a3c5b-4f0e-4c0e-9a59-6d0f8d8e8a01", "properties": {}},
        flavor,
        None,
        objects.InstancePCIRequests(requests=[]),
        {"scheduler_hints": {}},
        None,
        None,
        security_groups=objects.SecurityGroupList(objects=[]),
        project_id=args["project_id"],
        user_id=args["user_id"],
    )
    spec.num_instances = len(instance_uuids)
    out = {}
    try:
        rpcapi.SchedulerAPI().select_destinations(
            ctx, spec, instance_uuids, return_objects=True, return_alternates=True
        )
    except Exception as exc:
        out = {
            "class": f"{type(exc).__module__}.{type(exc).__name__}",
            "is_no_valid_host": isinstance(exc, exception.NoValidHost),
            "is_allocation_update_failed": isinstance(exc, exception.AllocationUpdateFailed),
            "is_nova_exception": isinstance(exc, exception.NovaException),
            "is_remote_error": isinstance(exc, messaging.RemoteError),
            "exc_type": getattr(exc, "exc_type", None),
            "kwargs": getattr(exc, "kwargs", None),
            "str": str(exc),
            # what nova's conductor stores as the instance fault (the owner sees "message")
            "fault_message": compute_utils.exception_to_dict(exc)["message"],
        }
        if isinstance(exc, exception.NovaException):
            out["format_message"] = exc.format_message()
    else:
        out = {"scheduled": True}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
