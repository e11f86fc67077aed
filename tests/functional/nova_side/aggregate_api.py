"""Runs under nova 34's own venv (not ours): nova-api's aggregate code changes an aggregate
in the API database and casts ``update_aggregates`` to the schedulers, as nova-api does.

Usage: python aggregate_api.py '<json args>'; prints one JSON line with the aggregate.

``create`` is nova's own ``AggregateAPI.create_aggregate``. Adding and removing hosts and
changing metadata take the steps of ``AggregateAPI.add_host_to_aggregate``,
``remove_host_from_aggregate`` and ``update_aggregate_metadata`` that concern the
scheduler: nova's ``Aggregate`` object writes the API database, then
``SchedulerQueryClient.update_aggregates(context, [aggregate])`` casts the plain list that
nova-api sends. (nova-api also checks the host's service record and mirrors the host into
Placement; the test does the Placement part itself.)
"""

import json
import sys


def main() -> int:
    args = json.loads(sys.argv[1])
    from nova_setup import init_nova

    conf = init_nova(args, connection=("api_database", args["api_database"]))
    from nova import context, objects, rpc
    from nova.compute import api as compute_api
    from nova.db.api import api as api_db
    from nova.scheduler.client import query

    api_db.configure(conf)
    ctx = context.get_admin_context()

    op = args["op"]
    if op == "create":
        aggregate = compute_api.AggregateAPI().create_aggregate(
            ctx, args["name"], args.get("availability_zone")
        )
    else:
        if "uuid" in args:
            aggregate = objects.Aggregate.get_by_uuid(ctx, args["uuid"])
        else:
            aggregate = objects.Aggregate.get_by_id(ctx, args["id"])
        if op == "add_hosts":
            for host in args["hosts"]:
                aggregate.add_host(host)
        elif op == "remove_hosts":
            for host in args["hosts"]:
                aggregate.delete_host(host)
        elif op == "set_metadata":
            aggregate.update_metadata(args["metadata"])
        else:
            raise SystemExit(f"unknown op {op!r}")
        query.SchedulerQueryClient().update_aggregates(ctx, [aggregate])
    rpc.cleanup()
    print(
        json.dumps(
            {
                "id": aggregate.id,
                "uuid": aggregate.uuid,
                "hosts": sorted(aggregate.hosts or []),
                "metadata": dict(aggregate.metadata or {}),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
