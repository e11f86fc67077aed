"""The benchmark's end-to-end and throughput sections, tiny, against the real services.

20 hosts: Placement on MariaDB seeded by SQL must hold exactly what the fleet says (what the
API would have written), the end-to-end section must schedule with each candidate source
(Placement, the view through the database and through the API) and split its timings, nova
34's own scheduler must place requests on the same cloud, and a
throughput run with one scheduler process per source must place every request without
over-committing or leaving an orphan allocation.
"""

from __future__ import annotations

import contextlib
import json

import db
from benchmarks import e2e, placement_seed, throughput
from placement_client.api.query import AllocationCandidatesQuery
from tests.functional.fixtures_db import ensure_server
from tests.functional.fixtures_rabbit import ensure_rabbit

HOSTS = 20


def _capacity(inv: dict) -> int:
    return int((inv["total"] - inv["reserved"]) * inv["allocation_ratio"])


def test_placement_seeded_by_sql_holds_the_fleet_and_accepts_api_writes():
    ensure_server("mariadb")
    with contextlib.ExitStack() as stack:
        cloud = placement_seed.bench_cloud(HOSTS, stack)
        stack.callback(db.dispose_engines)
        fleet, placement = cloud.fleet, cloud.placement
        # Placement's CPU is metered from its gunicorn master's pid
        assert cloud.placement_pid == cloud.placement_service.pid > 0
        used: dict[str, dict[str, int]] = {}
        for alloc in fleet.allocations:
            mine = used.setdefault(alloc["rp_uuid"], {})
            for rc, amount in alloc["resources"].items():
                mine[rc] = mine.get(rc, 0) + amount
        for provider in fleet.providers:
            rp = provider["uuid"]
            assert placement.get_inventories(rp) == provider["inventories"]
            usages = {rc: n for rc, n in placement.get_usages(rp).items() if n}
            assert usages == used.get(rp, {})
            got = placement.get_provider(rp)
            assert got["root_provider_uuid"] == rp and got["name"] == provider["name"]

        # nova's query: every host but the disabled ones (COMPUTE_STATUS_DISABLED) is offered
        query = AllocationCandidatesQuery(root_forbidden={"COMPUTE_STATUS_DISABLED"})
        query.group().resources.update({"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1})
        candidates = placement.get_allocation_candidates(query)
        expected = {p["uuid"] for p in fleet.providers if p["name"] not in fleet.disabled_hosts}
        assert set(candidates.provider_summaries) == expected

        # room for a flavor: what the enabled providers' inventories and usage leave
        want = {"VCPU": 4, "MEMORY_MB": 8192, "DISK_GB": 40}
        room = 0
        for provider in fleet.providers:
            if provider["name"] in fleet.disabled_hosts:
                continue
            fits = []
            for rc, n in want.items():
                inv = provider["inventories"][rc]
                free = (inv["total"] - inv["reserved"]) * inv["allocation_ratio"]
                free -= used.get(provider["uuid"], {}).get(rc, 0)
                fits.append(int(free // n))
            room += min(fits)
        assert placement_seed.room_for(cloud.placement_db_url, want) == room > 0

        # the consumers are the fleet's instances: none is an orphan until someone claims
        seeded = {a["consumer_uuid"] for a in fleet.allocations}
        assert placement_seed.consumers_with_allocations(cloud.placement_db_url) == seeded
        assert placement_seed.orphans(cloud, set()) == []
        rp = fleet.providers[0]["uuid"]
        stray = "5e1f0000-0000-4000-8000-00000000beef"
        spec = fleet.spec
        placement.claim_resources(
            stray, {"allocations": {rp: {"resources": {"VCPU": 1}}}}, spec.project_id, spec.user_id
        )
        assert placement_seed.orphans(cloud, set()) == [stray]
        assert placement_seed.orphans(cloud, {stray}) == []
        placement.delete_allocation_for_instance(stray)
        assert placement_seed.orphans(cloud, set()) == []

        # generations are consistent: the API can write over the seeded rows
        placement.set_traits(rp, ["CUSTOM_SSD", "HW_CPU_X86_AVX2"])
        assert placement.get_provider(rp)["generation"] > 0
        assert placement_seed.overcommitted(cloud.placement_db_url) == []


def test_e2e_section_schedules_over_the_broker_with_each_source_and_splits_the_time():
    ensure_rabbit()
    ensure_server("mariadb")
    out: dict = {}
    result = e2e.run([HOSTS], 3, out)
    assert result is out
    # one run per source: a limit of 1000 already returns all 20 hosts
    rows = {r["source"]: r for r in result["rows"]}
    assert list(rows) == ["placement", "view", "view-stale", "view-api"]
    for row in rows.values():
        assert row["hosts"] == HOSTS and row["requests"] == 3 and row["failures"] == 0
        assert row["client_p50_ms"] >= row["placement_p50_ms"] > 0  # the claim, at least
        assert row["database_p50_ms"] > 0 and row["own_p50_ms"] > 0
        assert row["orphans"] == 0
        assert row["cpu_s"]["placement"] >= 0 and row["placement_cpu_ms_per_instance"] >= 0
    # Placement answered every candidate query of the first, the view every one of the others
    assert rows["placement"]["view_share"] == 0 and rows["placement"]["candidates_p50_ms"] > 0
    assert rows["placement"]["view_p50_ms"] == 0
    for source in ("view", "view-stale", "view-api"):
        assert rows[source]["view_share"] == 1.0 and rows[source]["view_p50_ms"] > 0
        assert rows[source]["candidates_p50_ms"] == 0 and rows[source]["claim_p50_ms"] > 0
        assert rows[source]["view_status"]["providers"] == HOSTS
    assert result["targets"]["orphans"]["met"] is True
    json.dumps(result)
    text = e2e.format_table(result)
    assert "side by side" in text and "targets:" in text and "view-api" in text
    # what freshness costs, on a line of its own
    assert "view - view-stale, the scheduler's own p50" in text


def test_nova34_source_runs_nova_s_own_scheduler_on_the_cloud_and_places_each_request():
    """The benchmark's nova 34 (``benchmarks.nova34``): nova-scheduler from .venv-nova on a
    vhost of its own, reading the cloud's databases and claiming in its Placement."""
    ensure_rabbit()
    ensure_server("mariadb")
    with contextlib.ExitStack() as stack:
        cloud = placement_seed.bench_cloud(HOSTS, stack)
        stack.callback(db.dispose_engines)
        row = e2e.measure_nova(cloud, 3)
        # nothing nova claimed is left in Placement: the benchmark gave every claim back
        assert placement_seed.orphans(cloud, set()) == []
    assert row["source"] == "nova34" and row["requests"] == 3
    assert row["failures"] == 0 and row["orphans"] == 0
    assert row["client_p50_ms"] > 0 and row["ready_s"] > 0
    # nova's samples are the client's latency alone: no split of novasched's driver
    assert "placement_p50_ms" not in row and "own_p50_ms" not in row


def test_throughput_with_one_process_per_source_places_every_request_without_overcommit():
    ensure_rabbit()
    ensure_server("mariadb")
    out: dict = {}
    result = throughput.run([HOSTS], throughput.CONDUCTORS, out, processes=(1,))
    assert [r["source"] for r in result["rows"]] == ["placement", "view"]
    for row in result["rows"]:
        assert row["requests"] == throughput.CONDUCTORS
        assert row["placed"] + row["novalidhost"] == row["requests"] and row["errors"] == 0
        assert row["overcommits"] == 0 and row["orphans"] == 0
        # the warm-up requests and the run's requests, all served by the one process
        assert row["served_by_process"] == [row["placed"] + 2]
        assert row["cpu_s"]["placement"] > 0
        assert row["room"] >= row["requests"]
    assert result["targets"]["overcommits"]["met"] is True
    assert result["targets"]["orphans"]["met"] is True
    json.dumps(result)
    assert "req/s" in throughput.format_table(result)


def test_the_nested_fleet_is_seeded_as_trees_and_the_view_answers_its_whole_mix(monkeypatch):
    """Issue 29's fleet (an OVS agent with two bandwidth bridges under every compute node,
    four PCI devices on one in four) and mix (ports asking for bandwidth, PCI devices, plain
    boots): Placement holds the trees as seeded, both sources schedule every request, and
    the view answers all of them."""
    ensure_rabbit()
    ensure_server("mariadb")
    with contextlib.ExitStack() as stack:
        cloud = placement_seed.bench_cloud(8, stack, nested=True)
        stack.callback(db.dispose_engines)
        root = cloud.fleet.providers[0]
        children = placement_seed.nested_children(root, 0)
        agent, bridge, device = children[0], children[1], children[-1]
        assert cloud.placement.get_provider(bridge["uuid"])["parent_provider_uuid"] == agent["uuid"]
        got = cloud.placement.get_provider(device["uuid"])
        assert got["parent_provider_uuid"] == got["root_provider_uuid"] == root["uuid"]
        (inventory,) = cloud.placement.get_inventories(device["uuid"]).values()
        assert (inventory["total"], inventory["max_unit"]) == (1, 1)
    monkeypatch.setattr(e2e, "NESTED_MIN_HOSTS", 0)
    result = e2e.run([HOSTS], 4, {}, sources=("placement", "view"), fleets=("nested",))
    rows = {r["source"]: r for r in result["rows"]}
    assert list(rows) == ["placement", "view"]
    for row in rows.values():
        assert row["fleet"] == "nested" and row["requests"] == 4 and row["failures"] == 0
        assert row["orphans"] == 0
    assert rows["view"]["view_share"] == 1.0 and rows["placement"]["view_share"] == 0
    assert result["targets"]["e2e_nested_view_share"]["met"] is True
    assert "nested" in e2e.format_table(result)
