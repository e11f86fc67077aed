"""HypervisorVersionWeigher: hypervisor_version or 0, no minval, multiplier 1.0."""

from __future__ import annotations

from tests.unit.filters.fakes import make_aggregate, make_host, make_spec, override
from tests.unit.weighers.fakes import weigh_all
from weighers.handler import WeightHandler
from weighers.hypervisor_version import HypervisorVersionWeigher


def weigh(hosts):
    weighed = WeightHandler([HypervisorVersionWeigher()]).weigh(hosts, make_spec())
    return [(w.obj.host, w.weight) for w in weighed]


def test_newer_hypervisor_wins():
    hosts = [
        make_host("old", hypervisor_version=6002000),
        make_host("new", hypervisor_version=9000000),
        make_host("mid", hypervisor_version=7501000),
    ]
    result = weigh(hosts)
    assert [h for h, _ in result] == ["new", "mid", "old"]
    assert result[0][1] == 1.0 and result[-1][1] == 0.0
    # no minval: normalised between the fleet's own oldest and newest
    assert dict(result)["mid"] == (7501000 - 6002000) / (9000000 - 6002000)


def test_missing_version_counts_as_zero():
    assert HypervisorVersionWeigher()._weigh_object(make_host(hypervisor_version=None), None) == 0
    result = weigh(
        [make_host("none", hypervisor_version=None), make_host("v", hypervisor_version=1)]
    )
    assert result == [("v", 1.0), ("none", 0.0)]


def test_negative_multiplier_prefers_older():
    hosts = [make_host("old", hypervisor_version=1), make_host("new", hypervisor_version=2)]
    with override("hypervisor_version_weight_multiplier", -1.0, group="filter_scheduler"):
        assert weigh(hosts) == [("old", 0.0), ("new", -1.0)]


def test_aggregate_override():
    agg = make_aggregate(1, hypervisor_version_weight_multiplier="-3")
    hosts = [
        make_host("new", hypervisor_version=2, aggregates=[agg]),
        make_host("old", hypervisor_version=1),
    ]
    assert weigh(hosts) == [("old", 0.0), ("new", -3.0)]


def test_batch_equals_single():
    weigher = HypervisorVersionWeigher()
    hosts = [make_host(f"h{i}", hypervisor_version=v) for i, v in enumerate([None, 0, 5])]
    assert weigh_all(weigher, hosts, None) == [weigher._weigh_object(h, None) for h in hosts]
    assert weigher.configured_multiplier() == 1.0
