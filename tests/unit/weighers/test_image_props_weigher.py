"""ImagePropertiesWeigher: counts instances on the host sharing the request's image props."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from tests.unit.filters.fakes import make_aggregate, make_host, make_spec, override
from tests.unit.weighers.fakes import weigh_all
from weighers.handler import WeightHandler
from weighers.image_props import ImagePropertiesWeigher

REQUEST = {"os_distro": "ubuntu", "hw_machine_type": "q35", "hw_numa_nodes": 2}


def inst(**props):
    return {"uuid": "x", "image_properties": props}


def hosts():
    return [
        # 2 x os_distro, 1 x hw_machine_type, 1 x hw_numa_nodes (an int on the request, a
        # string here: compared as strings)
        make_host(
            "ubuntu",
            instances={
                "i1": inst(os_distro="ubuntu", hw_machine_type="q35"),
                "i2": inst(os_distro="ubuntu", hw_numa_nodes="2"),
                "i3": inst(os_distro="centos"),
            },
        ),
        make_host("mixed", instances={"i4": inst(os_distro="ubuntu", hw_machine_type="pc")}),
        make_host("other", instances={"i5": inst(os_distro="debian"), "i6": inst()}),
        make_host("empty", instances={}),
    ]


def enabled(value=1.0):
    return override("image_props_weight_multiplier", value, group="filter_scheduler")


def setting(values):
    return override("image_props_weight_setting", values, group="filter_scheduler")


def test_off_by_default():
    weigher = ImagePropertiesWeigher()
    assert weigher.configured_multiplier() == 0.0
    assert weigh_all(weigher, hosts(), make_spec(image_props=REQUEST)) == [0.0] * 4


def test_counts_matching_properties_per_instance():
    with enabled():
        weigher = ImagePropertiesWeigher()
        spec = make_spec(image_props=REQUEST)
        assert weigh_all(weigher, hosts(), spec) == [4.0, 1.0, 0.0, 0.0]
        assert [weigher._weigh_object(h, spec) for h in hosts()] == [4.0, 1.0, 0.0, 0.0]
        weighed = WeightHandler([weigher]).weigh(hosts(), spec)
    assert [(w.obj.host, w.weight) for w in weighed] == [
        ("ubuntu", 1.0),
        ("mixed", 0.25),
        ("other", 0.0),
        ("empty", 0.0),
    ]


def test_negative_multiplier_spreads():
    with enabled(-1.0):
        weighed = WeightHandler([ImagePropertiesWeigher()]).weigh(
            hosts(), make_spec(image_props=REQUEST)
        )
    assert [w.obj.host for w in weighed] == ["other", "empty", "mixed", "ubuntu"]


def test_weight_setting_weighs_only_listed_properties():
    with enabled(), setting(["os_distro=0.5", "hw_machine_type=-3", "junk"]):
        weigher = ImagePropertiesWeigher()
        assert weigher.setting == {"os_distro": 0.5, "hw_machine_type": -3.0}
        # ubuntu: 2 * 0.5 + 1 * -3 ; hw_numa_nodes is not listed: 0
        assert weigh_all(weigher, hosts(), make_spec(image_props=REQUEST)) == [
            -2.0,
            0.5,
            0.0,
            0.0,
        ]


def test_setting_with_only_bad_entries_weighs_evenly():
    with enabled(), setting(["nonsense"]):
        assert weigh_all(ImagePropertiesWeigher(), hosts(), make_spec(image_props=REQUEST)) == [
            4.0,
            1.0,
            0.0,
            0.0,
        ]


def test_request_without_image_or_properties_weighs_zero():
    with enabled():
        weigher = ImagePropertiesWeigher()
        assert weigh_all(weigher, hosts(), make_spec()) == [0.0] * 4
        assert weigh_all(weigher, hosts(), make_spec(image_props={})) == [0.0] * 4


def test_list_values_compare_as_strings():
    spec = make_spec(image_props={"traits_required": ["A", "B"]})
    host_list = [
        make_host("same", instances={"i": inst(traits_required=["A", "B"])}),
        make_host("reordered", instances={"i": inst(traits_required=["B", "A"])}),
    ]
    with enabled():
        assert weigh_all(ImagePropertiesWeigher(), host_list, spec) == [1.0, 0.0]


def test_instances_without_image_properties_weigh_zero_and_warn_once(caplog):
    host_list = [
        make_host("a", instances={"i1": SimpleNamespace(uuid="i1")}),
        make_host("b", instances={"i2": {"uuid": "i2"}}),
    ]
    weigher = ImagePropertiesWeigher()
    with enabled(), caplog.at_level(logging.WARNING, logger="weighers.image_props"):
        spec = make_spec(image_props=REQUEST)
        assert weigh_all(weigher, host_list, spec) == [0.0, 0.0]
        assert weigh_all(weigher, host_list, spec) == [0.0, 0.0]
    assert len(caplog.records) == 1


def test_object_instances_with_attribute():
    host_list = [make_host("a", instances={"i": SimpleNamespace(image_properties=REQUEST)})]
    with enabled():
        assert weigh_all(ImagePropertiesWeigher(), host_list, make_spec(image_props=REQUEST)) == [
            3.0
        ]


def test_aggregate_override_alone_does_not_turn_it_on():
    agg = make_aggregate(1, image_props_weight_multiplier="5")
    host_list = hosts()
    for h in host_list:
        h.aggregates = [agg]
    weighed = WeightHandler([ImagePropertiesWeigher()]).weigh(
        host_list, make_spec(image_props=REQUEST)
    )
    assert {w.weight for w in weighed} == {0.0}


def test_aggregate_override_when_enabled():
    agg = make_aggregate(1, image_props_weight_multiplier="-2")
    host_list = hosts()
    host_list[1].aggregates = [agg]
    with enabled():
        weighed = WeightHandler([ImagePropertiesWeigher()]).weigh(
            host_list, make_spec(image_props=REQUEST)
        )
    assert [(w.obj.host, w.weight) for w in weighed] == [
        ("ubuntu", 1.0),
        ("other", 0.0),
        ("empty", 0.0),
        ("mixed", -0.5),
    ]
