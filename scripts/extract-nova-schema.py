"""Dump nova's schema for the tables novasched creates into tests/data/nova-34-schema.json.

A maintainer tool, not part of the test suite (nothing in tests/ runs it or needs nova).
Run it with a Python that has nova installed, e.g. the repository's separate nova venv::

    .venv-nova/bin/python scripts/extract-nova-schema.py [--output tests/data/nova-34-schema.json]

What it reads, for each table of ``TABLES``:

* nova's SQLAlchemy models (``nova.db.api.models``, ``nova.db.main.models``): column types,
  lengths, dialect-specific variants (MEDIUMTEXT on MySQL, INET on PostgreSQL), nullability,
  primary keys, server defaults, indexes, unique constraints and foreign keys;
* nova's own migrations, applied to a throw-away SQLite database: the columns the migrated
  table really has. Columns nova dropped from its models but not yet from its tables
  (``REMOVED_COLUMNS``, e.g. ``instances.internal_id``) are taken from there, and the
  indexes and unique constraints of models and migrations are checked to agree.

The output is sorted and stable: run it again after a nova upgrade and review the diff.
tests/unit/db/test_schema.py compares what ``db.create_schema`` makes with it.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import tempfile

import sqlalchemy as sa
from nova.db import migration
from nova.db.api import models as api_models
from nova.db.main import models as main_models
from sqlalchemy.dialects import mysql, postgresql, sqlite

# the tables novasched creates (db/models.py), per database; nova calls the cell one "main"
TABLES = {
    "api": [
        "aggregate_hosts",
        "aggregate_metadata",
        "aggregates",
        "cell_mappings",
        "flavor_extra_specs",
        "flavor_projects",
        "flavors",
        "host_mappings",
        "instance_group_member",
        "instance_group_policy",
        "instance_groups",
    ],
    "cell": [
        "compute_nodes",
        "instance_extra",
        "instance_system_metadata",
        "instances",
        "services",
    ],
}
NOVA_DATABASE = {"api": "api", "cell": "main"}
MODELS = {"api": api_models, "cell": main_models}

DIALECTS = {"mysql": mysql.dialect(), "postgresql": postgresql.dialect()}
GENERIC = sqlite.dialect()

# most specific first: Enum is a String, BigInteger an Integer, Text a String
_GENERIC_TYPES = [
    ("Enum", sa.Enum),
    ("Boolean", sa.Boolean),
    ("BigInteger", sa.BigInteger),
    ("Integer", sa.Integer),
    ("Float", sa.Float),
    ("DateTime", sa.DateTime),
    ("Text", sa.Text),
    ("String", sa.String),
]


def _impl(type_: sa.types.TypeEngine, dialect: sa.engine.Dialect) -> sa.types.TypeEngine:
    """The type a column of ``type_`` really gets on ``dialect`` (variants, decorators)."""
    if isinstance(type_, sa.types.TypeDecorator):
        return type_.load_dialect_impl(dialect)
    variants = getattr(type_, "_variant_mapping", {})
    return variants.get(dialect.name, type_)


def _generic(type_: sa.types.TypeEngine) -> str:
    for name, cls in _GENERIC_TYPES:
        if isinstance(type_, cls):
            return name
    raise SystemExit(f"no generic name for type {type_!r}")


def _column_type(type_: sa.types.TypeEngine) -> dict:
    base = _impl(type_, GENERIC)
    out: dict = {"type": _generic(base)}
    if isinstance(base, sa.Enum):
        out["enum"] = {"name": base.name, "values": list(base.enums)}
    elif isinstance(base, sa.String) and base.length is not None:
        out["length"] = base.length
    variants = {}
    for dname, dialect in DIALECTS.items():
        # e.g. MEDIUMTEXT for a Text().with_variant(...), INET from nova's IPAddress
        special = _impl(type_, dialect)
        plain = _impl(type_, GENERIC)
        if dname in getattr(plain, "_variant_mapping", {}):
            plain = type(plain)()
        if special.compile(dialect=dialect) != plain.compile(dialect=dialect):
            variants[dname] = special.compile(dialect=dialect)
    if variants:
        out["variants"] = variants
    return out


def _column(col: sa.Column) -> dict:
    out = {"name": col.name, **_column_type(col.type)}
    out["nullable"] = bool(col.nullable)
    out["primary_key"] = bool(col.primary_key)
    if col.server_default is not None:
        out["server_default"] = str(col.server_default.arg)
    return out


def _reflected_column(info: dict) -> dict:
    out = {"name": info["name"], "type": _generic(info["type"])}
    if out["type"] == "String" and info["type"].length is not None:
        out["length"] = info["type"].length
    out["nullable"] = bool(info["nullable"])
    out["primary_key"] = False
    return out


def _migrated(database: str) -> sa.engine.Inspector:
    """nova's schema after its own migrations, on a temporary SQLite database."""
    path = pathlib.Path(tempfile.mkdtemp()) / f"nova-{database}.db"
    engine = sa.create_engine(f"sqlite:///{path}")
    migration._upgrade_alembic(engine, migration._find_alembic_conf(database), None)
    return sa.inspect(engine)


