"""Read functions for the scheduler's hot path: Core ``select()``s.

One read per thing, one row type per table: the cell-database reads return
``ComputeNodeRow``s and ``ServiceRow``s (NamedTuples: as cheap as plain tuples, read by
column name, ``row.free_ram_mb``; nobody unpacks them by position). The API-database reads
(cell mappings, aggregates, server groups) are read once in a while and return dicts.

Cell-database reads follow nova's soft delete (live rows have ``deleted == 0``). The
``updated_since`` forms serve the incremental host cache: they return the rows created,
updated or deleted at or after the given time, soft-deleted ones included (``deleted`` is
not 0) so the cache can drop them. ``>=`` rather than ``>`` because MySQL DATETIME keeps
whole seconds: a row written in the same second as the previous read must not be lost.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from db import models
from db.api import CellUrlTemplateError, chunked, format_cell_url

LOG = logging.getLogger(__name__)

_CN = models.compute_nodes
_SVC = models.services
_INST = models.instances


def _connected(bind: Engine | sa.Connection) -> Any:
    """A connection of ``bind``: a new one of an engine, or the connection itself (so that a
    caller can run several reads on one checkout)."""
    if isinstance(bind, sa.Connection):
        return contextlib.nullcontext(bind)
    return bind.connect()


def _naive_utc(value: datetime.datetime) -> datetime.datetime:
    if value.tzinfo is not None:
        value = value.astimezone(datetime.UTC).replace(tzinfo=None)
    return value


# ---------------------------------------------------------------------------- API database


def get_cell_mappings(
    api_engine: Engine,
    database_connection: str | None = None,
    *,
    transport_url: str | None = None,
    skip_unusable: bool = False,
) -> list[dict[str, Any]]:
    """Every cell mapping (cell0 included), ordered by id, their URLs as nova reads them.

    A templated ``database_connection`` is filled from ``database_connection``, the
    reader's own ``[database] connection``; a templated ``transport_url`` from
    ``transport_url`` (left as stored when it cannot be). A cell whose database URL cannot
    be filled has a ``template_error`` key (the message names the cell and the field) and
    its URL as stored; with ``skip_unusable`` it is logged as an error and left out instead.
    """
    t = models.cell_mappings
    stmt = sa.select(
        t.c.id, t.c.uuid, t.c.name, t.c.database_connection, t.c.transport_url, t.c.disabled
    ).order_by(t.c.id)
    with api_engine.connect() as conn:
        rows = [dict(r._mapping) for r in conn.execute(stmt)]
    out = []
    for row in rows:
        row["disabled"] = bool(row["disabled"])
        label = f"cell {row['name'] or row['uuid']} ({row['uuid']})"
        if row["database_connection"]:
            try:
                row["database_connection"] = format_cell_url(
                    row["database_connection"], database_connection
                )
            except CellUrlTemplateError as exc:
                where = (
                    "[database] connection"
                    if database_connection
                    else "[database] connection, which is not set"
                )
                row["template_error"] = (
                    f"{label}: its database_connection is a template whose {exc}; nova fills "
                    f"it from the reading service's {where}"
                )
        if row["transport_url"]:
            try:
                row["transport_url"] = format_cell_url(row["transport_url"], transport_url)
            except CellUrlTemplateError:
                pass  # the scheduler never connects to a cell's broker
        if row.get("template_error") and skip_unusable:
            LOG.error("Skipping %s", row["template_error"])
            continue
        out.append(row)
    return out


def get_host_mappings(api_engine: Engine) -> dict[str, str]:
    """``{host: cell_uuid}`` for every mapped host."""
    hm, cm = models.host_mappings, models.cell_mappings
    stmt = sa.select(hm.c.host, cm.c.uuid).join(cm, hm.c.cell_id == cm.c.id)
    with api_engine.connect() as conn:
        return {host: cell_uuid for host, cell_uuid in conn.execute(stmt)}


def _load_aggregates(conn: sa.Connection, agg_ids: sa.Select | None) -> list[dict[str, Any]]:
    a, ah, am = models.aggregates, models.aggregate_hosts, models.aggregate_metadata
    stmt = sa.select(a.c.id, a.c.uuid, a.c.name, a.c.created_at, a.c.updated_at).order_by(a.c.id)
    hosts_stmt = sa.select(ah.c.aggregate_id, ah.c.host)
    meta_stmt = sa.select(am.c.aggregate_id, am.c.key, am.c.value)
    if agg_ids is not None:
        stmt = stmt.where(a.c.id.in_(agg_ids))
        hosts_stmt = hosts_stmt.where(ah.c.aggregate_id.in_(agg_ids))
        meta_stmt = meta_stmt.where(am.c.aggregate_id.in_(agg_ids))
    aggs: dict[int, dict[str, Any]] = {}
    for row in conn.execute(stmt):
        agg = dict(row._mapping)
        agg["hosts"] = set()
        agg["metadata"] = {}
        aggs[agg["id"]] = agg
    for agg_id, host in conn.execute(hosts_stmt):
        if agg_id in aggs and host:
            aggs[agg_id]["hosts"].add(host)
    for agg_id, key, value in conn.execute(meta_stmt):
        if agg_id in aggs:
            aggs[agg_id]["metadata"][key] = value
    return list(aggs.values())


def get_aggregates(api_engine: Engine) -> list[dict[str, Any]]:
    """Every aggregate: ``{id, uuid, name, created_at, updated_at, hosts: set, metadata: dict}``."""
    with api_engine.connect() as conn:
        return _load_aggregates(conn, None)


def get_flavors(
    api_engine: Engine,
    names: list[str] | None = None,
    *,
    include_private: bool = False,
    include_disabled: bool = False,
) -> list[dict[str, Any]]:
    """Flavors with their extra specs and projects, by name: ``{id, flavorid, name, vcpus,
    memory_mb, root_gb, ephemeral_gb, swap, is_public, disabled, extra_specs: dict,
    projects: list}``. ``names``: these flavors (by name or flavor id, public or not,
    enabled or not); otherwise every public, enabled one unless told to include the others."""
    f = models.flavors
    stmt = sa.select(*(f.c[name] for name in READ_COLUMNS["flavors"])).order_by(
        f.c.memory_mb, f.c.vcpus, f.c.name
    )
    if names:
        stmt = stmt.where(sa.or_(f.c.name.in_(names), f.c.flavorid.in_(names)))
    else:
        if not include_private:
            stmt = stmt.where(f.c.is_public == sa.true())
        if not include_disabled:
            stmt = stmt.where(sa.or_(f.c.disabled.is_(None), f.c.disabled == sa.false()))
    with api_engine.connect() as conn:
        rows = [dict(r._mapping) for r in conn.execute(stmt)]
        if not rows:
            return []
        ids = [r["id"] for r in rows]
        specs: dict[int, dict[str, Any]] = {i: {} for i in ids}
        spec_table = models.flavor_extra_specs
        for fid, key, value in conn.execute(
            sa.select(spec_table.c.flavor_id, spec_table.c.key, spec_table.c.value).where(
                spec_table.c.flavor_id.in_(ids)
            )
        ):
            specs[fid][key] = value
        projects: dict[int, list[str]] = {i: [] for i in ids}
        proj_table = models.flavor_projects
        for fid, project in conn.execute(
            sa.select(proj_table.c.flavor_id, proj_table.c.project_id).where(
                proj_table.c.flavor_id.in_(ids)
            )
        ):
            projects[fid].append(project)
    for row in rows:
        row["extra_specs"] = specs[row["id"]]
        row["projects"] = sorted(projects[row["id"]])
    return rows


class AggregatesFingerprint(NamedTuple):
    """What a request compares to decide whether the aggregates it holds are still those of
    the API database: every insert or delete moves a count or a highest id, every update of
    an aggregate or its metadata moves ``changed_at`` (whole seconds on MySQL: an update in
    the same second as the last one is not seen here, see HostManager)."""

    aggregates: int
    aggregates_max_id: int | None
    hosts: int | None
    hosts_max_id: int | None
    metadata: int
    metadata_max_id: int | None
    changed_at: datetime.datetime | None


def _fingerprint_statement(count_hosts: bool) -> sa.Select:
    a, ah, am = models.aggregates, models.aggregate_hosts, models.aggregate_metadata

    def one(*columns: Any) -> list[Any]:
        return [sa.select(c).scalar_subquery() for c in columns]

    hosts = sa.func.count(ah.c.id) if count_hosts else sa.null()
    return sa.select(
        *one(sa.func.count(a.c.id), sa.func.max(a.c.id)),
        *one(hosts, sa.func.max(ah.c.id)),
        *one(sa.func.count(am.c.id), sa.func.max(am.c.id)),
        *one(sa.func.max(a.c.updated_at), sa.func.max(am.c.updated_at)),
    )


_AGGREGATES_FINGERPRINT = {flag: _fingerprint_statement(flag) for flag in (True, False)}


def aggregates_fingerprint_statement(count_hosts: bool = True) -> sa.Select:
    """The statement ``get_aggregates_fingerprint`` runs (to send it ahead:
    ``db.read_ahead``)."""
    return _AGGREGATES_FINGERPRINT[count_hosts]


def get_aggregates_fingerprint(
    api_engine: Engine, *, count_hosts: bool = True
) -> AggregatesFingerprint:
    """One row of counts, highest ids and last update times of the aggregate tables (one
    statement). ``count_hosts``: count ``aggregate_hosts`` too, its only cost (about 2 ms at
    20,000 rows on MariaDB; the rest is read by index or from small tables); without it
    ``hosts`` is None, and a host taken out of an aggregate does not show."""
    with api_engine.connect() as conn:
        row = conn.execute(aggregates_fingerprint_statement(count_hosts)).one()
    *counts, a_changed, m_changed = row
    changed = [t for t in (a_changed, m_changed) if t is not None]
    return AggregatesFingerprint(*counts, changed_at=max(changed) if changed else None)


def get_aggregates_by_metadata(
    api_engine: Engine,
    key: str | None = None,
    key_prefix: str | None = None,
    value: str | None = None,
) -> list[dict[str, Any]]:
    """The aggregates having one metadata item that matches every given condition.

    ``key`` is an exact key, ``key_prefix`` a key prefix (e.g. ``filter_tenant_id``),
    ``value`` an exact value. Each aggregate comes whole, as ``get_aggregates`` gives it.
    """
    am = models.aggregate_metadata
    cond = []
    if key is not None:
        cond.append(am.c.key == key)
    if key_prefix is not None:
        cond.append(am.c.key.startswith(key_prefix, autoescape=True))
    if value is not None:
        cond.append(am.c.value == value)
    ids = sa.select(am.c.aggregate_id).where(*cond).distinct()
    with api_engine.connect() as conn:
        return _load_aggregates(conn, ids)


def get_instance_group(api_engine: Engine, uuid: str) -> dict[str, Any] | None:
    """A server group: ``{id, uuid, name, user_id, project_id, policy, rules, members}``.

    ``rules`` is the decoded JSON dict (``{}`` when unset); ``members`` the instance uuids.
    None if there is no such group. The members' hosts are the conductor's business.
    """
    g, p, m = models.instance_groups, models.instance_group_policy, models.instance_group_member
    with api_engine.connect() as conn:
        row = conn.execute(
            sa.select(g.c.id, g.c.uuid, g.c.name, g.c.user_id, g.c.project_id).where(
                g.c.uuid == uuid
            )
        ).first()
        if row is None:
            return None
        group = dict(row._mapping)
        pol = conn.execute(
            sa.select(p.c.policy, p.c.rules).where(p.c.group_id == group["id"]).order_by(p.c.id)
        ).first()
        members = conn.execute(
            sa.select(m.c.instance_uuid).where(m.c.group_id == group["id"]).order_by(m.c.id)
        ).scalars()
        group["members"] = [u for u in members if u]
    group["policy"] = pol.policy if pol else None
    rules: dict[str, Any] = {}
    if pol is not None and pol.rules:
        try:
            rules = json.loads(pol.rules) or {}
        except ValueError:
            LOG.warning("Server group %s has unreadable rules %r; ignoring them", uuid, pol.rules)
    group["rules"] = rules
    return group


# --------------------------------------------------------------------------- cell database


class ComputeNodeRow(NamedTuple):
    """A ``compute_nodes`` row as the scheduler reads it: the columns HostState needs, by
    nova's names. Read them by name (``row.free_ram_mb``); a NamedTuple costs what a plain
    tuple costs, which matters at 100k hosts."""

    uuid: str | None
    host: str | None
    hypervisor_hostname: str | None
    memory_mb: int | None
    free_ram_mb: int | None
    free_disk_gb: int | None
    disk_available_least: int | None
    local_gb: int | None
    local_gb_used: int | None
    vcpus: int | None
    vcpus_used: int | None
    numa_topology: str | None
    pci_stats: str | None
    host_ip: Any
    hypervisor_type: str | None
    hypervisor_version: int | None
    cpu_info: str | None
    supported_instances: str | None
    stats: str | None
    metrics: str | None
    cpu_allocation_ratio: float | None
    ram_allocation_ratio: float | None
    disk_allocation_ratio: float | None
    updated_at: datetime.datetime | None
    created_at: datetime.datetime | None
    # as stored: 0 for a live row, the row's id once soft-deleted (nova's soft delete)
    deleted: int


class ServiceRow(NamedTuple):
    """A ``services`` row: what ComputeFilter, ``minimum_compute_version`` and the service
    dict of a HostState need, by nova's names."""

    id: int
    uuid: str | None
    host: str | None
    binary: str | None
    topic: str | None
    report_count: int
    disabled: bool | None
    disabled_reason: str | None
    last_seen_up: datetime.datetime | None
    forced_down: bool | None
    version: int | None
    created_at: datetime.datetime | None
    updated_at: datetime.datetime | None
    deleted_at: datetime.datetime | None
    # as stored: 0 for a live row, the row's id once soft-deleted (nova's soft delete)
    deleted: int


