"""novasched-manage: database schema, cells, synthetic fleets, host listing, explain,
capacity, the decision records and their replay, the demo, and the readiness check.

    novasched-manage --config-file nova.conf db sync [--api-only]
    novasched-manage --config-file nova.conf cell create --name cell1 --database-connection URL
    novasched-manage --config-file nova.conf cell list
    novasched-manage --config-file nova.conf fleet load --hosts 100 --placement-url URL
    novasched-manage --config-file nova.conf fleet heartbeat
    novasched-manage --config-file nova.conf host list [--cell cell1]
    novasched-manage --config-file nova.conf explain --flavor NAME[:VCPUS:RAM_MB:DISK_GB[:k=v,...]]
        [--image-props k=v,...] [--hints k=v,...] [--az AZ] [--num-instances N]
        [--request FILE] [--all-hosts] [-f table|json|yaml]
    novasched-manage --config-file nova.conf capacity [--flavor NAME ...] [--az AZ]
        [--aggregate NAME] [--project-id ID] [--by-aggregate] [-f FORMAT] [-c COLUMN]
        [--plot FILE.png] [--allow-partial]
    novasched-manage --config-file nova.conf decision show INSTANCE_UUID|REQUEST_ID [--host H]
        [-f table|json|yaml]
    novasched-manage --config-file nova.conf decision list [--host H] [--since T] [--until T]
        [--limit N] [-f FORMAT] [-c COLUMN] [--json]
    novasched-manage --config-file nova.conf replay [--what-if NEW.conf] [--since T]
        [--until T] [-f table|json|yaml]
    novasched-manage --config-file nova.conf check [--placement-config-file PATH]
        [--placement-workers N] [-f FORMAT] [-c COLUMN]
    novasched-manage demo [...]

The config files are read with oslo.config under project "nova" (nova.conf as it is);
``[api_database] connection`` locates the API database and cell_mappings the cells. Before
a command runs, its configuration is checked as the service reads it (``config_check``: a
bad value, an unknown option in a group novasched reads), and a command that reads the
cloud checks that its databases are there (an SQLite path is never created by a read).
Every error is one line on stderr and a non-zero exit status (``--debug`` adds the
traceback). ``check`` exits 0 when everything is OK, 1 on a warning, 2 on a failure;
``capacity`` exits 3 after printing figures some cells are missing from, unless
``--allow-partial``. Long commands (``fleet load``, ``check``) draw a progress bar when
standard output is a terminal.
"""

from __future__ import annotations

import argparse
import logging
import sys
import uuid as uuidlib
from collections.abc import Sequence
from typing import Any

from oslo_config import cfg
from oslo_utils import timeutils

from scheduler.cmd import (
    LazyModule,
    add_list_format,
    check_columns,
    config_check,
    decisions,
    emit_list,
    explain_capacity,
    hide_eventlet_deprecation,
    list_format,
    positive_int,
    replay,
    select_service_backend,
)
from scheduler.cmd.common import (
    PROG,
    CommandError,
    Parser,
    api_engine,
    check_url,
    database_error,
    database_errors,
    make_url,
    safe_url,
)
from scheduler.conf import CONF, database_connection

# imported when a command needs them, not for --help
sa = LazyModule("sqlalchemy")
db = LazyModule("db")
fleet_mod = LazyModule("scheduler.demo.fleet")
_progress = LazyModule("scheduler.cmd.progress")
_host_table = LazyModule("scheduler.hosts.table")


LOG = logging.getLogger(__name__)


# ------------------------------------------------------------------------------- helpers


def _cell0_url(url: str) -> str:
    """nova's map_cell0 default: the cell database's name with ``_cell0`` appended."""
    parsed = make_url(url)
    name = parsed.database or ""
    if parsed.get_backend_name() == "sqlite":
        if name in ("", ":memory:"):
            return url
        stem, dot, ext = name.rpartition(".")
        new = f"{stem}_cell0.{ext}" if dot and "/" not in ext else f"{name}_cell0"
    else:
        new = f"{name}_cell0"
    return parsed.set(database=new).render_as_string(hide_password=False)


