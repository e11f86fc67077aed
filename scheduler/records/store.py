"""Where decision records are kept: three tables of ours in any database SQLAlchemy reaches
(SQLite, MariaDB/MySQL, PostgreSQL), ours or the operator's.

The tables are named ``novasched_*`` so that they can live beside anything else, and are
created if missing (never altered or dropped):

``novasched_decisions``
    one row per decision: ``id``, ``request_id``, ``created_at`` (naive UTC, microseconds),
    ``outcome``, ``instance_uuids`` and ``hosts`` (JSON lists, in instance order) and
    ``document`` (the driver's JSON text). Indexes: ``(created_at, id)``, which orders the
    listings, finds what has aged out and where ``max_records`` cuts, and ``request_id``.
``novasched_decision_instances``
    ``(decision_id, instance_uuid)``, one row per instance, indexed by instance uuid: a
    reschedule of an instance is a second decision that names it, and ``show`` finds both.
``novasched_decision_hosts``
    ``(decision_id, host, created_at)``, one row per distinct chosen host, indexed by
    ``(host, created_at)``: ``list --host H --since T`` reads one index range.

There are no foreign keys: the side rows of a decision are deleted with it, in the same
transaction. A batch of records is one transaction. Pruning deletes the oldest decisions in
chunks of ``chunk`` rows, each chunk a short transaction of its own, with the rows to delete
found beforehand outside it, so that neither a scheduler worker writing records nor an
operator reading them waits long on it.

Several processes may write to one store at once. On SQLite the file is in WAL mode (readers
never wait for the writer), every write transaction begins ``IMMEDIATE`` (a writer waits its
turn instead of failing when another wrote between its read and its write) and waits up to
``SQLITE_BUSY_TIMEOUT`` for the lock.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import URL, make_url

from scheduler.exceptions import NovaschedError
from scheduler.records.record import (
    DecisionRecord,
    decode_document,
    encode_document,
    naive_utc,
    utcnow,
)

LOG = logging.getLogger(__name__)

SQLITE_BUSY_TIMEOUT = 30.0  # seconds a writer waits for another process's transaction
CONNECT_TIMEOUT = 5  # seconds, to a database server
PRUNE_CHUNK = 1000  # decisions deleted per transaction
PRUNE_CHUNKS_PER_CALL = 10
# one INSERT statement carries at most this many bytes of documents (MySQL's
# max_allowed_packet is 4 MB on old servers)
_INSERT_PAGE_BYTES = 1024 * 1024
# how many times creating the tables is tried when another process creates them too
_CREATE_ATTEMPTS = 4
# how many times a write transaction is tried when the database broke a deadlock with it
_DEADLOCK_ATTEMPTS = 4

T = TypeVar("T")

_WRITE = "novasched_write"  # execution option: this transaction writes (SQLite: IMMEDIATE)

DECISIONS = "novasched_decisions"
INSTANCES = "novasched_decision_instances"
HOSTS = "novasched_decision_hosts"

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")  # SQLite: the rowid
_TIME = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
_TEXT = sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")
_MYSQL = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4"}

METADATA = sa.MetaData()

decisions = sa.Table(
    DECISIONS,
    METADATA,
    sa.Column("id", _ID, primary_key=True, autoincrement=True),
    sa.Column("request_id", sa.String(255), nullable=True),
    sa.Column("created_at", _TIME, nullable=False),
    sa.Column("outcome", sa.String(32), nullable=False),
    sa.Column("instance_uuids", sa.Text(), nullable=False),
    sa.Column("hosts", sa.Text(), nullable=False),
    sa.Column("document", _TEXT, nullable=False),
    sa.Index("novasched_decisions_created_at_idx", "created_at", "id"),
    sa.Index("novasched_decisions_request_id_idx", "request_id"),
    # ids only grow, even when the highest was pruned (a late record, made long before it
    # was written): prune tells by the highest id whether anything was added
    sqlite_autoincrement=True,
    **_MYSQL,
)

decision_instances = sa.Table(
    INSTANCES,
    METADATA,
    sa.Column("decision_id", sa.BigInteger(), primary_key=True, autoincrement=False),
    sa.Column("instance_uuid", sa.String(36), primary_key=True),
    sa.Index("novasched_decision_instances_uuid_idx", "instance_uuid"),
    **_MYSQL,
)

decision_hosts = sa.Table(
    HOSTS,
    METADATA,
    sa.Column("decision_id", sa.BigInteger(), primary_key=True, autoincrement=False),
    sa.Column("host", sa.String(255), primary_key=True),
    sa.Column("created_at", _TIME, nullable=False),
    sa.Index("novasched_decision_hosts_host_idx", "host", "created_at", "decision_id"),
    **_MYSQL,
)

TABLES = (DECISIONS, INSTANCES, HOSTS)


class StoreError(NovaschedError):
    """The store cannot be opened; the message says why in one line, without the URL (the
    caller names it, with ``safe_url``)."""


@dataclass(frozen=True, slots=True)
class Pruned:
    """What one ``prune`` call deleted; ``more``: it stopped at its budget, call again."""

    by_age: int = 0
    by_count: int = 0
    more: bool = False

    @property
    def deleted(self) -> int:
        return self.by_age + self.by_count


def parse_url(url: str) -> URL:
    """``url`` as a SQLAlchemy URL, with the driver nova deployments imply (``mysql://`` is
    PyMySQL, ``postgres://`` PostgreSQL); StoreError if it is not one."""
    try:
        parsed = make_url(url)
    except Exception as exc:  # ArgumentError, ValueError: whatever make_url refuses
        raise StoreError(f"not a SQLAlchemy database URL ({exc})")
    if parsed.drivername == "mysql":
        parsed = parsed.set(drivername="mysql+pymysql")
    elif parsed.drivername == "postgres":
        parsed = parsed.set(drivername="postgresql")
    return parsed


def safe_url(url: str | URL) -> str:
    """The URL to show in a log or an error: the password masked."""
    try:
        parsed = url if isinstance(url, URL) else make_url(url)
        return parsed.render_as_string(hide_password=True)
    except Exception:
        return "<not a URL>"


def first_line(exc: BaseException) -> str:
    """A database error in one line: the driver's message, not SQLAlchemy's wrapping."""
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class DecisionStore:
    """The decision records of one database (see the module's doc).

    ``create``: create the tables if missing (the recorder); without it a store whose tables
    do not exist, or an SQLite file that does not exist, is a StoreError (the commands, which
    must not leave an empty database behind). Opening connects once, so a wrong URL, a
    missing directory or a server that refuses fails here, as a StoreError.
    """

    def __init__(self, url: str, *, create: bool = True, connect_timeout: int = CONNECT_TIMEOUT):
        self.url = parse_url(url)
        self.backend = self.url.get_backend_name()
        self._check_sqlite_path(create)
        try:
            self.engine = _make_engine(self.url, connect_timeout)
        except Exception as exc:  # an unknown dialect, a driver not installed
            raise StoreError(f"cannot load its database driver: {first_line(exc)}")
        self._settled: tuple[int | None, int] | None = None
        try:
            if create:
                self._create_tables()
            else:
                self._check_tables()
        except StoreError:
            self.engine.dispose()
            raise
        except Exception as exc:
            self.engine.dispose()
            raise StoreError(first_line(exc))
        # one INSERT per page of a batch, its ids returned in order (SQLite, MariaDB,
        # PostgreSQL; the dialect knows once it has met the server)
        self._returning = bool(
            self.engine.dialect.insert_executemany_returning_sort_by_parameter_order
        )

    def __repr__(self) -> str:
        return f"DecisionStore({safe_url(self.url)})"

    def __str__(self) -> str:
        return safe_url(self.url)

    # -------------------------------------------------------------------------- opening

    def _check_sqlite_path(self, create: bool) -> None:
        if self.backend != "sqlite" or self.url.database in (None, "", ":memory:"):
            return
        path = os.path.abspath(self.url.database)
        if not create and not os.path.exists(path):
            raise StoreError("the file does not exist: no decision has been recorded there")
        folder = os.path.dirname(path)
        if not os.path.isdir(folder):
            raise StoreError(f"the directory {folder} does not exist")

    def _create_tables(self) -> None:
        for attempt in range(_CREATE_ATTEMPTS):
            try:
                METADATA.create_all(self.engine, checkfirst=True)
                return
            except sa.exc.OperationalError as exc:
                if _unreachable(exc) or attempt == _CREATE_ATTEMPTS - 1:
                    raise
            except sa.exc.SQLAlchemyError:
                # another worker created a table or index between our check and our CREATE
                if attempt == _CREATE_ATTEMPTS - 1:
                    raise
            time.sleep(0.1 * (attempt + 1))

    def _check_tables(self) -> None:
        inspector = sa.inspect(self.engine)
        missing = [name for name in TABLES if not inspector.has_table(name)]
        if missing:
            raise StoreError(
                f"it has no table {', '.join(missing)}: no decision has been recorded there"
            )

    def close(self) -> None:
        """Close the store's connections."""
        self.engine.dispose()

    def after_fork(self) -> None:
        """In a forked child: forget the parent's connections without closing them (they
        are the parent's), so that the child opens its own."""
        self.engine.dispose(close=False)

    # -------------------------------------------------------------------------- writing

    @contextlib.contextmanager
    def _writing(self) -> Iterator[sa.Connection]:
        with self.engine.connect() as conn:
            conn.execution_options(**{_WRITE: True})
            with conn.begin():
                yield conn

    def _transaction(self, work: Callable[[sa.Connection], T]) -> T:
        """``work(conn)`` in one write transaction, run again (up to ``_DEADLOCK_ATTEMPTS``
        times) when the database picked it as a deadlock's victim and rolled it back whole:
        InnoDB does when two workers write and prune at once."""
        for attempt in range(1, _DEADLOCK_ATTEMPTS + 1):
            try:
                with self._writing() as conn:
                    return work(conn)
            except sa.exc.DBAPIError as exc:
                if attempt == _DEADLOCK_ATTEMPTS or not _deadlock(exc):
                    raise
                LOG.debug("Decision records' transaction rolled back (%s); again", first_line(exc))
            time.sleep(random.uniform(0.005, 0.05) * attempt)
        raise AssertionError("unreachable")

    def add(self, records: Sequence[DecisionRecord]) -> list[int]:
        """Write ``records`` in one transaction; their ids, in order. A document that cannot
        be stored is replaced by a note saying why (``record.encode_document``)."""
        if not records:
            return []
        rows = [_row(r) for r in records]
        return self._transaction(lambda conn: self._add_rows(conn, rows, records))

    def _add_rows(
        self, conn: sa.Connection, rows: list[dict[str, Any]], records: Sequence[DecisionRecord]
    ) -> list[int]:
        ids = self._insert_decisions(conn, rows)
        instances, hosts = [], []
        for decision_id, row, rec in zip(ids, rows, records, strict=True):
            for uuid in dict.fromkeys(str(u) for u in rec.instance_uuids):
                if len(uuid) <= 36:  # longer is not an instance uuid: kept in the row only
                    instances.append({"decision_id": decision_id, "instance_uuid": uuid})
            for host in dict.fromkeys(str(h) for h in rec.hosts if h):
                if len(host) <= 255:
                    hosts.append(
                        {"decision_id": decision_id, "host": host, "created_at": row["created_at"]}
                    )
        if instances:
            conn.execute(decision_instances.insert(), instances)
        if hosts:
            conn.execute(decision_hosts.insert(), hosts)
        return ids

    def _insert_decisions(self, conn: sa.Connection, rows: list[dict[str, Any]]) -> list[int]:
        ids: list[int] = []
        for page in _pages(rows):
            if self._returning:
                stmt = decisions.insert().returning(decisions.c.id, sort_by_parameter_order=True)
                ids.extend(r[0] for r in conn.execute(stmt, page))
            else:  # no RETURNING (MySQL): one statement per row for its id
                for row in page:
                    ids.append(conn.execute(decisions.insert(), row).inserted_primary_key[0])
        return ids

    # -------------------------------------------------------------------------- reading

    def by_instance(self, instance_uuid: str) -> list[DecisionRecord]:
        """Every decision that names the instance, newest first."""
        stmt = (
            sa.select(decisions)
            .join(decision_instances, decision_instances.c.decision_id == decisions.c.id)
            .where(decision_instances.c.instance_uuid == instance_uuid)
            .order_by(decisions.c.created_at.desc(), decisions.c.id.desc())
        )
        return self._records(stmt)

    def by_request(self, request_id: str) -> list[DecisionRecord]:
        """The decisions of a request id, newest first (nova sends a new id per call, but a
        caller may reuse one)."""
        stmt = (
            sa.select(decisions)
            .where(decisions.c.request_id == request_id)
            .order_by(decisions.c.created_at.desc(), decisions.c.id.desc())
        )
        return self._records(stmt)

    def find(self, key: str) -> list[DecisionRecord]:
        """Every decision that names ``key`` as an instance uuid or as its request id,
        newest first. ``key`` is also looked up as nova writes it (``canonical_key``): an
        upper-case uuid finds the lower-case one nova's databases hold."""
        found: dict[int | None, DecisionRecord] = {}
        for each in dict.fromkeys((key, canonical_key(key))):
            if len(each) <= 36:
                found.update((r.id, r) for r in self.by_instance(each))
            found.update((r.id, r) for r in self.by_request(each))
        return sorted(found.values(), key=lambda r: (r.created_at, r.id or 0), reverse=True)

    def list(
        self,
        *,
        host: str | None = None,
        outcome: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int | None = 50,
        document: Mapping[str, str] | None = None,
    ) -> list[DecisionRecord]:
        """Decisions made at or after ``since`` and at or before ``until`` (naive UTC),
        that chose ``host`` and ended in ``outcome`` if given, newest first, at most
        ``limit``.

        ``document``: only those whose document holds these strings, by dotted path
        (``{"request.project_id": "p1"}``). No column holds them: the database keeps the
        documents whose text has ``"<last key>":"<value>"`` (a LIKE over the documents of
        the window, which no index narrows), and the decoded documents are checked, a page
        at a time, newest first, until ``limit`` match."""
        if host is None:
            when, order = decisions.c.created_at, decisions.c.id
            stmt = sa.select(decisions)
        else:
            when, order = decision_hosts.c.created_at, decision_hosts.c.decision_id
            stmt = (
                sa.select(decisions)
                .join(decision_hosts, decision_hosts.c.decision_id == decisions.c.id)
                .where(decision_hosts.c.host == host)
            )
        if outcome is not None:
            stmt = stmt.where(decisions.c.outcome == outcome)
        if since is not None:
            stmt = stmt.where(when >= since)
        if until is not None:
            stmt = stmt.where(when <= until)
        stmt = stmt.order_by(when.desc(), order.desc())
        if not document:
            if limit is not None:
                stmt = stmt.limit(limit)
            return self._records(stmt)
        for path, value in document.items():
            stmt = stmt.where(decisions.c.document.like(_mention(path, value), escape="/"))
        return self._matching(stmt, when, order, document, limit)

    def _matching(
        self,
        stmt: sa.Select[Any],
        when: Any,
        order: Any,
        document: Mapping[str, str],
        limit: int | None,
    ) -> list[DecisionRecord]:
        """The records of ``stmt`` whose documents hold ``document``'s values, read a page
        at a time after the last one seen (a text that merely mentions a value elsewhere,
        or a case-insensitive LIKE, lets through more than match)."""
        page = max(_MATCH_PAGE, limit or 0)
        out: list[DecisionRecord] = []
        after = None
        while True:
            query = stmt
            if after is not None:
                at, last = after
                query = query.where(sa.or_(when < at, sa.and_(when == at, order < last)))
            records = self._records(query.limit(page))
            for rec in records:
                if all(_at_path(rec.document, p) == v for p, v in document.items()):
                    out.append(rec)
                    if limit is not None and len(out) >= limit:
                        return out
            if len(records) < page:
                return out
            after = (records[-1].created_at, records[-1].id)

    def count(self) -> int:
        """How many decisions the store holds (a full count: not for the request path)."""
        with self.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(decisions)).scalar())

    def _records(self, stmt: sa.Select[Any]) -> list[DecisionRecord]:
        with self.engine.connect() as conn:
            return [_record(row) for row in conn.execute(stmt).mappings()]

    # -------------------------------------------------------------------------- pruning

    def prune(
        self,
        *,
        max_age: float | None = None,
        max_records: int | None = None,
        now: datetime | None = None,
        chunk: int = PRUNE_CHUNK,
        max_chunks: int = PRUNE_CHUNKS_PER_CALL,
    ) -> Pruned:
        """Delete the decisions older than ``max_age`` seconds, then the oldest beyond the
        newest ``max_records``: at most ``chunk`` per transaction and ``max_chunks``
        transactions per call (``more`` says that it stopped there; call again).

        Finding where ``max_records`` cuts reads that many entries of the time index; it is
        skipped when no decision was added since the last call found nothing to cut.
        """
        budget = chunk * max_chunks
        by_age = 0
        if max_age is not None:
            cutoff = (now or utcnow()) - timedelta(seconds=max_age)
            by_age = self._delete_older(decisions.c.created_at < cutoff, chunk, budget)
        by_count = 0
        if max_records is not None and by_age < budget:
            by_count = self._prune_count(max_records, chunk, budget - by_age)
        deleted = by_age + by_count
        return Pruned(by_age=by_age, by_count=by_count, more=deleted >= budget)

    def _prune_count(self, max_records: int, chunk: int, budget: int) -> int:
        with self.engine.connect() as conn:
            newest = conn.execute(sa.select(sa.func.max(decisions.c.id))).scalar()
            if self._settled == (newest, max_records):
                return 0  # nothing added since the table last held at most max_records
            edge = conn.execute(
                sa.select(decisions.c.created_at, decisions.c.id)
                .order_by(decisions.c.created_at.desc(), decisions.c.id.desc())
                .offset(max_records)
                .limit(1)
            ).first()
        if edge is None:
            self._settled = (newest, max_records)
            return 0
        at, last_id = edge
        beyond = sa.or_(
            decisions.c.created_at < at,
            sa.and_(decisions.c.created_at == at, decisions.c.id <= last_id),
        )
        deleted = self._delete_older(beyond, chunk, budget)
        if deleted < budget:
            self._settled = (newest, max_records)
        return deleted

    def _delete_older(self, condition: Any, chunk: int, budget: int) -> int:
        """Delete the decisions matching ``condition``, oldest first, a chunk per
        transaction, at most ``budget``; how many were deleted."""
        deleted = 0
        while deleted < budget:
            size = min(chunk, budget - deleted)
            with self.engine.connect() as conn:
                ids = list(
                    conn.execute(
                        sa.select(decisions.c.id)
                        .where(condition)
                        .order_by(decisions.c.created_at, decisions.c.id)
                        .limit(size)
                    ).scalars()
                )
            if not ids:
                break
            self.delete(ids)
            deleted += len(ids)
            if len(ids) < size:
                break
        return deleted

    def delete(self, ids: Sequence[int]) -> None:
        """Delete these decisions and their side rows, in one transaction (the tables in
        the order ``add`` writes them, so that the two wait for each other rather than
        deadlock)."""

        def work(conn: sa.Connection) -> None:
            conn.execute(decisions.delete().where(decisions.c.id.in_(ids)))
            conn.execute(
                decision_instances.delete().where(decision_instances.c.decision_id.in_(ids))
            )
            conn.execute(decision_hosts.delete().where(decision_hosts.c.decision_id.in_(ids)))

        self._transaction(work)


