"""``db.queries.READ_COLUMNS`` is exactly the set of columns the reads name.

Every public read of ``db.queries`` is run, in each of its forms, against SQLite databases
with nova's schema and rows that make every statement run (a server group with a policy, an
instance with system metadata, a compute node report not seen before). Each statement
SQLAlchemy executes is captured and walked for the table columns it names (selected,
filtered on, joined, ordered by): their union must equal ``READ_COLUMNS``, which is what
``novasched-manage check`` looks for in nova's databases. A new read, or a new column in a
read, fails here until ``READ_COLUMNS`` says so.
"""

from __future__ import annotations

import datetime
import inspect
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.sql import visitors

import db
from db import models, queries
from tests.db_rows import compute_node

NOW = datetime.datetime(2026, 5, 1, 12, 0, 0)
EARLIER = NOW - datetime.timedelta(hours=1)

# each public read and the calls that exercise all of its statements
EXERCISED = {
    "get_cell_mappings",
    "get_host_mappings",
    "get_aggregates",
    "get_aggregates_by_metadata",
    "get_aggregates_fingerprint",
    "get_service_exceptions",
    "get_service_exceptions_digest",
    "get_instance_group",
    "get_compute_nodes",
    "get_compute_nodes_by_host_or_node",
    "get_compute_node_reports",
    "get_compute_services",
    "get_instance_uuids_by_host",
    "get_instance_details_by_host",
    "get_instance_builds",
    "get_instance_numa_topologies",
    "get_minimum_service_version",
    "get_flavors",
}


def _named_columns(statement: object) -> set[tuple[str, str]]:
    out: set[tuple[str, str]] = set()
    for element in visitors.iterate(statement):  # type: ignore[arg-type]
        if isinstance(element, sa.Column) and isinstance(element.table, sa.Table):
            out.add((element.table.name, element.name))
    return out


@pytest.fixture
def engines(tmp_path) -> Iterator[tuple[sa.Engine, sa.Engine, set[tuple[str, str]]]]:
    api = db.get_engine(f"sqlite:///{tmp_path}/api.db")
    cell = db.get_engine(f"sqlite:///{tmp_path}/cell.db")
    db.create_schema(api, "api")
    db.create_schema(cell, "cell")
    _seed(api, cell)
    seen: set[tuple[str, str]] = set()

    def capture(_conn, clauseelement, *_args, **_kwargs):
        seen.update(_named_columns(clauseelement))

    for engine in (api, cell):
        sa.event.listen(engine, "before_execute", capture)
    yield api, cell, seen
    for engine in (api, cell):
        sa.event.remove(engine, "before_execute", capture)
    db.dispose_engines()


def _seed(api: sa.Engine, cell: sa.Engine) -> None:
    mapping = db.create_cell_mapping(api, name="cell1", database_connection="sqlite://")
    db.map_hosts(api, mapping["uuid"], ["h1"])
    with api.begin() as conn:
        conn.execute(models.aggregates.insert().values(id=1, uuid="a1", name="az1"))
        conn.execute(models.aggregate_hosts.insert().values(host="h1", aggregate_id=1))
        conn.execute(
            models.aggregate_metadata.insert().values(
                aggregate_id=1, key="availability_zone", value="az1"
            )
        )
        conn.execute(models.instance_groups.insert().values(id=1, uuid="g1", name="grp"))
        conn.execute(
            models.flavors.insert().values(
                id=1, flavorid="f1", name="m1.tiny", vcpus=1, memory_mb=512, swap=0
            )
        )
        conn.execute(models.flavor_extra_specs.insert().values(flavor_id=1, key="k", value="v"))
        conn.execute(models.flavor_projects.insert().values(flavor_id=1, project_id="p1"))
        conn.execute(
            models.instance_group_policy.insert().values(policy="affinity", rules="{}", group_id=1)
        )
        conn.execute(models.instance_group_member.insert().values(instance_uuid="i1", group_id=1))
    with cell.begin() as conn:
        conn.execute(
            models.services.insert().values(
                id=1,
                host="h1",
                binary="nova-compute",
                topic="compute",
                report_count=1,
                version=74,
                created_at=EARLIER,
                updated_at=NOW,
                last_seen_up=NOW,
                deleted=0,
            )
        )
        conn.execute(
            models.compute_nodes.insert().values(
                compute_node("cn1", "h1", service_id=1, created_at=EARLIER, updated_at=NOW)
            )
        )
        conn.execute(
            models.instances.insert().values(
                uuid="i1",
                host="h1",
                node="h1",
                instance_type_id=1,
                deleted=0,
                created_at=EARLIER,
                launched_at=NOW,
            )
        )
        conn.execute(
            models.instance_system_metadata.insert().values(
                instance_uuid="i1", key="image_hw_architecture", value="x86_64", deleted=0
            )
        )
        conn.execute(
            models.instance_extra.insert().values(
                instance_uuid="i1", numa_topology='{"cells": []}', deleted=0
            )
        )


