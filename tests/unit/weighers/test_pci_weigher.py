"""PCIWeigher: 100 - min(free PCI devices, 99); prefers hosts with fewer free devices."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from scheduler.hosts.state import HostState
from scheduler.resources import pci
from tests.unit.filters.fakes import make_aggregate, make_host, make_spec
from weighers.handler import WeightHandler
from weighers.pci import PCIWeigher, free_pci_devices, pci_weight


def pool(count, **extra):
    return {"vendor_id": "8086", "product_id": "1520", "numa_node": 0, "count": count, **extra}


def primitive(*counts):
    """nova's PciDevicePoolList primitive, as compute_nodes.pci_stats stores it."""
    return {
        "nova_object.name": "PciDevicePoolList",
        "nova_object.namespace": "nova",
        "nova_object.version": "1.1",
        "nova_object.data": {
            "objects": [
                {
                    "nova_object.name": "PciDevicePool",
                    "nova_object.namespace": "nova",
                    "nova_object.version": "1.1",
                    "nova_object.data": {"product_id": "1520", "vendor_id": "8086", "count": c},
                }
                for c in counts
            ]
        },
    }


@pytest.mark.parametrize(
    "pci_stats, free",
    [
        (None, 0),
        ([], 0),
        ({}, 0),
        ([pool(2), pool(3)], 5),
        (primitive(4, 1), 5),
        ({"nova_object.data": {"objects": []}}, 0),
        (SimpleNamespace(pools=[pool(7)]), 7),
        ([pool(1), {"vendor_id": "x"}], 1),  # a pool without a count counts 0
    ],
)
def test_free_devices_from_every_form(pci_stats, free):
    assert free_pci_devices(pci_stats) == free


def test_formula_edges():
    assert pci_weight(None) == 100
    assert pci_weight([pool(1)]) == 99
    assert pci_weight([pool(98)]) == 2
    assert pci_weight([pool(99)]) == 1
    assert pci_weight([pool(500)]) == 1


def test_decoded_column_from_host_state_update():
    state = HostState("h", "h")
    state.update(compute={"free_disk_gb": 1, "pci_stats": json.dumps(primitive(3))})
    assert PCIWeigher()._weigh_object(state, make_spec()) == 97


def test_request_without_pci_avoids_pci_hosts():
    hosts = [
        make_host("lots", pci_stats=[pool(120)]),
        make_host("plain", pci_stats=None),
        make_host("few", pci_stats=primitive(2)),
    ]
    weighed = WeightHandler([PCIWeigher()]).weigh(hosts, make_spec())
    assert [(w.obj.host, w.weight) for w in weighed] == [
        ("plain", 1.0),
        ("few", 97 / 99),
        ("lots", 0.0),
    ]


def test_request_with_pci_stacks_on_fewest_free():
    # among PCI hosts (plain hosts were filtered by PciPassthroughFilter) the host with
    # the fewest free devices wins, keeping the larger pools for larger requests
    hosts = [make_host("big", pci_stats=[pool(8)]), make_host("small", pci_stats=[pool(2)])]
    spec = make_spec()
    spec.pci_requests = pci.requests_from_primitive([{"count": 1, "spec": [{"vendor_id": "8086"}]}])
    assert [w.obj.host for w in WeightHandler([PCIWeigher()]).weigh(hosts, spec)] == [
        "small",
        "big",
    ]


def test_aggregate_override():
    agg = make_aggregate(1, pci_weight_multiplier="0.0")
    hosts = [make_host("plain", aggregates=[agg]), make_host("pci", pci_stats=[pool(1)])]
    weighed = WeightHandler([PCIWeigher()]).weigh(hosts, make_spec())
    assert [(w.obj.host, w.weight) for w in weighed] == [("plain", 0.0), ("pci", 0.0)]
    assert PCIWeigher().configured_multiplier() == 1.0
