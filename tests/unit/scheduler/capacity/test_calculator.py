"""The capacity a flavor is given equals the boots of it the driver then takes, one after
another, before its first NoValidHost (placing on one host changes no other host's answer,
so counting per host is the same as placing in the weighers' order).

The driver is the real FilterScheduler with its filters and a real ProviderView; Placement
is a stand-in that answers from that view (so it refuses what the view has no room for) and
takes the claims the view then counts.
"""

from __future__ import annotations

import random

import pytest

from placement_client.view import Inventory
from scheduler.capacity import CapacityCalculator
from scheduler.capacity.calculator import _asked
from scheduler.conf import CONF
from scheduler.objects import Aggregate, Flavor, RequestSpec
from tests.unit.scheduler.capacity.cloud import (
    az_aggregate,
    boots_until_no_valid_host,
    view_cloud,
)
from tests.unit.scheduler.drivers.fakes import make_host


def test_capacity_is_what_placement_holds_per_host_and_equals_theboots_until_no_valid_host():
    aggregates = [az_aggregate("az-a", ["big"], 1), az_aggregate("az-b", ["small"], 2)]
    hosts = [
        make_host("big", vcpus=16, ram_mb=32768, disk_gb=400, aggregates=[aggregates[0]]),
        make_host("small", vcpus=4, ram_mb=8192, disk_gb=100, aggregates=[aggregates[1]]),
        make_host("off", vcpus=64, ram_mb=65536, disabled=True),
        make_host("dead", vcpus=64, ram_mb=65536, down=True),
    ]
    flavor = Flavor(name="m1.medium", vcpus=2, memory_mb=4096, root_gb=40)
    driver, _ = view_cloud(hosts, aggregates)
    cap = CapacityCalculator(driver).flavor(flavor)
    # with nova's cpu_allocation_ratio 4.0, big: min(64/2, 32768/4096, 400/40) = 8;
    # small: min(16/2, 8192/4096, 100/40) = 2; off and dead: none
    assert cap.total == 10
    assert cap.by_host == {"big/big": 8, "small/small": 2}
    assert cap.by_az == {"az-a": 8, "az-b": 2}
    assert cap.by_aggregate == {"az-a": 8, "az-b": 2}
    assert cap.source == "view"
    # what no further m1.medium can use on the up hosts: big 48 vCPUs and 80 GB, small 12
    # vCPUs and 20 GB
    assert cap.stranded == {"VCPU": 48.0 + 12.0, "MEMORY_MB": 0.0, "DISK_GB": 80.0 + 20.0}
    assert boots_until_no_valid_host(driver, flavor) == cap.total


def test_a_flavor_that_fits_nowhere_says_why():
    hosts = [make_host("h1", vcpus=4, ram_mb=4096), make_host("h2", vcpus=4, ram_mb=4096)]
    driver, _ = view_cloud(hosts)
    cap = CapacityCalculator(driver).flavor(Flavor(name="huge", vcpus=2, memory_mb=8192))
    assert cap.total == 0 and cap.by_host == {}
    assert cap.reason  # the NoValidHost the scheduler would give
    assert cap.stranded["VCPU"] == 32.0 and cap.stranded["MEMORY_MB"] == 8192.0


def test_the_availability_zone_and_the_aggregate_narrow_the_count():
    aggregates = [
        az_aggregate("az-a", ["h0", "h1"], 1),
        az_aggregate("az-b", ["h2", "h3"], 2),
        Aggregate(id=3, uuid="agg-ssd", name="ssd", hosts={"h1", "h2"}, metadata={}),
    ]
    hosts = [
        make_host(
            f"h{i}",
            vcpus=8,
            ram_mb=8192,
            disk_gb=100,
            aggregates=[a for a in aggregates if f"h{i}" in a.hosts],
        )
        for i in range(4)
    ]
    flavor = Flavor(name="m1.small", vcpus=1, memory_mb=2048, root_gb=20)
    driver, _ = view_cloud(hosts, aggregates)
    assert CapacityCalculator(driver).flavor(flavor).total == 16
    in_az = CapacityCalculator(driver, availability_zone="az-b").flavor(flavor)
    assert in_az.by_host == {"h2/h2": 4, "h3/h3": 4}
    in_both = CapacityCalculator(driver, availability_zone="az-a", aggregate="ssd").flavor(flavor)
    assert in_both.by_host == {"h1/h1": 4}
    assert in_both.stranded["VCPU"] == 28.0  # h1's 32 vCPUs (ratio 4.0) less the 4 counted


