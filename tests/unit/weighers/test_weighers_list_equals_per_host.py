"""Every built-in weigher run over a list by the handler against its per-host methods, over
random hosts and requests: the handler's ``raw_values`` are exactly ``weigh(host, prepared)``
host by host (or the ``Same`` value ``prepare`` gave), nova's ``_weigh_object`` gives the same
values, a ``@host_column`` weigher's column value ``weigh(host, None)`` is its value for any
request, and the handler's multipliers (computed once per set of aggregates) are each host's
``weight_multiplier``."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from tests.unit.filters.fakes import make_aggregate, make_host
from tests.unit.weighers.fakes import weigh_all
from tests.unit.weighers.strategies import (
    ALL_WEIGHERS,
    conf,
    configured,
    hosts_and_aggregates,
    requests,
)
from weighers import Same
from weighers.build_failure import BuildFailureWeigher
from weighers.handler import _Multipliers
from weighers.metrics import ComputeHostMetricNotFound, MetricsWeigher


def outcome(call):
    """A value, or the exception type and message: both paths must fail alike too."""
    try:
        return call()
    except ComputeHostMetricNotFound as exc:
        return ("raised", str(exc))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hosts_and_aggregates(), requests(), conf)
def test_every_weigher_list_run_equals_weigh_per_host(hosts, spec, values):
    with configured(values):
        for cls in ALL_WEIGHERS:
            weigher = cls()
            listed = outcome(lambda w=weigher: weigh_all(w, hosts, spec))
            prepared = weigher.prepare(spec, hosts)
            if isinstance(prepared, Same):
                per_host = [prepared.value] * len(hosts)
            else:
                per_host = outcome(lambda w=weigher, p=prepared: [w.weigh(h, p) for h in hosts])
            # nova's method, host by host: weigh after prepare
            nova = outcome(lambda w=weigher: [w._weigh_object(h, spec) for h in hosts])
            assert listed == per_host == nova, cls.__name__
            if isinstance(listed, list):
                types = [type(v) for v in listed]
                assert types == [type(v) for v in per_host] == [type(v) for v in nova], cls.__name__
            if weigher.returns_numbers and isinstance(listed, list):
                assert all(isinstance(v, int | float) for v in listed), cls.__name__
            if getattr(cls, "__host_column__", None) is cls:
                # the column holds weigh(host, None): the value for every request
                assert [weigher.weigh(h, None) for h in hosts] == listed, cls.__name__


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hosts_and_aggregates(), conf)
def test_multipliers_per_aggregate_set_batch_equals_per_host(hosts, values):
    with configured(values):
        multipliers = _Multipliers(hosts)
        for cls in ALL_WEIGHERS:
            weigher = cls()
            got = multipliers.of(weigher)
            if not isinstance(got, list):
                got = [got] * len(hosts)
            assert got == [weigher.weight_multiplier(h) for h in hosts], cls.__name__


def test_build_failure_and_metrics_multipliers_keep_their_special_rules():
    agg = make_aggregate(1, build_failure_weight_multiplier="10", weight_multiplier="7")
    metrics_agg = make_aggregate(2, metrics_weight_multiplier="3")
    hosts = [make_host("a", aggregates=[agg]), make_host("b", aggregates=[metrics_agg])]
    multipliers = _Multipliers(hosts)
    # negated after the aggregate override
    assert multipliers.of(BuildFailureWeigher()) == [-10.0, -1000000.0]
    # [metrics] weight_multiplier is overridden by metrics_weight_multiplier only
    assert multipliers.of(MetricsWeigher()) == [1.0, 3.0]
