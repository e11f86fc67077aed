"""What the property tests against the real Placement build their random providers of."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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
