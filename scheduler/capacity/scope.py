"""The names an operator narrows capacity and explain with (an availability zone, an
aggregate, a flavor), checked against what the cloud knows before anything is counted.

nova matches these names exactly, case included: an AZ nobody defined, or one spelt in
another case, filters every host out, and the answer would read as "no capacity" or "no
valid host". So a name the cloud does not know is refused with the ones it does know, and
the one that differs only in case, if any.

An availability zone is known as nova knows it: the ``availability_zone`` metadata of an
aggregate, and ``[DEFAULT] default_availability_zone`` when some host is in no such
aggregate (or when a cell could not be read, whose hosts may be).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

# at most this many known names are listed in the message
SHOWN = 30


class UnknownName(ValueError):
    """Names the cloud does not know; the message lists the known ones."""

    def __init__(self, kind: str, names: str | list[str], known: Iterable[str]):
        self.kind = kind
        self.names = [names] if isinstance(names, str) else list(names)
        self.known = sorted(set(known))
        super().__init__(unknown_message(kind, self.names, self.known))


def unknown_message(kind: str, names: list[str], known: list[str]) -> str:
    """``no KIND 'NAME'[ (did you mean 'Name'?)]; known: a, b, c``."""
    parts = []
    for name in names:
        same = [k for k in known if k.casefold() == name.casefold()]
        parts.append(f"{name!r}" + (f" (did you mean {same[0]!r}?)" if same else ""))
    shown = ", ".join(known[:SHOWN]) or "none"
    if len(known) > SHOWN:
        shown += f", ... ({len(known) - SHOWN} more)"
    return f"no {kind} {', '.join(parts)}; known: {shown}"


def aggregate_zones(aggregates: Iterable[Any]) -> set[str]:
    """The availability zones the aggregates' metadata defines."""
    return {zone for agg in aggregates if (zone := (agg.metadata or {}).get("availability_zone"))}


def known_zones(
    aggregates: Iterable[Any], hosts: Iterable[Any], default_zone: str, *, partial: bool = False
) -> set[str]:
    """Every AZ nova knows: the aggregates', and ``default_zone`` when a host is in none
    of them (``partial``: some hosts could not be read, so it may be)."""
    zones = aggregate_zones(aggregates)
    if partial or any(not host.availability_zone for host in hosts):
        zones.add(default_zone)
    return zones


def check_scope(
    driver: Any, *, availability_zone: str | None = None, aggregate: str | None = None
) -> None:
    """Raise UnknownName unless the cloud of ``driver`` (a FilterScheduler) knows the
    availability zone and the aggregate named. Every cell is read only when the zone is
    not an aggregate's (to find a host in no zone, which is in the default one)."""
    if not availability_zone and not aggregate:
        return
    source = driver.host_manager
    aggregates = list(source.aggregates)  # every one (by metadata: those that have some)
    if aggregate:
        names = {agg.name for agg in aggregates if agg.name}
        if aggregate not in names:
            raise UnknownName("aggregate", aggregate, names)
    if not availability_zone or availability_zone in aggregate_zones(aggregates):
        return
    hosts = driver.all_hosts(driver.new_request(_context(), _any_flavor()))
    default = driver.conf.default_availability_zone
    zones = known_zones(aggregates, hosts, default, partial=bool(missing_cells(source)))
    if availability_zone not in zones:
        raise UnknownName("availability zone", availability_zone, zones)


def missing_cells(source: Any) -> list[str]:
    """The enabled cells of ``source`` (a HostManager) whose last read failed or did not
    answer in time: their hosts are missing from what was read."""
    status = getattr(source, "status", None)
    if status is None:
        return []
    return sorted(cell["name"] or cell["uuid"] for cell in status() if cell["failing"])


def _context() -> Any:
    import uuid as uuidlib
    from types import SimpleNamespace

    return SimpleNamespace(request_id=f"req-scope-{uuidlib.uuid4()}", project_id=None, user_id=None)


def _any_flavor() -> Any:
    from scheduler.objects import Flavor, RequestSpec

    return RequestSpec(flavor=Flavor(name="scope", vcpus=0, memory_mb=0), num_instances=1)