@pytest.fixture
def dependent_filters():
    CONF.set_override(
        "enabled_filters",
        ["ComputeFilter", "AvailabilityZoneFilter", "AggregateNumInstancesFilter"],
        group="filter_scheduler",
    )
    CONF.set_override("max_instances_per_host", 3, group="filter_scheduler")
    yield
    CONF.clear_override("enabled_filters", group="filter_scheduler")
    CONF.clear_override("max_instances_per_host", group="filter_scheduler")


def test_filters_that_depend_on_what_a_host_took_are_asked_after_each_instance(dependent_filters):
    # Placement holds 16 of the flavor on each host; the instance count stops at 3 per host,
    # and at 2 on the host whose aggregate says so
    two = Aggregate(
        id=1, uuid="agg-two", name="two", hosts={"h-agg"}, metadata={"max_instances_per_host": "2"}
    )
    hosts = [
        make_host("h-count", vcpus=32, ram_mb=65536, disk_gb=1000),
        make_host("h-agg", vcpus=32, ram_mb=65536, disk_gb=1000, aggregates=[two]),
    ]
    flavor = Flavor(name="m1.small", vcpus=1, memory_mb=2048, root_gb=1)
    driver, _ = view_cloud(hosts, [two])
    cap = CapacityCalculator(driver).flavor(flavor)
    assert cap.by_host == {"h-count/h-count": 3, "h-agg/h-agg": 2}
    # counted on private copies: the hosts the scheduler holds took nothing
    assert [(h.num_instances, h.free_ram_mb) for h in hosts] == [(0, 65536), (0, 65536)]
    assert boots_until_no_valid_host(driver, flavor) == cap.total == 5


@pytest.mark.parametrize("seed", range(12))
def test_random_fleets_take_as_many_boots_as_their_capacity(seed):
    rng = random.Random(seed)
    hosts = [
        make_host(
            f"h{i}",
            vcpus=rng.choice([2, 4, 8, 16]),
            ram_mb=rng.choice([2048, 4096, 8192, 16384]),
            disk_gb=rng.choice([20, 50, 100, 200]),
            disabled=rng.random() < 0.15,
            down=rng.random() < 0.1,
        )
        for i in range(rng.randint(1, 8))
    ]
    flavor = Flavor(
        name="f",
        vcpus=rng.choice([1, 2, 4]),
        memory_mb=rng.choice([512, 1024, 2048, 4096]),
        root_gb=rng.choice([0, 10, 20]),
    )
    driver, _ = view_cloud(hosts)
    cap = CapacityCalculator(driver).flavor(flavor)
    assert boots_until_no_valid_host(driver, flavor) == cap.total


def test_a_dedicated_cpu_flavor_strands_pcpu_and_no_vcpu():
    hosts = [
        make_host("pinned", vcpus=8, ram_mb=65536, disk_gb=1000),
        make_host("pinned-small", vcpus=8, ram_mb=65536, disk_gb=1000),
        make_host("shared", vcpus=4, ram_mb=8192, disk_gb=100),
    ]
    # the pinned hosts report their CPUs as PCPU only; "shared" as VCPU only, which the
    # VCPU fallback query finds, as nova's does
    inventories = {
        "pinned": {"PCPU": Inventory(10), "VCPU": None},
        "pinned-small": {"PCPU": Inventory(3), "VCPU": None},
    }
    flavor = Flavor(
        name="pinned.4",
        vcpus=4,
        memory_mb=4096,
        root_gb=10,
        extra_specs={"hw:cpu_policy": "dedicated"},
    )
    driver, _ = view_cloud(hosts, inventories=inventories)
    cap = CapacityCalculator(driver).flavor(flavor)
    # pinned: 10 PCPU / 4 = 2; pinned-small: 3 PCPU, none; shared (fallback): 8192 MB / 4096
    assert cap.by_host == {"pinned/pinned": 2, "shared/shared": 2}
    # PCPU: pinned 10 - 2 * 4, pinned-small 3 (in no summary: from the provider view),
    # shared none; memory and disk from the compute nodes, as before
    assert cap.stranded == {
        "PCPU": 2.0 + 3.0,
        "MEMORY_MB": (65536 - 2 * 4096) + 65536 + 0.0,
        "DISK_GB": (1000 - 2 * 10) + 1000 + (100 - 2 * 10),
    }
    assert boots_until_no_valid_host(driver, flavor) == cap.total == 4


