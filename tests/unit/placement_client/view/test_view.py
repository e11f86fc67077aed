"""ProviderView without Placement: records built by hand, a fake clock.

Placement's rules the view must follow (checked against the real service in
tests/functional/test_provider_view_equivalence.py): a request of ``amount`` fits an
inventory when ``used + amount <= (total - reserved) * allocation_ratio``, ``min_unit <=
amount <= max_unit`` and ``amount % step_size == 0``; summaries report ``capacity =
int((total - reserved) * allocation_ratio)`` and list every provider of a candidate's tree.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement_client.api import AllocationCandidatesQuery, QueryGroup
from placement_client.view import Inventory, ProviderRecord, ProviderView
from placement_client.view.model import MAX_UNIT_DEFAULT, SHARING_TRAIT, usage_of_allocations
from placement_client.view.search import SearchOptions, TreeSearch


class Clock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def rec(
    uuid: str,
    *,
    gen: int = 1,
    inv: dict[str, Inventory] | None = None,
    allocations: dict[str, dict[str, int]] | None = None,
    traits: tuple[str, ...] | set[str] = (),
    aggs: tuple[str, ...] | set[str] = (),
    parent: str | None = None,
    root: str = "",
) -> ProviderRecord:
    """A record; ``allocations`` is ``{consumer: {rc: n}}`` as a feed reads it."""
    used, consumers, rows = usage_of_allocations(allocations or {})
    return ProviderRecord(
        uuid=uuid,
        generation=gen,
        name="n-" + uuid,
        parent_uuid=parent,
        root_uuid=root,
        inventories=dict(inv if inv is not None else {"VCPU": Inventory(8)}),
        used=used,
        consumers=consumers,
        alloc_rows=rows,
        traits=frozenset(traits),
        aggregates=frozenset(aggs),
    )


def loaded(records: list[ProviderRecord], clock: Clock | None = None, **kw: Any) -> ProviderView:
    clock = clock or Clock()
    view = ProviderView(clock=clock, **kw)
    view.replace_all(records, clock.now)
    return view


def q(
    resources: dict[str, int] | None = None,
    *,
    limit: int | None = None,
    root_required: set[str] | None = None,
    root_forbidden: set[str] | None = None,
    **group: Any,
) -> AllocationCandidatesQuery:
    return AllocationCandidatesQuery(
        [QueryGroup(resources=dict(resources or {"VCPU": 1}), **group)],
        limit=limit,
        root_required=set(root_required or ()),
        root_forbidden=set(root_forbidden or ()),
    )


def picked(view: ProviderView, query: AllocationCandidatesQuery) -> set[str]:
    """The providers of the view's allocation requests (the view must answer)."""
    answer = view.candidates(query)
    assert answer.candidates is not None, answer.reason
    return {rp for ar in answer.candidates.allocation_requests for rp in ar["allocations"]}


def declined(view: ProviderView, query: AllocationCandidatesQuery) -> str:
    answer = view.candidates(query)
    assert answer.candidates is None
    assert answer.reason
    return answer.reason


# -- capacity, min_unit, max_unit, step_size ---------------------------------------------------
def test_a_fractional_ratio_limits_at_the_unrounded_product_and_reports_it_rounded_down():
    view = loaded([rec("a", inv={"VCPU": Inventory(5, allocation_ratio=1.5)})])  # 7.5
    assert picked(view, q({"VCPU": 7})) == {"a"}
    assert picked(view, q({"VCPU": 8})) == set()
    summary = view.candidates(q()).candidates.provider_summaries["a"]
    assert summary["resources"] == {"VCPU": {"capacity": 7, "used": 0}}


def test_used_plus_amount_may_equal_the_limit_but_not_exceed_it():
    inv = {"VCPU": Inventory(8, reserved=2, allocation_ratio=2.0)}  # limit 12
    view = loaded([rec("a", inv=inv, allocations={"c1": {"VCPU": 9}})])
    assert picked(view, q({"VCPU": 3})) == {"a"}
    assert picked(view, q({"VCPU": 4})) == set()
    assert view.candidates(q()).candidates.provider_summaries["a"]["resources"]["VCPU"] == {
        "capacity": 12,
        "used": 9,
    }


def test_everything_reserved_leaves_no_room():
    view = loaded(
        [rec("a", inv={"VCPU": Inventory(4, reserved=4)}), rec("b", inv={"VCPU": Inventory(4)})]
    )
    assert picked(view, q({"VCPU": 1})) == {"b"}


def test_usage_above_capacity_leaves_no_room():
    view = loaded([rec("a", inv={"VCPU": Inventory(2)}, allocations={"c": {"VCPU": 3}})])
    assert picked(view, q({"VCPU": 1})) == set()


@pytest.mark.parametrize(
    ("inv", "amount", "fits"),
    [
        (Inventory(100, min_unit=3, max_unit=9), 2, False),  # below min_unit only
        (Inventory(100, min_unit=3, max_unit=9), 3, True),
        (Inventory(100, min_unit=3, max_unit=9), 9, True),
        (Inventory(100, min_unit=3, max_unit=9), 10, False),  # above max_unit only
        (Inventory(100, step_size=3), 4, False),  # off the step only
        (Inventory(100, step_size=3), 6, True),
        (Inventory(100, min_unit=4, max_unit=12, step_size=4), 2, False),
        (Inventory(100, min_unit=4, max_unit=12, step_size=4), 12, True),
        (Inventory(100, min_unit=4, max_unit=12, step_size=4), 16, False),
    ],
)
def test_min_unit_max_unit_and_step_size(inv, amount, fits):
    view = loaded([rec("a", inv={"VCPU": inv})])
    assert picked(view, q({"VCPU": amount})) == ({"a"} if fits else set())


def test_max_unit_defaults_to_placements_maximum():
    assert Inventory(10).max_unit == MAX_UNIT_DEFAULT == 2147483647
    inv = Inventory.from_api({"total": 10})
    assert inv == Inventory(10, 0, 1, MAX_UNIT_DEFAULT, 1, 1.0)
    view = loaded([rec("a", inv={"VCPU": Inventory(10, allocation_ratio=16.0)})])
    assert picked(view, q({"VCPU": 160})) == {"a"}


def test_every_requested_class_must_fit_and_zero_amounts_are_ignored():
    view = loaded(
        [
            rec("a", inv={"VCPU": Inventory(8), "MEMORY_MB": Inventory(1024)}),
            rec("b", inv={"VCPU": Inventory(8), "MEMORY_MB": Inventory(256)}),
            rec("c", inv={"VCPU": Inventory(8)}),
        ]
    )
    assert picked(view, q({"VCPU": 2, "MEMORY_MB": 512})) == {"a"}
    assert picked(view, q({"VCPU": 2, "MEMORY_MB": 0})) == {"a", "b", "c"}
    answer = view.candidates(q({"VCPU": 2, "MEMORY_MB": 0})).candidates
    for ar in answer.allocation_requests:
        (rp,) = ar["allocations"]
        assert ar["allocations"][rp] == {"resources": {"VCPU": 2}}


