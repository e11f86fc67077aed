"""RamFilter / AggregateRamFilter: RAM with overcommit, the memory_mb limit, aggregate ratios."""

from __future__ import annotations

import logging

import pytest

from filters import BaseHostFilter
from filters.aggregate_ram_filter import AggregateRamFilter
from filters.ram_filter import RamFilter, record_limit
from scheduler.objects import Flavor
from tests.unit.filters.fakes import make_aggregate, make_host, make_spec


def spec_for(memory_mb: int):
    spec = make_spec()
    spec.flavor = Flavor(memory_mb=memory_mb, vcpus=1, root_gb=1)
    return spec


def limits(spec, h):
    """The limits the filters recorded on ``spec`` for host ``h`` (empty if none)."""
    return spec.scratch.host_limits.get((h.host, h.nodename), {})


def host(total=1024, free=1024, ratio=1.0, aggregates=()):
    return make_host(
        total_usable_ram_mb=total,
        free_ram_mb=free,
        ram_allocation_ratio=ratio,
        aggregates=list(aggregates),
    )


@pytest.mark.parametrize("cls", [RamFilter, AggregateRamFilter])
def test_flags_match_nova(cls):
    assert issubclass(cls, BaseHostFilter)
    assert cls.RUN_ON_REBUILD is False
    assert cls.run_filter_once_per_request is False


def test_fits_exactly_and_records_the_limit():
    h = host(total=1024, free=512)
    spec = spec_for(512)
    assert RamFilter().host_passes(h, spec) is True
    assert limits(spec, h)["memory_mb"] == 1024


def test_one_mb_too_many_is_rejected_without_a_limit():
    h = host(total=1024, free=512)
    spec = spec_for(513)
    result = RamFilter().host_passes(h, spec)
    assert not result
    assert result.reason == "not enough free RAM"
    assert "memory_mb" not in limits(spec, h)


def test_overcommit_ratio_extends_usable_ram():
    # limit 1536, used 1024 -> 512 usable
    h = host(total=1024, free=0, ratio=1.5)
    spec = spec_for(512)
    assert RamFilter().host_passes(h, spec) is True
    assert limits(spec, h)["memory_mb"] == 1536.0
    assert not RamFilter().host_passes(host(total=1024, free=0, ratio=1.5), spec_for(513))


def test_negative_free_ram_counts_as_used():
    # free can go negative when the host is already overcommitted
    h = host(total=1024, free=-512, ratio=2.0)  # limit 2048, used 1536 -> 512 usable
    assert RamFilter().host_passes(h, spec_for(512)) is True
    assert not RamFilter().host_passes(h, spec_for(513))


def test_instance_may_not_overcommit_against_itself():
    # the ratio would give 4096 MB, but the flavor is bigger than the physical RAM
    h = host(total=1024, free=1024, ratio=4.0)
    spec = spec_for(1025)
    result = RamFilter().host_passes(h, spec)
    assert result.reason == "flavor RAM larger than host RAM"
    assert limits(spec, h) == {}


def test_missing_ratio_falls_back_to_one():
    h = host(total=1024, free=1024, ratio=None)
    spec = spec_for(1024)
    assert RamFilter().host_passes(h, spec) is True
    assert limits(spec, h)["memory_mb"] == 1024


def test_ram_filter_ignores_aggregate_ratio():
    agg = make_aggregate(1, ram_allocation_ratio="2.0")
    assert not RamFilter().host_passes(host(free=0, aggregates=[agg]), spec_for(512))


def test_aggregate_ratio_overrides_the_host_ratio():
    agg = make_aggregate(1, ram_allocation_ratio="2.0")
    h = host(total=1024, free=0, ratio=1.0, aggregates=[agg])
    spec = spec_for(1024)
    assert AggregateRamFilter().host_passes(h, spec) is True
    assert limits(spec, h)["memory_mb"] == 2048.0


def test_aggregate_ratio_may_also_be_lower_than_the_host_ratio():
    agg = make_aggregate(1, ram_allocation_ratio="1.0")
    h = host(total=1024, free=0, ratio=3.0, aggregates=[agg])
    assert not AggregateRamFilter().host_passes(h, spec_for(1))


def test_smallest_aggregate_ratio_wins():
    aggs = [
        make_aggregate(1, ram_allocation_ratio="3.0"),
        make_aggregate(2, ram_allocation_ratio="2"),
    ]
    h = host(total=1000, free=0, ratio=1.0, aggregates=aggs)
    spec = spec_for(1000)
    assert AggregateRamFilter().host_passes(h, spec) is True
    assert limits(spec, h)["memory_mb"] == 2000.0
    assert not AggregateRamFilter().host_passes(h, spec_for(1001))


def test_without_aggregate_ratio_the_host_ratio_is_used():
    h = host(total=1000, free=0, ratio=1.5, aggregates=[make_aggregate(1, other="x")])
    spec = spec_for(500)
    assert AggregateRamFilter().host_passes(h, spec) is True
    assert limits(spec, h)["memory_mb"] == 1500.0


def test_any_unparsable_aggregate_ratio_means_the_host_ratio(caplog):
    # nova's validate_num_values: one bad value discards them all
    aggs = [
        make_aggregate(1, ram_allocation_ratio="abc"),
        make_aggregate(2, ram_allocation_ratio="3"),
    ]
    h = host(total=1000, free=0, ratio=1.5, aggregates=aggs)
    spec = spec_for(500)
    with caplog.at_level(logging.WARNING):
        assert AggregateRamFilter().host_passes(h, spec) is True
    assert limits(spec, h)["memory_mb"] == 1500.0
    assert "ram_allocation_ratio" in caplog.text


def test_record_limit_writes_the_host_limits():
    h = make_host()
    spec = make_spec()
    record_limit(spec, h, "memory_mb", 10.0)
    assert limits(spec, h) == {"memory_mb": 10.0}
