"""The aggregate-metadata filters are ``per_aggregates``: the handler checks one host per set
of aggregates and gives the others its answer. That must be what host_passes gives, host by
host."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from filters.aggregate_image_properties_isolation import AggregateImagePropertiesIsolation
from filters.aggregate_instance_extra_specs import AggregateInstanceExtraSpecsFilter
from filters.aggregate_multitenancy_isolation import AggregateMultiTenancyIsolation
from filters.availability_zone_filter import AvailabilityZoneFilter
from filters.handler import FilterHandler
from filters.type_affinity import AggregateTypeAffinityFilter
from tests.unit.filters.fakes import make_aggregate, make_host, make_spec

AGGREGATES = [
    make_aggregate(1, os_distro="ubuntu,debian", ssd="true"),
    make_aggregate(2, os_distro="centos", filter_tenant_id="p1"),
    make_aggregate(3, instance_type="small, large", gen="2"),
    make_aggregate(4, filter_tenant_id2="p2,p3", instance_type="tiny"),
    make_aggregate(5, availability_zone="az1"),
    make_aggregate(6, availability_zone="az2, nova"),
]
FILTERS = [
    AggregateImagePropertiesIsolation,
    AggregateInstanceExtraSpecsFilter,
    AggregateMultiTenancyIsolation,
    AggregateTypeAffinityFilter,
    AvailabilityZoneFilter,
]


def test_the_aggregate_filters_are_per_aggregates():
    assert all(cls.per_aggregates is True for cls in FILTERS)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(st.sampled_from(AGGREGATES), max_size=3, unique_by=lambda a: a.id), max_size=10
    ),
    st.sampled_from(FILTERS),
    st.sampled_from(["ubuntu", "centos", "suse"]),
    st.dictionaries(
        st.sampled_from(["ssd", "gen", "aggregate_instance_extra_specs:gen", "hw:x"]),
        st.sampled_from(["true", "2", ">= 2", "<or> 1 <or> 3"]),
        max_size=2,
    ),
    st.sampled_from(["p1", "p2", "p9", None]),
    st.sampled_from(["small", "tiny", "huge"]),
    st.sampled_from(["az1", "az2", "nova", None]),
)
def test_handler_memo_equals_per_host(
    aggregate_lists, cls, distro, extra_specs, project, flavor, az
):
    hosts = [make_host(f"h{i}", aggregates=aggs) for i, aggs in enumerate(aggregate_lists)]
    spec = make_spec(extra_specs=extra_specs, image_props={"os_distro": distro})
    spec.project_id = project
    spec.flavor.name = flavor
    spec.availability_zone = az
    filt = cls()
    per_host = [(h, filt.host_passes(h, spec)) for h in hosts]

    checked = []
    check = filt.check

    def counting(host, prepared):
        checked.append(host)
        return check(host, prepared)

    filt.check = counting
    report = FilterHandler([filt]).run(hosts, spec)
    assert report.hosts == [h for h, r in per_host if r]
    assert report.steps[0].removed == [(h, r.reason) for h, r in per_host if not r]
    # one host checked per distinct list of aggregates (none when the request asks nothing)
    assert len(checked) == len({tuple(a.id for a in h.aggregates) for h in checked})
    assert len(checked) <= len({tuple(a.id for a in h.aggregates) for h in hosts})
