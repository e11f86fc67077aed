"""The provider view answers allocation-candidate queries exactly as the real Placement does.

Property-based: every example builds random resource providers through Placement's API
(inventories with random reserved, min_unit, max_unit, step_size and allocation ratios exact
in binary, custom and standard traits, aggregates, child providers, a sharing provider now
and then) and random usage made of real claims; then it loads a fresh ``ProviderView`` with
``ApiFeed`` and asks both the view and Placement the same random queries of one unsuffixed
group. The two answers must be equal (allocation requests as a set, summaries with their
traits as sets). Request groups, same_subtree and deeper trees are compared in
tests/differential/test_placement_trees.py.

The module runs its own Placement (gunicorn on a fresh SQLite file) so that "the whole
Placement" is exactly what the examples made: each example starts from an empty Placement
(asserted) and deletes its consumers' allocations and its providers at the end. Providers
left over by other test modules in the session-wide Placement would make the comparison
depend on the order the modules run in.
"""

from __future__ import annotations

import copy
import json
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement_client.api import (
    AllocationCandidates,
    AllocationCandidatesQuery,
    PlacementClient,
    QueryGroup,
)
from placement_client.view import ApiFeed, ProviderView
from scheduler.demo.embedded_placement import EmbeddedPlacement
from tests.hunt import examples
from tests.placement_world import BuiltWorld, Inv

PROJECT = "p-" + uuid.uuid4().hex[:8]
USER = "u-" + uuid.uuid4().hex[:8]

CUSTOM_CLASS = "CUSTOM_PVE_WIDGET"
ROOT_CLASSES = ("VCPU", "PCPU", "MEMORY_MB", "DISK_GB", CUSTOM_CLASS)
# a class only child providers ever have
CHILD_CLASS = "CUSTOM_PVE_CHILD"
TRAITS = (
    "CUSTOM_PVE_T0",
    "CUSTOM_PVE_T1",
    "CUSTOM_PVE_T2",
    "HW_CPU_X86_AVX2",
    "COMPUTE_STATUS_DISABLED",
)
# exists in Placement (so a query naming it is valid) but no provider ever has it
UNUSED_TRAIT = "CUSTOM_PVE_ON_NO_PROVIDER"
SHARING_TRAIT = "MISC_SHARES_VIA_AGGREGATE"
RATIOS = (0.5, 1.0, 1.5, 2.0, 4.0, 16.0)  # exact in binary
AGGREGATES = 4  # aggregate indices 0..3; providers only get 0..2, so 3 is on no provider
# worlds built in Placement per run (each is a few hundred API calls); more when hunting
EXAMPLES = examples(12)


# -- the service ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def client() -> Iterator[PlacementClient]:
    with tempfile.TemporaryDirectory(prefix="novasched-view-eq-") as tmp:
        service = EmbeddedPlacement(f"sqlite:///{Path(tmp) / 'placement.sqlite'}", mode="process")
        with service:
            placement = PlacementClient(service.url, claim_retries=4, retry_backoff=0.01)
            placement.ensure_traits([*TRAITS, UNUSED_TRAIT])
            placement.ensure_resource_classes([CUSTOM_CLASS, CHILD_CLASS])
            yield placement


# -- comparing answers ------------------------------------------------------------------------
def _canonical_requests(answer: AllocationCandidates) -> set[str]:
    """Each allocation request as a string; a group's ``mappings`` as a set, since Placement
    keeps them in a Python set and so lists them in whatever order that set has."""
    return {
        json.dumps(
            {**ar, "mappings": {s: sorted(rps) for s, rps in ar.get("mappings", {}).items()}},
            sort_keys=True,
        )
        for ar in answer.allocation_requests
    }


def _canonical_summaries(answer: AllocationCandidates) -> dict[str, dict[str, Any]]:
    return {
        rp: {**summary, "traits": set(summary["traits"])}
        for rp, summary in answer.provider_summaries.items()
    }


