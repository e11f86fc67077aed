"""Reads sent ahead: a request sends its statements when it arrives and receives their rows
in its own thread when it needs them.

Why not a worker thread: a thread blocked on the database needs the interpreter lock back
after every round trip, and while the request's thread computes (the provider view's
query, the filters) CPython hands the lock over only every switch interval (5 ms). Four
round trips (checkout ping, statement, statement, rollback) beside a busy thread took
about 24 ms for 0.2 ms of work. Sent from the request's thread and received there, each
statement runs in the database on the other core while the request computes, and nothing
waits for a switch.

Only with PyMySQL, nova's usual driver, through three of its connection's internals
(``_execute_command``, ``_read_query_result``, ``_sock``); ``supported`` says whether an
engine qualifies, and callers read on threads as before where it does not. The statements
run on a pool of their own: autocommit (each statement sees every commit made before it
began), no liveness ping. A connection whose answer was received goes to an idle list of
its own rather than back through the pool (a checkout costs more than the statement's send);
it is closed after ``_RECYCLE_SECONDS``. A connection that turns out to be dead costs one
more try: the statement is then run on the caller's engine, which pings.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import select
import threading
import time
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

LOG = logging.getLogger(__name__)

_ENGINES: dict[str, Engine] = {}
_ENGINES_LOCK = threading.Lock()
# the same, found by the caller's engine (no URL to render per statement)
_BY_ENGINE: dict[Engine, Engine] = {}
# compiled once per statement and dialect (1 to 1.5 ms each for the reads sent ahead): the
# statements are the read functions' module-level ones; the statement is kept with its
# compiled form so that its id cannot be reused
_COMPILED: dict[tuple[int, str], tuple[Any, Any]] = {}
_COM_QUERY = 3  # pymysql.constants.COMMAND.COM_QUERY
# idle connections of each read-ahead pool, checked out of it once: (connection, when made)
_IDLE: dict[Engine, list[tuple[Any, float]]] = {}
_RECYCLE_SECONDS = 3600.0
# supported()'s answer per engine (engines are long-lived; a disposed one is dropped with it)
_SUPPORTED: weakref.WeakKeyDictionary[Engine, bool] = weakref.WeakKeyDictionary()


def supported(engine: Engine) -> bool:
    """Whether statements of ``engine`` can be sent ahead (PyMySQL with the internals
    used here). Asked per request: the answer is kept per engine."""
    found = _SUPPORTED.get(engine)
    if found is None:
        found = _SUPPORTED[engine] = _supported(engine)
    return found


def _supported(engine: Engine) -> bool:
    if engine.dialect.driver != "pymysql":
        return False
    try:
        from pymysql.connections import Connection
    except ImportError:  # pragma: no cover - the dialect imported it
        return False
    return all(hasattr(Connection, name) for name in ("_execute_command", "_read_query_result"))


def _engine_for(engine: Engine) -> Engine:
    """The read-ahead pool for ``engine``'s database (created on first use)."""
    found = _BY_ENGINE.get(engine)
    if found is not None:
        return found
    url = engine.url.render_as_string(hide_password=False)
    with _ENGINES_LOCK:
        found = _ENGINES.get(url)
        if found is None:
            found = _ENGINES[url] = sa.create_engine(
                engine.url,
                isolation_level="AUTOCOMMIT",
                skip_autocommit_rollback=True,
                pool_recycle=3600,
                # a safety net: a request waits for an answer only once it has arrived
                connect_args={"connect_timeout": 5, "read_timeout": 60},
            )
        _BY_ENGINE[engine] = found
    return found


def dispose_engines() -> None:
    """Close every read-ahead pool (tests, a process that forked)."""
    with _ENGINES_LOCK:
        engines = list(_ENGINES.values())
        _ENGINES.clear()
        _BY_ENGINE.clear()
        idle = [raw for conns in _IDLE.values() for raw, _ in conns]
        _IDLE.clear()
    for raw in idle:
        _drop(raw)
    for engine in engines:
        engine.dispose()


def _sql_literal(conn: Any, value: Any) -> str:
    """``value`` as an SQL literal, as PyMySQL's ``escape`` writes it; the types the read
    statements bind are written here directly (PyMySQL's path costs about 2.5 us a value,
    20 us a statement)."""
    kind = type(value)
    if kind is int:
        return str(value)
    if kind is datetime.datetime and value.tzinfo is None:
        return "'" + value.isoformat(" ") + "'"
    if value is None:
        return "NULL"
    return conn.escape(value)


def _checkout(pool: Engine) -> tuple[Any, float]:
    """An idle connection of ``pool`` (the most recently used), else a new checkout."""
    idle = _IDLE.get(pool)
    now = time.monotonic()
    while idle:
        try:
            raw, born = idle.pop()
        except IndexError:  # another thread took the last one
            break
        if now - born < _RECYCLE_SECONDS:
            return raw, born
        _drop(raw)
    return pool.raw_connection(), now


def _release(pool: Engine, raw: Any, born: float) -> None:
    """Keep a connection whose answer was received for the next send (autocommit: nothing
    to roll back)."""
    _IDLE.setdefault(pool, []).append((raw, born))


def _compiled(stmt: Any, dialect: Any) -> Any:
    key = (id(stmt), dialect.name)
    found = _COMPILED.get(key)
    if found is None or found[0] is not stmt:
        found = _COMPILED[key] = (stmt, stmt.compile(dialect=dialect))
    return found[1]


