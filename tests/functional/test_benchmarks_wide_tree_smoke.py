"""The benchmark's wide_tree section, small, against the real Placement on MariaDB.

The section's shape scaled down so that Placement answers every configuration at once: 20
hosts with 4 devices each, 2 asked (12 candidates a tree, 240 in all). The view and every
Placement configuration must agree on how many candidates there are, each answer must put
the two groups on two distinct devices of one host, and the rows must say who answered what.
"""

from __future__ import annotations

import json

import pytest

from benchmarks import placement_seed, wide_tree
from tests.functional.fixtures_db import ensure_server

HOSTS = 20


def test_the_wide_tree_section_answers_with_the_view_and_with_placement(monkeypatch):
    ensure_server("mariadb")
    monkeypatch.setattr(placement_seed, "WIDE_DEVICES", 4)
    monkeypatch.setattr(wide_tree, "DEVICES_ASKED", 2)
    monkeypatch.setattr(wide_tree, "CAP", 50)
    monkeypatch.setattr(wide_tree, "LIMIT", 1000)
    out = wide_tree.run([HOSTS], 1, {})
    json.dumps(out)
    rows = out["rows"]
    by = {(r["answered by"], r["max_allocation_candidates"], r["strategy"]): r for r in rows}
    for strategy in wide_tree.STRATEGIES:
        view = by["view", 50, strategy]
        assert view["candidates"] == 50 and view["note"] == "50 matched", view
        for who in ("Placement", "Placement (optimize_for_wide_provider_trees)"):
            assert by[who, 50, strategy]["candidates"] == 50, by[who, 50, strategy]
    # without a cap every candidate: 4 x 3 ordered pairs of devices on each of 20 hosts
    assert by["view", -1, "depth-first"]["note"] == "240 matched"
    assert by["Placement", -1, "depth-first"]["candidates"] == 240


def test_the_query_is_what_nova_sends_for_a_pci_alias_in_placement():
    q = wide_tree.query()
    suffixed = [g for g in q.groups if g.suffix]
    assert len(suffixed) == wide_tree.DEVICES_ASKED
    assert all(g.resources == {placement_seed.PCI_CLASS: 1} for g in suffixed)
    assert all("COMPUTE_MANAGED_PCI_DEVICE" in g.required_traits for g in suffixed)
    assert q.group_policy == "none" and q.limit == 1000


@pytest.mark.parametrize("index", [0, 7])
def test_every_host_of_the_wide_fleet_has_its_devices(index):
    root = {"uuid": "6f6e6f76-6173-4b0d-9e00-000000000001", "name": f"compute-{index}"}
    children = placement_seed.wide_children(root, index)
    assert len(children) == placement_seed.WIDE_DEVICES
    assert len({c["uuid"] for c in children}) == placement_seed.WIDE_DEVICES
    assert all(c["parent_uuid"] == c["root_uuid"] == root["uuid"] for c in children)
    assert children[0]["name"] == f"compute-{index}_0000:81:00.0"