def _custom_class_cloud():
    hosts = [
        make_host("gpu", vcpus=8, ram_mb=8192, disk_gb=100),
        make_host("gpu-busy", vcpus=8, ram_mb=2048, disk_gb=100),
        make_host("plain", vcpus=8, ram_mb=8192, disk_gb=100),
    ]
    inventories = {"gpu": {"CUSTOM_X": Inventory(4)}, "gpu-busy": {"CUSTOM_X": Inventory(3)}}
    flavor = Flavor(
        name="x.1", vcpus=2, memory_mb=4096, root_gb=10, extra_specs={"resources:CUSTOM_X": "1"}
    )
    driver, _ = view_cloud(hosts, inventories=inventories)
    return driver, flavor


def test_a_flavor_asking_a_custom_class_strands_it():
    driver, flavor = _custom_class_cloud()
    cap = CapacityCalculator(driver).flavor(flavor)
    # gpu: min(32 / 2, 8192 / 4096, 100 / 10, 4 / 1) = 2; gpu-busy: not 4096 MB; plain: no X
    assert cap.by_host == {"gpu/gpu": 2}
    # CUSTOM_X: gpu 4 - 2, gpu-busy 3 (from the provider view), plain none
    assert cap.stranded == {
        "VCPU": (32 - 2 * 2) + 32 + 32.0,
        "MEMORY_MB": 0 + 2048 + 8192.0,
        "DISK_GB": (100 - 2 * 10) + 100 + 100.0,
        "CUSTOM_X": 2.0 + 3.0,
    }
    assert boots_until_no_valid_host(driver, flavor) == cap.total == 2


def test_without_a_provider_view_a_class_counts_on_the_hosts_placement_summarised(monkeypatch):
    driver, flavor = _custom_class_cloud()
    # the candidates still come from the view; the calculator no longer sees it
    monkeypatch.setattr(driver, "view", None)
    cap = CapacityCalculator(driver).flavor(flavor)
    assert cap.stranded["CUSTOM_X"] == 2.0  # gpu's alone: gpu-busy's 3 are unknown
    assert cap.stranded["VCPU"] == (32 - 2 * 2) + 32 + 32.0  # the compute nodes, all hosts


@pytest.mark.parametrize(
    ("extra_specs", "asked"),
    [
        ({}, {"VCPU": 4, "MEMORY_MB": 2048, "DISK_GB": 20}),
        ({"hw:cpu_policy": "dedicated"}, {"PCPU": 4, "MEMORY_MB": 2048, "DISK_GB": 20}),
        (
            {
                "resources:VCPU": "0",
                "resources:CUSTOM_X": "2",
                "resources1:CUSTOM_X": "1",
                "resources1:VGPU": "1",
                "resources:DISK_GB": "5",
            },
            {"MEMORY_MB": 2048, "DISK_GB": 5, "CUSTOM_X": 3, "VGPU": 1},
        ),
    ],
)
def test_what_one_instance_asks_is_what_placement_is_asked_summed_over_groups(extra_specs, asked):
    flavor = Flavor(name="f", vcpus=4, memory_mb=2048, root_gb=20, extra_specs=extra_specs)
    assert _asked(RequestSpec(flavor=flavor), CONF) == asked


def test_figures_counted_while_a_cell_fails_name_it():
    hosts = [make_host("h1"), make_host("h2")]
    driver, _ = view_cloud(hosts)
    flavor = Flavor(name="m1.small", vcpus=1, memory_mb=1024)
    whole = CapacityCalculator(driver).flavor(flavor)
    assert not whole.partial and whole.as_dict()["missing_cells"] == []

    # the host manager says a cell's last read failed: its hosts are not in the figures
    driver.host_manager.status = lambda: [
        {"name": "cell1", "uuid": "c1", "hosts": 2, "last_ok_at": 1.0, "failing": False},
        {"name": "cell2", "uuid": "c2", "hosts": 0, "last_ok_at": None, "failing": True},
    ]
    partial = CapacityCalculator(driver).flavor(flavor)
    assert partial.partial and partial.missing_cells == ["cell2"]
    assert partial.as_dict()["partial"] is True
    assert partial.as_dict()["missing_cells"] == ["cell2"]
