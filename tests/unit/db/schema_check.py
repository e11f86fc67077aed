"""The comparison of a database's schema with nova 34's, and a nova-style instances row, shared
by tests/unit/db/test_schema.py (SQLite) and tests/functional/test_db.py (MariaDB and
PostgreSQL).

The reference is tests/data/nova-34-schema.json, dumped from nova's own models and migrations
by scripts/extract-nova-schema.py. The comparison runs on the reflected database
(``sqlalchemy.inspect``), so it checks what ``novasched-manage db sync`` really creates.
"""

from __future__ import annotations

import datetime
import functools
import json
import pathlib
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql
from sqlalchemy.engine import Engine

import db
from db import models

SCHEMA_FILE = pathlib.Path(__file__).resolve().parents[2] / "data" / "nova-34-schema.json"


# deliberate additions to nova's schema (table, index name); everything else matches nova
EXTRA_INDEXES = {
    # the scheduler reads "compute nodes reported since" on every request
    ("compute_nodes", "compute_nodes_updated_at_idx"),
}


@functools.cache
def nova_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_FILE.read_text())


def _expected_type(column: dict[str, Any], dialect: str) -> tuple:
    """What reflecting a column of nova's type gives on ``dialect``, normalised."""
    variant = column.get("variants", {}).get(dialect)
    if variant is not None:
        return (variant,)
    if column["type"] == "Enum":
        values = tuple(column["enum"]["values"])
        if dialect == "sqlite":  # no enum type: a VARCHAR as long as the longest value
            return ("String", max(len(v) for v in values))
        if dialect == "postgresql":  # a named type
            return ("Enum", values, column["enum"]["name"])
        return ("Enum", values)
    if column["type"] == "String":
        return ("String", column["length"])
    return (column["type"],)


def _reflected_type(type_: sa.types.TypeEngine, dialect: str) -> tuple:
    """A reflected column type in the generic names of the reference file."""
    if isinstance(type_, mysql.MEDIUMTEXT):
        return ("MEDIUMTEXT",)
    if isinstance(type_, postgresql.INET):
        return ("INET",)
    if isinstance(type_, sa.Enum):
        if dialect == "postgresql":
            return ("Enum", tuple(type_.enums), type_.name)
        return ("Enum", tuple(type_.enums))
    if isinstance(type_, mysql.TINYINT) and type_.display_width == 1:
        return ("Boolean",)  # MySQL/MariaDB's BOOL
    for name, cls in (
        ("Boolean", sa.Boolean),
        ("BigInteger", sa.BigInteger),
        ("Integer", sa.Integer),
        ("Float", sa.Float),  # also PostgreSQL's DOUBLE PRECISION
        ("DateTime", sa.DateTime),  # also PostgreSQL's TIMESTAMP WITHOUT TIME ZONE
        ("Text", sa.Text),
    ):
        if isinstance(type_, cls):
            return (name,)
    if isinstance(type_, sa.String):
        return ("String", type_.length)
    return (type(type_).__name__,)


def _keys(indexes: list[dict], uniques: list[dict]) -> dict[str, tuple]:
    """Indexes and unique constraints as {name: (columns, unique)}.

    MySQL cannot tell a unique index from a unique constraint, so both go in one map.
    """
    keys = {i["name"]: (tuple(i["columns"]), bool(i["unique"])) for i in indexes}
    keys.update({u["name"]: (tuple(u["columns"]), True) for u in uniques})
    return keys


