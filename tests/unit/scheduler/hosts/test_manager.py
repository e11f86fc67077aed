"""HostManager against real SQLite API and cell databases with nova's schema."""

from __future__ import annotations

import datetime
import json
import logging
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

import db
from db import models, queries
from scheduler.conf import CONF
from scheduler.hosts import cell_reads as cell_reads_mod
from scheduler.hosts import table as host_table
from scheduler.hosts.manager import HostManager
from scheduler.objects import (
    Aggregate,
    Destination,
    ImageMeta,
    InstanceGroup,
)
from tests.unit.filters.fakes import run_filter
from tests.unit.scheduler.hosts.env import (
    BASE,
    assert_table_mirrors,
    break_cell,
    new_uuid,
    request_spec,
    service_row,
    states_by_host,
    utcnow,
)

# ------------------------------------------------------------------------------------ cells


def test_cell0_and_disabled_cells_are_left_out(env):
    db.ensure_cell0(env.api, env.cell_url("cell0"))
    db.create_schema(env.cell_url("cell0"), "cell")
    env.cells[db.CELL0_UUID] = db.get_engine(env.cell_url("cell0"))
    env.add_host(db.CELL0_UUID, "in-cell0")
    c1 = env.add_cell("cell1")
    env.add_host(c1, "h1")
    off = env.add_cell("off", disabled=True)
    env.add_host(off, "in-disabled")

    hm = env.manager()

    assert set(hm.enabled_cells) == {c1}
    assert set(hm.cells) == {c1, off}
    assert [hs.host for hs in hm.get_host_states_by_uuids(None)] == ["h1"]


def test_refresh_cells_caches_picks_up_new_cell_and_changed_connection(env):
    c1 = env.add_cell("cell1")
    env.add_host(c1, "h1")
    hm = env.manager()
    assert [hs.host for hs in hm.get_host_states_by_uuids(None)] == ["h1"]

    c2 = env.add_cell("cell2")
    env.add_host(c2, "h2")
    assert "h2" not in states_by_host(hm.get_host_states_by_uuids(None))  # not until refreshed
    hm.refresh_cells_caches()
    assert set(states_by_host(hm.get_host_states_by_uuids(None))) == {"h1", "h2"}

    # cell1 moves to another database: its hosts are read from there, whole
    db.create_schema(env.cell_url("cell1b"), "cell")
    env.cells[c1] = db.get_engine(env.cell_url("cell1b"))
    env.add_host(c1, "h1b")
    t = models.cell_mappings
    with env.api.begin() as conn:
        conn.execute(
            t.update()
            .where(t.c.uuid == c1)
            .values(database_connection=env.cell_url("cell1b"), name="renamed")
        )
    hm.refresh_cells_caches()
    states = states_by_host(hm.get_host_states_by_uuids(None))
    assert set(states) == {"h1b", "h2"}
    assert states["h1b"].cell_uuid == c1
    assert hm.cells[c1].name == "renamed"


def test_refresh_cells_caches_drops_a_cell_that_became_disabled(env):
    c1 = env.add_cell("cell1")
    c2 = env.add_cell("cell2")
    env.add_host(c1, "h1")
    env.add_host(c2, "h2")
    hm = env.manager()
    assert len(hm.get_host_states_by_uuids(None)) == 2
    t = models.cell_mappings
    with env.api.begin() as conn:
        conn.execute(t.update().where(t.c.uuid == c2).values(disabled=True))
    hm.refresh_cells_caches()
    assert [hs.host for hs in hm.get_host_states_by_uuids(None)] == ["h1"]


# ------------------------------------------------------------------------------ HostState


def test_host_state_has_novas_fields(env):
    c1 = env.add_cell("cell1")
    u = env.add_host(c1, "h1", service={"disabled": True, "disabled_reason": "maint"})
    agg = env.add_aggregate("az1", ["h1"], {"availability_zone": "az1"})
    env.add_aggregate("other", ["h9"], {"k": "v"})
    hm = env.manager()

    (hs,) = hm.get_host_states_by_uuids([u])

    assert (hs.host, hs.nodename, hs.uuid, hs.cell_uuid) == ("h1", "h1", u, c1)
    assert hs.free_disk_mb == 900 * 1024  # min(free_disk_gb, disk_available_least)
    assert hs.total_usable_disk_gb == 1000
    assert hs.disk_mb_used == 40 * 1024
    assert (hs.total_usable_ram_mb, hs.free_ram_mb) == (65536, 60928)
    assert (hs.vcpus_total, hs.vcpus_used) == (16, 2)
    assert (hs.num_instances, hs.num_io_ops, hs.failed_builds) == (3, 1, 2)
    assert hs.stats["num_instances"] == "3"
    assert hs.cpu_info == '{"arch": "x86_64", "model": "Cascadelake-Server"}'
    assert hs.supported_instances == [["x86_64", "kvm", "hvm"]]
    assert (hs.cpu_allocation_ratio, hs.ram_allocation_ratio) == (16.0, 1.5)
    assert (hs.hypervisor_type, hs.hypervisor_version) == ("QEMU", 8002002)
    assert hs.host_ip == "10.0.0.1"
    assert [a.uuid for a in hs.aggregates] == [agg.uuid]
    assert hs.availability_zone == "az1"
    assert hs.service["disabled"] is True
    assert hs.service["disabled_reason"] == "maint"


def _nova_compute_metrics(percent: dict[str, int], **others: int) -> str:
    """compute_nodes.metrics as nova-compute writes it: MonitorMetricList.to_list() stores
    each percent metric divided by 100.0 (cpu.percent 37 -> 0.37), the others as they are."""
    when = "2026-11-24T12:00:00.000000"
    rows = [
        {"name": name, "value": value / 100.0, "timestamp": when, "source": "libvirt.LibvirtDriver"}
        for name, value in percent.items()
    ]
    rows += [
        {"name": name.replace("_", "."), "value": value, "timestamp": when, "source": "libvirt"}
        for name, value in others.items()
    ]
    return json.dumps(rows)


def test_metrics_are_read_as_novas_monitor_metric_list_reads_them(env):
    c1 = env.add_cell("cell1")
    percent = {
        "cpu.percent": 37,
        "cpu.user.percent": 29,
        "cpu.kernel.percent": 8,
        "cpu.idle.percent": 63,
        "cpu.iowait.percent": 0,
    }
    u = env.add_host(
        c1, "h1", metrics=_nova_compute_metrics(percent, cpu_frequency=2400, cpu_user_time=9876)
    )
    (hs,) = env.manager().get_host_states_by_uuids([u])
    values = {m["name"]: m["value"] for m in hs.metrics}
    # from_json multiplies the percent metrics by 100 and MonitorMetric.value is an integer
    # field: 0.29 * 100 is 28.999999999999996, which nova truncates to 28
    assert values == {
        "cpu.percent": 37,
        "cpu.user.percent": 28,
        "cpu.kernel.percent": 8,
        "cpu.idle.percent": 63,
        "cpu.iowait.percent": 0,
        "cpu.frequency": 2400,
        "cpu.user.time": 9876,
    }
    assert all(type(v) is int for v in values.values())
    assert {m["source"] for m in hs.metrics} == {"libvirt.LibvirtDriver", "libvirt"}


