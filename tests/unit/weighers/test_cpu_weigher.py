"""CPUWeigher: vcpus_total * cpu_allocation_ratio - vcpus_used, minval 0."""

from __future__ import annotations

from tests.unit.filters.fakes import make_host, make_spec, override
from weighers.cpu import CPUWeigher
from weighers.handler import WeightHandler


def cpu_host(name, total, used, ratio):
    return make_host(name, vcpus_total=total, vcpus_used=used, cpu_allocation_ratio=ratio)


def test_raw_value_counts_the_allocation_ratio():
    assert CPUWeigher()._weigh_object(cpu_host("a", 8, 10, 16.0), None) == 118
    assert CPUWeigher()._weigh_object(cpu_host("a", 8, 10, 1.0), None) == -2


def test_missing_ratio_uses_novas_initial_ratio():
    assert CPUWeigher()._weigh_object(cpu_host("a", 8, 2, None), None) == 30


def test_more_free_vcpus_wins_and_negative_is_clamped():
    hosts = [cpu_host("over", 4, 8, 1.0), cpu_host("big", 16, 0, 1.0), cpu_host("mid", 8, 0, 1.0)]
    weighed = WeightHandler([CPUWeigher()]).weigh(hosts, make_spec())
    assert [(w.obj.host, w.weight) for w in weighed] == [
        ("big", 1.0),
        ("mid", 0.5),
        ("over", 0.0),
    ]


def test_multiplier_option():
    hosts = [cpu_host("a", 16, 0, 1.0), cpu_host("b", 8, 0, 1.0)]
    with override("cpu_weight_multiplier", -1.0, group="filter_scheduler"):
        weighed = WeightHandler([CPUWeigher()]).weigh(hosts, make_spec())
    assert [w.obj.host for w in weighed] == ["b", "a"]