def _placement(client: PlacementClient, query: AllocationCandidatesQuery) -> AllocationCandidates:
    unlimited = copy.deepcopy(query)
    unlimited.limit = None
    return client.get_allocation_candidates(unlimited)


def _assert_view_equals_placement(
    view: ProviderView, client: PlacementClient, query: AllocationCandidatesQuery
) -> AllocationCandidates:
    """The view's answer to ``query`` (without a limit) equals Placement's; returns it."""
    query = copy.deepcopy(query)
    query.limit = None
    got = view.candidates(query)
    assert got.candidates is not None, f"{query.to_querystring()}: the view declined: {got.reason}"
    expected = _placement(client, query)
    qs = query.to_querystring()
    assert _canonical_requests(got.candidates) == _canonical_requests(expected), qs
    assert _canonical_summaries(got.candidates) == _canonical_summaries(expected), qs
    assert got.matched == len(expected.allocation_requests), qs
    return expected


def _load(client: PlacementClient, **feed_kw: Any) -> tuple[ProviderView, ApiFeed]:
    view = ProviderView(max_age=3600.0)
    feed = ApiFeed(client, threads=4, **feed_kw)
    feed.load(view)
    return view, feed


# -- the random world -------------------------------------------------------------------------
@dataclass
class Rp:
    parent: int | None  # index of the parent in World.rps
    inventories: dict[str, Inv]
    traits: set[str]
    aggregates: set[int]
    uuid: str = field(default_factory=lambda: str(uuid.uuid4()))


@dataclass
class World:
    rps: list[Rp]
    # each consumer: [(provider pick, class pick, amount pick)]
    consumers: list[list[tuple[int, int, int]]]
    # providers whose totals are halved after the claims (Placement lets usage exceed them)
    shrunk: list[int] = field(default_factory=list)

    def root_of(self, index: int) -> int:
        while self.rps[index].parent is not None:
            index = self.rps[index].parent
        return index

    def nested_classes(self) -> set[str]:
        return {rc for rp in self.rps if rp.parent is not None for rc in rp.inventories}

    def shared_classes(self) -> set[str]:
        return {rc for rp in self.rps if SHARING_TRAIT in rp.traits for rc in rp.inventories}


@st.composite
def inventories(draw: st.DrawFn) -> Inv:
    # (sampled_from draws uniformly, so repeated values weigh more)
    total = draw(st.integers(1, 40))
    reserved = draw(st.one_of(st.just(0), st.integers(0, total)))
    min_unit = draw(st.sampled_from((1, 1, 1, 2, 4)))
    max_unit = draw(st.one_of(st.none(), st.integers(min_unit, total + 4)))
    step_size = draw(st.sampled_from((1, 1, 1, 2, 3)))
    ratio = draw(st.sampled_from(RATIOS))
    return Inv(total, reserved, min_unit, max_unit, step_size, ratio)


@st.composite
def worlds(draw: st.DrawFn) -> World:
    rps: list[Rp] = []
    for _ in range(draw(st.integers(2, 6))):
        missing = draw(st.sets(st.sampled_from(ROOT_CLASSES), max_size=len(ROOT_CLASSES)))
        if len(missing) > 2:  # most roots have most classes; now and then none at all
            missing = set(ROOT_CLASSES) if draw(st.integers(0, 3)) == 0 else set()
        rps.append(
            Rp(
                None,
                {rc: draw(inventories()) for rc in sorted(set(ROOT_CLASSES) - missing)},
                draw(st.sets(st.sampled_from(TRAITS), max_size=3)),
                draw(st.sets(st.integers(0, AGGREGATES - 2), max_size=2)),
            )
        )
    if draw(st.integers(0, 4)) == 0:  # now and then a root that shares one class
        rc = draw(st.sampled_from(("DISK_GB", CUSTOM_CLASS)))
        rps.append(Rp(None, {rc: draw(inventories())}, {SHARING_TRAIT}, {0}))
    for _ in range(draw(st.integers(0, 3))):
        parent = draw(st.integers(0, len(rps) - 1))  # a root or an earlier child
        root = rps[World(rps, []).root_of(parent)]
        # a class the tree's root does not have (mostly one no root ever has); now and
        # then no inventory at all
        others = [rc for rc in ROOT_CLASSES if rc not in root.inventories]
        rc = draw(st.sampled_from([CHILD_CLASS] * 3 + others + [None]))
        rps.append(
            Rp(
                parent,
                {rc: draw(inventories())} if rc else {},
                draw(st.sets(st.sampled_from(TRAITS), max_size=2)),
                draw(st.sets(st.integers(0, AGGREGATES - 2), max_size=1)),
            )
        )
    part = st.tuples(st.integers(0, 63), st.integers(0, 7), st.integers(0, 63))
    consumers = draw(st.lists(st.lists(part, min_size=1, max_size=2), max_size=6))
    return World(rps, consumers, draw(st.lists(st.integers(0, 63), max_size=2)))


