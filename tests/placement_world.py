"""What the property tests against the real Placement build their random providers of."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from placement_client.api import ClaimConflict, PlacementClient


@dataclass
class Inv:
    """One inventory of a random provider, as the tests send it to Placement."""

    total: int
    reserved: int = 0
    min_unit: int = 1
    max_unit: int | None = None  # None: Placement's default
    step_size: int = 1
    allocation_ratio: float = 1.0

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "total": self.total,
            "reserved": self.reserved,
            "min_unit": self.min_unit,
            "step_size": self.step_size,
            "allocation_ratio": self.allocation_ratio,
        }
        if self.max_unit is not None:
            body["max_unit"] = self.max_unit
        return body

    def amounts(self) -> list[int]:
        """Amounts one allocation may take from an empty inventory (the first 16)."""
        top = int((self.total - self.reserved) * self.allocation_ratio)
        if self.max_unit is not None:
            top = min(top, self.max_unit)
        return [n for n in range(self.min_unit, top + 1) if n % self.step_size == 0][:16]


class BuiltWorld:
    """A random world made real in Placement: its providers (``rps``: objects with ``uuid``,
    ``parent`` (an index into ``rps``), ``inventories`` of ``Inv``, ``traits`` and
    ``aggregates`` (indices into ``aggregates``), parents before children), named by ``name``,
    and its consumers' claims; ``clean`` deletes everything it made."""

    def __init__(
        self,
        client: PlacementClient,
        rps: list[Any],
        *,
        aggregates: int,
        name: Callable[[Any], str],
        project: str,
        user: str,
    ):
        self.client = client
        self.rps = rps
        self.aggregates = [str(uuid.uuid4()) for _ in range(aggregates)]
        self.name = name
        self.project = project
        self.user = user
        self.created: list[str] = []
        self.consumers: list[str] = []

    def create_providers(self) -> None:
        for rp in self.rps:
            parent = self.rps[rp.parent].uuid if rp.parent is not None else None
            self.client.create_provider(
                rp.uuid,
                self.name(rp),
                inventories={rc: inv.body() for rc, inv in rp.inventories.items()},
                traits=sorted(rp.traits),
                aggregates=[self.aggregates[a] for a in sorted(rp.aggregates)],
                parent_provider_uuid=parent,
            )
            self.created.append(rp.uuid)

    def claim(self, consumers: list[list[tuple[int, int, int]]]) -> None:
        """Each consumer's parts, (provider pick, class pick, amount pick) among the
        providers with inventory, claimed at once; a claim that does not fit next to the
        earlier ones is left out (Placement writes nothing of it)."""
        with_inventory = [rp for rp in self.rps if rp.inventories]
        if not with_inventory:
            return
        for parts in consumers:
            allocations: dict[str, dict[str, Any]] = {}
            for rp_pick, rc_pick, amount_pick in parts:
                rp = with_inventory[rp_pick % len(with_inventory)]
                rc = sorted(rp.inventories)[rc_pick % len(rp.inventories)]
                amounts = rp.inventories[rc].amounts()
                resources = allocations.setdefault(rp.uuid, {"resources": {}})["resources"]
                if amounts and rc not in resources:
                    resources[rc] = amounts[amount_pick % len(amounts)]
            allocations = {rp: body for rp, body in allocations.items() if body["resources"]}
            if not allocations:
                continue
            consumer = str(uuid.uuid4())
            self.consumers.append(consumer)
            try:
                self.client.claim_resources(
                    consumer, {"allocations": allocations}, self.project, self.user
                )
            except ClaimConflict:
                pass

    def clean(self) -> None:
        for consumer in self.consumers:
            self.client.delete_allocation_for_instance(consumer)
        for rp in reversed(self.created):  # children were created after their parents
            self.client.delete_provider(rp)
