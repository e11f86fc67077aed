"""nova's schema and the read functions on the real MariaDB and PostgreSQL servers."""

from __future__ import annotations

import datetime
import uuid

import sqlalchemy as sa

import db
from db import models
from placement_client.api import PlacementClient
from scheduler.cmd import manage
from scheduler.demo.fleet import FleetSpec, build_fleet, load_fleet
from tests.functional.fixtures_db import make_database, server_db, server_kind  # noqa: F401
from tests.functional.fixtures_placement import placement_service  # noqa: F401

API_TABLES = {
    "cell_mappings",
    "host_mappings",
    "aggregates",
    "aggregate_hosts",
    "aggregate_metadata",
    "instance_groups",
    "instance_group_policy",
    "instance_group_member",
}
CELL_TABLES = {
    "compute_nodes",
    "services",
    "instances",
    "instance_extra",
    "instance_system_metadata",
}


def test_manage_db_sync_creates_novas_tables(server_kind, tmp_path, capsys):  # noqa: F811
    with make_database(server_kind) as api_url, make_database(server_kind) as cell_url:
        conf = tmp_path / "nova.conf"
        conf.write_text(f"[api_database]\nconnection = {api_url}\n")
        cfg = ["--config-file", str(conf)]
        assert manage.main([*cfg, "db", "sync", "--api-only"]) == 0
        with make_database(server_kind) as cell0_url:
            rc = manage.main(
                [
                    *cfg,
                    "cell",
                    "create",
                    "--name",
                    "cell1",
                    "--database-connection",
                    cell_url,
                    "--cell0-database-connection",
                    cell0_url,
                ]
            )
            assert rc == 0, capsys.readouterr().err
            assert manage.main([*cfg, "db", "sync"]) == 0
            assert manage.main([*cfg, "db", "sync"]) == 0  # idempotent
            api = db.get_engine(api_url)
            assert API_TABLES <= set(sa.inspect(api).get_table_names())
            for url in (cell_url, cell0_url):
                assert CELL_TABLES <= set(sa.inspect(db.get_engine(url)).get_table_names())
            cols = {
                c["name"]: c
                for c in sa.inspect(db.get_engine(cell_url)).get_columns("compute_nodes")
            }
            type_name = type(cols["host_ip"]["type"]).__name__.upper()
            if server_kind == "postgresql":
                assert type_name == "INET"  # nova's IPAddress type on PostgreSQL
            else:
                assert "MEDIUMTEXT" in type(cols["cpu_info"]["type"]).__name__.upper()
            assert manage.main([*cfg, "fleet", "load", "--hosts", "6", "--no-placement"]) == 0
            assert manage.main([*cfg, "host", "list"]) == 0
            out = capsys.readouterr().out
            assert "6 hosts" in out and "compute-0006" in out
        db.dispose_engines()


NOW = datetime.datetime(2026, 5, 1, 12, 0, 0)


def test_reads_return_what_was_written(server_db):  # noqa: F811
    engine = db.get_engine(server_db)
    db.create_schema(engine, "api")
    db.create_schema(engine, "cell")  # one database can hold both, as in tests
    cell = db.create_cell_mapping(engine, name="cell1", database_connection=server_db)
    fleet = build_fleet(
        FleetSpec(hosts=15, cells=[cell["uuid"]], seed=11, now=NOW, disabled_fraction=0.2)
    )
    load_fleet(fleet, engine, {cell["uuid"]: engine}, None)

    nodes = {n.uuid: n._asdict() for n in db.get_compute_nodes(engine)}
    for expected in fleet.compute_nodes[cell["uuid"]]:
        got = nodes[expected["uuid"]]
        for key in (
            "host",
            "vcpus",
            "memory_mb",
            "free_disk_gb",
            "cpu_info",
            "stats",
            "supported_instances",
            "cpu_allocation_ratio",
            "updated_at",
        ):
            assert got[key] == expected[key], key
        assert str(got["host_ip"]) == expected["host_ip"]
    services = {s.host: s for s in db.get_compute_services(engine)}
    assert {h for h, s in services.items() if s.disabled} == fleet.disabled_hosts
    assert db.get_host_mappings(engine) == fleet.host_cells
    azs = db.get_aggregates_by_metadata(engine, key="availability_zone")
    assert {a["name"] for a in azs} == {"az1", "az2", "az3"}
    assert set().union(*(a["hosts"] for a in azs)) == set(fleet.hosts)
    live = {i["uuid"] for i in fleet.instances[cell["uuid"]] if i["deleted_at"] is None}
    assert set().union(set(), *db.get_instance_uuids_by_host(engine).values()) == live
    db.dispose_engines()


