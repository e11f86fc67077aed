"""ComputeFilter: enabled and up services pass; prepare+check over a list and the columns
equal the per-host path."""

from __future__ import annotations

import datetime
import logging
import types
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oslo_utils import timeutils

from filters import compute_filter
from filters.compute_filter import ComputeFilter
from tests.unit.filters.fakes import (
    NOW,
    make_host,
    make_service,
    make_spec,
    override,
    run_filter,
    tabled,
)


def ago(seconds: float) -> datetime.datetime:
    return NOW - datetime.timedelta(seconds=seconds)


def passes(service, now=NOW):
    with mock.patch.object(timeutils, "utcnow", return_value=now):
        return ComputeFilter().host_passes(make_host(service=service), make_spec())


def test_enabled_and_recently_seen_service_passes():
    assert passes(make_service(last_seen_up=ago(10))) is True


def test_disabled_service_is_rejected():
    result = passes(make_service(disabled=True, disabled_reason="maintenance"))
    assert not result
    assert result.reason == "service disabled"


def test_forced_down_service_is_rejected_even_if_seen_recently():
    result = passes(make_service(forced_down=True, last_seen_up=ago(1)))
    assert not result
    assert result.reason == "service forced down"


def test_service_not_seen_for_longer_than_service_down_time_is_down():
    assert passes(make_service(last_seen_up=ago(60))) is True
    result = passes(make_service(last_seen_up=ago(61)))
    assert result.reason == "service down"
    with override("service_down_time", 120):
        assert passes(make_service(last_seen_up=ago(61))) is True


def test_heartbeat_in_the_future_counts_by_its_absolute_distance():
    assert passes(make_service(last_seen_up=ago(-30))) is True
    assert not passes(make_service(last_seen_up=ago(-90)))


def test_without_last_seen_up_created_at_is_used_not_updated_at():
    service = make_service(last_seen_up=None, created_at=ago(5), updated_at=ago(3600))
    assert passes(service) is True
    service = make_service(last_seen_up=None, created_at=ago(3600), updated_at=ago(5))
    assert not passes(service)


def test_timestamps_may_be_strings_or_timezone_aware():
    assert passes(make_service(last_seen_up=ago(5).isoformat())) is True
    aware = (
        ago(5)
        .replace(tzinfo=datetime.UTC)
        .astimezone(datetime.timezone(datetime.timedelta(hours=2)))
    )
    assert passes(make_service(last_seen_up=aware)) is True


def test_service_without_any_timestamp_is_down():
    result = passes(make_service(last_seen_up=None, created_at=None))
    assert result.reason == "service down"


def test_run_flags_match_nova():
    assert ComputeFilter.RUN_ON_REBUILD is False
    assert ComputeFilter.run_filter_once_per_request is True


services = st.fixed_dictionaries(
    {
        "disabled": st.booleans(),
        "forced_down": st.booleans(),
        "last_seen_up": st.none() | st.integers(-200, 200).map(ago),
        "created_at": st.none() | st.integers(-200, 200).map(ago),
    }
)


@settings(max_examples=150, deadline=None)
@given(st.lists(services, max_size=12), st.integers(1, 150))
def test_run_filter_equals_per_host_host_passes(service_list, down_time):
    hosts = [make_host(f"h{i}", service=s) for i, s in enumerate(service_list)]
    spec = make_spec()
    filt = ComputeFilter()
    with (
        mock.patch.object(timeutils, "utcnow", return_value=NOW),
        mock.patch.object(compute_filter.LOG, "warning"),
        override("service_down_time", down_time),
    ):
        outcome = run_filter(filt, hosts, spec)
        per_host = [(h, filt.host_passes(h, spec)) for h in hosts]
    assert outcome.passed == [h for h, r in per_host if r]
    assert outcome.rejected == [(h, r.reason) for h, r in per_host if not r]


down_times = st.one_of(
    st.integers(0, 150),
    st.floats(0, 150).map(lambda v: round(v, 7)),
    st.sampled_from([2**32, 2**40, 10**20, -1, float("inf")]),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(services, max_size=12), down_times)
def test_columns_equal_per_host_for_any_service_down_time(service_list, down_time):
    # the column path decides every down_time now (one rule), fractions and huge ones included
    hosts = [make_host(f"h{i}", service=s) for i, s in enumerate(service_list)]
    table, rows = tabled(hosts)
    spec = make_spec()
    filt = ComputeFilter()
    filt.now = lambda: NOW
    # service_down_time is an IntOpt; a float reaches the filter only through its module
    conf = types.SimpleNamespace(service_down_time=down_time)
    with (
        mock.patch.object(compute_filter.LOG, "warning"),
        mock.patch.object(compute_filter, "CONF", conf),
    ):
        outcome = filt.filter_rows(table, rows, spec)
        per_host = [filt.host_passes(h, spec) for h in hosts]
    assert outcome is not None
    assert np.asarray(outcome.keep, dtype=bool).tolist() == [bool(r) for r in per_host]
    codes = [] if outcome.codes is None else outcome.codes.tolist()
    assert [outcome.reasons[c] for c, r in zip(codes, per_host, strict=True) if not r] == [
        r.reason for r in per_host if not r
    ]


def test_the_per_host_path_warns_per_host_as_nova_does(caplog):
    # the one line per request is the column path's (filter_rows)
    stale = ago(3600)
    hosts = [make_host(f"h{i}", service=make_service(last_seen_up=stale)) for i in range(3)]
    hosts.append(make_host("off", service=make_service(disabled=True)))
    filt = ComputeFilter()
    filt.now = lambda: NOW
    with caplog.at_level(logging.WARNING, logger="filters.compute_filter"):
        outcome = run_filter(filt, hosts, make_spec())
    assert outcome.passed == []
    assert [r.getMessage() for r in caplog.records] == [
        f"{h} has not been heard from in a while" for h in hosts[:3]
    ]


def test_a_service_that_is_not_a_mapping_is_an_error_not_a_verdict():
    host = make_host()
    host.service = ["not", "a", "dict"]
    with pytest.raises(TypeError, match="not a mapping"):
        ComputeFilter().host_passes(host, make_spec())
