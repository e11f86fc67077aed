"""Runs under nova 34's own venv (not ours): how nova itself sees a ``nova-scheduler``
services row, through its Service object and its servicegroup API (what
``openstack compute service list`` shows as the row's state), and, for ``format``, what
nova's CellMapping makes of templated URLs.

Usage: python service_state.py '<json args>'; prints one JSON line.

* ``{"op": "state", "url", "host", "service_down_time"}``: ``{"found", "up", "version",
  "uuid", "topic", "binary", "report_count", "disabled", "forced_down"}``.
* ``{"op": "format", "cases": [[template, reader_url], ...]}``: ``{"results": [[True,
  formatted] | [False, exception type name], ...]}`` from ``CellMapping._format_url``.
"""

import json
import sys


def _state(args: dict) -> dict:
    import nova.conf
    from nova import context, objects, servicegroup
    from nova.db.main import api as main_db_api

    conf = nova.conf.CONF
    conf([], project="nova", default_config_files=[], default_config_dirs=[])
    conf.set_override("connection", args["url"], group="database")
    conf.set_override("service_down_time", args["service_down_time"])
    # below service_down_time, or nova's servicegroup API raises service_down_time itself
    conf.set_override("report_interval", 1)
    objects.register_all()
    main_db_api.configure(conf)
    ctxt = context.get_admin_context()
    svc = objects.Service.get_by_host_and_binary(ctxt, args["host"], "nova-scheduler")
    if svc is None:
        return {"found": False}
    return {
        "found": True,
        "up": servicegroup.API().service_is_up(svc),
        "version": svc.version,
        "uuid": svc.uuid,
        "topic": svc.topic,
        "binary": svc.binary,
        "report_count": svc.report_count,
        "disabled": svc.disabled,
        "forced_down": svc.forced_down,
    }


def _format(args: dict) -> dict:
    from nova.objects.cell_mapping import CellMapping

    results = []
    for template, reader in args["cases"]:
        try:
            results.append([True, CellMapping._format_url(template, reader)])
        except Exception as exc:
            results.append([False, type(exc).__name__])
    return {"results": results}


def main() -> int:
    args = json.loads(sys.argv[1])
    out = _state(args) if args["op"] == "state" else _format(args)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
