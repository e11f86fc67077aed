"""WeightHandler: normalisation, minval/maxval, multipliers, aggregate override, ordering."""

from __future__ import annotations

import logging

import pytest

from scheduler.exceptions import NoValidHost, PluginNotFound
from tests.unit.filters.fakes import make_aggregate, make_host, make_spec, override
from weighers import BaseHostWeigher
from weighers.handler import WeigherError, WeightHandler, load_weighers, normalize
from weighers.io_ops import IoOpsWeigher
from weighers.ram import RAMWeigher


class ValueWeigher(BaseHostWeigher):
    """Weighs by the ``value`` stat; multiplier from ram_weight_multiplier."""

    multiplier_option = "ram_weight_multiplier"

    def _weigh_object(self, host_state, weight_properties):
        return host_state.stats["value"]


def host(name, value=0, aggregates=(), **attrs):
    return make_host(name, stats={"value": value}, aggregates=list(aggregates), **attrs)


def weigh(weighers, hosts, explain=False):
    return WeightHandler(weighers).weigh(hosts, make_spec(), explain=explain)


def test_normalize():
    assert normalize([]) == []
    assert normalize([1.0, 2.0, 3.0]) == [0.0, 0.5, 1.0]
    assert normalize([5.0, 5.0]) == [0.0, 0.0]
    assert normalize([2.0, 4.0], minval=0) == [0.5, 1.0]
    assert normalize([2.0, 4.0], minval=0, maxval=8) == [0.25, 0.5]
    assert normalize([3.0, 3.0], minval=0) == [1.0, 1.0]


def test_zero_or_one_host_is_not_weighed():
    assert weigh([ValueWeigher()], []) == []
    [only] = weigh([ValueWeigher()], [host("a", 10)])
    assert only.weight == 0.0


def test_hosts_sorted_by_normalised_weight():
    result = weigh([ValueWeigher()], [host("a", 10), host("b", 30), host("c", 20)])
    assert [(w.obj.host, w.weight) for w in result] == [("b", 1.0), ("c", 0.5), ("a", 0.0)]


def test_equal_values_weigh_zero_and_keep_input_order():
    hosts = [host(n, 7) for n in ("d", "a", "c", "b")]
    result = weigh([ValueWeigher()], hosts)
    assert [w.obj.host for w in result] == ["d", "a", "c", "b"]
    assert {w.weight for w in result} == {0.0}


def test_ties_keep_input_order_among_unequal_values():
    hosts = [host("a", 1), host("b", 5), host("c", 1), host("d", 5)]
    assert [w.obj.host for w in weigh([ValueWeigher()], hosts)] == ["b", "d", "a", "c"]


def test_minval_clamps_and_anchors_normalisation():
    class Clamped(ValueWeigher):
        minval = 0

    # -100 is clamped to 0; min is 0, not the list's minimum 50
    result = weigh([Clamped()], [host("neg", -100), host("a", 50), host("b", 100)])
    weights = {w.obj.host: w.weight for w in result}
    assert weights == {"b": 1.0, "a": 0.5, "neg": 0.0}


def test_maxval_clamps():
    class Capped(ValueWeigher):
        minval = 0
        maxval = 10

    weights = {w.obj.host: w.weight for w in weigh([Capped()], [host("a", 5), host("b", 50)])}
    assert weights == {"a": 0.5, "b": 1.0}


def test_negative_multiplier_reverses_preference():
    with override("ram_weight_multiplier", -2.0, group="filter_scheduler"):
        result = weigh([ValueWeigher()], [host("a", 10), host("b", 30)])
    assert [(w.obj.host, w.weight) for w in result] == [("a", 0.0), ("b", -2.0)]


def test_weighers_add_up():
    class Second(ValueWeigher):
        multiplier_option = "disk_weight_multiplier"

        def _weigh_object(self, host_state, weight_properties):
            return -host_state.stats["value"]

    with override("disk_weight_multiplier", 3.0, group="filter_scheduler"):
        result = weigh([ValueWeigher(), Second()], [host("a", 10), host("b", 30)])
    assert [(w.obj.host, w.weight) for w in result] == [("a", 3.0), ("b", 1.0)]