# Every column of nova's tables that the reads of this module name, by table: selected,
# filtered on, joined or ordered by. ``novasched-manage check`` looks for exactly these in the
# API and cell databases; tests/unit/db/test_read_columns.py runs every read and proves that
# the statements name these columns and no others, so a new read cannot leave it stale.
READ_COLUMNS: dict[str, tuple[str, ...]] = {
    # API database
    "cell_mappings": ("id", "uuid", "name", "database_connection", "transport_url", "disabled"),
    "host_mappings": ("host", "cell_id"),
    "aggregates": ("id", "uuid", "name", "created_at", "updated_at"),
    "aggregate_hosts": ("id", "aggregate_id", "host"),
    "aggregate_metadata": ("id", "aggregate_id", "key", "value", "updated_at"),
    "instance_groups": ("id", "uuid", "name", "user_id", "project_id"),
    "instance_group_policy": ("id", "group_id", "policy", "rules"),
    "instance_group_member": ("id", "group_id", "instance_uuid"),
    "flavors": (
        "id",
        "flavorid",
        "name",
        "vcpus",
        "memory_mb",
        "root_gb",
        "ephemeral_gb",
        "swap",
        "is_public",
        "disabled",
    ),
    "flavor_extra_specs": ("flavor_id", "key", "value"),
    "flavor_projects": ("flavor_id", "project_id"),
    # cell database
    "compute_nodes": (*ComputeNodeRow._fields, "deleted_at"),
    "services": ServiceRow._fields,
    "instances": (
        "uuid",
        "host",
        "instance_type_id",
        "deleted",
        "created_at",
        "launched_at",
    ),
    "instance_system_metadata": ("instance_uuid", "key", "value", "deleted"),
    "instance_extra": ("instance_uuid", "numa_topology", "deleted"),
}

