"""Request prefilters: what each one adds to the Placement query, and when."""

from __future__ import annotations

import os_traits
import pytest

from scheduler.conf import CONF
from scheduler.drivers import request_filters as request_filter
from scheduler.exceptions import RequestFilterFailed
from scheduler.hosts.aggregates import aggregates_matching
from scheduler.objects import Aggregate, Destination, Flavor, ImageMeta, RequestGroup, RequestSpec

PROJECT = "p-1"


class FakeAggregates:
    """The HostManager's aggregate view over a fixed list; counts the look-ups."""

    def __init__(self, aggregates: list[Aggregate]):
        self._aggregates = aggregates
        self.calls: list[dict] = []

    def aggregates_by_metadata(self, key=None, value=None, key_prefix=None):
        self.calls.append({"key": key, "value": value, "key_prefix": key_prefix})
        return aggregates_matching(self._aggregates, key, value, key_prefix)


def _agg(agg_id: int, metadata: dict[str, str]) -> Aggregate:
    return Aggregate(id=agg_id, uuid=f"agg-{agg_id}", name=f"a{agg_id}", metadata=metadata)


def _spec(**kw) -> RequestSpec:
    kw.setdefault("project_id", PROJECT)
    return RequestSpec(flavor=Flavor(memory_mb=512, vcpus=1), **kw)


# ------------------------------------------------------------------ compute_status_filter


def test_compute_status_filter_forbids_disabled_computes():
    spec = _spec()
    assert request_filter.compute_status_filter(spec, FakeAggregates([]), CONF) is True
    assert spec.request_level_params.root_forbidden == {os_traits.COMPUTE_STATUS_DISABLED}
    assert os_traits.COMPUTE_STATUS_DISABLED == "COMPUTE_STATUS_DISABLED"
    assert spec.request_level_params.root_required == set()


def test_compute_status_filter_keeps_other_forbidden_traits():
    spec = _spec()
    spec.request_level_params.root_forbidden.add("CUSTOM_X")
    request_filter.compute_status_filter(spec, FakeAggregates([]), CONF)
    request_filter.compute_status_filter(spec, FakeAggregates([]), CONF)
    assert spec.request_level_params.root_forbidden == {"CUSTOM_X", "COMPUTE_STATUS_DISABLED"}


# ---------------------------------------------------------- map_az_to_placement_aggregate


def test_az_maps_to_its_aggregates_as_one_or_set():
    aggs = FakeAggregates(
        [
            _agg(1, {"availability_zone": "az1"}),
            _agg(2, {"availability_zone": "az2"}),
            _agg(3, {"availability_zone": "az1", "ssd": "true"}),
            _agg(4, {"zone": "az1"}),
        ]
    )
    spec = _spec(availability_zone="az1")
    assert request_filter.map_az_to_placement_aggregate(spec, aggs, CONF) is True
    assert spec.requested_destination.aggregates == ["agg-1,agg-3"]
    assert aggs.calls == [{"key": "availability_zone", "value": "az1", "key_prefix": None}]


def test_az_aggregates_are_added_to_existing_required_aggregates():
    aggs = FakeAggregates([_agg(1, {"availability_zone": "az1"})])
    spec = _spec(availability_zone="az1", requested_destination=Destination(aggregates=["x,y"]))
    request_filter.map_az_to_placement_aggregate(spec, aggs, CONF)
    assert spec.requested_destination.aggregates == ["x,y", "agg-1"]


def test_az_without_aggregates_adds_nothing():
    aggs = FakeAggregates([_agg(1, {"availability_zone": "az2"})])
    spec = _spec(availability_zone="az1")
    assert request_filter.map_az_to_placement_aggregate(spec, aggs, CONF) is False
    assert spec.requested_destination is None


def test_no_az_requested_does_not_look_up_aggregates():
    aggs = FakeAggregates([_agg(1, {"availability_zone": "az1"})])
    spec = _spec()
    assert request_filter.map_az_to_placement_aggregate(spec, aggs, CONF) is False
    assert aggs.calls == [] and spec.requested_destination is None


# -------------------------------------------------------------- require_tenant_aggregate

