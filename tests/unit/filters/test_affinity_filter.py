"""Server group hard affinity and anti-affinity filters."""

from __future__ import annotations

from filters.affinity_filter import ServerGroupAffinityFilter, ServerGroupAntiAffinityFilter
from scheduler.objects import InstanceGroup
from tests.unit.filters.fakes import make_host, make_spec, run_filter


def group(policy, members=(), hosts=(), **rules):
    return InstanceGroup(
        uuid="g-1", policy=policy, members=list(members), hosts=list(hosts), rules=rules
    )


def anti(host, spec):
    return ServerGroupAntiAffinityFilter().host_passes(host, spec)


def aff(host, spec):
    return ServerGroupAffinityFilter().host_passes(host, spec)


def test_anti_affinity_ignores_requests_without_that_policy():
    busy = make_host(instances={"m1": object()})
    assert anti(busy, make_spec()) is True
    assert anti(busy, make_spec(group=group("affinity", members=["m1"]))) is True
    assert anti(busy, make_spec(group=group("soft-anti-affinity", members=["m1"]))) is True


def test_anti_affinity_rejects_host_with_a_member():
    spec = make_spec(group=group("anti-affinity", members=["m1", "m2"]), instance_uuid="new")
    assert anti(make_host(instances={"other": object()}), spec) is True
    result = anti(make_host(instances={"m1": object()}), spec)
    assert not result
    assert "anti-affinity" in result.reason


def test_anti_affinity_passes_the_host_the_instance_already_runs_on():
    spec = make_spec(group=group("anti-affinity", members=["m1", "me"]), instance_uuid="me")
    assert anti(make_host(instances={"m1": object(), "me": object()}), spec) is True


def test_anti_affinity_max_server_per_host_rule():
    g = group("anti-affinity", members=["m1", "m2", "m3"], max_server_per_host="2")
    spec = make_spec(group=g, instance_uuid="new")
    assert anti(make_host(instances={"m1": 1}), spec) is True
    assert not anti(make_host(instances={"m1": 1, "m2": 2}), spec)


def test_affinity_restricts_to_the_group_hosts():
    spec = make_spec(group=group("affinity", hosts=["host1"]))
    assert aff(make_host("host1"), spec) is True
    result = aff(make_host("host2"), spec)
    assert not result
    assert "affinity" in result.reason


def test_affinity_with_no_hosts_yet_passes_everything():
    spec = make_spec(group=group("affinity"))
    assert aff(make_host("host2"), spec) is True


def test_affinity_ignores_other_policies():
    spec = make_spec(group=group("anti-affinity", hosts=["host1"]))
    assert aff(make_host("host2"), spec) is True
    assert aff(make_host("host2"), make_spec()) is True


def test_run_filter_keeps_order_and_reasons():
    hosts = [make_host(n) for n in ("c", "a", "b")]
    spec = make_spec(group=group("affinity", hosts=["a", "c"]))
    outcome = run_filter(ServerGroupAffinityFilter(), hosts, spec)
    assert [h.host for h in outcome.passed] == ["c", "a"]
    assert [h.host for h, _ in outcome.rejected] == ["b"]


def test_run_flags_match_nova():
    for cls in (ServerGroupAffinityFilter, ServerGroupAntiAffinityFilter):
        assert cls.RUN_ON_REBUILD is False
        assert cls.run_filter_once_per_request is False