_CN_COLS = [_CN.c[name] for name in ComputeNodeRow._fields]
_SVC_COLS = [_SVC.c[name] for name in ServiceRow._fields]
_CN_SELECT = sa.select(*_CN_COLS)
# the per-request reads: prepared once (building a statement costs more than running it
# when nothing changed)
_CN_REPORTED = _CN_SELECT.where(_CN.c.updated_at >= sa.bindparam("since"))
_CN_REPORTED_KEYS = sa.select(_CN.c.uuid, _CN.c.updated_at).where(
    _CN.c.updated_at >= sa.bindparam("since")
)
_CN_BY_UUID = _CN_SELECT.where(_CN.c.uuid.in_(sa.bindparam("uuids", expanding=True)))
# a result row as a ComputeNodeRow / ServiceRow without a length check (the select has the
# fields' columns, in order)
_new_tuple = tuple.__new__


def _changed_since(table: sa.Table, since: datetime.datetime) -> sa.ColumnElement[bool]:
    since = _naive_utc(since)
    return sa.or_(
        table.c.updated_at >= since, table.c.created_at >= since, table.c.deleted_at >= since
    )


def _compute_node_rows(result: Iterable[Any]) -> list[ComputeNodeRow]:
    return [_new_tuple(ComputeNodeRow, r) for r in result]


