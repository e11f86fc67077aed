"""NumInstancesFilter and AggregateNumInstancesFilter: fewer instances than the maximum."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from filters.aggregate_num_instances_filter import AggregateNumInstancesFilter
from filters.num_instances_filter import NumInstancesFilter
from tests.unit.filters.fakes import make_aggregate, make_host, make_spec, override, run_filter


def test_hosts_below_the_maximum_pass_and_at_the_maximum_fail():
    filt = NumInstancesFilter()
    assert filt.host_passes(make_host(num_instances=49), make_spec()) is True
    result = filt.host_passes(make_host(num_instances=50), make_spec())
    assert not result
    assert result.reason == "too many instances"
    assert not filt.host_passes(make_host(num_instances=51), make_spec())


def test_the_maximum_comes_from_the_config():
    with override("max_instances_per_host", 2, group="filter_scheduler"):
        assert NumInstancesFilter().host_passes(make_host(num_instances=1), make_spec()) is True
        assert not NumInstancesFilter().host_passes(make_host(num_instances=2), make_spec())
    with override("max_instances_per_host", 1, group="filter_scheduler"):
        assert NumInstancesFilter().host_passes(make_host(num_instances=0), make_spec()) is True


def test_plain_filter_ignores_aggregate_metadata():
    host = make_host(num_instances=5, aggregates=[make_aggregate(1, max_instances_per_host="3")])
    assert NumInstancesFilter().host_passes(host, make_spec()) is True


def test_aggregate_value_overrides_the_config_both_ways():
    filt = AggregateNumInstancesFilter()
    low = make_host(num_instances=5, aggregates=[make_aggregate(1, max_instances_per_host="3")])
    high = make_host(num_instances=9, aggregates=[make_aggregate(1, max_instances_per_host="20")])
    assert filt.host_passes(low, make_spec()).reason == "too many instances"
    assert filt.host_passes(high, make_spec()) is True


def test_aggregate_minimum_wins_and_a_bad_value_means_the_config():
    filt = AggregateNumInstancesFilter()
    two = [
        make_aggregate(1, max_instances_per_host="10"),
        make_aggregate(2, max_instances_per_host="4"),
    ]
    assert not filt.host_passes(make_host(num_instances=4, aggregates=two), make_spec())
    assert filt.host_passes(make_host(num_instances=3, aggregates=two), make_spec()) is True
    bad = [
        make_aggregate(1, max_instances_per_host="2"),
        make_aggregate(2, max_instances_per_host="x"),
    ]
    # "x" does not parse: nova ignores both values and uses the config (50)
    assert filt.host_passes(make_host(num_instances=49, aggregates=bad), make_spec()) is True
    assert not filt.host_passes(make_host(num_instances=50, aggregates=bad), make_spec())


def test_run_flags_match_nova():
    for cls in (NumInstancesFilter, AggregateNumInstancesFilter):
        assert cls.RUN_ON_REBUILD is False
        assert cls.run_filter_once_per_request is False


AGGREGATES = [
    make_aggregate(1, max_instances_per_host="3"),
    make_aggregate(2, max_instances_per_host="12"),
    make_aggregate(3, max_instances_per_host="bad"),
    make_aggregate(4, other="1"),
]

hosts_strategy = st.lists(
    st.tuples(st.integers(0, 15), st.lists(st.sampled_from(AGGREGATES), max_size=3)),
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(
    hosts_strategy,
    st.integers(1, 15),
    st.sampled_from([NumInstancesFilter, AggregateNumInstancesFilter]),
)
def test_run_filter_equals_per_host_host_passes(host_data, limit, cls):
    hosts = [
        make_host(f"h{i}", num_instances=n, aggregates=a) for i, (n, a) in enumerate(host_data)
    ]
    spec = make_spec()
    filt = cls()
    with override("max_instances_per_host", limit, group="filter_scheduler"):
        outcome = run_filter(filt, hosts, spec)
        per_host = [(h, filt.host_passes(h, spec)) for h in hosts]
    assert outcome.passed == [h for h, r in per_host if r]
    assert outcome.rejected == [(h, r.reason) for h, r in per_host if not r]