def test_allocation_requests_and_summaries_have_placements_shape():
    view = loaded(
        [
            rec("a", inv={"VCPU": Inventory(8), "DISK_GB": Inventory(50)}, traits={"T2", "T1"}),
            rec("k", inv={"CUSTOM_NIC": Inventory(4)}, parent="a", root="a", traits={"K"}),
            rec("g", inv={}, parent="k", root="a"),
            rec("b", inv={"DISK_GB": Inventory(50)}),
        ]
    )
    answer = view.candidates(q({"VCPU": 2}))
    assert answer.matched == 1 and answer.age == 0.0
    assert answer.candidates.allocation_requests == [
        {"allocations": {"a": {"resources": {"VCPU": 2}}}, "mappings": {"": ["a"]}}
    ]
    assert answer.candidates.provider_summaries == {
        "a": {
            "resources": {
                "VCPU": {"capacity": 8, "used": 0},
                "DISK_GB": {"capacity": 50, "used": 0},
            },
            "traits": ["T1", "T2"],
            "parent_provider_uuid": None,
            "root_provider_uuid": "a",
        },
        "k": {
            "resources": {"CUSTOM_NIC": {"capacity": 4, "used": 0}},
            "traits": ["K"],
            "parent_provider_uuid": "a",
            "root_provider_uuid": "a",
        },
        "g": {
            "resources": {},
            "traits": [],
            "parent_provider_uuid": "k",
            "root_provider_uuid": "a",
        },
    }


# -- traits, aggregates, trees ----------------------------------------------------------------
@pytest.fixture
def fleet() -> ProviderView:
    """a: T1,T2 in agg1; b: T1 in agg2; c: T2 in agg1+agg2; d: nothing; a's child has T3
    and agg3 (which count for nothing: a child provides none of the requested classes)."""
    return loaded(
        [
            rec("a", traits={"T1", "T2"}, aggs={"agg1"}),
            rec("b", traits={"T1"}, aggs={"agg2"}),
            rec("c", traits={"T2"}, aggs={"agg1", "agg2"}),
            rec("d"),
            rec("ak", inv={"CUSTOM_NIC": Inventory(2)}, parent="a", root="a", traits={"T3"}),
            rec("akk", inv={}, parent="ak", root="a", aggs={"agg3"}),
        ]
    )


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        ({}, {"a", "b", "c", "d"}),
        ({"required_traits": {"T1"}}, {"a", "b"}),
        ({"required_traits": {"T1", "T2"}}, {"a"}),
        ({"required_traits": {"T3"}}, set()),  # only on a's child
        ({"required_traits": {"NOWHERE"}}, set()),
        ({"forbidden_traits": {"T1"}}, {"c", "d"}),
        ({"forbidden_traits": {"T3"}}, {"a", "b", "c", "d"}),  # a child's trait
        ({"required_traits": {"T2"}, "forbidden_traits": {"T1"}}, {"c"}),
        ({"root_required": {"T2"}}, {"a", "c"}),
        ({"root_forbidden": {"T2"}}, {"b", "d"}),
        ({"root_required": {"T1"}, "forbidden_traits": {"T2"}}, {"b"}),
        ({"member_of": [["agg1"]]}, {"a", "c"}),
        ({"member_of": [["agg1", "agg2"]]}, {"a", "b", "c"}),
        ({"member_of": [["agg1"], ["agg2"]]}, {"c"}),
        ({"member_of": [["agg3"]]}, set()),  # only on a's grandchild
        ({"member_of": [["agg1", "nope"]]}, {"a", "c"}),
        ({"member_of": [["nope"]]}, set()),
        ({"forbidden_aggregates": {"agg2"}}, {"a", "d"}),
        ({"forbidden_aggregates": {"agg3"}}, {"a", "b", "c", "d"}),
        ({"member_of": [["agg1"]], "forbidden_aggregates": {"agg2"}}, {"a"}),
        ({"in_tree": "a"}, {"a"}),
        ({"in_tree": "akk"}, {"a"}),  # a grandchild names its tree
        ({"in_tree": "b"}, {"b"}),
        ({"in_tree": "nope"}, set()),
        ({"in_tree": "b", "required_traits": {"T2"}}, set()),
        ({"in_tree": "ak", "member_of": [["agg1"]], "required_traits": {"T1"}}, {"a"}),
    ],
)
def test_traits_aggregates_and_trees(fleet, kw, expected):
    kw = dict(kw)
    root_required = kw.pop("root_required", None)
    root_forbidden = kw.pop("root_forbidden", None)
    query = q(root_required=root_required, root_forbidden=root_forbidden, **kw)
    assert picked(fleet, query) == expected
    answer = fleet.candidates(query)
    assert answer.matched == len(expected)
    trees = {"a": {"a", "ak", "akk"}}
    assert set(answer.candidates.provider_summaries) == {
        rp for root in expected for rp in trees.get(root, {root})
    }


def test_in_tree_naming_a_child_whose_root_the_view_does_not_hold_finds_nothing():
    # a refresh can read a child and find its root deleted just after (the child is deleted
    # first in Placement, and the next refresh removes it): no candidate, and no error
    view = loaded([rec("k", inv={"CUSTOM_NIC": Inventory(1)}, parent="gone", root="gone")])
    assert picked(view, q(in_tree="k")) == set()
    view.apply([rec("a")], [], 1000.0)
    assert picked(view, q(in_tree="k")) == set()
    assert picked(view, q()) == {"a"}


# -- limit ------------------------------------------------------------------------------------
def test_limit_returns_a_random_sample_of_exactly_that_many():
    records = [rec(f"r{i}") for i in range(10)] + [rec("full", allocations={"c": {"VCPU": 8}})]
    records.append(rec("r0-kid", inv={"CUSTOM_NIC": Inventory(1)}, parent="r0", root="r0"))
    view = loaded(records)
    everyone = {f"r{i}" for i in range(10)}
    seen: Counter[str] = Counter()
    for seed in range(200):
        answer = view.candidates(q(limit=3), rng=random.Random(seed))
        got = {rp for ar in answer.candidates.allocation_requests for rp in ar["allocations"]}
        assert len(answer.candidates.allocation_requests) == 3 == len(got)
        assert got <= everyone
        assert answer.matched == 10
        assert set(answer.candidates.provider_summaries) == got | (
            {"r0-kid"} if "r0" in got else set()
        )
        seen.update(got)
    assert set(seen) == everyone  # every candidate gets sampled
    assert max(seen.values()) < 3 * min(seen.values())  # roughly uniformly
    # the same rng state, the same sample
    one = view.candidates(q(limit=4), rng=random.Random(7)).candidates.allocation_requests
    two = view.candidates(q(limit=4), rng=random.Random(7)).candidates.allocation_requests
    assert one == two
    for limit in (10, 11, 1000):
        assert picked(view, q(limit=limit)) == everyone
    answer = view.candidates(q(limit=1))
    assert answer.matched == 10 and len(answer.candidates.allocation_requests) == 1


