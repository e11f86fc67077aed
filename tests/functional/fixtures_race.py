"""Two or more scheduler processes on MariaDB and the real Placement, for the race tests
(tests/functional/test_race.py, test_race_view.py) and others that run ``novasched-scheduler``
as a process: the cloud (``mariadb_race_cloud``), a nova.conf for the scheduler, the running
processes, a conductor-side client, and what concurrent conductors got (``Outcomes``).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from oslo_messaging import transport as om_transport

import db
from placement_client.api import PlacementClient
from scheduler.conf import CONF
from scheduler.demo import fleet as fleet_mod
from scheduler.exceptions import NoValidHost
from scheduler.objects import RequestSpec
from scheduler.rpc import transport as rpc
from scheduler.rpc.rpcapi import SchedulerAPI
from tests.functional.fixtures_cloud import computes_reporting
from tests.functional.fixtures_db import make_database
from tests.functional.fixtures_placement import make_mariadb_placement
from tests.functional.fixtures_rabbit import RABBIT_URL


@contextlib.contextmanager
def scheduler_processes(conf_path: Path, log_path: Path) -> Iterator[subprocess.Popen]:
    exe = Path(sys.executable).with_name("novasched-scheduler")
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [str(exe), "--config-file", str(conf_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()


class RaceCloud(NamedTuple):
    api_url: str
    placement_svc: Any  # the EmbeddedPlacement
    placement: PlacementClient
    fleet: fleet_mod.Fleet


def mariadb_race_cloud(stack: contextlib.ExitStack, name: str, **spec: Any) -> RaceCloud:
    """MariaDB API and cell databases and the real Placement with 2 workers on MariaDB
    (``allocation_conflict_retry_count = 1``), holding a fleet of ``FleetSpec(**spec)`` whose
    services report as nova-compute does; all torn down by ``stack``."""
    api_url = stack.enter_context(make_database("mariadb", f"novasched_{name}_api"))
    cell_url = stack.enter_context(make_database("mariadb", f"novasched_{name}_cell"))
    api = db.get_engine(api_url)
    db.create_schema(api, "api")
    cell = db.create_cell_mapping(api, name="cell1", database_connection=cell_url)
    db.create_schema(cell_url, "cell")
    placement_svc = make_mariadb_placement(workers=2, conflict_retries=1)
    placement_url = placement_svc.start()
    stack.callback(placement_svc.stop)
    placement = PlacementClient(placement_url, retry_backoff=0.05)
    spec = {"disabled_fraction": 0.0, "down_fraction": 0.0, "max_instances_per_host": 1, **spec}
    fleet = fleet_mod.build_fleet(fleet_mod.FleetSpec(cells=[cell["uuid"]], **spec))
    engine = db.get_engine(cell_url)
    fleet_mod.load_fleet(fleet, api, {cell["uuid"]: engine}, placement)
    stack.callback(db.dispose_engines)
    stack.enter_context(computes_reporting([engine]))
    return RaceCloud(api_url, placement_svc, placement, fleet)


def scheduler_nova_conf(
    path: Path,
    *,
    transport_url: str,
    exchange: str,
    host: str,
    api_url: str,
    placement_url: str,
    workers: int,
    default: str = "",
    placement: str = "",
    extra: str = "",
) -> Path:
    """A nova.conf for ``novasched-scheduler`` against these services (noauth2 Placement,
    short claim back-off); ``default``/``placement`` are more lines of those sections,
    ``extra`` more sections."""
    path.write_text(
        "[DEFAULT]\n"
        f"transport_url = {transport_url}\n"
        f"control_exchange = {exchange}\n"
        f"host = {host}\n"
        f"{default}"
        "[api_database]\n"
        f"connection = {api_url}\n"
        "[placement]\n"
        "auth_type = noauth2\n"
        f"endpoint_override = {placement_url}\n"
        "claim_retry_backoff = 0.05\n"
        f"{placement}"
        "[scheduler]\n"
        f"workers = {workers}\n"
        f"{extra}"
    )
    return path


def scheduler_client(
    stack: contextlib.ExitStack, exchange: str, timeout: int, url: str = RABBIT_URL
) -> SchedulerAPI:
    """A conductor-side client on ``exchange`` of the broker at ``url`` (a test's own vhost:
    ``fixtures_rabbit.own_vhost``)."""
    # oslo.messaging registers control_exchange when it first makes a transport
    CONF.register_opts(om_transport._transport_opts)
    CONF.set_override("control_exchange", exchange)
    CONF.set_override("long_rpc_timeout", timeout)
    transport = rpc.get_transport(CONF, url=url)
    stack.callback(transport.cleanup)
    return SchedulerAPI(transport)


class Outcomes:
    """What concurrent conductors got: NoValidHost reasons and errors, under one lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.refused: list[str] = []
        self.errors: list[BaseException] = []

    def ask(self, client: SchedulerAPI, ctx: Any, spec: RequestSpec, instances: list[str]) -> Any:
        """The selections, or None (the NoValidHost or the error is recorded)."""
        try:
            return client.select_destinations(ctx, spec, instances, True, True)
        except NoValidHost as exc:
            with self.lock:
                self.refused.append(str(exc))
        except BaseException as exc:  # reported by the test
            with self.lock:
                self.errors.append(exc)
        return None