def test_aggregate_override_lowest_value_wins_and_a_bad_value_means_config():
    high = make_aggregate(1, ram_weight_multiplier="5.0")
    low = make_aggregate(2, ram_weight_multiplier="-1.0")
    bad = make_aggregate(3, ram_weight_multiplier="lots")
    hosts = [
        host("both", 10, [high, low]),
        host("high", 10, [high]),
        host("bad", 10, [bad]),
        host("low+bad", 10, [low, bad]),  # nova: one unparsable value -> the config value
        host("plain", 0),
    ]
    result = weigh([ValueWeigher()], hosts, explain=True)
    multipliers = {w.obj.host: w.contributions["ValueWeigher"].multiplier for w in result}
    assert multipliers == {"both": -1.0, "high": 5.0, "bad": 1.0, "low+bad": 1.0, "plain": 1.0}
    weights = {w.obj.host: w.weight for w in result}
    assert weights == {"both": -1.0, "high": 5.0, "bad": 1.0, "low+bad": 1.0, "plain": 0.0}


def test_aggregate_lookup_is_cached_per_aggregate_set(monkeypatch):
    import weighers.handler as handler_module

    calls = []
    real = handler_module.get_weight_multiplier

    def counting(host_state, name, configured):
        calls.append(host_state.host)
        return real(host_state, name, configured)

    monkeypatch.setattr(handler_module, "get_weight_multiplier", counting)
    agg = make_aggregate(1, ram_weight_multiplier="2")
    hosts = [host(f"h{i}", i, [agg]) for i in range(10)] + [host("x", 3)]
    weigh([ValueWeigher()], hosts)
    assert len(calls) == 1


def test_explain_records_contributions():
    result = weigh([ValueWeigher()], [host("a", 10), host("b", 30)], explain=True)
    best = result[0]
    contribution = best.contributions["ValueWeigher"]
    assert (contribution.raw, contribution.normalized, contribution.multiplier) == (30, 1.0, 1.0)
    assert contribution.score == 1.0
    assert weigh([ValueWeigher()], [host("a"), host("b")])[0].contributions is None


def test_zero_multiplier_weigher_is_not_computed():
    class Exploding(ValueWeigher):
        multiplier_option = "num_instances_weight_multiplier"  # 0.0 by default

        def weigh(self, host_state, prepared):
            raise AssertionError("should not be called")

    result = weigh([Exploding(), ValueWeigher()], [host("a", 1), host("b", 2)])
    assert [w.obj.host for w in result] == ["b", "a"]


def test_custom_weight_multiplier_is_honoured():
    class PerHost(ValueWeigher):
        def weight_multiplier(self, host_state):
            return 10.0 if host_state.host == "a" else 1.0

    result = weigh([PerHost()], [host("a", 5), host("b", 10), host("c", 0)])
    assert [(w.obj.host, w.weight) for w in result] == [("a", 5.0), ("b", 1.0), ("c", 0.0)]


def test_failing_weigher_raises_weigher_error(caplog):
    class Broken(ValueWeigher):
        def _weigh_object(self, host_state, weight_properties):
            raise KeyError("metric")

    with caplog.at_level(logging.ERROR, logger="weighers.handler"):
        with pytest.raises(WeigherError) as err:
            weigh([Broken()], [host("a"), host("b")])
    assert isinstance(err.value, NoValidHost)
    assert "Broken" in str(err.value)


def test_debug_logging_of_weights(caplog):
    with caplog.at_level(logging.DEBUG, logger="weighers.handler"):
        weigh([ValueWeigher()], [host("a", 10), host("b", 30)])
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("ValueWeigher: raw weights") for m in messages)
    assert any(m.startswith("ValueWeigher: score (multiplier * weight)") for m in messages)


def test_load_weighers_all_in_fixed_name_order():
    # nova's 13 weighers (all_weighers), in our fixed order: by class name
    expected = sorted(
        [
            "BuildFailureWeigher",
            "CPUWeigher",
            "CrossCellWeigher",
            "DiskWeigher",
            "HypervisorVersionWeigher",
            "ImagePropertiesWeigher",
            "IoOpsWeigher",
            "MetricsWeigher",
            "NumInstancesWeigher",
            "PCIWeigher",
            "RAMWeigher",
            "ServerGroupSoftAffinityWeigher",
            "ServerGroupSoftAntiAffinityWeigher",
        ]
    )
    for names in (["nova.scheduler.weights.all_weighers"], []):
        assert [type(w).__name__ for w in load_weighers(names)] == expected


def test_load_weighers_by_name_and_nova_path():
    loaded = load_weighers(["IoOpsWeigher", "nova.scheduler.weights.ram.RAMWeigher", "RAMWeigher"])
    assert [type(w) for w in loaded] == [IoOpsWeigher, RAMWeigher]


def test_load_weighers_rejects_unknown_names():
    with pytest.raises(PluginNotFound) as err:
        load_weighers(["RAMWeigher", "MetricsWeigherX"])
    assert err.value.names == ["MetricsWeigherX"]
    assert "RAMWeigher" in err.value.available