def test_the_order_is_the_same_with_required_traits_as_without():
    """A required trait or aggregate narrows the answer and keeps its order (the providers'
    order in the view): the order of a set of uuids changes with the process's hash seed,
    and hosts the weighers tie keep the answer's order, so a replay in another process
    chose another host."""
    records = [
        rec(f"{i:03d}-{(i * 7919) % 1000:03d}", traits={"OWNER_NOVA"}, aggs={"agg"})
        for i in range(200)
    ]
    view = loaded(records)

    def order(query: AllocationCandidatesQuery) -> list[str]:
        answer = view.candidates(query)
        assert answer.candidates is not None, answer.reason
        return [next(iter(ar["allocations"])) for ar in answer.candidates.allocation_requests]

    everyone = order(q())
    assert everyone == [r.uuid for r in records]
    assert order(q(root_required={"OWNER_NOVA"})) == everyone
    assert order(q(member_of=[{"agg"}])) == everyone


# -- trees, request groups and sharing providers -----------------------------------------------
def answered(view: ProviderView, query: AllocationCandidatesQuery) -> list[dict[str, Any]]:
    answer = view.candidates(query)
    assert answer.candidates is not None, answer.reason
    return answer.candidates.allocation_requests


def ask(*groups: QueryGroup, **kw: Any) -> AllocationCandidatesQuery:
    return AllocationCandidatesQuery(list(groups), **kw)


def host(name: str, **kw: Any) -> list[ProviderRecord]:
    """A compute node with VCPU, a bandwidth bridge under an agent, and two PCI devices."""
    bw = {"NET_BW_EGR_KILOBIT_PER_SEC": Inventory(1000)}
    pci = {"CUSTOM_PCI_X": Inventory(1)}
    return [
        rec(name, inv={"VCPU": Inventory(8)}, **kw),
        rec(f"{name}-agent", inv={}, parent=name, root=name, traits={"CUSTOM_VNIC"}),
        rec(f"{name}-br", inv=bw, parent=f"{name}-agent", root=name, traits={"CUSTOM_PHYS_A"}),
        rec(f"{name}-pci1", inv=pci, parent=name, root=name),
        rec(f"{name}-pci0", inv=pci, parent=name, root=name),
    ]


def test_an_empty_query_is_declined():
    view = loaded([rec("a")])
    assert "empty" in declined(view, AllocationCandidatesQuery())
    assert declined(view, AllocationCandidatesQuery([QueryGroup(resources={"VCPU": 0})]))


def test_a_port_group_lands_on_the_bridge_with_its_physnet():
    view = loaded([*host("a"), *host("b")])
    port = QueryGroup(
        suffix="_PORT",
        resources={"NET_BW_EGR_KILOBIT_PER_SEC": 100},
        required_traits={"CUSTOM_PHYS_A"},
    )
    requests = answered(view, ask(QueryGroup(resources={"VCPU": 1}), port, group_policy="none"))
    assert sorted(requests, key=str) == [
        {
            "allocations": {
                h: {"resources": {"VCPU": 1}},
                f"{h}-br": {"resources": {"NET_BW_EGR_KILOBIT_PER_SEC": 100}},
            },
            "mappings": {"": [h], "_PORT": [f"{h}-br"]},
        }
        for h in ("a", "b")
    ]
    # the bridge's trait is its own: the root does not have it, nor does it flow up
    assert (
        answered(view, ask(QueryGroup(resources={"VCPU": 1}, required_traits={"CUSTOM_PHYS_A"})))
        == []
    )
    answer = view.candidates(ask(QueryGroup(resources={"VCPU": 1}), port, group_policy="none"))
    assert set(answer.candidates.provider_summaries) == {rp.uuid for rp in [*host("a"), *host("b")]}


def test_each_device_is_a_candidate_of_its_own_and_the_first_by_name_comes_first():
    view = loaded(host("a"))
    pci = QueryGroup(suffix="_PCI", resources={"CUSTOM_PCI_X": 1})
    requests = answered(view, ask(QueryGroup(resources={"VCPU": 1}), pci, group_policy="none"))
    assert [r["mappings"]["_PCI"] for r in requests] == [["a-pci0"], ["a-pci1"]]
    # two devices: isolate puts them on distinct providers, none lets one take both (it
    # has room for one only, so the capacity check of the merged request drops that)
    two = [
        QueryGroup(suffix="_PCI1", resources={"CUSTOM_PCI_X": 1}),
        QueryGroup(suffix="_PCI2", resources={"CUSTOM_PCI_X": 1}),
    ]
    for policy in ("none", "isolate"):
        requests = answered(view, ask(*two, group_policy=policy))
        assert {(r["mappings"]["_PCI1"][0], r["mappings"]["_PCI2"][0]) for r in requests} == {
            ("a-pci0", "a-pci1"),
            ("a-pci1", "a-pci0"),
        }


def test_isolate_keeps_groups_apart_and_none_may_merge_them_on_one_provider():
    view = loaded([rec("a", inv={"VCPU": Inventory(8)})])
    groups = [
        QueryGroup(suffix="1", resources={"VCPU": 1}),
        QueryGroup(suffix="2", resources={"VCPU": 2}),
    ]
    assert answered(view, ask(*groups, group_policy="isolate")) == []
    assert answered(view, ask(*groups, group_policy="none")) == [
        {"allocations": {"a": {"resources": {"VCPU": 3}}}, "mappings": {"1": ["a"], "2": ["a"]}}
    ]
    # merged amounts must fit: 5 + 4 > 8
    groups[0].resources["VCPU"], groups[1].resources["VCPU"] = 5, 4
    assert answered(view, ask(*groups, group_policy="none")) == []