def test_metrics_weigher_and_filter_decide_on_novas_values(env):
    from filters.metrics_filter import MetricsFilter
    from tests.unit.filters.fakes import make_spec, override
    from tests.unit.weighers.fakes import weigh_all
    from weighers.handler import WeightHandler
    from weighers.metrics import MetricsWeigher

    c1 = env.add_cell("cell1")
    busy = env.add_host(
        c1, "busy", metrics=_nova_compute_metrics({"cpu.percent": 90}, cpu_frequency=3000)
    )
    idle = env.add_host(
        c1, "idle", metrics=_nova_compute_metrics({"cpu.percent": 5}, cpu_frequency=2400)
    )
    bare = env.add_host(c1, "bare", metrics=_nova_compute_metrics({}, cpu_frequency=2400))
    states = states_by_host(env.manager().get_host_states_by_uuids([busy, idle, bare]))
    with override("weight_setting", ["cpu.percent=-1", "cpu.frequency=0.01"], group="metrics"):
        passed = run_filter(MetricsFilter(), list(states.values()), make_spec()).passed
        assert sorted(h.host for h in passed) == ["busy", "idle"]
        hosts = [states["busy"], states["idle"]]
        # nova: busy -90 + 30 = -60, idle -5 + 24 = 19; read as stored (0.9 and 0.05) the
        # CPU load would hardly count and the faster, busier host would win
        assert weigh_all(MetricsWeigher(), hosts, None) == [-60.0, 19.0]
        ranked = WeightHandler([MetricsWeigher()]).weigh(hosts, make_spec())
        assert [w.obj.host for w in ranked] == ["idle", "busy"]


def test_metrics_nova_could_not_read_are_left_out(env):
    c1 = env.add_cell("cell1")
    stored = json.dumps(
        [
            {"name": "cpu.percent", "value": "not a number"},
            {"name": "cpu.frequency", "value": None},
            {"name": "cpu.idle.percent", "value": float("inf")},
            {"name": "cpu.user.time", "value": 12.7},
            {"name": "numa.membw.current", "numa_membw_values": {"0": 10}},
        ]
    )
    u = env.add_host(c1, "h1", metrics=stored)
    (hs,) = env.manager().get_host_states_by_uuids([u])
    assert hs.metrics == [
        {"name": "cpu.user.time", "value": 12},
        {"name": "numa.membw.current", "numa_membw_values": {"0": 10}},
    ]


def test_free_disk_uses_free_disk_gb_when_disk_available_least_is_larger_or_null(env):
    c1 = env.add_cell("cell1")
    a = env.add_host(c1, "a", free_disk_gb=100, disk_available_least=200)
    b = env.add_host(c1, "b", free_disk_gb=100, disk_available_least=None)
    c = env.add_host(c1, "c", free_disk_gb=100, disk_available_least=-5)
    hm = env.manager()
    states = states_by_host(hm.get_host_states_by_uuids([a, b, c]))
    assert states["a"].free_disk_mb == 100 * 1024
    assert states["b"].free_disk_mb == 100 * 1024
    assert states["c"].free_disk_mb == -5 * 1024


@pytest.mark.parametrize("ratio", [None, 0.0])
def test_null_or_zero_allocation_ratios_are_replaced_by_initial_ratios(env, ratio):
    c1 = env.add_cell("cell1")
    u = env.add_host(
        c1,
        "h1",
        cpu_allocation_ratio=ratio,
        ram_allocation_ratio=ratio,
        disk_allocation_ratio=ratio,
    )
    (hs,) = env.manager().get_host_states_by_uuids([u])
    assert (hs.cpu_allocation_ratio, hs.ram_allocation_ratio, hs.disk_allocation_ratio) == (
        4.0,
        1.0,
        1.0,
    )


def test_unparsable_or_missing_stats_give_zero_counters(env):
    c1 = env.add_cell("cell1")
    a = env.add_host(c1, "a", stats=None)
    b = env.add_host(c1, "b", stats='{"num_instances": "x"}')
    states = states_by_host(env.manager().get_host_states_by_uuids([a, b]))
    assert (states["a"].num_instances, states["a"].stats) == (0, {})
    assert states["b"].num_instances == 0


def test_node_without_service_record_is_skipped_with_a_warning(env, caplog):
    c1 = env.add_cell("cell1")
    orphan = env.add_host(c1, "orphan", service=False)
    ok = env.add_host(c1, "ok")
    hm = env.manager()
    with caplog.at_level(logging.WARNING, logger="scheduler.hosts.manager"):
        states = hm.get_host_states_by_uuids([orphan, ok])
    assert [hs.host for hs in states] == ["ok"]
    assert "No compute service record found for host orphan" in caplog.text

    # a service row arriving later brings the host in
    with env.cells[c1].begin() as conn:
        conn.execute(models.services.insert().values(**service_row("orphan", created_at=utcnow())))
    assert {hs.host for hs in hm.get_host_states_by_uuids([orphan, ok])} == {"orphan", "ok"}


def test_node_with_free_disk_gb_null_is_zeroed_without_uuid(env):
    c1 = env.add_cell("cell1")
    u = env.add_host(c1, "fresh", free_disk_gb=None)
    hm = env.manager()
    (hs,) = hm.get_host_states_by_uuids([u])
    # as nova: it goes through the filters but can never match an allocation candidate
    assert hs.uuid is None
    assert (hs.free_ram_mb, hs.free_disk_mb, hs.vcpus_total) == (0, 0, 0)
    assert hs.service["host"] == "fresh"

    env.update_node(c1, u, free_disk_gb=500)
    (hs2,) = hm.get_host_states_by_uuids([u])
    assert hs2.uuid == u
    assert hs2.free_disk_mb == 500 * 1024
    assert hs2.free_ram_mb == 60928


def test_only_the_requested_uuids_are_returned(env):
    c1 = env.add_cell("cell1")
    uuids = [env.add_host(c1, f"h{i}") for i in range(5)]
    hm = env.manager()
    got = hm.get_host_states_by_uuids([uuids[1], uuids[3], "not-a-node"])
    assert sorted(hs.uuid for hs in got) == sorted([uuids[1], uuids[3]])
    assert hm.get_host_states_by_uuids([]) == []
    assert len(hm.get_host_states_by_uuids(None)) == 5


# ------------------------------------------------------------------------ incremental cache


def test_changed_compute_node_and_service_rows_are_seen_on_the_next_call(env):
    c1 = env.add_cell("cell1")
    u = env.add_host(c1, "h1")
    hm = env.manager()
    (hs,) = hm.get_host_states_by_uuids([u])
    assert hs.free_ram_mb == 60928 and not hs.service["disabled"]

    env.update_node(c1, u, free_ram_mb=1000, stats='{"num_instances": "9"}')
    (hs,) = hm.get_host_states_by_uuids([u])
    assert (hs.free_ram_mb, hs.num_instances) == (1000, 9)

    env.update_service(c1, "h1", disabled=True, disabled_reason="maintenance")
    (hs,) = hm.get_host_states_by_uuids([u])
    assert hs.service["disabled"] is True
    assert hs.service["disabled_reason"] == "maintenance"

    now = utcnow()
    env.update_service(c1, "h1", last_seen_up=now, report_count=2)
    (hs,) = hm.get_host_states_by_uuids([u])
    assert hs.service["last_seen_up"] == now


