"""Two scheduler processes on one topic race for the last slots and never over-commit.

`novasched-scheduler` runs with `[scheduler] workers = 2` (two forked processes consuming the
same topic) against a real RabbitMQ, a MariaDB API and cell database, and the real Placement
service with 2 gunicorn workers on MariaDB and `allocation_conflict_retry_count = 1` (the only
setting under which Placement 16 itself never over-commits; see the README). Two hosts are left
with exactly one slot each; concurrent conductors ask for more instances than there are slots.
Placement refuses the losers' claims; a loser takes the other host or fails with NoValidHost.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading
import time
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from oslo_messaging import transport as om_transport

import db
from placement_client import PlacementClient
from scheduler.conf import CONF
from scheduler.demo import fleet as fleet_mod
from scheduler.exceptions import NoValidHost
from scheduler.objects import Flavor, RequestSpec
from scheduler.rpc import transport as rpc
from scheduler.rpc.context import RequestContext
from scheduler.rpc.rpcapi import SchedulerAPI
from tests.functional.fixtures_db import make_database
from tests.functional.fixtures_placement import make_mariadb_placement
from tests.functional.fixtures_rabbit import RABBIT_URL, ensure_rabbit

RACERS = 6
SLOT_MB = 1024
RACE_TRAIT = "CUSTOM_RACE_SLOT"


def _leave_one_slot(placement: PlacementClient, provider: dict) -> None:
    """Shrink the provider's MEMORY_MB inventory so exactly one SLOT_MB instance fits."""
    used = placement.get_usages(provider["uuid"]).get("MEMORY_MB", 0)
    inventories = dict(provider["inventories"])
    total = used + SLOT_MB
    inventories["MEMORY_MB"] = {
        "total": total,
        "reserved": 0,
        "min_unit": 1,
        "max_unit": total,
        "step_size": 1,
        "allocation_ratio": 1.0,
    }
    placement.set_inventories(provider["uuid"], inventories)
    placement.set_traits(provider["uuid"], list(provider["traits"]) + [RACE_TRAIT])


@contextlib.contextmanager
def _scheduler_processes(conf_path: Path, log_path: Path) -> Iterator[subprocess.Popen]:
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


def _wait_ready(client: SchedulerAPI, proc: subprocess.Popen, log_path: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"novasched-scheduler exited {proc.returncode}:\n{log_path.read_text()}")
        if log_path.read_text().count("Scheduler service listening") >= 2:
            ctx = RequestContext(request_id="req-ping")
            client.ping(ctx, "ready", timeout=10)
            return
        time.sleep(0.3)
    pytest.fail(f"the two scheduler workers did not start:\n{log_path.read_text()}")


class RaceCloud(NamedTuple):
    api_url: str
    placement_svc: Any  # the EmbeddedPlacement
    placement: PlacementClient
    fleet: fleet_mod.Fleet


def mariadb_race_cloud(stack: contextlib.ExitStack, name: str, **spec: Any) -> RaceCloud:
    """MariaDB API and cell databases and the real Placement with 2 workers on MariaDB
    (``allocation_conflict_retry_count = 1``), holding a fleet of ``FleetSpec(**spec)`` whose
    services have just reported; all torn down by ``stack``."""
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
    db.touch_services(engine)
    stack.callback(db.dispose_engines)
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


def scheduler_client(stack: contextlib.ExitStack, exchange: str, timeout: int) -> SchedulerAPI:
    """A conductor-side client on ``exchange`` of the real broker."""
    # oslo.messaging registers control_exchange when it first makes a transport
    CONF.register_opts(om_transport._transport_opts)
    CONF.set_override("control_exchange", exchange)
    CONF.set_override("long_rpc_timeout", timeout)
    transport = rpc.get_transport(CONF, url=RABBIT_URL)
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


def test_two_scheduler_processes_racing_for_the_last_slots_never_overcommit(tmp_path):
    ensure_rabbit()
    exchange = f"novasched-race-{uuidlib.uuid4().hex[:8]}"
    with contextlib.ExitStack() as stack:
        api_url, placement_svc, placement, fleet = mariadb_race_cloud(
            stack, "race", hosts=6, seed=3
        )
        placement_url = placement_svc.url
        racers = fleet.providers[:2]
        for provider in racers:
            _leave_one_slot(placement, provider)
        slot_hosts = {p["name"] for p in racers}

        conf_path = scheduler_nova_conf(
            tmp_path / "nova.conf",
            transport_url=RABBIT_URL,
            exchange=exchange,
            host="race-scheduler",
            api_url=api_url,
            placement_url=placement_url,
            workers=2,
        )
        log_path = tmp_path / "scheduler.log"
        proc = stack.enter_context(_scheduler_processes(conf_path, log_path))

        client = scheduler_client(stack, exchange, 60)
        _wait_ready(client, proc, log_path)

        flavor = Flavor(
            name="race",
            flavorid="race",
            vcpus=1,
            memory_mb=SLOT_MB,
            root_gb=1,
            extra_specs={f"trait:{RACE_TRAIT}": "required"},
        )
        barrier = threading.Barrier(RACERS)
        placed: list[tuple[str, str]] = []  # (instance, host)
        outcomes = Outcomes()
        refused, errors = outcomes.refused, outcomes.errors

        def racer(i: int) -> None:
            instance = str(uuidlib.uuid4())
            spec = RequestSpec(flavor=flavor, project_id="p", user_id="u")
            ctx = RequestContext(user_id="u", project_id="p", request_id=f"req-race-{i}")
            barrier.wait()
            result = outcomes.ask(client, ctx, spec, [instance])
            if result is not None:
                with outcomes.lock:
                    placed.append((instance, result[0][0].service_host))

        threads = [threading.Thread(target=racer, args=(i,)) for i in range(RACERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)

        assert not errors, errors
        # exactly one instance per slot, on the two slot hosts; every other request refused
        assert sorted(h for _, h in placed) == sorted(slot_hosts)
        assert len(refused) == RACERS - len(slot_hosts)
        for provider in racers:
            usage = placement.get_usages(provider["uuid"])["MEMORY_MB"]
            inventory = placement.get_inventories(provider["uuid"])["MEMORY_MB"]
            assert usage <= inventory["total"], "over-committed"
        for instance, host in placed:
            allocs = placement.get_allocations_for_consumer(instance)["allocations"]
            assert [fleet_mod_name(fleet, rp) for rp in allocs] == [host]

        # both processes served requests of the race
        log = log_path.read_text()
        pids = set(re.findall(r"^\S+ \S+ (\d+) \w+ \S+ \[\S+ req-race-", log, re.MULTILINE))
        assert len(pids) == 2, log[-3000:]


def fleet_mod_name(fleet: fleet_mod.Fleet, rp_uuid: str) -> str:
    for provider in fleet.providers:
        if provider["uuid"] == rp_uuid:
            return provider["name"]
    raise AssertionError(f"allocation on unknown provider {rp_uuid}")
