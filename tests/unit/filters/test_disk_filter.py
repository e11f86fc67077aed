"""DiskFilter / AggregateDiskFilter: root+ephemeral+swap with overcommit, the disk_gb limit."""

from __future__ import annotations

import pytest

from filters.aggregate_disk_filter import AggregateDiskFilter
from filters.disk_filter import DiskFilter, requested_disk_mb
from scheduler.objects import Flavor
from tests.unit.filters.fakes import make_aggregate, make_host, make_spec


def spec_for(root_gb=1, ephemeral_gb=0, swap=0):
    spec = make_spec()
    spec.flavor = Flavor(
        memory_mb=512, vcpus=1, root_gb=root_gb, ephemeral_gb=ephemeral_gb, swap=swap
    )
    return spec


def limits(spec, h):
    """The limits the filters recorded on ``spec`` for host ``h`` (empty if none)."""
    return spec.scratch.host_limits.get((h.host, h.nodename), {})


def host(total_gb=10, free_mb=10 * 1024, ratio=1.0, aggregates=()):
    return make_host(
        total_usable_disk_gb=total_gb,
        free_disk_mb=free_mb,
        disk_allocation_ratio=ratio,
        aggregates=list(aggregates),
    )


@pytest.mark.parametrize("cls", [DiskFilter, AggregateDiskFilter])
def test_flags_match_nova(cls):
    assert cls.RUN_ON_REBUILD is False
    assert cls.run_filter_once_per_request is False


def test_request_counts_root_ephemeral_and_swap_in_mb():
    assert requested_disk_mb(spec_for(root_gb=2, ephemeral_gb=1, swap=512)) == 3 * 1024 + 512


def test_fits_exactly_and_records_the_limit_in_gb():
    h = host(total_gb=10, free_mb=3 * 1024 + 512)
    spec = spec_for(root_gb=2, ephemeral_gb=1, swap=512)
    assert DiskFilter().host_passes(h, spec) is True
    assert limits(spec, h)["disk_gb"] == 10.0


def test_swap_alone_can_tip_the_balance():
    h = host(total_gb=10, free_mb=1024)
    assert DiskFilter().host_passes(h, spec_for(root_gb=1)) is True
    result = DiskFilter().host_passes(host(total_gb=10, free_mb=1024), spec_for(root_gb=1, swap=1))
    assert result.reason == "not enough free disk"


def test_overcommit_ratio_extends_usable_disk():
    # limit 20 GiB, used 10 GiB -> 10 GiB usable
    h = host(total_gb=10, free_mb=0, ratio=2.0)
    spec = spec_for(root_gb=10)
    assert DiskFilter().host_passes(h, spec) is True
    assert limits(spec, h)["disk_gb"] == 20.0
    assert not DiskFilter().host_passes(h, spec_for(root_gb=10, swap=1))


def test_instance_may_not_overcommit_against_itself():
    h = host(total_gb=10, free_mb=10 * 1024, ratio=10.0)
    spec = spec_for(root_gb=11)
    result = DiskFilter().host_passes(h, spec)
    assert result.reason == "flavor disk larger than host disk"
    assert limits(spec, h) == {}


def test_zero_disk_flavor_passes_a_full_host():
    h = host(total_gb=10, free_mb=0)
    assert DiskFilter().host_passes(h, spec_for(root_gb=0)) is True


def test_boot_from_volume_still_counts_the_root_disk_as_nova_did():
    spec = spec_for(root_gb=20)
    spec.is_bfv = True
    assert not DiskFilter().host_passes(host(total_gb=10), spec)


def test_aggregate_ratio_overrides_the_host_ratio():
    aggs = [
        make_aggregate(1, disk_allocation_ratio="3.0"),
        make_aggregate(2, disk_allocation_ratio="2.0"),
    ]
    h = host(total_gb=10, free_mb=0, ratio=1.0, aggregates=aggs)
    assert not DiskFilter().host_passes(h, spec_for(root_gb=10))
    spec = spec_for(root_gb=10)
    assert AggregateDiskFilter().host_passes(h, spec) is True
    assert limits(spec, h)["disk_gb"] == 20.0
    assert not AggregateDiskFilter().host_passes(h, spec_for(root_gb=11))


def test_unparsable_aggregate_ratio_means_the_host_ratio():
    aggs = [make_aggregate(1, disk_allocation_ratio="lots")]
    h = host(total_gb=10, free_mb=0, ratio=2.0, aggregates=aggs)
    spec = spec_for(root_gb=10)
    assert AggregateDiskFilter().host_passes(h, spec) is True
    assert limits(spec, h)["disk_gb"] == 20.0
