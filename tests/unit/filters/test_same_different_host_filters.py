"""SameHostFilter and DifferentHostFilter: the same_host / different_host hints."""

from __future__ import annotations

from filters.different_host_filter import DifferentHostFilter
from filters.same_host_filter import SameHostFilter
from tests.unit.filters.fakes import make_host, make_spec, run_filter


def host_with(*uuids):
    return make_host(instances={u: None for u in uuids})


def run(filt, hosts, hints):
    spec = make_spec(hints=hints)
    outcome = run_filter(filt, hosts, spec)
    per_host = [filt.host_passes(h, spec) for h in hosts]
    assert outcome.passed == [h for h, r in zip(hosts, per_host, strict=True) if r]
    assert [r for _, r in outcome.rejected] == [r.reason for r in per_host if not r]
    return per_host


def test_different_host_rejects_hosts_running_a_listed_instance():
    hosts = [host_with("a"), host_with("b", "c"), host_with(), host_with("x")]
    results = run(DifferentHostFilter(), hosts, {"different_host": ["a", "c"]})
    assert results[0].reason == "runs an instance named in different_host"
    assert not results[1]
    assert results[2] is True and results[3] is True


def test_same_host_keeps_only_hosts_running_a_listed_instance():
    hosts = [host_with("a"), host_with("b", "c"), host_with(), host_with("x")]
    results = run(SameHostFilter(), hosts, {"same_host": ["a", "c"]})
    assert results[0] is True and results[1] is True
    assert results[2].reason == "runs no instance named in same_host"
    assert not results[3]


def test_single_uuid_hint_is_unwrapped_and_checked_as_a_uuid_not_characters():
    # nova's hints are lists of strings; a one-element list is unwrapped to the string
    host = host_with("abc")
    assert SameHostFilter().host_passes(host, make_spec(hints={"same_host": ["abc"]})) is True
    assert not SameHostFilter().host_passes(host_with("a"), make_spec(hints={"same_host": "abc"}))
    assert not DifferentHostFilter().host_passes(host, make_spec(hints={"different_host": "abc"}))
    assert DifferentHostFilter().host_passes(
        host_with("a"), make_spec(hints={"different_host": "abc"})
    )


def test_without_the_hint_every_host_passes():
    hosts = [host_with("a"), host_with()]
    for filt in (SameHostFilter(), DifferentHostFilter()):
        assert run(filt, hosts, {}) == [True, True]
        assert run(filt, hosts, {"same_host": [], "different_host": []}) == [True, True]


def test_run_flags_match_nova():
    for cls in (SameHostFilter, DifferentHostFilter):
        assert cls.RUN_ON_REBUILD is False
        assert cls.run_filter_once_per_request is True