def test_soft_deleted_node_disappears_and_new_node_appears(env):
    c1 = env.add_cell("cell1")
    gone = env.add_host(c1, "gone")
    env.add_host(c1, "stays")
    hm = env.manager()
    assert {hs.host for hs in hm.get_host_states_by_uuids(None)} == {"gone", "stays"}

    env.delete_node(c1, gone)
    # a new compute service: rows with only created_at set
    fresh = {"created_at": utcnow(), "updated_at": None, "last_seen_up": None}
    new = env.add_host(c1, "new", service=fresh, created_at=utcnow(), updated_at=None)
    # a second node for a service read before
    second_node = env.add_host(c1, "new2", service=False, created_at=utcnow())
    env.update_service(c1, "stays")

    states = states_by_host(hm.get_host_states_by_uuids(None))
    assert set(states) == {"stays", "new"}
    (new2,) = hm.compute_nodes_by_host_or_node("new2", None)
    assert new2.uuid == second_node and new2.service == {}
    assert states["new"].uuid == new
    assert hm.get_host_states_by_uuids([gone]) == []


def test_host_states_for_follows_hosts_coming_going_and_moving(env):
    c1 = env.add_cell("cell1")
    gone = env.add_host(c1, "gone")
    moving = env.add_host(c1, "h1", hypervisor_hostname="node-1")
    hm = env.manager()
    hm.get_host_states_by_uuids(None)
    assert [hs.uuid for hs in hm.host_states_for("gone")] == [gone]
    assert [hs.uuid for hs in hm.host_states_for("h1", "node-1")] == [moving]
    assert hm.host_states_for("h1", "other-node") == [] and hm.host_states_for("new") == []

    env.delete_node(c1, gone)
    new = env.add_host(c1, "new", created_at=utcnow())
    env.update_node(c1, moving, host="new")
    hm.get_host_states_by_uuids(None)
    assert hm.host_states_for("gone") == [] and hm.host_states_for("h1") == []
    assert {hs.uuid for hs in hm.host_states_for("new")} == {new, moving}


def test_a_node_moving_to_another_host_gets_a_new_host_state(env):
    c1 = env.add_cell("cell1")
    u = env.add_host(c1, "h1", hypervisor_hostname="node-1")
    env.add_host(c1, "h2")
    hm = env.manager()
    (before,) = hm.get_host_states_by_uuids([u])
    env.update_node(c1, u, host="h2")  # an ironic node rebalanced to another compute service
    (after,) = hm.get_host_states_by_uuids([u])
    assert (after.host, after.nodename, after.uuid) == ("h2", "node-1", u)
    assert after is not before


def test_an_unchanged_cell_rereads_only_the_slack_window(env, monkeypatch):
    c1 = env.add_cell("cell1")
    for i in range(20):
        env.add_host(c1, f"h{i}")
    hm = env.manager()
    calls = []
    real_nodes, real_services = queries.get_compute_nodes, queries.get_compute_services

    def nodes(engine, uuids=None, updated_since=None):
        rows = real_nodes(engine, uuids, updated_since)
        calls.append(("nodes", updated_since, len(rows)))
        return rows

    def services(engine, updated_since=None):
        rows = real_services(engine, updated_since=updated_since)
        calls.append(("services", updated_since, len(rows)))
        return rows

    monkeypatch.setattr(queries, "get_compute_nodes", nodes)
    monkeypatch.setattr(queries, "get_compute_services", services)

    before = utcnow()
    first = hm.get_host_states_by_uuids(None)
    assert len(first) == 20
    assert calls == [("services", None, 20), ("nodes", None, 20)]  # the first read is whole
    calls.clear()

    second = hm.get_host_states_by_uuids(None)
    assert [(kind, n) for kind, _, n in calls] == [("services", 0), ("nodes", 0)]
    since = calls[0][1]
    # the window starts a few seconds behind the previous read, not at the newest row
    assert before - cell_reads_mod.WATERMARK_SLACK <= since <= utcnow()
    assert {id(h) for h in second} == {id(h) for h in first}  # the same cached objects


def test_cell_is_read_whole_again_after_the_resync_interval(env, monkeypatch):
    c1 = env.add_cell("cell1")
    env.add_host(c1, "h1")
    u2 = env.add_host(c1, "h2")
    hm = env.manager()
    assert len(hm.get_host_states_by_uuids(None)) == 2
    # a change the incremental read cannot see: a row written with a clock far behind ours;
    # a service deleted on its own is seen at once (soft-deleted rows come with the changes)
    env.update_node(c1, u2, free_ram_mb=7, updated_at=BASE)
    env.delete_service(c1, "h1")
    states = hm.get_host_states_by_uuids(None)
    assert [(hs.host, hs.free_ram_mb != 7) for hs in states] == [("h2", True)]
    monkeypatch.setattr(cell_reads_mod, "_FULL_RESYNC_SECONDS", 0.0)
    (hs,) = hm.get_host_states_by_uuids(None)
    assert (hs.host, hs.free_ram_mb) == ("h2", 7)


def test_consumption_is_kept_until_the_compute_node_reports_newer_data(env):
    c1 = env.add_cell("cell1")
    u = env.add_host(c1, "h1")
    hm = env.manager()
    (hs,) = hm.get_host_states_by_uuids([u])
    hs.consume_from_request(request_spec())
    consumed = (60928 - 1024, 900 * 1024 - 15 * 1024, 2 + 2, 4, 2)

    def view(h):
        return (h.free_ram_mb, h.free_disk_mb, h.vcpus_used, h.num_instances, h.num_io_ops)

    (hs,) = hm.get_host_states_by_uuids([u])
    assert view(hs) == consumed
    # a report written before our claim (it lands in the re-read window) is taken, and our
    # consumption stays counted on top of it
    env.update_node(c1, u, free_ram_mb=5, updated_at=utcnow() - datetime.timedelta(seconds=2))
    (hs,) = hm.get_host_states_by_uuids([u])
    assert view(hs) == (5 - 1024, *consumed[1:])
    # a report after the claim wins
    env.update_node(c1, u, free_ram_mb=5, updated_at=utcnow() + datetime.timedelta(seconds=1))
    (hs,) = hm.get_host_states_by_uuids([u])
    assert hs.free_ram_mb == 5
    assert hs.num_instances == 3  # from the stats again


def _snapshot(hs) -> tuple:
    service = hs.service
    return (
        hs.uuid,
        hs.host,
        hs.nodename,
        hs.cell_uuid,
        hs.free_ram_mb,
        hs.free_disk_mb,
        hs.total_usable_ram_mb,
        hs.total_usable_disk_gb,
        hs.disk_mb_used,
        hs.vcpus_total,
        hs.vcpus_used,
        hs.num_instances,
        hs.num_io_ops,
        hs.failed_builds,
        json.dumps(hs.stats, sort_keys=True),
        hs.cpu_info,
        json.dumps(hs.supported_instances),
        hs.cpu_allocation_ratio,
        hs.ram_allocation_ratio,
        hs.disk_allocation_ratio,
        hs.hypervisor_version,
        hs.updated,
        tuple(sorted(a.uuid for a in hs.aggregates)),
        service.get("disabled"),
        service.get("disabled_reason"),
        service.get("forced_down"),
        service.get("last_seen_up"),
        service.get("updated_at"),
    )