@dataclass
class Ask:
    """One random query of the view's shapes (aggregates by index, in_tree by provider
    index or "missing")."""

    resources: dict[str, int]
    required: set[str] = field(default_factory=set)
    forbidden: set[str] = field(default_factory=set)
    root_required: set[str] = field(default_factory=set)
    root_forbidden: set[str] = field(default_factory=set)
    member_of: list[set[int]] = field(default_factory=list)
    forbidden_aggregates: set[int] = field(default_factory=set)
    in_tree: int | str | None = None


FILTERS = (
    "required",
    "forbidden",
    "root_required",
    "root_forbidden",
    "member_of",
    "forbidden_aggregates",
    "in_tree",
)


@st.composite
def asks(draw: st.DrawFn) -> Ask:
    """Resources of root classes and up to three of the other filters."""
    resources = draw(
        st.dictionaries(st.sampled_from(ROOT_CLASSES), st.integers(1, 8), min_size=1, max_size=2)
    )
    ask = Ask(resources)
    any_trait = st.sampled_from((*TRAITS, UNUSED_TRAIT))
    aggregate = st.integers(0, AGGREGATES - 1)
    for name in sorted(draw(st.sets(st.sampled_from(FILTERS), max_size=3))):
        if name == "required":
            ask.required = draw(st.sets(any_trait, min_size=1, max_size=2))
        elif name == "forbidden":
            ask.forbidden = draw(st.sets(st.sampled_from(TRAITS), min_size=1, max_size=2))
        elif name == "root_required":
            ask.root_required = {draw(any_trait)}
        elif name == "root_forbidden":
            ask.root_forbidden = {draw(st.sampled_from(TRAITS))}
        elif name == "member_of":
            ask.member_of = draw(
                st.lists(st.sets(aggregate, min_size=1, max_size=2), min_size=1, max_size=2)
            )
        elif name == "forbidden_aggregates":
            ask.forbidden_aggregates = {draw(aggregate)}
        else:
            ask.in_tree = draw(st.one_of(st.integers(0, 7), st.just("missing")))
    # Placement refuses a trait both required and forbidden in one parameter (400)
    ask.forbidden -= ask.required
    ask.root_forbidden -= ask.root_required
    return ask