def _resolve_cells(
    api_engine: sa.Engine, wanted: Sequence[str] | None, *, create: bool = False
) -> list[dict[str, Any]]:
    """The cells named (by name or uuid) in ``wanted``, else every enabled non-cell0 cell;
    their databases must exist unless the command ``create``s them."""
    with database_errors("the API database", CONF.api_database.connection):
        cells = [c for c in _cell_mappings(api_engine) if c["uuid"] != db.CELL0_UUID]
    if not wanted:
        chosen = [c for c in cells if not c["disabled"]]
        if not chosen:
            raise CommandError("no cells are mapped: run 'cell create' first")
        return _usable(chosen, create)
    out = []
    for w in wanted:
        match = [c for c in cells if w in (c["name"], c["uuid"])]
        if not match:
            names = ", ".join(c["name"] or c["uuid"] for c in cells) or "none"
            raise CommandError(f"unknown cell {w!r} (known cells: {names})")
        out.extend(m for m in match if m not in out)
    return _usable(out, create)


def _cell_mappings(api_engine: sa.Engine) -> list[dict[str, Any]]:
    """The cell mappings, templated URLs filled from ``[database] connection`` (and
    ``[DEFAULT] transport_url``) as nova's services read them."""
    return db.get_cell_mappings(
        api_engine,
        database_connection(CONF),
        transport_url=getattr(CONF, "transport_url", None),
    )


def _usable(cells: list[dict[str, Any]], create: bool = True) -> list[dict[str, Any]]:
    for cell in cells:
        if cell.get("template_error"):
            raise CommandError(cell["template_error"])
        if not create:
            config_check.require_database(cell["database_connection"], _cell_label(cell))
    return cells


def _cell_label(cell: dict[str, Any]) -> str:
    return f"the database of cell {cell['name'] or cell['uuid']}"


# ------------------------------------------------------------------------------ commands


def _register_database_opts() -> None:
    """nova's ``[database] connection`` (a cell database) belongs to oslo.db, which registers
    its own options on the global CONF whenever it runs in this process (the embedded
    Placement does): use oslo.db's option objects when it is installed so both agree."""
    try:
        from oslo_db import options as db_options

        opts = db_options.database_opts
    except ImportError:  # oslo.db is not a dependency of the scheduler itself
        opts = [cfg.StrOpt("connection", secret=True, help="A cell database URL.")]
    try:
        CONF.register_opts(opts, group="database")
    except cfg.DuplicateOptError:
        pass


def cmd_db_sync(args: argparse.Namespace) -> int:
    api = api_engine(create=True)
    with database_errors("the API database", CONF.api_database.connection):
        db.create_schema(api, "api")
    print(f"API database ready: {safe_url(api.url.render_as_string(hide_password=False))}")
    if args.api_only:
        return 0
    urls: list[tuple[str, str]] = []
    if CONF.database.connection:
        urls.append(("[database] connection", CONF.database.connection))
    with database_errors("the API database", CONF.api_database.connection):
        cells = _usable(_cell_mappings(api))
    for cell in cells:
        urls.append((f"cell {cell['name'] or cell['uuid']}", cell["database_connection"]))
    done: set[str] = set()
    for label, url in urls:
        url = db.api.normalize_url(check_url(url, label))
        if url in done:
            continue
        done.add(url)
        with database_errors(f"the database of {label}", url):
            db.create_schema(url, "cell")
        print(f"cell database ready ({label}): {safe_url(url)}")
    return 0


def cmd_cell_create(args: argparse.Namespace) -> int:
    url = args.database_connection or CONF.database.connection
    if not url:
        raise CommandError("give --database-connection (or set [database] connection)")
    check_url(url, "--database-connection")
    if args.uuid:
        try:
            uuidlib.UUID(args.uuid)
        except ValueError:
            raise CommandError(f"--uuid is not a UUID: {args.uuid!r}")
    if not args.name.strip():
        raise CommandError("--name must not be empty")
    api = api_engine(create=True)
    with database_errors("the API database", CONF.api_database.connection):
        db.create_schema(api, "api")
    cell0_url = args.cell0_database_connection or _cell0_url(CONF.database.connection or url)
    if db.ensure_cell0(api, check_url(cell0_url, "cell0 database connection")):
        print(f"mapped cell0: {safe_url(cell0_url)}")
    cell = db.create_cell_mapping(
        api,
        name=args.name,
        database_connection=url,
        transport_url=args.transport_url or getattr(CONF, "transport_url", None) or "none:///",
        uuid=args.uuid,
        disabled=args.disabled,
    )
    print(cell["uuid"])
    return 0


