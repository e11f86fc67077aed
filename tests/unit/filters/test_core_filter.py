"""CoreFilter / AggregateCoreFilter: vCPUs with overcommit, the vcpu limit, the 0-vCPU host."""

from __future__ import annotations

import logging

import pytest

from filters.aggregate_core_filter import AggregateCoreFilter
from filters.core_filter import CoreFilter
from scheduler.objects import Flavor
from tests.unit.filters.fakes import make_aggregate, make_host, make_spec


def spec_for(vcpus: int):
    spec = make_spec()
    spec.flavor = Flavor(memory_mb=512, vcpus=vcpus, root_gb=1)
    return spec


def limits(spec, h):
    """The limits the filters recorded on ``spec`` for host ``h`` (empty if none)."""
    return spec.scratch.host_limits.get((h.host, h.nodename), {})


def host(total=4, used=0, ratio=1.0, aggregates=()):
    return make_host(
        vcpus_total=total,
        vcpus_used=used,
        cpu_allocation_ratio=ratio,
        aggregates=list(aggregates),
    )


@pytest.mark.parametrize("cls", [CoreFilter, AggregateCoreFilter])
def test_flags_match_nova(cls):
    assert cls.RUN_ON_REBUILD is False
    assert cls.run_filter_once_per_request is False


def test_fits_exactly_and_records_the_limit():
    h = host(total=4, used=2)
    spec = spec_for(2)
    assert CoreFilter().host_passes(h, spec) is True
    assert limits(spec, h)["vcpu"] == 4


def test_one_vcpu_too_many_is_rejected():
    h = host(total=4, used=3)
    spec = spec_for(2)
    result = CoreFilter().host_passes(h, spec)
    assert result.reason == "not enough free vCPUs"
    assert "vcpu" not in limits(spec, h)


def test_overcommit_ratio_extends_vcpus():
    h = host(total=4, used=14, ratio=4.0)  # limit 16 -> 2 free
    spec = spec_for(2)
    assert CoreFilter().host_passes(h, spec) is True
    assert limits(spec, h)["vcpu"] == 16.0
    assert not CoreFilter().host_passes(h, spec_for(3))


def test_instance_may_not_overcommit_against_itself():
    result = CoreFilter().host_passes(host(total=4, used=0, ratio=16.0), spec_for(5))
    assert result.reason == "flavor vCPUs more than host vCPUs"


def test_host_reporting_no_vcpus_passes_with_a_warning(caplog):
    h = host(total=0, used=10)
    spec = spec_for(64)
    with caplog.at_level(logging.WARNING):
        assert CoreFilter().host_passes(h, spec) is True
    assert "assuming CPU collection broken" in caplog.text
    assert limits(spec, h) == {}


def test_zero_aggregate_ratio_gives_no_limit_and_no_room():
    agg = make_aggregate(1, cpu_allocation_ratio="0")
    h = host(total=4, used=0, ratio=4.0, aggregates=[agg])
    spec = spec_for(1)
    assert not AggregateCoreFilter().host_passes(h, spec)
    assert "vcpu" not in limits(spec, h)
    # a flavor asking no vCPUs fits even so, with no limit to record
    spec = spec_for(0)
    assert AggregateCoreFilter().host_passes(h, spec) is True
    assert "vcpu" not in limits(spec, h)


def test_aggregate_ratio_overrides_the_host_ratio():
    aggs = [
        make_aggregate(1, cpu_allocation_ratio="8"),
        make_aggregate(2, cpu_allocation_ratio="2.5"),
    ]
    h = host(total=4, used=8, ratio=16.0, aggregates=aggs)  # limit 10 -> 2 free
    spec = spec_for(2)
    assert AggregateCoreFilter().host_passes(h, spec) is True
    assert limits(spec, h)["vcpu"] == 10.0
    assert not AggregateCoreFilter().host_passes(h, spec_for(3))
    assert CoreFilter().host_passes(h, spec_for(3)) is True


def test_unparsable_aggregate_ratio_means_the_host_ratio():
    aggs = [make_aggregate(1, cpu_allocation_ratio="2"), make_aggregate(2, cpu_allocation_ratio="")]
    h = host(total=4, used=0, ratio=4.0, aggregates=aggs)
    spec = spec_for(4)
    assert AggregateCoreFilter().host_passes(h, spec) is True
    assert limits(spec, h)["vcpu"] == 16.0
