"""The legacy capacity and AZ filters through the FilterHandler: multi-create consumption,
rebuild, grouped reasons."""

from __future__ import annotations

from filters.availability_zone_filter import AvailabilityZoneFilter
from filters.core_filter import CoreFilter
from filters.disk_filter import DiskFilter
from filters.handler import FilterHandler
from filters.ram_filter import RamFilter
from filters.retry_filter import RetryFilter
from scheduler.objects import Flavor
from tests.unit.filters.fakes import make_aggregate, make_host, make_spec

CHAIN = [RetryFilter(), AvailabilityZoneFilter(), RamFilter(), DiskFilter(), CoreFilter()]


def fleet():
    az1 = make_aggregate(1, availability_zone="az1")
    common = dict(
        total_usable_ram_mb=2048,
        total_usable_disk_gb=20,
        free_disk_mb=20 * 1024,
        vcpus_total=4,
        vcpus_used=0,
        ram_allocation_ratio=1.0,
        disk_allocation_ratio=1.0,
        cpu_allocation_ratio=1.0,
    )
    return [
        make_host("big", free_ram_mb=2048, aggregates=[az1], **common),
        make_host("small", free_ram_mb=512, aggregates=[az1], **common),
        make_host("elsewhere", free_ram_mb=2048, **common),
    ]


def spec_for(memory_mb=1024, az="az1"):
    spec = make_spec()
    spec.flavor = Flavor(memory_mb=memory_mb, vcpus=1, root_gb=5)
    spec.availability_zone = az
    return spec


def limits(spec, h):
    """The limits the filters recorded on ``spec`` for host ``h`` (empty if none)."""
    return spec.scratch.host_limits.get((h.host, h.nodename), {})


def test_chain_reports_grouped_reasons_and_sets_limits():
    hosts = fleet()
    spec = spec_for()
    report = FilterHandler(CHAIN).run(hosts, spec)
    assert [h.host for h in report.hosts] == ["big"]
    assert report.removed_by["AvailabilityZoneFilter"] == {
        "not in the requested availability zone": 1
    }
    assert report.removed_by["RamFilter"] == {"not enough free RAM": 1}
    assert limits(spec, hosts[0]) == {"memory_mb": 2048.0, "disk_gb": 20.0, "vcpu": 4.0}


def test_second_instance_of_a_multi_create_sees_the_first_ones_consumption():
    hosts = fleet()
    spec = spec_for(memory_mb=1024)
    first = FilterHandler(CHAIN).run(hosts, spec, index=0)
    assert [h.host for h in first.hosts] == ["big"]
    first.hosts[0].consume_from_request(spec)
    second = FilterHandler(CHAIN).run(first.hosts, spec, index=1)
    assert [h.host for h in second.hosts] == ["big"]
    first.hosts[0].consume_from_request(spec)
    third = FilterHandler(CHAIN).run(first.hosts, spec, index=2)
    assert third.hosts == []
    assert third.removed_by["RamFilter"] == {"not enough free RAM": 1}


def test_rebuild_skips_every_one_of_them():
    spec = spec_for(memory_mb=100_000, az="nowhere")
    spec.scheduler_hints = {"_nova_check_type": ["rebuild"]}
    report = FilterHandler(CHAIN).run(fleet(), spec)
    assert [h.host for h in report.hosts] == ["big", "small", "elsewhere"]
