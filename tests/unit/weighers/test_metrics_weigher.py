"""MetricsWeigher: [metrics] weight_setting, required, weight_of_unavailable, multiplier."""

from __future__ import annotations

import contextlib
import logging

import pytest

from scheduler.exceptions import NoValidHost
from tests.unit.filters.fakes import make_aggregate, make_host, make_spec, override
from tests.unit.weighers.fakes import weigh_all
from weighers.handler import WeigherError, WeightHandler
from weighers.metrics import (
    ComputeHostMetricNotFound,
    MetricsWeigher,
    metric_values,
    parse_options,
)


def metric(name, value):
    return {"name": name, "value": value, "timestamp": "2026-05-01T12:00:00", "source": "m"}


def metrics_host(name, aggregates=(), **values):
    ms = [metric(k.replace("_", "."), v) for k, v in values.items()]
    return make_host(name, metrics=ms, aggregates=list(aggregates))


@contextlib.contextmanager
def metrics_conf(setting, **others):
    with contextlib.ExitStack() as stack:
        stack.enter_context(override("weight_setting", setting, group="metrics"))
        for name, value in others.items():
            stack.enter_context(override(name, value, group="metrics"))
        yield


def weigh(hosts, explain=False):
    weighed = WeightHandler([MetricsWeigher()]).weigh(hosts, make_spec(), explain=explain)
    return [(w.obj.host, w.weight) for w in weighed]


def test_parse_options_nova_rules(caplog):
    opts = ["a=1", "b=-2.5", " c = 3 ", "bad", " =1", "d=", "e=x", "f=1=2", "a=4"]
    with caplog.at_level(logging.WARNING, logger="weighers.metrics"):
        parsed = parse_options(opts, "=", float, "metrics.weight_setting")
    # key stripped (as MetricsFilter does), value converted, duplicates kept
    assert parsed == [("a", 1.0), ("b", -2.5), ("c", 3.0), ("a", 4.0)]
    [record] = caplog.records
    assert "metrics.weight_setting" in record.getMessage()
    assert "bad,  =1, d=, e=x, f=1=2" in record.getMessage()


def test_weighted_sum_of_metrics():
    hosts = [
        metrics_host("a", cpu_percent=0.5, cpu_frequency=2000),
        metrics_host("b", cpu_percent=0.1, cpu_frequency=1000),
    ]
    with metrics_conf(["cpu.percent=-1000", "cpu.frequency=1"]):
        assert weigh_all(MetricsWeigher(), hosts, None) == [1500.0, 900.0]
        assert MetricsWeigher()._weigh_object(hosts[0], None) == 1500.0
        assert weigh(hosts) == [("a", 1.0), ("b", 0.0)]


def test_no_setting_weighs_zero():
    hosts = [metrics_host("a", cpu_percent=1), make_host("b")]
    assert weigh_all(MetricsWeigher(), hosts, None) == [0.0, 0.0]


def test_bad_entries_are_ignored_and_warned_once(caplog):
    hosts = [metrics_host("a", cpu_percent=2), metrics_host("b", cpu_percent=1)]
    weigher = MetricsWeigher()
    with metrics_conf(["cpu.percent=1", "nonsense"]):
        with caplog.at_level(logging.WARNING, logger="weighers.metrics"):
            assert weigh_all(weigher, hosts, None) == [2.0, 1.0]
            assert weigh_all(weigher, hosts, None) == [2.0, 1.0]
        assert len(caplog.records) == 1
    with metrics_conf(["cpu.percent=3"]):  # a changed option is picked up
        assert weigh_all(weigher, hosts, None) == [6.0, 3.0]


def test_missing_metric_required_raises():
    hosts = [metrics_host("a", cpu_percent=1), metrics_host("b", cpu_frequency=1)]
    with metrics_conf(["cpu.percent=1"]):
        with pytest.raises(ComputeHostMetricNotFound) as err:
            weigh_all(MetricsWeigher(), hosts, None)
        assert (err.value.host, err.value.node, err.value.name) == ("b", "b", "cpu.percent")
        # through the handler the request fails with an explained NoValidHost
        with pytest.raises(WeigherError) as err:
            weigh(hosts)
        assert isinstance(err.value, NoValidHost)
        assert "MetricsWeigher" in str(err.value) and "cpu.percent" in str(err.value)


