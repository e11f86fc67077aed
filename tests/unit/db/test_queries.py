"""The read functions against a real SQLite database with nova's schema."""

from __future__ import annotations

import datetime
import json

import pytest
import sqlalchemy as sa

import db
from db import models

NOW = datetime.datetime(2026, 5, 1, 12, 0, 0)


@pytest.fixture
def api(tmp_path):
    engine = db.get_engine(f"sqlite:///{tmp_path}/api.db")
    db.create_schema(engine, "api")
    yield engine
    db.dispose_engines()


@pytest.fixture
def cell(tmp_path):
    engine = db.get_engine(f"sqlite:///{tmp_path}/cell.db")
    db.create_schema(engine, "cell")
    yield engine
    db.dispose_engines()


def _node(host: str, uuid: str, **kw):
    row = dict(
        uuid=uuid,
        host=host,
        hypervisor_hostname=host,
        vcpus=16,
        memory_mb=65536,
        local_gb=1000,
        vcpus_used=0,
        memory_mb_used=512,
        local_gb_used=0,
        hypervisor_type="QEMU",
        hypervisor_version=8002002,
        cpu_info='{"arch": "x86_64"}',
        free_ram_mb=65024,
        free_disk_gb=1000,
        stats='{"num_instances": "0"}',
        created_at=NOW,
        updated_at=NOW,
        deleted=0,
        deleted_at=None,
    )
    # executemany takes its columns from the first row: every row carries every key
    row.update(kw)
    return row


def _service(host: str, **kw):
    row = dict(
        host=host,
        binary="nova-compute",
        topic="compute",
        report_count=1,
        disabled=False,
        last_seen_up=NOW,
        created_at=NOW,
        updated_at=NOW,
        deleted=0,
        version=74,
        disabled_reason=None,
        deleted_at=None,
    )
    row.update(kw)
    return row


def test_create_schema_makes_novas_tables_and_is_idempotent(api, cell):
    db.create_schema(api, "api")
    db.create_schema(cell, "cell")
    assert set(sa.inspect(api).get_table_names()) == {
        "cell_mappings",
        "host_mappings",
        "aggregates",
        "aggregate_hosts",
        "aggregate_metadata",
        "instance_groups",
        "instance_group_policy",
        "instance_group_member",
        "flavors",
        "flavor_extra_specs",
        "flavor_projects",
    }
    assert set(sa.inspect(cell).get_table_names()) == {
        "compute_nodes",
        "services",
        "instances",
        "instance_extra",
        "instance_system_metadata",
    }
    cols = {c["name"] for c in sa.inspect(cell).get_columns("compute_nodes")}
    assert {
        "free_disk_gb",
        "disk_available_least",
        "supported_instances",
        "stats",
        "numa_topology",
        "cpu_allocation_ratio",
        "mapped",
        "deleted",
    } <= cols


def test_create_schema_rejects_unknown_kind(api):
    with pytest.raises(ValueError):
        db.create_schema(api, "main")


def test_engine_is_cached_per_url_and_mysql_gets_pymysql(tmp_path):
    url = f"sqlite:///{tmp_path}/x.db"
    assert db.get_engine(url) is db.get_engine(url)
    assert db.api.normalize_url("mysql://u:p@h/nova").startswith("mysql+pymysql://u:p@h/nova")
    db.dispose_engines()


def test_sqlite_file_engine_uses_wal(tmp_path):
    engine = db.get_engine(f"sqlite:///{tmp_path}/wal.db")
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    db.dispose_engines()


def test_cell_mappings_and_cell0(api):
    assert db.ensure_cell0(api, "sqlite:////tmp/c0.db") is True
    assert db.ensure_cell0(api, "sqlite:////tmp/c0.db") is False
    c1 = db.create_cell_mapping(
        api,
        name="cell1",
        database_connection="sqlite:////tmp/c1.db",
        transport_url="rabbit://g:g@h//",
        disabled=True,
    )
    cells = db.get_cell_mappings(api)
    assert [c["name"] for c in cells] == ["cell0", "cell1"]
    assert cells[0]["uuid"] == db.CELL0_UUID
    assert cells[1] == {**c1, "id": cells[1]["id"]}
    assert cells[1]["disabled"] is True
    with pytest.raises(db.DatabaseError, match="already exists"):
        db.create_cell_mapping(api, name="cell1", database_connection="sqlite://")


