"""The weight handler against a plain reference of nova's normalise-multiply-sum, over random
hosts, requests, aggregates and multipliers: same order, same weights (within 1e-9); and the
batch path gives exactly the floats of the explain path."""

from __future__ import annotations

import logging
import math

from hypothesis import HealthCheck, given, settings

from tests.unit.filters.fakes import make_host, make_spec
from tests.unit.weighers.fakes import Clamped, Flat
from tests.unit.weighers.strategies import (
    ALL_WEIGHERS,
    conf,
    configured,
    hosts_and_aggregates,
    multipliers,
    requests,
)
from weighers.handler import WeightHandler


def reference(weighers, hosts, spec):
    """nova's BaseWeightHandler.get_weighed_objects, host by host: raw values clamped to
    minval/maxval, normalised to [0, 1] (all 0 when min == max), times the host's
    multiplier, summed over the weighers; a stable sort, best first."""
    if len(hosts) <= 1:
        return [(h, 0.0) for h in hosts]
    weights = [0.0] * len(hosts)
    for weigher in weighers:
        raw = [float(weigher._weigh_object(h, spec)) for h in hosts]
        if weigher.minval is not None:
            raw = [max(v, float(weigher.minval)) for v in raw]
        if weigher.maxval is not None:
            raw = [min(v, float(weigher.maxval)) for v in raw]
        low = float(min(raw) if weigher.minval is None else weigher.minval)
        high = float(max(raw) if weigher.maxval is None else weigher.maxval)
        if low == high:
            normalized = [0.0] * len(raw)
        else:
            normalized = [(v - low) / (high - low) for v in raw]
        for i, host in enumerate(hosts):
            weights[i] += weigher.weight_multiplier(host) * normalized[i]
    order = sorted(range(len(hosts)), key=lambda i: weights[i], reverse=True)
    return [(hosts[i], weights[i]) for i in order]


def assert_same(got, expected):
    assert [id(w.obj) for w in got] == [id(h) for h, _ in expected]
    for w, (_, weight) in zip(got, expected, strict=True):
        assert math.isclose(w.weight, weight, rel_tol=1e-9, abs_tol=1e-9), (w.weight, weight)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hosts_and_aggregates(), requests(), conf, multipliers)
def test_weight_handler_batch_equals_per_host_reference(hosts, spec, values, more):
    values = {**values, **more, ("required", "metrics"): False}
    weighers = [cls() for cls in ALL_WEIGHERS]
    handler = WeightHandler(weighers)
    with configured(values):
        expected = reference(weighers, hosts, spec)
        got = handler.weigh(hosts, spec)
        explained = handler.weigh(hosts, spec, explain=True)
        ranked, weights = handler.rank(hosts, spec)
    assert_same(got, expected)
    # the batch path skips only what adds zero: its floats are the explain path's floats
    assert [(id(w.obj), w.weight) for w in got] == [(id(w.obj), w.weight) for w in explained]
    # rank is weigh without the WeighedHost wrappers
    assert [id(h) for h in ranked] == [id(w.obj) for w in got]
    assert weights == [w.weight for w in got]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hosts_and_aggregates(), requests())
def test_weight_handler_plugin_paths_batch_equals_per_host_reference(hosts, spec):
    weighers = [Clamped(), Flat(), *(cls() for cls in ALL_WEIGHERS[:4])]
    handler = WeightHandler(weighers)
    with configured({("required", "metrics"): False}):
        expected = reference(weighers, hosts, spec)
        got = handler.weigh(hosts, spec)
        explained = handler.weigh(hosts, spec, explain=True)
    assert_same(got, expected)
    assert [(id(w.obj), w.weight) for w in got] == [(id(w.obj), w.weight) for w in explained]


def test_rank_with_debug_logging_equals_weigh(caplog):
    hosts = [make_host(f"h{i}", free_ram_mb=ram, num_io_ops=i) for i, ram in enumerate([5, 9, 5])]
    handler = WeightHandler([cls() for cls in ALL_WEIGHERS])
    spec = make_spec()
    with configured({("required", "metrics"): False}):
        quiet = handler.rank(hosts, spec)
        with caplog.at_level(logging.DEBUG, logger="weighers.handler"):
            loud = handler.rank(hosts, spec)
            weighed = handler.weigh(hosts, spec)
    # RAM 5/9, 1, 5/9 minus io_ops 0, 1/2, 1
    assert [h.host for h in loud[0]] == ["h0", "h1", "h2"]
    assert loud == quiet == ([w.obj for w in weighed], [w.weight for w in weighed])
    assert any("RAMWeigher: raw weights" in r.getMessage() for r in caplog.records)
