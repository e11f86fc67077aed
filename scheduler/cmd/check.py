"""``novasched-manage check``: is this nova.conf ready for novasched? (as ``nova-status
upgrade check`` is for nova).

Each check is a small function that takes the shared ``CheckContext`` and returns one
``CheckResult`` (name, OK / WARNING / FAILURE, details, and a remedy for anything not OK).
The runner calls them in order, turns any exception a check lets escape into a FAILURE of
that check, and prints a table (or JSON with ``--json``). The exit status is the worst
result: 0 all OK, 1 a warning, 2 a failure. Every network step has a timeout of a few
seconds, so a dead service fails its check quickly instead of hanging the command.

The checks, in order (later ones use what earlier ones found):

1. the enabled filters, the weighers and the ``[scheduler] driver`` load, and
   ``[DEFAULT] servicegroup_driver`` is ``db``;
2. options of our groups the config files set but novasched ignores;
3. the API database and every enabled cell database (a templated URL filled from
   ``[database] connection``, as nova does) answer and have the tables and columns
   novasched reads (``db.queries.READ_COLUMNS``);
4. Placement answers at microversion 1.36 with the configured credentials;
5. Placement's own ``allocation_conflict_retry_count`` is safe for concurrent claims;
6. Placement's own ``max_allocation_candidates`` and
   ``allocation_candidates_generation_strategy`` are the provider view's;
7. the message broker of ``[DEFAULT] transport_url`` answers;
8. every compute node has a nova-compute service record and a resource provider.
"""

from __future__ import annotations

import configparser
import enum
import os
import re
import textwrap
import uuid as uuidlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from oslo_config import cfg
from sqlalchemy.engine import make_url

import db
from db import models
from db.api import normalize_url
from db.queries import READ_COLUMNS
from scheduler.conf import NOVA_ALL_FILTERS, database_connection
from scheduler.demo.fleet import ProgressCallback
from scheduler.servicegroup import servicegroup_driver_problem

# seconds: opening a database or broker connection, one Placement call, one database read
CONNECT_TIMEOUT = 3
HTTP_TIMEOUT = 5.0
READ_TIMEOUT = 15
# listing every resource provider (about 30 MB of JSON at 100,000 providers)
LIST_PROVIDERS_TIMEOUT = 120.0

MIN_MICROVERSION = (1, 36)
DEFAULT_PLACEMENT_CONFIG = "/etc/placement/placement.conf"
PLACEMENT_CONFLICT_RETRY_DEFAULT = 10
# offenders named per cell; the rest are counted
SHOW_OFFENDERS = 5
DETAILS_WIDTH = 76

SCHEMA_REMEDY = (
    "novasched reads nova's schema at the release it follows (nova 34): run nova-manage "
    "api_db sync for the API database and nova-manage db sync for a cell database (a "
    "stand-alone set-up: novasched-manage db sync)."
)


class Status(enum.IntEnum):
    """A check's result; the value is the exit status it asks for."""

    OK = 0
    WARNING = 1
    FAILURE = 2


@dataclass(slots=True)
class CheckResult:
    """What one check found. ``details`` and ``remedy`` may hold several lines."""

    name: str
    status: Status
    details: str
    remedy: str = ""

    @classmethod
    def ok(cls, name: str, details: str) -> CheckResult:
        return cls(name, Status.OK, details)

    @classmethod
    def warning(cls, name: str, details: str, remedy: str) -> CheckResult:
        return cls(name, Status.WARNING, details, remedy)

    @classmethod
    def failure(cls, name: str, details: str, remedy: str) -> CheckResult:
        return cls(name, Status.FAILURE, details, remedy)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status.name,
            "details": self.details,
            "remedy": self.remedy,
        }


@dataclass
class CellInfo:
    """A cell as the database check found it, for the compute-node check."""

    name: str
    uuid: str
    url: str
    engine: sa.Engine | None = None  # None: the database did not answer
    error: str | None = None  # why it cannot be read (no answer, schema incomplete)


@dataclass
class CheckContext:
    """The configuration and options of one run, and what each check leaves to the next."""

    conf: cfg.ConfigOpts
    placement_config_file: str | None = None
    placement_workers: int | None = None
    progress: ProgressCallback | None = None
    # found by the database check: why the API database could not be read (None: it was),
    # and the enabled cells it checked
    api_error: str | None = None
    cells: list[CellInfo] = field(default_factory=list)
    # the Placement client that answered at 1.36 (None: Placement did not), and why not
    placement: Any = None
    placement_error: str | None = None
    _engines: list[sa.Engine] = field(default_factory=list)

    def engine(self, url: str) -> sa.Engine:
        """A throw-away engine for ``url`` with short timeouts (disposed by ``close``)."""
        engine = _check_engine(url)
        self._engines.append(engine)
        return engine

    def report(self, stage: str, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(stage, done, total)

    def close(self) -> None:
        for engine in self._engines:
            engine.dispose()
        self._engines.clear()


Check = Callable[[CheckContext], CheckResult]


# ------------------------------------------------------------------------------- helpers

_URL_CREDENTIALS = re.compile(r"(?<=[/,])([^:/@,?#\s]*):([^@/,\s]*)@")
_URL_SECRET_PARAMS = re.compile(r"(?i)([?&](?:password|passwd|pass|token|secret)=)[^&#\s]*")


def mask_url(url: str | None) -> str:
    """``url`` with every password replaced by ``***``: each ``user:password@`` of a
    (multi-host) URL and password-like query parameters. Works on SQLAlchemy database URLs
    and oslo.messaging transport URLs alike."""
    if not url:
        return ""
    masked = _URL_CREDENTIALS.sub(r"\1:***@", url)
    return _URL_SECRET_PARAMS.sub(r"\1***", masked)


def _first_line(exc: BaseException) -> str:
    """An exception in one line (the driver's message for a database error), with the
    passwords of any URL in it masked."""
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc).strip()
    line = mask_url(text.splitlines()[0] if text else "") or type(exc).__name__
    return line if len(line) <= 300 else line[:297] + "..."