def get_compute_nodes(
    cell_engine: Engine,
    uuids: Iterable[str] | None = None,
    updated_since: datetime.datetime | None = None,
    *,
    reported_since: datetime.datetime | None = None,
) -> list[ComputeNodeRow]:
    """Compute-node rows.

    No argument: the live rows (``uuids``: only those). ``updated_since``: the rows created,
    updated or soft-deleted at or after that time, deleted ones included (``deleted != 0``).
    ``reported_since`` (alone): only the rows whose ``updated_at`` is at or after that time
    (an index range scan; creations and deletions are not seen, the caller reads them with
    ``updated_since`` now and then).
    """
    if reported_since is not None:
        if uuids is not None or updated_since is not None:
            raise TypeError("reported_since is read alone, without uuids or updated_since")
        with cell_engine.connect() as conn:
            return _compute_node_rows(
                conn.execute(_CN_REPORTED, {"since": _naive_utc(reported_since)})
            )
    if updated_since is None:
        stmt = _CN_SELECT.where(_CN.c.deleted == 0)
    else:
        stmt = _CN_SELECT.where(_changed_since(_CN, updated_since))
    with cell_engine.connect() as conn:
        if uuids is None:
            return _compute_node_rows(conn.execute(stmt).fetchall())
        out: list[ComputeNodeRow] = []
        for chunk in chunked(list(uuids)):
            out.extend(_compute_node_rows(conn.execute(stmt.where(_CN.c.uuid.in_(chunk)))))
        return out


