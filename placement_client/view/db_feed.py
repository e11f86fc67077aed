"""Feeding the provider view from Placement's database, read-only.

The feed reads Placement 16's tables (schema head a082b8bb98d0) with its own SQL, each read in
one read-only transaction that sees one consistent snapshot (MariaDB/MySQL: ``START TRANSACTION
WITH CONSISTENT SNAPSHOT, READ ONLY`` at REPEATABLE READ; PostgreSQL: REPEATABLE READ READ ONLY;
SQLite: one transaction on a connection opened ``mode=ro``). It never writes, and holds nothing
open between reads.

The cold load reads everything: providers with their tree, inventories, allocation rows
(consumers and usage), traits and aggregates. A poll then finds what changed since the last
read, in one snapshot:

* a checksum row: the number of providers, the sums of their ids and generations, the number of
  allocation rows and the sum of ``used``, and the database's clock;
* the providers whose ``updated_at`` or ``created_at`` is at most ``margin`` seconds older than
  the previous snapshot (a generation change moves ``updated_at``, to the second on MariaDB; the
  margin covers transactions that commit late and clocks that disagree). Those whose
  generation, name or tree is not what was read are read again, with the providers marked
  dirty;
* when the providers' checksum still differs after that (a deleted provider, a commit later than
  ``margin``, a Placement host whose clock is off), and every ``full_scan_every`` seconds anyway
  (0: never), every provider's (id, generation) is compared. A generation only grows, so equal
  sums mean that no generation changed;
* ``DELETE /allocations/{consumer}`` frees usage without changing a generation: when the count
  or the sum of the allocation rows differs from what the view holds, a GROUP BY per provider
  names the providers to read again. All of this is one snapshot, so equal totals mean that no
  allocation was deleted unseen.

A provider is read again when its generation is not the one read, even when it is the one the
view expects after its own claims: its allocation rows must be counted for the check above.
Renaming or re-parenting a provider does not change its generation; the feed sees it through
``updated_at`` within the margin, and through the sums of parent and root ids otherwise.

``catch_up`` is the per-request check (``ViewRefresher.ensure_fresh``): one statement, the
providers' count and sums of generations, root ids and parent ids, compared with what the view
holds plus one generation per own claim it counts and has not read yet. Every change Placement
makes to a provider's traits, aggregates, inventory or allocations bumps its generation, and
generations only grow; moving a provider to another tree changes its root id (and its
descendants'), moving it within its tree its parent id. Equal sums prove that the view holds
every such change committed before the statement began, but for allocations deleted (usage
over-counted: a host left out), which the polls find; when they differ, a poll without the
allocation totals reads what changed. The consumers the scheduler counts as pending on its
hosts (``ProviderView.counted_claims``: instances it placed that no report counts yet) are
looked up by the allocations' consumer index in the check's own statement (no round trip
more: a second one cost 9 ms p50 at 1,000 hosts, most of it waiting for the interpreter lock),
so a claim deleted before a request is forgotten by that request, in the view and in the
host's usage (about 2 ms more on the view's step at 1,000 hosts with 60-120 claims counted).
Cost on MariaDB: 0.18 / 1.34 / 13 ms of the database's CPU per check at 1,000 / 10,000 /
100,000 providers and 0.07 / 0.10 / 0.23 ms of the scheduler's (0.34 / 1.5 ms p50 of wall
time up to 10,000); reading what changed, 7 / 14 / 65 ms more.

Cost (Placement 16 on MariaDB through pymysql, 2 cores; 10k providers, 60k allocation rows):
the cold load about 0.7 s, 0.6 s of it client CPU, most of that pymysql parsing rows; an idle
poll (two SELECTs in a transaction) about 17 ms of wall time (the database counting the
allocation rows) and 1.5 ms of client CPU; 50 changed providers about 3 ms and 5 ms of CPU more;
the (id, generation) scan about 40 ms (25 ms CPU); the GROUP BY per provider about 35 ms (30 ms
CPU), only after allocations were deleted. The window costs about 3 µs of CPU per provider
written within ``margin`` of the previous poll. At 300 providers: a load of 20-40 ms, an idle
poll about 2 ms and 1 ms of CPU.
"""

from __future__ import annotations

import datetime
import logging
import re
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Connection, make_url

from placement_client.view.model import Inventory, ProviderRecord
from placement_client.view.view import ProviderView

LOG = logging.getLogger(__name__)