def _check_engine(url: str) -> sa.Engine:
    """An engine that fails fast: connect timeout of ``CONNECT_TIMEOUT``, statements cut at
    ``READ_TIMEOUT`` where the driver allows, no pool. A SQLite file must exist (SQLite
    would create an empty one)."""
    url = normalize_url(url)
    parsed = make_url(url)
    backend, driver = parsed.get_backend_name(), parsed.get_driver_name()
    connect_args: dict[str, Any] = {}
    if backend == "sqlite":
        path = parsed.database or ""
        if path not in ("", ":memory:") and not path.startswith("file:"):
            if not os.path.exists(path):
                raise FileNotFoundError(f"the SQLite database file {path} does not exist")
        connect_args = {"timeout": CONNECT_TIMEOUT}
    elif backend == "mysql" and driver in ("pymysql", "mysqldb"):
        connect_args = {
            "connect_timeout": CONNECT_TIMEOUT,
            "read_timeout": READ_TIMEOUT,
            "write_timeout": READ_TIMEOUT,
        }
    elif backend == "postgresql" and driver in ("psycopg2", "psycopg"):
        connect_args = {
            "connect_timeout": CONNECT_TIMEOUT,
            "options": f"-c statement_timeout={READ_TIMEOUT * 1000}",
        }
    return sa.create_engine(url, poolclass=sa.pool.NullPool, connect_args=connect_args)


def _named(fn: Check, name: str) -> Check:
    fn.check_name = name  # type: ignore[attr-defined]
    return fn


def check(name: str) -> Callable[[Check], Check]:
    """Give a check function the name its row shows (also when it raises)."""
    return lambda fn: _named(fn, name)


def _listing(items: Sequence[str], limit: int = SHOW_OFFENDERS) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


# ------------------------------------------------------------- 1. filters and weighers


def _unknown_plugins(
    kind: str, option: str, exc: Any, details: list[str], remedies: list[str]
) -> None:
    details.append(f"[filter_scheduler] {option}: unknown {kind} name(s) " + ", ".join(exc.names))
    remedies.append(
        f"Use {kind} names that are installed in [filter_scheduler] {option} (or install the "
        f"plugin package that provides them). Available {kind}s: " + ", ".join(exc.available)
    )


@check("Filters, weighers and driver")
def check_plugins(ctx: CheckContext) -> CheckResult:
    """Every ``enabled_filters`` and ``weight_classes`` name loads, and ``[scheduler]
    driver`` names a driver entry point (resolved, not instantiated: a driver connects to
    the databases and Placement when it is made)."""
    from filters.handler import FilterNotAvailable, load_filters
    from scheduler.exceptions import PluginNotFound
    from weighers.handler import load_weighers

    name = check_plugins.check_name  # type: ignore[attr-defined]
    fs = ctx.conf.filter_scheduler
    details: list[str] = []
    remedies: list[str] = []
    status = Status.OK
    available = list(fs.available_filters or [])
    for kind, option, loader in (
        ("filter", "enabled_filters", lambda names: load_filters(names, available)),
        ("weigher", "weight_classes", load_weighers),
    ):
        names = list(getattr(fs, option) or [])
        try:
            loaded = loader(names)
        except FilterNotAvailable as exc:
            status = Status.FAILURE
            if NOVA_ALL_FILTERS in available:
                # every installed filter is available: the name is not one of them
                _unknown_plugins(kind, option, exc, details, remedies)
                continue
            details.append(
                f"[filter_scheduler] {option}: filter(s) not among the classes of "
                "[filter_scheduler] available_filters: " + ", ".join(exc.names)
            )
            remedies.append(
                "Add each filter's class path to [filter_scheduler] available_filters (a "
                "filter written for nova: its module must be importable here), or keep "
                "nova.scheduler.filters.all_filters there for every installed novasched filter."
            )
            continue
        except PluginNotFound as exc:
            status = Status.FAILURE
            _unknown_plugins(kind, option, exc, details, remedies)
            continue
        except Exception as exc:  # a plugin that fails to import or to initialise
            status = Status.FAILURE
            details.append(
                f"[filter_scheduler] {option}: a {kind} failed to load: {_first_line(exc)}"
            )
            remedies.append(f"Fix or remove the {kind} plugin named in the details.")
            continue
        shown = ", ".join(type(p).__name__ for p in loaded) or "none"
        details.append(f"[filter_scheduler] {option}: {len(loaded)} {kind}(s) load: {shown}")
    driver_status, driver_details, driver_remedy = _driver_verdict(ctx.conf)
    status = max(status, driver_status)
    details.append(driver_details)
    if driver_remedy:
        remedies.append(driver_remedy)
    servicegroup_problem = servicegroup_driver_problem(ctx.conf)
    if servicegroup_problem is not None:
        status = Status.FAILURE
        details.append(servicegroup_problem.split(": ", 1)[0] + ": the service refuses to start")
        remedies.append(servicegroup_problem.split(": ", 1)[1])
    return CheckResult(name, status, "\n".join(details), "\n".join(remedies))