def _all(hm) -> dict:
    return {hs.uuid or hs.host: _snapshot(hs) for hs in hm.get_host_states_by_uuids(None)}


def _decisions(hm, columns: bool) -> tuple:
    """What the default filters and every weigher make of the host manager's hosts: the
    ranking (by host) and the reasons, with the columns of the host table or without."""
    import filters.handler as filter_handler_mod
    import weighers.handler as weight_handler_mod
    from filters.handler import FilterHandler, load_filters
    from weighers.handler import WeightHandler, load_weighers

    hosts = sorted(hm.get_host_states_by_uuids(None), key=lambda h: (h.host, h.nodename))
    spec = request_spec(image=ImageMeta(properties={"hw_architecture": "x86_64"}))
    saved = filter_handler_mod.COLUMNS_MIN_HOSTS, weight_handler_mod.COLUMNS_MIN_HOSTS
    threshold = 0 if columns else 10**9
    filter_handler_mod.COLUMNS_MIN_HOSTS = weight_handler_mod.COLUMNS_MIN_HOSTS = threshold
    try:
        report = FilterHandler(load_filters(CONF.filter_scheduler.enabled_filters)).run(hosts, spec)
        ranked, weights = WeightHandler(load_weighers([])).rank(report.hosts, spec)
    finally:
        filter_handler_mod.COLUMNS_MIN_HOSTS, weight_handler_mod.COLUMNS_MIN_HOSTS = saved
    return [(h.host, h.nodename) for h in ranked], weights, report.summary()


@pytest.mark.parametrize("window", [0.0, 3600.0])
@pytest.mark.parametrize("seed", range(4))
def test_incremental_cache_matches_a_fresh_full_read_after_random_changes(env, seed, window):
    rng = random.Random(seed)
    cells = [env.add_cell("cell1"), env.add_cell("cell2")]
    nodes: dict[str, tuple[str, str]] = {}  # uuid -> (cell, host)
    hosts: dict[str, str] = {}  # host -> cell (with a live service)
    counter = 0

    def new_host(when=BASE):
        nonlocal counter
        counter += 1
        cell = rng.choice(cells)
        host = f"h{counter}"
        service = {"created_at": when, "updated_at": when}
        kw = {"created_at": when, "updated_at": when}
        if rng.random() < 0.2:
            kw["free_disk_gb"] = None
        u = env.add_host(cell, host, service=service, **kw)
        nodes[u] = (cell, host)
        hosts[host] = cell

    for _ in range(15):
        new_host()
    env.add_aggregate("agg", [f"h{i}" for i in range(1, 8)], {"availability_zone": "az1"})
    # window=3600: requests for candidates read only compute-node reports in between;
    # asking for every host reads the whole window, which must catch up exactly
    cached = env.manager(window_read_interval=window)
    _all(cached)

    for _step in range(12):
        for _change in range(rng.randint(1, 4)):
            op = rng.choice(["node", "node", "service", "heartbeat", "delete", "add", "drop"])
            if op == "add" or not nodes:
                new_host(utcnow())
                continue
            u = rng.choice(sorted(nodes))
            cell, host = nodes[u]
            if op == "node":
                env.update_node(
                    cell,
                    u,
                    free_ram_mb=rng.randint(-100, 60000),
                    free_disk_gb=rng.randint(0, 900),
                    vcpus_used=rng.randint(0, 32),
                    stats=json.dumps({"num_instances": str(rng.randint(0, 9))}),
                    cpu_allocation_ratio=rng.choice([None, 0.0, 2.0]),
                )
            elif op == "service":
                env.update_service(cell, host, disabled=rng.random() < 0.5, disabled_reason="x")
            elif op == "heartbeat":
                env.update_service(cell, host, last_seen_up=utcnow())
            elif op == "delete":
                env.delete_node(cell, u)
                del nodes[u]
            else:  # the service goes, and (as nova's service delete does) its nodes with it
                env.delete_service(cell, host)
                for n in [n for n, (_, h) in nodes.items() if h == host]:
                    env.delete_node(cell, n)
                    del nodes[n]
        cached.get_host_states_by_uuids(sorted(nodes))  # a request for candidates
        incremental = _all(cached)
        fresh_hm = env.manager()
        fresh = _all(fresh_hm)
        assert incremental == fresh
        # the same decisions: the incremental cache over the table's columns, and a fresh
        # full read over the per-host paths
        assert _decisions(cached, columns=True) == _decisions(fresh_hm, columns=False)
        print("DECISIONS", _decisions(cached, columns=True))
        fresh_hm.stop()
        assert_table_mirrors(cached.table, cached.get_host_states_by_uuids(None))
    assert set(incremental) <= set(nodes) | {h for _, h in nodes.values()}


# -------------------------------------------------------------------------- cells to read


def test_requested_destination_cell_restricts_to_that_cell(env):
    c1, c2 = env.add_cell("cell1"), env.add_cell("cell2")
    env.add_host(c1, "h1")
    env.add_host(c2, "h2")
    hm = env.manager()
    spec = request_spec(requested_destination=Destination(cell_uuid=c2))
    assert [hs.host for hs in hm.get_host_states_by_uuids(None, spec)] == ["h2"]
    spec.requested_destination.allow_cross_cell_move = True
    assert {hs.host for hs in hm.get_host_states_by_uuids(None, spec)} == {"h1", "h2"}
    unknown = request_spec(requested_destination=Destination(cell_uuid=new_uuid()))
    assert hm.get_host_states_by_uuids(None, unknown) == []


def test_compute_nodes_by_host_or_node(env):
    c1, c2 = env.add_cell("cell1"), env.add_cell("cell2")
    a = env.add_host(c1, "h1", hypervisor_hostname="n1")
    b = env.add_host(c1, "h1", service=False, hypervisor_hostname="n2")
    c = env.add_host(c2, "h2")
    hm = env.manager()
    assert {hs.uuid for hs in hm.compute_nodes_by_host_or_node("h1", None)} == {a, b}
    assert [hs.uuid for hs in hm.compute_nodes_by_host_or_node("h1", "n2")] == [b]
    assert [hs.uuid for hs in hm.compute_nodes_by_host_or_node(None, "h2")] == [c]
    assert hm.compute_nodes_by_host_or_node("nope", None) == []
    assert {hs.uuid for hs in hm.host_states_for("h1")} == {a, b}


@pytest.mark.parametrize(
    "bad_url", ["sqlite:////nonexistent-dir/novasched/cell.db", "nosuchdriver://x/y"]
)
def test_a_failing_cell_is_skipped_with_a_warning_naming_it(env, caplog, bad_url):
    good = env.add_cell("good")
    env.add_host(good, "h1")
    bad = db.create_cell_mapping(env.api, name="broken", database_connection=bad_url)
    hm = env.manager()
    with caplog.at_level(logging.WARNING, logger="scheduler.hosts.manager"):
        states = hm.get_host_states_by_uuids(None, request_id="req-1")
    assert [hs.host for hs in states] == ["h1"]
    assert f"Error reading cell broken ({bad['uuid']})" in caplog.text
    assert "req-1" in caplog.text


