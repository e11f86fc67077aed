"""BuildFailureWeigher: failed_builds with a negated multiplier (1e6)."""

from __future__ import annotations

from tests.unit.filters.fakes import make_aggregate, make_host, make_spec, override
from tests.unit.weighers.fakes import weigh_all
from weighers.build_failure import BuildFailureWeigher
from weighers.handler import WeightHandler
from weighers.ram import RAMWeigher


def weigh(weighers, hosts, explain=False):
    return WeightHandler(weighers).weigh(hosts, make_spec(), explain=explain)


def test_hosts_with_failures_sink():
    hosts = [
        make_host("bad", failed_builds=4),
        make_host("good", failed_builds=0),
        make_host("meh", failed_builds=1),
    ]
    result = [(w.obj.host, w.weight) for w in weigh([BuildFailureWeigher()], hosts)]
    assert result == [("good", 0.0), ("meh", -250000.0), ("bad", -1000000.0)]


def test_one_failure_outweighs_resources():
    hosts = [
        make_host("roomy", failed_builds=1, free_ram_mb=100000),
        make_host("tight", failed_builds=0, free_ram_mb=1),
    ]
    assert [w.obj.host for w in weigh([BuildFailureWeigher(), RAMWeigher()], hosts)] == [
        "tight",
        "roomy",
    ]


def test_multiplier_is_negated_config_and_aggregate():
    weigher = BuildFailureWeigher()
    assert weigher.weight_multiplier(make_host()) == -1000000.0
    with override("build_failure_weight_multiplier", 2.0, group="filter_scheduler"):
        assert weigher.weight_multiplier(make_host()) == -2.0
    agg = make_aggregate(1, build_failure_weight_multiplier="10")
    assert weigher.weight_multiplier(make_host(aggregates=[agg])) == -10.0


def test_aggregate_override_through_handler():
    agg = make_aggregate(1, build_failure_weight_multiplier="0")
    hosts = [
        make_host("forgiven", failed_builds=3, aggregates=[agg]),
        make_host("bad", failed_builds=3),
        make_host("good", failed_builds=0),
    ]
    result = weigh([BuildFailureWeigher()], hosts, explain=True)
    assert [(w.obj.host, w.weight) for w in result] == [
        ("forgiven", 0.0),
        ("good", 0.0),
        ("bad", -1000000.0),
    ]
    assert result[0].contributions["BuildFailureWeigher"].multiplier == 0.0


def test_zero_multiplier_turns_it_off():
    hosts = [make_host("bad", failed_builds=3), make_host("good", failed_builds=0)]
    with override("build_failure_weight_multiplier", 0.0, group="filter_scheduler"):
        result = weigh([BuildFailureWeigher()], hosts)
    assert [(w.obj.host, w.weight) for w in result] == [("bad", 0.0), ("good", 0.0)]


def test_raw_value():
    weigher = BuildFailureWeigher()
    hosts = [make_host("a", failed_builds=7), make_host("b")]
    assert weigh_all(weigher, hosts, None) == [7, 0]
    assert weigher._weigh_object(hosts[0], None) == 7
