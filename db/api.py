"""Engines, schema creation and the few writes novasched-manage makes.

Engines are cached per URL for the life of the process (one pool per cell database), with
short connect timeouts so that a dead cell fails fast instead of stalling a request.
"""

from __future__ import annotations

import datetime
import logging
import re
import string
import threading
import urllib.parse
import uuid as uuidlib
from typing import Any, Literal

import sqlalchemy as sa
from oslo_utils import timeutils
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.pool import StaticPool

from db import models

LOG = logging.getLogger(__name__)

CELL0_UUID = "00000000-0000-0000-0000-000000000000"
CELL0_NAME = "cell0"

_ENGINES: dict[str, Engine] = {}
_ENGINES_LOCK = threading.Lock()
_DB_NAME_RE = re.compile(r"^[A-Za-z0-9_]{1,63}$")


class DatabaseError(Exception):
    """A database cannot be reached or a write was refused; the message says which."""


def normalize_url(url: str) -> str:
    """Pick the driver nova deployments use when a URL names none (``mysql://`` → pymysql)."""
    parsed = make_url(url)
    if parsed.drivername == "mysql":
        parsed = parsed.set(drivername="mysql+pymysql")
    elif parsed.drivername == "postgres":
        parsed = parsed.set(drivername="postgresql")
    return parsed.render_as_string(hide_password=False)


def get_engine(url: str, *, connect_timeout: float = 5.0) -> Engine:
    """The process-wide engine for ``url`` (created on first use)."""
    url = normalize_url(url)
    engine = _ENGINES.get(url)
    if engine is not None:
        return engine
    with _ENGINES_LOCK:
        engine = _ENGINES.get(url)
        if engine is None:
            engine = _create_engine(url, connect_timeout)
            _ENGINES[url] = engine
    return engine


def _create_engine(url: str, connect_timeout: float) -> Engine:
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        in_memory = parsed.database in (None, "", ":memory:")
        kwargs: dict[str, Any] = {
            # cell reads run on worker threads; SQLite's own locking keeps it safe
            "connect_args": {"check_same_thread": False, "timeout": 30},
        }
        if in_memory:
            # one shared connection, or every thread would see its own empty database
            kwargs["poolclass"] = StaticPool
        engine = sa.create_engine(url, **kwargs)
        if not in_memory:
            sa.event.listen(engine, "connect", _sqlite_on_connect)
        return engine
    if backend == "mysql":
        return sa.create_engine(
            url,
            pool_pre_ping=True,
            pool_recycle=3600,
            connect_args={"connect_timeout": max(1, int(connect_timeout))},
        )
    if backend == "postgresql":
        return sa.create_engine(
            url,
            pool_pre_ping=True,
            pool_recycle=3600,
            connect_args={"connect_timeout": max(1, int(connect_timeout))},
        )
    return sa.create_engine(url, pool_pre_ping=True)


def _sqlite_on_connect(dbapi_conn: Any, _record: Any) -> None:
    # WAL lets the scheduler read while novasched-manage (or a test) writes
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


def dispose_engines() -> None:
    """Close every cached engine (tests, and before a fork)."""
    with _ENGINES_LOCK:
        for engine in _ENGINES.values():
            engine.dispose()
        _ENGINES.clear()


def _as_engine(engine_or_url: Engine | str) -> Engine:
    return get_engine(engine_or_url) if isinstance(engine_or_url, str) else engine_or_url


def create_schema(engine_or_url: Engine | str, which: Literal["api", "cell"] = "api") -> None:
    """Create nova's API or cell tables that are missing (idempotent)."""
    if which not in ("api", "cell"):
        raise ValueError(f"which must be 'api' or 'cell', not {which!r}")
    metadata = models.API_METADATA if which == "api" else models.CELL_METADATA
    engine = _as_engine(engine_or_url)
    try:
        metadata.create_all(engine, checkfirst=True)
    except sa.exc.OperationalError as exc:
        raise DatabaseError(f"cannot create the {which} schema at {_safe(engine)}: {exc.orig}")


