"""Builders for the example plugins' tests: HostStates, aggregates and requests."""

from __future__ import annotations

import datetime
from typing import Any

from scheduler.hosts.state import HostState
from scheduler.objects import Aggregate, Flavor, RequestSpec


def make_host(
    name: str,
    *,
    aggregates: list[Aggregate] | None = None,
    free_disk_gb: int = 100,
    stats: dict[str, str] | None = None,
) -> HostState:
    """A HostState as the host manager builds it from a compute node row."""
    now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    hs = HostState(name, name, cell_uuid="cell-1")
    hs.update(
        compute={
            "uuid": f"rp-{name}",
            "memory_mb": 8192,
            "free_ram_mb": 8192,
            "vcpus": 8,
            "local_gb": 200,
            "free_disk_gb": free_disk_gb,
            "hypervisor_hostname": name,
            "stats": dict(stats or {}),
            "updated_at": now,
        },
        service={"host": name, "disabled": False, "last_seen_up": now, "created_at": now},
        aggregates=list(aggregates or []),
    )
    return hs


_next_agg_id = iter(range(1, 10_000))


def make_aggregate(hosts: list[str] | None = None, **metadata: str) -> Aggregate:
    agg_id = next(_next_agg_id)
    return Aggregate(
        id=agg_id,
        uuid=f"agg-{agg_id}",
        name=f"agg{agg_id}",
        hosts=set(hosts or ()),
        metadata=metadata,
    )


def make_spec(project_id: str | None = "proj-a", **flavor: Any) -> RequestSpec:
    extra_specs = flavor.pop("extra_specs", {})
    flavor.setdefault("memory_mb", 512)
    flavor.setdefault("vcpus", 1)
    return RequestSpec(
        flavor=Flavor(extra_specs=extra_specs, **flavor), project_id=project_id, user_id="user"
    )
