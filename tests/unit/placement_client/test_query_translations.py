"""What nova 34's ``resources_from_request_spec`` translates into the Placement query beyond
the flavor's own resources and traits (issue 19), and the combinations it refuses."""

from __future__ import annotations

import pytest
from oslo_config import cfg

from placement_client.query import build_queries
from scheduler import conf as sched_conf
from scheduler.exceptions import InvalidRequest, NoValidHost
from scheduler.objects import (
    Destination,
    Flavor,
    ImageMeta,
    RequestGroup,
    RequestLevelParams,
    RequestSpec,
)
from scheduler.request import SchedulingRequest
from scheduler.resources import pci

PCI_REQUEST = "7d3e2f2a-4a8e-4c1e-9a51-0c1f6f0e7c11"
PORT_PCI_REQUEST = "0b5a3c3e-91d2-4f77-b1a0-55c6d1a3e2f4"


@pytest.fixture
def conf():
    c = cfg.ConfigOpts()
    sched_conf.register_opts(c)
    c([], project="novasched-test", default_config_files=[])
    return c


def _spec(extra_specs=None, image=None, vcpus=2, **kw) -> RequestSpec:
    flavor = Flavor(memory_mb=2048, vcpus=vcpus, root_gb=20, extra_specs=extra_specs or {})
    image_meta = ImageMeta(properties=image) if image is not None else None
    return RequestSpec(flavor=flavor, image=image_meta, **kw)


def _base(spec, conf, index=0):
    """The unsuffixed group of query ``index``."""
    return build_queries(spec, conf)[index].group("")


# -- vTPM --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("extra_specs", "image", "traits"),
    [
        ({"hw:tpm_version": "2.0"}, None, {"COMPUTE_SECURITY_TPM_2_0", "COMPUTE_SECURITY_TPM_TIS"}),
        (
            {"hw:tpm_version": "2.0", "hw:tpm_model": "tpm-crb"},
            None,
            {"COMPUTE_SECURITY_TPM_2_0", "COMPUTE_SECURITY_TPM_CRB"},
        ),
        ({}, {"hw_tpm_version": "1.2"}, {"COMPUTE_SECURITY_TPM_1_2", "COMPUTE_SECURITY_TPM_TIS"}),
        (
            {"hw:tpm_version": "2.0"},
            {"hw_tpm_model": "tpm-crb"},
            {"COMPUTE_SECURITY_TPM_2_0", "COMPUTE_SECURITY_TPM_CRB"},
        ),
    ],
)
def test_vtpm_requires_the_version_and_model_traits(conf, extra_specs, image, traits):
    assert _base(_spec(extra_specs, image), conf).required_traits == traits


def test_a_tpm_model_without_a_version_asks_for_no_vtpm(conf):
    # nova reads the model only once a version asks for a vTPM
    assert _base(_spec({"hw:tpm_model": "tpm-crb"}), conf).required_traits == set()


# -- secure boot, maxphysaddr, stateless firmware, PCI NUMA socket ----------------------------
@pytest.mark.parametrize(
    ("extra_specs", "image", "trait"),
    [
        ({"os:secure_boot": "required"}, None, "COMPUTE_SECURITY_UEFI_SECURE_BOOT"),
        ({}, {"os_secure_boot": "required"}, "COMPUTE_SECURITY_UEFI_SECURE_BOOT"),
        ({"hw:maxphysaddr_mode": "passthrough"}, None, "COMPUTE_ADDRESS_SPACE_PASSTHROUGH"),
        ({}, {"hw_maxphysaddr_mode": "emulate"}, "COMPUTE_ADDRESS_SPACE_EMULATED"),
        (
            {},
            {"hw_firmware_type": "uefi", "hw_firmware_stateless": True},
            "COMPUTE_SECURITY_STATELESS_FIRMWARE",
        ),
        ({"hw:pci_numa_affinity_policy": "socket"}, None, "COMPUTE_SOCKET_PCI_NUMA_AFFINITY"),
        ({}, {"hw_pci_numa_affinity_policy": "socket"}, "COMPUTE_SOCKET_PCI_NUMA_AFFINITY"),
    ],
)
def test_host_capabilities_become_required_traits(conf, extra_specs, image, trait):
    assert _base(_spec(extra_specs, image), conf).required_traits == {trait}