def cmd_cell_list(args: argparse.Namespace) -> int:
    api = api_engine()
    with database_errors("the API database", CONF.api_database.connection):
        mappings = _cell_mappings(api)
    rows = [
        [
            c["name"],
            c["uuid"],
            safe_url(c["transport_url"]),
            safe_url(c["database_connection"]),
            c["disabled"],
        ]
        for c in mappings
    ]
    headers = ["name", "uuid", "transport_url", "database_connection", "disabled"]
    print(_emit(args, headers, rows))
    return 0


def _placement_client(args: argparse.Namespace) -> Any:
    if args.no_placement:
        return None
    url = args.placement_url or CONF.placement.endpoint_override
    if not url:
        raise CommandError(
            "no Placement: give --placement-url URL (or set [placement] endpoint_override), "
            "or --no-placement to write the databases only"
        )
    from placement_client.api import PlacementClient

    client = PlacementClient(url, token=CONF.placement.noauth2_user)
    try:
        client.version()
    except Exception as exc:
        raise CommandError(f"Placement at {url} does not answer: {exc}")
    return client


def cmd_fleet_load(args: argparse.Namespace) -> int:
    api = api_engine()
    cells = _resolve_cells(api, args.cells, create=True)
    azs = [a.strip() for a in args.azs.split(",") if a.strip()] if args.azs is not None else None
    spec = fleet_mod.FleetSpec(
        hosts=args.hosts,
        cells=[c["uuid"] for c in cells],
        seed=args.seed,
        host_prefix=args.host_prefix,
        max_instances_per_host=args.max_instances_per_host,
    )
    for name in ("disabled_fraction", "down_fraction", "aarch64_fraction"):
        value = getattr(args, name)
        if value is not None:
            setattr(spec, name, value)
    if azs is not None:
        spec.azs = azs
    try:
        fleet = fleet_mod.build_fleet(spec)
    except ValueError as exc:
        raise CommandError(str(exc))
    placement = _placement_client(args)
    engines = {}
    for c in cells:
        engine = db.get_engine(check_url(c["database_connection"], f"cell {c['name']}"))
        db.create_schema(engine, "cell")
        engines[c["uuid"]] = engine
    progress = _progress.terminal_progress(unit="host")
    try:
        fleet_mod.load_fleet(
            fleet, api, engines, placement, workers=args.workers, progress=progress
        )
    except fleet_mod.FleetConflict as exc:
        raise CommandError(str(exc))
    finally:
        if progress is not None:
            progress.close()
    names = ", ".join(c["name"] or c["uuid"] for c in cells)
    print(
        f"loaded {len(fleet.hosts)} hosts into {names}: {len(fleet.disabled_hosts)} disabled, "
        f"{len(fleet.down_hosts)} down, {sum(len(v) for v in fleet.instances.values())} "
        f"instances, aggregates {', '.join(a.name for a in fleet.aggregates) or 'none'}"
        + ("" if placement is None else f"; {len(fleet.providers)} Placement providers")
    )
    return 0


def cmd_fleet_heartbeat(args: argparse.Namespace) -> int:
    api = api_engine()
    total = 0
    for c in _resolve_cells(api, args.cells):
        with database_errors(_cell_label(c), c["database_connection"]):
            total += db.touch_services(db.get_engine(c["database_connection"]))
    print(f"heartbeat: {total} nova-compute services reported up")
    return 0