def test_a_slow_cell_is_skipped_and_does_not_starve_the_others(env, monkeypatch, caplog):
    CONF.set_override("cell_timeout", 0.5, group="scheduler")
    CONF.set_override("cell_worker_thread_pool_size", 2)
    fast, slow = env.add_cell("fast"), env.add_cell("slow")
    env.add_host(fast, "h-fast")
    env.add_host(slow, "h-slow")
    slow_url = str(env.cells[slow].url)
    release = threading.Event()
    real = queries.get_compute_services
    calls = {"slow": 0}

    def services(engine, updated_since=None):
        if str(engine.url) == slow_url:
            calls["slow"] += 1
            release.wait(10)
        return real(engine, updated_since=updated_since)

    monkeypatch.setattr(queries, "get_compute_services", services)
    hm = env.manager()
    with caplog.at_level(logging.WARNING, logger="scheduler.hosts.manager"):
        for _ in range(3):
            # without joining the stuck read, its retries would fill the two-thread pool
            states = hm.get_host_states_by_uuids(None)
            assert [hs.host for hs in states] == ["h-fast"]
    assert "Timed out after 0.5 s waiting for cell slow" in caplog.text
    assert calls["slow"] == 1

    release.set()
    assert {hs.host for hs in hm.get_host_states_by_uuids(None)} == {"h-fast", "h-slow"}


# ----------------------------------------------------------------------------- instances


def test_instances_are_loaded_only_for_group_or_host_hints(env):
    c1 = env.add_cell("cell1")
    u = env.add_host(c1, "h1")
    env.add_host(c1, "h2")
    i1 = env.add_instance(c1, "h1")
    env.add_instance(c1, "h1", deleted=True)
    hm = env.manager()

    (hs,) = hm.get_host_states_by_uuids([u], request_spec())
    assert hs.instances == {}

    for spec in (
        request_spec(scheduler_hints={"same_host": [new_uuid()]}),
        request_spec(scheduler_hints={"different_host": [new_uuid()]}),
        request_spec(instance_group=InstanceGroup(uuid=new_uuid(), policy="anti-affinity")),
    ):
        hs.instances = {}
        states = states_by_host(hm.get_host_states_by_uuids(None, spec))
        assert set(states["h1"].instances) == {i1}
        assert states["h2"].instances == {}


# ---------------------------------------------------------------------------- aggregates


def test_aggregates_by_metadata_key_value_and_prefix(env):
    az1 = env.add_aggregate("a", ["h1"], {"availability_zone": "az1", "ssd": "true"})
    az2 = env.add_aggregate("b", ["h2"], {"availability_zone": "az2"})
    t1 = env.add_aggregate("c", ["h1"], {"filter_tenant_id": "p1", "filter_tenant_id2": "p2"})
    t2 = env.add_aggregate("d", [], {"filter_tenant_id_x": "p2"})
    hm = env.manager()

    def names(aggs):
        return sorted(a.name for a in aggs)

    assert names(hm.aggregates_by_metadata(key="availability_zone")) == ["a", "b"]
    assert names(hm.aggregates_by_metadata(key="availability_zone", value="az2")) == ["b"]
    assert names(hm.aggregates_by_metadata(value="p2")) == ["c", "d"]
    assert names(hm.aggregates_by_metadata(key_prefix="filter_tenant_id")) == ["c", "d"]
    assert names(hm.aggregates_by_metadata(key_prefix="filter_tenant_id", value="p1")) == ["c"]
    # key and value must hold for the same item
    assert hm.aggregates_by_metadata(key="ssd", value="az1") == []
    assert names(hm.aggregates_by_metadata()) == ["a", "b", "c", "d"]
    assert {a.uuid for a in hm.aggregates_for_host("h1")} == {az1.uuid, t1.uuid}
    assert hm.aggregates_for_host("nowhere") == []
    assert {a.uuid for a in hm.aggregates} == {az1.uuid, az2.uuid, t1.uuid, t2.uuid}


def test_update_and_delete_aggregate_apply_to_cached_host_states(env):
    c1 = env.add_cell("cell1")
    u1 = env.add_host(c1, "h1")
    u2 = env.add_host(c1, "h2")
    agg = env.add_aggregate("az", ["h1"], {"availability_zone": "az1"})
    CONF.set_override("aggregate_cache_ttl", -1, group="scheduler")
    hm = env.manager()
    states = {hs.uuid: hs for hs in hm.get_host_states_by_uuids(None)}
    assert states[u1].availability_zone == "az1" and states[u2].aggregates == []

    moved = Aggregate(
        id=agg.id, uuid=agg.uuid, name="az", hosts={"h2"}, metadata={"availability_zone": "z"}
    )
    hm.update_aggregates([moved])
    assert states[u1].aggregates == [] and states[u2].availability_zone == "z"
    assert hm.aggregates_by_metadata(key="availability_zone", value="z") == [moved]
    # the AZ filter of old configurations sees the move at once too
    from filters.availability_zone_filter import AvailabilityZoneFilter
    from tests.unit.filters.fakes import make_spec

    spec = make_spec()
    spec.availability_zone = "z"
    passed = run_filter(AvailabilityZoneFilter(), [states[u1], states[u2]], spec).passed
    assert passed == [states[u2]]

    new = Aggregate(id=999, uuid=new_uuid(), name="n", hosts={"h1", "h2"}, metadata={"a": "b"})
    hm.update_aggregates([new])
    assert {a.id for a in states[u2].aggregates} == {agg.id, 999}

    hm.delete_aggregate(moved)
    assert [a.id for a in states[u2].aggregates] == [999]
    assert [a.id for a in states[u1].aggregates] == [999]
    hm.delete_aggregate(Aggregate(id=12345, uuid=new_uuid(), name="never"))  # unknown: no error
    # later reads keep the RPC-given aggregates (ttl -1: the database is not re-read)
    (hs1,) = hm.get_host_states_by_uuids([u1])
    assert [a.id for a in hs1.aggregates] == [999]


def test_aggregate_cache_ttl(env):
    c1 = env.add_cell("cell1")
    u = env.add_host(c1, "h1")
    CONF.set_override("aggregate_cache_ttl", -1, group="scheduler")
    hm = env.manager()
    (hs,) = hm.get_host_states_by_uuids([u])
    env.add_aggregate("late", ["h1"], {"availability_zone": "az9"})

    # -1: never re-read
    hm._aggregate_cache._loaded_at -= 10**6
    assert hm.aggregates_by_metadata(key="availability_zone") == []
    assert hm.get_host_states_by_uuids([u])[0].aggregates == []

    # a TTL not yet expired: not re-read
    hm._aggregate_cache._loaded_at = time.monotonic()
    CONF.set_override("aggregate_cache_ttl", 3600, group="scheduler")
    assert hm.aggregates_by_metadata(key="availability_zone") == []

    # expired: re-read, and attached to the cached HostState though its row did not change
    hm._aggregate_cache._loaded_at -= 3600
    assert [a.name for a in hm.aggregates_by_metadata(key="availability_zone")] == ["late"]
    assert hs.availability_zone == "az9"

    # 0: re-read on every call
    CONF.set_override("aggregate_cache_ttl", 0, group="scheduler")
    env.add_aggregate("later", ["h1"], {"k": "v"})
    assert {a.name for a in hm.get_host_states_by_uuids([u])[0].aggregates} == {"late", "later"}

    # explicit refresh works whatever the TTL
    CONF.set_override("aggregate_cache_ttl", -1, group="scheduler")
    t = models.aggregate_hosts
    with env.api.begin() as conn:
        conn.execute(t.delete())
    hm.refresh_aggregates()
    assert hs.aggregates == []