def get_compute_nodes_by_host_or_node(
    cell_engine: Engine, host: str | None = None, node: str | None = None
) -> list[ComputeNodeRow]:
    """Live compute nodes of ``host`` and/or with hypervisor_hostname ``node``."""
    stmt = _CN_SELECT.where(_CN.c.deleted == 0)
    if host is not None:
        stmt = stmt.where(_CN.c.host == host)
    if node is not None:
        stmt = stmt.where(_CN.c.hypervisor_hostname == node)
    with cell_engine.connect() as conn:
        return _compute_node_rows(conn.execute(stmt))


def compute_node_reports_statement(
    since: datetime.datetime,
) -> tuple[sa.Select, dict[str, Any]]:
    """The first statement ``get_compute_node_reports`` runs, and its parameters (to send
    it ahead: ``db.read_ahead``)."""
    return _CN_REPORTED_KEYS, {"since": _naive_utc(since)}


def get_compute_node_reports(
    cell_engine: Engine | sa.Connection,
    since: datetime.datetime,
    known: Mapping[str, ComputeNodeRow],
) -> list[ComputeNodeRow]:
    """The compute-node rows reported (``updated_at``) at or after ``since``, leaving out
    those whose ``updated_at`` equals the one of the row in ``known`` (by uuid): what the
    caller applied already. Two queries: the (uuid, updated_at) of the reports, then the
    whole rows of the new ones only, so that re-reading a window of reports costs little."""
    with _connected(cell_engine) as conn:
        keys = conn.execute(*compute_node_reports_statement(since)).all()
        wanted = []
        for uuid, updated_at in keys:
            row = known.get(uuid)
            if uuid and (row is None or row.updated_at != updated_at):
                wanted.append(uuid)
        rows: list[ComputeNodeRow] = []
        for chunk in chunked(wanted):
            rows.extend(_compute_node_rows(conn.execute(_CN_BY_UUID, {"uuids": chunk})))
        return rows


