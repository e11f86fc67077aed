"""The synthetic fleet: deterministic content, and loading it into SQLite databases."""

from __future__ import annotations

import datetime
import json

import pytest
import sqlalchemy as sa

import db
from db import models
from scheduler.demo.fleet import (
    FleetConflict,
    FleetSpec,
    build_fleet,
    load_fleet,
)

NOW = datetime.datetime(2026, 5, 1, 12, 0, 0)


class FakePlacement:
    """Records what load_fleet asks of the Placement client."""

    def __init__(self):
        self.traits: list[str] = []
        self.providers: list[dict] = []
        self.claims: list[tuple] = []

    def ensure_traits(self, names):
        self.traits.extend(names)

    def create_providers_bulk(self, specs, workers=8):
        self.providers.extend(specs)
        return [3] * len(specs)

    def claim_resources(self, consumer_uuid, alloc_request, project_id, user_id, **kw):
        self.claims.append((consumer_uuid, alloc_request, project_id, user_id))


def _spec(**kw) -> FleetSpec:
    kw.setdefault("now", NOW)
    return FleetSpec(**kw)


def test_same_seed_same_fleet_other_seed_other_fleet():
    a = build_fleet(_spec(hosts=40, cells=["c1", "c2"], seed=7))
    b = build_fleet(_spec(hosts=40, cells=["c1", "c2"], seed=7))
    c = build_fleet(_spec(hosts=40, cells=["c1", "c2"], seed=8))
    assert a == b
    assert a.providers != c.providers


def test_capacities_ratios_and_placement_inventories_are_in_range():
    fleet = build_fleet(_spec(hosts=200, seed=1))
    nodes = fleet.compute_nodes["cell1"]
    assert len(nodes) == 200
    assert {n["cpu_allocation_ratio"] for n in nodes} == {1.0, 4.0, 16.0}
    assert all(16 <= n["vcpus"] <= 96 for n in nodes)
    assert all(64 * 1024 <= n["memory_mb"] <= 512 * 1024 for n in nodes)
    assert all(1000 <= n["local_gb"] <= 8000 for n in nodes)
    by_uuid = {p["uuid"]: p for p in fleet.providers}
    for n in nodes:
        # as nova: node name = host name, compute node uuid = provider uuid
        assert n["hypervisor_hostname"] == n["host"]
        prov = by_uuid[n["uuid"]]
        assert prov["name"] == n["host"]
        inv = prov["inventories"]
        assert inv["VCPU"]["total"] == inv["VCPU"]["max_unit"] == n["vcpus"]
        assert inv["VCPU"]["allocation_ratio"] == n["cpu_allocation_ratio"]
        assert inv["MEMORY_MB"]["total"] == n["memory_mb"]
        assert inv["DISK_GB"]["total"] == inv["DISK_GB"]["max_unit"] == n["local_gb"]
        assert n["free_ram_mb"] == n["memory_mb"] - n["memory_mb_used"]
        assert n["free_disk_gb"] == n["local_gb"] - n["local_gb_used"]
        assert n["hypervisor_type"] == "QEMU"
        stats = json.loads(n["stats"])
        assert {"num_instances", "io_workload", "storage"} <= set(stats)
        arch = json.loads(n["cpu_info"])["arch"]
        assert json.loads(n["supported_instances"]) == [[arch, "kvm", "hvm"]]
    assert {json.loads(n["cpu_info"])["arch"] for n in nodes} == {"x86_64", "aarch64"}


def test_disabled_hosts_carry_the_status_trait_and_down_hosts_are_stale():
    fleet = build_fleet(_spec(hosts=100, seed=3, disabled_fraction=0.1, down_fraction=0.1))
    assert len(fleet.disabled_hosts) == 10 and len(fleet.down_hosts) == 10
    svcs = {s["host"]: s for s in fleet.services["cell1"]}
    for prov in fleet.providers:
        disabled = prov["name"] in fleet.disabled_hosts
        assert ("COMPUTE_STATUS_DISABLED" in prov["traits"]) is disabled
        assert svcs[prov["name"]]["disabled"] is disabled
    for host, svc in svcs.items():
        stale = NOW - svc["last_seen_up"] > datetime.timedelta(minutes=5)
        assert stale is (host in fleet.down_hosts)
        assert (svc["report_count"] == 0) is (host in fleet.down_hosts)


def test_aggregates_cover_azs_and_a_multiplier_aggregate():
    fleet = build_fleet(_spec(hosts=30, seed=2, azs=["az1", "az2"], multiplier_fraction=0.2))
    by_name = {a.name: a for a in fleet.aggregates}
    assert set(by_name) == {"az1", "az2", "stacking"}
    assert by_name["az1"].metadata == {"availability_zone": "az1"}
    assert sorted(by_name["az1"].hosts + by_name["az2"].hosts) == sorted(fleet.hosts)
    assert by_name["stacking"].metadata == {"ram_weight_multiplier": "-1.0"}
    assert len(by_name["stacking"].hosts) == 6
    prov = {p["name"]: p for p in fleet.providers}
    for agg in fleet.aggregates:
        for h in agg.hosts:
            assert agg.uuid in prov[h]["aggregates"]


