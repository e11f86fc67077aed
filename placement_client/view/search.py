"""Allocation candidates over provider trees, as Placement 16 finds them.

``TreeSearch(view, query, options).run()`` answers any ``GET /allocation_candidates`` query
(microversion 1.36, and 1.39's any-of traits) from the provider view, with Placement's own
steps (``placement/objects/allocation_candidate.py`` and ``research_context.py``):

1. **Anchors.** ``root_required`` / ``root_forbidden`` keep the roots ("anchors") whose own
   traits match.
2. **Each request group on its own.** A suffixed group (``resources1``, ``resources_PORT``)
   is satisfied by one provider that has room for every amount, every required trait (or one
   of each any-of set), every ``member_of`` set and none of the forbidden traits and
   aggregates, itself; ``in_tree`` keeps the providers of one tree. A resourceless suffixed
   group (only allowed where a ``same_subtree`` names it) matches the providers with its
   required traits or aggregates; one with neither matches nothing, and ``in_tree`` is not
   looked at (both as Placement does). A sharing provider (``MISC_SHARES_VIA_AGGREGATE``)
   serves its own tree and every tree with a provider in one of its aggregates.
   The unsuffixed group may take each class from a different provider of one tree, or from a
   sharing provider of the tree's aggregates (not with ``in_tree``); a provider counts for
   ``member_of`` when it or its anchor is in the aggregates, and not at all when either is in
   a forbidden one. Each combination of providers must together have the required traits,
   and none of them a forbidden trait (a root's traits do not flow down to its children).
   A group that nothing satisfies leaves the whole query empty.
3. **Merge per anchor.** For every anchor that every group reached, each combination of one
   choice per group is kept when ``group_policy=isolate`` finds the suffixed groups on
   distinct providers, every ``same_subtree`` has one of its providers above (or equal to)
   all the others, and the amounts summed per provider and class stay within the capacity
   and ``max_unit``. Equal results (a request served only by a sharing provider, reached from
   several anchors) count once.
4. ``[placement] max_allocation_candidates`` stops the generation after that many,
   visiting the anchors one after the other (``depth-first``) or in turns (``breadth-first``),
   and ``limit`` then keeps a uniform random sample (Placement's
   ``randomize_allocation_candidates = True``). ``provider_summaries`` list every provider of
   every tree that gives resources to a kept request.

**Order.** Placement 16 keeps its candidates in Python sets of objects hashed by their
resource class names, so the order of its answer changes with the hash seed of the Placement
process: two Placement processes (two API hosts, or one restarted) order the same answer
differently, and nova claims the first request of each host from that order. The view gives
an order of its own that does not change: anchors, and the providers within a tree, by
provider name (``cn1_0000:81:00.0`` before ``cn1_0000:82:00.0``), the unsuffixed group's classes
in Placement's class order, the groups in the order Placement reads nova's sorted query string.
With ``max_allocation_candidates`` Placement's choice follows its generation order, which the
view's order stands in for; the number of candidates and the strategy's spread over anchors
are Placement's.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import os_resource_classes

from placement_client.api import AllocationCandidates, AllocationCandidatesQuery, QueryGroup

if TYPE_CHECKING:
    from placement_client.view.view import ProviderView

STRATEGIES = ("depth-first", "breadth-first")
# the steps the search takes at most examining combinations one by one (when some of them may
# not be candidates; a step tries one way of one group below a partial combination): about 1.5 s
# on 2 cores with the view's lock held; past that the view declines and Placement answers
MAX_EXAMINED = 1_000_000


class TooWide(Exception):
    """The query asks the search to take more than ``MAX_EXAMINED`` steps."""


_CLASS_ORDER = {rc: i for i, rc in enumerate(os_resource_classes.STANDARDS)}


@dataclass(frozen=True, slots=True)
class SearchOptions:
    """Placement's options that change its answer, under Placement's names."""

    max_allocation_candidates: int = -1
    allocation_candidates_generation_strategy: str = "depth-first"

    def __post_init__(self) -> None:
        if self.allocation_candidates_generation_strategy not in STRATEGIES:
            raise ValueError(
                "allocation_candidates_generation_strategy must be one of "
                f"{', '.join(STRATEGIES)}, not "
                f"{self.allocation_candidates_generation_strategy!r}"
            )


class _Pick(NamedTuple):
    """One way a group is satisfied: the providers mapped to it and the amounts taken
    (slot, resource class, amount)."""

    mapped: tuple[int, ...]
    taken: tuple[tuple[int, str, int], ...]


def _class_key(rc: str) -> tuple[int, str]:
    """Placement's class order: standard classes by their id, custom ones after."""
    return (_CLASS_ORDER.get(rc, len(_CLASS_ORDER)), rc)


