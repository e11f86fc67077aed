"""RetryFilter: (host, node) pairs already tried are rejected; no retry passes all."""

from __future__ import annotations

from filters.retry_filter import RetryFilter
from scheduler.objects import SchedulerRetries
from tests.unit.filters.fakes import make_host, make_spec, run_filter


def spec_with(hosts):
    spec = make_spec()
    spec.retry = SchedulerRetries(num_attempts=len(hosts) + 1, hosts=list(hosts))
    return spec


def test_flags_match_nova():
    assert RetryFilter.RUN_ON_REBUILD is False
    assert RetryFilter.run_filter_once_per_request is False


def test_without_retry_every_host_passes():
    assert RetryFilter().host_passes(make_host("h1"), make_spec()) is True
    assert RetryFilter().host_passes(make_host("h1"), spec_with([])) is True


def test_tried_node_is_rejected():
    result = RetryFilter().host_passes(make_host("h1", "n1"), spec_with([("h1", "n1")]))
    assert not result
    assert result.reason == "already tried by this request"


def test_other_node_of_a_tried_host_passes():
    assert RetryFilter().host_passes(make_host("h1", "n2"), spec_with([("h1", "n1")])) is True
    assert RetryFilter().host_passes(make_host("h2", "n1"), spec_with([("h1", "n1")])) is True


def test_pairs_given_as_lists_are_accepted():
    assert not RetryFilter().host_passes(make_host("h1", "n1"), spec_with([["h1", "n1"]]))


def test_run_filter_equals_host_passes_per_host():
    hosts = [make_host(f"h{i}", f"n{i}") for i in range(5)]
    spec = spec_with([("h1", "n1"), ("h3", "n3"), ("h9", "n9")])
    outcome = run_filter(RetryFilter(), hosts, spec)
    assert [h.host for h in outcome.passed] == ["h0", "h2", "h4"]
    assert [(h.host, why) for h, why in outcome.rejected] == [
        ("h1", "already tried by this request"),
        ("h3", "already tried by this request"),
    ]
    per_host = [h for h in hosts if RetryFilter().host_passes(h, spec)]
    assert per_host == outcome.passed
    assert run_filter(RetryFilter(), hosts, make_spec()).passed == hosts
