"""Runs under nova 34's own venv (not ours): nova's conductor-side code calls novasched.

Usage: python conductor_call.py '<json args>'; prints one JSON line with what nova saw.
It uses only nova's published client code: nova.scheduler.rpcapi.SchedulerAPI, nova objects,
nova's RPC set-up and nova.exception, as a conductor does.
"""

import json
import sys
import uuid


def main() -> int:
    args = json.loads(sys.argv[1])
    from nova_setup import init_nova, nova_context, nova_flavor

    init_nova(args, long_rpc_timeout=(None, 60))
    from nova import exception, objects
    from nova.scheduler import rpcapi

    ctx = nova_context(args)
    wanted = args["flavor"]
    flavor = nova_flavor(wanted["name"], wanted["vcpus"], wanted["memory_mb"], wanted["root_gb"])
    instance_uuids = [str(uuid.uuid4()) for _ in range(args["count"])]
    group = None
    if args.get("anti_affinity"):
        # a group of earlier members too: {"uuid", "members", "hosts"} as the conductor
        # fills them (the hosts of the members that still exist)
        earlier = args.get("group") or {}
        group = objects.InstanceGroup(
            uuid=earlier.get("uuid") or str(uuid.uuid4()),
            name="g",
            policy="anti-affinity",
            rules={},
            members=[*earlier.get("members", []), *instance_uuids],
            hosts=list(earlier.get("hosts", [])),
            user_id=args["user_id"],
            project_id=args["project_id"],
        )
    image = {
        "id": str(uuid.uuid4()),
        "name": "cirros",
        "status": "active",
        "disk_format": "qcow2",
        "container_format": "bare",
        "min_disk": 0,
        "min_ram": 0,
        "size": 21430272,
        "properties": args.get("image_properties", {}),
    }
    spec = objects.RequestSpec.from_components(
        ctx,
        instance_uuids[0],
        image,
        flavor,
        None,
        objects.InstancePCIRequests(requests=[]),
        {
            "scheduler_hints": {
                **args.get("scheduler_hints", {}),
                **({"group": [group.uuid]} if group else {}),
            }
        },
        group,
        args.get("availability_zone"),
        security_groups=objects.SecurityGroupList(objects=[]),
        project_id=args["project_id"],
        user_id=args["user_id"],
    )
    spec.num_instances = args["count"]
    if args.get("rebuild_on"):
        # what nova-api's rebuild sets before the conductor asks the scheduler to check
        # the instance's own host with the new image: no claim is made
        spec.requested_destination = objects.Destination(host=args["rebuild_on"])
        spec.scheduler_hints["_nova_check_type"] = ["rebuild"]
    api = rpcapi.SchedulerAPI()
    out = {"instance_uuids": instance_uuids}
    try:
        result = api.select_destinations(
            ctx,
            spec,
            instance_uuids,
            return_objects=args.get("return_objects", True),
            return_alternates=args.get("return_alternates", True),
        )
    except exception.NoValidHost as exc:
        # what the conductor catches: nova's own exception class, rebuilt from the reply
        out["no_valid_host"] = {
            "class": f"{type(exc).__module__}.{type(exc).__name__}",
            "is_nova_no_valid_host": isinstance(exc, exception.NoValidHost),
            "message": str(exc),
        }
    else:
        if args.get("return_objects", True):
            out["selections"] = [
                [
                    {
                        "type": type(sel).__name__,
                        "service_host": sel.service_host,
                        "nodename": sel.nodename,
                        "compute_node_uuid": sel.compute_node_uuid,
                        "cell_uuid": sel.cell_uuid,
                        "availability_zone": sel.availability_zone,
                        "allocation_request_json": sel.allocation_request,
                        "allocation_request": json.loads(sel.allocation_request),
                        "allocation_request_version": sel.allocation_request_version,
                        "limits_vcpu": sel.limits.vcpu,
                    }
                    for sel in selections
                ]
                for selections in result
            ]
        else:
            out["legacy"] = result
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