_CHUNK = 500  # ids per IN (...) list
_UUID = re.compile(r"[0-9a-fA-F]{8}(-?[0-9a-fA-F]{4}){3}-?[0-9a-fA-F]{12}")


_CONNECT_TIMEOUT = 5
_READ_TIMEOUT = 60
# the per-request check waits less: past it the request asks Placement (one statement, about
# 15 ms at 100,000 providers)
_CHECK_TIMEOUT = 5
_COM_QUERY = 3  # pymysql.constants.COMMAND.COM_QUERY

# per backend: the statement that opens a read-only transaction on one snapshot, the
# database's clock (UTC and naive, as Placement writes its timestamps), and a SUM of integers
# that comes back as an integer (MySQL's is a DECIMAL, slow to parse)
_BEGIN = {
    "mysql": "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY",
    "postgresql": "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
    # deferred: the snapshot starts at the first read and lasts to the end
    "sqlite": "BEGIN",
}
_NOW = {
    "mysql": "UTC_TIMESTAMP(6)",
    "postgresql": "(now() AT TIME ZONE 'UTC')",
    "sqlite": "strftime('%Y-%m-%d %H:%M:%f', 'now')",
}
_SUM = {
    "mysql": "CAST(COALESCE(SUM({}), 0) AS SIGNED)",
    "postgresql": "COALESCE(SUM({}), 0)",
    "sqlite": "COALESCE(SUM({}), 0)",
}
# the same over the providers (the per-request check's path): MySQL adds DECIMALs row by row,
# doubles 15 % faster (1.3 against 1.5 ms at 10,000 providers), and exactly while the sum
# stays below 2**53 (ids, generations and tree ids of a million providers sum to far less)
_FAST_SUM = dict(_SUM, mysql="COALESCE(SUM({} + 0e0), 0)")


def _sql(text: str, *expanding: str, **types: Any) -> sa.TextClause:
    clause = sa.text(text)
    binds = [sa.bindparam(name, expanding=True) for name in expanding]
    if ":w" in text:
        binds.append(sa.bindparam("w", type_=sa.DateTime()))
    if binds:
        clause = clause.bindparams(*binds)
    return clause.columns(**types) if types else clause