# nova's last heartbeat of a service (the db servicegroup driver's ``is_up``):
# ``last_seen_up``, else ``created_at``
# Written for the scan's sake (MariaDB evaluates it per row, in this order): no COALESCE, and
# the string comparison of ``binary`` only for the few exceptional rows (about 40 % less
# than the plain form at 10,000 services)
_SVC_EXCEPTIONAL = (
    _SVC.c.deleted == 0,
    sa.or_(
        _SVC.c.disabled == sa.true(),
        _SVC.c.forced_down == sa.true(),
        _SVC.c.last_seen_up < sa.bindparam("earliest"),
        _SVC.c.last_seen_up > sa.bindparam("latest"),
        sa.and_(
            _SVC.c.last_seen_up.is_(None),
            sa.or_(
                _SVC.c.created_at.is_(None),
                _SVC.c.created_at < sa.bindparam("earliest"),
                _SVC.c.created_at > sa.bindparam("latest"),
            ),
        ),
    ),
    _SVC.c.binary == "nova-compute",
)
_SVC_EXCEPTIONS = sa.select(
    _SVC.c.host, _SVC.c.disabled, _SVC.c.forced_down, _SVC.c.last_seen_up, _SVC.c.created_at
).where(*_SVC_EXCEPTIONAL)
# The exceptional services' digest: per state (disabled, forced down, heartbeat), how many
# and the sums of their ids' first three powers (modulo a prime, in 64-bit integers on every
# backend). Equal digests mean equal sets of (id, state) unless several services changed
# state at once in a way whose power sums cancel out.
_PRIME = 2_147_483_647
_SVC_STATE = sa.case(
    (_SVC.c.disabled == sa.true(), 1), (_SVC.c.forced_down == sa.true(), 2), else_=3
)
_SVC_ID = sa.cast(_SVC.c.id, sa.BigInteger)
_SVC_ID2 = _SVC_ID * _SVC_ID % _PRIME
_SVC_DIGEST = (
    sa.select(
        _SVC_STATE,
        sa.func.count(),
        sa.func.sum(_SVC_ID),
        sa.func.sum(_SVC_ID2),
        sa.func.sum(_SVC_ID2 * _SVC_ID % _PRIME),
    )
    .where(*_SVC_EXCEPTIONAL)
    .group_by(_SVC_STATE)
)


def service_exceptions_digest_statement(
    earliest: datetime.datetime, latest: datetime.datetime
) -> tuple[sa.Select, dict[str, Any]]:
    """The statement and parameters ``get_service_exceptions_digest`` runs (to send it
    ahead: ``db.read_ahead``)."""
    return _SVC_DIGEST, {"earliest": _naive_utc(earliest), "latest": _naive_utc(latest)}


