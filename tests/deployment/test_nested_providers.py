"""Boots whose resources come from nested providers, as in a cloud with QoS and PCI in Placement:
a port with a minimum-bandwidth rule (its ``resource_request``, served by the Neutron stand-in)
takes bandwidth from a bridge of the Open vSwitch agent under the compute node's provider, and
a flavor's PCI alias (``[filter_scheduler] pci_in_placement``) takes one PCI device's provider,
a child of the compute node's. Both computes are alone in ``az-nest`` (deployment.py):

* ``dep-pci``: two ``type-PCI`` devices in Placement (``dep-pci_0000:81:00.0``,
  ``dep-pci_0000:82:00.0``); an agent with ``br-phy1`` (physnet1) and ``br-phy2`` (physnet2),
  10 Gbit/s each way each;
* ``dep-ovs``: no PCI device; ``br-phy1`` (physnet1, 10 Gbit/s) and ``br-phy2`` (physnet2,
  1 Mbit/s).

novasched answers both from its provider view when it runs with one (the suite's
``view-database`` configuration), else from Placement's ``GET /allocation_candidates``: its
decision record of the boot says which (``placement.source``), and each test requires the one
of the configuration it runs in, answered at the first attempt.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.deployment.deployment import (
    PCI_ALIAS,
    PCI_RESOURCE_CLASS,
    TENANT_PROJECT,
    Deployment,
    host_of,
    pci_provider_name,
)
from tests.deployment.nova_compute import PCI_ADDRESSES
from tests.deployment.stand_ins import BANDWIDTH_CLASSES, OVS_AGENT, VNIC_TYPE_NORMAL, physnet_trait

# the first test also waits for the deployment (and, on a fresh machine, nova's install)
pytestmark = [pytest.mark.functional, pytest.mark.timeout(600)]

SMALL = {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}  # the "small" flavor's, on the root
# egress, ingress: more than dep-ovs's physnet2 bridge has
MINIMUM_KBPS = (5000, 5000)


def _assert_answered_by_its_source(cloud: Deployment, server: dict[str, Any], *terms: str) -> None:
    """novasched's decision record of the server's boot: scheduled on its host at the first
    attempt, the candidates from the provider view when novasched runs with one (else from
    Placement's API), for a query holding ``terms``."""
    (record,) = cloud.decisions(server["id"])
    placement = record["document"]["placement"]
    expected = "view" if cloud.view_database else "placement"
    assert (record["outcome"], record["hosts"]) == ("scheduled", [host_of(server)]), record
    assert (placement["source"], placement["attempts"]) == (expected, 1), placement
    for term in terms:
        assert term in placement["query"], placement


def test_a_port_with_a_minimum_bandwidth_takes_it_from_its_physnets_bridge(
    deployment: Deployment,
):
    neutron = deployment.neutron
    network = neutron.add_network("physnet2-net", "physnet2", TENANT_PROJECT)
    port_id = neutron.add_port(network, TENANT_PROJECT, minimum_kbps=MINIMUM_KBPS)
    (group,) = neutron.port(port_id)["resource_request"]["request_groups"]

    server = deployment.boot_and_wait(
        deployment.flavor("small"), name="bandwidth", az="az-nest", networks=[{"port": port_id}]
    )

    # only dep-pci's physnet2 bridge has room for it (for a server without PCI devices nova's
    # PCIWeigher prefers dep-ovs, which has none)
    host = deployment.expect_active(server)
    assert host == "dep-pci"
    root = deployment.provider_uuid(host)
    allocations = deployment.allocations(server["id"])
    assert allocations.pop(root) == SMALL
    ((bridge, bandwidth),) = allocations.items()
    assert bandwidth == dict(zip(BANDWIDTH_CLASSES, MINIMUM_KBPS, strict=True))
    provider = deployment.provider(bridge)
    assert provider["name"] == f"{host}:{OVS_AGENT}:br-phy2"
    assert provider["root_provider_uuid"] == root
    assert {physnet_trait("physnet2"), VNIC_TYPE_NORMAL} <= set(provider["traits"])
    # nova bound the port on that host, telling Neutron the provider of its group
    port = neutron.port(port_id)
    assert port["device_id"] == server["id"]
    assert (port["binding:host_id"], port["binding:vif_type"]) == (host, "ovs")
    assert port["binding:profile"]["allocation"] == {group["id"]: bridge}
    (address,) = server["addresses"]["physnet2-net"]
    assert address["addr"] == port["fixed_ips"][0]["ip_address"]
    _assert_answered_by_its_source(
        deployment, server, group["id"], f"{BANDWIDTH_CLASSES[0]}:{MINIMUM_KBPS[0]}"
    )


def test_a_pci_alias_flavor_takes_a_pci_device_provider_of_its_host(deployment: Deployment):
    flavor = deployment.flavor("pci-nic", **{"pci_passthrough:alias": f"{PCI_ALIAS}:1"})

    server = deployment.boot_and_wait(flavor, name="pci", az="az-nest")

    host = deployment.expect_active(server)
    assert host == "dep-pci"
    root = deployment.provider_uuid(host)
    allocations = deployment.allocations(server["id"])
    # nothing of the device on the compute node's provider
    assert allocations.pop(root) == SMALL
    ((device, resources),) = allocations.items()
    assert resources == {PCI_RESOURCE_CLASS: 1}
    provider = deployment.provider(device)
    assert provider["parent_provider_uuid"] == root
    # nova-compute claimed the very device whose provider Placement allocated
    (address,) = deployment.pci_devices_of(server["id"])
    assert address in PCI_ADDRESSES
    assert provider["name"] == pci_provider_name(host, address)
    _assert_answered_by_its_source(deployment, server, f"{PCI_RESOURCE_CLASS}:1")