TENANT_AGGS = [
    _agg(1, {"filter_tenant_id": PROJECT}),
    _agg(2, {"filter_tenant_id2": "other", "filter_tenant_id3": PROJECT}),
    _agg(3, {"filter_tenant_id": "other"}),
    # the project's id under a key that is not a tenant key does not count
    _agg(4, {"owner": PROJECT}),
]


def test_require_tenant_aggregate_is_off_by_default():
    aggs = FakeAggregates(TENANT_AGGS)
    spec = _spec()
    assert request_filter.require_tenant_aggregate(spec, aggs, CONF) is False
    assert aggs.calls == [] and spec.requested_destination is None


def test_tenant_is_limited_to_its_aggregates():
    CONF.set_override("limit_tenants_to_placement_aggregate", True, group="scheduler")
    spec = _spec()
    assert request_filter.require_tenant_aggregate(spec, FakeAggregates(TENANT_AGGS), CONF)
    assert spec.requested_destination.aggregates == ["agg-1,agg-2"]


def test_tenant_without_aggregate_may_go_anywhere_unless_required():
    CONF.set_override("limit_tenants_to_placement_aggregate", True, group="scheduler")
    spec = _spec(project_id="lonely")
    assert request_filter.require_tenant_aggregate(spec, FakeAggregates(TENANT_AGGS), CONF) is False
    assert spec.requested_destination is None

    CONF.set_override("placement_aggregate_required_for_tenants", True, group="scheduler")
    with pytest.raises(RequestFilterFailed, match="lonely"):
        request_filter.require_tenant_aggregate(spec, FakeAggregates(TENANT_AGGS), CONF)


def test_request_without_project_matches_no_tenant_aggregate():
    CONF.set_override("limit_tenants_to_placement_aggregate", True, group="scheduler")
    spec = _spec(project_id=None)
    assert request_filter.require_tenant_aggregate(spec, FakeAggregates(TENANT_AGGS), CONF) is False
    assert spec.requested_destination is None


def test_required_for_tenants_alone_does_nothing():
    CONF.set_override("placement_aggregate_required_for_tenants", True, group="scheduler")
    spec = _spec(project_id="lonely")
    assert request_filter.require_tenant_aggregate(spec, FakeAggregates([]), CONF) is False


# ------------------------------------------------------------------------ process_reqspec


def test_process_reqspec_runs_every_prefilter_in_novas_order():
    assert [name for name, _ in request_filter.ALL_REQUEST_FILTERS] == [
        "require_tenant_aggregate",
        "map_az_to_placement_aggregate",
        "require_image_type_support",
        "compute_status_filter",
        "isolate_aggregates",
        "transform_image_metadata",
        "accelerators_filter",
        "packed_virtqueue_filter",
        "routed_networks_filter",
        "remote_managed_ports_filter",
        "ephemeral_encryption_filter",
        "virtio_sound_filter",
        "tpm_secret_security_filter",
        "owner_nova_filter",
    ]
    CONF.set_override("limit_tenants_to_placement_aggregate", True, group="scheduler")
    aggs = FakeAggregates(TENANT_AGGS + [_agg(9, {"availability_zone": "az1"})])
    spec = _spec(availability_zone="az1")
    applied = request_filter.process_reqspec(spec, aggs, CONF)
    assert applied == [
        "require_tenant_aggregate",
        "map_az_to_placement_aggregate",
        "compute_status_filter",
    ]
    # tenant aggregates first, then the AZ's: both must hold (ANDed member_of)
    assert spec.requested_destination.aggregates == ["agg-1,agg-2", "agg-9"]
    assert spec.request_level_params.root_forbidden == {"COMPUTE_STATUS_DISABLED"}


def test_process_reqspec_with_defaults_only_forbids_disabled():
    spec = _spec(availability_zone="nowhere")
    applied = request_filter.process_reqspec(spec, FakeAggregates(TENANT_AGGS), CONF)
    assert applied == ["compute_status_filter"]
    assert spec.requested_destination is None


def test_process_reqspec_failure_stops_before_later_prefilters():
    CONF.set_override("limit_tenants_to_placement_aggregate", True, group="scheduler")
    CONF.set_override("placement_aggregate_required_for_tenants", True, group="scheduler")
    spec = _spec(project_id="lonely")
    with pytest.raises(RequestFilterFailed):
        request_filter.process_reqspec(spec, FakeAggregates([]), CONF)
    assert spec.request_level_params.root_forbidden == set()


