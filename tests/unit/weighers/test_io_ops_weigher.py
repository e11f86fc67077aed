"""IoOpsWeigher: num_io_ops, minval 0, default multiplier -1.0."""

from __future__ import annotations

from tests.unit.filters.fakes import make_host, make_spec, override
from weighers.handler import WeightHandler
from weighers.io_ops import IoOpsWeigher


def test_default_prefers_fewer_io_ops():
    hosts = [make_host("busy", num_io_ops=4), make_host("idle", num_io_ops=0)]
    weighed = WeightHandler([IoOpsWeigher()]).weigh(hosts, make_spec())
    assert [(w.obj.host, w.weight) for w in weighed] == [("idle", 0.0), ("busy", -1.0)]


def test_positive_multiplier_prefers_busy_hosts():
    hosts = [make_host("busy", num_io_ops=4), make_host("idle", num_io_ops=2)]
    with override("io_ops_weight_multiplier", 2.0, group="filter_scheduler"):
        weighed = WeightHandler([IoOpsWeigher()]).weigh(hosts, make_spec())
    # normalised against minval 0: idle 2/4
    assert [(w.obj.host, w.weight) for w in weighed] == [("busy", 2.0), ("idle", 1.0)]


def test_raw_value_and_defaults():
    assert IoOpsWeigher()._weigh_object(make_host(num_io_ops=3), None) == 3
    assert IoOpsWeigher().configured_multiplier() == -1.0
    assert IoOpsWeigher.minval == 0
