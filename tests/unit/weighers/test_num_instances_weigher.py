"""NumInstancesWeigher: num_instances, default multiplier 0.0 (off)."""

from __future__ import annotations

from tests.unit.filters.fakes import make_host, make_spec, override
from weighers.handler import WeightHandler
from weighers.num_instances import NumInstancesWeigher


def hosts():
    return [make_host("few", num_instances=2), make_host("many", num_instances=10)]


def test_off_by_default_keeps_input_order():
    weighed = WeightHandler([NumInstancesWeigher()]).weigh(hosts(), make_spec())
    assert [(w.obj.host, w.weight) for w in weighed] == [("few", 0.0), ("many", 0.0)]


def test_positive_multiplier_stacks_on_busy_hosts():
    with override("num_instances_weight_multiplier", 1.0, group="filter_scheduler"):
        weighed = WeightHandler([NumInstancesWeigher()]).weigh(hosts(), make_spec())
    assert [(w.obj.host, w.weight) for w in weighed] == [("many", 1.0), ("few", 0.0)]


def test_negative_multiplier_spreads_without_minval():
    assert NumInstancesWeigher.minval is None
    with override("num_instances_weight_multiplier", -1.0, group="filter_scheduler"):
        weighed = WeightHandler([NumInstancesWeigher()]).weigh(hosts(), make_spec())
    assert [(w.obj.host, w.weight) for w in weighed] == [("few", 0.0), ("many", -1.0)]
