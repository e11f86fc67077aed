"""Request shapes beyond the common ones, as nova 34 turns them into Placement's terms: a vTPM
flavor needs the ``COMPUTE_SECURITY_TPM_*`` traits, and ``resources:PCPU`` asks for dedicated
CPUs instead of (not beside) VCPU. Only ``dep-sec`` (its own zone, ``az-sec``) reports PCPU and
the TPM traits (tests/deployment/nova_compute.py)."""

from __future__ import annotations

import pytest

from tests.deployment.deployment import NO_VALID_HOST, Deployment, fault_message

pytestmark = [pytest.mark.functional, pytest.mark.timeout(600)]


def test_a_vtpm_flavor_lands_only_where_the_tpm_traits_are(deployment: Deployment):
    flavor = deployment.flavor("vtpm", **{"hw:tpm_version": "2.0", "hw:tpm_model": "tpm-crb"})

    # no host of the default zone emulates a TPM: nova refuses, and so must novasched
    refused = deployment.boot_and_wait(flavor, name="vtpm-main")
    placed = deployment.boot_and_wait(flavor, name="vtpm-sec", az="az-sec")

    assert refused["status"] == "ERROR"
    assert fault_message(refused).startswith(NO_VALID_HOST), refused.get("fault")
    assert deployment.allocations(refused["id"]) == {}
    assert deployment.expect_active(placed) == "dep-sec"
    assert deployment.host_allocations_match(placed)


def test_resources_pcpu_claims_dedicated_cpus_and_no_vcpu(deployment: Deployment):
    flavor = deployment.flavor("pcpu", vcpus=2, **{"resources:PCPU": "2"})

    server = deployment.boot_and_wait(flavor, name="pcpu", az="az-sec")

    assert deployment.expect_active(server) == "dep-sec"
    resources = next(iter(deployment.allocations(server["id"]).values()))
    assert resources == {"PCPU": 2, "MEMORY_MB": 512, "DISK_GB": 1}