class _Sql:
    """The feed's statements, for one backend."""

    def __init__(self, backend: str):
        total = _SUM[backend].format
        # everything about some providers ({where}: all, or those of some ids), in the order
        # _read takes them; allocations come as usage per class and the consumers apart,
        # which parses a third of the rows (the GROUP BY follows an index)
        parts = (
            (
                "SELECT rp.id, rp.uuid, rp.name, COALESCE(rp.generation, 0), "
                "rp.parent_provider_id, rp.root_provider_id, p.uuid AS parent_uuid, "
                "r.uuid AS root_uuid "
                "FROM resource_providers rp "
                "LEFT JOIN resource_providers p ON p.id = rp.parent_provider_id "
                "LEFT JOIN resource_providers r ON r.id = rp.root_provider_id{where}",
                "rp.id",
            ),
            (
                "SELECT i.resource_provider_id, rc.name, i.total, i.reserved, i.min_unit, "
                "i.max_unit, i.step_size, i.allocation_ratio FROM inventories i "
                "JOIN resource_classes rc ON rc.id = i.resource_class_id{where}",
                "i.resource_provider_id",
            ),
            (
                f"SELECT a.resource_provider_id, rc.name, COUNT(*), {total('a.used')} "
                "FROM allocations a JOIN resource_classes rc ON rc.id = a.resource_class_id"
                "{where} GROUP BY a.resource_provider_id, a.resource_class_id, rc.name",
                "a.resource_provider_id",
            ),
            (
                "SELECT DISTINCT resource_provider_id, consumer_id FROM allocations{where}",
                "resource_provider_id",
            ),
            (
                "SELECT rpt.resource_provider_id, t.name FROM resource_provider_traits rpt "
                "JOIN traits t ON t.id = rpt.trait_id{where}",
                "rpt.resource_provider_id",
            ),
            (
                "SELECT rpa.resource_provider_id, pa.uuid FROM resource_provider_aggregates rpa "
                "JOIN placement_aggregates pa ON pa.id = rpa.aggregate_id{where}",
                "rpa.resource_provider_id",
            ),
        )
        self.everything = tuple(_sql(q.format(where="")) for q, _ in parts)
        self.by_ids = tuple(_sql(q.format(where=f" WHERE {c} IN :ids"), "ids") for q, c in parts)
        self.now = _sql(f"SELECT {_NOW[backend]} AS now", now=sa.DateTime())
        # the providers' sums: count, ids, generations, and the parent and root ids
        # (re-parenting changes no generation). Plain sums: an expression per row costs
        # more than the scan (weighting the ids: 2.5 against 1.8 ms at 10,000 providers).
        fast = _FAST_SUM[backend].format
        providers = (
            f"SELECT COUNT(*) AS n, {fast('id')} AS ids, {fast('generation')} AS generations, "
            f"{fast('parent_provider_id')} AS parents, {fast('root_provider_id')} AS roots "
            "FROM resource_providers"
        )
        # the per-request check: one statement, one row, the providers table alone; sent
        # as is on a DB-API cursor (no parameters, no SQLAlchemy on the request's path).
        # Each column summed costs about 0.35 ms of the database's CPU at 10,000 providers
        # (MariaDB); the parent ids are in, as a move within one tree changes same_subtree's
        # answers and no generation
        stamp = (
            f"COUNT(*), {fast('generation')}, {fast('root_provider_id')}, "
            f"{fast('parent_provider_id')}"
        )
        self.stamp = f"SELECT {stamp} FROM resource_providers"
        self.checksum = _sql(
            "SELECT p.n, p.ids, p.generations, p.parents, p.roots, a.alloc_rows, a.used, "
            f"{_NOW[backend]} AS now FROM ({providers}) p CROSS JOIN "
            f"(SELECT COUNT(*) AS alloc_rows, {total('used')} AS used FROM allocations) a",
            now=sa.DateTime(),
        )
        self.provider_checksum = _sql(
            f"SELECT p.n, p.ids, p.generations, p.parents, p.roots, {_NOW[backend]} AS now "
            f"FROM ({providers}) p",
            now=sa.DateTime(),
        )
        self.window = _sql(
            "SELECT id, name, COALESCE(generation, 0), parent_provider_id, root_provider_id "
            "FROM resource_providers WHERE updated_at >= :w OR created_at >= :w"
        )
        self.generations = _sql(
            "SELECT id, COALESCE(generation, 0), parent_provider_id, root_provider_id "
            "FROM resource_providers"
        )
        self.ids_of = _sql("SELECT id FROM resource_providers WHERE uuid IN :u", "u")
        # the same check with, in the same statement (no round trip more on the request's
        # path), where some consumers hold allocations, by the root of each provider: the
        # allocations' index on consumer_id, a few rows per consumer whatever the cloud.
        # The stamp's row is the one without a consumer (zeros, not NULLs, fill the held
        # rows' sums: PostgreSQL types a bare NULL of a DISTINCT as text); {} is a list of
        # quoted uuids.
        self.stamp_and_held = (
            f"SELECT {stamp}, NULL, NULL FROM resource_providers "
            "UNION ALL SELECT DISTINCT 0, 0, 0, 0, a.consumer_id, r.uuid "
            "FROM allocations a JOIN resource_providers rp ON rp.id = a.resource_provider_id "
            "JOIN resource_providers r ON r.id = rp.root_provider_id "
            "WHERE a.consumer_id IN ({})"
        )
        # what some consumers hold, as GET /allocations/{consumer} gives it
        self.held_by = _sql(
            "SELECT a.consumer_id, rp.uuid, rc.name, a.used FROM allocations a "
            "JOIN resource_providers rp ON rp.id = a.resource_provider_id "
            "JOIN resource_classes rc ON rc.id = a.resource_class_id "
            "WHERE a.consumer_id IN :c",
            "c",
        )
        self.usage = _sql(
            f"SELECT resource_provider_id, COUNT(*), {total('used')} FROM allocations "
            "GROUP BY resource_provider_id"
        )


class _Known(NamedTuple):
    """What the feed last read of one provider (by database id)."""

    uuid: str
    generation: int
    name: str
    parent_id: int | None
    root_id: int | None
    alloc_rows: int
    used: int


class _Sums:
    """Sums over the providers the view holds, as the database's checksum row has them."""

    __slots__ = ("count", "ids", "generations", "parents", "roots", "alloc_rows", "used")

    def __init__(self) -> None:
        self.count = self.ids = self.generations = self.alloc_rows = self.used = 0
        self.parents = self.roots = 0

    def copy(self) -> _Sums:
        other = _Sums()
        for name in self.__slots__:
            setattr(other, name, getattr(self, name))
        return other

    def add(self, id_: int, k: _Known, sign: int = 1) -> None:
        self.count += sign
        self.ids += sign * id_
        self.generations += sign * k.generation
        self.parents += sign * (k.parent_id or 0)
        self.roots += sign * (k.root_id or 0)
        self.alloc_rows += sign * k.alloc_rows
        self.used += sign * k.used

    def providers(self) -> tuple[int, int, int, int, int]:
        """What the providers' checksum must say if nothing changed."""
        return self.count, self.ids, self.generations, self.parents, self.roots


