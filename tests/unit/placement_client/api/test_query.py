from __future__ import annotations

from urllib.parse import parse_qsl, unquote

from hypothesis import given
from hypothesis import strategies as st

from placement_client.api.query import AllocationCandidatesQuery, QueryGroup


def _qs(query: AllocationCandidatesQuery) -> str:
    return unquote(query.to_querystring())


def test_nova_default_query_string():
    query = AllocationCandidatesQuery(
        [QueryGroup(resources={"VCPU": 1, "MEMORY_MB": 2048, "DISK_GB": 20})],
        limit=1000,
        root_forbidden={"COMPUTE_STATUS_DISABLED"},
    )
    assert query.to_querystring() == (
        "limit=1000&resources=DISK_GB%3A20%2CMEMORY_MB%3A2048%2CVCPU%3A1"
        "&root_required=%21COMPUTE_STATUS_DISABLED"
    )
    assert _qs(query) == (
        "limit=1000&resources=DISK_GB:20,MEMORY_MB:2048,VCPU:1"
        "&root_required=!COMPUTE_STATUS_DISABLED"
    )


def test_zero_amounts_are_dropped():
    query = AllocationCandidatesQuery([QueryGroup(resources={"VCPU": 1, "DISK_GB": 0})])
    assert _qs(query) == "resources=VCPU:1"


def test_traits_required_then_forbidden_each_sorted():
    group = QueryGroup(
        resources={"VCPU": 1},
        required_traits={"HW_CPU_X86_AVX2", "CUSTOM_SSD"},
        forbidden_traits={"CUSTOM_Z", "CUSTOM_A"},
    )
    assert _qs(AllocationCandidatesQuery([group])) == (
        "required=CUSTOM_SSD,HW_CPU_X86_AVX2,!CUSTOM_A,!CUSTOM_Z&resources=VCPU:1"
    )


def test_member_of_one_pair_per_or_set_and_forbidden_aggregates():
    group = QueryGroup(
        resources={"VCPU": 1},
        member_of=[["b", "a"], ["c"]],
        forbidden_aggregates={"y", "x"},
    )
    params = AllocationCandidatesQuery([group]).to_params()
    assert [v for k, v in params if k == "member_of"] == ["!in:x,y", "in:a,b", "in:c"]


def test_granular_groups_policy_root_required_same_subtree_and_in_tree():
    query = AllocationCandidatesQuery(
        [
            QueryGroup(resources={"VCPU": 2}, in_tree="rp-1"),
            QueryGroup(suffix="1", resources={"DISK_GB": 5}, required_traits={"CUSTOM_SSD"}),
            QueryGroup(suffix="_NIC", resources={"CUSTOM_BW": 10}),
            QueryGroup(suffix="_ACC"),  # resourceless, kept: same_subtree names it
            QueryGroup(suffix="_GONE"),  # resourceless, dropped
        ],
        limit=50,
        group_policy="isolate",
        root_required={"HW_X", "A_T"},
        root_forbidden={"COMPUTE_STATUS_DISABLED"},
        same_subtree=[["_NIC", "_ACC"]],
    )
    assert _qs(query) == (
        "group_policy=isolate&in_tree=rp-1&limit=50&required1=CUSTOM_SSD"
        "&resources=VCPU:2&resources1=DISK_GB:5&resources_NIC=CUSTOM_BW:10"
        "&root_required=A_T,HW_X,!COMPUTE_STATUS_DISABLED&same_subtree=_ACC,_NIC"
    )
    assert [g.suffix for g in query.effective_groups()] == ["", "1", "_NIC", "_ACC"]


def test_group_without_resources_but_with_traits_is_kept():
    query = AllocationCandidatesQuery(
        [QueryGroup(resources={"VCPU": 1}), QueryGroup(suffix="2", required_traits={"T"})]
    )
    assert ("required2", "T") in query.to_params()


def test_describe_reads_like_an_operator_would():
    query = AllocationCandidatesQuery(
        [
            QueryGroup(
                resources={"MEMORY_MB": 512, "VCPU": 1, "DISK_GB": 0},
                required_traits={"CUSTOM_SSD"},
                member_of=[["agg-1"]],
            ),
            QueryGroup(suffix="1", resources={"CUSTOM_GPU": 1}),
        ],
        limit=1000,
        root_forbidden={"COMPUTE_STATUS_DISABLED"},
    )
    assert query.describe() == (
        "resources=VCPU:1,MEMORY_MB:512 required=CUSTOM_SSD member_of=in:agg-1; "
        "group 1: resources=CUSTOM_GPU:1; root_required=!COMPUTE_STATUS_DISABLED; limit=1000"
    )


def test_group_lookup_creates_once():
    query = AllocationCandidatesQuery()
    assert query.group("1") is query.group("1")
    assert len(query.groups) == 1


_names = st.from_regex(r"[A-Z][A-Z0-9_]{0,10}", fullmatch=True)


@given(
    resources=st.dictionaries(_names, st.integers(min_value=0, max_value=10**6), max_size=5),
    required=st.sets(_names, max_size=4),
    limit=st.none() | st.integers(min_value=1, max_value=5000),
)
def test_querystring_round_trips_and_is_sorted(resources, required, limit):
    query = AllocationCandidatesQuery(
        [QueryGroup(resources=resources, required_traits=required)], limit=limit
    )
    pairs = parse_qsl(query.to_querystring())
    assert pairs == sorted(pairs)
    decoded = dict(pairs)
    expected = {rc: n for rc, n in resources.items() if n}
    if expected or required:
        got = dict(
            (item.split(":")[0], int(item.split(":")[1]))
            for item in decoded.get("resources", "").split(",")
            if item
        )
        assert got == expected
        assert set(filter(None, decoded.get("required", "").split(","))) == required
    else:
        assert "resources" not in decoded and "required" not in decoded
    assert decoded.get("limit") == (str(limit) if limit is not None else None)


def test_a_group_of_aggregates_alone_is_not_empty_but_in_tree_alone_is():
    # nova's RequestGroup.is_empty: member_of and forbidden aggregates count, in_tree does not
    assert not QueryGroup(member_of=[["agg-1", "agg-2"]]).is_empty()
    assert not QueryGroup(forbidden_aggregates={"agg-3"}).is_empty()
    assert QueryGroup(in_tree="rp-1", resources={"VCPU": 0}).is_empty()
    query = AllocationCandidatesQuery(
        [QueryGroup(resources={"VCPU": 1}), QueryGroup(suffix="1", member_of=[["agg-1"]])]
    )
    # on the wire as nova sends it (Placement then judges a resourceless granular group)
    assert [g.suffix for g in query.effective_groups()] == ["", "1"]
    assert "member_of1=in:agg-1" in _qs(query)
