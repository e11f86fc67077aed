"""ServerGroupSoftAffinityWeigher / ServerGroupSoftAntiAffinityWeigher."""

from __future__ import annotations

import pytest

from scheduler.objects import InstanceGroup
from tests.unit.filters.fakes import make_aggregate, make_host, make_spec, override
from tests.unit.weighers.fakes import weigh_all
from weighers.affinity import ServerGroupSoftAffinityWeigher, ServerGroupSoftAntiAffinityWeigher
from weighers.handler import WeightHandler


def group(policy, members=("m1", "m2", "m3")):
    return InstanceGroup(uuid="g1", policy=policy, members=list(members))


def hosts():
    return [
        make_host("two", instances={"m1": object(), "m2": object(), "x": object()}),
        make_host("none", instances={"x": object(), "y": object()}),
        make_host("one", instances={"m3": object()}),
        make_host("empty", instances={}),
    ]


def weigh(weigher, spec, host_list=None):
    weighed = WeightHandler([weigher]).weigh(host_list or hosts(), spec)
    return [(w.obj.host, w.weight) for w in weighed]


def test_soft_affinity_counts_members_on_host():
    spec = make_spec(group=group("soft-affinity"))
    weigher = ServerGroupSoftAffinityWeigher()
    assert weigh_all(weigher, hosts(), spec) == [2, 0, 1, 0]
    assert weigh(weigher, spec) == [("two", 1.0), ("one", 0.5), ("none", 0.0), ("empty", 0.0)]


def test_soft_anti_affinity_is_minus_the_count():
    spec = make_spec(group=group("soft-anti-affinity"))
    weigher = ServerGroupSoftAntiAffinityWeigher()
    assert weigh_all(weigher, hosts(), spec) == [-2, 0, -1, 0]
    assert weigh(weigher, spec) == [("none", 1.0), ("empty", 1.0), ("one", 0.5), ("two", 0.0)]


@pytest.mark.parametrize(
    "weigher_cls", [ServerGroupSoftAffinityWeigher, ServerGroupSoftAntiAffinityWeigher]
)
@pytest.mark.parametrize("policy", [None, "affinity", "anti-affinity", "other"])
def test_other_policies_and_no_group_weigh_zero(weigher_cls, policy):
    spec = make_spec(group=group(policy) if policy else None)
    weigher = weigher_cls()
    assert weigh_all(weigher, hosts(), spec) == [0, 0, 0, 0]
    assert [weigher._weigh_object(h, spec) for h in hosts()] == [0, 0, 0, 0]


def test_each_weigher_only_reacts_to_its_own_policy():
    spec = make_spec(group=group("soft-affinity"))
    assert weigh_all(ServerGroupSoftAntiAffinityWeigher(), hosts(), spec) == [0, 0, 0, 0]
    spec = make_spec(group=group("soft-anti-affinity"))
    assert weigh_all(ServerGroupSoftAffinityWeigher(), hosts(), spec) == [0, 0, 0, 0]


def test_group_without_members_weighs_zero():
    spec = make_spec(group=group("soft-affinity", members=()))
    assert weigh_all(ServerGroupSoftAffinityWeigher(), hosts(), spec) == [0, 0, 0, 0]


def test_single_object_matches_batch():
    for weigher, policy in (
        (ServerGroupSoftAffinityWeigher(), "soft-affinity"),
        (ServerGroupSoftAntiAffinityWeigher(), "soft-anti-affinity"),
    ):
        spec = make_spec(group=group(policy, members=[f"m{i}" for i in range(10)]))
        expected = weigh_all(weigher, hosts(), spec)
        assert [weigher._weigh_object(h, spec) for h in hosts()] == expected


def test_multipliers_and_aggregate_override():
    assert ServerGroupSoftAffinityWeigher().configured_multiplier() == 1.0
    assert ServerGroupSoftAntiAffinityWeigher().configured_multiplier() == 1.0
    spec = make_spec(group=group("soft-affinity"))
    host_list = hosts()
    host_list[0].aggregates = [make_aggregate(1, soft_affinity_weight_multiplier="0.5")]
    with override("soft_affinity_weight_multiplier", 4.0, group="filter_scheduler"):
        result = weigh(ServerGroupSoftAffinityWeigher(), spec, host_list)
    assert result == [("one", 2.0), ("two", 0.5), ("none", 0.0), ("empty", 0.0)]


def test_anti_affinity_multiplier_option():
    spec = make_spec(group=group("soft-anti-affinity"))
    with override("soft_anti_affinity_weight_multiplier", 2.0, group="filter_scheduler"):
        result = weigh(ServerGroupSoftAntiAffinityWeigher(), spec)
    assert result[0] == ("none", 2.0)
    assert result[-1] == ("two", 0.0)
