"""The provider view: Placement's providers held in the scheduler, and candidates from it.

The view keeps, for every resource provider, what a feed last read of it (``ProviderRecord``:
inventories, usage, traits, aggregates, tree, generation) plus the scheduler's own claims that
the read may not include yet ("assumed", as kube-scheduler assumes a pod on its node). The
usage it decides on is the read usage plus those claims.

Every provider, root or not, is a row ("slot") of NumPy columns: one column per resource
class (what Placement checks an amount against) and the tree's shape (each slot's root slot,
whether it is a root, whether it shares through an aggregate). ``candidates(query)`` answers
``GET /allocation_candidates`` as Placement 16 does for every query nova 34 sends:

* one unsuffixed group whose classes only root providers have (a flat fleet, the common
  case) is answered by a scan of the root slots (``_scan``);
* everything else (request groups, resourceless groups, any-of traits, ``same_subtree``,
  ``group_policy``, nested and sharing providers) by ``search.TreeSearch``, which follows
  Placement's own steps (docs/architecture.md, "The provider view").

What the view is not sure of (not loaded yet, too old) comes back as ``ViewAnswer.candidates
is None`` with the reason, and the caller asks Placement.

Placement still decides: every claim is a ``PUT /allocations`` that Placement checks. A claim
Placement refuses marks its providers dirty (``mark_dirty``) and the refresher reads them again.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from placement_client.api import AllocationCandidates, AllocationCandidatesQuery
from placement_client.view.model import ProviderRecord
from placement_client.view.search import SearchOptions, TooWide, TreeSearch

LOG = logging.getLogger(__name__)

_NO_PROVIDERS: frozenset[str] = frozenset()
# consumers whose own claims are remembered for forget() after Placement confirmed them
_REMEMBERED_CONSUMERS = 100_000


@dataclass(slots=True)
class ViewAnswer:
    """``candidates`` is None when the view cannot answer (``reason`` says why)."""

    candidates: AllocationCandidates | None
    reason: str = ""
    age: float | None = None  # seconds since the view's last successful refresh
    matched: int = 0  # allocation requests that fit, before ``limit`` sampled them


class _Entry:
    """One provider: the record as read, the own claims it may not include, and the
    effective usage and room per resource class that candidates are computed from."""

    __slots__ = ("rec", "claims", "used", "slot", "_summary")

    def __init__(self, rec: ProviderRecord):
        self.rec = rec
        # consumer -> (resources, monotonic time the claim was answered)
        self.claims: dict[str, tuple[dict[str, int], float]] = {}
        self.used: dict[str, int] = rec.used
        self.slot = -1  # the provider's row in the view's columns
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
    """One resource class over every slot: what Placement checks an amount against.
    A slot without that inventory (or free) has ``limit = -inf``: nothing fits it."""

    __slots__ = ("used", "limit", "capacity", "min_unit", "max_unit", "step")

    _FILLS = (
        ("used", 0, np.float64),
        ("limit", -np.inf, np.float64),
        ("capacity", -1, np.int64),
        ("min_unit", 1, np.int64),
        ("max_unit", 0, np.int64),
        ("step", 1, np.int64),
    )

    def __init__(self, size: int):
        for name, fill, dtype in self._FILLS:
            setattr(self, name, np.full(size, fill, dtype=dtype))

    def grow(self, size: int) -> None:
        for name, fill, dtype in self._FILLS:
            old = getattr(self, name)
            new = np.full(size, fill, dtype=dtype)
            new[: len(old)] = old
            setattr(self, name, new)

    def clear(self, slot: int) -> None:
        self.limit[slot] = -np.inf
        self.capacity[slot] = -1
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


class _Shape:
    """The trees over every slot: each slot's root slot (-1: free, or a provider whose root
    the view does not hold), whether it is a root, whether it shares its inventory."""

    __slots__ = ("root", "is_root", "sharing")

    def __init__(self, size: int):
        self.root = np.full(size, -1, dtype=np.int64)
        self.is_root = np.zeros(size, dtype=bool)
        self.sharing = np.zeros(size, dtype=bool)

    def grow(self, size: int) -> None:
        for name in self.__slots__:
            old = getattr(self, name)
            new = np.full(size, -1 if name == "root" else 0, dtype=old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)


class ProviderSummaries(Mapping[str, dict[str, Any]]):
    """The ``provider_summaries`` of an answer: every provider of the trees given, each
    summary made on first access (the scheduler reads only which providers there are;
    explain, capacity and the hints read the summaries). Read-only. The providers are
    looked up in the view once, at the first use; one the view no longer holds by then is
    left out."""

    __slots__ = ("_view_entries", "_keys", "_found")

    def __init__(self, entries: dict[str, _Entry], keys: list[str]):
        self._view_entries = entries
        self._keys = keys
        self._found: dict[str, _Entry] | None = None

    def _entries(self) -> dict[str, _Entry]:
        found = self._found
        if found is None:
            get = self._view_entries.get
            found = self._found = {}
            for uuid in self._keys:
                entry = get(uuid)
                if entry is not None:
                    found[uuid] = entry
        return found

    def __getitem__(self, uuid: str) -> dict[str, Any]:
        return self._entries()[uuid].summary()

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries())

    def __len__(self) -> int:
        return len(self._entries())

    def __contains__(self, uuid: object) -> bool:
        return uuid in self._entries()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping):
            return NotImplemented
        return dict(self.items()) == dict(other.items())

    def __repr__(self) -> str:
        return f"ProviderSummaries({dict(self.items())!r})"


def unsupported_reason(query: AllocationCandidatesQuery) -> str | None:
    """Why the view cannot answer this query whatever it holds, or None."""
    if not query.effective_groups():
        return "an empty query"
    return None


def _flat(query: AllocationCandidatesQuery) -> bool:
    """One unsuffixed group with resources and nothing that needs the trees."""
    if query.same_subtree:
        return False
    groups = query.effective_groups()
    return (
        len(groups) == 1
        and not groups[0].suffix
        and groups[0].has_resources()
        and not groups[0].required_any
    )


class ProviderView:
    """Every resource provider of Placement, as the scheduler last read it (thread-safe)."""

    def __init__(
        self,
        *,
        max_age: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        search: SearchOptions | None = None,
    ):
        self.max_age = max_age
        self.source = ""  # the feed's name, for explain and logs
        # Placement's own options that change its answer (max_allocation_candidates,
        # allocation_candidates_generation_strategy)
        self.search_options = search or SearchOptions()
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._roots: dict[str, _Entry] = {}
        self._children: dict[str, set[str]] = {}  # root uuid -> its descendants
        self._by_trait: dict[str, set[str]] = {}  # trait -> provider uuids
        self._by_aggregate: dict[str, set[str]] = {}  # aggregate -> provider uuids
        self._sharing: set[str] = set()  # providers with MISC_SHARES_VIA_AGGREGATE
        self._nested_classes: Counter[str] = Counter()  # classes on non-root providers
        self._shared_classes: Counter[str] = Counter()  # classes on sharing providers
        self._claimed_by: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        # provider -> when it was marked (monotonic): a read that began later clears it
        self._dirty: dict[str, float] = {}
        # every provider as a row of NumPy columns, one column per resource class
        self._slots: list[_Entry | None] = []
        self._free_slots: list[int] = []
        self._size = 0  # rows allocated in every column
        self._columns: dict[str, _Column] = {}
        self._shape = _Shape(0)
        # what the search derives from the indexes (masks, the providers' order), dropped
        # whenever a trait, an aggregate, a tree or a name changes
        self.derived: dict[Any, Any] = {}
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
        # the consumers the scheduler counts as pending on its hosts ({consumer: compute-node
        # uuids}): the database feed's per-request check asks Placement whether it still
        # holds them there (a DELETE /allocations changes no generation)
        self.counted_claims: Callable[[], dict[str, set[str]]] | None = None

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
                self._release(old)
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
                # the same row: its columns are written again below
                entry.slot = old.slot
                self._slots[old.slot] = entry
            self._entries[rec.uuid] = entry
            self._index(entry, old.rec if old is not None else None)
            marked = self._dirty.get(rec.uuid)
            if marked is not None and marked <= fetched_at:
                del self._dirty[rec.uuid]
        return left

    def tell_consumers_gone(self, left: list[tuple[str, str]]) -> None:
        """Tell ``on_consumer_gone`` that these consumers no longer hold those providers
        (found by a feed's check rather than a read)."""
        self._tell_consumers_gone(left)

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

    def _index(self, entry: _Entry, old: ProviderRecord | None) -> None:
        """Index a provider (``old``: its previous record, whose indexes were just
        dropped); give it a row if it has none and write it."""
        rec = entry.rec
        self.alloc_rows_total += rec.alloc_rows
        self.used_total += rec.used_total
        for t in rec.traits:
            self._by_trait.setdefault(t, set()).add(rec.uuid)
        for a in rec.aggregates:
            self._by_aggregate.setdefault(a, set()).add(rec.uuid)
        if rec.is_root:
            self._roots[rec.uuid] = entry
        else:
            self._children.setdefault(rec.root_uuid, set()).add(rec.uuid)
            self._nested_classes.update(rec.inventories.keys())
        if rec.shares:
            self._sharing.add(rec.uuid)
            self._shared_classes.update(rec.inventories.keys())
        if entry.slot < 0:
            self._place(entry)
        shape = self._shape
        slot = entry.slot
        shape.is_root[slot] = rec.is_root
        shape.sharing[slot] = rec.shares
        root = self._entries.get(rec.root_uuid)
        shape.root[slot] = root.slot if root is not None else -1
        if rec.is_root:
            # the descendants read before their root learn where it is
            for child in self._children.get(rec.uuid, ()):
                shape.root[self._entries[child].slot] = slot
        self._write(entry)
        if (
            old is None
            or old.traits != rec.traits
            or old.aggregates != rec.aggregates
            or old.parent_uuid != rec.parent_uuid
            or old.root_uuid != rec.root_uuid
            or old.name != rec.name
        ):
            self.derived.clear()

    def _unindex(self, entry: _Entry) -> None:
        rec = entry.rec
        self.alloc_rows_total -= rec.alloc_rows
        self.used_total -= rec.used_total
        for index, keys in ((self._by_trait, rec.traits), (self._by_aggregate, rec.aggregates)):
            for k in keys:
                members = index.get(k)
                if members is not None:
                    members.discard(rec.uuid)
                    if not members:
                        del index[k]
        if rec.is_root:
            self._roots.pop(rec.uuid, None)
        else:
            kids = self._children.get(rec.root_uuid)
            if kids is not None:
                kids.discard(rec.uuid)
                if not kids:
                    del self._children[rec.root_uuid]
            self._nested_classes.subtract(rec.inventories.keys())
            self._nested_classes += Counter()  # drop the zeros
        if rec.shares:
            self._sharing.discard(rec.uuid)
            self._shared_classes.subtract(rec.inventories.keys())
            self._shared_classes += Counter()

    # -- the columns ---------------------------------------------------------------------------
    def _place(self, entry: _Entry) -> None:
        """Give a provider a row in the columns."""
        if self._free_slots:
            slot = self._free_slots.pop()
            self._slots[slot] = entry
        else:
            slot = len(self._slots)
            self._slots.append(entry)
            if slot >= self._size:
                self._size = max(64, self._size * 2)
                for column in self._columns.values():
                    column.grow(self._size)
                self._shape.grow(self._size)
                self.derived.clear()
        entry.slot = slot
        self.derived.clear()

    def _release(self, entry: _Entry) -> None:
        slot = entry.slot
        if slot < 0:
            return
        for column in self._columns.values():
            column.clear(slot)
        shape = self._shape
        shape.root[slot] = -1
        shape.is_root[slot] = False
        shape.sharing[slot] = False
        if entry.rec.is_root:
            for child in self._children.get(entry.rec.uuid, ()):
                shape.root[self._entries[child].slot] = -1
        self._slots[slot] = None
        self._free_slots.append(slot)
        entry.slot = -1
        self.derived.clear()

    def _write(self, entry: _Entry) -> None:
        """Write a provider's inventories and usage into its row (after any change of
        either)."""
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
                column = self._columns[rc] = _Column(self._size)
            column.used[slot] = used.get(rc, 0)
            column.limit[slot] = inv.limit
            column.capacity[slot] = inv.capacity
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

    @property
    def has_dirty(self) -> bool:
        """Whether some provider is marked to be read again."""
        return bool(self._dirty)

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

    # -- what the search reads (under the view's lock) ----------------------------------------
    @property
    def slots(self) -> list[_Entry | None]:
        return self._slots

    @property
    def shape(self) -> _Shape:
        return self._shape

    def column(self, rc: str) -> _Column | None:
        return self._columns.get(rc)

    def entry(self, uuid: str) -> _Entry | None:
        return self._entries.get(uuid)

    def with_trait(self, trait: str) -> Iterable[str]:
        return self._by_trait.get(trait, _NO_PROVIDERS)

    def in_aggregate(self, aggregate: str) -> Iterable[str]:
        return self._by_aggregate.get(aggregate, _NO_PROVIDERS)

    def sharing(self) -> Iterable[str]:
        return self._sharing

    def tree(self, root: str) -> Iterable[str]:
        """The descendants of a root provider (the root not included)."""
        return self._children.get(root, _NO_PROVIDERS)

    def summaries(self, roots: Iterable[str]) -> ProviderSummaries:
        """The provider summaries of these trees (every provider of each)."""
        derived = self.derived
        keys: list[str] = []
        for root in roots:
            members = derived.get(("tree", root))
            if members is None:
                members = derived["tree", root] = (
                    (root,) if root in self._entries else ()
                ) + tuple(self._children.get(root, ()))
            keys.extend(members)
        return ProviderSummaries(self._entries, keys)

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

    def claim_refusal(self, consumer: str, allocations: dict[str, Any]) -> str | None:
        """Why Placement would refuse ``consumer``'s claim of ``allocations``
        (``{rp: {"resources": {rc: n}}}``) on the usage the view holds, its own claims
        counted and the consumer's own replaced, as ``PUT /allocations`` replaces them; None:
        Placement would take it. The checks are Placement's: the provider and its inventory
        exist, each amount respects ``min_unit``, ``max_unit`` and ``step_size``, and used
        plus the amount stays within ``(total - reserved) * allocation_ratio``."""
        with self._lock:
            for rp, body in allocations.items():
                entry = self._entries.get(rp)
                if entry is None:
                    return f"resource provider {rp} not found"
                own = entry.claims.get(consumer)
                mine = own[0] if own is not None else {}
                name = entry.rec.name or rp
                for rc, amount in (body.get("resources") or {}).items():
                    n = int(amount)
                    if not n:
                        continue
                    inv = entry.rec.inventories.get(rc)
                    if inv is None:
                        return f"provider {name} has no {rc} inventory"
                    if n < inv.min_unit or n > inv.max_unit or n % inv.step_size:
                        return (
                            f"{rc} {n} on {name} is outside min_unit {inv.min_unit}, "
                            f"max_unit {inv.max_unit}, step_size {inv.step_size}"
                        )
                    used = entry.used.get(rc, 0) - mine.get(rc, 0)
                    if used + n > inv.limit:
                        return (
                            f"{rc} on {name}: {used} used + {n} asked exceeds its capacity "
                            f"{inv.capacity}"
                        )
        return None

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

        With ``query.limit`` and more allocation requests that fit, a uniform random sample
        of that many (Placement's ``randomize_allocation_candidates = True``)."""
        reason = unsupported_reason(query)
        if reason is not None:
            return ViewAnswer(None, f"the view does not answer {reason}")
        age = self.age()
        if not self._loaded or age is None:
            return ViewAnswer(None, "the provider view is not loaded yet")
        if age > self.max_age:
            return ViewAnswer(None, f"the provider view is {age:.1f} s old", age)
        with self._lock:
            if _flat(query) and not self._on_trees(query):
                answer, found = self._flat_candidates(query, rng)
            else:
                try:
                    answer, found = TreeSearch(self, query, self.search_options).run(rng)
                except TooWide as exc:
                    return ViewAnswer(None, f"the view does not examine {exc}", age)
        return ViewAnswer(answer, "", age, found)

    def _on_trees(self, query: AllocationCandidatesQuery) -> bool:
        """Whether a class the query asks for is also on a child or a sharing provider."""
        return any(
            self._nested_classes.get(rc) or self._shared_classes.get(rc)
            for rc, n in query.effective_groups()[0].resources.items()
            if n
        )

    def _flat_candidates(
        self, query: AllocationCandidatesQuery, rng: random.Random | None
    ) -> tuple[AllocationCandidates, int]:
        group = query.effective_groups()[0]
        amounts = [(rc, n) for rc, n in group.resources.items() if n]
        matched = self._scan(group, query, amounts)
        found = len(matched)
        if query.limit is not None and found > query.limit:
            picked = (rng or random).sample(range(found), query.limit)
            matched = matched[picked]
        slots = self._slots
        return self._answer([slots[i] for i in matched.tolist()], dict(amounts)), found

    def _scan(self, group: Any, query: AllocationCandidatesQuery, amounts: list) -> Any:
        """The slots of the roots that match (a NumPy index array), in slot order. Only roots
        have the classes asked for, so only roots can fit."""
        n_slots = len(self._slots)
        ok = self._pool(group, query, n_slots)
        if ok is not None and not ok.any():
            return np.flatnonzero(ok)
        rows = slice(0, n_slots)
        for rc, n in amounts:
            column = self._columns.get(rc)
            if column is None:
                return np.zeros(0, dtype=np.int64)
            fits = column.fits(rows, n)
            ok = fits if ok is None else ok & fits
        if ok is None:  # (no amount and no pool: every slot)
            ok = np.ones(n_slots, dtype=bool)
        for trait in group.forbidden_traits | query.root_forbidden:
            ok &= ~self.mask("t", trait)
        for agg in group.forbidden_aggregates:
            ok &= ~self.mask("a", agg)
        return np.flatnonzero(ok)

    def _pool(
        self, group: Any, query: AllocationCandidatesQuery, n_slots: int
    ) -> np.ndarray | None:
        """The slots that can match by traits, aggregates and tree alone, as a mask (None:
        every slot)."""
        pool: np.ndarray | None = None
        for trait in group.required_traits | query.root_required:
            members = self.mask("t", trait)
            pool = members.copy() if pool is None else pool & members
        for or_set in group.member_of:
            members = np.zeros(n_slots, dtype=bool)
            for agg in or_set:
                members |= self.mask("a", agg)
            pool = members if pool is None else pool & members
        if group.in_tree:
            entry = self._entries.get(group.in_tree)
            # Placement: in_tree names a tree by any of its providers; an unknown uuid finds
            # nothing. A provider whose root the view does not hold (a refresh that read a
            # child and then found its root deleted) has no candidate either: an empty answer
            # sends the request to Placement.
            root = np.zeros(n_slots, dtype=bool)
            if entry is not None and entry.rec.root_uuid in self._roots:
                root[self._entries[entry.rec.root_uuid].slot] = True
            pool = root if pool is None else pool & root
        return pool

    def mask(self, kind: str, name: str) -> np.ndarray:
        """The slots with a trait (``kind`` "t") or in an aggregate ("a"), as a read-only
        boolean array over the slots, cached until the view's indexes change (``derived``)."""
        size = len(self._slots)
        key = (kind, name, size)
        cached = self.derived.get(key)
        if cached is None:
            members = self._by_trait if kind == "t" else self._by_aggregate
            cached = np.zeros(size, dtype=bool)
            slots = [self._entries[u].slot for u in members.get(name, _NO_PROVIDERS)]
            if slots:
                cached[np.asarray(slots, dtype=np.int64)] = True
            cached.flags.writeable = False
            self.derived[key] = cached
        return cached

    def _answer(self, matched: list[_Entry], amounts: dict[str, int]) -> AllocationCandidates:
        requests = []
        roots = []
        for entry in matched:
            uuid = entry.rec.uuid
            requests.append(
                {"allocations": {uuid: {"resources": dict(amounts)}}, "mappings": {"": [uuid]}}
            )
            roots.append(uuid)
        return AllocationCandidates(requests, self.summaries(roots))