def _driver_verdict(conf: cfg.ConfigOpts) -> tuple[Status, str, str]:
    from stevedore import driver as stevedore_driver
    from stevedore import exception as stevedore_exc
    from stevedore import extension as stevedore_extension

    from scheduler.conf import NOVA_DRIVER_CLASS_PATHS
    from scheduler.rpc.service import DRIVER_NAMESPACE

    given = (conf.scheduler.driver or "").strip()
    if not given:
        return (
            Status.FAILURE,
            "[scheduler] driver is empty: the service refuses to start",
            "Set [scheduler] driver = filter_scheduler (nova's default).",
        )
    resolved = NOVA_DRIVER_CLASS_PATHS.get(given.replace(":", "."), given)

    def _raise(_manager: Any, _entrypoint: Any, exc: BaseException) -> None:
        raise exc

    try:
        stevedore_driver.DriverManager(
            DRIVER_NAMESPACE, resolved, invoke_on_load=False, on_load_failure_callback=_raise
        )
    except stevedore_exc.NoMatches:
        available = sorted(stevedore_extension.ExtensionManager(DRIVER_NAMESPACE).names())
        return (
            Status.FAILURE,
            f"[scheduler] driver = {given}: no such scheduler driver",
            "Set [scheduler] driver to one of the available drivers: " + ", ".join(available),
        )
    except Exception as exc:
        return (
            Status.FAILURE,
            f"[scheduler] driver = {given}: the driver failed to load: {_first_line(exc)}",
            "Fix the installation of the driver's package, or choose another driver.",
        )
    if resolved != given:
        return (
            Status.WARNING,
            f"[scheduler] driver = {given} is nova's old class path; it loads {resolved}",
            f"Set [scheduler] driver = {resolved} (the service warns about the old path at "
            "every start).",
        )
    return Status.OK, f"[scheduler] driver = {given} loads", ""


# ------------------------------------------------------------------ 2. ignored options


@check("Ignored options")
def check_ignored_options(ctx: CheckContext) -> CheckResult:
    """Options of ``[scheduler]``, ``[filter_scheduler]``, ``[placement]``, ``[metrics]``
    (and our own groups) that the config files set but novasched does not implement."""
    from scheduler.conf import unsupported_options

    name = check_ignored_options.check_name  # type: ignore[attr-defined]
    unknown = unsupported_options(ctx.conf)
    if not unknown:
        return CheckResult.ok(name, "every option set in novasched's groups is implemented")
    return CheckResult.warning(
        name,
        f"{len(unknown)} option(s) set in the config files have no effect on novasched: "
        + ", ".join(unknown),
        "Remove them, or keep them if nova-scheduler may run with this file again; "
        "etc/novasched.conf.sample lists every option novasched reads.",
    )


# ------------------------------------------------------------------------ 3. databases


def _tables_of(metadata: sa.MetaData) -> dict[str, tuple[str, ...]]:
    return {t: cols for t, cols in READ_COLUMNS.items() if t in metadata.tables}


API_READ_COLUMNS = _tables_of(models.API_METADATA)
CELL_READ_COLUMNS = _tables_of(models.CELL_METADATA)


def schema_problems(engine: sa.Engine, expected: dict[str, tuple[str, ...]]) -> list[str]:
    """The tables (``table x``) and columns (``table.column``) of ``expected`` that the
    database lacks."""
    inspector = sa.inspect(engine)
    present = set(inspector.get_table_names())
    missing: list[str] = []
    for table, columns in expected.items():
        if table not in present:
            missing.append(f"table {table}")
            continue
        have = {c["name"] for c in inspector.get_columns(table)}
        missing.extend(f"{table}.{c}" for c in columns if c not in have)
    return missing