def _table(table: sa.Table, migrated: sa.engine.Inspector) -> dict:
    name = table.name
    columns = {c.name: _column(c) for c in table.columns}
    for info in migrated.get_columns(name):
        if info["name"] not in columns:
            # dropped from nova's model, still in nova's table (REMOVED_COLUMNS)
            columns[info["name"]] = _reflected_column(info)
    extra = set(columns) - {c["name"] for c in migrated.get_columns(name)}
    if extra:
        raise SystemExit(f"{name}: model columns missing from the migrated table: {extra}")

    indexes = sorted(
        (
            {"name": i.name, "columns": [c.name for c in i.columns], "unique": bool(i.unique)}
            for i in table.indexes
        ),
        key=lambda i: i["name"],
    )
    uniques = sorted(
        (
            {"name": c.name, "columns": [col.name for col in c.columns]}
            for c in table.constraints
            if isinstance(c, sa.UniqueConstraint)
        ),
        key=lambda c: c["name"],
    )
    fkeys = sorted(
        (
            {
                "columns": [e.parent.name for e in fk.elements],
                "referred_table": fk.elements[0].column.table.name,
                "referred_columns": [e.column.name for e in fk.elements],
            }
            for fk in table.foreign_key_constraints
        ),
        key=lambda f: (f["columns"], f["referred_table"]),
    )
    # nova's tests keep models and migrations in step; check the part we copy anyway
    got_idx = {(i["name"], tuple(i["column_names"])) for i in migrated.get_indexes(name)}
    want_idx = {(i["name"], tuple(i["columns"])) for i in indexes}
    got_uc = {(u["name"], tuple(u["column_names"])) for u in migrated.get_unique_constraints(name)}
    want_uc = {(u["name"], tuple(u["columns"])) for u in uniques}
    if got_idx != want_idx or got_uc != want_uc:
        raise SystemExit(f"{name}: models and migrations disagree on indexes/unique constraints")
    return {
        "columns": sorted(columns.values(), key=lambda c: c["name"]),
        "indexes": indexes,
        "unique_constraints": uniques,
        "foreign_keys": fkeys,
    }


def extract() -> dict:
    from nova import version

    out: dict = {
        "nova_version": version.version_string(),
        "generated_by": "scripts/extract-nova-schema.py",
    }
    for which, names in TABLES.items():
        metadata = MODELS[which].BASE.metadata
        migrated = _migrated(NOVA_DATABASE[which])
        out[which] = {name: _table(metadata.tables[name], migrated) for name in names}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = pathlib.Path(__file__).resolve().parent.parent / "tests/data/nova-34-schema.json"
    parser.add_argument("--output", type=pathlib.Path, default=default)
    args = parser.parse_args(argv)
    data = extract()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
