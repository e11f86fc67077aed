"""The benchmark's end-to-end and throughput sections, tiny, against the real services.

20 hosts: Placement on MariaDB seeded by SQL must hold exactly what the fleet says (what the
API would have written), the end-to-end section must schedule and split its timings, and a
throughput run with one scheduler process must place every request without over-committing.
"""

from __future__ import annotations

import contextlib
import json

import db
from benchmarks import e2e, placement_seed, throughput
from placement_client.query import AllocationCandidatesQuery
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

        # generations are consistent: the API can write over the seeded rows
        rp = fleet.providers[0]["uuid"]
        placement.set_traits(rp, ["CUSTOM_SSD", "HW_CPU_X86_AVX2"])
        assert placement.get_provider(rp)["generation"] > 0
        assert placement_seed.overcommitted(cloud.placement_db_url) == []


def test_e2e_section_schedules_over_the_broker_and_splits_the_time():
    ensure_rabbit()
    ensure_server("mariadb")
    out: dict = {}
    result = e2e.run([HOSTS], 3, out)
    assert result is out
    [row] = result["rows"]  # one run: a limit of 1000 already returns all 20 hosts
    assert row["hosts"] == HOSTS and row["requests"] == 3 and row["failures"] == 0
    assert row["client_p50_ms"] >= row["placement_p50_ms"] > 0
    assert row["database_p50_ms"] > 0 and row["own_p50_ms"] > 0
    json.dumps(result)
    assert "target" in e2e.format_table(result)


def test_throughput_with_one_process_places_every_request_without_overcommit():
    ensure_rabbit()
    ensure_server("mariadb")
    out: dict = {}
    result = throughput.run([HOSTS], throughput.CONDUCTORS, out, processes=(1,))
    [row] = result["rows"]
    assert row["requests"] == throughput.CONDUCTORS
    assert row["placed"] + row["novalidhost"] == row["requests"] and row["errors"] == 0
    assert row["overcommits"] == 0
    # the warm-up requests and the run's requests, all served by the one process
    assert row["served_by_process"] == [row["placed"] + 2]
    assert row["cpu_s"]["placement"] > 0
    assert result["targets"]["overcommits"]["met"] is True
    json.dumps(result)
    assert "req/s" in throughput.format_table(result)