@check("API and cell databases")
def check_databases(ctx: CheckContext) -> CheckResult:
    """``[api_database] connection`` answers with nova's API tables; every enabled cell of
    its cell_mappings (cell0 holds no compute nodes and is left out, as the host manager
    does) answers with nova's cell tables, and every column novasched reads exists."""
    name = check_databases.check_name  # type: ignore[attr-defined]
    url = ctx.conf.api_database.connection
    if not url:
        ctx.api_error = "[api_database] connection is not set"
        return CheckResult.failure(
            name,
            ctx.api_error,
            "Set [api_database] connection to nova's API database (the URL nova-api and "
            "nova-conductor use).",
        )
    try:
        api = ctx.engine(url)
        missing = schema_problems(api, API_READ_COLUMNS)
    except Exception as exc:
        ctx.api_error = f"the API database at {mask_url(url)} does not answer: {_first_line(exc)}"
        return CheckResult.failure(
            name,
            ctx.api_error,
            "Start the database server, or correct [api_database] connection (host, port, "
            "user, password, database name).",
        )
    if missing:
        ctx.api_error = f"the API database at {mask_url(url)} lacks {', '.join(missing)}"
        return CheckResult.failure(name, ctx.api_error, SCHEMA_REMEDY)
    try:
        mappings = db.get_cell_mappings(api, database_connection(ctx.conf))
    except Exception as exc:
        ctx.api_error = f"cell_mappings of {mask_url(url)} cannot be read: {_first_line(exc)}"
        return CheckResult.failure(name, ctx.api_error, SCHEMA_REMEDY)

    details = [
        f"API database {mask_url(url)}: answers, with the tables and columns novasched reads"
    ]
    remedies: list[str] = []
    failed = False
    cells = [m for m in mappings if m["uuid"] != db.CELL0_UUID]
    if len(cells) < len(mappings):
        details.append("cell0: not checked (it holds no compute nodes)")
    enabled = [m for m in cells if not m["disabled"]]
    for m in cells:
        if m["disabled"]:
            details.append(
                f"cell {m['name'] or m['uuid']}: disabled, not checked (not scheduled to)"
            )
    if not enabled:
        failed = True
        details.append("no enabled cell is mapped: there is nothing to schedule to")
        remedies.append(
            "Map a cell: nova-manage cell_v2 create_cell (a stand-alone set-up: "
            "novasched-manage cell create)."
        )
    for done, m in enumerate(enabled, start=1):
        cell = CellInfo(m["name"] or m["uuid"], m["uuid"], m["database_connection"] or "")
        ctx.cells.append(cell)
        label = f"cell {cell.name} ({cell.uuid}) at {mask_url(cell.url) or '(no URL)'}"
        if m.get("template_error"):
            failed = True
            cell.error = m["template_error"]
            details.append(cell.error)
            remedies.append(
                "Set [database] connection in this file to the URL whose parts the template "
                "takes (as nova's services have it), or store the cell's full URL (nova-manage "
                f"cell_v2 update_cell --cell_uuid {cell.uuid} --database_connection URL)."
            )
            ctx.report("checking cell databases", done, len(enabled))
            continue
        try:
            if not cell.url:
                raise ValueError("the cell mapping has no database_connection")
            engine = ctx.engine(cell.url)
            missing = schema_problems(engine, CELL_READ_COLUMNS)
        except Exception as exc:
            failed = True
            cell.error = f"does not answer: {_first_line(exc)}"
            details.append(f"{label} {cell.error}")
            remedies.append(
                f"Start cell {cell.name}'s database server, or correct its database_connection "
                f"(nova-manage cell_v2 update_cell --cell_uuid {cell.uuid} "
                "--database_connection URL)."
            )
        else:
            if missing:
                failed = True
                cell.error = f"lacks {', '.join(missing)}"
                details.append(f"{label} {cell.error}")
                remedies.append(SCHEMA_REMEDY)
            else:
                cell.engine = engine
                details.append(f"{label}: answers, with the tables and columns novasched reads")
        ctx.report("checking cell databases", done, len(enabled))
    remedy = "\n".join(dict.fromkeys(remedies))
    status = Status.FAILURE if failed else Status.OK
    return CheckResult(name, status, "\n".join(details), remedy if failed else "")


# ------------------------------------------------------------------------- 4. Placement

_AUTH_REMEDY = (
    "Check the [placement] credentials: auth_type, auth_url, username, password, "
    "project_name, user_domain_name, project_domain_name (the user needs the admin role in "
    "Placement, as nova's does); with auth_type = noauth2 the token (noauth2_user) must be "
    "admin."
)


def _microversion(text: str) -> tuple[int, int] | None:
    match = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", text or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def _placement_client(conf: cfg.ConfigOpts) -> Any:
    """The scheduler's Placement client from ``[placement]``, with short timeouts (the
    keystoneauth session's, for the token request, and the client's own)."""
    from placement_client.from_conf import client_from_conf

    group = conf.placement
    configured = group.timeout
    timeout = min(float(configured), HTTP_TIMEOUT) if configured else HTTP_TIMEOUT
    conf.set_override("timeout", max(1, int(timeout)), group="placement")
    try:
        client = client_from_conf(conf)
    finally:
        conf.clear_override("timeout", group="placement")
    client.timeout = timeout
    return client


def _is_auth_error(exc: Any) -> bool:
    return getattr(exc, "status", None) in (401, 403) or str(exc).startswith("Keystone refused")


@check("Placement API")
def check_placement(ctx: CheckContext) -> CheckResult:
    """Placement answers ``GET /`` with a maximum microversion of 1.36 or more, and an
    authenticated ``GET /allocation_candidates`` at 1.36 (limited to a tree that does not
    exist, so it costs Placement nothing) succeeds with the configured credentials."""
    from placement_client.api.errors import PlacementConnectionError, PlacementError
    from scheduler.exceptions import ConfigurationError

    name = check_placement.check_name  # type: ignore[attr-defined]
    conf = ctx.conf
    try:
        client = _placement_client(conf)
    except ConfigurationError as exc:
        ctx.placement_error = "the [placement] options do not make a client"
        return CheckResult.failure(
            name,
            str(exc),
            "Set [placement] auth_type = password with auth_url, username, password, "
            "project_name and the domains (as nova-scheduler has them), or auth_type = "
            "noauth2 with endpoint_override for a Placement running auth_strategy = noauth2.",
        )
    where = client.endpoint or "the Keystone catalog's placement endpoint"
    down_remedy = (
        "Start Placement, or point [placement] at it: endpoint_override, or the Keystone "
        "catalog's placement endpoint with valid_interfaces and region_name."
    )
    if conf.placement.auth_type not in (None, "", "noauth2", "none", "noauth"):
        down_remedy += " Keystone must answer at [placement] auth_url too."
    try:
        max_version = client.version()
    except PlacementConnectionError as exc:
        ctx.placement_error = f"Placement does not answer at {where}"
        return CheckResult.failure(name, f"{ctx.placement_error}: {exc.message}", down_remedy)
    except PlacementError as exc:
        ctx.placement_error = f"Placement at {where} refused GET /"
        auth = _is_auth_error(exc)
        remedy = _AUTH_REMEDY if auth else down_remedy
        return CheckResult.failure(name, f"{ctx.placement_error}: {exc}", remedy)
    mv = _microversion(max_version)
    if mv is None:
        ctx.placement_error = f"{where} did not answer with a Placement version document"
        return CheckResult.failure(
            name,
            f"{ctx.placement_error} (max_version {max_version!r})",
            "Point [placement] at Placement's endpoint (its root answers the version document).",
        )
    if mv < MIN_MICROVERSION:
        ctx.placement_error = f"Placement at {where} is older than Ussuri/1.36"
        return CheckResult.failure(
            name,
            f"Placement older than Ussuri/1.36: Placement at {where} supports microversions up "
            f"to {max_version}; novasched (like nova 34) asks for 1.36",
            "Upgrade Placement to Ussuri (openstack-placement 3.0.0) or newer.",
        )
    query = f"resources=VCPU:1&in_tree={uuidlib.uuid4()}&limit=1"
    try:
        client.get_allocation_candidates(query)
    except PlacementConnectionError as exc:
        ctx.placement_error = f"Placement does not answer at {where}"
        return CheckResult.failure(name, f"{ctx.placement_error}: {exc.message}", down_remedy)
    except PlacementError as exc:
        ctx.placement_error = f"Placement at {where} refused an authenticated call"
        auth = _is_auth_error(exc)
        return CheckResult.failure(
            name,
            f"GET /allocation_candidates at 1.36 failed: {exc}",
            _AUTH_REMEDY if auth else "See Placement's log for the request id in the details.",
        )
    ctx.placement = client
    auth_type = conf.placement.auth_type or "noauth2"
    return CheckResult.ok(
        name,
        f"Placement at {where} supports microversions up to {max_version} (1.36 needed); "
        f"an authenticated GET /allocation_candidates at 1.36 succeeded ({auth_type})",
    )