def _safe(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=True)


# ------------------------------------------------------------- templated cell URLs


class CellUrlTemplateError(ValueError):
    """A cell mapping's URL is a template (``{hostname}``, ``{password}``, ...) that this
    process cannot fill; ``variable`` names the first field it could not fill."""

    def __init__(self, variable: str, reason: str):
        super().__init__(f"{{{variable}}}: {reason}")
        self.variable = variable
        self.reason = reason


# the fields nova fills from the reader's own URL (nova/objects/cell_mapping.py); a
# multi-host URL (oslo.messaging's ``user:pass@h1:p1,user:pass@h2:p2``) adds ``username1``,
# ``hostname1``, ... per host
CELL_URL_FIELDS = (
    "scheme",
    "username",
    "password",
    "hostname",
    "port",
    "path",
    "query",
    "fragment",
)


def _netloc_values(netloc: str) -> dict[str, Any]:
    """``user:pass@host:port`` -> its parts, the way nova splits one host of a multi-host URL
    (an IPv6 address with a port in brackets, one without a port bare)."""
    userpass, hostport = netloc.split("@", 1) if "@" in netloc else ("", netloc)
    host: str | None
    port: Any = None
    if not hostport:
        host = None
    elif hostport.startswith("["):
        host, rest = hostport[1:].split("]")  # a second "]" fails, as in nova
        if ":" in rest:
            port = int(rest.split(":")[1])
    elif hostport.count(":") == 1:
        host, port_text = hostport.split(":")
        port = int(port_text)
    else:
        host = hostport
    username, _, password = userpass.partition(":")
    return {
        "username": username,
        "password": password if ":" in userpass else None,
        "hostname": host,
        "port": port,
    }


def _template_values(reader_url: str) -> dict[str, Any]:
    parts = urllib.parse.urlparse(reader_url)
    values: dict[str, Any] = {
        "username": parts.username,
        "password": parts.password,
        "hostname": parts.hostname,
        "port": parts.port,
        "scheme": parts.scheme,
        "query": parts.query,
        "fragment": parts.fragment,
        "path": parts.path.lstrip("/"),
    }
    if "," in parts.netloc:
        for index, netloc in enumerate(parts.netloc.split(","), start=1):
            for key, value in _netloc_values(netloc).items():
                values[f"{key}{index}"] = value
    return values


def format_cell_url(url: str, reader_url: str | None) -> str:
    """A cell mapping's URL as nova's CellMapping reads it: a template's ``{fields}`` are
    filled from ``reader_url``, the reading service's own URL (``[database] connection``
    for a database_connection, ``[DEFAULT] transport_url`` for a transport_url), exactly as
    nova fills them (``str.format``; a part the reader's URL lacks becomes ``None``, as in
    nova). A URL that is not a format string at all (a lone brace in a password) is used as
    stored, as nova does. Raises CellUrlTemplateError for a template that cannot be filled:
    no ``reader_url``, a field nova does not know, a reader URL that cannot be parsed (where
    nova logs an error and then uses the template itself as the URL)."""
    try:
        fields = [name for _, name, _, _ in string.Formatter().parse(url) if name is not None]
    except ValueError:
        return url
    if not reader_url:
        if fields:
            raise CellUrlTemplateError(fields[0], "the template needs this process's own URL")
        return url
    try:
        # nova formats every URL once the reader has one ("{{" is an escaped brace)
        return url.format(**_template_values(reader_url))
    except KeyError as exc:
        raise CellUrlTemplateError(
            str(exc.args[0]),
            "not a field nova fills (use "
            + ", ".join("{" + f + "}" for f in CELL_URL_FIELDS)
            + ", or username1, hostname1, ... of a multi-host URL)",
        ) from None
    except (ValueError, IndexError, AttributeError, TypeError) as exc:
        if not fields:
            return url  # nova logs the failure and uses the URL as stored
        raise CellUrlTemplateError(fields[0], f"cannot be filled: {exc}") from None