class _Read(NamedTuple):
    """Providers read, by database id."""

    records: dict[int, ProviderRecord]
    known: dict[int, _Known]
    orphans: tuple[int, int]  # (rows, used) of allocations of no provider (full reads only)


class _Found(NamedTuple):
    """What one poll found."""

    read: dict[int, tuple[ProviderRecord, _Known]]
    removed: set[int]
    full: bool  # every provider's generation was compared
    orphans: tuple[int, int] | None  # allocations of no provider, when they were counted
    now: datetime.datetime


class DatabaseFeed:
    """Reads providers straight from Placement's database (read-only; see the module doc)."""

    name = "database"
    # catch_up proves the view current for each request
    fresh_per_request = True

    def __init__(
        self,
        url: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        full_scan_every: float = 30.0,
        margin: float = 5.0,
    ):
        self.full_scan_every = full_scan_every
        self.margin = datetime.timedelta(seconds=margin)
        self._clock = clock
        self._engine, backend = _read_only_engine(url)
        self._check_engine, _ = _read_only_engine(url, _CHECK_TIMEOUT, pool_size=1)
        self._begin = _BEGIN[backend]
        self._sql = _Sql(backend)
        self._known: dict[int, _Known] = {}
        self._id_of: dict[str, int] = {}
        self._sums = _Sums()
        self._orphans = (0, 0)
        self._read_at: datetime.datetime | None = None  # the last snapshot, database clock
        self._last_full: float | None = None
        self._dirty: set[str] = set()  # taken from the view, not read yet
        # one read at a time: the refresher's polls and the requests' catch_up share the
        # feed's idea of what it read
        self._lock = threading.Lock()
        self._check_conn: Any = None  # the DB-API connection the per-request checks use
        # the check's statement sent ahead (``send_check``): when, on the feed's clock, and
        # the view's own claims answered by then; the lock keeps one statement in flight
        self._check_lock = threading.Lock()
        self._stamp_sent: tuple[float, int, dict[str, set[str]]] | None = None
        # for tests, the benchmark and logs
        self.reads = 0  # providers read
        self.full_scans = 0  # polls that compared every provider's generation
        self.usage_scans = 0  # polls that counted allocations per provider
        self.window_rows = 0  # providers the last poll found written lately (and compared)
        self.checks = 0  # catch_up calls (per-request checks)
        self.catch_ups = 0  # catch_up calls that found a change and read it
        self.claim_checks = 0  # catch_up calls that asked where the counted claims are held

    def allocations_of(self, consumers: Iterable[str]) -> dict[str, dict[str, Any]]:
        """What Placement's database holds for each of ``consumers``, on one snapshot
        (``Feed.allocations_of``)."""
        found: dict[str, dict[str, Any]] = {}
        with self._snapshot() as conn:
            for chunk in _chunks(sorted(set(consumers))):
                for consumer, rp, rc, used in conn.execute(self._sql.held_by, {"c": chunk}):
                    resources = found.setdefault(str(consumer), {}).setdefault(
                        str(rp), {"resources": {}}
                    )["resources"]
                    resources[str(rc)] = int(used)
        return found

    def close(self) -> None:
        with self._lock, self._check_lock:
            self._drop_check_connection()
        self._check_engine.dispose()
        self._engine.dispose()

    # -- the two entry points ------------------------------------------------------------------
    def load(self, view: ProviderView) -> None:
        """Read every provider into the view (the cold load), from one snapshot."""
        with self._lock:
            self._load(view)

    def _load(self, view: ProviderView) -> None:
        started = self._clock()
        with self._snapshot() as conn:
            now = conn.execute(self._sql.now).scalar_one()
            read = self._read(conn, None)
        view.replace_all(read.records.values(), started)
        self._known, self._id_of, self._sums = {}, {}, _Sums()
        self._remember(read.known, ())
        self._orphans = read.orphans
        self._read_at = now
        self._last_full = started
        self.reads += len(read.records)

    def poll(self, view: ProviderView) -> int:
        """Bring the view up to date; returns how many providers were read again."""
        with self._lock:
            return self._poll(view)

    def send_check(self, view: ProviderView) -> bool:
        """Send the check's statement now, from the caller's thread, without waiting for
        its answer: ``catch_up`` receives it. The database computes the sums while the
        request does other work, and no thread waits for the interpreter lock to read an
        answer (after each round trip, a thread beside a busy one waits up to the switch
        interval, 5 ms). With PyMySQL, through its connection's ``_execute_command``; False
        where it was not sent (another driver, an error):
        ``catch_up`` then runs the statement itself."""
        if self._read_at is None:
            return False
        with self._check_lock:
            try:
                if self._stamp_sent is not None:
                    # one statement at a time on the connection: the one sent before (its
                    # request asked no more) is received first
                    self._stamp_sent = None
                    self._check_conn.driver_connection._read_query_result()
                conn = self._check_connection()
                send = getattr(conn.driver_connection, "_execute_command", None)
                if send is None:
                    return False
                counted = _counted(view)
                sent = (self._clock(), view.claims_pending, counted)
                send(_COM_QUERY, self._check_statement(counted))
            except Exception as exc:  # the statement then runs in catch_up
                LOG.debug("Provider view: the check could not be sent ahead: %s", exc)
                self._drop_check_connection()
                return False
            self._stamp_sent = sent
            return True

    def catch_up(self, view: ProviderView, since: float | None = None) -> int:
        """Make the view hold every change of a provider committed before this call began
        (a request's freshness check): one statement compares the providers' sums with
        what the view holds, its own claims counted; only when they differ, the providers
        that changed are read (as ``poll`` finds them, without the allocation totals).
        The claims the scheduler counts as pending (``view.counted_claims``) are looked up
        too: one that Placement no longer holds on its host (deleted without a generation
        change) has that tree read again and ``on_consumer_gone`` told; providers marked
        dirty (nova's ``delete_instance_info``, a refused claim) are read too. Other
        allocations deleted without a generation change are left to ``poll``. Returns how
        many providers were read.

        ``since`` (the feed's clock): the statement sent ahead (``send_check``) is used
        when it was sent at or after then, and the view is then current as of its sending;
        otherwise the statement runs now."""
        with self._lock:
            if self._read_at is None:
                self._load(view)
                return len(view)
            # the own claims counted when the statement began were all answered, so their
            # generations are in its snapshot; one answered later makes the sums differ (a
            # read), never hides another change
            row, held, (started, pending, counted) = self._stamp(view, since)
            self.checks += 1
            gone = _claims_gone(counted, held)
            if counted:
                self.claim_checks += 1
            if gone:
                LOG.debug(
                    "Provider view: %d counted claim(s) no longer held in Placement: %s",
                    len(gone),
                    ", ".join(f"{c} on {h}" for c, h in gone[:10]),
                )
            sums = self._sums
            expected = (sums.count, sums.generations + pending, sums.roots, sums.parents)
            # providers marked to be read again (nova's delete_instance_info cast, a claim
            # Placement refused) are read before this request too
            dirty = view.has_dirty
            if expected == row and not gone and not dirty:
                view.mark_refreshed(started)
                return 0
            self.catch_ups += 1
            if gone:
                # their usage goes from the view with a read of their trees
                view.mark_dirty(
                    rp for root in {h for _, h in gone} for rp in (root, *view.tree(root))
                )
            read = self._poll(view, allocations=False, dirty=bool(gone) or dirty)
        view.tell_consumers_gone(gone)
        return read

    def _stamp(
        self, view: ProviderView, since: float | None = None
    ) -> tuple[tuple[int, ...], set[tuple[str, str]], tuple[float, int, dict[str, set[str]]]]:
        """The providers' sums (``_Sql.stamp``) and where the counted claims are held, in
        one statement, on a connection kept for it (autocommit: each statement sees every
        commit made before it began), and when it began with the view's own claims answered
        by then and the claims it looked up: the one sent ahead if it was sent at or after
        ``since``, else one run now."""
        with self._check_lock:
            sent, self._stamp_sent = self._stamp_sent, None
            try:
                if sent is not None:
                    conn = self._check_conn.driver_connection
                    conn._read_query_result()
                    rows = conn._result.rows
                    if since is None or sent[0] >= since:
                        return (*_split_check(rows), sent)
                counted = _counted(view)
                began = (self._clock(), view.claims_pending, counted)
                cursor = self._check_connection().cursor()
                try:
                    cursor.execute(self._check_statement(counted))
                    rows = cursor.fetchall()
                finally:
                    cursor.close()
            except Exception:
                self._drop_check_connection()
                raise
        return (*_split_check(rows), began)

    def _check_statement(self, counted: dict[str, set[str]]) -> str:
        """The check's statement: the stamp alone, or with the counted claims looked up
        (their uuids as literals: a consumer that is not a uuid holds nothing in
        Placement, which refuses such a consumer, and is left out)."""
        listed = [c for c in counted if _UUID.fullmatch(c)]
        if not listed:
            return self._sql.stamp
        return self._sql.stamp_and_held.format(", ".join(f"'{c}'" for c in sorted(listed)))

    def _check_connection(self) -> Any:
        conn = self._check_conn
        if conn is None:
            conn = self._check_conn = self._check_engine.raw_connection()
        return conn

    def _drop_check_connection(self) -> None:
        conn, self._check_conn = self._check_conn, None
        if conn is not None:
            try:
                conn.invalidate()
            except Exception:  # already broken: nothing more to release
                LOG.debug("Provider view: dropping the check connection failed", exc_info=True)

    def _poll(self, view: ProviderView, allocations: bool = True, dirty: bool = True) -> int:
        if self._read_at is None:
            self._load(view)
            return len(view)
        # taken before the snapshot begins, so that it includes what made them dirty; kept
        # until a poll succeeds
        if dirty:
            self._dirty |= view.take_dirty()
        started = self._clock()
        full = (
            allocations
            and bool(self.full_scan_every)
            and (self._last_full is None or started - self._last_full >= self.full_scan_every)
        )
        with self._snapshot() as conn:
            found = self._changes(conn, full, allocations)
        gone = [self._known[i].uuid for i in found.removed]
        view.apply([rec for rec, _ in found.read.values()], gone, started)
        self._remember({i: k for i, (_, k) in found.read.items()}, found.removed)
        self._read_at = found.now
        if found.full:
            self._last_full = started
        if found.orphans is not None:
            self._orphans = found.orphans
        if dirty:
            self._dirty = set()
        view.mark_refreshed(started)
        self.reads += len(found.read)
        return len(found.read)

    # -- finding what changed ------------------------------------------------------------------
    def _changes(self, conn: Connection, full: bool, allocations: bool = True) -> _Found:
        """In one snapshot: the providers that changed, read again, and those deleted
        (``allocations``: and those whose allocations were deleted without a generation
        change)."""
        known = self._known
        check = conn.execute(
            self._sql.checksum if allocations else self._sql.provider_checksum
        ).one()
        wanted: set[int] = set()
        removed: set[int] = set()

        # providers written since the previous snapshot, less the margin
        expect = self._sums.copy()
        assert self._read_at is not None
        window = conn.execute(self._sql.window, {"w": self._read_at - self.margin}).all()
        self.window_rows = len(window)
        for id_, name, gen, parent_id, root_id in window:
            k = known.get(id_)
            if k is None:
                expect.count += 1
                expect.ids += id_
                expect.generations += gen
                expect.parents += parent_id or 0
                expect.roots += root_id or 0
                wanted.add(id_)
            elif (k.generation, k.name, k.parent_id, k.root_id) != (
                gen,
                name or "",
                parent_id,
                root_id,
            ):
                expect.generations += gen - k.generation
                expect.parents += (parent_id or 0) - (k.parent_id or 0)
                expect.roots += (root_id or 0) - (k.root_id or 0)
                wanted.add(id_)

        # what the window missed: a deletion, a late commit, a clock that is off
        db_sums = tuple(int(v) for v in check[:5])
        if not full and expect.providers() != db_sums:
            LOG.debug("Provider view: providers changed outside the window; comparing all")
            full = True
        if full:
            self.full_scans += 1
            seen = set()
            for id_, gen, parent_id, root_id in conn.execute(self._sql.generations):
                seen.add(id_)
                k = known.get(id_)
                if k is None or (k.generation, k.parent_id, k.root_id) != (
                    gen,
                    parent_id,
                    root_id,
                ):
                    wanted.add(id_)
            removed = set(known) - seen

        wanted |= self._dirty_ids(conn, removed)
        read: dict[int, tuple[ProviderRecord, _Known]] = {}
        if wanted:
            got = self._read(conn, wanted)
            read = {i: (got.records[i], got.known[i]) for i in got.records}
            removed |= {i for i in wanted if i not in got.records and i in known}

        # allocations deleted without a generation change
        after = self._sums.copy()
        for id_ in removed:
            after.add(id_, known[id_], -1)
        for id_, (_, k) in read.items():
            if id_ in known:
                after.add(id_, known[id_], -1)
            after.add(id_, k)
        orphans = None
        if not allocations:
            return _Found(read, removed, full, orphans, check.now)
        db_rows = int(check.alloc_rows) - self._orphans[0]
        db_used = int(check.used) - self._orphans[1]
        if (after.alloc_rows, after.used) != (db_rows, db_used):
            self.usage_scans += 1
            counted = {rp: (int(c), int(s)) for rp, c, s in conn.execute(self._sql.usage)}
            stale = {
                id_
                for id_, k in known.items()
                if id_ not in removed
                and id_ not in read
                and counted.get(id_, (0, 0)) != (k.alloc_rows, k.used)
            }
            held = (set(known) - removed) | set(read)
            unheld = [v for rp, v in counted.items() if rp not in held]
            orphans = (sum(c for c, _ in unheld), sum(s for _, s in unheld))
            LOG.debug(
                "Provider view: allocations deleted on %d provider(s) without a generation change",
                len(stale),
            )
            if stale:
                more = self._read(conn, stale)
                read.update((i, (more.records[i], more.known[i])) for i in more.records)
        return _Found(read, removed, full, orphans, check.now)

    def _dirty_ids(self, conn: Connection, removed: set[int]) -> set[int]:
        ids = set()
        unknown = []
        for uuid in self._dirty:
            id_ = self._id_of.get(uuid)
            if id_ is None:
                unknown.append(uuid)
            elif id_ not in removed:
                ids.add(id_)
        for chunk in _chunks(sorted(unknown)):
            ids.update(i for (i,) in conn.execute(self._sql.ids_of, {"u": chunk}))
        return ids

    def _remember(self, read: dict[int, _Known], removed: Iterable[int]) -> None:
        for id_ in removed:
            old = self._known.pop(id_, None)
            if old is not None:
                self._sums.add(id_, old, -1)
                self._id_of.pop(old.uuid, None)
        for id_, k in read.items():
            old = self._known.get(id_)
            if old is not None:
                self._sums.add(id_, old, -1)
            self._known[id_] = k
            self._id_of[k.uuid] = id_
            self._sums.add(id_, k)

    # -- reading -------------------------------------------------------------------------------
    def _read(self, conn: Connection, ids: Iterable[int] | None) -> _Read:
        """The providers ``ids`` (None: all of them) as records."""
        if ids is None:
            batches = [(self._sql.everything, {})]
        else:
            batches = [(self._sql.by_ids, {"ids": chunk}) for chunk in _chunks(sorted(ids))]
        providers: list[Any] = []
        inventories: dict[int, dict[str, Inventory]] = {}
        used: dict[int, dict[str, int]] = {}
        consumers: dict[int, set[str]] = {}
        rows: dict[int, int] = {}
        traits: dict[int, set[str]] = {}
        aggregates: dict[int, set[str]] = {}
        for (q_rp, q_inv, q_usage, q_consumers, q_traits, q_aggs), params in batches:
            providers.extend(conn.execute(q_rp, params))
            for rp, rc, total, reserved, min_unit, max_unit, step, ratio in conn.execute(
                q_inv, params
            ):
                inventories.setdefault(rp, {})[rc] = Inventory(
                    int(total), int(reserved), int(min_unit), int(max_unit), int(step), float(ratio)
                )
            for rp, rc, count, n in conn.execute(q_usage, params):
                used.setdefault(rp, {})[rc] = int(n)
                rows[rp] = rows.get(rp, 0) + int(count)
            for rp, consumer in conn.execute(q_consumers, params):
                consumers.setdefault(rp, set()).add(consumer)
            for rp, trait in conn.execute(q_traits, params):
                traits.setdefault(rp, set()).add(trait)
            for rp, agg in conn.execute(q_aggs, params):
                aggregates.setdefault(rp, set()).add(agg)

        records: dict[int, ProviderRecord] = {}
        known: dict[int, _Known] = {}
        for id_, uuid, name, gen, parent_id, root_id, parent, root in providers:
            rec = ProviderRecord(
                uuid=uuid,
                generation=int(gen),
                name=name or "",
                parent_uuid=parent,
                root_uuid=root or uuid,
                inventories=inventories.get(id_, {}),
                used=used.get(id_, {}),
                consumers=frozenset(consumers.get(id_, ())),
                alloc_rows=rows.get(id_, 0),
                traits=frozenset(traits.get(id_, ())),
                aggregates=frozenset(aggregates.get(id_, ())),
            )
            records[id_] = rec
            known[id_] = _Known(
                uuid, rec.generation, rec.name, parent_id, root_id, rec.alloc_rows, rec.used_total
            )
        orphans = (0, 0)
        if ids is None:
            lost = [rp for rp in used if rp not in records]
            orphans = (sum(rows[rp] for rp in lost), sum(sum(used[rp].values()) for rp in lost))
        return _Read(records, known, orphans)

    @contextmanager
    def _snapshot(self) -> Iterator[Connection]:
        """A connection inside one read-only transaction on one snapshot, ended (rolled back)
        with the block."""
        with self._engine.connect() as conn:
            conn.exec_driver_sql(self._begin)
            done = False
            try:
                yield conn
                done = True
            finally:
                try:
                    conn.exec_driver_sql("ROLLBACK")
                except Exception:  # broken: never hand the connection out again
                    conn.invalidate()
                    if done:
                        LOG.debug("Provider view: ending a read transaction failed", exc_info=True)


