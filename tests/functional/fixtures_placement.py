"""Fixtures that run the real Placement service.

* ``placement_service`` (session): Placement in gunicorn (process mode) on a temporary
  SQLite file; ``.url`` is its endpoint.
* ``placement_client``: a ``PlacementClient`` for it, with tiny retry back-off.
* ``make_mariadb_placement()``: an (unstarted) Placement with 2 workers on a fresh MariaDB
  database; stopping it drops the database. Starts MariaDB if it is not running.

A service that cannot be started fails the test loudly; nothing here skips.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from placement_client.api import PlacementClient
from scheduler.demo.embedded_placement import EmbeddedPlacement

MARIADB_HOST = "127.0.0.1"
MARIADB_PORT = 3306
MARIADB_USER = "root"
_MARIADBD = "/usr/sbin/mariadbd"


@pytest.fixture(scope="session")
def placement_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedPlacement]:
    db = Path(tmp_path_factory.mktemp("placement")) / "placement.sqlite"
    service = EmbeddedPlacement(f"sqlite:///{db}", mode="process")
    service.start()
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture
def placement_client(placement_service: EmbeddedPlacement) -> PlacementClient:
    return PlacementClient(placement_service.url, claim_retries=4, retry_backoff=0.01)


def _mariadb_connect(database: str | None = None):  # -> pymysql.Connection
    import pymysql

    return pymysql.connect(
        host=MARIADB_HOST,
        port=MARIADB_PORT,
        user=MARIADB_USER,
        database=database,
        connect_timeout=3,
        autocommit=True,
    )


def ensure_mariadb(timeout: float = 30.0) -> None:
    """Make sure MariaDB answers on 127.0.0.1:3306; start it if needed, else fail."""
    import pymysql

    try:
        _mariadb_connect().close()
        return
    except pymysql.err.OperationalError:
        pass
    try:
        subprocess.run(
            [
                "start-stop-daemon",
                "--start",
                "--oknodo",
                "--background",
                "--exec",
                _MARIADBD,
            ],
            check=True,
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.fail(
            f"MariaDB is not running on {MARIADB_HOST}:{MARIADB_PORT} and cannot be "
            f"started with start-stop-daemon {_MARIADBD}: {exc}"
        )
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            _mariadb_connect().close()
            return
        except pymysql.err.OperationalError as exc:
            last = exc
            time.sleep(0.5)
    pytest.fail(
        f"MariaDB did not answer on {MARIADB_HOST}:{MARIADB_PORT} within {timeout:.0f} s of "
        f"being started: {last}"
    )


class _MariaDBPlacement(EmbeddedPlacement):
    """An EmbeddedPlacement that drops its database when stopped."""

    def __init__(self, database: str, **kwargs):
        self.database = database
        url = f"mysql+pymysql://{MARIADB_USER}@{MARIADB_HOST}:{MARIADB_PORT}/{database}"
        super().__init__(url + "?charset=utf8mb4", **kwargs)

    def stop(self) -> None:
        super().stop()
        if self.database:
            conn = _mariadb_connect()
            try:
                with conn.cursor() as cur:
                    cur.execute(f"DROP DATABASE IF EXISTS `{self.database}`")
            finally:
                conn.close()
            self.database = ""


def make_mariadb_placement(
    *, workers: int = 2, conflict_retries: int = 1, mode: str = "process"
) -> EmbeddedPlacement:
    """A Placement (not started) on a new MariaDB database, ``workers`` gunicorn workers and
    ``allocation_conflict_retry_count = conflict_retries``."""
    ensure_mariadb()
    database = "novasched_placement_" + uuid.uuid4().hex[:12]
    conn = _mariadb_connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{database}` CHARACTER SET utf8mb4")
    finally:
        conn.close()
    return _MariaDBPlacement(
        database, mode=mode, workers=workers, conflict_retries=conflict_retries
    )