def get_service_exceptions_digest(
    cell_engine: Engine | sa.Connection, earliest: datetime.datetime, latest: datetime.datetime
) -> tuple[tuple[int, ...], ...]:
    """A digest of what ``get_service_exceptions`` would return (see ``_SVC_DIGEST``): the
    same scan, without sending the rows. A request compares it with the digest of the last
    rows it read, and reads the rows again only when it differs. None of the columns is
    indexed in nova's schema: a scan of ``services`` (0.9 / 3.3 / 28 ms at 1,000 / 10,000 /
    100,000 services on MariaDB)."""
    stmt, params = service_exceptions_digest_statement(earliest, latest)
    with _connected(cell_engine) as conn:
        return tuple(sorted(tuple(int(v or 0) for v in row) for row in conn.execute(stmt, params)))


def get_service_exceptions(
    cell_engine: Engine, earliest: datetime.datetime, latest: datetime.datetime
) -> dict[str, tuple[bool, bool, datetime.datetime | None]]:
    """The live ``nova-compute`` services that are disabled, forced down, or whose last
    heartbeat (``last_seen_up``, else ``created_at``) is missing or outside ``earliest`` ..
    ``latest``: ``{host: (disabled, forced_down, heartbeat)}``, the heartbeat only where it
    decides whether the service is up (None for a service disabled or forced down). What a
    request compares with the services it holds before it decides, when their digest moved
    (``get_service_exceptions_digest``): about 14 ms for 1,000 such rows on MariaDB."""
    params = {"earliest": _naive_utc(earliest), "latest": _naive_utc(latest)}
    out: dict[str, tuple[bool, bool, datetime.datetime | None]] = {}
    with cell_engine.connect() as conn:
        for host, disabled, forced_down, seen, created in conn.execute(_SVC_EXCEPTIONS, params):
            disabled, forced_down = bool(disabled), bool(forced_down)
            beat = None if disabled or forced_down else (seen or created)
            out[host] = (disabled, forced_down, beat)
    return out


def get_compute_services(
    cell_engine: Engine,
    updated_since: datetime.datetime | None = None,
    *,
    hosts: Iterable[str] | None = None,
) -> list[ServiceRow]:
    """``nova-compute`` service rows, disabled ones included.

    Without ``updated_since``: the live rows (``hosts``: only those of these hosts). With
    it: the rows created, updated, heard from or soft-deleted at or after that time, deleted
    ones included (``deleted != 0``), so that a cache can drop them.
    """
    stmt = sa.select(*_SVC_COLS).where(_SVC.c.binary == "nova-compute")
    if hosts is not None:
        if updated_since is not None:
            raise TypeError("hosts is read alone, without updated_since")
        stmt = stmt.where(_SVC.c.deleted == 0, _SVC.c.host.in_(sorted(set(hosts))))
    elif updated_since is None:
        stmt = stmt.where(_SVC.c.deleted == 0)
    else:
        since = _naive_utc(updated_since)
        stmt = stmt.where(
            sa.or_(
                _SVC.c.updated_at >= since,
                _SVC.c.created_at >= since,
                _SVC.c.last_seen_up >= since,
                _SVC.c.deleted_at >= since,
            )
        )
    with cell_engine.connect() as conn:
        return [_new_tuple(ServiceRow, r) for r in conn.execute(stmt).fetchall()]


def get_instance_uuids_by_host(
    cell_engine: Engine, hosts: list[str] | None = None
) -> dict[str, set[str]]:
    """``{host: {instance uuid}}`` of the live instances (all hosts, or only ``hosts``)."""
    stmt = sa.select(_INST.c.host, _INST.c.uuid).where(
        _INST.c.deleted == 0, _INST.c.host.is_not(None)
    )
    out: dict[str, set[str]] = defaultdict(set)
    with cell_engine.connect() as conn:
        if hosts is None:
            batches = [conn.execute(stmt)]
        else:
            batches = [conn.execute(stmt.where(_INST.c.host.in_(c))) for c in chunked(list(hosts))]
        for result in batches:
            for host, uuid in result:
                out[host].add(uuid)
    return dict(out)


