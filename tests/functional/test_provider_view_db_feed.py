"""DatabaseFeed against the real Placement 16 on SQLite, MariaDB and PostgreSQL: what it reads
must equal what the HTTP API says (ApiFeed), after a cold load and after one poll following each
kind of change; it must survive its database going away and never write."""

# ruff: noqa: F811 - the fixtures are imported by name, and test arguments reuse those names

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import sqlalchemy as sa

from placement_client.api import PlacementClient
from placement_client.view.api_feed import ApiFeed
from placement_client.view.db_feed import DatabaseFeed
from placement_client.view.model import ProviderRecord
from placement_client.view.view import ProviderView
from tests.functional.fixtures_placement import placement_service  # noqa: F401 - a fixture
from tests.functional.fixtures_provider_view import (
    GPU,
    claim,
    new_uuid,
    provider_inventories,
)

NEVER = 1e9  # full_scan_every: no timed full scan, so the incremental paths are the ones tested


# -------------------------------------------------------------------------- fixtures

# placement (one per backend), client and fleet are in conftest.py


def _feed(placement: SimpleNamespace, **kwargs) -> DatabaseFeed:
    kwargs.setdefault("full_scan_every", NEVER)
    return DatabaseFeed(placement.db_url, **kwargs)


@pytest.fixture
def feed(placement: SimpleNamespace) -> Iterator[DatabaseFeed]:
    feed = _feed(placement)
    yield feed
    feed.close()


# -------------------------------------------------------------------------- helpers


def _generation(client: PlacementClient, rp: str) -> int:
    provider = client.get_provider(rp)
    assert provider is not None
    return int(provider["generation"])


def _api_records(client: PlacementClient) -> dict[str, ProviderRecord]:
    view = ProviderView()
    api = ApiFeed(client, threads=8, sweep_period=0)
    try:
        api.load(view)
    finally:
        api.close()
    return {u: view.record(u) for u in view.uuids()}


def _records(view: ProviderView) -> dict[str, ProviderRecord]:
    return {u: view.record(u) for u in view.uuids()}


def assert_matches_api(view: ProviderView, client: PlacementClient) -> None:
    """The view holds exactly what the HTTP API reports, field by field."""
    expected = _api_records(client)
    got = _records(view)
    assert sorted(got) == sorted(expected), "the providers differ"
    for rp, want in expected.items():
        for field in dataclasses.fields(ProviderRecord):
            mine, theirs = getattr(got[rp], field.name), getattr(want, field.name)
            assert mine == theirs, f"{rp} {field.name}: database {mine!r} != API {theirs!r}"
    assert view.alloc_rows_total == sum(r.alloc_rows for r in expected.values())
    assert view.used_total == sum(r.used_total for r in expected.values())


def _loaded(feed: DatabaseFeed, client: PlacementClient) -> ProviderView:
    view = ProviderView()
    feed.load(view)
    assert_matches_api(view, client)
    return view


# -------------------------------------------------------------------------- the cold load


def test_load_matches_the_api(fleet, feed, client):
    view = _loaded(feed, client)
    rec = view.record(fleet.roots[0])
    # the fleet's own details, so that an empty view cannot pass
    assert rec.consumers == {fleet.consumer}
    assert rec.used == {"VCPU": 2, "MEMORY_MB": 1024}
    assert rec.alloc_rows == 2
    assert rec.inventories["MEMORY_MB"].allocation_ratio == 1.5
    assert rec.inventories["DISK_GB"].step_size == 5
    assert rec.traits == {"CUSTOM_DBFEED", "HW_CPU_X86_AVX2"}
    assert rec.aggregates == {fleet.agg}
    child = view.record(fleet.child)
    assert (child.parent_uuid, child.root_uuid) == (fleet.roots[0], fleet.roots[0])
    assert child.used == {GPU: 1}
    assert view.loaded and view.age() is not None
    assert feed.reads == len(view)


def test_an_idle_poll_reads_nothing(fleet, feed, client):
    view = _loaded(feed, client)
    # the fleet was just written, so it is inside the poll's window: compared, not read again
    assert feed.poll(view) == 0
    assert feed.poll(view) == 0
    assert (feed.full_scans, feed.usage_scans) == (0, 0)
    assert_matches_api(view, client)


