"""``novasched-manage check`` against real services: a good set-up, then each broken part.

The set-up is built the way an operator would build a stand-alone one, with the command
itself: a SQLite API database, cell1 on SQLite and cell2 on the real MariaDB (``cell
create``, ``db sync``), a fleet written into both and into the real Placement service
(``fleet load``), the real RabbitMQ as the broker. Each test writes its own nova.conf to
``tmp_path`` (the good one, or the good one with one part broken) and runs ``novasched-manage
--config-file nova.conf check`` as a subprocess, then asserts the exit status and the
failing row of the table with its remedy. Closed ports are bound on 127.0.0.1 and released
first, so nothing answers there.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid as uuidlib
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import sqlalchemy as sa

from db import models
from scheduler.demo.embedded_placement import EmbeddedPlacement
from tests.db_rows import compute_node, compute_service
from tests.functional.fixtures_db import make_database
from tests.functional.fixtures_placement import placement_service  # noqa: F401
from tests.functional.fixtures_rabbit import rabbit_transport_url  # noqa: F401

MANAGE = Path(sys.executable).with_name("novasched-manage")
CHECK_NAMES = [
    "Filters, weighers and driver",
    "Ignored options",
    "API and cell databases",
    "Placement API",
    "Placement conflict retries",
    "Placement's candidate options",
    "Message broker",
    "Compute nodes, services and providers",
]
HOSTS = 12


@dataclass
class World:
    """The good set-up: its files, URLs and Placement."""

    tmp: Path
    api_url: str
    cell1_url: str
    cell2_url: str
    placement_url: str
    placement_conf: Path
    transport_url: str
    host_prefix: str


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _manage(conf: Path, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MANAGE), "--config-file", str(conf), *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _nova_conf(
    world: World,
    path: Path,
    *,
    api_url: str | None = None,
    endpoint: str | None = None,
    transport_url: str | None = None,
    extra: str = "",
) -> Path:
    path.write_text(
        "[DEFAULT]\n"
        f"transport_url = {transport_url or world.transport_url}\n"
        "[api_database]\n"
        f"connection = {api_url or world.api_url}\n"
        "[placement]\n"
        "auth_type = noauth2\n"
        f"endpoint_override = {endpoint or world.placement_url}\n" + extra
    )
    return path


@pytest.fixture(scope="module")
def world(
    tmp_path_factory: pytest.TempPathFactory,
    placement_service: EmbeddedPlacement,  # noqa: F811
    rabbit_transport_url: str,  # noqa: F811
) -> Iterator[World]:
    tmp = Path(tmp_path_factory.mktemp("check"))
    with make_database("mariadb", "novasched_check") as cell2_url:
        w = World(
            tmp=tmp,
            api_url=f"sqlite:///{tmp / 'api.sqlite'}",
            cell1_url=f"sqlite:///{tmp / 'cell1.sqlite'}",
            cell2_url=cell2_url,
            placement_url=placement_service.url,
            placement_conf=placement_service.conf_path,
            transport_url=rabbit_transport_url,
            # the session's Placement is shared with other modules: unique names and uuids
            host_prefix=f"check-{uuidlib.uuid4().hex[:6]}",
        )
        conf = _nova_conf(w, tmp / "nova.conf")
        for name, url in (("cell1", w.cell1_url), ("cell2", w.cell2_url)):
            done = _manage(conf, "cell", "create", "--name", name, "--database-connection", url)
            assert done.returncode == 0, done.stderr
        done = _manage(conf, "db", "sync")
        assert done.returncode == 0, done.stderr
        seed = str(uuidlib.uuid4().int % 1_000_000)
        load = ["fleet", "load", "--hosts", str(HOSTS), "--seed", seed]
        done = _manage(conf, *load, "--host-prefix", w.host_prefix)
        assert done.returncode == 0, done.stderr
        # stdout is a pipe: no progress bar, no carriage return
        assert "\r" not in done.stdout and f"loaded {HOSTS} hosts" in done.stdout
        yield w
        sa.create_engine(cell2_url).dispose()


def parse_table(out: str) -> dict[str, tuple[str, str]]:
    """``{check name: (result, details and remedy as one line)}`` from the printed table."""
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["Check", "Result"], out
    widths = [len(part) for part in lines[1].split("  ")]
    starts = [0, widths[0] + 2, widths[0] + widths[1] + 4]
    rows: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in lines[2:]:
        if not line.strip():
            continue
        if line.split(" ", 2)[1:2] == ["checks:"]:
            break
        name = line[: starts[1]].strip()
        result = line[starts[1] : starts[2]].strip()
        text = line[starts[2] :].strip()
        if name:
            current = rows[name] = [result, text]
        else:
            assert current is not None, out
            current[1] += " " + text
    return {name: (r[0], r[1]) for name, r in rows.items()}


def run_check(conf: Path, *argv: str) -> tuple[int, dict[str, tuple[str, str]], str]:
    started = time.monotonic()
    done = _manage(conf, "check", *argv)
    elapsed = time.monotonic() - started
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    assert done.returncode in (0, 1, 2), done.stderr
    # every network step has a short timeout: a broken part must not stall the command
    assert elapsed < 60, f"check took {elapsed:.0f} s"
    rows = parse_table(done.stdout)
    assert list(rows) == CHECK_NAMES, done.stdout
    return done.returncode, rows, done.stdout


def _placement_conf_arg(world: World) -> tuple[str, str]:
    return ("--placement-config-file", str(world.placement_conf))


# ----------------------------------------------------------------------------- the good one


def test_good_setup_every_check_is_ok(world, tmp_path):
    conf = _nova_conf(world, tmp_path / "nova.conf")
    rc, rows, out = run_check(conf, *_placement_conf_arg(world))
    assert rc == 0, out
    assert {name: result for name, (result, _) in rows.items()} == dict.fromkeys(CHECK_NAMES, "OK")
    assert "\r" not in out  # not a terminal: no progress bar
    assert "8 checks: 8 OK, 0 WARNING, 0 FAILURE" in out
    # every cell was read, and every compute node found its service and provider
    nodes = rows["Compute nodes, services and providers"][1]
    assert "cell cell1:" in nodes and "cell cell2:" in nodes
    assert "each with a nova-compute service and a resource provider" in nodes
    assert "Remedy:" not in out
    databases = rows["API and cell databases"][1]
    assert "cell0: not checked" in databases
    assert "SQLite" in rows["Placement conflict retries"][1]

    done = _manage(conf, "check", "--json", *_placement_conf_arg(world))
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["status"] == "OK" and doc["exit_status"] == 0
    assert [c["name"] for c in doc["checks"]] == CHECK_NAMES
    assert {c["status"] for c in doc["checks"]} == {"OK"}

    done = _manage(conf, "check", "-f", "value", "-c", "Result", *_placement_conf_arg(world))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["OK"] * len(CHECK_NAMES)


# ------------------------------------------------------------------------- broken parts


def test_unknown_filter_fails_and_names_the_available_ones(world, tmp_path):
    conf = _nova_conf(
        world,
        tmp_path / "nova.conf",
        extra="[filter_scheduler]\nenabled_filters = ComputeFilter,NoSuchFilter\n",
    )
    rc, rows, out = run_check(conf, *_placement_conf_arg(world))
    assert rc == 2, out
    result, text = rows["Filters, weighers and driver"]
    assert result == "FAILURE"
    assert "unknown filter name(s) NoSuchFilter" in text
    assert "Remedy:" in text and "Available filters:" in text
    for available in ("AllHostsFilter", "ComputeFilter", "NUMATopologyFilter"):
        assert available in text.split("Available filters:", 1)[1]
    # the rest of the set-up is fine
    assert all(rows[n][0] == "OK" for n in CHECK_NAMES[1:]), out


def test_cell_database_that_does_not_answer(world, tmp_path):
    # a copy of the API database with one more cell, whose database listens nowhere
    api_copy = tmp_path / "api.sqlite"
    shutil.copy(world.tmp / "api.sqlite", api_copy)
    conf = _nova_conf(world, tmp_path / "nova.conf", api_url=f"sqlite:///{api_copy}")
    dead_url = "mysql+pymysql://nova:s3cret-pw@127.0.0.1:1/nova"
    done = _manage(conf, "cell", "create", "--name", "dead", "--database-connection", dead_url)
    assert done.returncode == 0, done.stderr

    rc, rows, out = run_check(conf, *_placement_conf_arg(world))
    assert rc == 2, out
    assert "s3cret-pw" not in out
    result, text = rows["API and cell databases"]
    assert result == "FAILURE"
    assert "cell dead (" in text
    assert "at mysql+pymysql://nova:***@127.0.0.1:1/nova does not answer" in text
    assert "Remedy:" in text and "nova-manage cell_v2 update_cell" in text
    # the cells that answer are still checked; the dead one is skipped, not failed twice
    result, text = rows["Compute nodes, services and providers"]
    assert result == "WARNING"
    assert "cell cell1:" in text and "cell cell2:" in text
    assert "cell dead: skipped" in text and "Remedy:" in text


def test_api_database_that_does_not_answer(world, tmp_path):
    conf = _nova_conf(
        world,
        tmp_path / "nova.conf",
        api_url="postgresql+psycopg2://nova:pw-api-x@127.0.0.1:1/nova_api",
    )
    rc, rows, out = run_check(conf, *_placement_conf_arg(world))
    assert rc == 2, out
    assert "pw-api-x" not in out
    result, text = rows["API and cell databases"]
    assert result == "FAILURE"
    assert "the API database at postgresql+psycopg2://nova:***@127.0.0.1:1/nova_api" in text
    assert "does not answer" in text and "Remedy: Start the database server" in text
    result, text = rows["Compute nodes, services and providers"]
    assert result == "WARNING" and "skipped: the API database could not be read" in text


def test_placement_that_does_not_answer(world, tmp_path):
    url = f"http://127.0.0.1:{_closed_port()}"
    conf = _nova_conf(world, tmp_path / "nova.conf", endpoint=url)
    rc, rows, out = run_check(conf, *_placement_conf_arg(world))
    assert rc == 2, out
    result, text = rows["Placement API"]
    assert result == "FAILURE"
    assert f"Placement does not answer at {url}" in text and "connection refused" in text
    assert "Remedy: Start Placement" in text and "endpoint_override" in text
    result, text = rows["Compute nodes, services and providers"]
    assert result == "WARNING"
    assert "resource providers: not compared" in text
    # compute nodes were still matched with their services
    assert "each with a nova-compute service" in text


def test_placement_credentials_that_are_refused(world, tmp_path):
    # Placement's noauth2 gives the admin role to the user "admin" only; a reader of
    # allocation candidates must be admin, as nova's user is
    conf = _nova_conf(world, tmp_path / "nova.conf", extra="noauth2_user = demo:demo\n")
    rc, rows, out = run_check(conf, *_placement_conf_arg(world))
    assert rc == 2, out
    result, text = rows["Placement API"]
    assert result == "FAILURE"
    assert "GET /allocation_candidates at 1.36 failed" in text and "answered 403" in text
    assert "Remedy: Check the [placement] credentials" in text
    assert rows["Compute nodes, services and providers"][0] == "WARNING"


class _OldPlacement(BaseHTTPRequestHandler):
    """Answers ``GET /`` as a Placement whose newest microversion is 1.30 (Stein); every
    other path is a 404."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.path != "/":
            self.send_error(404)
            return
        version = {
            "id": "v1.0",
            "max_version": "1.30",
            "min_version": "1.0",
            "status": "CURRENT",
            "links": [{"rel": "self", "href": ""}],
        }
        body = json.dumps({"versions": [version]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def _old_placement() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _OldPlacement)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_placement_older_than_1_36(world, tmp_path):
    """A Placement from before Ussuri (1.36) cannot be installed next to openstack-placement
    16 in this virtualenv, so a tiny stand-in HTTP server on 127.0.0.1 answers ``GET /`` with
    the version document of a Placement whose max_version is 1.30 (Stein)."""
    with _old_placement() as url:
        conf = _nova_conf(world, tmp_path / "nova.conf", endpoint=url)
        rc, rows, out = run_check(conf, *_placement_conf_arg(world))
    assert rc == 2, out
    result, text = rows["Placement API"]
    assert result == "FAILURE"
    assert "Placement older than Ussuri/1.36" in text and "up to 1.30" in text
    assert "Remedy: Upgrade Placement to Ussuri" in text
    assert rows["Compute nodes, services and providers"][0] == "WARNING"


def test_compute_nodes_without_provider_or_service(world, tmp_path):
    """One compute node with its service but no resource provider (nova-compute never
    reported to Placement), one without a service record (a stale row)."""
    engine = sa.create_engine(world.cell1_url)
    lonely = f"{world.host_prefix}-no-provider"
    stale = f"{world.host_prefix}-no-service"
    lonely_uuid, stale_uuid = str(uuidlib.uuid4()), str(uuidlib.uuid4())
    try:
        with engine.begin() as conn:
            result = conn.execute(models.services.insert().values(compute_service(lonely)))
            service_id = result.inserted_primary_key[0]
            with_service = compute_node(lonely_uuid, lonely, service_id=service_id)
            without = compute_node(stale_uuid, stale, service_id=None)
            for row in (with_service, without):
                conn.execute(models.compute_nodes.insert().values(**row))
        conf = _nova_conf(world, tmp_path / "nova.conf")
        rc, rows, out = run_check(conf, *_placement_conf_arg(world))
    finally:
        with engine.begin() as conn:
            conn.execute(
                models.compute_nodes.delete().where(
                    models.compute_nodes.c.uuid.in_([lonely_uuid, stale_uuid])
                )
            )
            conn.execute(models.services.delete().where(models.services.c.host == lonely))
        engine.dispose()
    assert rc == 2, out
    result, text = rows["Compute nodes, services and providers"]
    assert result == "FAILURE"
    cell1_nodes = sum(1 for i in range(HOSTS) if i % 2 == 0) + 2
    assert (
        f"cell cell1: 2 of {cell1_nodes} compute node(s) have no resource provider in "
        f"Placement: {lonely} (node {lonely}, uuid {lonely_uuid})"
    ) in text
    assert (
        f"cell cell1: 1 of {cell1_nodes} compute node(s) have no nova-compute service "
        f"record: {stale} (node {stale}, uuid {stale_uuid})"
    ) in text
    assert "cell cell2:" in text and "each with a nova-compute service" in text
    assert "Remedy: Restart nova-compute on each host listed" in text
    assert "soft-delete the stale compute node" in text
    assert all(rows[n][0] == "OK" for n in CHECK_NAMES[:-1]), out


def test_broker_that_does_not_answer(world, tmp_path):
    port = _closed_port()
    conf = _nova_conf(
        world, tmp_path / "nova.conf", transport_url=f"rabbit://guest:brkpw@127.0.0.1:{port}/"
    )
    rc, rows, out = run_check(conf, *_placement_conf_arg(world))
    assert rc == 2, out
    assert "brkpw" not in out
    result, text = rows["Message broker"]
    assert result == "FAILURE"
    assert f"rabbit://guest:***@127.0.0.1:{port}/: no broker host answers" in text
    assert f"127.0.0.1:{port}:" in text
    assert "Remedy: Start RabbitMQ, or correct [DEFAULT] transport_url" in text


@pytest.mark.parametrize(
    ("retries", "workers", "rc", "result"),
    [(10, None, 2, "FAILURE"), (1, None, 0, "OK"), (10, 1, 0, "OK")],
    ids=["ten-retries-fails", "one-retry-ok", "ten-retries-one-worker-ok"],
)
def test_placement_conflict_retry_setting(world, tmp_path, retries, workers, rc, result):
    placement_conf = tmp_path / "placement.conf"
    placement_conf.write_text(
        "[DEFAULT]\ndebug = False\n"
        "[placement_database]\n"
        "connection = mysql+pymysql://placement:pl4cement@db.example:3306/placement\n"
        "[placement]\n"
        f"allocation_conflict_retry_count = {retries}\n"
    )
    conf = _nova_conf(world, tmp_path / "nova.conf")
    argv = ["--placement-config-file", str(placement_conf)]
    if workers:
        argv += ["--placement-workers", str(workers)]
    got_rc, rows, out = run_check(conf, *argv)
    assert got_rc == rc, out
    assert "pl4cement" not in out
    got, text = rows["Placement conflict retries"]
    assert got == result
    assert f"allocation_conflict_retry_count = {retries}" in text
    assert "MariaDB/MySQL" in text
    assert "novasched scheduler worker(s) ([scheduler] workers" in text
    if result == "FAILURE":
        assert (
            f"Remedy: Set [placement] allocation_conflict_retry_count = 1 in {placement_conf}"
        ) in text
        assert "placement.concurrent_update" in text
    else:
        assert "Remedy:" not in text


def test_ignored_option_is_a_warning(world, tmp_path):
    conf = _nova_conf(
        world,
        tmp_path / "nova.conf",
        extra="[scheduler]\nquery_placement_for_availability_zone = true\n",
    )
    rc, rows, out = run_check(conf, *_placement_conf_arg(world))
    assert rc == 1, out
    result, text = rows["Ignored options"]
    assert result == "WARNING"
    assert "scheduler.query_placement_for_availability_zone" in text
    assert "have no effect on novasched" in text and "Remedy: Remove them" in text
    assert [rows[n][0] for n in CHECK_NAMES].count("OK") == len(CHECK_NAMES) - 1
