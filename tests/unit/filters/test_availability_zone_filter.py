"""AvailabilityZoneFilter: aggregate AZ metadata, the default AZ, comma lists."""

from __future__ import annotations

from filters.availability_zone_filter import AvailabilityZoneFilter, host_zones
from tests.unit.filters.fakes import make_aggregate, make_host, make_spec, override


def check(az, aggregates=()):
    spec = make_spec()
    spec.availability_zone = az
    return AvailabilityZoneFilter().host_passes(make_host(aggregates=list(aggregates)), spec)


def test_flags_match_nova():
    assert AvailabilityZoneFilter.RUN_ON_REBUILD is False
    assert AvailabilityZoneFilter.run_filter_once_per_request is True


def test_request_without_az_passes_any_host():
    assert check(None, [make_aggregate(1, availability_zone="az1")]) is True
    assert check("", [make_aggregate(1, availability_zone="az1")]) is True


def test_host_in_the_requested_az_passes():
    assert check("az1", [make_aggregate(1, availability_zone="az1")]) is True


def test_host_in_another_az_is_rejected():
    result = check("az2", [make_aggregate(1, availability_zone="az1")])
    assert not result
    assert result.reason == "not in the requested availability zone"


def test_host_in_no_az_aggregate_is_in_the_default_az():
    plain = [make_aggregate(1, ssd="true")]
    assert check("nova", plain) is True
    assert not check("az1", plain)
    with override("default_availability_zone", "az1"):
        assert check("az1", plain) is True
        assert not check("nova", plain)


def test_host_in_an_az_aggregate_is_not_in_the_default_az():
    assert not check("nova", [make_aggregate(1, availability_zone="az1")])


def test_host_in_several_az_aggregates_matches_any():
    aggs = [make_aggregate(1, availability_zone="az1"), make_aggregate(2, availability_zone="az2")]
    assert check("az1", aggs) is True
    assert check("az2", aggs) is True
    assert not check("az3", aggs)


def test_comma_separated_metadata_is_split_and_stripped():
    aggs = [make_aggregate(1, availability_zone="az1, az2")]
    assert host_zones(make_host(aggregates=aggs)) == {"az1", "az2"}
    assert check("az2", aggs) is True
    assert not check("az1, az2", aggs)


def test_host_zones_is_none_without_az_metadata():
    assert host_zones(make_host()) is None
    assert host_zones(make_host(aggregates=[make_aggregate(1, x="y")])) is None