def test_host_mappings_map_hosts_once(api):
    c1 = db.create_cell_mapping(api, name="cell1", database_connection="sqlite://")
    assert db.map_hosts(api, c1["uuid"], ["h1", "h2"]) == 2
    assert db.map_hosts(api, c1["uuid"], ["h2", "h3"]) == 1
    assert db.get_host_mappings(api) == {h: c1["uuid"] for h in ("h1", "h2", "h3")}
    with pytest.raises(db.DatabaseError):
        db.map_hosts(api, "nope", ["h9"])


def _add_aggregate(api, agg_id, name, hosts, meta):
    with api.begin() as conn:
        conn.execute(models.aggregates.insert().values(id=agg_id, uuid=f"uuid-{name}", name=name))
        for h in hosts:
            conn.execute(models.aggregate_hosts.insert().values(host=h, aggregate_id=agg_id))
        for k, v in meta.items():
            conn.execute(
                models.aggregate_metadata.insert().values(aggregate_id=agg_id, key=k, value=v)
            )


def test_aggregates_with_hosts_and_metadata(api):
    _add_aggregate(api, 1, "az1", ["h1", "h2"], {"availability_zone": "az1"})
    _add_aggregate(api, 2, "tenants", ["h2"], {"filter_tenant_id": "p1", "filter_tenant_id2": "p2"})
    _add_aggregate(api, 3, "empty", [], {})
    _add_aggregate(api, 4, "tricky", [], {"filter_tenantXid": "p1"})
    aggs = {a["name"]: a for a in db.get_aggregates(api)}
    assert aggs["az1"]["hosts"] == {"h1", "h2"}
    assert aggs["az1"]["metadata"] == {"availability_zone": "az1"}
    assert aggs["az1"]["uuid"] == "uuid-az1"
    assert aggs["empty"]["hosts"] == set() and aggs["empty"]["metadata"] == {}

    by_key = db.get_aggregates_by_metadata(api, key="availability_zone", value="az1")
    assert [a["name"] for a in by_key] == ["az1"]
    assert db.get_aggregates_by_metadata(api, key="availability_zone", value="az9") == []
    # "_" in the prefix is literal, not a LIKE wildcard
    by_prefix = db.get_aggregates_by_metadata(api, key_prefix="filter_tenant_id")
    assert [a["name"] for a in by_prefix] == ["tenants"]
    # the whole aggregate comes back, not only the matching metadata item
    assert by_prefix[0]["metadata"] == {"filter_tenant_id": "p1", "filter_tenant_id2": "p2"}
    assert [a["name"] for a in db.get_aggregates_by_metadata(api, value="p2")] == ["tenants"]


def test_instance_group_with_policy_rules_and_members(api):
    with api.begin() as conn:
        conn.execute(
            models.instance_groups.insert().values(
                id=7, uuid="g1", name="grp", user_id="u", project_id="p"
            )
        )
        conn.execute(
            models.instance_group_policy.insert().values(
                policy="anti-affinity", rules=json.dumps({"max_server_per_host": 2}), group_id=7
            )
        )
        conn.execute(
            models.instance_group_member.insert(),
            [{"instance_uuid": "i1", "group_id": 7}, {"instance_uuid": "i2", "group_id": 7}],
        )
        conn.execute(models.instance_groups.insert().values(id=8, uuid="g2", name="bare"))
    g = db.get_instance_group(api, "g1")
    assert g["policy"] == "anti-affinity"
    assert g["rules"] == {"max_server_per_host": 2}
    assert g["members"] == ["i1", "i2"]
    assert (g["name"], g["user_id"], g["project_id"]) == ("grp", "u", "p")
    bare = db.get_instance_group(api, "g2")
    assert bare["policy"] is None and bare["rules"] == {} and bare["members"] == []
    assert db.get_instance_group(api, "missing") is None


def test_compute_nodes_hide_soft_deleted_rows(cell):
    with cell.begin() as conn:
        conn.execute(
            models.compute_nodes.insert(),
            [_node("h1", "u1"), _node("h2", "u2"), _node("h3", "u3", deleted=3, deleted_at=NOW)],
        )
    rows = db.get_compute_nodes(cell)
    assert all(type(r) is db.ComputeNodeRow for r in rows)
    assert sorted(r.uuid for r in rows) == ["u1", "u2"]
    assert all(r.deleted == 0 for r in rows)
    assert rows[0].hypervisor_type == "QEMU" and "cpu_allocation_ratio" in rows[0]._fields
    assert [r.uuid for r in db.get_compute_nodes(cell, uuids=["u2", "u3", "zz"])] == ["u2"]
    assert db.get_compute_nodes(cell, uuids=[]) == []


