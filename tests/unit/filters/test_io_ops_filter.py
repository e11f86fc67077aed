"""IoOpsFilter and AggregateIoOpsFilter: fewer I/O operations than the (aggregate) maximum."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from filters.aggregate_io_ops_filter import AggregateIoOpsFilter
from filters.io_ops_filter import IoOpsFilter
from tests.unit.filters.fakes import make_aggregate, make_host, make_spec, override, run_filter


def test_hosts_below_the_maximum_pass_and_at_the_maximum_fail():
    filt = IoOpsFilter()
    assert filt.host_passes(make_host(num_io_ops=7), make_spec()) is True
    result = filt.host_passes(make_host(num_io_ops=8), make_spec())
    assert not result
    assert result.reason == "too many I/O operations"
    assert not filt.host_passes(make_host(num_io_ops=9), make_spec())


def test_the_maximum_comes_from_the_config():
    with override("max_io_ops_per_host", 2, group="filter_scheduler"):
        assert IoOpsFilter().host_passes(make_host(num_io_ops=1), make_spec()) is True
        assert not IoOpsFilter().host_passes(make_host(num_io_ops=2), make_spec())
    with override("max_io_ops_per_host", 0, group="filter_scheduler"):
        assert not IoOpsFilter().host_passes(make_host(num_io_ops=0), make_spec())


def test_plain_filter_ignores_aggregate_metadata():
    host = make_host(num_io_ops=5, aggregates=[make_aggregate(1, max_io_ops_per_host="3")])
    assert IoOpsFilter().host_passes(host, make_spec()) is True


def test_aggregate_value_overrides_the_config_both_ways():
    filt = AggregateIoOpsFilter()
    low = make_host(num_io_ops=5, aggregates=[make_aggregate(1, max_io_ops_per_host="3")])
    high = make_host(num_io_ops=9, aggregates=[make_aggregate(1, max_io_ops_per_host="20")])
    assert filt.host_passes(low, make_spec()).reason == "too many I/O operations"
    assert filt.host_passes(high, make_spec()) is True


def test_aggregate_minimum_wins_and_a_bad_value_means_the_config():
    filt = AggregateIoOpsFilter()
    two = [make_aggregate(1, max_io_ops_per_host="10"), make_aggregate(2, max_io_ops_per_host="4")]
    assert not filt.host_passes(make_host(num_io_ops=4, aggregates=two), make_spec())
    assert filt.host_passes(make_host(num_io_ops=3, aggregates=two), make_spec()) is True
    bad = [make_aggregate(1, max_io_ops_per_host="2"), make_aggregate(2, max_io_ops_per_host="x")]
    # "x" does not parse: nova ignores both values and uses the config (8)
    assert filt.host_passes(make_host(num_io_ops=7, aggregates=bad), make_spec()) is True
    assert not filt.host_passes(make_host(num_io_ops=8, aggregates=bad), make_spec())


def test_run_flags_match_nova():
    for cls in (IoOpsFilter, AggregateIoOpsFilter):
        assert cls.RUN_ON_REBUILD is False
        assert cls.run_filter_once_per_request is False


AGGREGATES = [
    make_aggregate(1, max_io_ops_per_host="3"),
    make_aggregate(2, max_io_ops_per_host="12"),
    make_aggregate(3, max_io_ops_per_host="bad"),
    make_aggregate(4, other="1"),
]

hosts_strategy = st.lists(
    st.tuples(st.integers(0, 15), st.lists(st.sampled_from(AGGREGATES), max_size=3)),
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(hosts_strategy, st.integers(0, 15), st.sampled_from([IoOpsFilter, AggregateIoOpsFilter]))
def test_run_filter_equals_per_host_host_passes(host_data, limit, cls):
    hosts = [make_host(f"h{i}", num_io_ops=n, aggregates=a) for i, (n, a) in enumerate(host_data)]
    spec = make_spec()
    filt = cls()
    with override("max_io_ops_per_host", limit, group="filter_scheduler"):
        outcome = run_filter(filt, hosts, spec)
        per_host = [(h, filt.host_passes(h, spec)) for h in hosts]
    assert outcome.passed == [h for h, r in per_host if r]
    assert outcome.rejected == [(h, r.reason) for h, r in per_host if not r]
