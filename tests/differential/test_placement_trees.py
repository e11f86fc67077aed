"""The provider view answers nested, granular, same-subtree and sharing queries as Placement 16.

Property-based, against the real Placement (``GET /allocation_candidates`` at nova's 1.36, and
1.39 for any-of traits): every example builds a random world through Placement's API (trees
up to depth 3 shaped like a cloud's: compute nodes with NUMA-like children holding VCPU and
memory, bandwidth bridges under an agent provider with ``NET_BW_*`` and physnet traits, PCI
devices with a custom class and ``COMPUTE_MANAGED_PCI_DEVICE``, sharing DISK_GB pools in
aggregates; inventories with reserved amounts, allocation ratios, min_unit, max_unit and
step_size; usage made of real claims), loads a fresh view, and asks both the same random
queries: an unsuffixed group and up to three suffixed ones (numbered and string suffixes,
resourceless ones named by a ``same_subtree``), required, forbidden and any-of traits,
``member_of`` and forbidden aggregates, ``in_tree``, ``root_required`` / ``root_forbidden``,
``group_policy`` none and isolate.

The answers must be equal: the allocation requests as a set (each with its amounts per
provider and its ``mappings``), the provider summaries, and the count. Not the order:
Placement 16 keeps its candidates in Python sets hashed by resource class names, so its order
changes with the hash seed of the Placement process (two Placements, or one restarted, order
the same answer differently; see placement_client/view/search.py).

Placement's ``max_allocation_candidates`` and both generation strategies are compared on a
second and a third Placement over the same database: the same number of candidates, each one
of the unlimited answer, and with breadth-first as many anchors as Placement reached.

The module runs its own Placements (gunicorn on a fresh SQLite file) so that "the whole
Placement" is exactly what an example made; each example deletes what it made.
"""

from __future__ import annotations

import copy
import json
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
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
from placement_client.view.search import SearchOptions
from scheduler.demo.embedded_placement import EmbeddedPlacement
from tests.hunt import examples, hunting
from tests.placement_world import BuiltWorld, Inv

PROJECT = "p-" + uuid.uuid4().hex[:8]
USER = "u-" + uuid.uuid4().hex[:8]

PCI = "CUSTOM_PCI_8086_1572"
BW_EGR = "NET_BW_EGR_KILOBIT_PER_SEC"
BW_IGR = "NET_BW_IGR_KILOBIT_PER_SEC"
ROOT_CLASSES = ("VCPU", "MEMORY_MB", "DISK_GB")
CLASSES = (*ROOT_CLASSES, BW_EGR, BW_IGR, PCI)
PHYSNETS = ("CUSTOM_PHYSNET_PUBLIC", "CUSTOM_PHYSNET_TENANT")
VNIC = "CUSTOM_VNIC_TYPE_NORMAL"
PCI_TRAIT = "COMPUTE_MANAGED_PCI_DEVICE"
TRAITS = (
    *PHYSNETS,
    VNIC,
    PCI_TRAIT,
    "HW_CPU_X86_AVX2",
    "COMPUTE_STATUS_DISABLED",
    "CUSTOM_TREE_T0",
)
UNUSED_TRAIT = "CUSTOM_TREE_ON_NO_PROVIDER"
SHARING_TRAIT = "MISC_SHARES_VIA_AGGREGATE"
RATIOS = (0.5, 1.0, 1.5, 2.0, 4.0)  # exact in binary
AGGREGATES = 3  # aggregate indices 0..2; providers only get 0..1, so 2 is on no provider
CAP = 5  # the capped Placements' max_allocation_candidates
# worlds built in Placement per run (each is some tens of API calls); more when hunting
EXAMPLES = examples(15)
# a hunt's thousands of examples take a few seconds each on a loaded machine
pytestmark = pytest.mark.timeout(max(1800, 10 * EXAMPLES))


# -- the services -----------------------------------------------------------------------------
@dataclass
class Placements:
    plain: PlacementClient  # the real Placement 16 with its defaults
    mended: PlacementClient  # the same with two flaws mended (placement_mended.py)
    capped: dict[str, PlacementClient]  # strategy -> max_allocation_candidates = CAP