# ----------------------------------------------------------------- databases on a server


def _server_engine(server_url: str) -> tuple[Engine, str]:
    parsed = make_url(normalize_url(server_url))
    backend = parsed.get_backend_name()
    if backend == "mysql":
        admin = parsed.set(database=None)
    elif backend == "postgresql":
        admin = parsed.set(database="postgres")
    else:
        raise ValueError(f"creating databases is only for MySQL/MariaDB or PostgreSQL: {backend}")
    engine = sa.create_engine(
        admin.render_as_string(hide_password=False),
        isolation_level="AUTOCOMMIT",
        poolclass=sa.pool.NullPool,
        connect_args={"connect_timeout": 5},
    )
    return engine, backend


def database_url(server_url: str, name: str) -> str:
    """The URL of database ``name`` on the server of ``server_url``."""
    parsed = make_url(normalize_url(server_url)).set(database=name)
    return parsed.render_as_string(hide_password=False)


def ensure_database(server_url: str, name: str) -> str:
    """Create database ``name`` on a MariaDB/PostgreSQL server if missing; return its URL."""
    if not _DB_NAME_RE.match(name):
        raise ValueError(f"invalid database name {name!r}: use letters, digits and _")
    engine, backend = _server_engine(server_url)
    try:
        with engine.connect() as conn:
            if backend == "mysql":
                conn.exec_driver_sql(
                    f"CREATE DATABASE IF NOT EXISTS `{name}` CHARACTER SET utf8mb4"
                )
            else:
                exists = conn.execute(
                    sa.text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}
                ).first()
                if not exists:
                    conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    finally:
        engine.dispose()
    return database_url(server_url, name)


