"""Builders shared by the filter and weigher unit tests."""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Iterator
from typing import Any

from filters import FilterOutcome
from filters.handler import apply_filter
from scheduler.conf import CONF
from scheduler.hosts.state import HostState
from scheduler.hosts.table import HostTable
from scheduler.objects import Aggregate, Flavor, ImageMeta, InstanceGroup, RequestSpec
from scheduler.request import SchedulingRequest

NOW = datetime.datetime(2026, 5, 1, 12, 0, 0)


def make_service(**overrides: Any) -> dict[str, Any]:
    service = {
        "host": "host1",
        "disabled": False,
        "disabled_reason": None,
        "forced_down": False,
        "last_seen_up": datetime.datetime.now(datetime.UTC).replace(tzinfo=None),
        "created_at": NOW - datetime.timedelta(days=30),
        "updated_at": None,
        "version": 74,
    }
    service.update(overrides)
    return service


def make_host(host: str = "host1", node: str | None = None, **attrs: Any) -> HostState:
    """A HostState with an up, enabled service; ``attrs`` are set as attributes
    (``service=...`` replaces the service dict)."""
    state = HostState(host, node or host)
    state.update(service=attrs.pop("service", None) or make_service(host=host))
    for name, value in attrs.items():
        setattr(state, name, value)
    return state


def make_spec(
    extra_specs: dict[str, str] | None = None,
    image_props: dict[str, Any] | None = None,
    group: InstanceGroup | None = None,
    hints: dict[str, list[Any]] | None = None,
    instance_uuid: str | None = "inst-1",
) -> SchedulingRequest:
    """A request as the driver hands it to filters and weighers."""
    spec = RequestSpec(
        flavor=Flavor(memory_mb=512, vcpus=1, root_gb=1, extra_specs=dict(extra_specs or {})),
        image=ImageMeta(properties=dict(image_props)) if image_props is not None else None,
        instance_group=group,
        scheduler_hints=dict(hints or {}),
        instance_uuid=instance_uuid,
    )
    return SchedulingRequest.of(spec)


def make_aggregate(agg_id: int, **metadata: str) -> Aggregate:
    return Aggregate(id=agg_id, uuid=f"agg-{agg_id}", name=f"agg{agg_id}", metadata=metadata)


@contextlib.contextmanager
def override(name: str, value: Any, group: str | None = None) -> Iterator[None]:
    CONF.set_override(name, value, group=group)
    try:
        yield
    finally:
        CONF.clear_override(name, group=group)


def tabled(hosts: list[HostState]) -> tuple[HostTable, Any]:
    """The hosts in a new host table (a small one, so that it grows on the way), and their
    rows. The hosts hold their table weakly: keep the table while the rows are used."""
    table = HostTable(capacity=4)
    for host in hosts:
        table.add(host)
    return table, table.rows_of(hosts)


def run_filter(filter_: Any, hosts: list[HostState], spec: Any) -> FilterOutcome:
    """One filter over ``hosts`` as the handler runs it host by host (``prepare`` once,
    then ``check``): the passing hosts and the removed ones with their reasons."""
    return apply_filter(filter_, list(hosts), spec)