def test_toggles_of_prefilters_we_do_not_run_are_warned_about(caplog):
    from scheduler.conf import CONF
    from scheduler.drivers.request_filters import warn_unimplemented_toggles

    assert warn_unimplemented_toggles(CONF) == []
    CONF.set_override("query_placement_for_routed_network_aggregates", True, group="scheduler")
    # (host discovery runs: scheduler/discovery.py)
    CONF.set_override("discover_hosts_in_cells_interval", 300, group="scheduler")
    with caplog.at_level("WARNING", logger="scheduler.drivers.request_filters"):
        names = warn_unimplemented_toggles(CONF)
    assert names == ["query_placement_for_routed_network_aggregates"]
    assert "needs Neutron" in caplog.text


# ------------------------------------------------------------ require_image_type_support


def _image(disk_format: str | None = "qcow2", **properties) -> ImageMeta:
    return ImageMeta(id="img-1", name="cirros", disk_format=disk_format, properties=properties)


def test_image_type_support_is_off_by_default():
    spec = _spec(image=_image())
    assert request_filter.require_image_type_support(spec, FakeAggregates([]), CONF) is False
    assert spec.root_required == set()


def test_image_type_support_requires_the_disk_format_trait():
    CONF.set_override("query_placement_for_image_type_support", True, group="scheduler")
    spec = _spec(image=_image("qcow2"))
    assert request_filter.require_image_type_support(spec, FakeAggregates([]), CONF) is True
    assert spec.root_required == {"COMPUTE_IMAGE_TYPE_QCOW2"}
    spec = _spec(image=_image("vhdx"))
    request_filter.require_image_type_support(spec, FakeAggregates([]), CONF)
    assert spec.root_required == {os_traits.COMPUTE_IMAGE_TYPE_VHDX}


@pytest.mark.parametrize(
    "spec_kw",
    [
        {"image": _image("raw"), "is_bfv": True},  # boot from volume: the format does not matter
        {"image": _image("bogus")},  # no such trait: logged, nothing added
        {"image": _image(None)},
        {"image": None},
    ],
)
def test_image_type_support_skipped(spec_kw):
    CONF.set_override("query_placement_for_image_type_support", True, group="scheduler")
    spec = _spec(**spec_kw)
    assert request_filter.require_image_type_support(spec, FakeAggregates([]), CONF) is False
    assert spec.root_required == set()


# ------------------------------------------------------------------- isolate_aggregates

ISOLATED_AGGS = [
    _agg(1, {"trait:HW_CPU_X86_MMX": "required"}),
    _agg(2, {"trait:HW_CPU_X86_SGX": "required"}),
    _agg(3, {"trait:HW_CPU_X86_MMX": "required", "trait:HW_CPU_X86_SGX": "required"}),
    _agg(4, {"trait:CUSTOM_GPU": "optional", "availability_zone": "az1"}),
    _agg(5, {"other:HW_CPU_X86_SGX": "required"}),
]


def _isolated(spec) -> set[str]:
    return spec.requested_destination.forbidden_aggregates if spec.requested_destination else set()


def test_isolation_is_off_by_default():
    aggs = FakeAggregates(ISOLATED_AGGS)
    spec = _spec()
    assert request_filter.isolate_aggregates(spec, aggs, CONF) is False
    assert aggs.calls == [] and spec.requested_destination is None


def test_request_without_traits_is_kept_out_of_every_isolated_aggregate():
    CONF.set_override("enable_isolated_aggregate_filtering", True, group="scheduler")
    spec = _spec()
    assert request_filter.isolate_aggregates(spec, FakeAggregates(ISOLATED_AGGS), CONF) is True
    # 4: the value is not "required"; 5: not a trait: key
    assert _isolated(spec) == {"agg-1", "agg-2", "agg-3"}


def test_flavor_trait_opens_only_aggregates_whose_every_trait_it_requires():
    CONF.set_override("enable_isolated_aggregate_filtering", True, group="scheduler")
    spec = _spec()
    spec.flavor.extra_specs = {"trait:HW_CPU_X86_MMX": "required"}
    request_filter.isolate_aggregates(spec, FakeAggregates(ISOLATED_AGGS), CONF)
    # aggregate 3 also reserves SGX, which the flavor does not ask for (nova's example)
    assert _isolated(spec) == {"agg-2", "agg-3"}