# -------------------------------------------------------------- 5. conflict retries


def _read_ini(path: str) -> configparser.RawConfigParser:
    """Placement's config file, parsed (OSError: not readable; ValueError: not an ini)."""
    parser = configparser.RawConfigParser(strict=False, default_section="\0none")
    with open(path, encoding="utf-8") as fh:
        try:
            parser.read_file(fh)
        except configparser.Error as exc:
            raise ValueError(f"{path} is not an ini file: {exc}") from exc
    return parser


def read_placement_config(path: str) -> tuple[int, bool, str | None]:
    """Placement's ``[placement] allocation_conflict_retry_count`` (and whether it is the
    default) and ``[placement_database] connection`` from its config file. Raises OSError
    for a file that cannot be read, ValueError for one that cannot be parsed."""
    parser = _read_ini(path)
    raw = None
    if parser.has_option("placement", "allocation_conflict_retry_count"):
        raw = parser.get("placement", "allocation_conflict_retry_count").strip()
    try:
        value = PLACEMENT_CONFLICT_RETRY_DEFAULT if raw in (None, "") else int(raw)
    except ValueError:
        raise ValueError(f"allocation_conflict_retry_count = {raw!r} is not an integer")
    connection = None
    if parser.has_option("placement_database", "connection"):
        connection = parser.get("placement_database", "connection").strip() or None
    return value, raw in (None, ""), connection


# Placement's options that change its allocation candidates, and their defaults; novasched
# repeats them under the same names in its own [placement] group for the provider view
CANDIDATE_OPTIONS = {
    "max_allocation_candidates": "-1",
    "allocation_candidates_generation_strategy": "depth-first",
}


def read_candidate_options(path: str) -> dict[str, str]:
    """Placement's own ``CANDIDATE_OPTIONS`` from its config file (its defaults where unset).
    Raises OSError for a file that cannot be read, ValueError for one that cannot be
    parsed."""
    parser = _read_ini(path)
    found = dict(CANDIDATE_OPTIONS)
    for name in CANDIDATE_OPTIONS:
        if parser.has_option("placement", name):
            found[name] = parser.get("placement", name).strip() or CANDIDATE_OPTIONS[name]
    return found


def conflict_retry_status(value: int, backend: str | None, placement_workers: int | None) -> Status:
    """The rule: OK when Placement retries at most once (the race comes back as a 409 the
    scheduler retries), when it runs on SQLite (one worker), or when it runs one API
    worker; FAILURE when it retries more on MariaDB/PostgreSQL with several (or an unknown
    number of) workers; WARNING when the database backend is unknown."""
    if value <= 1 or backend == "sqlite" or placement_workers == 1:
        return Status.OK
    if backend in ("mysql", "postgresql"):
        return Status.FAILURE
    return Status.WARNING


def _backend_of(url: str | None) -> str | None:
    if not url:
        return None
    try:
        return make_url(url).get_backend_name()
    except Exception:
        return None


