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
import re
import subprocess
import threading
import time
import uuid as uuidlib
from pathlib import Path

import pytest

from placement_client.api import PlacementClient
from scheduler.demo import fleet as fleet_mod
from scheduler.objects import Flavor, RequestSpec
from scheduler.rpc.context import RequestContext
from scheduler.rpc.rpcapi import SchedulerAPI
from tests.functional.fixtures_rabbit import own_vhost
from tests.functional.fixtures_race import (
    Outcomes,
    mariadb_race_cloud,
    scheduler_client,
    scheduler_nova_conf,
    scheduler_processes,
)

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


def test_two_scheduler_processes_racing_for_the_last_slots_never_overcommit(tmp_path):
    exchange = f"novasched-race-{uuidlib.uuid4().hex[:8]}"
    with contextlib.ExitStack() as stack:
        vhost = own_vhost(stack, "novasched-race")
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
            transport_url=vhost,
            exchange=exchange,
            host="race-scheduler",
            api_url=api_url,
            placement_url=placement_url,
            workers=2,
        )
        log_path = tmp_path / "scheduler.log"
        proc = stack.enter_context(scheduler_processes(conf_path, log_path))

        client = scheduler_client(stack, exchange, 60, vhost)
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