def test_hosts_are_spread_over_cells_and_instances_fit():
    fleet = build_fleet(_spec(hosts=9, cells=["a", "b", "c"], seed=5, max_instances_per_host=6))
    assert {c: len(v) for c, v in fleet.compute_nodes.items()} == {"a": 3, "b": 3, "c": 3}
    for cell, nodes in fleet.compute_nodes.items():
        for n in nodes:
            assert fleet.host_cells[n["host"]] == cell
            live = [
                i for i in fleet.instances[cell] if i["host"] == n["host"] and not i["deleted_at"]
            ]
            assert n["vcpus_used"] == sum(i["vcpus"] for i in live)
            assert n["running_vms"] == len(live)
    live_uuids = {i["uuid"] for v in fleet.instances.values() for i in v if not i["deleted_at"]}
    assert {a["consumer_uuid"] for a in fleet.allocations} == live_uuids


@pytest.mark.parametrize("bad", [{"hosts": 0}, {"cells": []}, {"down_fraction": 1.5}])
def test_invalid_spec_is_refused(bad):
    with pytest.raises(ValueError):
        build_fleet(_spec(**bad))


@pytest.fixture
def dbs(tmp_path):
    api = db.get_engine(f"sqlite:///{tmp_path}/api.db")
    db.create_schema(api, "api")
    cells = {}
    for name in ("cell1", "cell2"):
        c = db.create_cell_mapping(
            api, name=name, database_connection=f"sqlite:///{tmp_path}/{name}.db"
        )
        cells[c["uuid"]] = db.get_engine(c["database_connection"])
        db.create_schema(cells[c["uuid"]], "cell")
    yield api, cells
    db.dispose_engines()


def test_load_fleet_writes_databases_and_placement(dbs):
    api, cells = dbs
    fleet = build_fleet(_spec(hosts=20, cells=list(cells), seed=4, max_instances_per_host=3))
    placement = FakePlacement()
    load_fleet(fleet, api, cells, placement)

    assert db.get_host_mappings(api) == fleet.host_cells
    aggs = {a["name"]: a for a in db.get_aggregates(api)}
    assert {n: a["hosts"] for n, a in aggs.items()} == {
        a.name: set(a.hosts) for a in fleet.aggregates
    }
    for cell_uuid, engine in cells.items():
        nodes = db.get_compute_nodes(engine)
        services = {s.host: s for s in db.get_compute_services(engine)}
        assert sorted(n.uuid for n in nodes) == sorted(
            n["uuid"] for n in fleet.compute_nodes[cell_uuid]
        )
        with engine.connect() as conn:
            service_ids = dict(
                conn.execute(
                    sa.select(models.compute_nodes.c.host, models.compute_nodes.c.service_id)
                ).all()
            )
        for n in nodes:
            assert services[n.host].id == service_ids[n.host]
        live = {i["uuid"] for i in fleet.instances[cell_uuid] if not i["deleted_at"]}
        seen = set().union(*db.get_instance_uuids_by_host(engine).values()) if live else set()
        assert seen == live
        with engine.connect() as conn:
            deleted = conn.execute(
                sa.select(models.instances.c.id, models.instances.c.deleted).where(
                    models.instances.c.deleted != 0
                )
            ).all()
        assert all(row.id == row.deleted for row in deleted)

    assert placement.traits == ["CUSTOM_SSD"]
    assert [p["uuid"] for p in placement.providers] == [p["uuid"] for p in fleet.providers]
    assert len(placement.claims) == len(fleet.allocations)
    consumer, body, project, _user = placement.claims[0]
    alloc = fleet.allocations[0]
    assert consumer == alloc["consumer_uuid"] and project == fleet.spec.project_id
    assert body == {"allocations": {alloc["rp_uuid"]: {"resources": alloc["resources"]}}}


def test_second_fleet_reuses_aggregates_by_name_and_refuses_existing_hosts(dbs):
    api, cells = dbs
    first = build_fleet(_spec(hosts=6, cells=list(cells), seed=1))
    load_fleet(first, api, cells, None)
    second = build_fleet(_spec(hosts=4, cells=list(cells), seed=2, host_prefix="edge"))
    placement = FakePlacement()
    load_fleet(second, api, cells, placement)
    aggs = {a["name"]: a for a in db.get_aggregates(api)}
    assert len(aggs["az1"]["hosts"]) == 2 + 2  # 6 hosts over 3 AZs, then 4 over 3
    # the providers point at the aggregate uuid already in the API database
    az1 = aggs["az1"]["uuid"]
    edge_az1 = [p for p in placement.providers if p["name"] in aggs["az1"]["hosts"]]
    assert edge_az1 and all(az1 in p["aggregates"] for p in edge_az1)
    with pytest.raises(FleetConflict, match="already exist"):
        load_fleet(first, api, cells, None)