@pytest.mark.parametrize(
    ("extra_specs", "image"),
    [
        ({"os:secure_boot": "disabled"}, None),
        ({}, {"os_secure_boot": "optional"}),
        ({}, {"hw_firmware_type": "bios", "hw_firmware_stateless": True}),
        ({}, {"hw_firmware_type": "uefi", "hw_firmware_stateless": False}),
        ({"hw:pci_numa_affinity_policy": "preferred"}, None),
        ({"hw:maxphysaddr_bits": "42"}, None),
    ],
)
def test_settings_without_a_trait(conf, extra_specs, image):
    assert _base(_spec(extra_specs, image), conf).required_traits == set()


# -- memory encryption and persistent memory ---------------------------------------------------
def test_memory_encryption_takes_a_context_and_the_model_trait(conf):
    spec = _spec({"hw:mem_encryption": "true"}, {"hw_firmware_type": "uefi"})
    base = _base(spec, conf)
    assert base.resources["MEM_ENCRYPTION_CONTEXT"] == 1
    assert base.required_traits == {"HW_CPU_X86_AMD_SEV"}


def test_memory_encryption_model_from_the_image(conf):
    image = {
        "hw_mem_encryption": True,
        "hw_mem_encryption_model": "amd-sev-snp",
        "hw_firmware_type": "uefi",
        "hw_firmware_stateless": True,
        "hw_machine_type": "pc-q35-8.2",
    }
    base = _base(_spec({"resources:MEM_ENCRYPTION_CONTEXT": "3"}, image), conf)
    # one context per guest, whatever the flavor asked
    assert base.resources["MEM_ENCRYPTION_CONTEXT"] == 1
    assert base.required_traits == {"HW_CPU_X86_AMD_SEV_SNP", "COMPUTE_SECURITY_STATELESS_FIRMWARE"}


def test_memory_encryption_with_intel_tdx(conf):
    image = {
        "hw_mem_encryption": "true",
        "hw_mem_encryption_model": "intel-tdx",
        "hw_firmware_type": "uefi",
        "hw_firmware_stateless": "true",
        "hw_video_model": "none",
    }
    base = _base(_spec({}, image), conf)
    assert base.resources["MEM_ENCRYPTION_CONTEXT"] == 1
    assert base.required_traits == {"HW_CPU_X86_INTEL_TDX", "COMPUTE_SECURITY_STATELESS_FIRMWARE"}


def test_pmem_asks_one_namespace_per_label(conf):
    base = _base(_spec({"hw:pmem": "4GB, 4GB,small-1"}), conf)
    assert base.resources["CUSTOM_PMEM_NAMESPACE_4GB"] == 2
    assert base.resources["CUSTOM_PMEM_NAMESPACE_SMALL_1"] == 1


# -- OWNER_NOVA on PCI request groups ----------------------------------------------------------
def _pci_request(applied_prefilters):
    """A request for two GPUs of a flavor alias, a VF of a port and a port's bandwidth; the
    root requires OWNER_NOVA, and the prefilters named have run."""
    spec = _spec(
        pci_requests=pci.requests_from_primitive(
            [
                {"request_id": PCI_REQUEST, "alias_name": "gpu", "count": 2, "spec": [{}]},
                {"request_id": PORT_PCI_REQUEST, "alias_name": None, "count": 1, "spec": [{}]},
            ]
        ),
        requested_resources=[
            RequestGroup(requester_id=f"{PCI_REQUEST}-0", resources={"CUSTOM_PCI_GPU": 1}),
            RequestGroup(requester_id=f"{PCI_REQUEST}-1", resources={"CUSTOM_PCI_GPU": 1}),
            RequestGroup(requester_id=f"{PORT_PCI_REQUEST}-0", resources={"CUSTOM_VF": 1}),
            RequestGroup(requester_id="port-1", resources={"NET_BW_EGR_KILOBIT_PER_SEC": 10}),
        ],
        request_level_params=RequestLevelParams(root_required={"OWNER_NOVA"}),
    )
    req = SchedulingRequest.of(spec)
    req.trace.prefilters = list(applied_prefilters)
    return req


