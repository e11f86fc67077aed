"""The provider view: Placement's providers held in the scheduler, and candidates from it.

The view keeps, for every resource provider, what a feed last read of it (``ProviderRecord``:
inventories, usage, traits, aggregates, tree, generation) plus the scheduler's own claims that
the read may not include yet ("assumed", as kube-scheduler assumes a pod on its node). The
usage it decides on is the read usage plus those claims.

``candidates(query)`` answers ``GET /allocation_candidates`` for the shapes it can answer
exactly (see ``unsupported_reason``): one unsuffixed request group whose resource classes are
provided only by root providers, with required/forbidden traits, ``root_required``,
``member_of`` (AND of OR-sets, and forbidden) and ``in_tree``. Anything else, and anything the
view is not sure of (not loaded yet, too old, a class also on child or sharing providers),
comes back as ``ViewAnswer.candidates is None`` with the reason, and the caller asks Placement.

Placement still decides: every claim is a ``PUT /allocations`` that Placement checks. A claim
Placement refuses marks its providers dirty (``mark_dirty``) and the refresher reads them again.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from scheduler.placement.api import AllocationCandidates, AllocationCandidatesQuery
from scheduler.placement.view.model import ProviderRecord

LOG = logging.getLogger(__name__)

_NO_ROOTS: frozenset[str] = frozenset()
# consumers whose own claims are remembered for forget() after Placement confirmed them
_REMEMBERED_CONSUMERS = 100_000


@dataclass(slots=True)
class ViewAnswer:
    """``candidates`` is None when the view cannot answer (``reason`` says why)."""

    candidates: AllocationCandidates | None
    reason: str = ""
    age: float | None = None  # seconds since the view's last successful refresh
    matched: int = 0  # providers that fit, before ``limit`` sampled them


class _Entry:
    """One provider: the record as read, the own claims it may not include, and the
    effective usage and room per resource class that candidates are computed from."""

    __slots__ = ("rec", "claims", "used", "slot", "_summary")

    def __init__(self, rec: ProviderRecord):
        self.rec = rec
        # consumer -> (resources, monotonic time the claim was answered)
        self.claims: dict[str, tuple[dict[str, int], float]] = {}
        self.used: dict[str, int] = rec.used
        self.slot = -1  # the row of a root provider in the view's columns
        self._summary: dict[str, Any] | None = None

    def recompute(self) -> None:
        """The usage to decide on: the read's plus the own claims it does not include."""
        used = self.rec.used
        if self.claims:
            used = dict(used)
            for resources, _ in self.claims.values():
                for rc, n in resources.items():
                    used[rc] = used.get(rc, 0) + n
        self.used = used
        self._summary = None

    @property
    def expected_generation(self) -> int:
        """The generation after the own claims not in the record (each bumps it by one)."""
        return self.rec.generation + len(self.claims)

    def summary(self) -> dict[str, Any]:
        """The provider's ``provider_summaries`` entry (made once per change and shared
        by every answer: read-only)."""
        summary = self._summary
        if summary is None:
            rec = self.rec
            summary = self._summary = {
                "resources": {
                    rc: {"capacity": inv.capacity, "used": self.used.get(rc, 0)}
                    for rc, inv in rec.inventories.items()
                },
                "traits": sorted(rec.traits),
                "parent_provider_uuid": rec.parent_uuid,
                "root_provider_uuid": rec.root_uuid,
            }
        return summary


class _Column:
    """One resource class over every root slot: what Placement checks an amount against.
    A slot without that inventory (or free) has ``limit = -inf``: nothing fits it."""

    __slots__ = ("used", "limit", "min_unit", "max_unit", "step")

    def __init__(self, size: int):
        self.used = np.zeros(size, dtype=np.float64)
        self.limit = np.full(size, -np.inf, dtype=np.float64)
        self.min_unit = np.ones(size, dtype=np.int64)
        self.max_unit = np.zeros(size, dtype=np.int64)
        self.step = np.ones(size, dtype=np.int64)

    def grow(self, size: int) -> None:
        for name, fill in (("used", 0), ("limit", -np.inf), ("min_unit", 1), ("max_unit", 0)):
            old = getattr(self, name)
            new = np.full(size, fill, dtype=old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)
        step = np.ones(size, dtype=np.int64)
        step[: len(self.step)] = self.step
        self.step = step

    def clear(self, slot: int) -> None:
        self.limit[slot] = -np.inf
        self.used[slot] = 0

    def fits(self, rows: Any, amount: int) -> Any:
        """Placement's check for ``amount`` on the slots ``rows`` (a slice or an index
        array): used + amount <= (total - reserved) * ratio, min/max unit, step size."""
        return (
            (self.used[rows] + amount <= self.limit[rows])
            & (self.min_unit[rows] <= amount)
            & (self.max_unit[rows] >= amount)
            & (amount % self.step[rows] == 0)
        )