def _counted(view: ProviderView) -> dict[str, set[str]]:
    """The claims the scheduler counts as pending on its hosts (``view.counted_claims``)."""
    hook = view.counted_claims
    return hook() if hook is not None else {}


def _split_check(rows: Iterable[Any]) -> tuple[tuple[int, ...], set[tuple[str, str]]]:
    """The check's rows: the stamp (the row without a consumer) and the (consumer, root
    provider) pairs Placement holds."""
    stamp: tuple[int, ...] = ()
    held = set()
    for row in rows:
        if len(row) > 4 and row[4] is not None:
            held.add((str(row[4]), str(row[5])))
        else:
            stamp = tuple(int(v) for v in row[:4])
    return stamp, held


def _claims_gone(counted: dict[str, set[str]], held: set[tuple[str, str]]) -> list[tuple[str, str]]:
    """The (consumer, compute node) pairs counted where Placement no longer holds an
    allocation of that consumer in that compute node's tree (deleted: ``DELETE
    /allocations`` changes no generation; or moved)."""
    return [(c, h) for c, hosts in counted.items() for h in hosts if (c, h) not in held]


def _chunks(ids: list[Any]) -> Iterator[list[Any]]:
    for i in range(0, len(ids), _CHUNK):
        yield ids[i : i + _CHUNK]