def test_the_unsuffixed_group_takes_each_class_from_any_provider_of_the_tree():
    view = loaded(
        [
            rec("a", inv={"MEMORY_MB": Inventory(1024)}, traits={"CUSTOM_ROOT"}),
            rec("n0", inv={"VCPU": Inventory(4)}, parent="a", root="a", traits={"CUSTOM_NUMA"}),
            rec("n1", inv={"VCPU": Inventory(4)}, parent="a", root="a"),
        ]
    )
    requests = answered(view, ask(QueryGroup(resources={"VCPU": 1, "MEMORY_MB": 64})))
    assert [r["mappings"][""] for r in requests] == [["a", "n0"], ["a", "n1"]]
    # required traits are the chosen providers' together: the root's and one NUMA node's
    both = QueryGroup(
        resources={"VCPU": 1, "MEMORY_MB": 64}, required_traits={"CUSTOM_ROOT", "CUSTOM_NUMA"}
    )
    assert [r["mappings"][""] for r in answered(view, ask(both))] == [["a", "n0"]]
    # a root's trait does not flow down to the child that gives the only class asked
    assert (
        answered(view, ask(QueryGroup(resources={"VCPU": 1}, required_traits={"CUSTOM_ROOT"})))
        == []
    )
    # a forbidden trait on one chosen provider drops that combination only
    not_n0 = QueryGroup(resources={"VCPU": 1}, forbidden_traits={"CUSTOM_NUMA"})
    assert [r["mappings"][""] for r in answered(view, ask(not_n0))] == [["n1"]]


def test_aggregates_on_a_root_count_for_its_tree_in_the_unsuffixed_group_only():
    view = loaded(
        [
            rec("a", inv={"VCPU": Inventory(8)}, aggs={"agg"}),
            rec("a-pci", inv={"CUSTOM_PCI_X": Inventory(1)}, parent="a", root="a"),
        ]
    )
    unsuffixed = QueryGroup(resources={"CUSTOM_PCI_X": 1}, member_of=[["agg"]])
    assert len(answered(view, ask(unsuffixed))) == 1
    suffixed = QueryGroup(suffix="1", resources={"CUSTOM_PCI_X": 1}, member_of=[["agg"]])
    assert answered(view, ask(suffixed)) == []
    banned = QueryGroup(resources={"CUSTOM_PCI_X": 1}, forbidden_aggregates={"agg"})
    assert answered(view, ask(banned)) == []


def test_a_sharing_provider_serves_every_tree_of_its_aggregates():
    view = loaded(
        [
            rec("a", inv={"VCPU": Inventory(8)}, aggs={"agg"}),
            rec("b", inv={"VCPU": Inventory(8)}, aggs={"other"}),
            rec("c", inv={"VCPU": Inventory(8)}, traits={"COMPUTE_STATUS_DISABLED"}, aggs={"agg"}),
            rec("nfs", inv={"DISK_GB": Inventory(100)}, traits={SHARING_TRAIT}, aggs={"agg"}),
        ]
    )
    query = ask(
        QueryGroup(resources={"VCPU": 1, "DISK_GB": 10}), root_forbidden={"COMPUTE_STATUS_DISABLED"}
    )
    assert answered(view, query) == [
        {
            "allocations": {"a": {"resources": {"VCPU": 1}}, "nfs": {"resources": {"DISK_GB": 10}}},
            "mappings": {"": ["a", "nfs"]},
        }
    ]
    # a granular group only the sharing provider serves is one request, however many
    # trees it is reached from
    alone = QueryGroup(suffix="1", resources={"DISK_GB": 10})
    assert len(answered(view, ask(alone))) == 1
    assert (
        len(answered(view, ask(QueryGroup(resources={"VCPU": 1}), alone, group_policy="none"))) == 2
    )


def test_same_subtree_and_resourceless_groups():
    view = loaded(host("a"))
    port = QueryGroup(suffix="_BW", resources={"NET_BW_EGR_KILOBIT_PER_SEC": 10})
    agent = QueryGroup(suffix="_AGENT", required_traits={"CUSTOM_VNIC"})
    pci = QueryGroup(suffix="_PCI", resources={"CUSTOM_PCI_X": 1})
    under_agent = ask(port, agent, group_policy="none", same_subtree=[["_AGENT", "_BW"]])
    assert answered(view, under_agent) == [
        {
            "allocations": {"a-br": {"resources": {"NET_BW_EGR_KILOBIT_PER_SEC": 10}}},
            "mappings": {"_AGENT": ["a-agent"], "_BW": ["a-br"]},
        }
    ]
    # a device is not under the agent
    assert (
        answered(view, ask(pci, agent, group_policy="none", same_subtree=[["_AGENT", "_PCI"]]))
        == []
    )
    # Placement: a resourceless group with neither required traits nor aggregates matches
    # nothing (only forbidden traits here)
    nothing = QueryGroup(suffix="_AGENT", forbidden_traits={"CUSTOM_NONE"})
    assert (
        answered(view, ask(port, nothing, group_policy="none", same_subtree=[["_AGENT", "_BW"]]))
        == []
    )


def test_any_of_traits():
    view = loaded([rec("a", traits={"CUSTOM_A"}), rec("b", traits={"CUSTOM_B"}), rec("c")])
    query = ask(QueryGroup(resources={"VCPU": 1}, required_any=[{"CUSTOM_A", "CUSTOM_B"}]))
    assert picked(view, query) == {"a", "b"}
    assert query.microversion() == "1.39"
    assert "required=in%3ACUSTOM_A%2CCUSTOM_B" in query.to_querystring()


@pytest.mark.parametrize(
    "strategy, roots", [("depth-first", ["a", "a", "b"]), ("breadth-first", ["a", "b", "c"])]
)
def test_max_allocation_candidates_and_the_strategies(strategy, roots):
    fleet = [r for name in ("a", "b", "c") for r in host(name)]
    options = SearchOptions(
        max_allocation_candidates=3, allocation_candidates_generation_strategy=strategy
    )
    view = loaded(fleet, search=options)
    pci = QueryGroup(suffix="_PCI", resources={"CUSTOM_PCI_X": 1})
    port = QueryGroup(suffix="_BW", resources={"NET_BW_EGR_KILOBIT_PER_SEC": 1})
    answer = view.candidates(ask(QueryGroup(resources={"VCPU": 1}), pci, port, group_policy="none"))
    assert answer.matched == 3
    assert [next(iter(r["allocations"])) for r in answer.candidates.allocation_requests] == roots


def _devices(root: str, used: tuple[int, ...] = (), count: int = 2) -> list[ProviderRecord]:
    """A compute node and ``count`` PCI devices of one unit; the ``used`` ones are taken."""
    records = [rec(root)]
    for d in range(count):
        taken = {f"vm-{root}-{d}": {"CUSTOM_PCI_X": 1}} if d in used else None
        records.append(
            rec(
                f"{root}-pci{d}",
                inv={"CUSTOM_PCI_X": Inventory(1)},
                parent=root,
                root=root,
                allocations=taken,
            )
        )
    return records


def _two_devices() -> AllocationCandidatesQuery:
    return ask(
        QueryGroup(suffix="_PCI1", resources={"CUSTOM_PCI_X": 1}),
        QueryGroup(suffix="_PCI2", resources={"CUSTOM_PCI_X": 1}),
        group_policy="none",
    )