def test_soft_deleted_rows_are_invisible_and_updated_since_sees_changes(server_db):  # noqa: F811
    engine = db.get_engine(server_db)
    db.create_schema(engine, "cell")
    db.create_schema(engine, "api")
    cell = db.create_cell_mapping(engine, name="c", database_connection=server_db)
    fleet = build_fleet(FleetSpec(hosts=5, cells=[cell["uuid"]], seed=2, now=NOW))
    load_fleet(fleet, engine, {cell["uuid"]: engine}, None)
    victim, changed = fleet.compute_nodes[cell["uuid"]][0], fleet.compute_nodes[cell["uuid"]][1]
    later = NOW + datetime.timedelta(minutes=10)
    cn, svc = models.compute_nodes, models.services
    with engine.begin() as conn:
        conn.execute(
            cn.update().where(cn.c.uuid == victim["uuid"]).values(deleted=cn.c.id, deleted_at=later)
        )
        conn.execute(
            svc.update()
            .where(svc.c.host == victim["host"])
            .values(deleted=svc.c.id, deleted_at=later)
        )
        conn.execute(
            cn.update().where(cn.c.uuid == changed["uuid"]).values(free_ram_mb=1, updated_at=later)
        )

    live = {n.uuid for n in db.get_compute_nodes(engine)}
    assert victim["uuid"] not in live and len(live) == 4
    assert victim["host"] not in {s.host for s in db.get_compute_services(engine)}
    assert db.get_compute_nodes(engine, uuids=[victim["uuid"]]) == []

    delta = {n.uuid: n for n in db.get_compute_nodes(engine, updated_since=later)}
    assert set(delta) == {victim["uuid"], changed["uuid"]}
    assert delta[victim["uuid"]].deleted != 0
    assert delta[changed["uuid"]].deleted == 0 and delta[changed["uuid"]].free_ram_mb == 1
    assert db.get_compute_nodes(engine, updated_since=later + datetime.timedelta(seconds=1)) == []
    db.dispose_engines()


def test_manage_fleet_load_writes_real_placement(tmp_path, placement_service, capsys):  # noqa: F811
    conf = tmp_path / "nova.conf"
    conf.write_text(
        f"[api_database]\nconnection = sqlite:///{tmp_path}/api.db\n"
        f"[database]\nconnection = sqlite:///{tmp_path}/cell1.db\n"
        f"[placement]\nendpoint_override = {placement_service.url}\n"
    )
    cfg = ["--config-file", str(conf)]
    assert manage.main([*cfg, "db", "sync"]) == 0
    assert manage.main([*cfg, "cell", "create", "--name", "cell1"]) == 0
    prefix = f"pl{uuid.uuid4().hex[:6]}"
    rc = manage.main(
        [
            *cfg,
            "fleet",
            "load",
            "--hosts",
            "8",
            "--seed",
            "3",
            "--host-prefix",
            prefix,
            "--disabled-fraction",
            "0.25",
        ]
    )
    assert rc == 0, capsys.readouterr().err
    client = PlacementClient(placement_service.url)
    api = db.get_engine(f"sqlite:///{tmp_path}/api.db")
    cell = db.get_engine(f"sqlite:///{tmp_path}/cell1.db")
    providers = {p["name"]: p for p in client.list_providers() if p["name"].startswith(prefix)}
    nodes = {n.host: n for n in db.get_compute_nodes(cell)}
    assert set(providers) == set(nodes)
    disabled = {s.host for s in db.get_compute_services(cell) if s.disabled}
    assert len(disabled) == 2
    az_uuid = {a["uuid"] for a in db.get_aggregates_by_metadata(api, key="availability_zone")}
    for host, node in nodes.items():
        assert providers[host]["uuid"] == node.uuid
        traits = set(_get(client, f"/resource_providers/{node.uuid}/traits")["traits"])
        assert ("COMPUTE_STATUS_DISABLED" in traits) is (host in disabled)
        aggs = set(_get(client, f"/resource_providers/{node.uuid}/aggregates")["aggregates"])
        assert len(aggs & az_uuid) == 1
        # the existing instances hold allocations matching the compute node's usage
        assert client.get_usages(node.uuid).get("VCPU", 0) == node.vcpus_used
    db.dispose_engines()


def _get(client: PlacementClient, path: str) -> dict:
    import requests

    answer = requests.get(
        client.endpoint + path,
        headers={"X-Auth-Token": "admin", "OpenStack-API-Version": "placement 1.19"},
        timeout=10,
    )
    answer.raise_for_status()
    return answer.json()


def test_db_sync_schema_is_novas_on_the_server(server_kind):  # noqa: F811
    # same comparison as tests/unit/db/test_schema.py, on the reflected MariaDB/PostgreSQL
    from tests.unit.db.schema_check import check_nova_instance_round_trip, schema_differences

    with make_database(server_kind) as api_url, make_database(server_kind) as cell_url:
        for url, which in ((api_url, "api"), (cell_url, "cell")):
            engine = db.get_engine(url)
            db.create_schema(engine, which)
            db.create_schema(engine, which)  # idempotent, named enum type included
            assert schema_differences(engine, which) == [], which
        check_nova_instance_round_trip(db.get_engine(cell_url))
        db.dispose_engines()