def test_failed_aggregate_refresh_keeps_serving_the_cached_ones(env, monkeypatch, caplog):
    c1 = env.add_cell("cell1")
    u = env.add_host(c1, "h1")
    env.add_aggregate("az", ["h1"], {"availability_zone": "az1"})
    hm = env.manager()
    CONF.set_override("aggregate_cache_ttl", 0, group="scheduler")

    def broken(engine):
        raise sa.exc.OperationalError("select", {}, Exception("API database is down"))

    monkeypatch.setattr(db, "get_aggregates", broken)
    with caplog.at_level(logging.WARNING, logger="scheduler.hosts.manager"):
        (hs,) = hm.get_host_states_by_uuids([u])
    assert hs.availability_zone == "az1"
    assert "Could not refresh aggregates" in caplog.text


def test_missing_api_database_connection_is_a_configuration_error():
    from scheduler.exceptions import ConfigurationError

    with pytest.raises(ConfigurationError, match=r"\[api_database\] connection"):
        HostManager(conf=CONF)


def test_host_manager_with_a_built_fleet(env):
    from scheduler.demo import fleet

    c1, c2 = env.add_cell("cell1"), env.add_cell("cell2")
    spec = fleet.FleetSpec(hosts=30, cells=[c1, c2], seed=3, now=BASE)
    built = fleet.build_fleet(spec)
    fleet.load_fleet(built, env.api, env.cells, None)
    hm = env.manager()
    states = hm.get_host_states_by_uuids(None)
    assert len(states) == 30
    by_host = states_by_host(states)
    for cell, rows in built.compute_nodes.items():
        for row in rows:
            hs = by_host[row["host"]]
            assert (hs.uuid, hs.cell_uuid) == (row["uuid"], cell)
            assert hs.free_disk_mb == row["disk_available_least"] * 1024
            assert hs.service["disabled"] == (row["host"] in built.disabled_hosts)
            assert hs.availability_zone in spec.azs


def test_concurrent_requests_while_the_cell_changes(env):
    c1 = env.add_cell("cell1")
    uuids = [env.add_host(c1, f"h{i}") for i in range(30)]
    hm = env.manager()
    hm.get_host_states_by_uuids(None)
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader():
        try:
            while not stop.is_set():
                states = hm.get_host_states_by_uuids(uuids)
                assert len(states) == 30
                hm.update_aggregates([Aggregate(id=1, uuid="a", name="a", hosts={"h1"})])
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    for i in range(20):
        env.update_node(c1, uuids[i % 30], free_ram_mb=i)
        env.update_service(c1, f"h{(i * 7) % 30}", last_seen_up=utcnow())
    stop.set()
    for t in threads:
        t.join(10)
    assert errors == []
    states = {hs.uuid: hs for hs in hm.get_host_states_by_uuids(uuids)}
    assert [states[uuids[i]].free_ram_mb for i in range(20)] == list(range(20))


def test_minimum_compute_version_comes_from_the_service_rows(env):
    c1 = env.add_cell("cell1")
    env.add_host(c1, "h1", service={"version": 74})
    env.add_host(c1, "h2", service={"version": 72})
    hm = env.manager()
    assert hm.minimum_compute_version() == 72  # read on demand before any request
    env.update_service(c1, "h2", version=74)
    hm.get_host_states_by_uuids(None)
    assert hm.minimum_compute_version() == 74


def test_tracked_hosts_skip_the_database_and_untracked_ones_read_it(env):
    c1 = env.add_cell("cell1")
    env.add_host(c1, "h1")
    env.add_host(c1, "h2")
    i1 = env.add_instance(c1, "h1")
    i2 = env.add_instance(c1, "h2")
    hm = env.manager()
    spec = request_spec(instance_group=InstanceGroup(uuid=new_uuid(), policy="anti-affinity"))
    hm.get_host_states_by_uuids(None, spec)  # the cells are read: the loader can find h1

    # h1's compute says it has two instances the DB does not show yet: trusted
    hm.instance_tracker.update_instance_info("h1", ["x", "y"])
    states = states_by_host(hm.get_host_states_by_uuids(None, spec))
    assert set(states["h1"].instances) == {"x", "y"}
    assert set(states["h2"].instances) == {i2}

    # a sync that disagrees: re-read from the DB, no longer trusted
    hm.instance_tracker.sync_instance_info("h1", ["x"])
    assert hm.instance_tracker.tracked_hosts() == {"h1": False}
    states = states_by_host(hm.get_host_states_by_uuids(None, spec))
    assert set(states["h1"].instances) == {i1}
    # the next sync that matches the DB makes it trusted again
    assert hm.instance_tracker.sync_instance_info("h1", [i1]) is True
    assert hm.instance_tracker.instances_for("h1") == {i1: None}


# ---------------------------------------------------------------- reads at cloud scale


def test_requests_read_node_reports_at_once_and_services_at_the_window_interval(env):
    c1 = env.add_cell("cell1")
    recent = utcnow() - datetime.timedelta(seconds=5)
    u1 = env.add_host(c1, "h1", service={"last_seen_up": recent})
    u2 = env.add_host(c1, "h2")  # its last heartbeat an hour ago: down
    hm = env.manager(window_read_interval=3600.0)
    assert len(hm.get_host_states_by_uuids([u1, u2])) == 2
    beat = utcnow()
    env.update_service(c1, "h1", last_seen_up=beat)
    env.update_service(c1, "h2", last_seen_up=beat)
    env.update_node(c1, u2, free_ram_mb=77)
    now = utcnow()
    u3 = env.add_host(c1, "h3", service={"created_at": now, "last_seen_up": now}, created_at=now)
    states = states_by_host(hm.get_host_states_by_uuids([u1, u2, u3]))
    # the usage report is applied now, and so is the heartbeat of a service that was down
    # (nova would find it up); an up service's next heartbeat and a node that has not
    # reported wait for a window read
    assert states["h2"].free_ram_mb == 77
    assert states["h2"].service["last_seen_up"] == beat
    assert states["h1"].service["last_seen_up"] == recent
    assert set(states) == {"h1", "h2"}
    # asking for every host reads the whole window
    states = states_by_host(hm.get_host_states_by_uuids(None))
    assert states["h1"].service["last_seen_up"] == beat
    assert set(states) == {"h1", "h2", "h3"}
    hm.window_read_interval = 0.0
    env.update_service(c1, "h2", disabled=True, disabled_reason="maintenance")
    states = states_by_host(hm.get_host_states_by_uuids([u1, u2, u3]))
    assert states["h2"].service["disabled"] is True


def test_a_heartbeat_updates_the_cached_service_in_place_and_a_disable_replaces_it(env):
    c1 = env.add_cell("cell1")
    u = env.add_host(c1, "h1")
    hm = env.manager()
    (hs,) = hm.get_host_states_by_uuids([u])
    before = hs.service
    beat = utcnow()
    env.update_service(c1, "h1", last_seen_up=beat, report_count=2)
    (hs,) = hm.get_host_states_by_uuids([u])
    assert hs.service is before
    assert (hs.service["last_seen_up"], hs.service["report_count"]) == (beat, 2)
    env.update_service(c1, "h1", disabled=True, disabled_reason="x")
    (hs,) = hm.get_host_states_by_uuids([u])
    assert hs.service is not before
    assert (hs.service["disabled"], hs.service["disabled_reason"]) == (True, "x")
    assert before["disabled"] is False  # a request still holding the old dict sees no change