def test_breadth_first_turns_count_the_products_that_are_not_candidates():
    # a: devices 0 and 1 of one unit: products (0,0) no, (0,1) yes, (1,0) yes, (1,1) no
    # b: one device of two units: its only product (0,0) is a candidate
    double = rec("b-pci0", inv={"CUSTOM_PCI_X": Inventory(2)}, parent="b", root="b")
    fleet = [*_devices("a"), rec("b"), double]
    ab = {"_PCI1": ["a-pci0"], "_PCI2": ["a-pci1"]}
    ba = {"_PCI1": ["a-pci1"], "_PCI2": ["a-pci0"]}
    bb = {"_PCI1": ["b-pci0"], "_PCI2": ["b-pci0"]}
    # Placement's round robin: the first products of a and b (a's is no candidate), then
    # the second of a; depth-first takes a's before b's
    for strategy, cap, expected in [
        ("breadth-first", 3, [bb, ab, ba]),
        ("breadth-first", 1, [bb]),
        ("depth-first", 3, [ab, ba, bb]),
        ("depth-first", 1, [ab]),
    ]:
        view = loaded(fleet, search=SearchOptions(cap, strategy))
        assert [r["mappings"] for r in answered(view, _two_devices())] == expected


def test_a_wide_tree_costs_its_candidates_not_its_products(monkeypatch):
    from placement_client.view import search

    # Placement bug 2070257's shape, smaller: 6 devices, 4 asked without isolate: 6^4 = 1296
    # products a tree, 360 candidates (4 distinct devices); one device taken on b
    fleet = _devices("a", count=6) + _devices("b", used=(2,), count=6)
    asked = [QueryGroup(suffix=f"_PCI{d}", resources={"CUSTOM_PCI_X": 1}) for d in range(4)]
    query = ask(QueryGroup(resources={"VCPU": 1}), *asked, group_policy="none")
    # the steps: a prefix that takes a device twice is not extended
    monkeypatch.setattr(search, "MAX_EXAMINED", 3000)
    for strategy in search.STRATEGIES:
        view = loaded(fleet, search=SearchOptions(-1, strategy))
        answer = view.candidates(query)
        assert answer.matched == 360 + 120  # b: 4 of its 5 free devices, in order
        requests = answer.candidates.allocation_requests
        for r in requests:
            devices = [r["mappings"][f"_PCI{d}"][0] for d in range(4)]
            assert len(set(devices)) == 4 and "b-pci2" not in devices
        capped = loaded(fleet, search=SearchOptions(10, strategy)).candidates(query)
        roots = [min(r["allocations"]) for r in capped.candidates.allocation_requests]
        assert len(roots) == 10
        # depth-first: a's first ten; breadth-first: b's first product that fits is its
        # 59th, and a's 59th comes before it, then they take turns
        assert set(roots) == ({"a"} if strategy == "depth-first" else {"a", "b"})
    assert "more than" in declined(
        loaded(fleet, search=SearchOptions(-1, "depth-first")),
        ask(
            *[QueryGroup(suffix=f"_PCI{d}", resources={"CUSTOM_PCI_X": 1}) for d in range(6)],
            group_policy="none",
        ),
    )


def test_a_class_moving_between_root_and_children_changes_the_path_not_the_answer():
    view = loaded([rec("a"), rec("k1", inv={"PCPU": Inventory(1)}, parent="a", root="a")])
    assert picked(view, q({"PCPU": 1})) == {"k1"}
    view.apply([], ["k1"], 1000.0)
    assert picked(view, q({"PCPU": 1})) == set()
    view.apply([rec("a", gen=2, inv={"PCPU": Inventory(2)})], [], 1000.0)
    assert picked(view, q({"PCPU": 1})) == {"a"}


def test_not_loaded_and_too_old():
    clock = Clock(1000.0)
    view = ProviderView(max_age=10.0, clock=clock)
    assert "not loaded" in declined(view, q())
    # a partial apply (and a refresh mark) before the first full read is not a load
    view.apply([rec("a")], [], clock.now)
    view.mark_refreshed(clock.now)
    assert "not loaded" in declined(view, q())
    assert view.age() == 0.0
    view.replace_all([rec("a")], 1000.0)
    assert view.loaded
    clock.now = 1010.0
    answer = view.candidates(q())
    assert answer.candidates is not None and answer.age == 10.0  # exactly max_age: still fine
    clock.now = 1010.5
    answer = view.candidates(q())
    assert answer.candidates is None and answer.age == 10.5 and "old" in answer.reason
    # an apply alone does not make the view fresh; a finished refresh does
    view.apply([rec("a", gen=2)], [], 1010.0)
    assert view.candidates(q()).candidates is None
    view.mark_refreshed(1009.0)
    assert view.candidates(q()).age == 1.5
    view.mark_refreshed(1001.0)  # an older refresh finishing late does not age the view
    assert view.candidates(q()).age == 1.5
    clock.now = 999.0  # a clock behind the refresh: age 0, not negative
    assert view.age() == 0.0


# -- own claims -------------------------------------------------------------------------------
def claim(amounts: dict[str, dict[str, int]]) -> dict[str, Any]:
    return {rp: {"resources": dict(resources)} for rp, resources in amounts.items()}


def test_assume_counts_an_own_claim_at_once():
    clock = Clock()
    kid = rec("k", gen=2, inv={"CUSTOM_NIC": Inventory(2)}, parent="a", root="a")
    view = loaded([rec("a", gen=5), rec("b", gen=7), kid], clock)
    assert view.known("a") == (5, 5)
    view.assume("c1", claim({"a": {"VCPU": 6}, "k": {"CUSTOM_NIC": 1}, "unknown": {"VCPU": 1}}))
    assert picked(view, q({"VCPU": 3})) == {"b"}
    assert picked(view, q({"VCPU": 2})) == {"a", "b"}
    summaries = view.candidates(q({"VCPU": 2})).candidates.provider_summaries
    assert summaries["a"]["resources"]["VCPU"]["used"] == 6
    assert summaries["k"]["resources"]["CUSTOM_NIC"]["used"] == 1
    # each claimed provider's generation is expected to have moved by one
    assert view.known("a") == (5, 6)
    assert view.known("k") == (2, 3)
    assert view.known("b") == (7, 7)
    assert view.known("unknown") is None
    view.assume("c2", claim({"a": {"VCPU": 1}}))
    assert view.known("a") == (5, 7)
    assert picked(view, q({"VCPU": 2})) == {"b"}
    # the read is what the feeds compare: own claims are not in these totals
    assert view.used_total == 0 and view.alloc_rows_total == 0