def test_compute_nodes_by_uuid_chunks_big_lists(cell):
    with cell.begin() as conn:
        conn.execute(models.compute_nodes.insert(), [_node(f"h{i}", f"u{i}") for i in range(2500)])
    wanted = [f"u{i}" for i in range(0, 2500, 1)] + ["missing"]
    assert len(db.get_compute_nodes(cell, uuids=wanted)) == 2500


def test_compute_nodes_updated_since_includes_flagged_deletions(cell):
    old = NOW - datetime.timedelta(hours=1)
    with cell.begin() as conn:
        conn.execute(
            models.compute_nodes.insert(),
            [
                _node("stale", "u1", created_at=old, updated_at=old),
                _node("fresh", "u2", created_at=old, updated_at=NOW),
                _node("new", "u3", created_at=NOW, updated_at=None),
                _node("gone", "u4", created_at=old, updated_at=old, deleted=4, deleted_at=NOW),
                _node(
                    "gone-long-ago", "u5", created_at=old, updated_at=old, deleted=5, deleted_at=old
                ),
            ],
        )
    since = NOW - datetime.timedelta(minutes=1)
    rows = {r.uuid: r for r in db.get_compute_nodes(cell, updated_since=since)}
    assert set(rows) == {"u2", "u3", "u4"}
    assert rows["u4"].deleted != 0 and rows["u2"].deleted == 0  # as stored: the row's id
    # an aware datetime means the same instant
    aware = since.replace(tzinfo=datetime.UTC)
    assert {r.uuid for r in db.get_compute_nodes(cell, updated_since=aware)} == set(rows)
    # a row written in the very second of the last read is not lost
    assert "u2" in {r.uuid for r in db.get_compute_nodes(cell, updated_since=NOW)}


def test_compute_nodes_by_host_or_node(cell):
    with cell.begin() as conn:
        conn.execute(
            models.compute_nodes.insert(),
            [_node("h1", "u1"), _node("h1", "u1b", hypervisor_hostname="h1-b"), _node("h2", "u2")],
        )
    assert {r.uuid for r in db.get_compute_nodes_by_host_or_node(cell, host="h1")} == {
        "u1",
        "u1b",
    }
    assert [r.uuid for r in db.get_compute_nodes_by_host_or_node(cell, node="h1-b")] == ["u1b"]


def test_compute_services_only_live_nova_compute_with_disabled(cell):
    old = NOW - datetime.timedelta(hours=1)
    with cell.begin() as conn:
        conn.execute(
            models.services.insert(),
            [
                _service("h1"),
                _service(
                    "h2",
                    disabled=True,
                    disabled_reason="maint",
                    created_at=old,
                    updated_at=old,
                    last_seen_up=old,
                ),
                _service("h3", deleted=3, deleted_at=NOW),
                _service("h1", binary="nova-conductor", topic="conductor"),
            ],
        )
    rows = {r.host: r for r in db.get_compute_services(cell)}
    assert all(type(r) is db.ServiceRow for r in rows.values())
    assert set(rows) == {"h1", "h2"}
    assert rows["h2"].disabled is True and rows["h2"].disabled_reason == "maint"
    assert rows["h1"].forced_down is False
    since = NOW - datetime.timedelta(minutes=5)
    # changes include soft-deleted services (deleted: the row's id), so a cache can drop them
    changed = {r.host: r.deleted for r in db.get_compute_services(cell, updated_since=since)}
    assert changed == {"h1": 0, "h3": 3}
    assert db.get_minimum_service_version(cell) == 74
    assert db.get_minimum_service_version(cell, "nova-scheduler") is None


def test_touch_services_heartbeats_only_reporting_services(cell):
    old = NOW - datetime.timedelta(days=1)
    with cell.begin() as conn:
        conn.execute(
            models.services.insert(),
            [
                _service("up", last_seen_up=old, report_count=5),
                _service("never", last_seen_up=old, report_count=0),
            ],
        )
    assert db.touch_services(cell, now=NOW) == 1
    rows = {r.host: r for r in db.get_compute_services(cell)}
    assert rows["up"].last_seen_up == NOW and rows["up"].report_count == 6
    assert rows["never"].last_seen_up == old
    assert db.touch_services(cell, hosts=["never"], only_reporting=False, now=NOW) == 1


