"""The default filters run over a list as the handler runs them (``prepare`` once, ``check``
per host, per aggregate set where declared) against nova's per-host ``host_passes``, over
random hosts and requests: the same hosts pass, in the same order, and every removed host
carries the same reason."""

from __future__ import annotations

import datetime
import logging

from hypothesis import given, settings
from hypothesis import strategies as st

from filters.affinity_filter import ServerGroupAffinityFilter, ServerGroupAntiAffinityFilter
from filters.all_hosts_filter import AllHostsFilter
from filters.compute_capabilities_filter import ComputeCapabilitiesFilter
from filters.compute_filter import ComputeFilter
from filters.image_props_filter import ImagePropertiesFilter
from scheduler.hosts import table as host_table
from tests.unit.filters.fakes import (
    NOW,
    make_host,
    make_service,
    make_spec,
    override,
    run_filter,
    tabled,
)
from tests.unit.filters.strategies import (
    SETTINGS,
    capability_hosts,
    compute_case,
    extra_specs,
    group_case,
    image_hosts,
    image_props,
    per_host,
)

# one path decides here (check after prepare): these tests guard the per-request state and
# the per-aggregates memo, which fewer examples exercise (the column paths, a second
# implementation, keep SETTINGS)
LIST_SETTINGS = settings(SETTINGS, max_examples=60)


def assert_list_equals_per_host(filt, hosts, spec):
    outcome = run_filter(filt, hosts, spec)
    passed, rejected = per_host(filt, hosts, spec)
    assert [id(h) for h in outcome.passed] == [id(h) for h in passed]
    assert [(id(h), r) for h, r in outcome.rejected] == [(id(h), r) for h, r in rejected]
    return outcome


# -- ComputeFilter ---------------------------------------------------------------------------


@LIST_SETTINGS
@given(compute_case())
def test_compute_filter_list_equals_per_host(case):
    hosts, down_time = case
    filt = ComputeFilter()
    filt.now = lambda: NOW
    with override("service_down_time", down_time):
        assert_list_equals_per_host(filt, hosts, make_spec())


def test_heartbeat_bounds_are_now_plus_or_minus_the_down_time():
    minute = datetime.timedelta(seconds=60)
    assert host_table.heartbeat_bounds(NOW, 60) == (NOW - minute, NOW + minute)
    assert host_table.heartbeat_bounds(NOW, 60.0) == (NOW - minute, NOW + minute)
    half = datetime.timedelta(seconds=59.5)
    assert host_table.heartbeat_bounds(NOW, 59.5) == (NOW - half, NOW + half)
    earliest, latest = host_table.heartbeat_bounds(NOW, -1)
    assert earliest > latest  # no heartbeat is recent
    assert host_table.heartbeat_bounds(NOW, 2**40) == (datetime.datetime.min, datetime.datetime.max)
    assert host_table.heartbeat_bounds(datetime.datetime.max, 60)[1] == datetime.datetime.max


def test_compute_filter_list_equals_per_host_with_debug_logging(caplog):
    hosts = [
        make_host("up", service=make_service(last_seen_up=NOW)),
        make_host("off", service=make_service(disabled=True, last_seen_up=NOW)),
        make_host("gone", service=make_service(last_seen_up=NOW - datetime.timedelta(hours=1))),
    ]
    filt = ComputeFilter()
    filt.now = lambda: NOW
    with caplog.at_level(logging.DEBUG, logger="filters.compute_filter"):
        outcome = assert_list_equals_per_host(filt, hosts, make_spec())
    assert [h.host for h in outcome.passed] == ["up"]
    assert any("gone" in r.getMessage() for r in caplog.records)


def test_compute_filter_columns_warn_once_per_request_naming_the_down_hosts(caplog):
    stale = NOW - datetime.timedelta(hours=1)
    hosts = [make_host(f"h{i}", service=make_service(last_seen_up=stale)) for i in range(12)]
    filt = ComputeFilter()
    filt.now = lambda: NOW
    table, rows = tabled(hosts)
    with caplog.at_level(logging.WARNING, logger="filters.compute_filter"):
        outcome = filt.filter_rows(table, rows, make_spec())
    assert not outcome.keep.any()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert warnings[0].startswith("12 host(s) have not been heard from in a while: h0, h1")
    assert warnings[0].endswith("...")


# -- ImagePropertiesFilter --------------------------------------------------------------------


@LIST_SETTINGS
@given(image_hosts(), image_props, st.sampled_from([None, "x86_64", "aarch64"]))
def test_image_properties_filter_list_equals_per_host(hosts, props, default_arch):
    spec = make_spec(image_props=props)
    with override("image_properties_default_architecture", default_arch, "filter_scheduler"):
        assert_list_equals_per_host(ImagePropertiesFilter(), hosts, spec)


# -- ComputeCapabilitiesFilter ----------------------------------------------------------------


@LIST_SETTINGS
@given(capability_hosts(), extra_specs)
def test_compute_capabilities_filter_list_equals_per_host(hosts, specs):
    assert_list_equals_per_host(ComputeCapabilitiesFilter(), hosts, make_spec(extra_specs=specs))


# -- server group filters, AllHostsFilter ------------------------------------------------------


@LIST_SETTINGS
@given(group_case())
def test_server_group_filters_list_equals_per_host(case):
    hosts, spec = case
    assert_list_equals_per_host(ServerGroupAntiAffinityFilter(), hosts, spec)
    assert_list_equals_per_host(ServerGroupAffinityFilter(), hosts, spec)
    assert_list_equals_per_host(AllHostsFilter(), hosts, spec)
