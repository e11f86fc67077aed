"""Runs under nova 34's own venv (not ours): nova-compute's instance-info casts to the
schedulers, sent with nova's own ``SchedulerQueryClient`` as nova-compute sends them.

Usage: python instance_info.py '<json args>'; prints one JSON line. ``op`` is ``delete``
(``delete_instance_info``: an instance left ``host``, as when it is deleted) or ``sync``
(``sync_instance_info``: the uuids ``host`` has).
"""

import json
import sys


def main() -> int:
    args = json.loads(sys.argv[1])
    from nova_setup import init_nova

    init_nova(args)
    from nova import context, rpc
    from nova.scheduler.client import query

    ctx = context.get_admin_context()
    client = query.SchedulerQueryClient()
    op = args["op"]
    if op == "delete":
        client.delete_instance_info(ctx, args["host"], args["instance_uuid"])
    elif op == "sync":
        client.sync_instance_info(ctx, args["host"], args["instance_uuids"])
    else:
        raise SystemExit(f"unknown op {op!r}")
    rpc.cleanup()
    print(json.dumps({"op": op, "host": args["host"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
