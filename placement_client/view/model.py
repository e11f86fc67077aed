"""What the provider view holds of one resource provider, as Placement reports it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

# Placement's default max_unit when an inventory leaves it out
MAX_UNIT_DEFAULT = 2147483647
# the trait that makes a provider share its inventory with the trees of its aggregates
SHARING_TRAIT = "MISC_SHARES_VIA_AGGREGATE"


class Inventory(NamedTuple):
    """One inventory record of a provider (Placement's fields and defaults)."""

    total: int
    reserved: int = 0
    min_unit: int = 1
    max_unit: int = MAX_UNIT_DEFAULT
    step_size: int = 1
    allocation_ratio: float = 1.0

    @property
    def capacity(self) -> int:
        """What Placement reports as ``capacity`` in provider summaries."""
        return int((self.total - self.reserved) * self.allocation_ratio)

    @property
    def limit(self) -> float:
        """The bound Placement checks ``used + amount`` against (not rounded)."""
        return (self.total - self.reserved) * self.allocation_ratio

    @classmethod
    def from_api(cls, body: dict[str, Any]) -> Inventory:
        return cls(
            int(body["total"]),
            int(body.get("reserved", 0)),
            int(body.get("min_unit", 1)),
            int(body.get("max_unit", MAX_UNIT_DEFAULT)),
            int(body.get("step_size", 1)),
            float(body.get("allocation_ratio", 1.0)),
        )


# one object per distinct value (frozensets of traits or aggregates, inventories); forgotten
# past _SHARED_MAX distinct values, so that a cloud whose values keep changing does not grow it
_SHARED: dict[Any, Any] = {}
_SHARED_MAX = 100_000
_NO_USAGE: dict[str, int] = {}  # shared: never written (the view copies before adding claims)


def _shared(value: Any) -> Any:
    found = _SHARED.get(value)
    if found is None:
        if len(_SHARED) >= _SHARED_MAX:
            _SHARED.clear()
        found = _SHARED[value] = value
    return found


@dataclass(slots=True)
class ProviderRecord:
    """One provider as read from Placement at ``generation``: the feeds make these, the view
    keeps them. ``used`` sums the allocations of ``consumers``; ``alloc_rows`` counts the
    allocation rows (consumer × resource class), which the database feed compares to find
    allocations deleted without a generation change."""

    uuid: str
    generation: int
    name: str = ""
    parent_uuid: str | None = None
    root_uuid: str = ""
    inventories: dict[str, Inventory] = field(default_factory=dict)
    used: dict[str, int] = field(default_factory=dict)
    consumers: frozenset[str] = frozenset()
    alloc_rows: int = 0
    traits: frozenset[str] = frozenset()
    aggregates: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if not self.root_uuid:
            self.root_uuid = self.uuid
        # most providers share their traits, aggregates and inventories with many others
        # (every bridge of a physnet, every device of a model): one object each (a record
        # is never changed once made)
        self.traits = _shared(self.traits)
        self.aggregates = _shared(self.aggregates)
        self.inventories = {rc: _shared(inv) for rc, inv in self.inventories.items()}
        if not self.used:
            self.used = _NO_USAGE

    @property
    def is_root(self) -> bool:
        return self.parent_uuid is None

    @property
    def used_total(self) -> int:
        return sum(self.used.values())

    @property
    def shares(self) -> bool:
        return SHARING_TRAIT in self.traits


def usage_of_allocations(
    allocations: dict[str, dict[str, int]],
) -> tuple[dict[str, int], frozenset[str], int]:
    """``{consumer: {rc: n}}`` → (used by class, consumers, allocation rows)."""
    used: dict[str, int] = {}
    rows = 0
    for resources in allocations.values():
        for rc, n in resources.items():
            used[rc] = used.get(rc, 0) + int(n)
            rows += 1
    return used, frozenset(allocations), rows
