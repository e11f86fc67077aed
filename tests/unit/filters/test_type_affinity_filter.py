"""TypeAffinityFilter: one flavor per host, judged on the instances that carry a flavor id."""

from __future__ import annotations

from types import SimpleNamespace

from filters.type_affinity_filter import TypeAffinityFilter
from scheduler.objects import Flavor
from tests.unit.filters.fakes import make_host, make_spec


def check(instances, flavor_id=1):
    spec = make_spec()
    spec.flavor = Flavor(memory_mb=512, vcpus=1, id=flavor_id)
    return TypeAffinityFilter().host_passes(make_host(instances=instances), spec)


def test_flags_match_nova():
    assert TypeAffinityFilter.RUN_ON_REBUILD is False
    assert TypeAffinityFilter.run_filter_once_per_request is False


def test_empty_host_passes():
    assert check({}) is True


def test_host_with_only_the_same_flavor_passes():
    instances = {"a": {"instance_type_id": 1}, "b": {"instance_type_id": 1}}
    assert check(instances) is True


def test_host_with_another_flavor_is_rejected():
    result = check({"a": {"instance_type_id": 1}, "b": {"instance_type_id": 2}})
    assert not result
    assert result.reason == "host runs another flavor"
    assert not check({"a": {"instance_type_id": 2}})


def test_instance_objects_with_the_attribute_count_too():
    assert not check({"a": SimpleNamespace(instance_type_id=2)})
    assert check({"a": SimpleNamespace(instance_type_id=1)}) is True


def test_ids_compare_across_int_and_string():
    assert check({"a": {"instance_type_id": "1"}}, flavor_id=1) is True
    assert not check({"a": {"instance_type_id": "2"}}, flavor_id=1)


def test_instances_known_by_uuid_only_are_not_counted():
    # what our HostManager loads: {uuid: None}
    assert check({"a": None, "b": None}) is True
    assert check({"a": {"uuid": "a"}, "b": SimpleNamespace(uuid="b")}) is True
    assert not check({"a": None, "b": {"instance_type_id": 7}})