@check("Placement conflict retries")
def check_conflict_retries(ctx: CheckContext) -> CheckResult:
    """Placement's own ``[placement] allocation_conflict_retry_count`` (a server setting the
    API does not show), read from Placement's config file."""
    name = check_conflict_retries.check_name  # type: ignore[attr-defined]
    conf = ctx.conf
    workers = conf.scheduler.workers or os.cpu_count() or 1
    who = (
        f"{workers} novasched scheduler worker(s) ([scheduler] workers"
        + (")" if conf.scheduler.workers else ", default: the CPU count)")
        + " claim concurrently, each retrying a 409 placement.concurrent_update up to "
        f"[placement] claim_retries = {conf.placement.claim_retries} time(s)"
    )
    path = ctx.placement_config_file
    if path is None and os.access(DEFAULT_PLACEMENT_CONFIG, os.R_OK):
        path = DEFAULT_PLACEMENT_CONFIG
    placement_workers = ctx.placement_workers
    workers_text = (
        f"{placement_workers} (--placement-workers)"
        if placement_workers
        else "unknown (give --placement-workers N)"
    )
    unread_remedy = (
        "Pass Placement's configuration with --placement-config-file, or make sure "
        "Placement's [placement] allocation_conflict_retry_count is 1 when it runs several "
        "API workers on MariaDB or PostgreSQL."
    )
    if path is None:
        problem = (
            "Placement's configuration could not be read "
            f"({DEFAULT_PLACEMENT_CONFIG} is not readable)"
        )
    else:
        try:
            value, is_default, connection = read_placement_config(path)
            problem = None
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            problem = f"Placement's configuration could not be read from {path}: {reason}"
    if problem is not None:
        if placement_workers == 1:
            return CheckResult.ok(
                name, f"{problem}; with one Placement API worker the setting does not matter. {who}"
            )
        return CheckResult.warning(name, f"{problem}.\n{who}", unread_remedy)
    backend = _backend_of(connection)
    backend_text = {"mysql": "MariaDB/MySQL", "postgresql": "PostgreSQL", "sqlite": "SQLite"}.get(
        backend or "", "unknown"
    )
    details = (
        f"{path}: [placement] allocation_conflict_retry_count = {value}"
        + (" (the default)" if is_default else "")
        + f"; Placement database: {backend_text}"
        + (
            f" ({mask_url(connection)})"
            if connection
            else " ([placement_database] connection unset)"
        )
        + f"; Placement API workers: {workers_text}.\n{who}"
    )
    status = conflict_retry_status(value, backend, placement_workers)
    if status is Status.OK:
        return CheckResult.ok(name, details)
    if status is Status.FAILURE:
        return CheckResult.failure(
            name,
            details,
            f"Set [placement] allocation_conflict_retry_count = 1 in {path} and restart "
            f"Placement: with several API workers on {backend_text} and a value above 1, "
            "Placement itself over-commits a provider under simultaneous claims; with 1 the "
            "race comes back as 409 placement.concurrent_update, which novasched retries "
            "([placement] claim_retries). If Placement runs one API worker, say so with "
            "--placement-workers 1.",
        )
    return CheckResult.warning(
        name,
        details,
        f"Set [placement_database] connection in {path} (or pass the file Placement really "
        "reads), and allocation_conflict_retry_count = 1 if it runs several API workers on "
        "MariaDB or PostgreSQL.",
    )


# ------------------------------------------------------------------------ 6. the broker

_RABBIT_DRIVERS = ("rabbit", "kombu")


def _rabbit_answers(host: Any, virtual_host: str, ssl: bool) -> str | None:
    """None if the broker ``host`` (a TransportHost) accepts an AMQP login, else why not."""
    import kombu

    connection = kombu.Connection(
        hostname=host.hostname or "localhost",
        port=host.port or 5672,
        userid=host.username or "guest",
        password=host.password or "guest",
        virtual_host=virtual_host or "/",
        ssl=ssl,
        connect_timeout=CONNECT_TIMEOUT,
        transport="pyamqp",
    )
    try:
        connection.ensure_connection(
            max_retries=1, interval_start=0.5, interval_step=0.5, interval_max=1
        )
        return None
    except Exception as exc:
        return _first_line(exc)
    finally:
        connection.release()


@check("Message broker")
def check_broker(ctx: CheckContext) -> CheckResult:
    """``[DEFAULT] transport_url``: every RabbitMQ host of it accepts a login."""
    import oslo_messaging

    name = check_broker.check_name  # type: ignore[attr-defined]
    try:
        url = oslo_messaging.TransportURL.parse(ctx.conf)
        raw = ctx.conf.transport_url or ""
    except Exception as exc:
        return CheckResult.failure(
            name,
            f"[DEFAULT] transport_url cannot be read: {_first_line(exc)}",
            "Set [DEFAULT] transport_url = rabbit://USER:PASSWORD@HOST:5672/VHOST, the broker "
            "nova-conductor uses.",
        )
    shown = mask_url(raw)
    if url.transport == "fake":
        return CheckResult.ok(
            name, f"{shown}: oslo.messaging's in-process transport, nothing to connect to"
        )
    if url.transport not in _RABBIT_DRIVERS:
        return CheckResult.warning(
            name,
            f"{shown}: the {url.transport} driver is not checked (only RabbitMQ is)",
            "Make sure the broker answers and that nova-conductor uses the same one.",
        )
    hosts = list(url.hosts)
    defaulted = not hosts
    if defaulted:
        hosts = [oslo_messaging.TransportHost(hostname="localhost", port=5672)]
    ssl = str(url.query.get("ssl", "")).lower() in ("1", "true", "yes", "on")
    dead: list[str] = []
    alive: list[str] = []
    for host in hosts:
        where = f"{host.hostname or 'localhost'}:{host.port or 5672}"
        error = _rabbit_answers(host, url.virtual_host or "/", ssl)
        if error is None:
            alive.append(where)
        else:
            dead.append(f"{where}: {error}")
    prefix = shown + (
        " ([DEFAULT] transport_url is not set: oslo.messaging's default)" if defaulted else ""
    )
    remedy = (
        "Start RabbitMQ, or correct [DEFAULT] transport_url (hosts, ports, user, password, "
        "virtual host); novasched must use nova-conductor's broker and exchange "
        "([DEFAULT] control_exchange, nova)."
    )
    if not dead:
        return CheckResult.ok(name, f"{prefix}: the broker answers at {', '.join(alive)}")
    if not alive:
        return CheckResult.failure(
            name, f"{prefix}: no broker host answers: " + "; ".join(dead), remedy
        )
    return CheckResult.warning(
        name,
        f"{prefix}: {', '.join(alive)} answer(s); not answering: " + "; ".join(dead),
        remedy,
    )


