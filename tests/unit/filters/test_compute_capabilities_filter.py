"""ComputeCapabilitiesFilter: capabilities: extra specs against the HostState."""

from __future__ import annotations

import json

from filters.compute_capabilities_filter import ComputeCapabilitiesFilter
from tests.unit.filters.fakes import make_host, make_spec, run_filter

CPU_INFO = json.dumps(
    {
        "arch": "x86_64",
        "vendor": "Intel",
        "features": ["sse", "avx"],
        "topology": {"cores": 8, "threads": 2},
        "maxphysaddr": {"mode": "passthrough", "bits": 46},
    }
)


def check(extra_specs, **attrs):
    attrs.setdefault("cpu_info", CPU_INFO)
    host = make_host(**attrs)
    return ComputeCapabilitiesFilter().host_passes(host, make_spec(extra_specs=extra_specs))


def test_no_extra_specs_passes():
    assert check({}) is True


def test_scoped_key_resolved_through_attribute_and_json_string():
    assert check({"capabilities:cpu_info:arch": "x86_64"}) is True
    result = check({"capabilities:cpu_info:arch": "aarch64"})
    assert not result
    assert "capabilities:cpu_info:arch" in result.reason


def test_nested_json_lookup_with_operator():
    assert check({"capabilities:cpu_info:topology:cores": ">= 8"}) is True
    assert not check({"capabilities:cpu_info:topology:cores": ">= 16"})


def test_missing_capability_fails():
    result = check({"capabilities:cpu_info:nonexistent": "1"})
    assert not result
    assert "does not report" in result.reason


def test_other_namespaces_are_ignored():
    assert check({"hw:cpu_policy": "dedicated", "trait:HW_CPU_X86_AVX": "required"}) is True
    assert check({"aggregate_instance_extra_specs:ssd": "true"}) is True


def test_unscoped_key_checked_only_when_host_has_attribute_or_stat():
    assert check({"some_unknown_key": "whatever"}) is True
    assert check({"hypervisor_type": "QEMU"}, hypervisor_type="QEMU") is True
    assert not check({"hypervisor_type": "QEMU"}, hypervisor_type="Xen")
    assert check({"gpu": "<in> nvidia"}, stats={"gpu": "nvidia-a100"}) is True
    assert not check({"gpu": "<in> amd"}, stats={"gpu": "nvidia-a100"})


def test_scoped_key_falls_back_to_stats():
    assert check({"capabilities:numa_nodes": "= 2"}, stats={"numa_nodes": "2"}) is True
    assert not check({"capabilities:numa_nodes": "= 4"}, stats={"numa_nodes": "2"})


def test_numeric_attribute_compared_through_str():
    assert check({"capabilities:free_ram_mb": ">= 1024"}, free_ram_mb=2048) is True
    assert not check({"capabilities:free_ram_mb": ">= 4096"}, free_ram_mb=2048)
    assert check({"capabilities:hypervisor_version": "6002000"}, hypervisor_version=6002000)


def test_maxphysaddr_bits_is_rewritten_to_a_cpu_info_minimum():
    assert check({"hw:maxphysaddr_bits": "42"}) is True
    assert check({"hw:maxphysaddr_bits": "46"}) is True
    assert not check({"hw:maxphysaddr_bits": "48"})


def test_maxphysaddr_bits_fails_when_host_does_not_report_it():
    host = make_host(cpu_info=json.dumps({"arch": "x86_64"}))
    spec = make_spec(extra_specs={"hw:maxphysaddr_bits": "42"})
    assert not ComputeCapabilitiesFilter().host_passes(host, spec)


def test_invalid_json_on_the_way_fails():
    assert not check({"capabilities:cpu_info:arch": "x86_64"}, cpu_info="{not json")


def test_every_spec_must_match():
    specs = {"capabilities:cpu_info:arch": "x86_64", "capabilities:cpu_info:vendor": "AMD"}
    assert not check(specs)


def test_run_filter_gives_the_same_answer_and_reasons():
    hosts = [
        make_host("a", cpu_info=CPU_INFO),
        make_host("b", cpu_info=json.dumps({"arch": "aarch64"})),
        make_host("c", cpu_info=None),
    ]
    spec = make_spec(extra_specs={"capabilities:cpu_info:arch": "x86_64"})
    filt = ComputeCapabilitiesFilter()
    outcome = run_filter(filt, hosts, spec)
    assert [h.host for h in outcome.passed] == ["a"]
    assert [(h.host, r) for h, r in outcome.rejected] == [
        ("b", filt.host_passes(hosts[1], spec).reason),
        ("c", filt.host_passes(hosts[2], spec).reason),
    ]


def test_run_flags_match_nova():
    assert ComputeCapabilitiesFilter.RUN_ON_REBUILD is False
    assert ComputeCapabilitiesFilter.run_filter_once_per_request is True
