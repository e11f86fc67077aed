"""AggregateTypeAffinityFilter: aggregate instance_type lists vs the flavor name."""

from __future__ import annotations

from filters.type_affinity import AggregateTypeAffinityFilter
from tests.unit.filters.fakes import make_aggregate, make_host, make_spec, run_filter


def passes(flavor_name, *aggregates):
    filt = AggregateTypeAffinityFilter()
    host = make_host(aggregates=list(aggregates))
    spec = make_spec()
    spec.flavor.name = flavor_name
    single = filt.host_passes(host, spec)
    outcome = run_filter(filt, [host], spec)
    assert bool(outcome.passed) == bool(single)
    assert [r for _, r in outcome.rejected] == ([] if single else [single.reason])
    return single


def test_flavor_listed_in_instance_type_passes():
    agg = make_aggregate(1, instance_type="m1.small, m1.large")
    assert passes("m1.small", agg) is True
    assert passes("m1.large", agg) is True
    assert passes("m1.tiny", agg).reason == "flavor not allowed by aggregate"
    # names are compared whole, not as substrings
    assert not passes("m1", agg)


def test_any_aggregate_listing_the_flavor_is_enough():
    aggs = [make_aggregate(1, instance_type="a"), make_aggregate(2, instance_type="b")]
    assert passes("a", *aggs) is True
    assert passes("b", *aggs) is True
    assert not passes("c", *aggs)


def test_hosts_without_instance_type_metadata_pass():
    assert passes("m1.tiny") is True
    assert passes("m1.tiny", make_aggregate(1, ssd="true")) is True


def test_run_flags_match_nova():
    assert AggregateTypeAffinityFilter.RUN_ON_REBUILD is False
    assert AggregateTypeAffinityFilter.run_filter_once_per_request is True
