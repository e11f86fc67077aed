"""The schema ``db.create_schema`` makes is nova 34's, table by table, as the database sees it.

The reference is tests/data/nova-34-schema.json, dumped from nova's own models and migrations
by scripts/extract-nova-schema.py. The comparison runs on the reflected database
(``sqlalchemy.inspect``), so it checks what ``novasched-manage db sync`` really creates. The
comparison is in tests/unit/db/schema_check.py, shared with tests/functional/test_db.py, which
runs it on MariaDB and PostgreSQL.
"""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

import db
from db import models
from tests.unit.db.schema_check import (
    SCHEMA_FILE,
    check_nova_instance_round_trip,
    nova_schema,
    schema_differences,
)

METADATA = {"api": models.API_METADATA, "cell": models.CELL_METADATA}


# --------------------------------------------------------------------------------- tests


@pytest.fixture
def sqlite_engine(tmp_path):
    engine = db.get_engine(f"sqlite:///{tmp_path}/nova.db")
    yield engine
    db.dispose_engines()


def test_reference_covers_exactly_the_tables_we_create():
    for which, metadata in METADATA.items():
        assert set(nova_schema()[which]) == set(metadata.tables), which
    assert nova_schema()["nova_version"].startswith("34.")


def test_reference_file_is_sorted_and_stable():
    text = SCHEMA_FILE.read_text()
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"
    for tables in (nova_schema()["api"], nova_schema()["cell"]):
        for table in tables.values():
            for key in ("columns", "indexes", "unique_constraints"):
                names = [item["name"] for item in table[key]]
                assert names == sorted(names)


@pytest.mark.parametrize("which", ["api", "cell"])
def test_sqlite_schema_is_novas(sqlite_engine, which):
    db.create_schema(sqlite_engine, which)
    assert schema_differences(sqlite_engine, which) == []


def test_instances_has_novas_54_columns_including_what_tools_write(sqlite_engine):
    db.create_schema(sqlite_engine, "cell")
    columns = {c["name"] for c in sa.inspect(sqlite_engine).get_columns("instances")}
    assert len(columns) == 54
    assert {"launch_index", "launched_on", "hidden", "locked_by", "internal_id"} <= columns


def test_nova_style_instance_row_round_trips_on_sqlite(sqlite_engine):
    db.create_schema(sqlite_engine, "cell")
    check_nova_instance_round_trip(sqlite_engine)


def test_comparison_notices_a_difference(sqlite_engine):
    # the checker itself: a table short of a column, with a changed type and nullability
    with sqlite_engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE host_mappings (created_at DATETIME, updated_at DATETIME, "
            "id INTEGER PRIMARY KEY, cell_id INTEGER NOT NULL, host VARCHAR(64))"
        )
    problems = schema_differences(sqlite_engine, "api")
    assert "host_mappings.host: type ('String', 64), nova's is ('String', 255)" in problems
    assert any(p.startswith("host_mappings.host: nullable=True") for p in problems)
    assert any("uniq_host_mappings0host" in p for p in problems)
    assert any("foreign keys" in p for p in problems)
    assert "cell_mappings: not created" in problems