def test_instance_uuids_by_host_skips_deleted(cell):
    with cell.begin() as conn:
        conn.execute(
            models.instances.insert(),
            [
                {"uuid": "i1", "host": "h1", "deleted": 0, "deleted_at": None},
                {"uuid": "i2", "host": "h1", "deleted": 0, "deleted_at": None},
                {"uuid": "i3", "host": "h2", "deleted": 0, "deleted_at": None},
                {"uuid": "i4", "host": "h2", "deleted": 4, "deleted_at": NOW},
                {"uuid": "i5", "host": None, "deleted": 0, "deleted_at": None},
            ],
        )
    assert db.get_instance_uuids_by_host(cell) == {"h1": {"i1", "i2"}, "h2": {"i3"}}
    assert db.get_instance_uuids_by_host(cell, hosts=["h2", "h9"]) == {"h2": {"i3"}}
    assert db.get_instance_uuids_by_host(cell, hosts=[]) == {}


def test_compute_node_rows_are_named_tuples_and_reported_since_sees_only_updates(cell):
    old = NOW - datetime.timedelta(hours=1)
    with cell.begin() as conn:
        conn.execute(
            models.compute_nodes.insert(),
            [
                _node("stale", "u1", created_at=old, updated_at=old),
                _node("fresh", "u2", created_at=old, updated_at=NOW, free_ram_mb=123),
                _node("new", "u3", created_at=NOW, updated_at=None),
                _node("gone", "u4", created_at=old, updated_at=old, deleted=4, deleted_at=NOW),
            ],
        )
    since = NOW - datetime.timedelta(minutes=1)
    live = {r.uuid: r for r in db.get_compute_nodes(cell)}
    assert set(live) == {"u1", "u2", "u3"}
    assert (live["u2"].host, live["u2"].free_ram_mb) == ("fresh", 123)
    assert isinstance(live["u2"], tuple)  # as cheap as one: compared and hashed as one
    window = {r.uuid: r.deleted for r in db.get_compute_nodes(cell, updated_since=since)}
    assert window == {"u2": 0, "u3": 0, "u4": 4}
    # the per-request read: the rows whose updated_at moved, nothing else
    assert [r.uuid for r in db.get_compute_nodes(cell, reported_since=since)] == ["u2"]
    with pytest.raises(TypeError, match="alone"):
        db.get_compute_nodes(cell, ["u2"], reported_since=since)


def test_compute_node_reports_leave_out_the_reports_already_applied(cell):
    old = NOW - datetime.timedelta(hours=1)
    later = NOW + datetime.timedelta(seconds=1)
    with cell.begin() as conn:
        conn.execute(
            models.compute_nodes.insert(),
            [
                _node("stale", "u1", created_at=old, updated_at=old),
                _node("seen", "u2", created_at=old, updated_at=NOW),
                _node("moved", "u3", created_at=old, updated_at=later, free_ram_mb=7),
                _node("unknown", "u4", created_at=old, updated_at=NOW),
            ],
        )
    since = NOW - datetime.timedelta(minutes=1)
    applied = {r.uuid: r for r in db.get_compute_nodes(cell, reported_since=since)}
    assert set(applied) == {"u2", "u3", "u4"}
    # u3 was applied at an older report, u4 not at all
    known = {"u2": applied["u2"], "u3": applied["u3"]._replace(updated_at=NOW)}
    rows = db.get_compute_node_reports(cell, since, known)
    assert sorted(r.uuid for r in rows) == ["u3", "u4"]
    assert {r.uuid: r for r in rows}["u3"] == applied["u3"]  # whole rows, as the other reads
    assert db.get_compute_node_reports(cell, since, applied) == []


def test_compute_service_rows_window_includes_heartbeats_and_deletions(cell):
    old = NOW - datetime.timedelta(hours=1)
    with cell.begin() as conn:
        conn.execute(
            models.services.insert(),
            [
                _service("quiet", created_at=old, updated_at=old, last_seen_up=old),
                _service("beating", created_at=old, updated_at=old, last_seen_up=NOW),
                _service("gone", created_at=old, updated_at=old, deleted=3, deleted_at=NOW),
            ],
        )
    live = db.get_compute_services(cell)
    assert sorted(r.host for r in live) == ["beating", "quiet"]
    since = NOW - datetime.timedelta(minutes=1)
    window = {r.host: r.deleted for r in db.get_compute_services(cell, updated_since=since)}
    assert set(window) == {"beating", "gone"} and window["gone"] != 0