def test_owner_nova_is_required_on_the_pci_groups_of_flavor_aliases(conf):
    (query,) = build_queries(_pci_request(["owner_nova_filter"]), conf)
    owned = {g.suffix for g in query.groups if "OWNER_NOVA" in g.required_traits}
    assert owned == {f"{PCI_REQUEST}-0", f"{PCI_REQUEST}-1"}
    assert query.root_required == {"OWNER_NOVA"}


def test_no_owner_nova_on_pci_groups_unless_owner_nova_filter_ran(conf):
    # the root requires it (an isolating aggregate), but some nova-compute is too old to
    # report it on its PCI providers
    (query,) = build_queries(_pci_request(["isolate_aggregates"]), conf)
    assert query.root_required == {"OWNER_NOVA"}
    assert not any("OWNER_NOVA" in g.required_traits for g in query.groups)


# -- CPU resources -----------------------------------------------------------------------------
def test_explicit_pcpu_resources_ask_no_vcpu(conf):
    assert _base(_spec({"resources:PCPU": "2"}), conf).resources == {
        "PCPU": 2,
        "MEMORY_MB": 2048,
        "DISK_GB": 20,
    }


@pytest.mark.parametrize("rc", ["VCPU", "PCPU", "MEMORY_MB"])
def test_granular_standard_classes_are_not_asked_again_unsuffixed(conf, rc):
    (query,) = build_queries(_spec({f"resources1:{rc}": "2"}), conf)
    assert query.group("1").resources == {rc: 2}
    base = query.group("").resources
    assert rc not in base and not (rc == "PCPU" and "VCPU" in base)


def test_thread_policy_trait_is_kept_with_explicit_pcpus(conf):
    spec = _spec(
        {
            "hw:cpu_policy": "dedicated",
            "hw:cpu_thread_policy": "require",
            "resources:PCPU": "2",
        }
    )
    pcpu, vcpu = build_queries(spec, conf)
    assert pcpu.group("").required_traits == {"HW_CPU_HYPERTHREADING"}
    assert pcpu.group("").resources["PCPU"] == 2 and "VCPU" not in pcpu.group("").resources
    # the fallback asks what the flavor says, untranslated
    assert vcpu.group("").required_traits == set()


def test_negative_amounts_are_ignored_as_nova_does(conf):
    assert _base(_spec({"resources:VCPU": "-1"}), conf).resources["VCPU"] == 2


# -- mixed policy ------------------------------------------------------------------------------
def test_mixed_with_a_realtime_mask_pins_the_realtime_cpus(conf):
    spec = _spec(
        {"hw:cpu_policy": "mixed", "hw:cpu_realtime": "yes", "hw:cpu_realtime_mask": "^0"},
        vcpus=4,
    )
    (query,) = build_queries(spec, conf)
    assert (query.group("").resources["VCPU"], query.group("").resources["PCPU"]) == (1, 3)