def drop_database(server_url: str, name: str) -> None:
    """Drop database ``name`` (and dispose our engines on it) if it exists."""
    if not _DB_NAME_RE.match(name):
        raise ValueError(f"invalid database name {name!r}: use letters, digits and _")
    target = database_url(server_url, name)
    with _ENGINES_LOCK:
        engine = _ENGINES.pop(target, None)
    if engine is not None:
        engine.dispose()
    admin, backend = _server_engine(server_url)
    try:
        with admin.connect() as conn:
            if backend == "mysql":
                conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{name}`")
            else:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.dispose()


# ---------------------------------------------------------------------------- API writes


def create_cell_mapping(
    api_engine: Engine,
    *,
    name: str,
    database_connection: str,
    transport_url: str = "none:///",
    uuid: str | None = None,
    disabled: bool = False,
) -> dict[str, Any]:
    """Insert a cell mapping, as ``nova-manage cell_v2 create_cell`` does; return it.

    Raises DatabaseError if a cell with the same uuid or name already exists.
    """
    cell_uuid = uuid or str(uuidlib.uuid4())
    t = models.cell_mappings
    with api_engine.begin() as conn:
        clash = conn.execute(
            sa.select(t.c.uuid, t.c.name).where(sa.or_(t.c.uuid == cell_uuid, t.c.name == name))
        ).first()
        if clash is not None:
            raise DatabaseError(
                f"a cell named {clash.name!r} with uuid {clash.uuid} already exists"
            )
        now = timeutils.utcnow()
        conn.execute(
            t.insert().values(
                uuid=cell_uuid,
                name=name,
                transport_url=transport_url,
                database_connection=database_connection,
                disabled=disabled,
                created_at=now,
            )
        )
    return {
        "uuid": cell_uuid,
        "name": name,
        "transport_url": transport_url,
        "database_connection": database_connection,
        "disabled": disabled,
    }


def ensure_cell0(api_engine: Engine, database_connection: str) -> bool:
    """Map cell0 (uuid all zeros) unless it is mapped already; True if it was created."""
    t = models.cell_mappings
    with api_engine.connect() as conn:
        if conn.execute(sa.select(t.c.id).where(t.c.uuid == CELL0_UUID)).first():
            return False
    create_cell_mapping(
        api_engine,
        name=CELL0_NAME,
        database_connection=database_connection,
        transport_url="none:///",
        uuid=CELL0_UUID,
    )
    return True


def map_hosts(api_engine: Engine, cell_uuid: str, hosts: list[str]) -> int:
    """Map ``hosts`` to the cell (like discover_hosts); hosts already mapped are left alone.

    Returns the number of new mappings.
    """
    cm, hm = models.cell_mappings, models.host_mappings
    with api_engine.begin() as conn:
        cell_id = conn.execute(sa.select(cm.c.id).where(cm.c.uuid == cell_uuid)).scalar()
        if cell_id is None:
            raise DatabaseError(f"no cell with uuid {cell_uuid}")
        existing: set[str] = set()
        for chunk in chunked(sorted(set(hosts))):
            existing.update(
                conn.execute(sa.select(hm.c.host).where(hm.c.host.in_(chunk))).scalars()
            )
        now = timeutils.utcnow()
        rows = [
            {"cell_id": cell_id, "host": h, "created_at": now}
            for h in sorted(set(hosts) - existing)
        ]
        if rows:
            conn.execute(hm.insert(), rows)
    return len(rows)


class HostMappingExists(DatabaseError):
    """Another discovery mapped the host meanwhile (nova's HostMappingExists)."""


def discover_cell_hosts(api_engine: Engine, cell: dict[str, Any], cell_engine: Engine) -> list[str]:
    """What nova's ``discover_hosts`` does for one cell (by compute node): each compute node
    not yet mapped (``mapped < 1``, not deleted) whose host has no host mapping gets one, and
    its ``mapped`` becomes 1; a node whose host is mapped already is left as it is, as nova
    leaves it. Returns the hosts mapped, in the nodes' id order. Raises HostMappingExists when
    another discovery inserted the same host meanwhile (the mappings made before stay)."""
    cn, hm = models.compute_nodes, models.host_mappings
    with cell_engine.connect() as conn:
        nodes = conn.execute(
            sa.select(cn.c.id, cn.c.host)
            .where(cn.c.mapped < 1, cn.c.deleted == 0)
            .order_by(cn.c.id)
        ).all()
    mapped: list[str] = []
    for node_id, host in nodes:
        with api_engine.begin() as conn:
            if conn.execute(sa.select(hm.c.id).where(hm.c.host == host)).first() is not None:
                continue
            try:
                conn.execute(
                    hm.insert().values(cell_id=cell["id"], host=host, created_at=timeutils.utcnow())
                )
            except sa.exc.IntegrityError as exc:
                raise HostMappingExists(f"Host '{host}' mapping already exists") from exc
        with cell_engine.begin() as conn:
            conn.execute(
                cn.update()
                .where(cn.c.id == node_id)
                .values(mapped=1, updated_at=timeutils.utcnow())
            )
        mapped.append(host)
    return mapped


def get_service_rows(engine: Engine, binary: str) -> list[dict[str, Any]]:
    """The live (not deleted) rows of ``binary`` in one database's services table."""
    t = models.services
    cols = ("host", "disabled", "forced_down", "report_count", "created_at", "updated_at")
    stmt = sa.select(*(t.c[c] for c in cols), t.c.last_seen_up).where(
        t.c.binary == binary, t.c.deleted == 0
    )
    with engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(stmt)]


# --------------------------------------------------------------------------- cell writes


def touch_services(
    cell_engine: Engine,
    *,
    hosts: list[str] | None = None,
    only_reporting: bool = True,
    now: datetime.datetime | None = None,
) -> int:
    """Heartbeat nova-compute services: set last_seen_up/updated_at to now, report_count+1.

    With ``only_reporting`` a service whose report_count is 0 (one that never reported,
    how the synthetic fleet marks a host down) is left alone. Returns the rows touched.
    """
    t = models.services
    now = now or timeutils.utcnow()
    cond = [t.c.binary == "nova-compute", t.c.deleted == 0]
    if only_reporting:
        cond.append(t.c.report_count > 0)
    touched = 0
    with cell_engine.begin() as conn:
        stmt = t.update().values(
            last_seen_up=now, updated_at=now, report_count=t.c.report_count + 1
        )
        if hosts is None:
            touched = conn.execute(stmt.where(*cond)).rowcount
        else:
            for chunk in chunked(hosts):
                touched += conn.execute(stmt.where(*cond, t.c.host.in_(chunk))).rowcount
    return touched


def chunked(items: list[Any], size: int = 1000) -> list[list[Any]]:
    """``items`` in lists of at most ``size`` (big IN lists break some backends)."""
    return [items[i : i + size] for i in range(0, len(items), size)]


# -------------------------------------------------------------- the scheduler's own row


def find_or_create_service(
    engine: Engine, *, host: str, binary: str, topic: str, version: int
) -> dict[str, Any]:
    """The live ``services`` row of ``host`` and ``binary``, created as nova's service start
    creates it when there is none (uuid, host, binary, topic, report_count 0, version;
    enabled, not forced down), its version brought to ``version`` when it differs. Returns
    ``{id, uuid, report_count, version, disabled, forced_down, created}``.

    Two processes starting at once may both insert: the unique constraints of nova's schema
    (host + binary, host + topic, among live rows) refuse the second, which then reads the
    first's row. Raises DatabaseError when another binary holds ``host`` + ``topic``."""
    t = models.services
    columns = (t.c.id, t.c.uuid, t.c.report_count, t.c.version, t.c.disabled, t.c.forced_down)
    live = sa.select(*columns).where(t.c.host == host, t.c.binary == binary, t.c.deleted == 0)
    live = live.order_by(t.c.id)
    for attempt in range(2):
        with engine.begin() as conn:
            row = conn.execute(live).first()
            if row is not None:
                out = dict(row._mapping)
                if out["version"] != version:
                    now = timeutils.utcnow()
                    conn.execute(
                        t.update()
                        .where(t.c.id == out["id"])
                        .values(version=version, updated_at=now)
                    )
                    out["version"] = version
                out["created"] = False
                break
        try:
            new_uuid = str(uuidlib.uuid4())
            with engine.begin() as conn:
                conn.execute(
                    t.insert().values(
                        uuid=new_uuid,
                        host=host,
                        binary=binary,
                        topic=topic,
                        report_count=0,
                        version=version,
                        disabled=False,
                        forced_down=False,
                        created_at=timeutils.utcnow(),
                        deleted=0,
                    )
                )
        except sa.exc.IntegrityError as exc:
            if attempt:
                raise DatabaseError(
                    f"cannot create the services row of {binary} on {host}: {exc.orig}"
                ) from None
            continue  # another process created it in between: read it
        with engine.connect() as conn:
            row = conn.execute(live).first()
        if row is None:
            raise DatabaseError(f"the services row of {binary} on {host} vanished after insert")
        out = dict(row._mapping)
        out["created"] = True
        break
    out["disabled"] = bool(out["disabled"])
    out["forced_down"] = bool(out["forced_down"])
    return out


def report_service_state(engine: Engine, service_id: int, *, version: int) -> bool:
    """One heartbeat of a service, as nova's db servicegroup driver writes it: report_count
    + 1, ``last_seen_up`` and ``updated_at`` now, the service's version. ``disabled`` and
    ``forced_down`` are left as an operator set them. False if the row is gone (deleted
    through the API)."""
    t = models.services
    now = timeutils.utcnow()
    with engine.begin() as conn:
        result = conn.execute(
            t.update()
            .where(t.c.id == service_id, t.c.deleted == 0)
            .values(
                report_count=t.c.report_count + 1,
                last_seen_up=now,
                updated_at=now,
                version=version,
            )
        )
    return result.rowcount > 0