def test_traits_from_image_numbered_groups_and_requested_resources_count():
    CONF.set_override("enable_isolated_aggregate_filtering", True, group="scheduler")
    spec = _spec(image=_image(traits_required=["HW_CPU_X86_SGX"]))
    spec.flavor.extra_specs = {"trait1:HW_CPU_X86_MMX": "required", "resources1:VCPU": "1"}
    request_filter.isolate_aggregates(spec, FakeAggregates(ISOLATED_AGGS), CONF)
    assert spec.requested_destination is None  # nothing to isolate: all three are open

    spec = _spec(
        requested_resources=[
            RequestGroup(requester_id="port-1", required_traits={"HW_CPU_X86_SGX"})
        ]
    )
    request_filter.isolate_aggregates(spec, FakeAggregates(ISOLATED_AGGS), CONF)
    assert _isolated(spec) == {"agg-1", "agg-3"}


def test_forbidden_trait_and_root_traits_do_not_open_an_aggregate():
    CONF.set_override("enable_isolated_aggregate_filtering", True, group="scheduler")
    spec = _spec()
    spec.flavor.extra_specs = {"trait:HW_CPU_X86_SGX": "forbidden"}
    spec.request_level_params.root_required.add("HW_CPU_X86_MMX")
    request_filter.isolate_aggregates(spec, FakeAggregates(ISOLATED_AGGS), CONF)
    assert _isolated(spec) == {"agg-1", "agg-2", "agg-3"}


def test_isolation_adds_to_existing_forbidden_aggregates():
    CONF.set_override("enable_isolated_aggregate_filtering", True, group="scheduler")
    spec = _spec(requested_destination=Destination(forbidden_aggregates={"agg-x"}))
    spec.flavor.extra_specs = {
        "trait:HW_CPU_X86_MMX": "required",
        "trait:HW_CPU_X86_SGX": "required",
    }
    request_filter.isolate_aggregates(spec, FakeAggregates(ISOLATED_AGGS), CONF)
    assert _isolated(spec) == {"agg-x"}
    spec.flavor.extra_specs = {}
    request_filter.isolate_aggregates(spec, FakeAggregates(ISOLATED_AGGS), CONF)
    assert _isolated(spec) == {"agg-x", "agg-1", "agg-2", "agg-3"}


# ------------------------------------------------------------- transform_image_metadata


def test_image_metadata_prefilter_is_off_by_default():
    spec = _spec(image=_image(hw_disk_bus="virtio"))
    assert request_filter.transform_image_metadata(spec, FakeAggregates([]), CONF) is False
    assert spec.root_required == set()


def test_image_properties_become_required_root_traits():
    CONF.set_override("image_metadata_prefilter", True, group="scheduler")
    spec = _spec(
        image=_image(
            hw_cdrom_bus="sata",
            hw_disk_bus="virtio",
            hw_video_model="qxl",
            hw_vif_model="e1000e",
            hw_architecture="x86_64",
            hw_emulation_architecture="aarch64",
            hw_viommu_model="smmuv3",
            hw_rng_model="virtio",  # not mapped
        )
    )
    assert request_filter.transform_image_metadata(spec, FakeAggregates([]), CONF) is True
    assert spec.root_required == {
        os_traits.COMPUTE_STORAGE_BUS_SATA,
        os_traits.COMPUTE_STORAGE_BUS_VIRTIO,
        os_traits.COMPUTE_GRAPHICS_MODEL_QXL,
        os_traits.COMPUTE_NET_VIF_MODEL_E1000E,
        os_traits.HW_ARCH_X86_64,
        os_traits.COMPUTE_ARCH_AARCH64,
        os_traits.COMPUTE_VIOMMU_MODEL_SMMUV3,
    }


def test_image_property_values_with_dashes_map_to_underscores():
    CONF.set_override("image_metadata_prefilter", True, group="scheduler")
    spec = _spec(image=_image(hw_vif_model="ne2k-pci", hw_disk_bus="scsi"))
    request_filter.transform_image_metadata(spec, FakeAggregates([]), CONF)
    assert spec.root_required == {"COMPUTE_NET_VIF_MODEL_NE2K_PCI", "COMPUTE_STORAGE_BUS_SCSI"}


