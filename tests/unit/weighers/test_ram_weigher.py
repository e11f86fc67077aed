"""RAMWeigher: free RAM, minval 0, ram_weight_multiplier."""

from __future__ import annotations

from tests.unit.filters.fakes import make_aggregate, make_host, make_spec, override
from weighers.handler import WeightHandler
from weighers.ram import RAMWeigher


def order(hosts):
    return [w.obj.host for w in WeightHandler([RAMWeigher()]).weigh(hosts, make_spec())]


def test_more_free_ram_wins():
    hosts = [make_host("a", free_ram_mb=512), make_host("b", free_ram_mb=8192)]
    assert order(hosts) == ["b", "a"]


def test_negative_multiplier_stacks():
    hosts = [make_host("a", free_ram_mb=512), make_host("b", free_ram_mb=8192)]
    with override("ram_weight_multiplier", -1.0, group="filter_scheduler"):
        assert order(hosts) == ["a", "b"]


def test_overcommitted_hosts_count_as_zero_free_ram():
    hosts = [
        make_host("over", free_ram_mb=-4096),
        make_host("zero", free_ram_mb=0),
        make_host("some", free_ram_mb=1024),
    ]
    weighed = WeightHandler([RAMWeigher()]).weigh(hosts, make_spec())
    assert [(w.obj.host, w.weight) for w in weighed] == [
        ("some", 1.0),
        ("over", 0.0),
        ("zero", 0.0),
    ]


def test_aggregate_multiplier_override():
    stack = make_aggregate(1, ram_weight_multiplier="-1.0")
    hosts = [
        make_host("a", free_ram_mb=1000, aggregates=[stack]),
        make_host("b", free_ram_mb=500),
        make_host("c", free_ram_mb=0),
    ]
    weighed = WeightHandler([RAMWeigher()]).weigh(hosts, make_spec())
    assert [(w.obj.host, w.weight) for w in weighed] == [("b", 0.5), ("c", 0.0), ("a", -1.0)]


def test_raw_value_and_option():
    assert RAMWeigher()._weigh_object(make_host(free_ram_mb=42), None) == 42
    assert RAMWeigher.minval == 0
    assert RAMWeigher.multiplier_option == "ram_weight_multiplier"
