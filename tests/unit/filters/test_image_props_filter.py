"""ImagePropertiesFilter: image arch / hv type / vm mode against supported_instances."""

from __future__ import annotations

import json

import pytest

from filters.image_props_filter import (
    ImagePropertiesFilter,
    canonicalize_arch,
    canonicalize_hv_type,
    canonicalize_vm_mode,
    parse_version_predicate,
    version_from_int,
)
from tests.unit.filters.fakes import make_host, make_spec, override, run_filter

X86_KVM = [["x86_64", "kvm", "hvm"], ["i686", "kvm", "hvm"]]


def check(image_props, supported=X86_KVM, **attrs):
    host = make_host(supported_instances=supported, **attrs)
    return ImagePropertiesFilter().host_passes(host, make_spec(image_props=image_props))


def test_image_without_arch_hv_type_or_vm_mode_passes_any_host():
    assert check({}, supported=[]) is True
    assert check({"hw_disk_bus": "virtio"}, supported=[]) is True
    spec = make_spec()  # no image at all
    assert ImagePropertiesFilter().host_passes(make_host(), spec) is True


def test_matching_triple_passes():
    assert check({"hw_architecture": "x86_64", "img_hv_type": "kvm", "hw_vm_mode": "hvm"})
    assert check({"hw_architecture": "i686"}) is True
    assert check({"img_hv_type": "kvm"}) is True


def test_all_set_values_must_be_in_the_same_triple():
    supported = [["x86_64", "qemu", "hvm"], ["aarch64", "kvm", "hvm"]]
    assert check({"hw_architecture": "x86_64", "img_hv_type": "qemu"}, supported) is True
    result = check({"hw_architecture": "x86_64", "img_hv_type": "kvm"}, supported)
    assert not result
    assert result.reason == "image hw_architecture=x86_64 img_hv_type=kvm not supported"


def test_host_without_supported_instances_fails_when_image_asks():
    result = check({"hw_architecture": "x86_64"}, supported=[])
    assert result.reason == "host reports no supported instances"


def test_values_are_canonicalised():
    assert check({"hw_architecture": "AMD64"}) is True
    assert check({"hw_architecture": "i386"}) is True
    assert check({"hw_vm_mode": "hv"}) is True
    assert check({"hw_vm_mode": "HVM"}) is True
    assert check({"img_hv_type": "xapi"}, supported=[["x86_64", "xen", "xen"]]) is True
    assert check({"hw_vm_mode": "pv"}, supported=[["x86_64", "xen", "xen"]]) is True
    # nova does not merge qemu and kvm
    assert not check({"img_hv_type": "qemu"})


def test_canonicalisers():
    assert canonicalize_arch("x86_32") == "i686"
    assert canonicalize_arch(None) is None
    assert canonicalize_hv_type("KVM") == "kvm"
    assert canonicalize_vm_mode("baremetal") == "hvm"


def test_default_architecture_applies_to_images_without_one():
    with override("image_properties_default_architecture", "aarch64", group="filter_scheduler"):
        assert not check({})
        assert check({}, supported=[["aarch64", "kvm", "hvm"]]) is True
        # an image's own architecture wins over the default
        assert check({"hw_architecture": "x86_64"}) is True


def test_requested_hypervisor_version():
    props = {"img_hv_type": "kvm", "img_hv_requested_version": ">=6.2"}
    assert check(props, hypervisor_version=6002000) is True
    assert check(props, hypervisor_version=7000000) is True
    result = check(props, hypervisor_version=6001009)
    assert result.reason == "hypervisor version does not satisfy >=6.2"
    ranged = {"img_hv_type": "kvm", "img_hv_requested_version": ">=6.0, <7"}
    assert check(ranged, hypervisor_version=6002000) is True
    assert not check(ranged, hypervisor_version=7000000)


def test_requested_version_ignored_without_host_version():
    props = {"img_hv_type": "kvm", "img_hv_requested_version": ">=6.2"}
    assert check(props, hypervisor_version=None) is True


def test_invalid_version_predicate_fails_with_a_reason():
    props = {"img_hv_type": "kvm", "img_hv_requested_version": "newest please"}
    result = check(props, hypervisor_version=6002000)
    assert "invalid img_hv_requested_version" in result.reason


def test_version_helpers():
    assert version_from_int(6002000) == (6, 2, 0)
    assert version_from_int(1000) == (1, 0)
    with pytest.raises(ValueError):
        parse_version_predicate(">=x")


def test_maxphysaddr_bits_against_cpu_info():
    cpu_info = json.dumps({"maxphysaddr": {"mode": "passthrough", "bits": 46}})
    props = {"hw_architecture": "x86_64", "hw_maxphysaddr_bits": 42}
    assert check(props, cpu_info=cpu_info) is True
    props["hw_maxphysaddr_bits"] = 48
    assert check(props, cpu_info=cpu_info).reason == "fewer than 48 maxphysaddr bits"
    assert not check({"hw_architecture": "x86_64", "hw_maxphysaddr_bits": 40}, cpu_info=None)


def test_maxphysaddr_alone_is_not_checked_as_in_nova():
    # nova returns early when arch, hv type and vm mode are all unset
    assert check({"hw_maxphysaddr_bits": 48}, cpu_info=None) is True


def test_run_filter_equals_per_host():
    hosts = [
        make_host("a", supported_instances=X86_KVM),
        make_host("b", supported_instances=[["aarch64", "kvm", "hvm"]]),
        make_host("c", supported_instances=[]),
    ]
    spec = make_spec(image_props={"hw_architecture": "x86_64"})
    filt = ImagePropertiesFilter()
    outcome = run_filter(filt, hosts, spec)
    assert outcome.passed == [hosts[0]]
    assert outcome.rejected == [(h, filt.host_passes(h, spec).reason) for h in hosts[1:]]


def test_run_flags_match_nova():
    assert ImagePropertiesFilter.RUN_ON_REBUILD is True
    assert ImagePropertiesFilter.run_filter_once_per_request is True
