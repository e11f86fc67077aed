"""DiskWeigher: free_disk_mb, minval 0, disk_weight_multiplier."""

from __future__ import annotations

from tests.unit.filters.fakes import make_host, make_spec, override
from weighers.disk import DiskWeigher
from weighers.handler import WeightHandler


def test_more_free_disk_wins():
    hosts = [make_host("a", free_disk_mb=10240), make_host("b", free_disk_mb=40960)]
    weighed = WeightHandler([DiskWeigher()]).weigh(hosts, make_spec())
    assert [(w.obj.host, w.weight) for w in weighed] == [("b", 1.0), ("a", 0.25)]


def test_negative_free_disk_is_clamped_to_zero():
    assert DiskWeigher.minval == 0
    hosts = [make_host("a", free_disk_mb=-1024), make_host("b", free_disk_mb=1024)]
    weighed = WeightHandler([DiskWeigher()]).weigh(hosts, make_spec())
    assert [(w.obj.host, w.weight) for w in weighed] == [("b", 1.0), ("a", 0.0)]


def test_multiplier_option():
    hosts = [make_host("a", free_disk_mb=10240), make_host("b", free_disk_mb=40960)]
    with override("disk_weight_multiplier", -1.0, group="filter_scheduler"):
        weighed = WeightHandler([DiskWeigher()]).weigh(hosts, make_spec())
    assert [w.obj.host for w in weighed] == ["a", "b"]