def test_image_property_without_a_trait_is_skipped_alone(caplog):
    CONF.set_override("image_metadata_prefilter", True, group="scheduler")
    spec = _spec(image=_image(hw_architecture="armv7l", hw_disk_bus="ide"))
    with caplog.at_level("ERROR", logger="scheduler.drivers.request_filters"):
        assert request_filter.transform_image_metadata(spec, FakeAggregates([]), CONF) is True
    assert spec.root_required == {"COMPUTE_STORAGE_BUS_IDE"}
    assert "HW_ARCH_ARMV7L" in caplog.text


def test_image_metadata_prefilter_without_image_properties():
    CONF.set_override("image_metadata_prefilter", True, group="scheduler")
    for spec in (_spec(), _spec(image=_image())):
        assert request_filter.transform_image_metadata(spec, FakeAggregates([]), CONF) is False
        assert spec.root_required == set()


# ------------------------------------------------------------------ accelerators_filter


def test_device_profile_requires_accelerator_support():
    spec = _spec()
    spec.flavor.extra_specs = {"accel:device_profile": "fpga-1"}
    assert request_filter.accelerators_filter(spec, FakeAggregates([]), CONF) is True
    assert spec.root_required == {"COMPUTE_ACCELERATORS"}


@pytest.mark.parametrize("extra_specs", [{}, {"accel:device_profile": ""}, {"accel:x": "y"}])
def test_no_device_profile_no_accelerator_trait(extra_specs):
    spec = _spec()
    spec.flavor.extra_specs = extra_specs
    assert request_filter.accelerators_filter(spec, FakeAggregates([]), CONF) is False
    assert spec.root_required == set()


# -------------------------------------------------------------- packed_virtqueue_filter


@pytest.mark.parametrize(
    "flavor_value, image_value, wanted",
    [
        ("true", None, True),
        ("yes", None, True),
        (None, True, True),
        (None, "true", True),  # legacy request specs carry strings
        ("false", None, False),
        (None, False, False),
        ("false", False, False),
        ("True", True, True),
        (None, None, False),
    ],
)
def test_packed_ring_from_flavor_or_image(flavor_value, image_value, wanted):
    spec = _spec(image=_image())
    if flavor_value is not None:
        spec.flavor.extra_specs = {"hw:virtio_packed_ring": flavor_value}
    if image_value is not None:
        spec.image.properties["hw_virtio_packed_ring"] = image_value
    assert request_filter.packed_virtqueue_filter(spec, FakeAggregates([]), CONF) is wanted
    assert spec.root_required == ({"COMPUTE_NET_VIRTIO_PACKED"} if wanted else set())


def test_packed_ring_flavor_image_conflict_fails_the_request():
    spec = _spec(image=_image(hw_virtio_packed_ring=False))
    spec.flavor.extra_specs = {"hw:virtio_packed_ring": "true"}
    with pytest.raises(RequestFilterFailed, match="hw:virtio_packed_ring=true.*cirros"):
        request_filter.packed_virtqueue_filter(spec, FakeAggregates([]), CONF)


# ---------------------------------------------------------- ephemeral_encryption_filter


def test_ephemeral_encryption_without_format():
    spec = _spec()
    spec.flavor.extra_specs = {"hw:ephemeral_encryption": "True"}
    assert request_filter.ephemeral_encryption_filter(spec, FakeAggregates([]), CONF) is True
    assert spec.root_required == {"COMPUTE_EPHEMERAL_ENCRYPTION"}


@pytest.mark.parametrize("fmt", ["plain", "luks", "luksv2"])
def test_ephemeral_encryption_with_format_from_image(fmt):
    spec = _spec(image=_image(hw_ephemeral_encryption=True, hw_ephemeral_encryption_format=fmt))
    assert request_filter.ephemeral_encryption_filter(spec, FakeAggregates([]), CONF) is True
    assert spec.root_required == {
        "COMPUTE_EPHEMERAL_ENCRYPTION",
        f"COMPUTE_EPHEMERAL_ENCRYPTION_{fmt.upper()}",
    }
    assert spec.root_required <= set(os_traits.get_traits())


