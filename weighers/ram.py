"""RAMWeigher: spreads (or, with a negative multiplier, stacks) by free RAM."""

from __future__ import annotations

from typing import Any

from weighers import BaseHostWeigher, host_column


@host_column
class RAMWeigher(BaseHostWeigher):
    """Prefers hosts with more free RAM (``ram_weight_multiplier``; negative stacks)."""

    minval = 0
    multiplier_option = "ram_weight_multiplier"
    returns_numbers = True

    def weigh(self, host_state: Any, prepared: Any) -> float:
        return host_state.free_ram_mb