@pytest.fixture(scope="module")
def placements() -> Iterator[Placements]:
    with tempfile.TemporaryDirectory(prefix="novasched-trees-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'placement.sqlite'}"
        services = [
            EmbeddedPlacement(url, mode="process"),
            EmbeddedPlacement(
                url,
                mode="process",
                app="placement_mended:application",
                app_path=str(Path(__file__).parent),
            ),
        ]
        for strategy in ("depth-first", "breadth-first"):
            conf = (
                f"[placement]\nmax_allocation_candidates = {CAP}\n"
                f"allocation_candidates_generation_strategy = {strategy}\n"
            )
            services.append(EmbeddedPlacement(url, mode="process", extra_conf=conf))
        started = []
        try:
            for service in services:
                service.start()
                started.append(service)
            clients = [
                PlacementClient(s.url, claim_retries=4, retry_backoff=0.01) for s in services
            ]
            clients[0].ensure_traits([*TRAITS, UNUSED_TRAIT])
            clients[0].ensure_resource_classes([PCI])
            capped = {"depth-first": clients[2], "breadth-first": clients[3]}
            yield Placements(clients[0], clients[1], capped)
        finally:
            for service in reversed(started):
                service.stop()


# -- comparing answers ------------------------------------------------------------------------
def canonical_request(ar: dict[str, Any]) -> str:
    mappings = {s: sorted(rps) for s, rps in ar.get("mappings", {}).items()}
    return json.dumps({"allocations": ar["allocations"], "mappings": mappings}, sort_keys=True)


def canonical_requests(answer: AllocationCandidates) -> Counter[str]:
    return Counter(canonical_request(ar) for ar in answer.allocation_requests)


def canonical_summaries(answer: AllocationCandidates) -> dict[str, dict[str, Any]]:
    return {
        rp: {**summary, "traits": set(summary["traits"])}
        for rp, summary in answer.provider_summaries.items()
    }


def roots_of(answer: AllocationCandidates) -> set[str]:
    summaries = answer.provider_summaries
    return {
        summaries[rp]["root_provider_uuid"]
        for ar in answer.allocation_requests
        for rp in ar["allocations"]
    }


def unlimited(query: AllocationCandidatesQuery) -> AllocationCandidatesQuery:
    query = copy.deepcopy(query)
    query.limit = None
    return query


def lost_by_placement(view: ProviderView, request: dict[str, Any]) -> bool:
    """Whether Placement 16 drops this request by its own flaw: an unsuffixed group served
    only by sharing providers of other trees is kept for one of the trees they serve and
    lost for the others (``_alloc_candidates_multiple_providers`` collects the group's
    requests in a set whose equality ignores the anchor; which anchor survives depends on
    the iteration order of Placement's sets). The view keeps it for every tree."""
    mappings = request["mappings"]
    unsuffixed = set(mappings.get("", ()))
    others = {rp for s, rps in mappings.items() if s for rp in rps} | {
        rp for rp in request["allocations"] if rp not in unsuffixed
    }
    if not unsuffixed or not others:
        return False
    records = {rp: view.record(rp) for rp in unsuffixed | others}
    anchors = {records[rp].root_uuid for rp in others if SHARING_TRAIT not in records[rp].traits}
    return len(anchors) == 1 and all(
        SHARING_TRAIT in records[rp].traits and records[rp].root_uuid not in anchors
        for rp in unsuffixed
    )


def describe(view: ProviderView, *answers: AllocationCandidates) -> str:
    """The providers (by name) and the answers, for an assertion's message."""
    names = {u: view.record(u).name for u in view.uuids()}
    lines = []
    for u in sorted(view.uuids(), key=names.get):
        r = view.record(u)
        parent = names.get(r.parent_uuid, "-")
        inventories = {
            rc: (i.total, i.reserved, i.min_unit, i.max_unit, i.step_size, i.allocation_ratio)
            for rc, i in r.inventories.items()
        }
        lines.append(
            f"  {r.name} <- {parent}: {inventories} used {r.used} "
            f"traits {sorted(r.traits)} aggregates {len(r.aggregates)}"
        )
    for answer in answers:
        lines.append("answer:")
        for ar in answer.allocation_requests:
            allocations = {names[rp]: body["resources"] for rp, body in ar["allocations"].items()}
            mappings = {s: [names[rp] for rp in rps] for s, rps in ar["mappings"].items()}
            lines.append(f"  {allocations} {mappings}")
    return "\n".join(lines)


def mutated_by_placement(query: AllocationCandidatesQuery) -> bool:
    """Whether Placement 16 may write merged amounts into objects later candidates share:
    group_policy=isolate and a class the unsuffixed group and a granular group both ask
    for (placement_mended.py, mend 2)."""
    if query.group_policy != "isolate":
        return False
    groups = query.effective_groups()
    unsuffixed = {rc for g in groups if not g.suffix for rc, n in g.resources.items() if n}
    return any(rc in unsuffixed for g in groups if g.suffix for rc, n in g.resources.items() if n)


def assert_same(
    view: ProviderView,
    placements: Placements,
    query: AllocationCandidatesQuery,
    stats: Counter[str],
) -> AllocationCandidates:
    """The view's answer to ``query`` without a limit equals the mended Placement's, which
    equals the real one's but for what the real one's flaws change; returns the answer."""
    query = unlimited(query)
    got = view.candidates(query)
    qs = query.to_querystring()
    assert got.candidates is not None, f"{qs}: the view declined: {got.reason}"
    mended = placements.mended.get_allocation_candidates(query, coalesce=False)
    why = f"{qs}\n{describe(view, got.candidates, mended)}"
    assert canonical_requests(got.candidates) == canonical_requests(mended), why
    assert canonical_summaries(got.candidates) == canonical_summaries(mended), why
    assert got.matched == len(mended.allocation_requests), why
    if mutated_by_placement(query):
        stats["not compared with the real Placement (isolate)"] += 1
        return got.candidates
    real = placements.plain.get_allocation_candidates(query, coalesce=False)
    why = f"{qs}\n{describe(view, mended, real)}"
    mine, theirs = canonical_requests(mended), canonical_requests(real)
    assert not theirs - mine, why
    extra = [json.loads(r) for r in mine - theirs]
    assert all(lost_by_placement(view, r) for r in extra), why
    stats["lost by the real Placement (sharing)"] += len(extra)
    summaries = canonical_summaries(mended)
    assert all(summaries.get(rp) == s for rp, s in canonical_summaries(real).items()), why
    extra_trees = {view.record(rp).root_uuid for r in extra for rp in r["allocations"]}
    assert all(
        s["root_provider_uuid"] in extra_trees
        for rp, s in summaries.items()
        if rp not in real.provider_summaries
    ), why
    return got.candidates


# -- the random world -------------------------------------------------------------------------
@dataclass
class Rp:
    name: str
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

    def roots(self) -> list[int]:
        return [i for i, rp in enumerate(self.rps) if rp.parent is None]


@st.composite
def inventories(draw: st.DrawFn, small: bool = False) -> Inv:
    total = draw(st.integers(1, 6 if small else 32))
    reserved = draw(st.sampled_from((0,) * 6 + (1, total)))
    # mostly Placement's defaults, so that most queries find something
    min_unit = draw(st.sampled_from((1,) * 6 + (2,)))
    max_unit = draw(st.sampled_from((None, None, None, min_unit, total, total + 2)))
    step_size = draw(st.sampled_from((1,) * 6 + (2,)))
    ratio = draw(st.sampled_from(RATIOS))
    return Inv(total, reserved, min_unit, max_unit, step_size, ratio)


@st.composite
def worlds(draw: st.DrawFn) -> World:
    rps: list[Rp] = []
    tag = uuid.uuid4().hex[:6]

    def add(parent: int | None, name: str, inv: dict[str, Inv], traits: set[str], aggs: set[int]):
        rps.append(Rp(f"{tag}-{name}", parent, inv, traits, aggs))
        return len(rps) - 1

    for h in range(draw(st.integers(1, 4))):
        classes = draw(
            st.sampled_from([set(ROOT_CLASSES)] * 3 + [set(), {"VCPU"}, {"DISK_GB", "MEMORY_MB"}])
        )
        root = add(
            None,
            f"cn{h}",
            {rc: draw(inventories()) for rc in sorted(classes)},
            draw(st.sets(st.sampled_from(TRAITS[4:]), max_size=2)),
            draw(st.sets(st.integers(0, AGGREGATES - 2), max_size=2)),
        )
        # NUMA-like children with VCPU / MEMORY_MB (a class the root may have too)
        for k in range(draw(st.integers(0, 2))):
            numa = add(
                root,
                f"cn{h}-numa{k}",
                {
                    rc: draw(inventories())
                    for rc in sorted(draw(st.sets(st.sampled_from(ROOT_CLASSES[:2]), max_size=2)))
                },
                draw(st.sets(st.sampled_from(TRAITS[4:]), max_size=1)),
                draw(st.sets(st.integers(0, AGGREGATES - 2), max_size=1)),
            )
            # a PCI device under a NUMA node now and then (depth 3 with the agent's bridges)
            if draw(st.booleans()):
                add(
                    numa,
                    f"cn{h}-numa{k}-pci",
                    {PCI: draw(inventories(small=True))},
                    {PCI_TRAIT},
                    set(),
                )
        # a bandwidth agent with one bridge per physnet, as Neutron's OVS agent makes them
        if draw(st.integers(0, 3)):
            agent = add(root, f"cn{h}-agent", {}, {VNIC}, set())
            for net in draw(st.sets(st.sampled_from(PHYSNETS), min_size=1, max_size=2)):
                add(
                    agent,
                    f"cn{h}-agent-{net[-3:].lower()}",
                    {
                        rc: draw(inventories())
                        for rc in sorted(
                            draw(st.sets(st.sampled_from((BW_EGR, BW_IGR)), min_size=1))
                        )
                    },
                    {net, VNIC},
                    set(),
                )
        # PCI devices straight under the root
        for d in range(draw(st.integers(0, 3))):
            add(
                root,
                f"cn{h}-pci{d}",
                {PCI: draw(inventories(small=True))},
                {PCI_TRAIT} | draw(st.sets(st.sampled_from(TRAITS[4:]), max_size=1)),
                set(),
            )
    for s in range(draw(st.integers(0, 2))):  # sharing DISK_GB pools
        add(
            None,
            f"share{s}",
            {"DISK_GB": draw(inventories())},
            {SHARING_TRAIT} | draw(st.sets(st.sampled_from(TRAITS[4:]), max_size=1)),
            draw(st.sets(st.integers(0, AGGREGATES - 2), max_size=2)),
        )
    part = st.tuples(st.integers(0, 63), st.integers(0, 7), st.integers(0, 63))
    consumers = draw(st.lists(st.lists(part, min_size=1, max_size=3), max_size=6))
    return World(rps, consumers)


@dataclass
class Group:
    resources: dict[str, int] = field(default_factory=dict)
    required: set[str] = field(default_factory=set)
    forbidden: set[str] = field(default_factory=set)
    any_of: list[set[str]] = field(default_factory=list)
    member_of: list[set[int]] = field(default_factory=list)
    forbidden_aggregates: set[int] = field(default_factory=set)
    in_tree: int | str | None = None


@dataclass
class Ask:
    """One random query: aggregates by index, in_tree by provider index or "missing"."""

    unsuffixed: Group | None
    suffixed: dict[str, Group]
    group_policy: str = "none"
    root_required: set[str] = field(default_factory=set)
    root_forbidden: set[str] = field(default_factory=set)
    same_subtree: list[set[str]] = field(default_factory=list)


ANY_TRAIT = st.sampled_from((*TRAITS, SHARING_TRAIT, UNUSED_TRAIT))


AMOUNT = st.sampled_from((1, 1, 1, 1, 2, 3))
# what nova's groups ask for: the flavor's classes unsuffixed, a port's bandwidth or a PCI
# device suffixed; now and then any class anywhere
UNSUFFIXED = st.one_of(
    st.sets(st.sampled_from(ROOT_CLASSES), min_size=1),
    st.sets(st.sampled_from(CLASSES), min_size=1, max_size=3),
)
UNSUFFIXED_STANDARD = st.sets(st.sampled_from(ROOT_CLASSES), min_size=1)
SUFFIXED = st.one_of(
    st.just({BW_EGR}),
    st.just({BW_EGR, BW_IGR}),
    st.just({PCI}),
    st.sets(st.sampled_from(CLASSES), min_size=1, max_size=2),
)
FILTERS = ("required", "forbidden", "any_of", "member_of", "in_tree")


@st.composite
def groups(draw: st.DrawFn, classes: Any = None) -> Group:
    """A group asking for ``classes`` (None: resourceless) with up to two filters."""
    g = Group()
    if classes is not None:
        g.resources = {rc: draw(AMOUNT) for rc in sorted(draw(classes))}
    count = draw(st.sampled_from((0, 0, 0, 0, 1, 1, 2)))
    for name in draw(st.sets(st.sampled_from(FILTERS), min_size=count, max_size=count)):
        if name == "required":
            g.required = draw(st.sets(ANY_TRAIT, min_size=1, max_size=2))
        elif name == "forbidden":
            g.forbidden = draw(st.sets(ANY_TRAIT, min_size=1, max_size=2))
        elif name == "any_of":
            g.any_of = [draw(st.sets(ANY_TRAIT, min_size=2, max_size=3))]
        elif name == "member_of":
            g.member_of = draw(
                st.lists(
                    st.sets(st.integers(0, AGGREGATES - 1), min_size=1, max_size=2),
                    min_size=1,
                    max_size=2,
                )
            )
            if draw(st.booleans()):
                g.forbidden_aggregates = {draw(st.integers(0, AGGREGATES - 1))}
        else:
            g.in_tree = draw(st.one_of(st.integers(0, 40), st.just("missing")))
    # Placement refuses a trait both required and forbidden (400)
    g.forbidden -= g.required
    g.any_of = [s for s in g.any_of if not s <= g.forbidden]
    return g


def flavor(draw: st.DrawFn) -> Group:
    """The unsuffixed group of a flavor: the standard classes, now and then a filter."""
    if draw(st.integers(0, 3)) == 0:
        return draw(groups(UNSUFFIXED))
    return Group({rc: draw(AMOUNT) for rc in sorted(draw(UNSUFFIXED_STANDARD))})


@st.composite
def nova_asks(draw: st.DrawFn) -> Ask:
    """The shapes nova 34 sends: a flavor alone, with a port's bandwidth (in the older
    format, or the newer one with the agent as a resourceless group in a same_subtree), or
    with a PCI alias in Placement (one group per device)."""
    ask = Ask(flavor(draw), {})
    shape = draw(st.sampled_from(("flavor", "port", "port-subtree", "pci")))
    physnet = draw(st.sampled_from(PHYSNETS))
    bandwidth = {
        rc: draw(AMOUNT)
        for rc in sorted(draw(st.sets(st.sampled_from((BW_EGR, BW_IGR)), min_size=1)))
    }
    if shape == "port":
        ask.suffixed["_PORT_A"] = Group(bandwidth, required={physnet, VNIC})
    elif shape == "port-subtree":
        ask.suffixed["_PORT_A_BW"] = Group(bandwidth, required={physnet})
        ask.suffixed["_PORT_A_AGENT"] = Group(required={VNIC})
        ask.same_subtree = [{"_PORT_A_BW", "_PORT_A_AGENT"}]
    elif shape == "pci":
        for d in range(draw(st.integers(1, 3))):
            ask.suffixed[f"_PCI_{d}"] = Group({PCI: 1}, required={PCI_TRAIT})
        ask.group_policy = draw(st.sampled_from(("none", "isolate")))
    return ask


@st.composite
def any_asks(draw: st.DrawFn) -> Ask:
    """Anything Placement takes: up to three suffixed groups of any classes and filters,
    resourceless ones named by a same_subtree."""
    names = draw(
        st.lists(
            st.sampled_from(("1", "2", "_PORT_A", "_PCI_0")), min_size=1, max_size=3, unique=True
        )
    )
    unsuffixed = None if draw(st.integers(0, 4)) == 0 else flavor(draw)
    suffixed: dict[str, Group] = {}
    subtree: set[str] = set()
    for name in names:
        if draw(st.integers(0, 4)) == 0:  # resourceless: only where a same_subtree names it
            g = draw(groups())
            if not (g.required or g.member_of or g.any_of):
                g.required = {draw(ANY_TRAIT)}
                g.forbidden -= g.required
            suffixed[name] = g
            subtree.add(name)
        else:
            suffixed[name] = draw(groups(SUFFIXED))
            if draw(st.integers(0, 5)) == 0:
                subtree.add(name)
    ask = Ask(unsuffixed, suffixed, draw(st.sampled_from(("none", "isolate"))))
    if subtree:
        if len(subtree) == 1 and len(names) > 1:
            subtree.add(draw(st.sampled_from(names)))
        ask.same_subtree = [subtree]
    return ask


@st.composite
def asks(draw: st.DrawFn) -> Ask:
    ask = draw(st.one_of(nova_asks(), any_asks()))
    if draw(st.booleans()):
        ask.root_forbidden = {"COMPUTE_STATUS_DISABLED"}  # nova's compute_status_filter
    if draw(st.integers(0, 5)) == 0:
        ask.root_required = {draw(st.sampled_from(TRAITS[4:]))}
        ask.root_forbidden -= ask.root_required
    return ask


class Built(BuiltWorld):
    """A world made real in Placement: its providers, aggregates and consumers."""

    def __init__(self, client: PlacementClient, world: World):
        super().__init__(
            client,
            world.rps,
            aggregates=AGGREGATES,
            name=lambda rp: rp.name,
            project=PROJECT,
            user=USER,
        )
        self.world = world

    def build(self) -> None:
        self.create_providers()
        self.claim(self.world.consumers)

    def group(self, suffix: str, g: Group) -> QueryGroup:
        in_tree = None
        if g.in_tree == "missing":
            in_tree = str(uuid.uuid4())
        elif g.in_tree is not None:
            in_tree = self.world.rps[int(g.in_tree) % len(self.world.rps)].uuid
        return QueryGroup(
            suffix=suffix,
            resources=dict(g.resources),
            required_traits=set(g.required),
            forbidden_traits=set(g.forbidden),
            required_any=[set(s) for s in g.any_of],
            member_of=[sorted(self.aggregates[a] for a in s) for s in g.member_of],
            forbidden_aggregates={self.aggregates[a] for a in g.forbidden_aggregates},
            in_tree=in_tree,
        )

    def query(self, ask: Ask) -> AllocationCandidatesQuery:
        query = AllocationCandidatesQuery(
            root_required=set(ask.root_required),
            root_forbidden=set(ask.root_forbidden),
            same_subtree=[sorted(s) for s in ask.same_subtree],
        )
        if ask.unsuffixed is not None:
            query.groups.append(self.group("", ask.unsuffixed))
        for suffix, g in ask.suffixed.items():
            query.groups.append(self.group(suffix, g))
        if ask.suffixed:
            query.group_policy = ask.group_policy
        return query


def _load(client: PlacementClient) -> tuple[ProviderView, ApiFeed]:
    view = ProviderView(max_age=3600.0)
    feed = ApiFeed(client, threads=4)
    feed.load(view)
    return view, feed


def sure_query(view: ProviderView, world: World, pick: int) -> AllocationCandidatesQuery | None:
    """One unsuffixed group asking for the smallest amount one of the world's inventories
    still has room for (the ``pick``-th such inventory): a query with at least one candidate,
    whatever the random queries find."""
    fits: list[tuple[str, int]] = []
    for rp in world.rps:
        used = view.record(rp.uuid).used
        for rc, inv in sorted(rp.inventories.items()):
            free = int((inv.total - inv.reserved) * inv.allocation_ratio) - used.get(rc, 0)
            top = min(free, inv.max_unit if inv.max_unit is not None else free)
            amount = -(-inv.min_unit // inv.step_size) * inv.step_size
            if amount <= top:
                fits.append((rc, amount))
    if not fits:
        return None
    rc, amount = fits[pick % len(fits)]
    return AllocationCandidatesQuery(groups=[QueryGroup(suffix="", resources={rc: amount})])


def _valid(query: AllocationCandidatesQuery) -> bool:
    """Whether Placement takes the query (our generator can draw a few it refuses: an
    query without resources, an unsuffixed group left without resources, a resourceless
    group no same_subtree names or with nothing to send)."""
    groups = query.effective_groups()
    if not any(g.has_resources() for g in groups):
        return False
    named = {s for subtree in query.same_subtree for s in subtree}
    for g in groups:
        if not g.to_params():
            return False
        if not g.has_resources() and (not g.suffix or g.suffix not in named):
            return False
    return named <= {g.suffix for g in groups}


# -- the property -----------------------------------------------------------------------------
def test_view_answers_trees_exactly_as_placement(placements: Placements) -> None:
    client = placements.plain
    stats: Counter[str] = Counter()

    @settings(
        deadline=None,
        max_examples=EXAMPLES,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        # the suite's examples are the same on every machine; a hunt draws new ones
        derandomize=not hunting(),
    )
    @given(
        world=worlds(),
        ask_list=st.lists(asks(), min_size=6, max_size=12),
        pick=st.integers(0, 1 << 16),
    )
    def example(world: World, ask_list: list[Ask], pick: int) -> None:
        assert client.list_providers() == [], "an earlier example left providers behind"
        built = Built(client, world)
        try:
            built.build()
            view, feed = _load(client)
            feed.close()
            # the same providers, for the views that stop where the capped Placements stop
            records = [view.record(u) for u in view.uuids()]
            capped = {}
            for strategy in placements.capped:
                capped[strategy] = ProviderView(
                    max_age=3600.0,
                    search=SearchOptions(
                        max_allocation_candidates=CAP,
                        allocation_candidates_generation_strategy=strategy,
                    ),
                )
                capped[strategy].replace_all(records, capped[strategy].now())
            sure = sure_query(view, world, pick)
            for query in [built.query(ask) for ask in ask_list] + [sure] * (sure is not None):
                if not _valid(query):
                    stats["skipped invalid"] += 1
                    continue
                everything = assert_same(view, placements, query, stats)
                stats["compared"] += 1
                found = len(everything.allocation_requests)
                stats["compared non-empty"] += bool(found)
                stats["compared several per root"] += found > len(roots_of(everything))
                for strategy, capped_view in capped.items():
                    _assert_capped(capped_view, placements.capped[strategy], query, everything)
                if found > 1:
                    _assert_limited(view, query, everything, stats)
        finally:
            built.clean()

    started = time.monotonic()
    example()
    # the property was not vacuous
    assert stats["compared"] >= 4 * EXAMPLES, stats
    assert stats["compared non-empty"] >= EXAMPLES, stats  # at least the sure queries
    assert stats["compared several per root"] >= 1, stats
    print(f"{EXAMPLES} examples in {time.monotonic() - started:.1f} s: {dict(stats)}")


def _assert_capped(
    view: ProviderView,
    client: PlacementClient,
    query: AllocationCandidatesQuery,
    everything: AllocationCandidates,
) -> None:
    """With max_allocation_candidates: as many as Placement (Placement stops after adding
    one, so a cap of 0 gives one), each one of the unlimited answer; breadth-first reaches
    as many anchors."""
    query = unlimited(query)
    got = view.candidates(query).candidates
    expected = client.get_allocation_candidates(query, coalesce=False)
    qs = query.to_querystring()
    assert len(got.allocation_requests) == min(max(CAP, 1), len(everything.allocation_requests)), qs
    assert len(expected.allocation_requests) <= len(got.allocation_requests), qs
    assert canonical_requests(got) <= canonical_requests(everything), qs
    breadth = view.search_options.allocation_candidates_generation_strategy == "breadth-first"
    if breadth and _every_combination_counts(view, query):
        # one per anchor in turn: as many anchors as the cap allows (where some combinations
        # are not candidates, which anchors get one depends on the generation order)
        assert len(roots_of(got)) == min(len(roots_of(everything)), max(CAP, 1)), qs


def _every_combination_counts(view: ProviderView, query: AllocationCandidatesQuery) -> bool:
    """Whether every combination of one way per group is a candidate: no class asked by
    two groups, no isolate between granular groups, no same_subtree, no sharing provider."""
    groups = query.effective_groups()
    classes = [rc for g in groups for rc, n in g.resources.items() if n]
    granular = sum(1 for g in groups if g.suffix)
    return (
        len(classes) == len(set(classes))
        and not query.same_subtree
        and not (query.group_policy == "isolate" and granular > 1)
        and not any(SHARING_TRAIT in view.record(u).traits for u in view.uuids())
    )


def _assert_limited(
    view: ProviderView,
    query: AllocationCandidatesQuery,
    everything: AllocationCandidates,
    stats: Counter[str],
) -> None:
    """``limit`` cuts the allocation requests (not the hosts) to a sample of the answer,
    with the summaries of the trees it keeps."""
    limit = len(everything.allocation_requests) - 1
    query = copy.deepcopy(query)
    query.limit = limit
    got = view.candidates(query)
    assert got.matched == len(everything.allocation_requests)
    assert len(got.candidates.allocation_requests) == limit
    assert canonical_requests(got.candidates) <= canonical_requests(everything)
    all_summaries = canonical_summaries(everything)
    summaries = canonical_summaries(got.candidates)
    assert summaries.keys() <= all_summaries.keys()
    assert {s["root_provider_uuid"] for s in summaries.values()} == roots_of(got.candidates)
    assert all(summaries[rp] == all_summaries[rp] for rp in summaries)
    stats["limited"] += 1