def cmd_host_list(args: argparse.Namespace) -> int:
    api = api_engine()
    cells = _resolve_cells(api, [args.cell] if args.cell else None)
    az_of: dict[str, str] = {}
    with database_errors("the API database", CONF.api_database.connection):
        aggregates = db.get_aggregates(api)
    for agg in aggregates:
        az = agg["metadata"].get("availability_zone")
        if az:
            for h in agg["hosts"]:
                az_of.setdefault(h, az)
    now = timeutils.utcnow()
    rows = []
    for c in cells:
        engine = db.get_engine(c["database_connection"])
        with database_errors(_cell_label(c), c["database_connection"]):
            services = {s.host: s._asdict() for s in db.get_compute_services(engine)}
            nodes = db.get_compute_nodes(engine)
        for cn in sorted(nodes, key=lambda r: r.host or ""):
            svc = services.get(cn.host)
            status = "-" if svc is None else ("disabled" if svc["disabled"] else "enabled")
            rows.append(
                [
                    cn.host,
                    cn.hypervisor_hostname,
                    c["name"],
                    f"{cn.vcpus_used}/{cn.vcpus}",
                    cn.free_ram_mb,
                    cn.free_disk_gb,
                    "up"
                    if svc and _host_table.service_is_up(svc, now, CONF.service_down_time)
                    else "down",
                    status,
                    az_of.get(cn.host, CONF.default_availability_zone),
                ]
            )
    headers = ["host", "node", "cell", "vcpus used/total", "free ram MB", "free disk GB"]
    headers += ["state", "status", "az"]
    print(_emit(args, headers, rows))
    if list_format(args) == "table":
        print(f"{len(rows)} hosts")
    return 0


def _emit(args: argparse.Namespace, headers: list[str], rows: list[list[Any]]) -> str:
    try:
        return emit_list(args, headers, rows)
    except ValueError as exc:
        raise CommandError(str(exc))


def cmd_check(args: argparse.Namespace) -> int:
    """Check nova.conf, the databases, Placement and the broker; 0 OK, 1 warning, 2 failure."""
    from scheduler.cmd import check

    _columns(args, check.COLUMNS)
    return check.main(
        CONF,
        placement_config_file=args.placement_config_file,
        placement_workers=args.placement_workers,
        args=args,
        progress=_progress.terminal_progress() if list_format(args) == "table" else None,
    )


def _columns(args: argparse.Namespace, headers: list[str]) -> None:
    """Refuse ``-c`` columns that are not among ``headers``, before the command works."""
    try:
        check_columns(args, headers)
    except ValueError as exc:
        raise CommandError(str(exc))


def cmd_demo(args: argparse.Namespace) -> int:
    try:
        from scheduler.demo import run as demo
    except ImportError as exc:
        raise CommandError(f"the demo is not available: {exc}")
    passed = [f"--config-file={f}" for f in args.config_file or []]
    passed += [f"--config-dir={d}" for d in args.config_dir or []]
    result = demo.main(passed + list(args.demo_args))
    return int(result or 0)