def _run_every_read(api: sa.Engine, cell: sa.Engine) -> None:
    assert queries.get_cell_mappings(api)
    assert queries.get_host_mappings(api) == {"h1": queries.get_cell_mappings(api)[0]["uuid"]}
    assert queries.get_aggregates(api)
    assert queries.get_aggregates_by_metadata(
        api, key="availability_zone", key_prefix="avail", value="az1"
    )
    group = queries.get_instance_group(api, "g1")
    assert group is not None and group["members"] == ["i1"]
    (flavor,) = queries.get_flavors(api)
    assert (flavor["name"], flavor["extra_specs"], flavor["projects"]) == (
        "m1.tiny",
        {"k": "v"},
        ["p1"],
    )
    assert queries.get_flavors(api, ["f1"]) == [flavor]
    assert queries.get_compute_nodes(cell)
    assert queries.get_compute_nodes(cell, uuids=["cn1"])
    assert queries.get_compute_nodes(cell, updated_since=EARLIER)
    assert queries.get_compute_nodes(cell, reported_since=EARLIER)
    assert queries.get_compute_nodes_by_host_or_node(cell, host="h1", node="h1")
    # nothing known yet: both statements run (the keys, then the whole rows)
    assert queries.get_compute_node_reports(cell, EARLIER, {})
    assert queries.get_compute_services(cell)
    assert queries.get_compute_services(cell, updated_since=EARLIER)
    assert [row.host for row in queries.get_compute_services(cell, hosts=["h1", "h2"])] == ["h1"]
    assert queries.get_service_exceptions(cell, NOW, NOW + datetime.timedelta(hours=1)) == {}
    late = queries.get_service_exceptions(cell, NOW + datetime.timedelta(seconds=1), NOW)
    assert late == {"h1": (False, False, NOW)}
    later = NOW + datetime.timedelta(seconds=1)
    assert queries.get_service_exceptions_digest(cell, NOW, later) == ()
    assert queries.get_service_exceptions_digest(cell, later, NOW) == ((3, 1, 1, 1, 1),)
    fingerprint = queries.get_aggregates_fingerprint(api)
    assert (fingerprint.aggregates, fingerprint.hosts, fingerprint.metadata) == (1, 1, 1)
    cheap = queries.get_aggregates_fingerprint(api, count_hosts=False)
    assert cheap == fingerprint._replace(hosts=None)
    assert queries.get_instance_uuids_by_host(cell)
    assert queries.get_instance_uuids_by_host(cell, ["h1"])
    details = queries.get_instance_details_by_host(cell, ["h1"])
    assert details["h1"]["i1"]["image_properties"] == {"hw_architecture": "x86_64"}
    assert queries.get_instance_numa_topologies(cell, ["i1", "i2"]) == {"i1": '{"cells": []}'}
    assert queries.get_instance_builds(cell, ["i1", "i2"]) == {"i1": (EARLIER, NOW)}
    assert queries.get_minimum_service_version(cell) == 74


def test_every_public_read_is_exercised():
    public = {
        name
        for name, fn in inspect.getmembers(queries, inspect.isfunction)
        if fn.__module__ == queries.__name__
        and not name.startswith("_")
        # the statements of reads (to send them ahead: db.read_ahead), run by those reads
        and not name.endswith("_statement")
    }
    assert public == EXERCISED, "add the new read to _run_every_read and EXERCISED"


def test_read_columns_are_exactly_the_columns_the_reads_name(engines):
    api, cell, seen = engines
    _run_every_read(api, cell)
    declared = {(table, col) for table, cols in queries.READ_COLUMNS.items() for col in cols}
    assert sorted(seen - declared) == [], "columns read but missing from READ_COLUMNS"
    assert sorted(declared - seen) == [], "READ_COLUMNS names columns no read uses"


def test_read_columns_name_tables_and_columns_of_novas_schema():
    tables = {**models.API_METADATA.tables, **models.CELL_METADATA.tables}
    for table, cols in queries.READ_COLUMNS.items():
        assert table in tables, table
        assert set(cols) <= set(tables[table].c.keys()), table
        assert len(set(cols)) == len(cols), f"{table} lists a column twice"
