"""``novasched-scheduler``: the RPC service, started like ``nova-scheduler``.

    novasched-scheduler --config-file /etc/nova/nova.conf

Reads nova's configuration files (project ``nova``), logs through oslo.log with the
request id in each line, and runs ``[scheduler] workers`` processes on topic ``scheduler``.
"""

from __future__ import annotations

import argparse
import configparser
import sys

from scheduler.cmd import hide_eventlet_deprecation, select_service_backend

_PROG = "novasched-scheduler"


def _config_paths(argv: list[str]) -> list[str]:
    """The config files this command line will read, found without importing the service
    (so that eventlet can be patched in before anything else is imported)."""
    import glob
    import os

    from oslo_config import cfg

    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--config-file", action="append", default=None)
    parser.add_argument("--config-dir", action="append", default=None)
    args, _ = parser.parse_known_args(argv)
    files = args.config_file
    if files is None:
        files = cfg.find_config_files(project="nova", prog=_PROG)
    dirs = args.config_dir
    if dirs is None:
        dirs = cfg.find_config_dirs(project="nova", prog=_PROG)
    paths = list(files)
    for d in dirs:
        paths.extend(sorted(glob.glob(os.path.join(d, "*.conf"))))
    return paths


def _wants_eventlet(argv: list[str]) -> bool:
    backend = None
    for path in _config_paths(argv):
        parser = configparser.RawConfigParser(strict=False)
        try:
            parser.read(path)
        except (configparser.Error, UnicodeDecodeError):
            continue  # oslo.config reports it properly below
        if parser.has_option("DEFAULT", "concurrency_backend"):
            backend = parser.get("DEFAULT", "concurrency_backend").strip()
    return backend == "eventlet"


def main(argv: list[str] | None = None) -> int:
    """Parse the configuration, set up logging and run the scheduler service."""
    argv = list(sys.argv[1:] if argv is None else argv)

    eventlet_backend = _wants_eventlet(argv)
    if eventlet_backend:
        # must happen before oslo.messaging, kombu and friends create locks and sockets
        import eventlet

        eventlet.monkey_patch()
    else:
        hide_eventlet_deprecation()

    from oslo_config import cfg
    from oslo_log import log

    from scheduler import conf as sched_conf
    from scheduler import exceptions
    from scheduler.telemetry import gmr

    conf = sched_conf.CONF
    log.register_options(conf)
    gmr.register_opts(conf)
    try:
        conf(argv, project="nova", prog=_PROG)
    except (cfg.Error, ValueError) as exc:
        print(f"{_PROG}: configuration error: {exc}", file=sys.stderr)
        return 2
    log.setup(conf, "novasched")
    # after the log is set up (its line names the backend), before oslo.messaging is imported
    select_service_backend(eventlet_backend)
    sched_conf.warn_unsupported_options(conf)
    gmr.setup(conf)

    from scheduler.cmd import config_check
    from scheduler.rpc import service

    # every option's value is read now, not by the first request that needs it (a value of
    # the wrong type would otherwise fail requests, one by one, with the option's error)
    problems = config_check.bad_values(conf)
    if problems:
        for problem in problems:
            print(f"{_PROG}: configuration error: {problem}", file=sys.stderr)
        return service.EXIT_CONFIG
    try:
        return service.run_workers(conf)
    except exceptions.ConfigurationError as exc:
        # EX_CONFIG, as a worker that cannot start: a service manager should not restart it
        print(f"{_PROG}: configuration error: {exc}", file=sys.stderr)
        return service.EXIT_CONFIG
    except cfg.Error as exc:
        print(f"{_PROG}: configuration error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