class _Rows(list):
    """Rows received for a statement sent ahead, answering as much of SQLAlchemy's Result
    as the read functions use."""

    def all(self) -> list[tuple]:
        return list(self)

    fetchall = all

    def one(self) -> tuple:
        if len(self) != 1:
            raise sa.exc.NoResultFound if not self else sa.exc.MultipleResultsFound
        return self[0]

    def first(self) -> tuple | None:
        return self[0] if self else None


def _drop(raw: Any) -> None:
    """Invalidate a pooled connection whose answer nobody received (its socket still holds
    it): it must never be handed out again."""
    try:
        raw.invalidate()
    except Exception:  # already broken
        LOG.debug("Dropping a read-ahead connection failed", exc_info=True)


def _broken(exc: BaseException) -> bool:
    """Whether ``exc`` leaves the connection unusable (not a statement the database
    refused)."""
    from pymysql import err

    return isinstance(exc, (err.OperationalError, err.InterfaceError, OSError)) or not isinstance(
        exc, err.MySQLError
    )


class _Sent:
    """One statement sent on one pooled connection, its answer not received yet."""

    __slots__ = ("params", "raw", "pool", "born", "rows", "error", "_finalizer", "__weakref__")

    def __init__(self, raw: Any, params: Mapping[str, Any] | None, pool: Engine, born: float):
        self.raw = raw
        self.pool = pool
        self.born = born
        self.params = dict(params) if params else {}
        self.rows: _Rows | None = None
        self.error: BaseException | None = None
        # sent and never received (the request failed first): closed when dropped
        self._finalizer = weakref.finalize(self, _drop, raw)

    def sock(self) -> Any:
        return getattr(self.raw.driver_connection, "_sock", None)

    def receive(self) -> _Rows:
        if self.rows is None and self.error is None:
            conn = self.raw.driver_connection
            try:
                conn._read_query_result()
                result = conn._result
                self.rows = _Rows(result.rows or ())
            except Exception as exc:
                self.error = exc
                self._finalizer.detach()
                if _broken(exc):
                    _drop(self.raw)
                else:  # the database refused the statement: the connection is fine
                    _release(self.pool, self.raw, self.born)
            else:
                self._finalizer.detach()
                _release(self.pool, self.raw, self.born)
        if self.error is not None:
            raise self.error
        assert self.rows is not None
        return self.rows

    def discard(self) -> None:
        with contextlib.suppress(Exception):
            self.receive()


class ReadAhead:
    """Statements of one engine sent now, answered later.

    ``send`` each statement known at arrival; later, ``connect()`` gives a connection-like
    object whose ``execute`` answers a statement sent ahead (same statement object, same
    parameters) from its received rows and runs any other on a connection of ``engine``
    (the read functions of ``db.queries`` take it in place of an engine or connection). A
    statement that could not be sent, or whose answer failed (a connection the database
    dropped), is run on ``engine`` instead.
    """

    def __init__(self, engine: Engine):
        self.engine = engine
        self._sent: dict[int, tuple[sa.Executable, _Sent]] = {}

    def send(self, stmt: sa.Executable, params: Mapping[str, Any] | None = None) -> None:
        pool = _engine_for(self.engine)
        compiled = _compiled(stmt, pool.dialect)
        raw = None
        try:
            raw, born = _checkout(pool)
            conn = raw.driver_connection
            # what PyMySQL's cursor.mogrify does with a dict of parameters (pyformat)
            values = compiled.construct_params(params)
            sql = compiled.string % {k: _sql_literal(conn, v) for k, v in values.items()}
            conn._execute_command(_COM_QUERY, sql)
        except Exception as exc:
            # not sent (no connection, a dead one): execute() runs it the ordinary way
            LOG.debug("A read could not be sent ahead: %s", exc)
            if raw is not None:
                _drop(raw)
            return
        self._sent[id(stmt)] = (stmt, _Sent(raw, params, pool, born))

    def wait(self, deadline: float) -> bool:
        """Whether every answer has arrived by ``deadline`` (``time.monotonic()``),
        waiting for them up to then."""
        socks = [s.sock() for _, s in self._sent.values() if s.rows is None and s.error is None]
        socks = [s for s in socks if s is not None]
        while socks:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            ready, _, _ = select.select(socks, [], [], left)
            socks = [s for s in socks if s not in ready]
        return True

    def discard(self) -> None:
        """Receive and drop what nobody will ask for."""
        for _, sent in self._sent.values():
            sent.discard()
        self._sent.clear()

    @contextlib.contextmanager
    def connect(self) -> Iterator[_AheadConnection]:
        conn = _AheadConnection(self)
        try:
            yield conn
        finally:
            conn.close()

    def _take(self, stmt: Any, params: Mapping[str, Any] | None) -> _Rows | None:
        found = self._sent.pop(id(stmt), None)
        if found is None:
            return None
        sent_stmt, sent = found
        if sent_stmt is not stmt or sent.params != dict(params or {}):
            sent.discard()
            return None
        try:
            return sent.receive()
        except Exception as exc:
            LOG.debug("A read sent ahead failed (%s); reading again", exc)
            return None


class _AheadConnection:
    """What ``ReadAhead.connect()`` yields: ``execute`` as a SQLAlchemy connection's."""

    def __init__(self, ahead: ReadAhead):
        self._ahead = ahead
        self._conn: sa.Connection | None = None

    def connect(self) -> contextlib.AbstractContextManager[_AheadConnection]:
        return contextlib.nullcontext(self)

    def execute(self, stmt: Any, params: Mapping[str, Any] | None = None) -> Any:
        rows = self._ahead._take(stmt, params)
        if rows is not None:
            return rows
        if self._conn is None:
            self._conn = self._ahead.engine.connect()
        return self._conn.execute(stmt, params)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
