"""Request prefilters: what each one adds to the Placement query, and when."""

from __future__ import annotations

import os_traits
import pytest

from scheduler import request_filter
from scheduler.conf import CONF
from scheduler.exceptions import RequestFilterFailed
from scheduler.objects import Aggregate, Destination, Flavor, RequestSpec

PROJECT = "p-1"


class FakeAggregates:
    """The HostManager's aggregate view over a fixed list; counts the look-ups."""

    def __init__(self, aggregates: list[Aggregate]):
        self._aggregates = aggregates
        self.calls: list[dict] = []

    def aggregates_by_metadata(self, key=None, value=None, key_prefix=None):
        self.calls.append({"key": key, "value": value, "key_prefix": key_prefix})
        out = []
        for agg in self._aggregates:
            for k, v in agg.metadata.items():
                if key is not None and k != key:
                    continue
                if key_prefix is not None and not k.startswith(key_prefix):
                    continue
                if value is not None and v != value:
                    continue
                out.append(agg)
                break
        return out


def _agg(agg_id: int, metadata: dict[str, str]) -> Aggregate:
    return Aggregate(id=agg_id, uuid=f"agg-{agg_id}", name=f"a{agg_id}", metadata=metadata)


def _spec(**kw) -> RequestSpec:
    kw.setdefault("project_id", PROJECT)
    return RequestSpec(flavor=Flavor(memory_mb=512, vcpus=1), **kw)


# ------------------------------------------------------------------ compute_status_filter


def test_compute_status_filter_forbids_disabled_computes():
    spec = _spec()
    assert request_filter.compute_status_filter(spec, FakeAggregates([]), CONF) is True
    assert spec.request_level_params.root_forbidden == {os_traits.COMPUTE_STATUS_DISABLED}
    assert os_traits.COMPUTE_STATUS_DISABLED == "COMPUTE_STATUS_DISABLED"
    assert spec.request_level_params.root_required == set()


def test_compute_status_filter_keeps_other_forbidden_traits():
    spec = _spec()
    spec.request_level_params.root_forbidden.add("CUSTOM_X")
    request_filter.compute_status_filter(spec, FakeAggregates([]), CONF)
    request_filter.compute_status_filter(spec, FakeAggregates([]), CONF)
    assert spec.request_level_params.root_forbidden == {"CUSTOM_X", "COMPUTE_STATUS_DISABLED"}


# ---------------------------------------------------------- map_az_to_placement_aggregate


def test_az_maps_to_its_aggregates_as_one_or_set():
    aggs = FakeAggregates(
        [
            _agg(1, {"availability_zone": "az1"}),
            _agg(2, {"availability_zone": "az2"}),
            _agg(3, {"availability_zone": "az1", "ssd": "true"}),
            _agg(4, {"zone": "az1"}),
        ]
    )
    spec = _spec(availability_zone="az1")
    assert request_filter.map_az_to_placement_aggregate(spec, aggs, CONF) is True
    assert spec.requested_destination.aggregates == ["agg-1,agg-3"]
    assert aggs.calls == [{"key": "availability_zone", "value": "az1", "key_prefix": None}]


def test_az_aggregates_are_added_to_existing_required_aggregates():
    aggs = FakeAggregates([_agg(1, {"availability_zone": "az1"})])
    spec = _spec(availability_zone="az1", requested_destination=Destination(aggregates=["x,y"]))
    request_filter.map_az_to_placement_aggregate(spec, aggs, CONF)
    assert spec.requested_destination.aggregates == ["x,y", "agg-1"]


def test_az_without_aggregates_adds_nothing():
    aggs = FakeAggregates([_agg(1, {"availability_zone": "az2"})])
    spec = _spec(availability_zone="az1")
    assert request_filter.map_az_to_placement_aggregate(spec, aggs, CONF) is False
    assert spec.requested_destination is None


def test_no_az_requested_does_not_look_up_aggregates():
    aggs = FakeAggregates([_agg(1, {"availability_zone": "az1"})])
    spec = _spec()
    assert request_filter.map_az_to_placement_aggregate(spec, aggs, CONF) is False
    assert aggs.calls == [] and spec.requested_destination is None


# -------------------------------------------------------------- require_tenant_aggregate

TENANT_AGGS = [
    _agg(1, {"filter_tenant_id": PROJECT}),
    _agg(2, {"filter_tenant_id2": "other", "filter_tenant_id3": PROJECT}),
    _agg(3, {"filter_tenant_id": "other"}),
    # the project's id under a key that is not a tenant key does not count
    _agg(4, {"owner": PROJECT}),
]