def test_hosts_reporting_the_same_json_share_the_decoded_values(env):
    c1 = env.add_cell("cell1")
    ua = env.add_host(c1, "ha")
    ub = env.add_host(c1, "hb", stats='{"num_instances": "3", "io_workload": "0"}')
    hm = env.manager()
    a, b = (states_by_host(hm.get_host_states_by_uuids([ua, ub]))[h] for h in ("ha", "hb"))
    assert a.cpu_info == b.cpu_info and a.cpu_info is b.cpu_info
    assert a.supported_instances == [["x86_64", "kvm", "hvm"]]
    assert a.supported_instances is b.supported_instances
    assert a.stats is not b.stats
    assert (a.num_io_ops, b.num_io_ops) == (1, 0)
    key_a = next(k for k in a.stats if k == "num_instances")
    key_b = next(k for k in b.stats if k == "num_instances")
    assert key_a is key_b


def test_duplicate_candidate_uuids_give_one_host_state_each(env):
    c1 = env.add_cell("cell1")
    u1 = env.add_host(c1, "h1")
    u2 = env.add_host(c1, "h2")
    hm = env.manager()
    states = hm.get_host_states_by_uuids([u2, u1, u2, "not-a-node"])
    assert [hs.host for hs in states] == ["h2", "h1"]


def test_host_locks_are_lockutils_named_semaphores_made_on_first_use(env):
    from oslo_concurrency import lockutils

    c1 = env.add_cell("cell1")
    u = env.add_host(c1, "h1")
    hm = env.manager()
    (hs,) = hm.get_host_states_by_uuids([u])
    assert hs._lock_obj is None  # built unpublished: no lock needed, none made
    hs.consume_from_request(request_spec())
    assert hs._lock_obj is lockutils.internal_lock(f"{hs.host}-{hs.nodename}")


def test_instance_details_carry_flavor_and_image_properties_when_asked(env):
    from db import models

    c1 = env.add_cell("cell1")
    u = env.add_host(c1, "h1")
    inst = env.add_instance(c1, "h1")
    with env.cells[c1].begin() as conn:
        conn.execute(
            models.instances.update()
            .where(models.instances.c.uuid == inst)
            .values(instance_type_id=7)
        )
        conn.execute(
            models.instance_system_metadata.insert(),
            [
                {
                    "instance_uuid": inst,
                    "key": "image_hw_architecture",
                    "value": "aarch64",
                    "deleted": 0,
                },
                {"instance_uuid": inst, "key": "image_os_distro", "value": "ubuntu", "deleted": 0},
                {"instance_uuid": inst, "key": "imagexhw_bogus", "value": "x", "deleted": 0},
                {"instance_uuid": inst, "key": "owner_user_name", "value": "bob", "deleted": 0},
            ],
        )
    hm = env.manager()
    # plain requests without a group load nothing
    (hs,) = hm.get_host_states_by_uuids([u], request_spec())
    assert hs.instances == {}
    hm.instance_details = True
    (hs,) = hm.get_host_states_by_uuids([u], request_spec())
    assert hs.instances == {
        inst: {
            "instance_type_id": 7,
            "image_properties": {"hw_architecture": "aarch64", "os_distro": "ubuntu"},
        }
    }


# ---------------------------------------------------------------- start-up and the refresher