def get_instance_details_by_host(
    cell_engine: Engine, hosts: list[str]
) -> dict[str, dict[str, dict[str, Any]]]:
    """``{host: {instance uuid: {"instance_type_id", "image_properties"}}}`` of the live
    instances on ``hosts``: the flavor id (TypeAffinityFilter) and the image properties nova
    keeps in ``instance_system_metadata`` as ``image_<property>`` (ImagePropertiesWeigher)."""
    sysmeta = models.instance_system_metadata
    out: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    with cell_engine.connect() as conn:
        for chunk in chunked(list(hosts)):
            rows = conn.execute(
                sa.select(_INST.c.host, _INST.c.uuid, _INST.c.instance_type_id).where(
                    _INST.c.deleted == 0, _INST.c.host.in_(chunk)
                )
            ).all()
            by_uuid: dict[str, dict[str, Any]] = {}
            for host, uuid, type_id in rows:
                entry = {"instance_type_id": type_id, "image_properties": {}}
                out[host][uuid] = by_uuid[uuid] = entry
            for uuids in chunked(list(by_uuid)):
                meta = conn.execute(
                    sa.select(sysmeta.c.instance_uuid, sysmeta.c.key, sysmeta.c.value).where(
                        sysmeta.c.deleted == 0,
                        sysmeta.c.instance_uuid.in_(uuids),
                        sysmeta.c.key.like("image\\_%", escape="\\"),
                    )
                )
                for uuid, key, value in meta:
                    by_uuid[uuid]["image_properties"][key[len("image_") :]] = value
    return dict(out)


def get_instance_numa_topologies(cell_engine: Engine, uuids: list[str]) -> dict[str, str]:
    """``{instance uuid: instance_extra.numa_topology}`` of the live instances among
    ``uuids`` that have a NUMA topology (the InstanceNUMATopology primitive nova-compute
    stored: the host cells, CPUs pinned and pages each guest node got)."""
    extra = models.instance_extra
    out: dict[str, str] = {}
    with cell_engine.connect() as conn:
        for chunk in chunked(list(uuids)):
            rows = conn.execute(
                sa.select(extra.c.instance_uuid, extra.c.numa_topology).where(
                    extra.c.deleted == 0,
                    extra.c.instance_uuid.in_(chunk),
                    extra.c.numa_topology.is_not(None),
                )
            )
            out.update((uuid, text) for uuid, text in rows if text)
    return out


def get_instance_builds(
    cell_engine: Engine, uuids: list[str]
) -> dict[str, tuple[datetime.datetime | None, datetime.datetime | None]]:
    """``{instance uuid: (created_at, launched_at)}`` of the instances among ``uuids`` that
    the cell has a row of (deleted ones too: they were built before they went). nova-compute
    sets ``launched_at`` when the build finished; None: not finished (or never)."""
    inst = models.instances
    out: dict[str, tuple[datetime.datetime | None, datetime.datetime | None]] = {}
    with cell_engine.connect() as conn:
        for chunk in chunked(list(uuids)):
            rows = conn.execute(
                sa.select(inst.c.uuid, inst.c.created_at, inst.c.launched_at).where(
                    inst.c.uuid.in_(chunk)
                )
            )
            out.update((uuid, (created, launched)) for uuid, created, launched in rows)
    return out


def get_minimum_service_version(cell_engine: Engine, binary: str = "nova-compute") -> int | None:
    """The lowest ``version`` among the live services of ``binary`` (None if there are none)."""
    stmt = sa.select(sa.func.min(_SVC.c.version)).where(
        _SVC.c.binary == binary, _SVC.c.deleted == 0
    )
    with cell_engine.connect() as conn:
        return conn.execute(stmt).scalar()