def unsupported_reason(query: AllocationCandidatesQuery) -> str | None:
    """Why the view cannot answer this query whatever it holds, or None."""
    if query.same_subtree:
        return "same_subtree"
    groups = query.effective_groups()
    if not groups:
        return "an empty query"
    if len(groups) > 1 or groups[0].suffix:
        return "granular request groups"
    if not groups[0].has_resources():
        return "a request group without resources"
    return None


class ProviderView:
    """Every resource provider of Placement, as the scheduler last read it (thread-safe)."""

    def __init__(self, *, max_age: float = 10.0, clock: Callable[[], float] = time.monotonic):
        self.max_age = max_age
        self.source = ""  # the feed's name, for explain and logs
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._roots: dict[str, _Entry] = {}
        self._children: dict[str, set[str]] = {}  # root uuid -> its descendants
        self._by_trait: dict[str, set[str]] = {}  # trait -> root uuids
        self._by_aggregate: dict[str, set[str]] = {}  # aggregate -> root uuids
        self._nested_classes: Counter[str] = Counter()  # classes on non-root providers
        self._shared_classes: Counter[str] = Counter()  # classes on sharing providers
        self._claimed_by: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        # provider -> when it was marked (monotonic): a read that began later clears it
        self._dirty: dict[str, float] = {}
        # root providers as rows of NumPy columns, one column per resource class
        self._slots: list[_Entry | None] = []
        self._free_slots: list[int] = []
        self._columns: dict[str, _Column] = {}
        self._loaded = False
        self._refreshed_at: float | None = None
        self.changed = threading.Event()  # set when something asks for a refresh now
        self.alloc_rows_total = 0
        self.used_total = 0
        # own claims counted and not yet in a read (each bumped its provider's generation
        # once): the database feed's per-request check expects them in Placement's sums
        self.claims_pending = 0
        # how many reads were applied (full or partial): a request that asked the view before
        # its freshness check was answered knows the view it asked did not change meanwhile
        self.reads_applied = 0
        # called with (consumer, provider) when a read shows that a consumer no longer holds
        # that provider: an own claim a read that began after it does not include (deleted),
        # or a consumer the previous read of the provider showed. Outside the view's lock;
        # what it raises is logged and swallowed.
        self.on_consumer_gone: Callable[[str, str], None] | None = None

    # -- the feed's side ---------------------------------------------------------------------
    def replace_all(self, records: Iterable[ProviderRecord], fetched_at: float) -> None:
        """A full read: the view becomes exactly ``records`` (own claims made after
        ``fetched_at`` that the read does not include are kept)."""
        records = list(records)
        with self._lock:
            gone = set(self._entries) - {r.uuid for r in records}
            left = self._apply(records, gone, fetched_at)
            self._loaded = True
            self._refreshed_at = fetched_at
        self._tell_consumers_gone(left)

    def apply(
        self, records: Iterable[ProviderRecord], removed: Iterable[str], fetched_at: float
    ) -> None:
        """Providers read again (``fetched_at``: monotonic time the read began) and
        providers that no longer exist."""
        with self._lock:
            left = self._apply(list(records), set(removed), fetched_at)
        self._tell_consumers_gone(left)

    def mark_refreshed(self, started_at: float) -> None:
        """A refresh that began at ``started_at`` has seen every change made before it."""
        with self._lock:
            if self._refreshed_at is None or started_at > self._refreshed_at:
                self._refreshed_at = started_at

    @property
    def refreshed_at(self) -> float | None:
        """When (the view's clock) the last refresh that saw every change made before it
        began; None before the first read."""
        return self._refreshed_at

    def _apply(
        self, records: list[ProviderRecord], removed: set[str], fetched_at: float
    ) -> list[tuple[str, str]]:
        """Apply a read; returns the (consumer, provider) pairs the read shows gone."""
        self.reads_applied += 1
        left: list[tuple[str, str]] = []
        for uuid in removed:
            old = self._entries.pop(uuid, None)
            if old is not None:
                self._unindex(old)
                self.claims_pending -= len(old.claims)
            self._dirty.pop(uuid, None)
        for rec in records:
            old = self._entries.get(rec.uuid)
            entry = _Entry(rec)
            if old is not None:
                self._unindex(old)
                self.claims_pending -= len(old.claims)
                # keep the own claims the read may have been too early to see; one the
                # read began after and does not include was deleted
                kept = {}
                for c, claim in old.claims.items():
                    if c in rec.consumers:
                        continue
                    if claim[1] >= fetched_at:
                        kept[c] = claim
                    else:
                        left.append((c, rec.uuid))
                if kept:
                    entry.claims = kept
                    entry.recompute()
                    self.claims_pending += len(kept)
                if old.rec.consumers:
                    left.extend((c, rec.uuid) for c in old.rec.consumers - rec.consumers)
            self._entries[rec.uuid] = entry
            self._index(entry)
            marked = self._dirty.get(rec.uuid)
            if marked is not None and marked <= fetched_at:
                del self._dirty[rec.uuid]
        return left

    def _tell_consumers_gone(self, left: list[tuple[str, str]]) -> None:
        hook = self.on_consumer_gone
        if hook is None or not left:
            return
        for consumer, provider in left:
            try:
                hook(consumer, provider)
            except Exception:  # the view's refresh must go on whatever the hook does
                LOG.exception(
                    "The provider view's on_consumer_gone hook failed for %s on %s",
                    consumer,
                    provider,
                )

    def _index(self, entry: _Entry) -> None:
        rec = entry.rec
        self.alloc_rows_total += rec.alloc_rows
        self.used_total += rec.used_total
        if rec.is_root:
            self._roots[rec.uuid] = entry
            self._place(entry)
            for t in rec.traits:
                self._by_trait.setdefault(t, set()).add(rec.uuid)
            for a in rec.aggregates:
                self._by_aggregate.setdefault(a, set()).add(rec.uuid)
        else:
            self._children.setdefault(rec.root_uuid, set()).add(rec.uuid)
            self._nested_classes.update(rec.inventories.keys())
        if rec.shares:
            self._shared_classes.update(rec.inventories.keys())

    def _unindex(self, entry: _Entry) -> None:
        rec = entry.rec
        self.alloc_rows_total -= rec.alloc_rows
        self.used_total -= rec.used_total
        if rec.is_root:
            self._roots.pop(rec.uuid, None)
            self._release(entry)
            for index, keys in ((self._by_trait, rec.traits), (self._by_aggregate, rec.aggregates)):
                for k in keys:
                    members = index.get(k)
                    if members is not None:
                        members.discard(rec.uuid)
                        if not members:
                            del index[k]
        else:
            kids = self._children.get(rec.root_uuid)
            if kids is not None:
                kids.discard(rec.uuid)
                if not kids:
                    del self._children[rec.root_uuid]
            self._nested_classes.subtract(rec.inventories.keys())
            self._nested_classes += Counter()  # drop the zeros
        if rec.shares:
            self._shared_classes.subtract(rec.inventories.keys())
            self._shared_classes += Counter()

    # -- the columns ---------------------------------------------------------------------------
    def _place(self, entry: _Entry) -> None:
        """Give a root provider a row in the columns and write it."""
        if self._free_slots:
            slot = self._free_slots.pop()
            self._slots[slot] = entry
        else:
            slot = len(self._slots)
            self._slots.append(entry)
            size = len(next(iter(self._columns.values())).limit) if self._columns else 0
            if slot >= size:
                new_size = max(64, size * 2)
                for column in self._columns.values():
                    column.grow(new_size)
        entry.slot = slot
        self._write(entry)

    def _release(self, entry: _Entry) -> None:
        slot = entry.slot
        if slot < 0:
            return
        for column in self._columns.values():
            column.clear(slot)
        self._slots[slot] = None
        self._free_slots.append(slot)
        entry.slot = -1

    def _write(self, entry: _Entry) -> None:
        """Write a root's inventories and usage into its row (after any change of either)."""
        slot = entry.slot
        if slot < 0:
            return
        inventories = entry.rec.inventories
        used = entry.used
        for rc, column in self._columns.items():
            if rc not in inventories:
                column.clear(slot)
        for rc, inv in inventories.items():
            column = self._columns.get(rc)
            if column is None:
                size = len(next(iter(self._columns.values())).limit) if self._columns else 64
                column = self._columns[rc] = _Column(max(size, len(self._slots)))
            column.used[slot] = used.get(rc, 0)
            column.limit[slot] = inv.limit
            column.min_unit[slot] = inv.min_unit
            column.max_unit[slot] = inv.max_unit
            column.step[slot] = max(1, inv.step_size)

    def known(self, uuid: str) -> tuple[int, int] | None:
        """(generation read, generation expected after the own claims) of a provider."""
        entry = self._entries.get(uuid)
        if entry is None:
            return None
        return entry.rec.generation, entry.expected_generation

    def record(self, uuid: str) -> ProviderRecord | None:
        entry = self._entries.get(uuid)
        return entry.rec if entry is not None else None

    def uuids(self) -> list[str]:
        with self._lock:
            return list(self._entries)

    def take_dirty(self) -> set[str]:
        """The providers someone asked to be read again (and forget the request)."""
        with self._lock:
            dirty, self._dirty = self._dirty, {}
            self.changed.clear()
            return set(dirty)

    def mark_dirty(self, uuids: Iterable[str]) -> None:
        """Read these providers again at the next refresh, which is woken now. A read that
        began before the mark does not clear it."""
        now = self._clock()
        with self._lock:
            for u in uuids:
                if u:
                    self._dirty[u] = now
        self.changed.set()

    # -- the scheduler's side -----------------------------------------------------------------
    @property
    def loaded(self) -> bool:
        return self._loaded

    def __len__(self) -> int:
        return len(self._entries)

    def now(self) -> float:
        """The view's clock (monotonic seconds): what ``refreshed_at`` and the feeds use."""
        return self._clock()

    def age(self) -> float | None:
        """Seconds since the last refresh began; None before the first read."""
        at = self._refreshed_at
        return None if at is None else max(0.0, self._clock() - at)

    def assume(self, consumer: str, allocations: dict[str, Any]) -> None:
        """A claim Placement accepted (``allocations``: ``{rp: {"resources": {rc: n}}}``):
        count it at once, until a read of the provider includes it."""
        now = self._clock()
        with self._lock:
            providers = []
            for rp, body in allocations.items():
                resources = {rc: int(n) for rc, n in body.get("resources", {}).items() if n}
                entry = self._entries.get(rp)
                providers.append(rp)
                if entry is None:
                    continue
                if consumer in entry.rec.consumers:
                    # the consumer already held allocations there (a move on the same host):
                    # its new amounts replace the old, which only a read can tell
                    self._dirty[rp] = now
                    self.changed.set()
                    continue
                if consumer not in entry.claims:
                    self.claims_pending += 1
                entry.claims[consumer] = (resources, now)
                entry.recompute()
                self._write(entry)
            self._claimed_by[consumer] = tuple(providers)
            self._claimed_by.move_to_end(consumer)
            while len(self._claimed_by) > _REMEMBERED_CONSUMERS:
                self._claimed_by.popitem(last=False)

    def forget(self, consumer: str) -> None:
        """The consumer's claims were deleted (a rollback): stop counting them. A read that
        already includes them is out of date (a DELETE does not change a provider's
        generation), so those providers are read again."""
        dirty = []
        with self._lock:
            for rp in self._claimed_by.pop(consumer, ()):
                entry = self._entries.get(rp)
                if entry is None:
                    continue
                if entry.claims.pop(consumer, None) is not None:
                    self.claims_pending -= 1
                    entry.recompute()
                    self._write(entry)
                if consumer in entry.rec.consumers:
                    dirty.append(rp)
        if dirty:
            self.mark_dirty(dirty)

    def candidates(
        self,
        query: AllocationCandidatesQuery,
        *,
        rng: random.Random | None = None,
    ) -> ViewAnswer:
        """The allocation candidates Placement would return for ``query``, or why not.

        With ``query.limit`` and more providers that fit, a uniform random sample of that
        many (Placement's ``randomize_allocation_candidates = True``)."""
        reason = unsupported_reason(query)
        if reason is not None:
            return ViewAnswer(None, f"the view does not answer {reason}")
        age = self.age()
        if not self._loaded or age is None:
            return ViewAnswer(None, "the provider view is not loaded yet")
        if age > self.max_age:
            return ViewAnswer(None, f"the provider view is {age:.1f} s old", age)
        group = query.effective_groups()[0]
        amounts = [(rc, n) for rc, n in group.resources.items() if n]
        with self._lock:
            for rc, _ in amounts:
                if self._nested_classes.get(rc):
                    return ViewAnswer(None, f"{rc} is also provided by nested providers", age)
                if self._shared_classes.get(rc):
                    return ViewAnswer(None, f"{rc} is also provided by sharing providers", age)
            matched = self._scan(group, query, amounts)
            found = len(matched)
            if query.limit is not None and found > query.limit:
                picked = (rng or random).sample(range(found), query.limit)
                matched = matched[picked]
            slots = self._slots
            answer = self._answer([slots[i] for i in matched.tolist()], dict(amounts))
        return ViewAnswer(answer, "", age, found)

    def _scan(self, group: Any, query: AllocationCandidatesQuery, amounts: list) -> Any:
        """The slots of the roots that match (a NumPy index array)."""
        pool = self._pool(group, query)
        n_slots = len(self._slots)
        if pool is None:
            rows: Any = slice(0, n_slots)
            base = np.arange(n_slots)
        else:
            base = np.fromiter((self._roots[u].slot for u in pool), dtype=np.int64)
            rows = base
        if not len(base):
            return base
        ok = np.ones(len(base), dtype=bool)
        for rc, n in amounts:
            column = self._columns.get(rc)
            if column is None:
                return base[:0]
            ok &= column.fits(rows, n)
        excluded: set[str] = set()
        for trait in group.forbidden_traits | query.root_forbidden:
            excluded |= self._by_trait.get(trait, _NO_ROOTS)
        for agg in group.forbidden_aggregates:
            excluded |= self._by_aggregate.get(agg, _NO_ROOTS)
        matched = base[ok]
        if excluded and len(matched):
            out = np.fromiter((self._roots[u].slot for u in excluded), dtype=np.int64)
            matched = matched[~np.isin(matched, out)]
        return matched

    def _pool(self, group: Any, query: AllocationCandidatesQuery) -> Iterable[str] | None:
        """The root uuids that can match by traits, aggregates and tree alone (None: every
        root)."""
        pool: set[str] | None = None
        for trait in group.required_traits | query.root_required:
            members = self._by_trait.get(trait, _NO_ROOTS)
            pool = set(members) if pool is None else pool & members
            if not pool:
                return ()
        for or_set in group.member_of:
            members = set()
            for agg in or_set:
                members |= self._by_aggregate.get(agg, _NO_ROOTS)
            pool = members if pool is None else pool & members
            if not pool:
                return ()
        if group.in_tree:
            entry = self._entries.get(group.in_tree)
            # Placement: in_tree names a tree by any of its providers; an unknown uuid finds
            # nothing. A provider whose root the view does not hold (a refresh that read a
            # child and then found its root deleted) has no candidate either: an empty answer
            # sends the request to Placement.
            if entry is None or entry.rec.root_uuid not in self._roots:
                return ()
            root = {entry.rec.root_uuid}
            pool = root if pool is None else pool & root
        return pool

    def _answer(self, matched: list[_Entry], amounts: dict[str, int]) -> AllocationCandidates:
        requests = []
        summaries: dict[str, dict[str, Any]] = {}
        for entry in matched:
            uuid = entry.rec.uuid
            requests.append(
                {"allocations": {uuid: {"resources": dict(amounts)}}, "mappings": {"": [uuid]}}
            )
            summaries[uuid] = entry.summary()
            for child in self._children.get(uuid, ()):
                summaries[child] = self._entries[child].summary()
        return AllocationCandidates(requests, summaries)