def test_ephemeral_encryption_format_alone_asks_for_nothing():
    spec = _spec(image=_image(hw_ephemeral_encryption_format="luks"))
    spec.flavor.extra_specs = {"hw:ephemeral_encryption": "false"}
    assert request_filter.ephemeral_encryption_filter(spec, FakeAggregates([]), CONF) is False
    assert spec.root_required == set()


def test_ephemeral_encryption_format_from_flavor_and_image_must_agree():
    spec = _spec(image=_image(hw_ephemeral_encryption_format="plain"))
    spec.flavor.extra_specs = {
        "hw:ephemeral_encryption": "true",
        "hw:ephemeral_encryption_format": "luks",
    }
    with pytest.raises(RequestFilterFailed, match="hw_ephemeral_encryption_format=plain"):
        request_filter.ephemeral_encryption_filter(spec, FakeAggregates([]), CONF)


def test_ephemeral_encryption_on_off_conflict_and_unknown_format_fail():
    spec = _spec(image=_image(hw_ephemeral_encryption=False))
    spec.flavor.extra_specs = {"hw:ephemeral_encryption": "true"}
    with pytest.raises(RequestFilterFailed, match="hw:ephemeral_encryption=true"):
        request_filter.ephemeral_encryption_filter(spec, FakeAggregates([]), CONF)

    spec = _spec()
    spec.flavor.extra_specs = {
        "hw:ephemeral_encryption": "true",
        "hw:ephemeral_encryption_format": "rot13",
    }
    with pytest.raises(RequestFilterFailed, match="rot13"):
        request_filter.ephemeral_encryption_filter(spec, FakeAggregates([]), CONF)


# ------------------------------------------------------------------ virtio_sound_filter


@pytest.mark.parametrize(
    "extra_specs, properties, wanted",
    [
        ({"hw:sound_model": "virtio"}, {}, True),
        ({}, {"hw_sound_model": "virtio"}, True),
        ({"hw:sound_model": "virtio"}, {"hw_sound_model": "virtio"}, True),
        ({"hw:sound_model": "ich9"}, {}, False),
        ({}, {}, False),
    ],
)
def test_virtio_sound(extra_specs, properties, wanted):
    spec = _spec(image=_image(**properties))
    spec.flavor.extra_specs = extra_specs
    assert request_filter.virtio_sound_filter(spec, FakeAggregates([]), CONF) is wanted
    assert spec.root_required == ({"COMPUTE_SOUND_MODEL_VIRTIO"} if wanted else set())


def test_sound_model_conflict_fails():
    spec = _spec(image=_image(hw_sound_model="ich9"))
    spec.flavor.extra_specs = {"hw:sound_model": "virtio"}
    with pytest.raises(RequestFilterFailed, match="sound_model"):
        request_filter.virtio_sound_filter(spec, FakeAggregates([]), CONF)


# ----------------------------------------------------------- tpm_secret_security_filter


@pytest.mark.parametrize(
    "security, trait",
    [
        (None, "COMPUTE_SECURITY_TPM_SECRET_SECURITY_USER"),  # nova's default
        ("user", "COMPUTE_SECURITY_TPM_SECRET_SECURITY_USER"),
        ("host", "COMPUTE_SECURITY_TPM_SECRET_SECURITY_HOST"),
        ("deployment", "COMPUTE_SECURITY_TPM_SECRET_SECURITY_DEPLOYMENT"),
    ],
)
def test_vtpm_secret_security_trait(security, trait):
    spec = _spec()
    spec.flavor.extra_specs = {"hw:tpm_version": "2.0"}
    if security is not None:
        spec.flavor.extra_specs["hw:tpm_secret_security"] = security
    assert request_filter.tpm_secret_security_filter(spec, FakeAggregates([]), CONF) is True
    assert spec.root_required == {trait}


def test_vtpm_from_image_uses_flavor_secret_security_only():
    spec = _spec(image=_image(hw_tpm_version="1.2", hw_tpm_secret_security="host"))
    assert request_filter.tpm_secret_security_filter(spec, FakeAggregates([]), CONF) is True
    assert spec.root_required == {"COMPUTE_SECURITY_TPM_SECRET_SECURITY_USER"}