# ------------------------------------------------------------------------------ helpers


def _make_engine(url: URL, connect_timeout: int) -> sa.Engine:
    backend = url.get_backend_name()
    if backend == "sqlite":
        return _sqlite_engine(url)
    if backend in ("mysql", "mariadb", "postgresql"):
        return sa.create_engine(
            url,
            pool_pre_ping=True,
            pool_recycle=3600,
            connect_args={"connect_timeout": max(1, int(connect_timeout))},
        )
    return sa.create_engine(url, pool_pre_ping=True)


def _sqlite_engine(url: URL) -> sa.Engine:
    in_memory = url.database in (None, "", ":memory:")
    kwargs: dict[str, Any] = {
        # the writer thread uses connections the constructor's thread opened
        "connect_args": {"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT},
    }
    if in_memory:
        kwargs["poolclass"] = sa.pool.StaticPool  # one database, shared by every thread
    engine = sa.create_engine(url, **kwargs)

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # transactions are ours to begin (below), not the driver's
        dbapi_conn.isolation_level = None
        if not in_memory:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA journal_size_limit=67108864")  # WAL back to 64 MB at most
            cur.close()

    @sa.event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        write = conn.get_execution_options().get(_WRITE, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


# the database rolled the transaction back to break a deadlock, or gave up waiting for a
# lock: MySQL/MariaDB 1213 and 1205, PostgreSQL 40P01 and 40001
_MYSQL_DEADLOCKS = (1213, 1205)
_PG_DEADLOCKS = ("40P01", "40001")


def _deadlock(exc: sa.exc.DBAPIError) -> bool:
    orig = getattr(exc, "orig", None)
    if getattr(orig, "pgcode", None) in _PG_DEADLOCKS:
        return True
    args = getattr(orig, "args", ())
    return bool(args) and args[0] in _MYSQL_DEADLOCKS


_UNREACHABLE = (
    "can't connect",
    "could not connect",
    "connection refused",
    "timed out",
    "unable to open",
)


def _unreachable(exc: sa.exc.OperationalError) -> bool:
    """A server that refused or dropped the connection (not worth trying again now)."""
    text = first_line(exc).lower()
    return any(s in text for s in _UNREACHABLE)


def _row(rec: DecisionRecord) -> dict[str, Any]:
    request_id = None if rec.request_id is None else str(rec.request_id)[:255]
    return {
        "request_id": request_id,
        "created_at": naive_utc(rec.created_at),
        "outcome": str(rec.outcome)[:32],
        "instance_uuids": json.dumps([str(u) for u in rec.instance_uuids or ()]),
        "hosts": json.dumps([None if h is None else str(h) for h in rec.hosts or ()]),
        "document": encode_document(rec.document),
    }


def _pages(rows: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    page: list[dict[str, Any]] = []
    size = 0
    for row in rows:
        length = len(row["document"]) + len(row["instance_uuids"]) + len(row["hosts"])
        if page and size + length > _INSERT_PAGE_BYTES:
            yield page
            page, size = [], 0
        page.append(row)
        size += length
    if page:
        yield page


def _record(row: Any) -> DecisionRecord:
    return DecisionRecord(
        id=int(row["id"]),
        request_id=row["request_id"],
        created_at=row["created_at"],
        outcome=row["outcome"],
        instance_uuids=_json_list(row["instance_uuids"]),
        hosts=_json_list(row["hosts"]),
        document=decode_document(row["document"]),
    )


def canonical_key(key: str) -> str:
    """``key`` as nova writes it: a uuid (upper-case, without dashes, in braces, as a URN)
    in its lower-case dashed form, ``req-`` and a uuid likewise; anything else as given,
    without surrounding blanks."""
    text = key.strip()
    prefix = ""
    if text[:4].lower() == "req-":
        prefix, text = "req-", text[4:]
    try:
        return prefix + str(UUID(text))
    except ValueError:
        return key.strip()


# rows a filtered list reads per query, at least (the limit, if larger)
_MATCH_PAGE = 200


def _mention(path: str, value: str) -> str:
    """The LIKE pattern of a document's text that holds ``"<last key>":<value>`` (as
    ``encode_document`` writes it), with LIKE's wildcards escaped by ``/``."""
    text = json.dumps(path.rsplit(".", 1)[-1]) + ":" + json.dumps(value)
    escaped = text.replace("/", "//").replace("%", "/%").replace("_", "/_")
    return f"%{escaped}%"


def _at_path(document: Any, path: str) -> Any:
    """The value at a dotted path of the document (None where it has none)."""
    for key in path.split("."):
        if not isinstance(document, dict):
            return None
        document = document.get(key)
    return document


def _json_list(text: str | None) -> list[Any]:
    try:
        value = json.loads(text or "[]")
    except ValueError:
        return []
    return value if isinstance(value, list) else []
