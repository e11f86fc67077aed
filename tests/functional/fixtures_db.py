"""Throwaway databases on the real MariaDB and PostgreSQL servers.

* ``mariadb_db`` / ``postgresql_db``: the URL of a fresh, uniquely named database, dropped
  after the test. ``server_db`` is parametrized over both.
* ``make_database(kind)``: the same as a context manager, for several databases per test.

A server that is not running is started (MariaDB with start-stop-daemon, PostgreSQL with
pg_ctlcluster); one that still cannot be reached fails the test loudly. Nothing skips.
"""

from __future__ import annotations

import contextlib
import glob
import os
import subprocess
import time
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

import db

MARIADB_SERVER = "mysql+pymysql://root@127.0.0.1:3306/?charset=utf8mb4"
POSTGRESQL_SERVER = "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"
SERVERS = {"mariadb": MARIADB_SERVER, "postgresql": POSTGRESQL_SERVER}


def _reachable(server_url: str) -> str | None:
    """None if the server answers, else the error."""
    engine = sa.create_engine(
        server_url, poolclass=sa.pool.NullPool, connect_args={"connect_timeout": 3}
    )
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
        return None
    except sa.exc.SQLAlchemyError as exc:
        return str(getattr(exc, "orig", exc)).splitlines()[0]
    finally:
        engine.dispose()


def _start(kind: str) -> None:
    if kind == "mariadb":
        # Debian's my.cnf runs the daemon as user mysql
        cmd = ["start-stop-daemon", "--start", "--oknodo", "--background"]
        cmd += ["--exec", "/usr/sbin/mariadbd"]
    else:
        versions = sorted(os.path.basename(p) for p in glob.glob("/etc/postgresql/*"))
        if not versions:
            pytest.fail("PostgreSQL is not installed (/etc/postgresql is empty)")
        cmd = ["pg_ctlcluster", "--skip-systemctl-redirect", versions[-1], "main", "start"]
    subprocess.run(cmd, capture_output=True, timeout=60, check=False)


def ensure_server(kind: str, timeout: float = 30.0) -> str:
    """The server URL of ``kind`` ("mariadb" or "postgresql"), started if needed."""
    server_url = SERVERS[kind]
    if _reachable(server_url) is None:
        return server_url
    _start(kind)
    deadline = time.monotonic() + timeout
    error = None
    while time.monotonic() < deadline:
        error = _reachable(server_url)
        if error is None:
            return server_url
        time.sleep(0.5)
    pytest.fail(f"{kind} at {server_url} cannot be reached even after trying to start it: {error}")


@contextlib.contextmanager
def make_database(kind: str, prefix: str = "novasched_test") -> Iterator[str]:
    """A fresh database on the ``kind`` server; yields its URL and drops it afterwards."""
    server_url = ensure_server(kind)
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    url = db.ensure_database(server_url, name)
    try:
        yield url
    finally:
        db.drop_database(server_url, name)


@pytest.fixture
def mariadb_db() -> Iterator[str]:
    with make_database("mariadb") as url:
        yield url


@pytest.fixture
def postgresql_db() -> Iterator[str]:
    with make_database("postgresql") as url:
        yield url


@pytest.fixture(params=["mariadb", "postgresql"])
def server_kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def server_db(server_kind: str) -> Iterator[str]:
    with make_database(server_kind) as url:
        yield url