def test_no_vtpm_no_secret_security_trait():
    spec = _spec()
    spec.flavor.extra_specs = {"hw:tpm_secret_security": "host", "hw:tpm_model": "tpm-crb"}
    assert request_filter.tpm_secret_security_filter(spec, FakeAggregates([]), CONF) is False
    assert spec.root_required == set()


def test_unknown_tpm_secret_security_fails_the_request():
    spec = _spec()
    spec.flavor.extra_specs = {"hw:tpm_version": "2.0", "hw:tpm_secret_security": "HOST"}
    with pytest.raises(RequestFilterFailed, match="TPM secret security 'HOST' is not supported"):
        request_filter.tpm_secret_security_filter(spec, FakeAggregates([]), CONF)
    assert spec.root_required == set()


def test_tpm_version_conflict_fails():
    spec = _spec(image=_image(hw_tpm_version="1.2"))
    spec.flavor.extra_specs = {"hw:tpm_version": "2.0"}
    with pytest.raises(RequestFilterFailed, match="tpm_version"):
        request_filter.tpm_secret_security_filter(spec, FakeAggregates([]), CONF)


# ------------------------------------------------------------- the whole chain, enabled


def test_every_prefilter_enabled_builds_novas_root_traits_and_aggregates():
    for option in (
        "query_placement_for_image_type_support",
        "enable_isolated_aggregate_filtering",
        "image_metadata_prefilter",
    ):
        CONF.set_override(option, True, group="scheduler")
    spec = _spec(
        image=_image(
            "raw",
            hw_disk_bus="virtio",
            hw_sound_model="virtio",
            hw_tpm_version="2.0",
            hw_virtio_packed_ring=True,
        ),
        availability_zone="az1",
    )
    spec.flavor.extra_specs = {
        "accel:device_profile": "gpu",
        "hw:ephemeral_encryption": "yes",
        "hw:tpm_secret_security": "deployment",
    }
    applied = request_filter.process_reqspec(spec, FakeAggregates(ISOLATED_AGGS), CONF)
    assert applied == [
        "map_az_to_placement_aggregate",
        "require_image_type_support",
        "compute_status_filter",
        "isolate_aggregates",
        "transform_image_metadata",
        "accelerators_filter",
        "packed_virtqueue_filter",
        "ephemeral_encryption_filter",
        "virtio_sound_filter",
        "tpm_secret_security_filter",
    ]
    assert spec.root_required == {
        "COMPUTE_IMAGE_TYPE_RAW",
        "COMPUTE_STORAGE_BUS_VIRTIO",
        "COMPUTE_ACCELERATORS",
        "COMPUTE_NET_VIRTIO_PACKED",
        "COMPUTE_EPHEMERAL_ENCRYPTION",
        "COMPUTE_SOUND_MODEL_VIRTIO",
        "COMPUTE_SECURITY_TPM_SECRET_SECURITY_DEPLOYMENT",
    }
    assert spec.root_forbidden == {"COMPUTE_STATUS_DISABLED"}
    assert spec.requested_destination.aggregates == ["agg-4"]
    assert spec.requested_destination.forbidden_aggregates == {"agg-1", "agg-2", "agg-3"}


def test_former_toggles_are_no_longer_warned_about():
    for option in (
        "query_placement_for_image_type_support",
        "enable_isolated_aggregate_filtering",
        "image_metadata_prefilter",
    ):
        CONF.set_override(option, True, group="scheduler")
    assert request_filter.warn_unimplemented_toggles(CONF) == []


class VersionedAggregates(FakeAggregates):
    def __init__(self, version):
        super().__init__([])
        self.version = version

    def minimum_compute_version(self):
        return self.version


@pytest.mark.parametrize("version, expected", [(None, False), (72, False), (73, True), (74, True)])
def test_owner_nova_filter_needs_every_compute_at_version_73(version, expected):
    spec = _spec()
    applied = request_filter.owner_nova_filter(spec, VersionedAggregates(version), CONF)
    assert applied is expected
    assert ("OWNER_NOVA" in spec.root_required) is expected


def test_owner_nova_filter_without_version_information_adds_nothing():
    spec = _spec()
    assert request_filter.owner_nova_filter(spec, FakeAggregates([]), CONF) is False
    assert spec.root_required == set()