def test_claim_refusal_is_placements_check_of_a_put_allocations():
    # 8 VCPU at ratio 2.0 with 2 reserved: room for 12; 5 already used by someone else
    inv = {"VCPU": Inventory(8, reserved=2, step_size=1, max_unit=8, allocation_ratio=2.0)}
    view = loaded([rec("a", inv=inv, allocations={"other": {"VCPU": 5}})])
    assert view.claim_refusal("c1", claim({"a": {"VCPU": 7}})) is None
    view.assume("c1", claim({"a": {"VCPU": 7}}))
    # the view's own claims count: 12 used, nothing more fits
    assert "exceeds its capacity 12" in view.claim_refusal("c2", claim({"a": {"VCPU": 1}}))
    # a consumer's claim replaces its own, as PUT /allocations does
    assert view.claim_refusal("c1", claim({"a": {"VCPU": 6}})) is None
    assert "max_unit 8" in view.claim_refusal("c3", claim({"a": {"VCPU": 9}}))
    assert "no MEMORY_MB inventory" in view.claim_refusal("c3", claim({"a": {"MEMORY_MB": 1}}))
    assert "not found" in view.claim_refusal("c3", claim({"nowhere": {"VCPU": 1}}))
    stepped = loaded([rec("s", inv={"DISK_GB": Inventory(100, step_size=10)})])
    assert "step_size 10" in stepped.claim_refusal("c", claim({"s": {"DISK_GB": 15}}))
    assert stepped.claim_refusal("c", claim({"s": {"DISK_GB": 20}})) is None


def test_assume_does_not_count_twice_what_the_read_already_has():
    view = loaded([rec("a", gen=5, allocations={"c1": {"VCPU": 4}})])
    view.assume("c1", claim({"a": {"VCPU": 4}}))
    assert view.known("a") == (5, 5)
    assert picked(view, q({"VCPU": 4})) == {"a"}


def test_apply_drops_a_claim_the_read_includes():
    clock = Clock(1000.0)
    view = loaded([rec("a", gen=5)], clock)
    clock.now = 1001.0
    view.assume("c1", claim({"a": {"VCPU": 5}}))
    # a read that began before the claim was answered, yet already saw it
    view.apply([rec("a", gen=6, allocations={"c1": {"VCPU": 5}})], [], 1000.5)
    assert view.known("a") == (6, 6)
    assert picked(view, q({"VCPU": 3})) == {"a"}  # 5 used, not 10
    assert picked(view, q({"VCPU": 4})) == set()


def test_apply_keeps_a_claim_a_read_that_began_earlier_did_not_see():
    clock = Clock(1000.0)
    view = loaded([rec("a", gen=5)], clock)
    clock.now = 1001.0
    view.assume("c1", claim({"a": {"VCPU": 5}}))
    view.apply([rec("a", gen=6, allocations={"other": {"VCPU": 1}})], [], 1000.5)
    assert view.known("a") == (6, 7)
    assert picked(view, q({"VCPU": 2})) == {"a"}  # 1 + 5 used
    assert picked(view, q({"VCPU": 3})) == set()
    # a later read without it: the claim is gone from Placement (deleted by someone)
    clock.now = 1003.0
    view.apply([rec("a", gen=7, allocations={"other": {"VCPU": 1}})], [], 1002.0)
    assert view.known("a") == (7, 7)
    assert picked(view, q({"VCPU": 7})) == {"a"}


def test_replace_all_keeps_claims_younger_than_the_read_too():
    clock = Clock(1000.0)
    view = loaded([rec("a", gen=5), rec("b")], clock)
    clock.now = 1002.0
    view.assume("c1", claim({"a": {"VCPU": 8}}))
    view.replace_all([rec("a", gen=5), rec("b")], 1001.0)
    assert picked(view, q()) == {"b"}
    view.replace_all([rec("a", gen=6), rec("b")], 1003.0)
    assert picked(view, q()) == {"a", "b"}


def test_forget_uncounts_a_claim_the_read_does_not_have():
    clock = Clock(1000.0)
    view = loaded([rec("a", gen=5), rec("b", gen=1)], clock)
    view.assume("c1", claim({"a": {"VCPU": 8}, "b": {"VCPU": 8}}))
    assert picked(view, q()) == set()
    assert view.take_dirty() == set()
    view.changed.clear()
    view.forget("c1")
    assert picked(view, q()) == {"a", "b"}
    assert view.known("a") == (5, 5)
    assert view.take_dirty() == set()  # nothing to read again
    assert not view.changed.is_set()
    view.forget("c1")  # twice, or an unknown consumer: nothing happens
    view.forget("never")
    assert picked(view, q()) == {"a", "b"}


def test_forget_marks_dirty_the_providers_whose_read_includes_the_claim():
    clock = Clock(1000.0)
    view = loaded([rec("a", gen=5), rec("b", gen=1)], clock)
    clock.now = 1001.0
    view.assume("c1", claim({"a": {"VCPU": 8}, "b": {"VCPU": 8}}))
    # a's read already has the claim, b's does not
    view.apply([rec("a", gen=6, allocations={"c1": {"VCPU": 8}})], [], 1000.5)
    view.changed.clear()
    view.forget("c1")
    # the DELETE does not move a's generation: only reading it again tells the view
    assert view.changed.is_set()
    assert view.take_dirty() == {"a"}
    assert not view.changed.is_set()
    assert picked(view, q()) == {"b"}
    view.apply([rec("a", gen=6)], [], 1002.0)
    assert picked(view, q()) == {"a", "b"}


def test_mark_dirty_and_take_dirty():
    view = loaded([rec("a")])
    view.mark_dirty(["a", "", "b"])
    assert view.changed.is_set()
    view.apply([rec("a", gen=2)], [], 1000.0)  # a read of a satisfies its mark
    assert view.take_dirty() == {"b"}
    assert view.take_dirty() == set()
    view.mark_dirty(["b"])
    view.apply([], ["b"], 1000.0)  # and so does its removal
    assert view.take_dirty() == set()


