"""SimpleCIDRAffinityFilter: host_ip within build_near_host_ip/cidr."""

from __future__ import annotations

from filters.simple_cidr_affinity_filter import SimpleCIDRAffinityFilter
from tests.unit.filters.fakes import make_host, make_spec, run_filter


def passes(host_ip, **hints):
    spec = make_spec(hints={k: [v] for k, v in hints.items()})
    filt = SimpleCIDRAffinityFilter()
    host = make_host(host_ip=host_ip)
    single = filt.host_passes(host, spec)
    outcome = run_filter(filt, [host], spec)
    assert bool(outcome.passed) == bool(single)
    if not single:
        assert outcome.rejected == [(host, single.reason)]
    return single


def test_default_cidr_is_24():
    assert passes("10.8.1.200", build_near_host_ip="10.8.1.7") is True
    result = passes("10.8.2.1", build_near_host_ip="10.8.1.7")
    assert result.reason == "host IP outside the build_near_host_ip network"


def test_cidr_hint_widens_or_narrows_the_network():
    assert passes("10.8.2.1", build_near_host_ip="10.8.1.7", cidr="/16") is True
    assert not passes("10.8.1.9", build_near_host_ip="10.8.1.7", cidr="/30")
    assert passes("10.8.1.6", build_near_host_ip="10.8.1.7", cidr="/30") is True
    assert passes("10.8.1.7", build_near_host_ip="10.8.1.7", cidr="/32") is True


def test_ipv6():
    assert passes("fd00::1:5", build_near_host_ip="fd00::1:1", cidr="/64") is True
    assert not passes("fd01::1", build_near_host_ip="fd00::1:1", cidr="/64")
    # a v4 host is not in a v6 network
    assert not passes("10.0.0.1", build_near_host_ip="fd00::1", cidr="/0")


def test_without_build_near_host_ip_every_host_passes():
    assert passes(None) is True
    assert passes("10.0.0.1", cidr="/8") is True


def test_host_without_ip_is_rejected_not_an_error():
    assert passes(None, build_near_host_ip="10.0.0.1").reason == "host has no valid IP address"
    assert not passes("not-an-ip", build_near_host_ip="10.0.0.1")


def test_invalid_hint_rejects_with_a_reason_instead_of_raising():
    assert passes("10.0.0.1", build_near_host_ip="10.0.0.999").reason == (
        "invalid build_near_host_ip/cidr hint"
    )
    assert not passes("10.0.0.1", build_near_host_ip="10.0.0.1", cidr="24")
    assert not passes("10.0.0.1", build_near_host_ip="10.0.0.1", cidr="/33")


def test_run_flags_match_nova():
    assert SimpleCIDRAffinityFilter.RUN_ON_REBUILD is False
    assert SimpleCIDRAffinityFilter.run_filter_once_per_request is True
