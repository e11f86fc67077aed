from __future__ import annotations

from urllib.parse import unquote

import pytest
from oslo_config import cfg

from placement_client.api import AllocationCandidates
from placement_client.query import build_queries, merge_candidates
from scheduler import conf as sched_conf
from scheduler.exceptions import InvalidRequest
from scheduler.objects import (
    Destination,
    Flavor,
    ImageMeta,
    RequestGroup,
    RequestLevelParams,
    RequestSpec,
)


@pytest.fixture
def conf():
    c = cfg.ConfigOpts()
    sched_conf.register_opts(c)
    c([], project="novasched-test", default_config_files=[])
    return c


def _spec(extra_specs=None, **kw) -> RequestSpec:
    flavor = Flavor(
        memory_mb=kw.pop("memory_mb", 2048),
        vcpus=kw.pop("vcpus", 2),
        root_gb=kw.pop("root_gb", 20),
        ephemeral_gb=kw.pop("ephemeral_gb", 0),
        swap=kw.pop("swap", 0),
        extra_specs=extra_specs or {},
    )
    return RequestSpec(flavor=flavor, **kw)


def _qs(query) -> str:
    return unquote(query.to_querystring())


def test_plain_flavor_gives_nova_default_query(conf):
    spec = _spec(vcpus=1)
    spec.request_level_params.root_forbidden.add("COMPUTE_STATUS_DISABLED")
    (query,) = build_queries(spec, conf)
    assert _qs(query) == (
        "limit=1000&resources=DISK_GB:20,MEMORY_MB:2048,VCPU:1"
        "&root_required=!COMPUTE_STATUS_DISABLED"
    )


def test_disk_counts_ephemeral_and_swap_rounded_up_and_skips_root_for_bfv(conf):
    spec = _spec(root_gb=20, ephemeral_gb=5, swap=1025)
    assert build_queries(spec, conf)[0].groups[0].resources["DISK_GB"] == 27
    spec.is_bfv = True
    assert build_queries(spec, conf)[0].groups[0].resources["DISK_GB"] == 7
    spec = _spec(root_gb=20, is_bfv=True)
    assert "DISK_GB" not in build_queries(spec, conf)[0].groups[0].resources


def test_extra_spec_resources_override_and_zero_removes(conf):
    spec = _spec({"resources:VCPU": "0", "resources:CUSTOM_GPU": "2", "resources:MEMORY_MB": "64"})
    (query,) = build_queries(spec, conf)
    assert query.groups[0].resources == {"MEMORY_MB": 64, "DISK_GB": 20, "CUSTOM_GPU": 2}


def test_traits_and_granular_groups_from_flavor(conf):
    spec = _spec(
        {
            "trait:HW_CPU_X86_AVX2": "required",
            "trait:CUSTOM_SLOW": "forbidden",
            "trait:CUSTOM_IGNORED": "maybe",
            "resources1:DISK_GB": "10",
            "trait1:CUSTOM_SSD": "required",
            "resources_G:VGPU": "1",
            "group_policy": "isolate",
        }
    )
    (query,) = build_queries(spec, conf)
    # resources1:DISK_GB asks for the disk: the unsuffixed group does not ask for it again
    assert _qs(query) == (
        "group_policy=isolate&limit=1000&required=HW_CPU_X86_AVX2,!CUSTOM_SLOW"
        "&required1=CUSTOM_SSD&resources=MEMORY_MB:2048,VCPU:2"
        "&resources1=DISK_GB:10&resources_G=VGPU:1"
    )


def test_image_traits_required(conf):
    spec = _spec(image=ImageMeta(properties={"traits_required": ["CUSTOM_IMG"]}))
    assert "CUSTOM_IMG" in build_queries(spec, conf)[0].groups[0].required_traits


@pytest.mark.parametrize(
    "extra_specs, message",
    [
        ({"resources:VCPU": "two"}, "whole number"),
        ({"resources:vcpu": "1"}, "resource class"),
        ({"resources1:CUSTOM_gpu": "1"}, "resource class"),
        ({"group_policy": "sometimes"}, "none' or 'isolate"),
    ],
)
def test_invalid_extra_specs_raise_invalid_request(conf, extra_specs, message):
    with pytest.raises(InvalidRequest, match=message):
        build_queries(_spec(extra_specs), conf)


def test_dedicated_cpu_asks_pcpu_then_falls_back_to_vcpu(conf):
    spec = _spec({"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": "require"}, vcpus=4)
    pcpu, vcpu = build_queries(spec, conf)
    assert pcpu.groups[0].resources == {"PCPU": 4, "MEMORY_MB": 2048, "DISK_GB": 20}
    assert pcpu.groups[0].required_traits == {"HW_CPU_HYPERTHREADING"}
    assert vcpu.groups[0].resources == {"VCPU": 4, "MEMORY_MB": 2048, "DISK_GB": 20}
    assert vcpu.groups[0].required_traits == set()