# ------------------------------------------------- 7. compute nodes, services, providers

_NO_PROVIDER_REMEDY = (
    "Restart nova-compute on each host listed so that it reports its compute node to "
    "Placement (it creates the resource provider with the compute node's uuid); for a host "
    "that is gone, delete its compute service (openstack compute service delete ID), which "
    "deletes its compute nodes."
)
_NO_SERVICE_REMEDY = (
    "A compute node without a nova-compute service record is stale: start nova-compute on "
    "that host so it registers, or, if the host is gone, soft-delete the stale compute node "
    "(UPDATE compute_nodes SET deleted = id, deleted_at = NOW() WHERE uuid = '...')."
)


def _node_label(node: Any) -> str:
    return f"{node.host} (node {node.hypervisor_hostname}, uuid {node.uuid})"


@check("Compute nodes, services and providers")
def check_compute_nodes(ctx: CheckContext) -> CheckResult:
    """Every live compute node of every enabled cell that answered has a live nova-compute
    service record on its host and a resource provider of its uuid in Placement. Cells and
    Placement that failed their own check are skipped here (a warning: the failure is
    reported once, above)."""
    name = check_compute_nodes.check_name  # type: ignore[attr-defined]
    if ctx.api_error is not None:
        return CheckResult.warning(
            name,
            "skipped: the API database could not be read (see above)",
            "Fix the API database first, then run the check again.",
        )
    skipped = [f"cell {c.name}: skipped, its database {c.error}" for c in ctx.cells if c.error]
    readable = [c for c in ctx.cells if c.engine is not None]
    providers: set[str] | None = None
    details: list[str] = []
    remedies: list[str] = []
    failed = False
    if ctx.placement is None:
        skipped.append(
            "resource providers: not compared, Placement did not answer the check above"
            + (f" ({ctx.placement_error})" if ctx.placement_error else "")
        )
    else:
        try:
            ctx.placement.timeout = LIST_PROVIDERS_TIMEOUT
            providers = {p["uuid"] for p in ctx.placement.list_providers()}
            details.append(f"Placement: {len(providers)} resource provider(s)")
        except Exception as exc:
            failed = True
            details.append(f"Placement: GET /resource_providers failed: {_first_line(exc)}")
            remedies.append("See Placement's log; the Placement API check above answered.")
    for done, cell in enumerate(readable, start=1):
        assert cell.engine is not None
        try:
            nodes = db.get_compute_nodes(cell.engine)
            service_hosts = {s.host for s in db.get_compute_services(cell.engine)}
        except Exception as exc:
            failed = True
            details.append(f"cell {cell.name}: compute nodes cannot be read: {_first_line(exc)}")
            remedies.append("See the database check above; run the check again.")
            continue
        no_service = [n for n in nodes if n.host not in service_hosts]
        no_provider = (
            [] if providers is None else [n for n in nodes if not n.uuid or n.uuid not in providers]
        )
        for missing, what, remedy in (
            (no_provider, "resource provider in Placement", _NO_PROVIDER_REMEDY),
            (no_service, "nova-compute service record", _NO_SERVICE_REMEDY),
        ):
            if missing:
                failed = True
                details.append(
                    f"cell {cell.name}: {len(missing)} of {len(nodes)} compute node(s) have no "
                    f"{what}: " + _listing([_node_label(n) for n in missing])
                )
                remedies.append(remedy)
        if not no_provider and not no_service:
            what = "a nova-compute service" + (
                " and a resource provider" if providers is not None else ""
            )
            details.append(f"cell {cell.name}: {len(nodes)} compute node(s), each with {what}")
        ctx.report("checking compute nodes", done, len(readable))
    details.extend(skipped)
    if failed:
        return CheckResult.failure(name, "\n".join(details), "\n".join(dict.fromkeys(remedies)))
    if skipped:
        return CheckResult.warning(
            name,
            "\n".join(details),
            "Fix what the checks above report, then run the check again.",
        )
    return CheckResult.ok(name, "\n".join(details))


# ----------------------------------------------------------------------------- runner


@check("Placement's candidate options")
def check_candidate_options(ctx: CheckContext) -> CheckResult:
    """novasched's ``[placement] max_allocation_candidates`` and
    ``allocation_candidates_generation_strategy`` equal Placement's own (read from its config
    file: the API does not show them), so that the provider view stops where Placement stops."""
    name = check_candidate_options.check_name  # type: ignore[attr-defined]
    opts = ctx.conf.placement
    ours = {n: str(getattr(opts, n)) for n in CANDIDATE_OPTIONS}
    shown = ", ".join(f"{n} = {v}" for n, v in ours.items())
    feed = opts.view_feed
    if feed == "none" or (feed == "auto" and not opts.view_database_connection):
        return CheckResult.ok(
            name, "the provider view is off ([placement] view_feed): Placement answers every query"
        )
    path = ctx.placement_config_file
    if path is None and os.access(DEFAULT_PLACEMENT_CONFIG, os.R_OK):
        path = DEFAULT_PLACEMENT_CONFIG
    remedy = (
        "Pass Placement's configuration with --placement-config-file, or make sure novasched's "
        "[placement] max_allocation_candidates and allocation_candidates_generation_strategy "
        "are Placement's own (placement.conf, same names)."
    )
    if path is None:
        return CheckResult.warning(
            name,
            f"cannot be confirmed: Placement's configuration could not be read "
            f"({DEFAULT_PLACEMENT_CONFIG} is not readable). The provider view uses {shown}.",
            remedy,
        )
    try:
        theirs = read_candidate_options(path)
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return CheckResult.warning(
            name,
            f"cannot be confirmed: Placement's configuration could not be read from {path}: "
            f"{reason}. The provider view uses {shown}.",
            remedy,
        )
    differ = [n for n in CANDIDATE_OPTIONS if theirs[n] != ours[n]]
    if not differ:
        return CheckResult.ok(name, f"{path}: {shown}, as novasched's [placement]")
    details = "; ".join(
        f"Placement's {n} = {theirs[n]}, novasched's {n} = {ours[n]}" for n in differ
    )
    return CheckResult.warning(
        name,
        f"{path}: {details}: the provider view would not stop where Placement stops",
        "Set in novasched's [placement]: "
        + ", ".join(f"{n} = {theirs[n]}" for n in differ)
        + " (Placement's values).",
    )


