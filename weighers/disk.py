"""DiskWeigher: spreads (or, with a negative multiplier, stacks) by free disk."""

from __future__ import annotations

from typing import Any

from weighers import BaseHostWeigher, host_column


@host_column
class DiskWeigher(BaseHostWeigher):
    """Prefers hosts with more free disk (``disk_weight_multiplier``; negative stacks)."""

    minval = 0
    multiplier_option = "disk_weight_multiplier"
    returns_numbers = True

    def weigh(self, host_state: Any, prepared: Any) -> float:
        return host_state.free_disk_mb