def _read_only_engine(
    url: str, read_timeout: int = _READ_TIMEOUT, pool_size: int = 1
) -> tuple[sa.Engine, str]:
    """An engine whose connections stay in autocommit mode (the feed opens its own read-only
    transactions), and the backend's name."""
    parsed = make_url(url)
    if parsed.drivername == "mysql":
        parsed = parsed.set(drivername="mysql+pymysql")
    elif parsed.drivername == "postgres":
        parsed = parsed.set(drivername="postgresql")
    backend = parsed.get_backend_name()
    kwargs: dict[str, Any] = {
        "isolation_level": "AUTOCOMMIT",
        "pool_pre_ping": True,
        "pool_size": pool_size,
        "max_overflow": 2,
    }
    if backend == "mysql":
        connect_args: dict[str, Any] = {"connect_timeout": _CONNECT_TIMEOUT}
        if parsed.get_driver_name() == "pymysql":
            connect_args.update(
                read_timeout=read_timeout,
                write_timeout=read_timeout,
                init_command="SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY",
            )
        kwargs["connect_args"] = connect_args
    elif backend == "postgresql":
        kwargs["connect_args"] = {
            "connect_timeout": _CONNECT_TIMEOUT,
            "options": (
                f"-c default_transaction_read_only=on -c statement_timeout={read_timeout * 1000}"
            ),
        }
    elif backend == "sqlite":
        path = parsed.database
        if not path or path == ":memory:" or path.startswith("file:"):
            raise ValueError(f"the database feed needs a SQLite file, not {url!r}")
        target = "file:" + urllib.parse.quote(path) + "?mode=ro"
        kwargs = {
            "isolation_level": "AUTOCOMMIT",
            "creator": lambda: sqlite3.connect(target, uri=True, check_same_thread=False),
            # opened afresh by every read (cheap): a file replaced or gone is seen at once
            "poolclass": sa.pool.NullPool,
        }
    else:
        raise ValueError(f"the database feed reads MySQL, PostgreSQL or SQLite, not {url!r}")
    return sa.create_engine(parsed, **kwargs), backend