def test_dedicated_without_fallback_and_isolate_threads(conf):
    conf.set_override("disable_fallback_pcpu_query", True, group="workarounds")
    spec = _spec(
        {
            "hw:cpu_policy": "dedicated",
            "hw:cpu_thread_policy": "isolate",
            "hw:emulator_threads_policy": "isolate",
        },
        vcpus=2,
    )
    (query,) = build_queries(spec, conf)
    assert query.groups[0].resources["PCPU"] == 3
    assert "VCPU" not in query.groups[0].resources
    assert query.groups[0].forbidden_traits == {"HW_CPU_HYPERTHREADING"}


def test_image_cpu_policy_is_read_when_flavor_has_none(conf):
    spec = _spec(image=ImageMeta(properties={"hw_cpu_policy": "dedicated"}), vcpus=2)
    assert build_queries(spec, conf)[0].groups[0].resources["PCPU"] == 2


def test_mixed_policy_splits_by_dedicated_mask(conf):
    spec = _spec({"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "^0"}, vcpus=4)
    first = build_queries(spec, conf)[0]
    assert (first.groups[0].resources["VCPU"], first.groups[0].resources["PCPU"]) == (1, 3)
    spec = _spec({"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "2-3"}, vcpus=4)
    first = build_queries(spec, conf)[0]
    assert (first.groups[0].resources["VCPU"], first.groups[0].resources["PCPU"]) == (2, 2)


def test_explicit_pcpu_resources_disable_translation(conf):
    spec = _spec({"hw:cpu_policy": "dedicated", "resources:PCPU": "2", "resources:VCPU": "0"})
    (query,) = build_queries(spec, conf)
    assert query.groups[0].resources["PCPU"] == 2 and "VCPU" not in query.groups[0].resources


def test_requested_resources_level_params_and_destination(conf):
    spec = _spec(
        requested_resources=[
            RequestGroup(
                requester_id="port-a",
                resources={"NET_BW_EGR_KILOBIT_PER_SEC": 1000},
                required_traits={"CUSTOM_PHYSNET_A"},
            ),
            RequestGroup(requester_id="_ACC", resources={"CUSTOM_FPGA": 1}),
        ],
        request_level_params=RequestLevelParams(
            root_required={"COMPUTE_X"},
            root_forbidden={"COMPUTE_STATUS_DISABLED"},
            same_subtree=[["port-a", "_ACC"]],
        ),
        requested_destination=Destination(aggregates=["a1,a2", "b1"], forbidden_aggregates={"x"}),
    )
    (query,) = build_queries(spec, conf, in_tree="cn-uuid")
    params = query.to_params()
    assert [v for k, v in params if k == "member_of"] == ["!in:x", "in:a1,a2", "in:b1"]
    assert ("in_tree", "cn-uuid") in params
    assert ("requiredport-a", "CUSTOM_PHYSNET_A") in params
    assert ("resourcesport-a", "NET_BW_EGR_KILOBIT_PER_SEC:1000") in params
    assert ("root_required", "COMPUTE_X,!COMPUTE_STATUS_DISABLED") in params
    assert ("same_subtree", "_ACC,port-a") in params
    # two suffixed groups, none from the flavor: nova defaults the policy
    assert query.group_policy == "none"


def test_two_non_flavor_groups_default_group_policy_none(conf):
    spec = _spec(
        requested_resources=[
            RequestGroup(requester_id="p1", resources={"CUSTOM_BW": 1}),
            RequestGroup(requester_id="p2", resources={"CUSTOM_BW": 1}),
        ]
    )
    assert build_queries(spec, conf)[0].group_policy == "none"


def test_two_flavor_groups_without_policy_are_left_for_placement_to_refuse(conf):
    spec = _spec({"resources1:CUSTOM_A": "1", "resources2:CUSTOM_B": "1"})
    assert build_queries(spec, conf)[0].group_policy is None


@pytest.mark.parametrize("hint", ["group", "same_host", "different_host"])
def test_affinity_hints_remove_the_limit(conf, hint):
    spec = _spec(scheduler_hints={hint: ["x"]})
    assert build_queries(spec, conf)[0].limit is None


def test_limit_follows_config_and_unlimited_flag(conf):
    conf.set_override("max_placement_results", 7, group="scheduler")
    assert build_queries(_spec(), conf)[0].limit == 7
    assert build_queries(_spec(), conf, unlimited=True)[0].limit is None


def test_merge_candidates_dedups_and_unites_summaries():
    ar1 = {"allocations": {"rp1": {"resources": {"PCPU": 2}}}, "mappings": {"": ["rp1"]}}
    ar2 = {"allocations": {"rp2": {"resources": {"VCPU": 2}}}, "mappings": {"": ["rp2"]}}
    a = AllocationCandidates([ar1], {"rp1": {"traits": []}}, 0.1)
    b = AllocationCandidates([dict(ar1), ar2], {"rp1": {"traits": []}, "rp2": {}}, 0.2)
    merged = merge_candidates([a, b])
    assert merged.allocation_requests == [ar1, ar2]
    assert set(merged.provider_summaries) == {"rp1", "rp2"}
    assert merged.elapsed == pytest.approx(0.3)
    assert merge_candidates([a]) is a