# -- the indexes after changes ----------------------------------------------------------------
def test_indexes_follow_trait_aggregate_and_parent_changes_and_removals():
    both = {"VCPU": Inventory(8), "MEMORY_MB": Inventory(64)}
    view = loaded(
        [
            rec("a", inv=both, traits={"T1"}, aggs={"agg1"}),
            rec("b", traits={"T2"}, aggs={"agg2"}),
            rec("ak", inv={"CUSTOM_NIC": Inventory(1)}, parent="a", root="a"),
        ]
    )
    view.apply([rec("a", gen=2, inv=both, traits={"T2"}, aggs={"agg2"})], [], 1000.0)
    assert picked(view, q(required_traits={"T1"})) == set()
    assert picked(view, q(required_traits={"T2"})) == {"a", "b"}
    assert picked(view, q(member_of=[["agg1"]])) == set()
    assert picked(view, q(member_of=[["agg2"]])) == {"a", "b"}
    assert picked(view, q(forbidden_aggregates={"agg2"})) == set()
    assert set(view.candidates(q(in_tree="ak")).candidates.provider_summaries) == {"a", "ak"}
    # b becomes a child of a: no longer a candidate of its own, its VCPU is a's tree's now
    view.apply([rec("b", gen=2, traits={"T2"}, aggs={"agg2"}, parent="a", root="a")], [], 1000.0)
    assert answered(view, q()) == [
        {"allocations": {rp: {"resources": {"VCPU": 1}}}, "mappings": {"": [rp]}} for rp in "ab"
    ]
    assert picked(view, q({"MEMORY_MB": 1}, required_traits={"T2"})) == {"a"}
    assert picked(view, q({"MEMORY_MB": 1}, in_tree="b")) == {"a"}
    assert set(view.candidates(q({"MEMORY_MB": 1})).candidates.provider_summaries) == {
        "a",
        "ak",
        "b",
    }
    # b is a root again with other inventory; a's tree shrinks back
    view.apply([rec("b", gen=3, inv={"MEMORY_MB": Inventory(10)}, traits={"T3"})], [], 1000.0)
    assert picked(view, q(required_traits={"T2"})) == {"a"}
    assert picked(view, q({"MEMORY_MB": 1}, required_traits={"T3"})) == {"b"}
    assert picked(view, q({"MEMORY_MB": 1}, in_tree="b")) == {"b"}
    assert set(view.candidates(q(in_tree="a")).candidates.provider_summaries) == {"a", "ak"}
    # removals: the child leaves a's summaries, the root leaves the candidates and indexes
    view.apply([], ["ak"], 1000.0)
    assert set(view.candidates(q()).candidates.provider_summaries) == {"a"}
    assert picked(view, q(in_tree="ak")) == set()
    view.apply([], ["a"], 1000.0)
    assert picked(view, q(required_traits={"T2"})) == set()
    assert picked(view, q(member_of=[["agg2"]])) == set()
    assert view.record("a") is None and view.known("a") is None
    assert sorted(view.uuids()) == ["b"] and len(view) == 1
    # replace_all drops what the full read no longer has
    view.replace_all([rec("c", traits={"T2"})], 1000.0)
    assert picked(view, q({"VCPU": 1}, required_traits={"T2"})) == {"c"}
    assert picked(view, q({"MEMORY_MB": 1})) == set()
    assert view.uuids() == ["c"]


def test_alloc_rows_and_used_totals_follow_the_records():
    view = loaded(
        [
            rec(
                "a",
                inv={"VCPU": Inventory(8), "MEMORY_MB": Inventory(512)},
                allocations={"c1": {"VCPU": 2, "MEMORY_MB": 128}, "c2": {"VCPU": 1}},
            ),
            rec("b", allocations={"c3": {"VCPU": 4}}),
        ]
    )
    assert (view.alloc_rows_total, view.used_total) == (4, 135)
    view.apply([rec("a", gen=2, allocations={"c2": {"VCPU": 1}})], [], 1000.0)
    assert (view.alloc_rows_total, view.used_total) == (2, 5)
    view.apply([], ["b"], 1000.0)
    assert (view.alloc_rows_total, view.used_total) == (1, 1)
    view.apply([], ["b", "nope"], 1000.0)  # removing what is gone already changes nothing
    assert (view.alloc_rows_total, view.used_total) == (1, 1)
    view.replace_all([rec("d", allocations={"c9": {"VCPU": 3}, "c8": {"VCPU": 3}})], 1000.0)
    assert (view.alloc_rows_total, view.used_total) == (2, 6)
    view.replace_all([], 1000.0)
    assert (view.alloc_rows_total, view.used_total) == (0, 0)


# -- properties: a reference model, and incremental = fresh ------------------------------------
CLASSES = ("VCPU", "MEMORY_MB", "CUSTOM_W")
TRAITS = ("T0", "T1", "T2")
AGGS = ("g0", "g1", "g2")


@st.composite
def inventories(draw: st.DrawFn) -> Inventory:
    total = draw(st.integers(1, 12))
    min_unit = draw(st.integers(1, 3))
    return Inventory(
        total,
        draw(st.integers(0, total)),
        min_unit,
        draw(st.integers(min_unit, 14)),
        draw(st.integers(1, 3)),
        draw(st.sampled_from((0.5, 1.0, 1.5, 2.0, 4.0))),
    )


@st.composite
def fleets(draw: st.DrawFn) -> list[ProviderRecord]:
    records = []
    n = draw(st.integers(1, 5))
    for i in range(n):
        classes = draw(st.sets(st.sampled_from(CLASSES)))
        inv = {rc: draw(inventories()) for rc in sorted(classes)}
        allocations = {}
        for j, rc in enumerate(sorted(classes)):
            n_used = draw(st.integers(0, 14))
            if n_used:
                allocations[f"c{i}{j}"] = {rc: n_used}
        records.append(
            rec(
                f"r{i}",
                gen=draw(st.integers(1, 5)),
                inv=inv,
                allocations=allocations,
                traits=draw(st.sets(st.sampled_from(TRAITS))),
                aggs=draw(st.sets(st.sampled_from(AGGS))),
            )
        )
    for i in range(draw(st.integers(0, 2))):
        root = f"r{draw(st.integers(0, n - 1))}"
        records.append(
            rec(
                f"k{i}",
                inv={"CUSTOM_KID": Inventory(2)},
                traits=draw(st.sets(st.sampled_from(TRAITS))),
                aggs=draw(st.sets(st.sampled_from(AGGS))),
                parent=root,
                root=root,
            )
        )
    return records


@st.composite
def queries(draw: st.DrawFn) -> AllocationCandidatesQuery:
    some_traits = st.sets(st.sampled_from(TRAITS), max_size=2)
    required = draw(some_traits)
    root_required = draw(some_traits)
    return q(
        draw(st.dictionaries(st.sampled_from(CLASSES), st.integers(1, 12), min_size=1)),
        required_traits=required,
        forbidden_traits=draw(some_traits) - required,
        root_required=root_required,
        root_forbidden=draw(some_traits) - root_required,
        member_of=draw(st.lists(st.lists(st.sampled_from(AGGS), min_size=1), max_size=2)),
        forbidden_aggregates=draw(st.sets(st.sampled_from(AGGS), max_size=1)),
        in_tree=draw(st.one_of(st.none(), st.sampled_from(("r0", "r1", "k0", "nope")))),
    )