def table_differences(insp: sa.engine.Inspector, table: str, want: dict, dialect: str) -> list:
    problems: list[str] = []
    got_cols = {c["name"]: c for c in insp.get_columns(table)}
    want_cols = {c["name"]: c for c in want["columns"]}
    for name in sorted(set(want_cols) - set(got_cols)):
        problems.append(f"{table}.{name}: missing")
    for name in sorted(set(got_cols) - set(want_cols)):
        problems.append(f"{table}.{name}: not in nova's table")
    pk = set(insp.get_pk_constraint(table)["constrained_columns"])
    for name in sorted(set(want_cols) & set(got_cols)):
        want_c, got_c = want_cols[name], got_cols[name]
        expected, got = _expected_type(want_c, dialect), _reflected_type(got_c["type"], dialect)
        if expected != got:
            problems.append(f"{table}.{name}: type {got}, nova's is {expected}")
        if bool(got_c["nullable"]) != want_c["nullable"]:
            nullable = f"nullable={bool(got_c['nullable'])}"
            problems.append(f"{table}.{name}: {nullable}, nova's is {want_c['nullable']}")
        if (name in pk) != want_c["primary_key"]:
            primary = f"primary key {name in pk}"
            problems.append(f"{table}.{name}: {primary}, nova's is {want_c['primary_key']}")

    got_fks = {
        (tuple(f["constrained_columns"]), f["referred_table"], tuple(f["referred_columns"]))
        for f in insp.get_foreign_keys(table)
    }
    want_fks = {
        (tuple(f["columns"]), f["referred_table"], tuple(f["referred_columns"]))
        for f in want["foreign_keys"]
    }
    if got_fks != want_fks:
        problems.append(f"{table}: foreign keys {sorted(got_fks)}, nova's {sorted(want_fks)}")

    got_uniques = [
        {"name": u["name"], "columns": u["column_names"]}
        for u in insp.get_unique_constraints(table)
    ]
    got_indexes = [
        {"name": i["name"], "columns": i["column_names"], "unique": i["unique"]}
        for i in insp.get_indexes(table)
        # the index behind a unique constraint (MySQL, PostgreSQL) is that constraint
        if not i.get("duplicates_constraint")
    ]
    got_keys = _keys(got_indexes, got_uniques)
    want_keys = _keys(want["indexes"], want["unique_constraints"])
    fk_columns = {cols for cols, _, _ in got_fks}
    for name in sorted(set(got_keys) | set(want_keys)):
        if name not in want_keys:
            cols, unique = got_keys[name]
            if (table, name) in EXTRA_INDEXES:
                continue
            if dialect == "mysql" and not unique and cols in fk_columns:
                continue  # InnoDB indexes every foreign key nothing else indexes (nova's too)
            problems.append(f"{table}: index/unique {name} {got_keys[name]} is not nova's")
        elif got_keys.get(name) != want_keys[name]:
            problems.append(f"{table}: index/unique {name} {got_keys.get(name)}, nova's is "
                            f"{want_keys[name]}")  # fmt: skip
    if dialect != "mysql":
        got_uc = {u["name"] for u in got_uniques}
        want_uc = {u["name"] for u in want["unique_constraints"]}
        if got_uc != want_uc:
            problems.append(f"{table}: unique constraints {sorted(got_uc)}, nova's {want_uc}")
    return problems


def schema_differences(engine: Engine, which: str) -> list[str]:
    """How the ``which`` ("api"/"cell") tables in ``engine`` differ from nova 34's ([] if none)."""
    want = nova_schema()[which]
    insp = sa.inspect(engine)
    dialect = engine.dialect.name
    present = set(insp.get_table_names())
    problems = [f"{t}: not created" for t in sorted(set(want) - present)]
    for table in sorted(set(want) & present):
        problems += table_differences(insp, table, want[table], dialect)
    return problems


LAUNCHED = datetime.datetime(2026, 5, 1, 12, 0, 0)


def nova_instance_row(uuid: str = "5f2a3e6c-1b0d-4c8e-9f61-7d2b8a4c0e11") -> dict[str, Any]:
    """An instances row as nova-compute's build writes it, with columns the scheduler ignores."""
    return {
        "uuid": uuid,
        "created_at": LAUNCHED,
        "deleted": 0,
        "user_id": "u1",
        "project_id": "p1",
        "image_ref": "155d900f-4e14-4e4c-a73d-069cbf4541e6",
        "kernel_id": "",
        "ramdisk_id": "",
        "hostname": "vm-1",
        "launch_index": 2,
        "key_name": "mykey",
        "key_data": "ssh-ed25519 AAAAC3Nza... user@example",
        "power_state": 1,
        "vm_state": "active",
        "memory_mb": 2048,
        "vcpus": 2,
        "root_gb": 20,
        "ephemeral_gb": 0,
        "host": "compute-1",
        "node": "compute-1",
        "compute_id": 2**40,
        "instance_type_id": 7,
        "user_data": "I2Nsb3VkLWNvbmZpZw==",
        "launched_at": LAUNCHED,
        "availability_zone": "az1",
        "display_name": "vm 1",
        "display_description": "vm 1",
        "launched_on": "compute-1",
        "locked": False,
        "locked_by": "owner",
        "os_type": "linux",
        "root_device_name": "/dev/vda",
        "config_drive": "",
        "access_ip_v4": "192.0.2.10",
        "access_ip_v6": "2001:db8::10",
        "auto_disk_config": False,
        "progress": 100,
        "cleaned": 0,
        "hidden": True,
    }


def check_nova_instance_round_trip(engine: Engine) -> None:
    row = nova_instance_row()
    t = models.instances
    with engine.begin() as conn:
        conn.execute(t.insert(), [row])
    with engine.connect() as conn:
        got = conn.execute(sa.select(t).where(t.c.uuid == row["uuid"])).mappings().one()
    for key, value in row.items():
        assert (str(got[key]) if key.startswith("access_ip") else got[key]) == value, key
    # nova's Python-side defaults for what a nova build does not set
    assert got["shutdown_terminate"] is False and got["disable_terminate"] is False
    # the scheduler's own reads still see it
    assert db.get_instance_uuids_by_host(engine) == {"compute-1": {row["uuid"]}}