def test_a_choice_left_at_its_default_draws_nothing():
    # the fields the benchmarks use change nothing for a spec that does not set them
    plain = build_fleet(_spec(hosts=40, cells=["c1"], seed=9))
    same = build_fleet(
        _spec(
            hosts=40,
            cells=["c1"],
            seed=9,
            gpu_fraction=0.0,
            ram_ratios=(1.0,),
            disk_ratios=(1.0,),
            more_multiplier_aggregates=(),
            max_server_groups=0,
        )
    )
    assert same == plain
    assert plain.server_groups == [] and "gpu" not in json.loads(
        plain.compute_nodes["c1"][0]["stats"]
    )


def test_the_benchmarks_mix_is_drawn_as_the_spec_says():
    fleet = build_fleet(
        _spec(
            hosts=200,
            seed=2,
            gpu_fraction=0.1,
            ram_ratios=(1.0, 1.5),
            disk_ratios=(1.0, 2.0),
            more_multiplier_aggregates=(("cpu-heavy", 0.1, {"cpu_weight_multiplier": "2.0"}),),
            nearly_full_fraction=0.2,
            max_server_groups=4,
            heartbeat_spread=10.0,
            quiet_for=datetime.timedelta(minutes=10),
        )
    )
    nodes = fleet.compute_nodes["cell1"]
    stats = [json.loads(n["stats"]) for n in nodes]
    assert sum(s["gpu"] == "a100" for s in stats) == 20
    assert {n["ram_allocation_ratio"] for n in nodes} == {1.0, 1.5}
    by_uuid = {p["uuid"]: p["inventories"] for p in fleet.providers}
    for n in nodes:
        inv = by_uuid[n["uuid"]]
        assert inv["MEMORY_MB"]["allocation_ratio"] == n["ram_allocation_ratio"]
        assert inv["DISK_GB"]["allocation_ratio"] == n["disk_allocation_ratio"]
        assert n["updated_at"] == NOW - datetime.timedelta(minutes=10)
    assert len({a.name: a for a in fleet.aggregates}["cpu-heavy"].hosts) == 20
    # nearly full: the node reports more use than its instances hold
    assert sum(n["memory_mb_used"] > 0.55 * n["memory_mb"] for n in nodes) >= 20
    assert len(fleet.server_groups) == 4
    live = {i["uuid"]: i["host"] for i in fleet.instances["cell1"] if i["deleted_at"] is None}
    for group in fleet.server_groups:
        assert 2 <= len(group.hosts) <= 8
        assert [live[m] for m in group.members] == group.hosts
    beats = [s["last_seen_up"] for s in fleet.services["cell1"] if s["report_count"]]
    assert all(NOW - datetime.timedelta(seconds=10) <= b <= NOW for b in beats)
    assert len(set(beats)) > 1


def test_load_fleet_writes_the_server_groups(dbs):
    api, cells = dbs
    fleet = build_fleet(_spec(hosts=40, cells=list(cells), seed=3, max_server_groups=2))
    load_fleet(fleet, api, cells, None)
    with api.connect() as conn:
        groups = dict(
            conn.execute(
                sa.select(
                    models.instance_groups.c.uuid, models.instance_group_policy.c.policy
                ).join(models.instance_group_policy)
            ).all()
        )
        members = set(
            conn.execute(sa.select(models.instance_group_member.c.instance_uuid)).scalars()
        )
    assert groups == {g.uuid: g.policy for g in fleet.server_groups}
    assert members == {m for g in fleet.server_groups for m in g.members}


def test_numa_hosts_report_a_topology_the_scheduler_reads_and_change_no_other_draw():
    from scheduler.resources import numa

    plain = build_fleet(_spec(hosts=40, cells=["c1"], seed=9))
    with_numa = build_fleet(_spec(hosts=40, cells=["c1"], seed=9, numa_fraction=0.25))
    assert len(with_numa.numa_hosts) == 10 and plain.numa_hosts == set()
    for before, after in zip(plain.compute_nodes["c1"], with_numa.compute_nodes["c1"], strict=True):
        assert {**after, "numa_topology": None} == before
        if after["host"] not in with_numa.numa_hosts:
            assert after["numa_topology"] is None
            continue
        topology = numa.host_topology_from_primitive(json.loads(after["numa_topology"]))
        assert [c.memory for c in topology.cells] == [after["memory_mb"] // 2] * 2
        assert sum(len(c.cpuset) for c in topology.cells) == after["vcpus"]