def test_allocations_of_consumers_are_what_the_api_gives(fleet, feed, client):
    """What replay subtracts for a recorded instance: the same read from the database as
    through ``GET /allocations/{consumer}``, child providers included; a consumer that holds
    nothing is left out."""
    nobody = new_uuid()
    other = new_uuid()
    claim(client, other, {fleet.roots[1]: {"VCPU": 3, "DISK_GB": 10}})
    wanted = [fleet.consumer, other, nobody]
    from_db = feed.allocations_of(wanted)
    api = ApiFeed(client)
    try:
        assert from_db == api.allocations_of(wanted)
    finally:
        api.close()
    assert set(from_db) == {fleet.consumer, other}
    assert from_db[fleet.consumer][fleet.child] == {"resources": {GPU: 1}}
    assert from_db[other] == {fleet.roots[1]: {"resources": {"VCPU": 3, "DISK_GB": 10}}}


# -------------------------------------------------------------------------- one poll per change


def _change_claim(client, fleet):
    claim(client, new_uuid(), {fleet.roots[1]: {"VCPU": 3, "DISK_GB": 10}})


def _change_reclaim(client, fleet):
    # a consumer that holds allocations claims again (a move: the client claims source and
    # destination together): the source's rows are written again, the same count and sum
    claim(client, fleet.consumer, {fleet.roots[2]: {"VCPU": 1}})


def _change_inventory(client, fleet):
    inv = provider_inventories(vcpu=16)
    inv["MEMORY_MB"]["reserved"] = 1024
    client.set_inventories(fleet.roots[1], inv)


def _change_traits(client, fleet):
    client.set_traits(fleet.roots[1], ["CUSTOM_DBFEED", "CUSTOM_DBFEED_OTHER"])


def _change_aggregates(client, fleet):
    client.set_aggregates(fleet.roots[1], [fleet.agg, new_uuid()])


def _change_delete_provider(client, fleet):
    assert client.delete_provider(fleet.roots[2])


def _change_new_provider(client, fleet):
    rp = new_uuid()
    fleet.providers.append(rp)
    client.create_provider(
        rp, f"dbfeed-new-{rp[:8]}", inventories=provider_inventories(), traits=["CUSTOM_DBFEED_NEW"]
    )


def _change_child_provider(client, fleet):
    rp = new_uuid()
    fleet.providers.append(rp)
    client.create_provider(
        rp, f"dbfeed-child-{rp[:8]}", inventories={GPU: 2}, parent_provider_uuid=fleet.roots[1]
    )
    claim(client, new_uuid(), {rp: {GPU: 1}})