class Built(BuiltWorld):
    """A world made real in Placement: its providers, aggregates and consumers."""

    def __init__(self, client: PlacementClient, world: World):
        super().__init__(
            client,
            world.rps,
            aggregates=AGGREGATES,
            name=lambda rp: "pve-" + rp.uuid[:8],
            project=PROJECT,
            user=USER,
        )
        self.world = world

    def build(self) -> None:
        self.create_providers()
        self.claim(self.world.consumers)
        for pick in self.world.shrunk:
            rp = self.world.rps[pick % len(self.world.rps)]
            halved = {}
            for rc, inv in rp.inventories.items():
                total = max(1, inv.total // 2)
                halved[rc] = replace(inv, total=total, reserved=min(inv.reserved, total)).body()
            self.client.set_inventories(rp.uuid, halved)

    def query(self, ask: Ask) -> AllocationCandidatesQuery:
        in_tree = None
        if ask.in_tree == "missing":
            in_tree = str(uuid.uuid4())
        elif ask.in_tree is not None:
            in_tree = self.world.rps[int(ask.in_tree) % len(self.world.rps)].uuid
        group = QueryGroup(
            resources=dict(ask.resources),
            required_traits=set(ask.required),
            forbidden_traits=set(ask.forbidden),
            member_of=[sorted(self.aggregates[a] for a in s) for s in ask.member_of],
            forbidden_aggregates={self.aggregates[a] for a in ask.forbidden_aggregates},
            in_tree=in_tree,
        )
        return AllocationCandidatesQuery(
            [group], root_required=set(ask.root_required), root_forbidden=set(ask.root_forbidden)
        )


def _one_filter_asks(world: World, resources: dict[str, int]) -> list[Ask]:
    """Every filter alone, on every trait, aggregate and provider of the world: the random
    asks combine filters, these make sure each one meets every value."""
    found = [Ask(resources, required={UNUSED_TRAIT}), Ask(resources, root_required={UNUSED_TRAIT})]
    for t in TRAITS:
        found += [
            Ask(resources, required={t}),
            Ask(resources, forbidden={t}),
            Ask(resources, root_required={t}),
            Ask(resources, root_forbidden={t}),
        ]
    for a in range(AGGREGATES):
        found += [Ask(resources, member_of=[{a}]), Ask(resources, forbidden_aggregates={a})]
    found += [Ask(resources, in_tree=i) for i in range(len(world.rps))]
    return found


# -- the property -----------------------------------------------------------------------------
def test_view_answers_exactly_as_placement(client: PlacementClient) -> None:
    stats: Counter[str] = Counter()

    @settings(
        deadline=None,
        max_examples=EXAMPLES,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(world=worlds(), ask_list=st.lists(asks(), min_size=3, max_size=5))
    def example(world: World, ask_list: list[Ask]) -> None:
        assert client.list_providers() == [], "an earlier example left providers behind"
        built = Built(client, world)
        try:
            built.build()
            view, feed = _load(client)
            try:
                assert len(view) == len(world.rps)
                refused = world.nested_classes() | world.shared_classes()
                sweep = dict.fromkeys(ROOT_CLASSES, 1)
                for rc in refused:
                    sweep.pop(rc, None)
                for ask in _one_filter_asks(world, {rc: 1 for rc in list(sweep)[:2]}):
                    if ask.resources:
                        _assert_view_equals_placement(view, client, built.query(ask))
                        stats["compared one filter"] += 1
                for ask in ask_list:
                    query = built.query(ask)
                    # (a class also on a child or a sharing provider takes the search over
                    # trees: tests/differential/test_placement_trees.py)
                    stats["on trees"] += bool(refused & set(ask.resources))
                    expected = _assert_view_equals_placement(view, client, query)
                    stats["compared"] += 1
                    stats["compared non-empty"] += bool(expected.allocation_requests)
            finally:
                feed.close()
        finally:
            built.clean()

    started = time.monotonic()
    example()
    # the property was not vacuous: most queries were answered and compared, many non-empty
    assert stats["compared"] >= EXAMPLES, stats
    assert stats["compared non-empty"] >= EXAMPLES // 4, stats
    print(f"{EXAMPLES} examples in {time.monotonic() - started:.1f} s: {dict(stats)}")


# -- fixed cases ------------------------------------------------------------------------------
def _roots(client: PlacementClient, count: int, **kw: Any) -> list[str]:
    rps = [str(uuid.uuid4()) for _ in range(count)]
    for rp in rps:
        client.create_provider(rp, "pve-" + rp[:8], **kw)
    return rps


def _delete(client: PlacementClient, consumers: list[str], rps: list[str]) -> None:
    for consumer in consumers:
        client.delete_allocation_for_instance(consumer)
    for rp in rps:
        client.delete_provider(rp)


def _vcpu_query(n: int = 1, **group_kw: Any) -> AllocationCandidatesQuery:
    return AllocationCandidatesQuery([QueryGroup(resources={"VCPU": n}, **group_kw)])


def test_a_trait_on_no_provider_gives_no_candidates_in_both(client: PlacementClient) -> None:
    rps = _roots(client, 2, inventories={"VCPU": 8}, traits=[TRAITS[0]])
    try:
        view, feed = _load(client)
        feed.close()
        for query in (
            _vcpu_query(required_traits={UNUSED_TRAIT}),
            AllocationCandidatesQuery(
                [QueryGroup(resources={"VCPU": 1})], root_required={UNUSED_TRAIT}
            ),
        ):
            expected = _assert_view_equals_placement(view, client, query)
            assert expected.allocation_requests == [] and expected.provider_summaries == {}
        # the same query without the trait does find both (the trait is what excluded them)
        assert _assert_view_equals_placement(view, client, _vcpu_query()).allocation_requests
    finally:
        _delete(client, [], rps)


def test_limit_samples_among_placements_answer(client: PlacementClient) -> None:
    rps = _roots(client, 7, inventories={"VCPU": 4, "MEMORY_MB": 1024})
    child = str(uuid.uuid4())
    client.create_provider(
        child, "pve-child", inventories={CHILD_CLASS: 2}, parent_provider_uuid=rps[0]
    )
    full = _roots(client, 2, inventories={"VCPU": 4, "MEMORY_MB": 1024})
    consumers = []
    for rp in full:  # these two have no room left for the query
        consumer = str(uuid.uuid4())
        client.claim_resources(
            consumer, {"allocations": {rp: {"resources": {"VCPU": 4}}}}, PROJECT, USER
        )
        consumers.append(consumer)
    try:
        view, feed = _load(client)
        feed.close()
        query = AllocationCandidatesQuery([QueryGroup(resources={"VCPU": 2, "MEMORY_MB": 512})])
        unlimited = _assert_view_equals_placement(view, client, query)
        assert len(unlimited.allocation_requests) == len(rps)
        all_requests = _canonical_requests(unlimited)
        all_summaries = _canonical_summaries(unlimited)
        seen: set[str] = set()
        for limit in (1, 3, 3, 3, 6):
            query.limit = limit
            got = view.candidates(query)
            assert got.candidates is not None, got.reason
            assert got.matched == len(rps)
            requests = _canonical_requests(got.candidates)
            assert len(got.candidates.allocation_requests) == limit == len(requests)
            assert requests <= all_requests
            picked = {rp for ar in got.candidates.allocation_requests for rp in ar["allocations"]}
            # summaries: the picked roots and their trees, each as Placement reports it
            trees = picked | ({child} if rps[0] in picked else set())
            summaries = _canonical_summaries(got.candidates)
            assert set(summaries) == trees
            assert all(summaries[rp] == all_summaries[rp] for rp in trees)
            seen |= picked
            # Placement's own limited answer has the same size
            assert len(client.get_allocation_candidates(query).allocation_requests) == limit
        assert len(seen) > 3  # the samples are not always the same providers
        # a limit at or above the count returns every candidate
        query.limit = len(rps)
        assert _canonical_requests(view.candidates(query).candidates) == all_requests
    finally:
        _delete(client, consumers, [child, *rps, *full])


REFRESH_QUERIES = (
    _vcpu_query(),
    _vcpu_query(3),
    _vcpu_query(required_traits={TRAITS[0]}),
    _vcpu_query(forbidden_traits={TRAITS[1]}),
    AllocationCandidatesQuery([QueryGroup(resources={"VCPU": 1, "MEMORY_MB": 1024})]),
    AllocationCandidatesQuery([QueryGroup(resources={CUSTOM_CLASS: 2})]),
)


def test_poll_follows_changes_made_by_someone_else(client: PlacementClient) -> None:
    agg_a, agg_b = str(uuid.uuid4()), str(uuid.uuid4())
    inv = {"VCPU": 8, "MEMORY_MB": 4096, CUSTOM_CLASS: 4}
    a, b, c, d, e = _roots(client, 5, inventories=inv, traits=[TRAITS[0]], aggregates=[agg_a])
    kid_a, kid_b = str(uuid.uuid4()), str(uuid.uuid4())
    client.create_provider(kid_a, "pve-kid-a", inventories={CHILD_CLASS: 4}, parent_provider_uuid=a)
    client.create_provider(kid_b, "pve-kid-b", inventories={CHILD_CLASS: 4}, parent_provider_uuid=b)
    providers = [kid_a, kid_b, a, b, c, d, e]
    consumers = [str(uuid.uuid4()) for _ in range(4)]
    queries = [
        *REFRESH_QUERIES,
        _vcpu_query(member_of=[[agg_a]]),
        _vcpu_query(member_of=[[agg_b]]),
        _vcpu_query(member_of=[[agg_a, agg_b]], forbidden_aggregates={agg_b}),
        _vcpu_query(in_tree=kid_a),
    ]

    def assert_equal(view: ProviderView) -> None:
        for query in queries:
            _assert_view_equals_placement(view, client, query)

    try:
        # the sweep is off: only generations and mark_dirty tell the view what to read
        view, feed = _load(client, sweep_period=0)
        try:
            assert_equal(view)
            # someone else: a claim (on a root and its child), an inventory change, a trait
            # change, an aggregate change, a deleted child and a deleted root
            client.claim_resources(
                consumers[0],
                {
                    "allocations": {
                        a: {"resources": {"VCPU": 6, "MEMORY_MB": 1024}},
                        kid_a: {"resources": {CHILD_CLASS: 3}},
                    }
                },
                PROJECT,
                USER,
            )
            # below a's usage: Placement takes it, and reports used above capacity
            client.set_inventories(a, {"VCPU": 4, "MEMORY_MB": 4096, CUSTOM_CLASS: 4})
            client.set_inventories(
                b, {"VCPU": {"total": 2, "allocation_ratio": 1.5}, "MEMORY_MB": 4096}
            )
            client.set_traits(c, [TRAITS[1]])
            client.set_aggregates(d, [agg_b])
            client.delete_provider(kid_b)
            client.delete_provider(e)
            providers = [kid_a, a, b, c, d]
            assert view.candidates(_vcpu_query(3)).matched == 5  # not seen yet
            assert feed.poll(view) == 5  # a, kid_a, b, c, d read again
            assert len(view) == 5
            assert_equal(view)
            summary = view.candidates(queries[5]).candidates.provider_summaries[a]
            assert summary["resources"]["VCPU"] == {"capacity": 4, "used": 6}

            # our own claim, assumed at once: equal before any poll, and the poll after it
            # does not read the provider again (its generation is the one expected)
            own = {c: {"resources": {"VCPU": 5}}}
            client.claim_resources(consumers[1], {"allocations": own}, PROJECT, USER)
            view.assume(consumers[1], own)
            assert_equal(view)
            assert feed.poll(view) == 0
            assert_equal(view)

            # a DELETE of a consumer's allocations leaves the generation as it was: a poll
            # does not see it, a poll after mark_dirty does
            client.claim_resources(
                consumers[2], {"allocations": {d: {"resources": {"VCPU": 7}}}}, PROJECT, USER
            )
            assert feed.poll(view) == 1
            assert_equal(view)
            assert client.delete_allocation_for_instance(consumers[2])
            assert feed.poll(view) == 0
            assert view.record(d).used == {"VCPU": 7}  # still counted: the view can't know
            stale = view.candidates(_vcpu_query(2)).candidates
            assert d not in stale.provider_summaries
            view.mark_dirty([d])
            assert feed.poll(view) == 1
            assert view.record(d).used == {}
            assert_equal(view)
        finally:
            feed.close()
    finally:
        _delete(client, consumers, providers)