# ------------------------------------------------------------------------------ parsing


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}")
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1: {text}")
    return value


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The command line of novasched-manage."""
    p = Parser(prog=PROG, description="Manage novasched's databases, cells and fleets.")
    p.add_argument("--config-file", action="append", metavar="PATH", help="nova.conf (repeatable)")
    p.add_argument("--config-dir", action="append", metavar="DIR", help="directory of *.conf")
    p.add_argument("--debug", action="store_true", help="log debug output and show tracebacks")
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = p.add_subparsers(
        dest="category",
        metavar="{db,cell,fleet,host,explain,capacity,decision,replay,check,demo}",
        parser_class=Parser,
    )
    sub.required = True

    dbp = sub.add_parser("db", help="database schema")
    dbs = dbp.add_subparsers(dest="action", metavar="{sync}", parser_class=Parser)
    dbs.required = True
    sync = dbs.add_parser("sync", help="create the API schema and every cell's schema")
    sync.add_argument("--api-only", action="store_true", help="only the API database")
    sync.set_defaults(func=cmd_db_sync)

    cellp = sub.add_parser("cell", help="cell mappings")
    cells = cellp.add_subparsers(dest="action", metavar="{create,list}", parser_class=Parser)
    cells.required = True
    create = cells.add_parser("create", help="map a cell (and cell0 if missing)")
    create.add_argument("--name", required=True, help="the cell's name")
    create.add_argument(
        "--database-connection",
        metavar="URL",
        help="the cell's database (default: [database] connection)",
    )
    create.add_argument(
        "--transport-url",
        metavar="URL",
        help="the cell's broker (default: [DEFAULT] transport_url)",
    )
    create.add_argument("--uuid", help="the cell's uuid (default: a new one)")
    create.add_argument("--disabled", action="store_true", help="map it disabled")
    create.add_argument(
        "--cell0-database-connection",
        metavar="URL",
        help="cell0's database if cell0 is not mapped yet (default: <database>_cell0)",
    )
    create.set_defaults(func=cmd_cell_create)
    cell_list = cells.add_parser("list", help="list the cell mappings")
    add_list_format(cell_list)
    cell_list.set_defaults(func=cmd_cell_list)

    fleetp = sub.add_parser("fleet", help="synthetic fleets")
    fleets = fleetp.add_subparsers(dest="action", metavar="{load,heartbeat}", parser_class=Parser)
    fleets.required = True
    load = fleets.add_parser("load", help="write a synthetic fleet into the cells and Placement")
    load.add_argument("--hosts", type=positive_int, required=True, help="compute nodes to write")
    load.add_argument("--cells", nargs="+", metavar="CELL", help="names or uuids (default: all)")
    load.add_argument("--seed", type=int, default=0, help="the random fleet's seed (default 0)")
    load.add_argument(
        "--host-prefix", default="compute", help="host names: PREFIX-0001, ... (default compute)"
    )
    load.add_argument("--azs", metavar="AZ,AZ", help="availability zones (default az1,az2,az3)")
    load.add_argument(
        "--disabled-fraction", type=_fraction, help="share of hosts disabled (0 to 1)"
    )
    load.add_argument(
        "--down-fraction", type=_fraction, help="share of hosts that never report (0 to 1)"
    )
    load.add_argument("--aarch64-fraction", type=_fraction, help="share of aarch64 hosts (0 to 1)")
    load.add_argument(
        "--max-instances-per-host",
        type=_non_negative,
        default=4,
        help="existing instances per host, at most (default 4)",
    )
    load.add_argument(
        "--placement-url", metavar="URL", help="Placement's endpoint (default: [placement])"
    )
    load.add_argument("--no-placement", action="store_true", help="databases only")
    load.add_argument("--workers", type=positive_int, default=8, help="parallel Placement writes")
    load.set_defaults(func=cmd_fleet_load)
    beat = fleets.add_parser(
        "heartbeat",
        help="mark every reporting nova-compute service as just seen (the fleet's down "
        "hosts, which never reported, stay down)",
    )
    beat.add_argument("--cells", nargs="+", metavar="CELL", help="names or uuids (default: all)")
    beat.set_defaults(func=cmd_fleet_heartbeat)

    hostp = sub.add_parser("host", help="compute hosts")
    hosts = hostp.add_subparsers(dest="action", metavar="{list}", parser_class=Parser)
    hosts.required = True
    hl = hosts.add_parser("list", help="hosts with capacity, state and AZ")
    hl.add_argument("--cell", metavar="CELL", help="only this cell (name or uuid)")
    add_list_format(hl)
    hl.set_defaults(func=cmd_host_list)

    explain_capacity.add_parsers(sub)

    chk = sub.add_parser(
        "check",
        help="check that novasched can run with this nova.conf: plugins, ignored options, the "
        "API and cell databases, Placement and its conflict-retry setting, the broker, and "
        "compute nodes against services and providers (exit status 0 OK, 1 warning, 2 failure)",
    )
    chk.add_argument(
        "--placement-config-file",
        metavar="PATH",
        help="Placement's own configuration, for its allocation_conflict_retry_count "
        "(default: /etc/placement/placement.conf if readable)",
    )
    chk.add_argument(
        "--placement-workers",
        type=positive_int,
        metavar="N",
        help="how many API worker processes Placement runs (default: unknown)",
    )
    add_list_format(chk)
    chk.set_defaults(func=cmd_check)

    decisions.add_parsers(sub)
    replay.add_parsers(sub)

    demo = sub.add_parser("demo", help="run the self-contained demo (arguments go to it)")
    demo.set_defaults(func=cmd_demo, demo_args=[])
    _describe(p)
    return p


def _describe(parser: argparse.ArgumentParser) -> None:
    """Every sub-command's own help page starts with what it does (its line in the list of
    sub-commands), as openstack's commands' pages do."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {a.dest: a.help for a in action._choices_actions}
        for name, child in action.choices.items():
            if child.description is None and helps.get(name):
                child.description = helps[name]
            _describe(child)


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("novasched")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def _parse_config(args: argparse.Namespace, *, with_replay_files: bool = True) -> None:
    oslo_args: list[str] = []
    for f in args.config_file or []:
        oslo_args += ["--config-file", f]
    for d in args.config_dir or []:
        oslo_args += ["--config-dir", d]
    # replay's own --config-file: the configuration to try, read last so that it wins
    # (replay parses again without them for its baseline: ``args.reparse``)
    if with_replay_files:
        for f in getattr(args, "replay_config_files", None) or []:
            oslo_args += ["--config-file", f]
    args.reparse = lambda **kw: _parse_config(args, **kw)
    _register_database_opts()
    try:
        CONF(oslo_args, project="nova", validate_default_values=True)
    except cfg.ConfigFilesNotFoundError as exc:
        raise CommandError(f"config file not found: {', '.join(exc.config_files)}")
    except (cfg.Error, SystemExit) as exc:
        raise CommandError(f"bad configuration: {exc}")