CHANGES = {
    "claim": _change_claim,
    "reclaim": _change_reclaim,
    "inventory": _change_inventory,
    "traits": _change_traits,
    "aggregates": _change_aggregates,
    "delete_provider": _change_delete_provider,
    "new_provider": _change_new_provider,
    "child_provider": _change_child_provider,
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_one_poll_follows_a_change(fleet, feed, client, change):
    view = _loaded(feed, client)
    CHANGES[change](client, fleet)
    read = feed.poll(view)
    assert_matches_api(view, client)
    if change == "delete_provider":
        assert view.record(fleet.roots[2]) is None
        assert read == 0
        # a deletion leaves the providers' checksum short: every provider is compared once
        assert feed.full_scans == 1
    else:
        assert read >= 1
        # found by the providers' timestamps alone
        assert feed.full_scans == 0
    assert feed.usage_scans == 0
    # nothing left to find
    assert feed.poll(view) == 0
    assert_matches_api(view, client)


def test_a_deleted_consumer_is_found_without_a_generation_change(fleet, feed, client):
    view = _loaded(feed, client)
    before = _generation(client, fleet.roots[0]), _generation(client, fleet.child)
    assert client.delete_allocation_for_instance(fleet.consumer)
    assert (_generation(client, fleet.roots[0]), _generation(client, fleet.child)) == before
    assert feed.poll(view) == 2  # the root and its child, named by the per-provider counts
    assert feed.usage_scans == 1
    assert feed.full_scans == 0
    assert view.record(fleet.roots[0]).consumers == frozenset()
    assert_matches_api(view, client)
    assert feed.poll(view) == 0
    assert feed.usage_scans == 1


def test_own_claims_are_folded_into_the_record(fleet, feed, client):
    view = _loaded(feed, client)
    rp = fleet.roots[1]
    generation = view.record(rp).generation
    consumer = new_uuid()
    claim(client, consumer, {rp: {"VCPU": 1}})
    view.assume(consumer, {rp: {"resources": {"VCPU": 1}}})
    assert view.known(rp) == (generation, generation + 1)
    # the generation is the one the view expects, yet the provider is read again: its
    # allocation rows must be counted, or the allocation check would not balance
    assert feed.poll(view) == 1
    assert view.known(rp) == (generation + 1, generation + 1)
    assert consumer in view.record(rp).consumers
    assert feed.usage_scans == 0
    assert_matches_api(view, client)


def test_dirty_providers_are_read_again(fleet, feed, client):
    view = _loaded(feed, client)
    reads = feed.reads
    view.mark_dirty([fleet.roots[1], new_uuid()])  # the second one does not exist
    assert view.changed.is_set()
    assert feed.poll(view) == 1
    assert feed.reads == reads + 1
    assert not view.changed.is_set()
    assert feed.poll(view) == 0
    assert_matches_api(view, client)


def test_the_window_moves_on_with_the_database_clock(fleet, placement, client):
    """A poll compares the providers written since the previous snapshot (less the margin),
    not everything written near the newest change it saw: once quiet, it compares none."""
    feed = _feed(placement, margin=1.0)
    try:
        view = _loaded(feed, client)
        client.set_traits(fleet.roots[1], ["CUSTOM_DBFEED_WINDOW"])
        time.sleep(1.5)  # MariaDB keeps whole seconds
        assert feed.poll(view) == 1
        assert feed.window_rows >= 1
        assert feed.full_scans == 0
        assert feed.poll(view) == 0
        assert feed.window_rows == 0
        assert_matches_api(view, client)
    finally:
        feed.close()


def test_a_late_commit_is_found_by_the_checksum(fleet, feed, client, placement):
    """A change whose timestamp is older than the window (a commit that took longer than the
    margin, a Placement host whose clock is behind) is found by the generations' sum."""
    view = _loaded(feed, client)
    client.set_traits(fleet.roots[1], ["CUSTOM_DBFEED_LATE"])
    _write_sql(
        placement,
        "UPDATE resource_providers SET updated_at = :t, created_at = :t WHERE uuid = :u",
        t=_old(),
        u=fleet.roots[1],
    )
    assert feed.poll(view) == 1
    assert feed.full_scans == 1
    assert view.record(fleet.roots[1]).traits == {"CUSTOM_DBFEED_LATE"}
    assert_matches_api(view, client)


def test_a_poll_reads_one_snapshot(fleet, feed, client, placement):
    """A write that lands while a poll reads is not half seen: here the fleet's consumer is
    deleted (as DELETE /allocations does) just after the poll counted the allocation rows and
    before it reads the provider marked dirty. Read from one snapshot, the provider still has
    the consumer and the counts balance; read outside it, the counts would not balance and the
    per-provider count would run. The next poll finds the deletion."""
    view = _loaded(feed, client)
    writer = sa.create_engine(
        placement.db_url,
        poolclass=sa.pool.NullPool,
        connect_args={"timeout": 0.2} if placement.kind == "sqlite" else {},
    )
    injected: list[str] = []

    def delete_consumer() -> None:
        with writer.begin() as conn:
            conn.execute(
                sa.text("DELETE FROM allocations WHERE consumer_id = :c"), {"c": fleet.consumer}
            )

    def during_poll(conn, cursor, statement, *args) -> None:
        if injected or "WHERE updated_at >=" not in statement:
            return
        try:
            delete_consumer()
            injected.append("committed")
        except sa.exc.OperationalError as exc:
            # SQLite (rollback journal): the poll's read lock keeps writers out until it ends
            assert "locked" in str(exc)
            injected.append("locked out")

    view.mark_dirty([fleet.roots[0]])
    sa.event.listen(feed._engine, "before_cursor_execute", during_poll)
    try:
        assert feed.poll(view) == 1
    finally:
        sa.event.remove(feed._engine, "before_cursor_execute", during_poll)
    assert injected == ["locked out" if placement.kind == "sqlite" else "committed"]
    if injected == ["locked out"]:
        delete_consumer()
    writer.dispose()
    assert view.record(fleet.roots[0]).consumers == {fleet.consumer}
    assert feed.usage_scans == 0
    assert feed.poll(view) == 2
    assert feed.usage_scans == 1
    assert_matches_api(view, client)


def test_full_scans_are_timed(fleet, placement, client):
    now = [1000.0]
    feed = _feed(placement, clock=lambda: now[0], full_scan_every=30.0)
    try:
        view = ProviderView(clock=lambda: now[0])
        feed.load(view)
        now[0] += 10
        assert feed.poll(view) == 0
        assert feed.full_scans == 0
        now[0] += 25
        assert feed.poll(view) == 0
        assert feed.full_scans == 1
        now[0] += 1
        feed.poll(view)
        assert feed.full_scans == 1
        # the view is as fresh as the poll's start
        assert view.age() == 0.0
        now[0] += 1
        assert view.age() == 1.0
    finally:
        feed.close()


def test_allocations_of_no_provider_are_counted_once(fleet, feed, client, placement):
    """Allocation rows whose provider does not exist (Placement never leaves any, but a
    database may hold some) must not make every poll run the per-provider count."""
    view = _loaded(feed, client)
    orphan = new_uuid()
    _write_sql(
        placement,
        "INSERT INTO allocations (resource_provider_id, consumer_id, resource_class_id, used, "
        "created_at) VALUES ((SELECT COALESCE(MAX(id), 0) + 1000 FROM resource_providers), "
        ":c, 0, 3, :t)",
        c=orphan,
        t=_old(),
    )
    try:
        assert feed.poll(view) == 0
        assert feed.usage_scans == 1
        assert feed.poll(view) == 0
        assert feed.usage_scans == 1
        reloaded = DatabaseFeed(placement.db_url, full_scan_every=NEVER)
        try:
            other = ProviderView()
            reloaded.load(other)
            assert reloaded.poll(other) == 0
            assert reloaded.usage_scans == 0
        finally:
            reloaded.close()
    finally:
        _write_sql(placement, "DELETE FROM allocations WHERE consumer_id = :c", c=orphan)
    assert_matches_api(view, client)


# -------------------------------------------------------------------------- read-only


def _state(db_url: str) -> dict:
    tables = (
        "resource_providers",
        "inventories",
        "allocations",
        "consumers",
        "traits",
        "resource_classes",
        "resource_provider_traits",
        "placement_aggregates",
        "resource_provider_aggregates",
        "projects",
        "users",
    )
    engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            state = {t: conn.exec_driver_sql(f"SELECT COUNT(*) FROM {t}").scalar() for t in tables}
            state["providers"] = conn.exec_driver_sql(
                "SELECT id, generation, name, updated_at, created_at FROM resource_providers "
                "ORDER BY id"
            ).all()
            state["consumer_generations"] = conn.exec_driver_sql(
                "SELECT uuid, generation, updated_at FROM consumers ORDER BY uuid"
            ).all()
        return state
    finally:
        engine.dispose()


def test_the_feed_never_writes(fleet, placement, client):
    # a deleted consumer makes the poll run its per-provider count too
    assert client.delete_allocation_for_instance(fleet.consumer)
    before = _state(placement.db_url)
    feed = _feed(placement, full_scan_every=1e-9)  # a full scan at every poll
    statements: list[str] = []
    sa.event.listen(
        feed._engine,
        "before_cursor_execute",
        lambda conn, cursor, statement, *args: statements.append(statement),
    )
    try:
        view = ProviderView()
        feed.load(view)
        view.mark_dirty(fleet.roots)
        feed.poll(view)
        feed.poll(view)
        assert feed.full_scans == 2
        verbs = {s.split()[0].upper() for s in statements}
        assert verbs <= {"SELECT", "SHOW", "BEGIN", "START", "ROLLBACK"}, verbs
        assert {"SELECT", "ROLLBACK"} <= verbs
        # and a write through the feed's own transaction is refused by the database
        with pytest.raises(sa.exc.DBAPIError), feed._snapshot() as conn:
            conn.exec_driver_sql("UPDATE resource_providers SET generation = generation + 1")
    finally:
        feed.close()
    assert _state(placement.db_url) == before


# -------------------------------------------------------------------------- outages


class _Proxy:
    """A TCP forwarder to ``target`` that can be cut (every connection closed, new ones
    refused) and restored on the same port."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self.port = 0
        self.restore()

    def restore(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        assert self._listener is not None
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._listener = None
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                down, _ = listener.accept()
            except OSError:
                return
            try:
                up = socket.create_connection(self.target, timeout=5)
            except OSError:
                down.close()
                continue
            with self._lock:
                self._socks += [down, up]
            for a, b in ((down, up), (up, down)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def _outage_url(placement: SimpleNamespace, tmp_path: Path) -> Iterator[tuple[str, object]]:
    """A URL of the same database that can be made unreachable: (url, switch) where
    ``switch(False)`` takes it away and ``switch(True)`` brings it back."""
    url = sa.make_url(placement.db_url)
    if placement.kind == "sqlite":
        # a copy, so that Placement keeps its file; refreshed when it comes back
        copy = tmp_path / "copy.sqlite"
        aside = tmp_path / "aside.sqlite"
        shutil.copy(url.database, copy)

        def switch(up: bool) -> None:
            if up:
                shutil.copy(url.database, aside)
                aside.replace(copy)
            else:
                copy.replace(aside)

        yield url.set(database=str(copy)).render_as_string(hide_password=False), switch
        return
    proxy = _Proxy((url.host, url.port or (3306 if placement.kind == "mariadb" else 5432)))
    try:
        yield (
            url.set(port=proxy.port).render_as_string(hide_password=False),
            lambda up: proxy.restore() if up else proxy.cut(),
        )
    finally:
        proxy.cut()


def test_the_feed_survives_its_database_going_away(fleet, placement, client, tmp_path):
    with _outage_url(placement, tmp_path) as (url, switch):
        feed = DatabaseFeed(url, full_scan_every=NEVER)
        try:
            view = _loaded(feed, client)
            switch(False)
            # while the feed cannot see them: a trait change, a deleted consumer, and a
            # provider marked dirty that did not change (known from its mark alone)
            _change_traits(client, fleet)
            assert client.delete_allocation_for_instance(fleet.consumer)
            view.mark_dirty([fleet.roots[2]])
            for _ in range(2):
                with pytest.raises(sa.exc.DBAPIError):
                    feed.poll(view)
            assert view.record(fleet.roots[1]).traits == {"CUSTOM_DBFEED", "HW_CPU_X86_AVX2"}
            switch(True)
            # the traits' provider, the consumer's two, and the dirty one kept over the failures
            assert feed.poll(view) == 4
            assert_matches_api(view, client)
            assert view.record(fleet.roots[0]).consumers == frozenset()
            assert feed.poll(view) == 0
        finally:
            feed.close()


def test_an_unreachable_database_raises(placement, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends
    url = {
        "sqlite": f"sqlite:///{tmp_path}/nowhere/missing.sqlite",
        "mariadb": f"mysql+pymysql://root@127.0.0.1:{port}/placement",
        "postgresql": f"postgresql+psycopg2://postgres@127.0.0.1:{port}/placement",
    }[placement.kind]
    feed = DatabaseFeed(url)
    try:
        view = ProviderView()
        started = time.monotonic()
        with pytest.raises(sa.exc.DBAPIError):
            feed.load(view)
        with pytest.raises(sa.exc.DBAPIError):
            feed.poll(view)
        assert time.monotonic() - started < 10
        assert not view.loaded and len(view) == 0
    finally:
        feed.close()
    # opened read-only: a missing file is not created
    assert not (tmp_path / "nowhere").exists()


def test_urls_of_other_databases_are_refused():
    with pytest.raises(ValueError, match="SQLite file"):
        DatabaseFeed("sqlite://")
    with pytest.raises(ValueError, match="MySQL, PostgreSQL or SQLite"):
        DatabaseFeed("oracle://scott@localhost/xe")


# -------------------------------------------------------------------------- test helpers


def _old():
    import datetime

    return datetime.datetime(2000, 1, 1)


def _write_sql(placement: SimpleNamespace, statement: str, **params) -> None:
    engine = sa.create_engine(placement.db_url, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(statement), params)
    finally:
        engine.dispose()