def reference(records: list[ProviderRecord], query: AllocationCandidatesQuery) -> set[str]:
    """Placement's rules for one unsuffixed group of root-only classes, written out."""
    group = query.groups[0]
    by_uuid = {r.uuid: r for r in records}
    found = set()
    for r in records:
        if not r.is_root:
            continue
        fits = True
        for rc, n in group.resources.items():
            inv = r.inventories.get(rc)
            fits = fits and (
                inv is not None
                and r.used.get(rc, 0) + n <= (inv.total - inv.reserved) * inv.allocation_ratio
                and inv.min_unit <= n <= inv.max_unit
                and n % inv.step_size == 0
            )
        traits_ok = (group.required_traits | query.root_required) <= r.traits and not (
            (group.forbidden_traits | query.root_forbidden) & r.traits
        )
        aggs_ok = all(set(s) & r.aggregates for s in group.member_of) and not (
            group.forbidden_aggregates & r.aggregates
        )
        tree_ok = group.in_tree is None or (
            group.in_tree in by_uuid and by_uuid[group.in_tree].root_uuid == r.uuid
        )
        if fits and traits_ok and aggs_ok and tree_ok:
            found.add(r.uuid)
    return found


@settings(max_examples=200, deadline=None)
@given(records=fleets(), query=queries())
def test_the_view_follows_placements_rules(records, query):
    view = loaded(records)
    answer = view.candidates(query)
    expected = reference(records, query)
    assert answer.candidates is not None, answer.reason
    assert picked(view, query) == expected
    assert answer.matched == len(expected)
    summaries = answer.candidates.provider_summaries
    assert set(summaries) == {r.uuid for r in records if r.root_uuid in expected}
    for r in records:
        if r.uuid in summaries:
            assert summaries[r.uuid]["resources"] == {
                rc: {"capacity": inv.capacity, "used": r.used.get(rc, 0)}
                for rc, inv in r.inventories.items()
            }
            assert summaries[r.uuid]["traits"] == sorted(r.traits)


@settings(max_examples=200, deadline=None)
@given(records=fleets(), query=queries())
def test_the_search_over_trees_answers_flat_queries_as_the_scan_of_roots(records, query):
    """The two paths agree where both apply: the scan the view takes for one unsuffixed
    group of root-only classes, and the search over trees it takes for everything else."""
    view = loaded(records)
    scanned = view.candidates(query)
    searched, found = TreeSearch(view, query, SearchOptions()).run()
    assert found == scanned.matched
    assert sorted(map(str, searched.allocation_requests)) == sorted(
        map(str, scanned.candidates.allocation_requests)
    )
    assert searched.provider_summaries == scanned.candidates.provider_summaries


REMOVABLE = st.sets(st.sampled_from(("r0", "r1", "r3", "k0")))


@settings(max_examples=120, deadline=None)
@given(
    first=fleets(),
    steps=st.lists(st.tuples(fleets(), REMOVABLE), max_size=4),
    checks=st.lists(queries(), min_size=1, max_size=4),
)
def test_a_view_changed_by_apply_answers_as_a_fresh_one(first, steps, checks):
    """apply() of changed providers (traits, aggregates, parents, inventories) and removals
    leaves the indexes and totals exactly as a full read of the final state would."""
    view = loaded(first)
    final = {r.uuid: r for r in first}
    for changed, removed in steps:
        gone = {u for u in removed if u not in {r.uuid for r in changed}}
        view.apply(changed, gone, 1000.0)
        for u in gone:
            final.pop(u, None)
        final.update({r.uuid: r for r in changed})
    fresh = loaded(list(final.values()))
    totals = (
        sum(r.alloc_rows for r in final.values()),
        sum(r.used_total for r in final.values()),
    )
    assert (view.alloc_rows_total, view.used_total) == totals
    assert (fresh.alloc_rows_total, fresh.used_total) == totals
    assert sorted(view.uuids()) == sorted(final)
    probes = [*checks, q({"CUSTOM_KID": 1})]
    for query in probes:
        a, b = view.candidates(query), fresh.candidates(query)
        assert (a.candidates is None) == (b.candidates is None), (a.reason, b.reason)
        if a.candidates is not None:
            assert a.matched == b.matched
            assert sorted(map(repr, a.candidates.allocation_requests)) == sorted(
                map(repr, b.candidates.allocation_requests)
            )
            assert a.candidates.provider_summaries == b.candidates.provider_summaries


def test_a_mark_made_after_the_read_began_survives_the_read():
    clock = Clock(1000.0)
    view = loaded([rec("a")], clock)
    clock.now = 1005.0
    view.mark_dirty(["a"])  # e.g. a rollback while a refresh that began at 1002 was reading
    view.apply([rec("a", gen=2)], [], 1002.0)
    assert view.take_dirty() == {"a"}


def test_a_claim_by_a_consumer_the_read_holds_marks_the_provider_dirty():
    view = loaded([rec("a", allocations={"inst": {"VCPU": 2}})])
    view.take_dirty()
    view.assume("inst", {"a": {"resources": {"VCPU": 4}}})  # a resize on the same host
    assert view.take_dirty() == {"a"}


def test_a_query_too_wide_to_examine_is_left_to_placement(monkeypatch):
    from placement_client.view import search

    monkeypatch.setattr(search, "MAX_EXAMINED", 6)
    view = loaded(host("a"))
    # two devices asked with isolate: each combination of one device per group is examined
    # (2 for the first group, 2 x 2 with the second: 6 steps)
    two = [
        QueryGroup(suffix="_PCI1", resources={"CUSTOM_PCI_X": 1}),
        QueryGroup(suffix="_PCI2", resources={"CUSTOM_PCI_X": 1}),
    ]
    assert len(answered(view, ask(*two, group_policy="isolate"))) == 2
    three = [*two, QueryGroup(suffix="_BW", resources={"NET_BW_EGR_KILOBIT_PER_SEC": 1})]
    three.append(QueryGroup(suffix="_PCI3", resources={"CUSTOM_PCI_X": 1}))
    assert "more than 6 combinations" in declined(view, ask(*three, group_policy="isolate"))


def test_the_summaries_of_an_answer_hold_its_trees_only():
    view = loaded([*host("a"), *host("b")])
    pci = QueryGroup(suffix="_PCI", resources={"CUSTOM_PCI_X": 1})
    answer = view.candidates(
        ask(QueryGroup(resources={"VCPU": 1}, in_tree="a"), pci, group_policy="none")
    )
    summaries = answer.candidates.provider_summaries
    assert set(summaries) == {r.uuid for r in host("a")}
    assert "a-pci0" in summaries and "b" not in summaries and "b-pci0" not in summaries
    with pytest.raises(KeyError):
        summaries["b"]
    assert summaries["a-pci0"]["parent_provider_uuid"] == "a"
    assert len(summaries) == 5 and dict(summaries) == {rp: summaries[rp] for rp in summaries}