def test_mixed_gets_no_vcpu_fallback_query(conf):
    spec = _spec({"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "0"}, vcpus=4)
    assert len(build_queries(spec, conf)) == 1


@pytest.mark.parametrize(
    ("mask", "pcpus"), [("^1,^2,^3", 3), ("^0-1", 4), ("1-3,^2", 2), ("^1, 2", 5)]
)
def test_dedicated_mask_forms(conf, mask, pcpus):
    spec = _spec({"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": mask}, vcpus=6)
    base = _base(spec, conf)
    assert (base.resources["PCPU"], base.resources["VCPU"]) == (pcpus, 6 - pcpus)


def test_mixed_without_a_mask_asks_vcpus_as_nova_does(conf):
    # nova-api refuses this flavor at boot; nova's scheduler asks for shared CPUs only
    base = _base(_spec({"hw:cpu_policy": "mixed"}, vcpus=4), conf)
    assert base.resources["VCPU"] == 4 and "PCPU" not in base.resources


def test_mixed_with_isolated_emulator_threads_asks_one_more_pcpu(conf):
    spec = _spec(
        {
            "hw:cpu_policy": "mixed",
            "hw:cpu_dedicated_mask": "^0",
            "hw:emulator_threads_policy": "isolate",
        },
        vcpus=4,
    )
    base = _base(spec, conf)
    assert (base.resources["VCPU"], base.resources["PCPU"]) == (1, 4)


# -- refusals ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("extra_specs", "image", "message"),
    [
        ({"hw:tpm_version": "1.2", "hw:tpm_model": "tpm-crb"}, None, "needs TPM version 2.0"),
        ({"hw:tpm_version": "2.0"}, {"hw_tpm_version": "1.2"}, "conflicts"),
        ({"hw:tpm_version": "2.0", "hw:tpm_model": "tpm-tis"}, {"hw_tpm_model": "tpm-crb"}, "conf"),
        ({"os:secure_boot": "required"}, {"os_secure_boot": "disabled"}, "conflicts"),
        ({"hw:maxphysaddr_mode": "emulate"}, {"hw_maxphysaddr_mode": "passthrough"}, "conflicts"),
        (
            {"hw:pci_numa_affinity_policy": "socket"},
            {"hw_pci_numa_affinity_policy": "legacy"},
            "conf",
        ),
        ({"hw:mem_encryption": "true"}, None, "hw_firmware_type=uefi"),
        ({"hw:mem_encryption": "true"}, {"hw_mem_encryption": False}, "conflicts"),
        (
            {"hw:mem_encryption": "yes"},
            {"hw_firmware_type": "uefi", "hw_machine_type": "pc-i440fx"},
            "q35",
        ),
        (
            {"hw:mem_encryption": "yes", "hw:mem_encryption_model": "amd-sev-snp"},
            {"hw_firmware_type": "uefi"},
            "stateless",
        ),
        (
            {"hw:mem_encryption_model": "amd-sev"},
            {
                "hw_mem_encryption": True,
                "hw_mem_encryption_model": "amd-sev-es",
                "hw_firmware_type": "uefi",
            },
            "conflicts",
        ),
        (
            {"hw:mem_encryption": "1", "hw:mem_encryption_model": "intel-tdx"},
            {"hw_firmware_type": "uefi", "hw_firmware_stateless": True},
            "video",
        ),
        ({"hw:cpu_policy": "mixed"}, {"hw_cpu_policy": "dedicated"}, "forbidden"),
        ({"hw:cpu_policy": "shared"}, {"hw_cpu_policy": "mixed"}, "forbidden"),
        (
            {"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": "isolate"},
            {"hw_cpu_thread_policy": "require"},
            "forbidden",
        ),
        ({"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "0-3"}, None, "at least one"),
        ({"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "1,7"}, None, "does not have"),
        ({"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "3-1"}, None, "not a CPU"),
        ({"hw:cpu_policy": "mixed", "hw:cpu_realtime": "true"}, None, "hw:cpu_realtime_mask"),
        (
            {"hw:cpu_policy": "mixed", "hw:cpu_realtime": "true", "hw:cpu_dedicated_mask": "0"},
            {"hw_cpu_realtime_mask": "0-5"},
            "does not have",
        ),
    ],
)
def test_combinations_nova_refuses(conf, extra_specs, image, message):
    with pytest.raises(InvalidRequest, match=message):
        build_queries(_spec(extra_specs, image, vcpus=4), conf)


def test_a_requested_group_may_not_reuse_a_flavor_suffix(conf):
    spec = _spec(
        {"resources1:CUSTOM_A": "0"},
        requested_resources=[RequestGroup(requester_id="1", resources={"CUSTOM_B": 1})],
    )
    with pytest.raises(InvalidRequest, match="used twice"):
        build_queries(spec, conf)


@pytest.mark.parametrize(
    "group",
    [RequestGroup(requester_id=None, resources={"CUSTOM_B": 1}), RequestGroup(requester_id="p")],
)
def test_a_requested_group_needs_a_requester_and_a_request(conf, group):
    with pytest.raises(InvalidRequest, match="requester_id|asks for no"):
        build_queries(_spec(requested_resources=[group]), conf)


def test_affinity_hint_with_no_value_still_lifts_the_limit(conf):
    # nova looks at the hint's name only
    assert build_queries(_spec(scheduler_hints={"different_host": []}), conf)[0].limit is None


# -- queries Placement refuses as nova writes them ---------------------------------------------
def test_a_pcpu_query_placement_refuses_leaves_the_fallback(conf):
    # the image requires hyperthreading, the thread policy forbids it: Placement refuses
    # nova's first query (required and forbidden) and nova schedules on the fallback's answer
    spec = _spec(
        {"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": "isolate"},
        {"traits_required": ["HW_CPU_HYPERTHREADING"]},
    )
    (query,) = build_queries(spec, conf)
    assert query.group("").resources["VCPU"] == 2
    assert query.group("").forbidden_traits == set()


def test_a_fallback_without_resources_is_not_sent(conf):
    spec = _spec(
        {
            "hw:cpu_policy": "dedicated",
            "resources:VCPU": "0",
            "resources:MEMORY_MB": "0",
            "trait:CUSTOM_A": "required",
        },
        is_bfv=True,
    )
    (query,) = build_queries(spec, conf)
    assert query.group("").resources == {"PCPU": 2}


def test_a_port_group_of_zero_amounts_is_dropped_from_both_queries(conf):
    # nova's first query empties the port's own group, and its fallback then refuses it
    # (ValueError): the request fails there, where both queries can be asked
    spec = _spec(
        {"hw:cpu_policy": "dedicated"},
        requested_resources=[
            RequestGroup(requester_id="port-1", resources={"NET_BW_EGR_KILOBIT_PER_SEC": 0})
        ],
    )
    pcpu, vcpu = build_queries(spec, conf)
    assert [g.suffix for g in pcpu.groups] == [""] and [g.suffix for g in vcpu.groups] == [""]
    assert spec.requested_resources[0].resources == {"NET_BW_EGR_KILOBIT_PER_SEC": 0}


def test_an_unnumbered_group_of_aggregates_only_is_no_valid_host(conf):
    spec = _spec(
        {"resources:VCPU": "0", "resources:MEMORY_MB": "0", "resources1:CUSTOM_BM": "1"},
        is_bfv=True,
        requested_destination=Destination(aggregates=["a99a0000-0000-4000-8000-000000000001"]),
    )
    with pytest.raises(NoValidHost, match="asks for no resources"):
        build_queries(spec, conf)


def test_a_resourceless_group_in_a_same_subtree_is_no_valid_host(conf):
    spec = _spec(
        requested_resources=[
            RequestGroup(requester_id="port-1", resources={"NET_BW_EGR_KILOBIT_PER_SEC": 10}),
            RequestGroup(requester_id="port-2", required_traits={"CUSTOM_PHYSNET_A"}),
        ],
        request_level_params=RequestLevelParams(same_subtree=[["port-1", "port-2"]]),
    )
    with pytest.raises(NoValidHost, match="port-2"):
        build_queries(spec, conf)


def test_a_trait_only_numbered_group_is_left_for_placement_to_refuse(conf):
    (query,) = build_queries(_spec({"trait1:CUSTOM_A": "required"}), conf)
    assert query.group("1").required_traits == {"CUSTOM_A"} and not query.group("1").resources
