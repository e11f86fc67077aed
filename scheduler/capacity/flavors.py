"""The flavors capacity is counted for, from nova's API database."""

from __future__ import annotations

from typing import Any

import db
from scheduler.capacity.scope import UnknownName
from scheduler.exceptions import ConfigurationError
from scheduler.objects import Flavor


class UnknownFlavors(UnknownName):
    """Flavors asked for by name or id that the API database does not hold; the message
    lists the names it holds."""

    def __init__(self, names: list[str], known: list[str]):
        super().__init__("flavor", names, known)


def load_flavors(conf: Any, names: list[str] | None = None) -> list[Flavor]:
    """``names`` (names or flavor ids, public or not), else every public, enabled flavor,
    smallest first. Raises ConfigurationError without ``[api_database] connection`` and
    UnknownFlavors for a name the database does not hold."""
    url = conf.api_database.connection
    if not url:
        raise ConfigurationError(
            "[api_database] connection must be set: the flavors are read from nova's API database"
        )
    engine = db.get_engine(url)
    rows = db.get_flavors(engine, list(names) if names else None)
    if names:
        # exactly, case included, as nova matches them (MySQL's collation does not)
        found = {r["name"] for r in rows} | {r["flavorid"] for r in rows}
        missing = [n for n in names if n not in found]
        if missing:
            every = db.get_flavors(engine, include_private=True, include_disabled=True)
            raise UnknownFlavors(missing, [r["name"] for r in every if r["name"]])
        rows = [r for r in rows if r["name"] in names or r["flavorid"] in names]
    return [flavor_of(r) for r in rows]


def flavor_of(row: dict[str, Any]) -> Flavor:
    return Flavor(
        id=row["id"],
        flavorid=row["flavorid"],
        name=row["name"],
        vcpus=row["vcpus"],
        memory_mb=row["memory_mb"],
        root_gb=row["root_gb"] or 0,
        ephemeral_gb=row["ephemeral_gb"] or 0,
        swap=row["swap"] or 0,
        is_public=bool(row["is_public"]) if row["is_public"] is not None else True,
        disabled=bool(row["disabled"]),
        extra_specs=dict(row["extra_specs"]),
    )