def _validate_config() -> None:
    """Refuse a configuration the service would refuse, or that names an option novasched
    does not know in a group it reads, before the command does anything."""
    try:
        unknown = config_check.validate(CONF)
    except config_check.BadConfiguration as exc:
        raise CommandError(f"bad configuration: {exc}")
    for problem in unknown:
        print(f"{PROG}: warning: {problem}: ignored (a plugin's option?)", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return the exit status (0 on success)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    hide_eventlet_deprecation()
    select_service_backend(eventlet=False)
    debug = "--debug" in argv
    # the service logs each down host on every request, as nova does; a command that runs
    # many requests (replay, capacity) would print it hundreds of times, and its answer says
    # which hosts were down (quiet for the command only: main may run in a longer process)
    quiet = logging.getLogger("filters.compute_filter")
    level = quiet.level
    try:
        try:
            args = build_parser().parse_args(_split_demo(argv))
        except SystemExit as exc:  # --help
            return int(exc.code or 0)
        if args.category == "demo":
            # everything after "demo" belongs to the demo, options included
            args.demo_args = argv[len(_split_demo(argv)) :]
        logging.basicConfig(
            level=logging.DEBUG if args.debug else logging.WARNING,
            format="%(levelname)s %(name)s: %(message)s",
        )
        if not args.debug:
            quiet.setLevel(logging.ERROR)
        if args.func is cmd_demo:
            return cmd_demo(args)
        try:
            _parse_config(args)
        except CommandError as exc:
            if args.func is not cmd_check:
                raise
            from scheduler.cmd import check

            return check.config_error(str(exc), args=args)
        try:
            if args.func is not cmd_check:  # check reports what it finds row by row
                _validate_config()
            return args.func(args)
        finally:
            CONF.clear()
    except (CommandError, config_check.UnreadableDatabase) as exc:
        return _fail(str(exc), debug)
    except db.DatabaseError as exc:
        return _fail(str(exc), debug)
    except sa.exc.SQLAlchemyError as exc:
        return _fail(f"database error: {database_error(exc)}", debug)
    except BrokenPipeError:
        # the reader went away (``| head``): nothing left to say to it
        _silence_stdout()
        return 1
    except KeyboardInterrupt:
        return _fail("interrupted", debug, code=130)
    except Exception as exc:  # a one-line report, never a traceback (unless --debug)
        return _fail(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", debug)
    finally:
        quiet.setLevel(level)


def _split_demo(argv: list[str]) -> list[str]:
    """``argv`` up to and including the category when it is ``demo``, else all of it."""
    i = 0
    while i < len(argv):
        token = argv[i]
        if token in ("--config-file", "--config-dir"):
            i += 2
            continue
        if token.startswith("-"):
            i += 1
            continue
        return argv[: i + 1] if token == "demo" else argv
    return argv


def _silence_stdout() -> None:
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _fail(message: str, debug: bool, code: int = 1) -> int:
    if debug:
        import traceback

        traceback.print_exc()
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
