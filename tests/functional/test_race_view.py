"""Racing with the provider view: two scheduler processes, eight conductors, a writer.

`novasched-scheduler` runs with `[scheduler] workers = 2` and the provider view on (fed
through Placement's API, or read-only from Placement's database), against a real RabbitMQ, a
MariaDB API and cell database, and the real Placement with 2 gunicorn workers on MariaDB
(`allocation_conflict_retry_count = 1`). Eight conductors boot instances (some two at a time)
until the fleet's capacity runs out, while another writer keeps changing the hosts'
inventories and traits through Placement's API, so each scheduler's view is often wrong.
Placement is the arbiter: whatever the views believed, no provider is over-committed, every
instance with allocations got a reply naming its host, and nothing else holds allocations.
"""

from __future__ import annotations

import contextlib
import random
import re
import threading
import time
import uuid as uuidlib

import pytest
import requests

from placement_client.api import PlacementClient
from placement_client.api.errors import PlacementClientError
from scheduler.objects import Flavor, RequestSpec
from scheduler.rpc.context import RequestContext
from tests.functional.fixtures_rabbit import own_vhost
from tests.functional.fixtures_race import (
    Outcomes,
    mariadb_race_cloud,
    scheduler_client,
    scheduler_nova_conf,
    scheduler_processes,
)

HOSTS = 6
CONDUCTORS = 8
REQUESTS_EACH = 5
SLOT_MB = 1024
RACE_TRAIT = "CUSTOM_RACE_SLOT"
NOISE_TRAIT = "CUSTOM_RACE_NOISE"


def _consumers(placement: PlacementClient, rp: str) -> dict[str, dict[str, int]]:
    got = placement.get_provider_part(rp, "allocations")
    assert got is not None
    return {c: body["resources"] for c, body in got[1].items()}


def _set_room(url: str, placement: PlacementClient, rp: str, slots: int) -> bool:
    """Give the provider room for exactly ``slots`` more instances, at the generation its
    allocations were read at (a claim in between makes Placement refuse the write)."""
    generation, allocations = placement.get_provider_part(rp, "allocations")
    used = sum(body["resources"].get("MEMORY_MB", 0) for body in allocations.values())
    _, inventories = placement.get_provider_part(rp, "inventories")
    total = used + slots * SLOT_MB
    inventories = dict(inventories)
    inventories["MEMORY_MB"] = dict(
        inventories["MEMORY_MB"], total=total, max_unit=max(total, 1), allocation_ratio=1.0
    )
    if total == 0:
        inventories["MEMORY_MB"]["total"] = 1  # Placement wants total >= 1
        inventories["MEMORY_MB"]["reserved"] = 1
    else:
        inventories["MEMORY_MB"]["reserved"] = 0
    resp = requests.put(
        f"{url}/resource_providers/{rp}/inventories",
        json={"resource_provider_generation": generation, "inventories": inventories},
        headers={"X-Auth-Token": "admin", "OpenStack-API-Version": "placement 1.26"},
        timeout=30,
    )
    assert resp.status_code in (200, 409), resp.text
    return resp.status_code == 200


def _wait_views_loaded(proc, log_path, workers: int = 2) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"novasched-scheduler exited {proc.returncode}:\n{log_path.read_text()}")
        text = log_path.read_text()
        if text.count("Scheduler service listening") >= workers and (
            text.count("Provider view loaded") >= workers
        ):
            return
        time.sleep(0.3)
    pytest.fail(f"the provider views did not load:\n{log_path.read_text()[-4000:]}")


