"""HostState: limits are never per request; a compute-node report is read by column name."""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest

from db.queries import ComputeNodeRow
from scheduler.hosts.state import LIMITS_ARE_PER_REQUEST, NO_LIMITS, HostState
from tests.db_rows import compute_node_row
from tests.unit.filters.fakes import make_host, make_spec

NOW = datetime.datetime(2026, 5, 1, 12, 0, 0)


def test_limits_are_an_empty_mapping_shared_by_every_host_state():
    a, b = HostState("a", "a"), make_host("b")
    assert a.limits is b.limits is NO_LIMITS
    assert dict(a.limits) == {} and len(a.limits) == 0 and "memory_mb" not in a.limits
    assert a.limits.get("memory_mb") is None and a.limits == {}
    assert {**a.limits} == {}
    assert copy.copy(b).limits is NO_LIMITS
    with pytest.raises(KeyError):
        a.limits["memory_mb"]  # noqa: B018


@pytest.mark.parametrize(
    "write",
    [
        lambda limits: limits.__setitem__("memory_mb", 4096.0),
        lambda limits: limits.update(vcpu=8.0),
        lambda limits: limits.setdefault("disk_gb", 10.0),
        lambda limits: limits.__delitem__("memory_mb"),
        lambda limits: limits.pop("memory_mb"),
        lambda limits: limits.popitem(),
        lambda limits: limits.clear(),
    ],
)
def test_a_write_into_limits_raises_and_says_what_to_do_instead(write):
    host = make_host("h")
    with pytest.raises(TypeError) as raised:
        write(host.limits)
    assert str(raised.value) == (
        "HostState is shared between requests; record a per-request limit with "
        "spec_obj.set_host_limit(host_state, name, value)"
    )
    assert str(raised.value) == LIMITS_ARE_PER_REQUEST
    assert dict(host.limits) == {} and dict(make_host("other").limits) == {}


def test_a_nova_style_filter_writing_limits_fails_and_set_host_limit_is_per_request():
    class OldNovaFilter:
        def host_passes(self, host_state, spec_obj):
            host_state.limits["memory_mb"] = 1024.0  # what nova's RamFilter did
            return True

    host, spec = make_host("h"), make_spec()
    with pytest.raises(TypeError, match="set_host_limit"):
        OldNovaFilter().host_passes(host, spec)
    spec.set_host_limit(host, "memory_mb", 1024.0)
    assert dict(host.limits) == {}
    assert spec.scratch.host_limits == {("h", "h"): {"memory_mb": 1024.0}}
    assert make_spec().scratch.host_limits == {}


def _report(**over) -> ComputeNodeRow:
    values: dict[str, Any] = dict(
        uuid="u1",
        memory_mb=4096,
        free_ram_mb=1024,
        free_disk_gb=50,
        local_gb=100,
        vcpus=8,
        vcpus_used=3,
        updated_at=NOW,
    )
    values.update(over)
    return compute_node_row("h", **values)


def test_a_report_is_applied_from_a_row_or_from_a_mapping_alike():
    by_row, by_mapping = HostState("h", "h"), HostState("h", "h")
    row = _report(disk_available_least=20, stats='{"num_instances": "4"}')
    by_row.update_from_row(row)
    by_mapping.update(compute=row._asdict())
    for hs in (by_row, by_mapping):
        assert (hs.uuid, hs.free_ram_mb, hs.free_disk_mb) == ("u1", 1024, 20 * 1024)
        assert (hs.vcpus_total, hs.vcpus_used, hs.num_instances) == (8, 3, 4)
        assert hs.cpu_allocation_ratio == 4.0  # NULL: nova's initial ratio
    # a mapping may leave out what it does not know
    partial = HostState("h", "h")
    partial.update(compute={"uuid": "u2", "free_disk_gb": 1})
    assert (partial.uuid, partial.free_disk_mb, partial.free_ram_mb) == ("u2", 1024, 0)


def test_an_older_report_does_not_undo_our_consumption():
    hs = HostState("h", "h")
    hs.update_from_row(_report())
    hs.consume_from_request(make_spec())  # 512 MB
    assert hs.free_ram_mb == 512
    hs.update_from_row(_report(free_ram_mb=2048, updated_at=NOW - datetime.timedelta(hours=1)))
    assert hs.free_ram_mb == 512
    hs.update_from_row(_report(free_ram_mb=2048, updated_at=hs.updated))
    assert hs.free_ram_mb == 2048
