"""The host manager's status and cell metrics: what the health monitor and the
``novasched_cell_*`` metrics read."""

from __future__ import annotations

import time

from tests.unit.scheduler.hosts.env import break_cell


def test_status_names_hosts_and_last_good_read_per_cell(env, registry, monkeypatch):
    good, dead = env.add_cell("good"), env.add_cell("dead")
    env.add_host(good, "h1")
    env.add_host(good, "h2")
    env.add_host(dead, "h3")
    state = break_cell(monkeypatch, env, dead)
    hm = env.manager()
    before = time.time()
    hosts = hm.get_host_states_by_uuids(None, request_id="req-1")
    assert {hs.host for hs in hosts} == {"h1", "h2"}
    status = {c["name"]: c for c in hm.status()}
    assert status["good"]["hosts"] == 2 and not status["good"]["failing"]
    assert status["good"]["last_ok_at"] >= before
    assert status["dead"]["hosts"] == 0 and status["dead"]["failing"]
    assert status["dead"]["last_ok_at"] is None
    sample = registry.get_sample_value
    assert sample("novasched_cell_read_failures_total", {"cell": "dead", "reason": "error"}) == 1
    assert sample("novasched_cell_skipped_total", {"cell": "dead", "reason": "error"}) == 1
    assert sample("novasched_cell_read_failures_total", {"cell": "good", "reason": "error"}) is None

    hm.get_host_states_by_uuids(None, request_id="req-2")
    assert sample("novasched_cell_skipped_total", {"cell": "dead", "reason": "error"}) == 2

    state["broken"] = False
    hm.get_host_states_by_uuids(None, request_id="req-3")
    status = {c["name"]: c for c in hm.status()}
    assert status["dead"]["hosts"] == 1 and not status["dead"]["failing"]
    assert status["dead"]["last_ok_at"] >= before
    assert sample("novasched_cell_skipped_total", {"cell": "dead", "reason": "error"}) == 2