def _until(predicate, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_warm_up_loads_every_cell_before_any_request(env, caplog):
    c1, c2 = env.add_cell("cell1"), env.add_cell("cell2")
    env.add_host(c1, "h1")
    env.add_host(c2, "h2")
    hm = env.manager(window_read_interval=3600.0)
    with caplog.at_level(logging.INFO, logger="scheduler.hosts.manager"):
        assert hm.warm_up() == 2
    assert "Loaded 2 host(s) from 2 cell(s)" in caplog.text
    assert {hs.host for hs in hm.host_states_for("h1") + hm.host_states_for("h2")} == {"h1", "h2"}


def test_the_refresher_applies_service_changes_without_a_request(env):
    cell = env.add_cell("cell1")
    u1 = env.add_host(cell, "h1")
    hm = env.manager(window_read_interval=0.05)
    hm.warm_up()
    (hs,) = hm.host_states_for("h1")
    assert not hs.service["disabled"]
    hm.start_refresher()
    env.update_service(cell, "h1", disabled=True, disabled_reason="maintenance")
    assert _until(lambda: hs.service.get("disabled") is True)
    # and its columns with it: the filters over columns see the change too
    state, _ = hm.table.services(hm.table.rows_of([hs]))
    assert state.tolist() == [host_table.SERVICE_DISABLED]
    assert [h.uuid for h in hm.get_host_states_by_uuids([u1])] == [u1]
    refresher = hm._refresher.thread
    hm.stop()
    assert hm._refresher.thread is None and not refresher.is_alive()


def test_a_request_does_not_wait_for_a_read_in_progress(env):
    cell = env.add_cell("cell1")
    u1 = env.add_host(cell, "h1")
    hm = env.manager(window_read_interval=3600.0)
    hm.warm_up()
    view = hm._cell_reads.views[cell]
    with view.lock:  # the refresher (say) is reading the cell
        started = time.monotonic()
        hosts = hm.get_host_states_by_uuids([u1])
        assert time.monotonic() - started < 1.0
    assert [h.uuid for h in hosts] == [u1]  # the cell as it was


_EVENTLET_REFRESHER = r"""
import eventlet

eventlet.monkey_patch()  # as novasched-scheduler does with concurrency_backend = eventlet

import pathlib, sys, time

from scheduler.conf import CONF
from tests.unit.scheduler.hosts.env import Env

CONF([], project="nova", default_config_files=[], default_config_dirs=[])
env = Env(pathlib.Path(sys.argv[1]))
cell = env.add_cell("cell1")
env.add_host(cell, "h1")
hm = env.manager(window_read_interval=0.05)
assert hm.warm_up() == 1
hm.start_refresher()
(hs,) = hm.host_states_for("h1")
env.update_service(cell, "h1", disabled=True)
deadline = time.monotonic() + 10
while not hs.service.get("disabled") and time.monotonic() < deadline:
    eventlet.sleep(0.02)
hm.stop()
print("disabled" if hs.service.get("disabled") else "not applied")
"""


def test_the_refresher_runs_as_a_green_thread_under_eventlet(tmp_path):
    # a child process: eventlet's monkey patching is for a whole process
    result = subprocess.run(
        [sys.executable, "-c", _EVENTLET_REFRESHER, str(tmp_path)],
        cwd=str(Path(__file__).resolve().parents[4]),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split()[-1] == "disabled"


# ------------------------------------------------------------- logging of failing cells


def _records(caplog, level: int) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "scheduler.hosts.manager" and r.levelno == level
    ]


def test_a_dead_cell_is_logged_once_when_it_fails_and_once_when_it_recovers(
    env, monkeypatch, caplog
):
    good, dead = env.add_cell("good"), env.add_cell("dead")
    env.add_host(good, "h-good")
    env.add_host(dead, "h-dead")
    state = break_cell(monkeypatch, env, dead)
    hm = env.manager()
    with caplog.at_level(logging.DEBUG, logger="scheduler.hosts.manager"):
        for i in range(50):
            states = hm.get_host_states_by_uuids(None, request_id=f"req-{i}")
            assert [hs.host for hs in states] == ["h-good"]
    (warning,) = _records(caplog, logging.WARNING)
    assert f"Error reading cell dead ({dead})" in warning
    assert "Lost connection" in warning and "req-0" in warning
    assert _records(caplog, logging.INFO) == []
    # every request still says, at DEBUG, that it went without the cell
    debug = _records(caplog, logging.DEBUG)
    assert any("dead" in line and "req-49" in line for line in debug)

    caplog.clear()
    state["broken"] = False
    with caplog.at_level(logging.INFO, logger="scheduler.hosts.manager"):
        states = hm.get_host_states_by_uuids(None, request_id="req-back")
        assert {hs.host for hs in states} == {"h-good", "h-dead"}
        hm.get_host_states_by_uuids(None, request_id="req-after")
    assert _records(caplog, logging.WARNING) == []
    (info,) = _records(caplog, logging.INFO)
    assert info.startswith(f"Cell dead ({dead}) answers again after ")
    assert "50 failed read(s)" in info


def test_a_failing_cell_gets_one_reminder_per_interval(env, monkeypatch, caplog):
    dead = env.add_cell("dead")
    env.add_host(dead, "h-dead")
    break_cell(monkeypatch, env, dead)
    hm = env.manager()
    hm.cell_failure_log_interval = 0.3
    with caplog.at_level(logging.WARNING, logger="scheduler.hosts.manager"):
        for _ in range(5):
            hm.get_host_states_by_uuids(None, request_id="req-a")
        time.sleep(0.35)
        for _ in range(5):
            hm.get_host_states_by_uuids(None, request_id="req-b")
    first, reminder = _records(caplog, logging.WARNING)
    assert f"Error reading cell dead ({dead})" in first
    assert reminder.startswith(f"Cell dead ({dead}) has been failing for ")
    assert "6 failed read(s)" in reminder and "Lost connection" in reminder
    assert "req-b" in reminder


def test_a_stuck_read_no_request_waits_for_is_logged_once_and_its_recovery(
    env, monkeypatch, caplog
):
    CONF.set_override("cell_timeout", 0.3, group="scheduler")
    cell = env.add_cell("locked")
    u1 = env.add_host(cell, "h1")
    hm = env.manager(window_read_interval=0.05)
    hm.warm_up()
    url = str(env.cells[cell].url)
    release = threading.Event()
    blocked = threading.Event()
    real = queries.get_compute_services

    def services(engine, updated_since=None):
        if str(engine.url) == url and not release.is_set():
            blocked.set()
            release.wait(10)  # the refresher's read, on a write-locked table
        return real(engine, updated_since=updated_since)

    monkeypatch.setattr(queries, "get_compute_services", services)
    with caplog.at_level(logging.INFO, logger="scheduler.hosts.manager"):
        hm.start_refresher()
        assert blocked.wait(5)
        deadline = time.monotonic() + 0.8
        while time.monotonic() < deadline:
            started = time.monotonic()
            hosts = hm.get_host_states_by_uuids([u1], request_id="req-x")
            assert time.monotonic() - started < 0.25  # served from the cache, no waiting
            assert [h.uuid for h in hosts] == [u1]
            time.sleep(0.02)
        (warning,) = _records(caplog, logging.WARNING)
        assert f"Cell locked ({cell}) did not answer within cell_timeout (0.3 s)" in warning
        assert "req-x" in warning
        assert _records(caplog, logging.INFO) == []
        release.set()
        assert _until(lambda: _records(caplog, logging.INFO))
    assert len(_records(caplog, logging.WARNING)) == 1
    (info,) = _records(caplog, logging.INFO)
    assert info.startswith(f"Cell locked ({cell}) answers again after ")


def test_a_slow_cell_waited_for_by_many_requests_is_logged_once(env, monkeypatch, caplog):
    CONF.set_override("cell_timeout", 0.2, group="scheduler")
    slow = env.add_cell("slow")
    env.add_host(slow, "h-slow")
    slow_url = str(env.cells[slow].url)
    release = threading.Event()
    real = queries.get_compute_services

    def services(engine, updated_since=None):
        if str(engine.url) == slow_url:
            release.wait(10)
        return real(engine, updated_since=updated_since)

    monkeypatch.setattr(queries, "get_compute_services", services)
    hm = env.manager()
    with caplog.at_level(logging.INFO, logger="scheduler.hosts.manager"):
        for i in range(4):
            assert hm.get_host_states_by_uuids(None, request_id=f"req-{i}") == []
        release.set()
        assert [hs.host for hs in hm.get_host_states_by_uuids(None)] == ["h-slow"]
        # the late read is still a failure; the next read, in time, is the recovery
        assert [hs.host for hs in hm.get_host_states_by_uuids(None)] == ["h-slow"]
    (warning,) = _records(caplog, logging.WARNING)
    assert f"Timed out after 0.2 s waiting for cell slow ({slow})" in warning
    assert "req-0" in warning
    (info,) = _records(caplog, logging.INFO)
    assert info.startswith(f"Cell slow ({slow}) answers again after ")


def test_a_cell_whose_last_read_failed_is_skipped_while_another_read_runs(env, monkeypatch):
    # a dead database: the last read raised; the refresher is trying again (and hangs on a
    # connect): requests skip the cell instead of serving its hosts as last read
    cell = env.add_cell("dead")
    u1 = env.add_host(cell, "h1")
    hm = env.manager(window_read_interval=0.05)
    hm.warm_up()
    url = str(env.cells[cell].url)
    state = {"mode": "fail"}
    blocked = threading.Event()
    release = threading.Event()
    real = queries.get_compute_services

    def services(engine, updated_since=None):
        if str(engine.url) == url:
            if state["mode"] == "fail":
                raise RuntimeError("Lost connection to MySQL server during query")
            if state["mode"] == "hang":
                blocked.set()
                release.wait(10)
        return real(engine, updated_since=updated_since)

    def failing(name):
        real_read = getattr(queries, name)

        def read(engine, *args, **kwargs):
            if str(engine.url) == url and state["mode"] == "fail":
                raise RuntimeError("Lost connection to MySQL server during query")
            return real_read(engine, *args, **kwargs)

        return read

    monkeypatch.setattr(queries, "get_compute_services", services)
    for name in ("get_compute_node_reports", "get_compute_nodes"):
        monkeypatch.setattr(queries, name, failing(name))
    # a request's own read fails: the cell is skipped
    assert hm.get_host_states_by_uuids([u1], request_id="req-1") == []
    # the next read (the refresher's) hangs; a request meanwhile does not serve the cell
    state["mode"] = "hang"
    hm.start_refresher()
    try:
        assert blocked.wait(5)
        assert hm.get_host_states_by_uuids([u1], request_id="req-2") == []
    finally:
        release.set()
    # once a read succeeds the cell is served again
    state["mode"] = "ok"
    assert _until(lambda: [h.uuid for h in hm.get_host_states_by_uuids([u1])] == [u1])
    hm.stop()