def test_missing_metric_with_zero_ratio_still_raises_when_required():
    with metrics_conf(["cpu.percent=0"]):
        with pytest.raises(ComputeHostMetricNotFound):
            weigh_all(MetricsWeigher(), [make_host("a")], None)


def test_missing_metric_not_required_weighs_unavailable():
    hosts = [
        metrics_host("full", cpu_percent=5, cpu_frequency=10),
        metrics_host("partial", cpu_frequency=10),
        metrics_host("low", cpu_percent=0, cpu_frequency=0),
    ]
    with metrics_conf(["cpu.percent=1", "cpu.frequency=1"], required=False):
        assert weigh_all(MetricsWeigher(), hosts, None) == [15.0, -10000.0, 0.0]
        assert [h for h, _ in weigh(hosts)] == ["full", "low", "partial"]
    with metrics_conf(["cpu.frequency=1", "cpu.percent=1"], required=False):
        # the unavailable value replaces the whole sum, whatever came before
        assert weigh_all(MetricsWeigher(), hosts, None)[1] == -10000.0
    with metrics_conf(["cpu.percent=1"], required=False, weight_of_unavailable=-7.0):
        assert weigh_all(MetricsWeigher(), hosts, None) == [5.0, -7.0, 0.0]


def test_missing_metric_that_counts_for_nothing_is_skipped():
    hosts = [metrics_host("partial", cpu_frequency=10)]
    with metrics_conf(["cpu.percent=0", "cpu.frequency=2"], required=False):
        assert weigh_all(MetricsWeigher(), hosts, None) == [20.0]
    # the host's multiplier (here from an aggregate) is 0: skipped too
    zero = make_aggregate(1, metrics_weight_multiplier="0")
    hosts = [metrics_host("partial", aggregates=[zero], cpu_frequency=10)]
    with metrics_conf(["cpu.percent=1", "cpu.frequency=2"], required=False):
        assert weigh_all(MetricsWeigher(), hosts, None) == [20.0]


def test_multiplier_option_and_aggregate_key():
    weigher = MetricsWeigher()
    assert weigher.configured_multiplier() == 1.0
    with override("weight_multiplier", 3.0, group="metrics"):
        assert weigher.weight_multiplier(make_host()) == 3.0
        agg = make_aggregate(1, metrics_weight_multiplier="-2")
        assert weigher.weight_multiplier(make_host(aggregates=[agg])) == -2.0
        # the option's own name is not the aggregate key
        other = make_aggregate(2, weight_multiplier="-9")
        assert weigher.weight_multiplier(make_host(aggregates=[other])) == 3.0


def test_aggregate_override_through_handler():
    agg = make_aggregate(1, metrics_weight_multiplier="-1")
    hosts = [
        metrics_host("hot", aggregates=[agg], cpu_percent=9),
        metrics_host("warm", cpu_percent=5),
        metrics_host("cold", cpu_percent=1),
    ]
    with metrics_conf(["cpu.percent=1"]), override("weight_multiplier", 2.0, group="metrics"):
        assert weigh(hosts) == [("warm", 1.0), ("cold", 0.0), ("hot", -1.0)]


def test_metric_values_forms():
    assert metric_values(None) == {}
    assert metric_values([metric("a", 1), metric("b", 2.5)]) == {"a": 1, "b": 2.5}
    primitive = {
        "nova_object.name": "MonitorMetricList",
        "nova_object.data": {
            "objects": [{"nova_object.name": "MonitorMetric", "nova_object.data": metric("a", 3)}]
        },
    }
    assert metric_values(primitive) == {"a": 3}


def test_non_numeric_metric_counts_as_missing():
    hosts = [make_host("a", metrics=[metric("cpu.percent", None)])]
    with metrics_conf(["cpu.percent=1"], required=False):
        assert weigh_all(MetricsWeigher(), hosts, None) == [-10000.0]


def test_agrees_with_metrics_filter_on_names():
    from filters.metrics_filter import MetricsFilter

    hosts = [metrics_host("a", cpu_percent=2), make_host("b"), metrics_host("c", cpu_percent=1)]
    with metrics_conf([" cpu.percent = 1", "junk"]):
        passed = [h for h in hosts if MetricsFilter().host_passes(h, make_spec())]
        assert [h.host for h in passed] == ["a", "c"]
        assert weigh(passed) == [("a", 1.0), ("c", 0.0)]