@pytest.mark.parametrize("feed", ["api", "database"])
def test_views_racing_with_a_writer_never_overcommit_nor_lose_an_allocation(tmp_path, feed):
    exchange = f"novasched-race-view-{uuidlib.uuid4().hex[:8]}"
    rng = random.Random(11)
    with contextlib.ExitStack() as stack:
        vhost = own_vhost(stack, "novasched-race-view")
        api_url, placement_svc, placement, fleet = mariadb_race_cloud(
            stack, "rview", hosts=HOSTS, seed=5, aarch64_fraction=0.0
        )
        placement_url = placement_svc.url
        rps = [p["uuid"] for p in fleet.providers]
        placement.ensure_traits([RACE_TRAIT, NOISE_TRAIT])
        for p in fleet.providers:
            placement.set_traits(p["uuid"], list(p["traits"]) + [RACE_TRAIT])
            assert _set_room(placement_url, placement, p["uuid"], 2)
        before = {rp: set(_consumers(placement, rp)) for rp in rps}

        view_conf = "view_feed = api\n"
        if feed == "database":
            view_conf = f"view_feed = database\nview_database_connection = {placement_svc.db_url}\n"
        conf_path = scheduler_nova_conf(
            tmp_path / "nova.conf",
            transport_url=vhost,
            exchange=exchange,
            host="race-view-scheduler",
            api_url=api_url,
            placement_url=placement_url,
            workers=2,
            default="debug = True\n",
            placement="view_refresh_interval = 0.5\n" + view_conf,
        )
        log_path = tmp_path / "scheduler.log"
        proc = stack.enter_context(scheduler_processes(conf_path, log_path))
        _wait_views_loaded(proc, log_path)

        client = scheduler_client(stack, exchange, 90, vhost)
        client.ping(RequestContext(request_id="req-ping"), "ready", timeout=30)

        flavor = Flavor(
            name="race",
            flavorid="race",
            vcpus=1,
            memory_mb=SLOT_MB,
            root_gb=1,
            extra_specs={f"trait:{RACE_TRAIT}": "required"},
        )
        placed: dict[str, str] = {}  # instance -> host
        outcomes = Outcomes()
        refused, errors = outcomes.refused, outcomes.errors
        done = threading.Event()
        writes = [0]
        answered = [0]  # requests placed

        def conductor(c: int) -> None:
            for r in range(REQUESTS_EACH):
                num = 2 if r % 3 == 2 else 1
                instances = [str(uuidlib.uuid4()) for _ in range(num)]
                spec = RequestSpec(flavor=flavor, project_id="p", user_id="u", num_instances=num)
                ctx = RequestContext(user_id="u", project_id="p", request_id=f"req-rv-{c}-{r}")
                result = outcomes.ask(client, ctx, spec, instances)
                if result is not None:
                    with outcomes.lock:
                        answered[0] += 1
                        for instance, selections in zip(instances, result, strict=True):
                            placed[instance] = selections[0].compute_node_uuid

        def writer() -> None:
            while not done.is_set():
                rp = rng.choice(rps)
                if rng.random() < 0.7:
                    if _set_room(placement_url, placement, rp, rng.choice((0, 1, 1, 2))):
                        writes[0] += 1
                else:
                    traits = [*next(p for p in fleet.providers if p["uuid"] == rp)["traits"]]
                    traits.append(RACE_TRAIT)
                    if rng.random() < 0.5:
                        traits.append(NOISE_TRAIT)
                    try:
                        placement.set_traits(rp, traits)
                        writes[0] += 1
                    except PlacementClientError as exc:
                        # a claim bumped the generation between its read and the write,
                        # as _set_room's may be refused
                        assert exc.status == 409, exc
                time.sleep(rng.uniform(0.02, 0.1))

        writer_thread = threading.Thread(target=writer)
        writer_thread.start()
        threads = [threading.Thread(target=conductor, args=(c,)) for c in range(CONDUCTORS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=240)
        done.set()
        writer_thread.join(timeout=30)

        assert not errors, errors
        assert writes[0] > 5
        assert placed, refused[:3]
        # every request was answered: its instances placed, or NoValidHost
        assert (
            len(placed) + len(refused) + len([r for r in refused if "of 2 instances" in r])
            >= CONDUCTORS * REQUESTS_EACH
        )
        assert len(refused) > 0  # the capacity ran out
        # Placement never over-committed, whatever the views believed
        for rp in rps:
            _, inventories = placement.get_provider_part(rp, "inventories")
            usage = placement.get_usages(rp)
            for rc, inv in inventories.items():
                capacity = (inv["total"] - inv["reserved"]) * inv["allocation_ratio"]
                assert usage.get(rc, 0) <= capacity, f"{rp} over-committed on {rc}"
        # every allocation made during the race belongs to an instance that got a reply
        # naming that host, and every reply's instance holds its allocation there
        holders: dict[str, str] = {}
        for rp in rps:
            for consumer in set(_consumers(placement, rp)) - before[rp]:
                holders[consumer] = rp
        assert holders == placed
        # the views answered requests, and refused claims made them read providers again
        log = log_path.read_text()
        from_view = len(re.findall(r"allocation candidate\(s\) from the provider view", log))
        assert from_view > 0, log[-4000:]
