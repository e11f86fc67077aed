"""AggregateInstanceExtraSpecsFilter: flavor extra specs vs aggregate metadata."""

from __future__ import annotations

from filters.aggregate_instance_extra_specs import AggregateInstanceExtraSpecsFilter
from tests.unit.filters.fakes import make_aggregate, make_host, make_spec, run_filter


def passes(extra_specs, *aggregates):
    filt = AggregateInstanceExtraSpecsFilter()
    host = make_host(aggregates=list(aggregates))
    spec = make_spec(extra_specs=extra_specs)
    single = filt.host_passes(host, spec)
    outcome = run_filter(filt, [host], spec)
    assert bool(outcome.passed) == bool(single)
    assert [r for _, r in outcome.rejected] == ([] if single else [single.reason])
    return single


def test_unscoped_key_must_be_in_the_aggregate_and_match():
    assert passes({"ssd": "true"}, make_aggregate(1, ssd="true")) is True
    assert passes({"ssd": "true"}, make_aggregate(1, ssd="false")).reason == (
        "extra spec does not match aggregate metadata"
    )
    assert passes({"ssd": "true"}, make_aggregate(1, other="true")).reason == (
        "extra spec not in aggregate metadata"
    )
    assert passes({"ssd": "true"}).reason == "extra spec not in aggregate metadata"


def test_scoped_key_drops_its_scope_and_other_scopes_are_ignored():
    agg = make_aggregate(1, ssd="true", **{"x:y": "1"})
    assert passes({"aggregate_instance_extra_specs:ssd": "true"}, agg) is True
    assert not passes({"aggregate_instance_extra_specs:ssd": "false"}, agg)
    # only the first ':' separates the scope
    assert passes({"aggregate_instance_extra_specs:x:y": "1"}, agg) is True
    extra = {"hw:cpu_policy": "dedicated", "capabilities:hypervisor_type": "QEMU", "a:b": "c"}
    assert passes(extra, make_aggregate(1)) is True


def test_one_of_the_comma_separated_values_must_match():
    agg = make_aggregate(1, gen="1, 2,3")
    assert passes({"gen": "2"}, agg) is True
    assert passes({"gen": ">= 3"}, agg) is True
    assert not passes({"gen": ">= 4"}, agg)
    assert passes({"gen": "<or> 9 <or> 3"}, agg) is True
    # the metadata is split before matching: the whole raw value matches nothing
    assert not passes({"gen": "1, 2,3"}, agg)


def test_values_across_aggregates_are_pooled_and_every_spec_must_hold():
    aggs = [make_aggregate(1, ssd="true"), make_aggregate(2, gpu="yes")]
    assert passes({"ssd": "true", "gpu": "yes"}, *aggs) is True
    assert not passes({"ssd": "true", "gpu": "no"}, *aggs)


def test_no_extra_specs_passes_every_host():
    assert passes({}) is True
    assert passes({}, make_aggregate(1, ssd="true")) is True


def test_numeric_operator_on_a_non_number_fails_without_raising():
    assert not passes({"gen": ">= 2"}, make_aggregate(1, gen="new"))


def test_run_flags_match_nova():
    assert AggregateInstanceExtraSpecsFilter.RUN_ON_REBUILD is False
    assert AggregateInstanceExtraSpecsFilter.run_filter_once_per_request is True
