"""AggregateMultiTenancyIsolation: filter_tenant_id* aggregate keys restrict the projects."""

from __future__ import annotations

from filters.aggregate_multitenancy_isolation import AggregateMultiTenancyIsolation
from tests.unit.filters.fakes import make_aggregate, make_host, make_spec, run_filter


def passes(project_id, *aggregates):
    filt = AggregateMultiTenancyIsolation()
    host = make_host(aggregates=list(aggregates))
    spec = make_spec()
    spec.project_id = project_id
    single = filt.host_passes(host, spec)
    outcome = run_filter(filt, [host], spec)
    assert bool(outcome.passed) == bool(single)
    assert [r for _, r in outcome.rejected] == ([] if single else [single.reason])
    return single


def test_listed_project_passes_and_others_are_rejected():
    agg = make_aggregate(1, filter_tenant_id="p1,p2")
    assert passes("p1", agg) is True
    assert passes("p2", agg) is True
    assert passes("p3", agg).reason == "project not allowed by aggregate"


def test_all_filter_tenant_id_keys_of_all_aggregates_count():
    aggs = [
        make_aggregate(1, filter_tenant_id="p1", filter_tenant_id2=" p2 "),
        make_aggregate(2, filter_tenant_id_3="p3"),
    ]
    for project in ("p1", "p2", "p3"):
        assert passes(project, *aggs) is True
    assert not passes("p4", *aggs)


def test_hosts_without_tenant_keys_are_open_to_everyone():
    assert passes("p9") is True
    assert passes("p9", make_aggregate(1, availability_zone="az1", tenant_id="p1")) is True


def test_request_without_project_is_rejected_by_restricted_hosts():
    assert not passes(None, make_aggregate(1, filter_tenant_id="p1"))


def test_run_flags_match_nova():
    assert AggregateMultiTenancyIsolation.RUN_ON_REBUILD is False
    assert AggregateMultiTenancyIsolation.run_filter_once_per_request is True
