"""RackSpreadWeigher: a server group's instances spread across racks."""

from __future__ import annotations

from example_builders import make_aggregate, make_host, make_spec
from novasched_example_plugins.rack_spread_weigher import RackSpreadWeigher, rack_of

from scheduler.conf import CONF
from scheduler.objects import InstanceGroup
from weighers import Same
from weighers.handler import WeightHandler, raw_values


def racks():
    rack1 = make_aggregate(["r1a", "r1b", "r1c"], rack="rack1")
    rack2 = make_aggregate(["r2a", "r2b"], rack="rack2")
    return {
        "r1a": make_host("r1a", aggregates=[rack1]),
        "r1b": make_host("r1b", aggregates=[rack1]),
        "r2a": make_host("r2a", aggregates=[rack2]),
        "r2b": make_host("r2b", aggregates=[rack2]),
        "s3": make_host("s3", stats={"rack": "rack3"}),
        "lone": make_host("lone"),
    }


def weigh_all(weigher, hosts, spec):
    """The weigher's raw value for each host, as the weight handler gets them."""
    values = raw_values(weigher, hosts, spec)
    return [values.value] * len(hosts) if isinstance(values, Same) else values


def group_spec(policy: str, hosts: list[str]):
    spec = make_spec()
    spec.instance_group = InstanceGroup(uuid="g", policy=policy, hosts=hosts)
    return spec


def test_rack_from_aggregate_else_stats():
    hosts = racks()
    assert rack_of(hosts["r1a"]) == "rack1"
    assert rack_of(hosts["s3"]) == "rack3"
    assert rack_of(hosts["lone"]) is None


def test_racks_with_fewer_group_hosts_weigh_more():
    hosts = racks()
    # r1c is not a candidate (full), but its rack aggregate says it is in rack1
    spec = group_spec("anti-affinity", ["r1c", "r1a", "r2a"])
    raw = weigh_all(RackSpreadWeigher(), list(hosts.values()), spec)
    assert dict(zip(hosts, raw, strict=True)) == {
        "r1a": -2.0,
        "r1b": -2.0,
        "r2a": -1.0,
        "r2b": -1.0,
        "s3": 0.0,
        "lone": 0.0,
    }


def test_a_host_without_rack_is_a_rack_of_its_own():
    hosts = racks()
    spec = group_spec("soft-anti-affinity", ["lone"])
    raw = weigh_all(RackSpreadWeigher(), list(hosts.values()), spec)
    assert dict(zip(hosts, raw, strict=True))["lone"] == -1.0
    assert sum(raw) == -1.0


def test_no_preference_without_a_spreading_group():
    hosts = list(racks().values())
    weigher = RackSpreadWeigher()
    assert weigh_all(weigher, hosts, make_spec()) == [0.0] * len(hosts)
    assert weigh_all(weigher, hosts, group_spec("affinity", ["r1a"])) == [0.0] * len(hosts)
    assert weigh_all(weigher, hosts, group_spec("anti-affinity", [])) == [0.0] * len(hosts)


def test_sorted_by_the_weight_handler_and_the_multiplier():
    hosts = racks()
    spec = group_spec("anti-affinity", ["r1a", "r2b"])
    ordered = [
        w.obj.host for w in WeightHandler([RackSpreadWeigher()]).weigh(list(hosts.values()), spec)
    ]
    assert ordered[:2] == ["s3", "lone"]
    CONF.set_override("rack_spread_weight_multiplier", -1.0, group="example_plugins")
    ordered = [
        w.obj.host for w in WeightHandler([RackSpreadWeigher()]).weigh(list(hosts.values()), spec)
    ]
    assert ordered[:4] == ["r1a", "r1b", "r2a", "r2b"]


def test_an_aggregate_overrides_the_multiplier():
    weigher = RackSpreadWeigher()
    host = make_host("h", aggregates=[make_aggregate(rack_spread_weight_multiplier="0.25")])
    assert weigher.weight_multiplier(host) == 0.25
    assert weigher.weight_multiplier(make_host("x")) == 1.0


def test_a_rack_known_from_stats_covers_the_hosts_weighed_with_it():
    # prepare sees every host being weighed: two hosts whose stats name the same rack share it
    hosts = [make_host("s3", stats={"rack": "rack3"}), make_host("s4", stats={"rack": "rack3"})]
    spec = group_spec("anti-affinity", ["s3"])
    assert weigh_all(RackSpreadWeigher(), hosts, spec) == [-1.0, -1.0]