def _group_order(groups: list[QueryGroup]) -> list[QueryGroup]:
    """The groups in the order Placement reads them from nova's sorted query string: by
    the first of each group's parameter names."""

    def first_key(g: QueryGroup) -> str:
        keys = [k for k, _ in g.to_params()] or [f"resources{g.suffix}"]
        return min(keys)

    return sorted(groups, key=first_key)


class TreeSearch:
    """One query against the view (the caller holds the view's lock)."""

    def __init__(self, view: ProviderView, query: AllocationCandidatesQuery, options: Any):
        self.view = view
        self.query = query
        self.options = options
        self.shape = view.shape
        self.slots = view.slots
        self.size = len(view.slots)
        self.groups = _group_order(query.effective_groups())
        self.sharing_used = False
        self._rooms: dict[tuple[int, str], int] = {}

    # -- masks over the slots ----------------------------------------------------------------
    def _mask(self, kind: str, name: str) -> np.ndarray:
        """The slots with a trait (``kind`` "t") or in an aggregate ("a") (``ProviderView.
        mask``: cached until the view's indexes change)."""
        return self.view.mask(kind, name)

    def _any(self, kind: str, names: Any) -> np.ndarray:
        mask = np.zeros(self.size, dtype=bool)
        for name in names:
            mask |= self._mask(kind, name)
        return mask

    def _live(self) -> np.ndarray:
        key = ("live", self.size)
        cached = self.view.derived.get(key)
        if cached is None:
            cached = np.fromiter((e is not None for e in self.slots), dtype=bool, count=self.size)
            self.view.derived[key] = cached
        return cached

    def _rank(self) -> np.ndarray:
        """Each slot's place in the order of provider names."""
        key = ("rank", self.size)
        cached = self.view.derived.get(key)
        if cached is None:
            names = [(e.rec.name, e.rec.uuid) if e is not None else ("", "") for e in self.slots]
            order = sorted(range(self.size), key=names.__getitem__)
            cached = np.empty(self.size, dtype=np.int64)
            cached[np.asarray(order, dtype=np.int64)] = np.arange(self.size)
            self.view.derived[key] = cached
        return cached

    def _anchors_of_sharing(self, slot: int) -> list[int]:
        """The roots a sharing provider serves: of every provider in one of its aggregates
        (its own root among them when it has an aggregate)."""
        key = ("anchors", slot)
        cached = self.view.derived.get(key)
        if cached is None:
            roots = self.shape.root
            found: set[int] = set()
            for agg in self.slots[slot].rec.aggregates:
                found.update(
                    int(roots[self.view.entry(u).slot]) for u in self.view.in_aggregate(agg)
                )
            found.discard(-1)
            cached = self.view.derived[key] = sorted(found)
        return cached

    def _ancestors(self, slot: int) -> frozenset[int]:
        key = ("up", slot)
        cached = self.view.derived.get(key)
        if cached is None:
            chain = {slot}
            entry = self.slots[slot]
            while entry is not None and entry.rec.parent_uuid is not None:
                entry = self.view.entry(entry.rec.parent_uuid)
                if entry is None or entry.slot in chain:
                    break
                chain.add(entry.slot)
            cached = self.view.derived[key] = frozenset(chain)
        return cached

    # -- 1. anchors ----------------------------------------------------------------------------
    def _allowed_anchors(self) -> np.ndarray | None:
        q = self.query
        if not (q.root_required or q.root_forbidden):
            return None
        allowed = self.shape.is_root[: self.size].copy()
        for t in q.root_required:
            allowed &= self._mask("t", t)
        for t in q.root_forbidden:
            allowed &= ~self._mask("t", t)
        return allowed

    # -- 2. each group on its own ------------------------------------------------------------
    def _tree_root(self, group: QueryGroup) -> int | None:
        """The root slot ``in_tree`` names (-2: a provider the view does not hold)."""
        if not group.in_tree:
            return None
        entry = self.view.entry(group.in_tree)
        root = self.view.entry(entry.rec.root_uuid) if entry is not None else None
        return root.slot if root is not None else -2

    def _traits_and_aggregates(self, group: QueryGroup, mask: np.ndarray) -> np.ndarray:
        """``mask`` narrowed to the providers that themselves match the group's traits and
        aggregates."""
        for t in group.required_traits:
            mask &= self._mask("t", t)
        for any_of in group.required_any:
            mask &= self._any("t", any_of)
        for or_set in group.member_of:
            mask &= self._any("a", or_set)
        if group.forbidden_traits:
            mask &= ~self._any("t", group.forbidden_traits)
        if group.forbidden_aggregates:
            mask &= ~self._any("a", group.forbidden_aggregates)
        return mask

    def _with_sharing(
        self, providers: np.ndarray, anchors: np.ndarray, shared: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(provider, anchor) pairs plus one for each other tree the sharing providers among
        ``shared`` serve."""
        extra_p: list[int] = []
        extra_a: list[int] = []
        for slot in np.flatnonzero(shared).tolist():
            own = int(self.shape.root[slot])
            for anchor in self._anchors_of_sharing(slot):
                if anchor != own:
                    extra_p.append(slot)
                    extra_a.append(anchor)
        if not extra_p:
            return providers, anchors
        self.sharing_used = True
        return (
            np.concatenate((providers, np.asarray(extra_p, dtype=np.int64))),
            np.concatenate((anchors, np.asarray(extra_a, dtype=np.int64))),
        )

    def _single(self, group: QueryGroup, allowed: np.ndarray | None) -> _Matches | None:
        """A suffixed group: one provider each."""
        amounts = tuple((rc, n) for rc, n in group.resources.items() if n)
        if amounts:
            tree = self._tree_root(group)
            if tree == -2:
                return None
            mask = np.ones(self.size, dtype=bool)
            for rc, n in amounts:
                column = self.view.column(rc)
                if column is None:
                    return None
                mask &= column.fits(slice(0, self.size), n)
            if tree is not None:
                mask &= self.shape.root[: self.size] == tree
        else:
            # Placement: a resourceless group matches through its traits or aggregates only,
            # and does not look at in_tree (an unknown one still empties the answer)
            if not (group.required_traits or group.required_any or group.member_of):
                return None
            if self._tree_root(group) == -2:
                return None
            mask = self._live().copy()
        mask = self._traits_and_aggregates(group, mask)
        providers = np.flatnonzero(mask)
        anchors = self.shape.root[providers]
        providers, anchors = self._with_sharing(
            providers, anchors, mask & self.shape.sharing[: self.size]
        )
        keep = anchors >= 0
        if allowed is not None:
            keep &= allowed[np.maximum(anchors, 0)]
        return _Matches.of_pairs(providers[keep], anchors[keep], self._rank(), amounts)

    def _spread(self, group: QueryGroup, allowed: np.ndarray | None) -> _Matches | None:
        """The unsuffixed group: each class from any provider of the anchor's tree or a
        sharing provider of its aggregates."""
        amounts = sorted(
            ((rc, n) for rc, n in group.resources.items() if n), key=lambda a: _class_key(a[0])
        )
        tree = self._tree_root(group)
        if tree == -2 or not amounts:
            return None
        rows = slice(0, self.size)
        roots = self.shape.root[: self.size]
        wanted = None  # providers (or their anchors) in every member_of set
        if group.member_of:
            wanted = np.ones(self.size, dtype=bool)
            for or_set in group.member_of:
                wanted &= self._any("a", or_set)
        banned = self._any("a", group.forbidden_aggregates) if group.forbidden_aggregates else None
        per_class: list[tuple[np.ndarray, np.ndarray]] = []
        for rc, n in amounts:
            column = self.view.column(rc)
            if column is None:
                return None
            fit = column.fits(rows, n)
            if tree is not None:
                fit &= roots == tree
            providers = np.flatnonzero(fit)
            anchors = roots[providers]
            if tree is None:
                shared = fit & self.shape.sharing[: self.size]
                if wanted is not None:
                    shared &= wanted
                providers, anchors = self._with_sharing(providers, anchors, shared)
            keep = anchors >= 0
            anchor_at = np.maximum(anchors, 0)
            if allowed is not None:
                keep &= allowed[anchor_at]
            if wanted is not None:
                keep &= wanted[providers] | wanted[anchor_at]
            if banned is not None:
                keep &= ~(banned[providers] | banned[anchor_at])
            if not keep.any():
                return None
            per_class.append((providers[keep], anchors[keep]))
        if all(np.array_equal(p, a) for p, a in per_class):
            return self._spread_on_roots(group, amounts, per_class)
        return self._spread_on_trees(group, amounts, per_class)

    def _spread_on_roots(
        self, group: QueryGroup, amounts: list, per_class: list[tuple[np.ndarray, np.ndarray]]
    ) -> _Matches | None:
        """Every class from the root itself (a flat tree, or classes only roots have):
        one way per root, whose own traits are the combination's."""
        mask = np.zeros(self.size, dtype=bool)
        mask[per_class[0][0]] = True
        for providers, _ in per_class[1:]:
            other = np.zeros(self.size, dtype=bool)
            other[providers] = True
            mask &= other
        # (the aggregates were applied per class already; again on the root, the anchor, alike)
        roots = np.flatnonzero(self._traits_and_aggregates(group, mask))
        return _Matches.of_pairs(roots, roots, self._rank(), tuple(amounts))

    def _spread_on_trees(
        self, group: QueryGroup, amounts: list, per_class: list[tuple[np.ndarray, np.ndarray]]
    ) -> _Matches | None:
        """Each class from any provider of the tree: every combination, with the traits of
        its providers together."""
        rank = self._rank()
        by_class: list[dict[int, list[int]]] = []
        for providers, anchors in per_class:
            order = np.lexsort((rank[providers], anchors))
            by_anchor: dict[int, list[int]] = {}
            for p, a in zip(providers[order].tolist(), anchors[order].tolist(), strict=True):
                by_anchor.setdefault(a, []).append(p)
            by_class.append(by_anchor)
        anchors = set(by_class[0])
        for by_anchor in by_class[1:]:
            anchors &= by_anchor.keys()
        required = [{t} for t in group.required_traits] + [set(s) for s in group.required_any]
        forbidden = group.forbidden_traits
        traits_of = self._traits_of
        lists: dict[int, list[_Pick]] = {}
        for anchor in anchors:
            picks = []
            for combo in itertools.product(*(by_anchor[anchor] for by_anchor in by_class)):
                providers = tuple(sorted(set(combo), key=rank.__getitem__))
                if forbidden and any(traits_of(p) & forbidden for p in providers):
                    continue
                if required:
                    have = set().union(*(traits_of(p) for p in providers))
                    if not all(any_of & have for any_of in required):
                        continue
                taken = tuple((p, rc, n) for p, (rc, n) in zip(combo, amounts, strict=True))
                picks.append(_Pick(providers, taken))
            if picks:
                lists[anchor] = picks
        return _Matches.of_lists(lists) if lists else None

    def _traits_of(self, slot: int) -> frozenset[str]:
        return self.slots[slot].rec.traits

    # -- 3. merge per anchor -------------------------------------------------------------------
    def run(self, rng: random.Random | None = None) -> tuple[AllocationCandidates, int]:
        """(the candidates, how many allocation requests fit before ``limit``)."""
        empty = AllocationCandidates([], {})
        allowed = self._allowed_anchors()
        if allowed is not None and not allowed.any():
            return empty, 0
        matches: list[_Matches] = []
        for group in self.groups:
            found = self._single(group, allowed) if group.suffix else self._spread(group, allowed)
            if found is None or not len(found.anchors):
                return empty, 0
            matches.append(found)
        anchors = matches[0].anchors
        for m in matches[1:]:
            anchors = np.intersect1d(anchors, m.anchors, assume_unique=True)
        if not len(anchors):
            return empty, 0
        anchors = anchors[np.argsort(self._rank()[anchors], kind="stable")]
        # each group's ways at each anchor: (start, count) rows
        spans = [m.spans(anchors) for m in matches]
        suffixes = [g.suffix for g in self.groups]
        if self._independent(suffixes):
            results: Any = _Grid(anchors, spans, self.options)
        else:
            results = self._generate(anchors, matches, spans, suffixes)
        found = len(results)
        limit = self.query.limit
        chosen: Any = range(found)
        if limit is not None and found > limit:
            chosen = sorted((rng or random).sample(range(found), limit))
        if isinstance(results, list):
            return self._answer([results[i] for i in chosen], suffixes), found
        return self._answer_grid(results.ways(chosen), matches, suffixes), found

    def _independent(self, suffixes: list[str]) -> bool:
        """Whether every combination of one way per group is a candidate: no class asked
        by two groups (whose amounts would add up on one provider), no isolate between
        granular groups, no same_subtree, no request reached through several anchors."""
        if self.sharing_used or self.query.same_subtree:
            return False
        if self.query.group_policy == "isolate" and sum(1 for s in suffixes if s) > 1:
            return False
        classes: set[str] = set()
        for g in self.groups:
            for rc, n in g.resources.items():
                if n:
                    if rc in classes:
                        return False
                    classes.add(rc)
        return True

    def _generate(
        self,
        anchors: np.ndarray,
        matches: list[_Matches],
        spans: list[np.ndarray],
        suffixes: list[str],
    ) -> list[tuple[_Pick, ...]]:
        """The combinations that pass group_policy, same_subtree and capacity, in the
        strategy's order, at most ``max_allocation_candidates``.

        Each anchor's combinations come in ``itertools.product`` order, as Placement makes
        them, but a combination whose first groups already exceed a capacity or ``max_unit``,
        or already put two isolated groups on one provider, is not extended (everything it
        would extend to fails the same way): a wide tree asked for many devices with isolate
        (Placement bug 2070257: 8 devices and 6 groups are 262,144 products a tree, 20,160 of
        them candidates) costs the candidates, not the products. Breadth-first takes the
        anchors in turns of Placement's products: the k-th product of every anchor before any
        anchor's (k+1)-th, skipped products included."""
        options = self.options
        cap = options.max_allocation_candidates
        granular = [i for i, s in enumerate(suffixes) if s]
        isolated = (
            frozenset(granular)
            if self.query.group_policy == "isolate" and len(granular) > 1
            else frozenset()
        )
        subtrees = [
            [i for i, s in enumerate(suffixes) if s in subtree]
            for subtree in self.query.same_subtree
            if subtree
        ]
        budget = _Budget()
        walks = [
            self._walk(
                [
                    [m.pick(start + j) for j in range(count)]
                    for m, (start, count) in zip(matches, (span[k] for span in spans), strict=True)
                ],
                isolated,
                budget,
            )
            for k in range(len(anchors))
        ]
        breadth = options.allocation_candidates_generation_strategy == "breadth-first"
        if breadth and cap >= 0:  # (without a cap the order within each anchor is the same)
            stream: Iterator[tuple[_Pick, ...]] = _in_turns(walks)
        else:
            stream = (combo for walk in walks for _, combo in walk)
        results: list[tuple[_Pick, ...]] = []
        seen: set[Any] = set()
        for combo in stream:
            if subtrees and not all(self._same_subtree(combo, members) for members in subtrees):
                continue
            if self.sharing_used:
                key = _key(combo, suffixes)
                if key in seen:
                    continue
                seen.add(key)
            results.append(combo)
            if cap >= 0 and len(results) >= cap:
                break
        return results

    def _walk(
        self, lists: list[list[_Pick]], isolated: frozenset[int], budget: _Budget
    ) -> Iterator[tuple[int, tuple[_Pick, ...]]]:
        """One anchor's combinations of one way per group (``lists``) that stay within
        every capacity and ``max_unit`` and keep the ``isolated`` groups on distinct
        providers, in product order, each with its index among all the products."""
        depth = len(lists)
        weights = [1] * depth
        for level in range(depth - 2, -1, -1):
            weights[level] = weights[level + 1] * len(lists[level + 1])
        room = self._room
        # each way: the pick, its provider when its group is isolated (else -1), and what it
        # takes: ((slot, class), amount, room)
        ways = [
            [
                (
                    pick,
                    pick.mapped[0] if level in isolated else -1,
                    tuple(((slot, rc), n, room((slot, rc))) for slot, rc, n in pick.taken),
                )
                for pick in picks
            ]
            for level, picks in enumerate(lists)
        ]
        totals: dict[tuple[int, str], int] = {}
        taken_by_isolated: set[int] = set()
        chosen: list[Any] = [None] * depth
        at = [0] * depth  # the way each level tries next
        index = 0  # the product index of the ways chosen above the current level
        last = depth - 1
        level = 0
        budget.spend(len(ways[0]))
        # depth first, one frame: choose a way at ``level``, go down, come back up
        while True:
            options = ways[level]
            j = at[level]
            if j == len(options):
                at[level] = 0
                level -= 1
                if level < 0:
                    return
                # take back the way chosen at the level above, and try its next one
                _, provider, takes = ways[level][at[level]]
                for key, amount, _ in takes:
                    totals[key] -= amount
                if provider >= 0:
                    taken_by_isolated.discard(provider)
                index -= at[level] * weights[level]
                at[level] += 1
                continue
            pick, provider, takes = options[j]
            if provider >= 0 and provider in taken_by_isolated:
                at[level] = j + 1
                continue
            added = 0
            for key, amount, limit in takes:
                total = totals.get(key, 0) + amount
                if total > limit:
                    break
                totals[key] = total
                added += 1
            if added < len(takes):
                for key, amount, _ in takes[:added]:
                    totals[key] -= amount
                at[level] = j + 1
                continue
            chosen[level] = pick
            if level == last:
                yield index + j, tuple(chosen)
                for key, amount, _ in takes:
                    totals[key] -= amount
                at[level] = j + 1
                continue
            if provider >= 0:
                taken_by_isolated.add(provider)
            index += j * weights[level]
            level += 1
            budget.spend(len(ways[level]))

    def _room(self, key: tuple[int, str]) -> int:
        """How much one request may take of a provider's class: within its capacity left
        and its max_unit."""
        room = self._rooms.get(key)
        if room is None:
            slot, rc = key
            column = self.view.column(rc)
            room = int(min(column.capacity[slot] - column.used[slot], column.max_unit[slot]))
            self._rooms[key] = room
        return room

    def _same_subtree(self, combo: tuple[_Pick, ...], members: list[int]) -> bool:
        providers = {p for i in members for p in combo[i].mapped}
        if len(providers) <= 1:
            return True
        common = frozenset.intersection(*(self._ancestors(p) for p in providers))
        return bool(common & providers)

    # -- 4. the answer -------------------------------------------------------------------------
    def _uuids(self) -> list[str]:
        """Each slot's provider uuid (cached until the indexes change)."""
        key = ("uuids", self.size)
        cached = self.view.derived.get(key)
        if cached is None:
            cached = [e.rec.uuid if e is not None else "" for e in self.slots]
            self.view.derived[key] = cached
        return cached

    def _answer_grid(
        self, rows: np.ndarray, matches: list[_Matches], suffixes: list[str]
    ) -> AllocationCandidates:
        """The answer of chosen grid combinations (``rows``: one flat index per group and
        combination): one provider per way, or a pick."""
        uuid_of = self._uuids()
        columns: list[tuple[str, list[Any], dict[str, int] | None]] = []
        given: list[np.ndarray] = []  # the slots that give resources
        for g, m in enumerate(matches):
            at = rows[:, g]
            if m.picks is None:
                slots = m.providers[at]
                if m.amounts:
                    given.append(slots)
                columns.append((suffixes[g], [uuid_of[s] for s in slots.tolist()], dict(m.amounts)))
            else:
                picks = [m.picks[i] for i in at.tolist()]
                given.extend(
                    np.fromiter((slot for slot, _, _ in p.taken), dtype=np.int64) for p in picks
                )
                columns.append((suffixes[g], picks, None))
        requests = []
        for r in range(len(rows)):
            allocations: dict[str, dict[str, dict[str, int]]] = {}
            mappings: dict[str, list[str]] = {}
            for suffix, ways, amounts in columns:
                if amounts is not None:
                    uuid = ways[r]
                    if amounts:
                        body = allocations.get(uuid)
                        if body is None:
                            allocations[uuid] = {"resources": dict(amounts)}
                        else:  # (no class is asked by two groups here)
                            body["resources"].update(amounts)
                    mappings[suffix] = [uuid]
                    continue
                mapped, taken = ways[r]
                for slot, rc, n in taken:
                    body = allocations.setdefault(uuid_of[slot], {"resources": {}})
                    body["resources"][rc] = n
                mappings[suffix] = [uuid_of[p] for p in mapped]
            requests.append({"allocations": allocations, "mappings": mappings})
        roots: Any = ()
        if given:
            root_slots = self.shape.root[np.unique(np.concatenate(given))]
            roots = [uuid_of[s] for s in np.unique(root_slots[root_slots >= 0]).tolist()]
        return AllocationCandidates(requests, self.view.summaries(roots))

    def _answer(
        self, results: list[tuple[_Pick, ...]], suffixes: list[str]
    ) -> AllocationCandidates:
        slots = self.slots
        uuids: dict[int, str] = {}  # slot -> uuid, for this answer
        used: set[int] = set()  # the providers that give resources
        requests = []
        for combo in results:
            allocations: dict[str, dict[str, dict[str, int]]] = {}
            mappings: dict[str, list[str]] = {}
            for suffix, (mapped, taken) in zip(suffixes, combo, strict=True):
                for slot, rc, n in taken:
                    uuid = uuids.get(slot)
                    if uuid is None:
                        uuid = uuids[slot] = slots[slot].rec.uuid
                        used.add(slot)
                    body = allocations.get(uuid)
                    if body is None:
                        allocations[uuid] = {"resources": {rc: n}}
                    else:
                        resources = body["resources"]
                        resources[rc] = resources.get(rc, 0) + n
                # (a group's providers are distinct, and each group has its own suffix)
                mappings[suffix] = [uuids.get(p) or slots[p].rec.uuid for p in mapped]
            requests.append({"allocations": allocations, "mappings": mappings})
        summaries = self.view.summaries({slots[slot].rec.root_uuid for slot in used})
        return AllocationCandidates(requests, summaries)


class _Matches:
    """One group's ways, per anchor: ``anchors`` (slots, ascending), and for each the
    ``starts``/``counts`` of its ways in a flat list (``pick(i)``)."""

    __slots__ = ("anchors", "starts", "counts", "providers", "amounts", "picks")

    def __init__(self, anchors: np.ndarray, starts: np.ndarray, counts: np.ndarray):
        self.anchors = anchors
        self.starts = starts
        self.counts = counts
        # one provider per way (``providers``, each taking ``amounts``), or a list of picks
        self.providers: np.ndarray = np.empty(0, dtype=np.int64)
        self.amounts: tuple = ()
        self.picks: list[_Pick] | None = None

    @classmethod
    def of_pairs(
        cls,
        providers: np.ndarray,
        anchors: np.ndarray,
        rank: np.ndarray,
        amounts: tuple,
    ) -> _Matches:
        """One provider per way: (provider, anchor) pairs, each anchor's in name order."""
        order = np.lexsort((rank[providers], anchors))
        providers, anchors = providers[order], anchors[order]
        unique, starts, counts = np.unique(anchors, return_index=True, return_counts=True)
        found = cls(unique, starts, counts)
        found.providers = providers
        found.amounts = amounts
        return found

    @classmethod
    def of_lists(cls, lists: dict[int, list[_Pick]]) -> _Matches:
        anchors = np.asarray(sorted(lists), dtype=np.int64)
        counts = np.asarray([len(lists[a]) for a in anchors.tolist()], dtype=np.int64)
        starts = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
        found = cls(anchors, starts, counts)
        found.picks = [p for a in anchors.tolist() for p in lists[a]]
        return found

    def spans(self, anchors: np.ndarray) -> np.ndarray:
        """(start, count) of each of ``anchors`` (all of them among this group's)."""
        at = np.searchsorted(self.anchors, anchors)
        return np.stack((self.starts[at], self.counts[at]), axis=1)

    def pick(self, i: int) -> _Pick:
        if self.picks is not None:
            return self.picks[i]
        slot = int(self.providers[i])
        return _Pick((slot,), tuple((slot, rc, n) for rc, n in self.amounts))


class _Grid:
    """Every combination of one way per group at each anchor (all of them candidates), as
    Placement generates them: anchors in order, each anchor's combinations in
    ``itertools.product`` order; ``max_allocation_candidates`` keeps a prefix of each
    anchor's (depth-first: whole anchors first; breadth-first: one per anchor in turn)."""

    def __init__(self, anchors: np.ndarray, spans: list[np.ndarray], options: Any):
        self.counts = [span[:, 1] for span in spans]
        sizes = np.ones(len(anchors), dtype=np.int64)
        for counts in self.counts:
            sizes = sizes * counts
        cap = options.max_allocation_candidates
        if cap >= 0:
            sizes = _capped(sizes, cap, options.allocation_candidates_generation_strategy)
        self.spans = spans
        self.sizes = sizes
        self.ends = np.cumsum(sizes)

    def __len__(self) -> int:
        return int(self.ends[-1]) if len(self.ends) else 0

    def ways(self, chosen: Any) -> np.ndarray:
        """For each chosen index, each group's way: the flat index of its pick (one row per
        chosen index, one column per group)."""
        chosen = np.asarray(chosen, dtype=np.int64)
        at = np.searchsorted(self.ends, chosen, side="right")
        offset = chosen - (self.ends[at] - self.sizes[at])
        rows = np.empty((len(chosen), len(self.spans)), dtype=np.int64)
        for g in range(len(self.spans) - 1, -1, -1):  # the last group varies fastest
            count = self.spans[g][at, 1]
            offset, j = np.divmod(offset, count)
            rows[:, g] = self.spans[g][at, 0] + j
        return rows


def _capped(sizes: np.ndarray, cap: int, strategy: str) -> np.ndarray:
    """How many of each anchor's combinations Placement generates before it stops at
    ``cap`` (at least one: it checks the cap after adding)."""
    cap = max(cap, 1)
    if sizes.sum() <= cap:
        return sizes
    if strategy == "breadth-first":
        # round r takes the r-th combination of every anchor that has one
        kept = np.zeros_like(sizes)
        left = cap
        while left:
            has_more = kept < sizes
            if has_more.sum() <= left:
                kept += has_more
                left -= int(has_more.sum())
            else:
                idx = np.flatnonzero(has_more)[:left]
                kept[idx] += 1
                left = 0
        return kept
    ends = np.cumsum(sizes)
    return np.clip(sizes - np.maximum(ends - cap, 0), 0, None)


def _key(combo: tuple[_Pick, ...], suffixes: list[str]) -> tuple:
    """What makes two results equal for Placement: the amounts per provider and class, and
    the providers mapped to each group."""
    totals: dict[tuple[int, str], int] = {}
    mapped: dict[str, set[int]] = {}
    for suffix, pick in zip(suffixes, combo, strict=True):
        for slot, rc, n in pick.taken:
            totals[slot, rc] = totals.get((slot, rc), 0) + n
        mapped.setdefault(suffix, set()).update(pick.mapped)
    return (
        frozenset(totals.items()),
        frozenset((s, frozenset(p)) for s, p in mapped.items()),
    )


class _Budget:
    """The steps one search may take examining combinations (``MAX_EXAMINED``)."""

    __slots__ = ("left",)

    def __init__(self) -> None:
        self.left = MAX_EXAMINED

    def spend(self, steps: int) -> None:
        self.left -= steps
        if self.left < 0:
            # (the view's lock is held: a query this wide must not stop the others)
            raise TooWide(f"more than {MAX_EXAMINED:,} combinations of request groups")


def _in_turns(walks: list[Iterator[tuple[int, Any]]]) -> Iterator[Any]:
    """The walks' combinations by their product index, and among equal indices by walk
    (Placement's round robin over the anchors' products, the skipped ones taking their
    turn too)."""
    heap: list[tuple[int, int, Any]] = []
    for k, walk in enumerate(walks):
        first = next(walk, None)
        if first is not None:
            heap.append((first[0], k, first[1]))
    heapq.heapify(heap)
    while heap:
        _, k, combo = heap[0]
        yield combo
        following = next(walks[k], None)
        if following is None:
            heapq.heappop(heap)
        else:
            heapq.heapreplace(heap, (following[0], k, following[1]))