def test_require_tenant_aggregate_is_off_by_default():
    aggs = FakeAggregates(TENANT_AGGS)
    spec = _spec()
    assert request_filter.require_tenant_aggregate(spec, aggs, CONF) is False
    assert aggs.calls == [] and spec.requested_destination is None


def test_tenant_is_limited_to_its_aggregates():
    CONF.set_override("limit_tenants_to_placement_aggregate", True, group="scheduler")
    spec = _spec()
    assert request_filter.require_tenant_aggregate(spec, FakeAggregates(TENANT_AGGS), CONF)
    assert spec.requested_destination.aggregates == ["agg-1,agg-2"]


def test_tenant_without_aggregate_may_go_anywhere_unless_required():
    CONF.set_override("limit_tenants_to_placement_aggregate", True, group="scheduler")
    spec = _spec(project_id="lonely")
    assert request_filter.require_tenant_aggregate(spec, FakeAggregates(TENANT_AGGS), CONF) is False
    assert spec.requested_destination is None

    CONF.set_override("placement_aggregate_required_for_tenants", True, group="scheduler")
    with pytest.raises(RequestFilterFailed, match="lonely"):
        request_filter.require_tenant_aggregate(spec, FakeAggregates(TENANT_AGGS), CONF)


def test_request_without_project_matches_no_tenant_aggregate():
    CONF.set_override("limit_tenants_to_placement_aggregate", True, group="scheduler")
    spec = _spec(project_id=None)
    assert request_filter.require_tenant_aggregate(spec, FakeAggregates(TENANT_AGGS), CONF) is False
    assert spec.requested_destination is None


def test_required_for_tenants_alone_does_nothing():
    CONF.set_override("placement_aggregate_required_for_tenants", True, group="scheduler")
    spec = _spec(project_id="lonely")
    assert request_filter.require_tenant_aggregate(spec, FakeAggregates([]), CONF) is False


# ------------------------------------------------------------------------ process_reqspec


def test_process_reqspec_runs_every_prefilter_in_novas_order():
    assert [name for name, _ in request_filter.ALL_REQUEST_FILTERS] == [
        "require_tenant_aggregate",
        "map_az_to_placement_aggregate",
        "compute_status_filter",
    ]
    CONF.set_override("limit_tenants_to_placement_aggregate", True, group="scheduler")
    aggs = FakeAggregates(TENANT_AGGS + [_agg(9, {"availability_zone": "az1"})])
    spec = _spec(availability_zone="az1")
    applied = request_filter.process_reqspec(spec, aggs, CONF)
    assert applied == [
        "require_tenant_aggregate",
        "map_az_to_placement_aggregate",
        "compute_status_filter",
    ]
    # tenant aggregates first, then the AZ's: both must hold (ANDed member_of)
    assert spec.requested_destination.aggregates == ["agg-1,agg-2", "agg-9"]
    assert spec.request_level_params.root_forbidden == {"COMPUTE_STATUS_DISABLED"}


def test_process_reqspec_with_defaults_only_forbids_disabled():
    spec = _spec(availability_zone="nowhere")
    applied = request_filter.process_reqspec(spec, FakeAggregates(TENANT_AGGS), CONF)
    assert applied == ["compute_status_filter"]
    assert spec.requested_destination is None


def test_process_reqspec_failure_stops_before_later_prefilters():
    CONF.set_override("limit_tenants_to_placement_aggregate", True, group="scheduler")
    CONF.set_override("placement_aggregate_required_for_tenants", True, group="scheduler")
    spec = _spec(project_id="lonely")
    with pytest.raises(RequestFilterFailed):
        request_filter.process_reqspec(spec, FakeAggregates([]), CONF)
    assert spec.request_level_params.root_forbidden == set()


def test_toggles_of_prefilters_we_do_not_run_are_warned_about(caplog):
    from scheduler.conf import CONF
    from scheduler.request_filter import warn_unimplemented_toggles

    assert warn_unimplemented_toggles(CONF) == []
    CONF.set_override("query_placement_for_routed_network_aggregates", True, group="scheduler")
    CONF.set_override("discover_hosts_in_cells_interval", 300, group="scheduler")
    with caplog.at_level("WARNING", logger="scheduler.request_filter"):
        names = warn_unimplemented_toggles(CONF)
    assert names == [
        "query_placement_for_routed_network_aggregates",
        "discover_hosts_in_cells_interval",
    ]
    assert "needs Neutron" in caplog.text
