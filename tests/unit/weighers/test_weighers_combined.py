"""The issue-3 weighers together through the WeightHandler, with nova's defaults."""

from __future__ import annotations

import pytest

from scheduler.objects import Destination, InstanceGroup
from tests.unit.filters.fakes import make_host, make_spec
from weighers.affinity import ServerGroupSoftAffinityWeigher, ServerGroupSoftAntiAffinityWeigher
from weighers.build_failure import BuildFailureWeigher
from weighers.cross_cell import CrossCellWeigher
from weighers.handler import WeightHandler
from weighers.hypervisor_version import HypervisorVersionWeigher
from weighers.image_props import ImagePropertiesWeigher
from weighers.metrics import MetricsWeigher
from weighers.pci import PCIWeigher
from weighers.ram import RAMWeigher

ALL = [
    BuildFailureWeigher,
    CrossCellWeigher,
    HypervisorVersionWeigher,
    ImagePropertiesWeigher,
    MetricsWeigher,
    PCIWeigher,
    RAMWeigher,
    ServerGroupSoftAffinityWeigher,
    ServerGroupSoftAntiAffinityWeigher,
]


def fleet():
    return [
        make_host(
            "failing",
            cell_uuid="c1",
            failed_builds=1,
            hypervisor_version=9,
            free_ram_mb=9000,
            instances={"m1": None},
        ),
        make_host(
            "pci",
            cell_uuid="c1",
            hypervisor_version=9,
            free_ram_mb=9000,
            pci_stats=[{"count": 4}],
            instances={},
        ),
        make_host(
            "member",
            cell_uuid="c1",
            hypervisor_version=1,
            free_ram_mb=1000,
            instances={"m1": None, "m2": None},
        ),
        make_host("plain", cell_uuid="c2", hypervisor_version=9, free_ram_mb=1000, instances={}),
    ]


def test_defaults_without_group_or_move():
    weighed = WeightHandler([cls() for cls in ALL]).weigh(fleet(), make_spec(), explain=True)
    assert weighed[-1].obj.host == "failing"  # one failed build outweighs everything else
    # hypervisor version + PCI (no device = 1.0) + RAM (minval 0: 1000/9000)
    weights = {w.obj.host: w.weight for w in weighed}
    assert weights["plain"] == pytest.approx(1.0 + 1.0 + 1 / 9)
    assert weights["pci"] == pytest.approx(1.0 + 0.0 + 1.0)
    assert weights["member"] == pytest.approx(0.0 + 1.0 + 1 / 9)
    assert weights["failing"] == pytest.approx(-1e6 + 1.0 + 1.0 + 1.0)
    assert [w.obj.host for w in weighed] == ["plain", "pci", "member", "failing"]
    assert set(weighed[0].contributions) == {cls.__name__ for cls in ALL}


def test_soft_affinity_group_and_cross_cell_move():
    spec = make_spec(group=InstanceGroup(uuid="g", policy="soft-affinity", members=["m1", "m2"]))
    weighed = WeightHandler([cls() for cls in ALL]).weigh(fleet(), spec)
    weights = {w.obj.host: w.weight for w in weighed}
    # member runs both members (1.0), failing one (0.5)
    assert weights["member"] == pytest.approx(1.0 + 1.0 + 1 / 9)
    assert weights["pci"] == pytest.approx(2.0)
    assert weights["failing"] == pytest.approx(-1e6 + 3.5)
    # a cross-cell move: the 1e6 multiplier keeps it in its source cell c2
    spec.requested_destination = Destination(cell_uuid="c2", allow_cross_cell_move=True)
    weighed = WeightHandler([cls() for cls in ALL]).weigh(fleet(), spec)
    assert weighed[0].obj.host == "plain"
    assert weighed[0].weight == pytest.approx(1e6 + 1.0 + 1.0 + 1 / 9)