CHECKS: tuple[Check, ...] = (
    check_plugins,
    check_ignored_options,
    check_databases,
    check_placement,
    check_conflict_retries,
    check_candidate_options,
    check_broker,
    check_compute_nodes,
)


def run_checks(ctx: CheckContext, checks: Sequence[Check] = CHECKS) -> list[CheckResult]:
    """Run ``checks`` in order; a check that raises is a FAILURE of that check."""
    results: list[CheckResult] = []
    try:
        for fn in checks:
            name = getattr(fn, "check_name", fn.__name__)
            try:
                results.append(fn(ctx))
            except Exception as exc:
                results.append(
                    CheckResult.failure(
                        name,
                        f"the check could not run: {type(exc).__name__}: {_first_line(exc)}",
                        "Run novasched-manage --debug ... check for the traceback, and "
                        "report it if the configuration is right.",
                    )
                )
    finally:
        ctx.close()
        if ctx.progress is not None:
            close = getattr(ctx.progress, "close", None)
            if close is not None:
                close()
    return results


def exit_status(results: Iterable[CheckResult]) -> int:
    """0 when every result is OK, 1 when the worst is a warning, 2 when one failed."""
    return int(max((r.status for r in results), default=Status.OK))


def _wrap(text: str, first: str = "") -> list[str]:
    lines: list[str] = []
    for i, paragraph in enumerate(text.splitlines() or [""]):
        lines.extend(
            textwrap.wrap(
                (first if i == 0 else "") + paragraph,
                width=DETAILS_WIDTH,
                subsequent_indent="  ",
                break_on_hyphens=False,
                break_long_words=False,
            )
            or [""]
        )
    return lines


def render_table(results: Sequence[CheckResult]) -> str:
    """The results as a table (Check | Result | Details, with the remedy under the details
    of every warning and failure) and a summary line."""
    from scheduler.cmd import text_table

    rows: list[list[str]] = []
    for i, r in enumerate(results):
        if i:
            rows.append(["", "", ""])
        lines = _wrap(r.details)
        if r.status is not Status.OK and r.remedy:
            lines += _wrap(r.remedy, first="Remedy: ")
        rows.append([r.name, r.status.name, lines[0]])
        rows.extend(["", "", line] for line in lines[1:])
    counts = {s: sum(1 for r in results if r.status is s) for s in Status}
    summary = f"{len(results)} checks: " + ", ".join(f"{counts[s]} {s.name}" for s in Status)
    return text_table(["Check", "Result", "Details"], rows) + "\n\n" + summary


def document(results: Sequence[CheckResult]) -> dict[str, Any]:
    """The results as one document: ``{"status", "exit_status", "checks": [{name, status,
    details, remedy}]}``."""
    code = exit_status(results)
    return {
        "status": Status(code).name,
        "exit_status": code,
        "checks": [r.to_dict() for r in results],
    }


# the columns of ``-f csv|value`` and ``-c``: one row per check, the remedy in its own column
COLUMNS = ["Check", "Result", "Details", "Remedy"]


def rows(results: Sequence[CheckResult]) -> list[list[str]]:
    """One row per check under COLUMNS."""
    return [[r.name, r.status.name, r.details, r.remedy or ""] for r in results]


def emit(results: Sequence[CheckResult], args: Any = None) -> str:
    """The results in the format ``args`` asks for (``-f``, ``-c``, ``--json``; None: the
    table)."""
    if args is None:
        return render_table(results)
    from scheduler.cmd import emit_document

    return emit_document(
        args, document(results), lambda: render_table(results), COLUMNS, rows(results)
    )


def main(
    conf: cfg.ConfigOpts,
    *,
    placement_config_file: str | None = None,
    placement_workers: int | None = None,
    args: Any = None,
    progress: ProgressCallback | None = None,
) -> int:
    """Run every check on the parsed ``conf``, print the results in the format ``args``
    asks for, return the exit status."""
    ctx = CheckContext(
        conf,
        placement_config_file=placement_config_file,
        placement_workers=placement_workers,
        progress=progress,
    )
    results = run_checks(ctx)
    print(emit(results, args))
    return exit_status(results)


def config_error(message: str, *, args: Any = None) -> int:
    """Report config files that cannot be read as the one failed check; return 2."""
    result = CheckResult.failure(
        "Configuration files",
        message,
        "Give nova.conf with --config-file (it must exist and parse).",
    )
    print(emit([result], args))
    return exit_status([result])
