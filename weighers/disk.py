"""DiskWeigher: spreads (or, with a negative multiplier, stacks) by free disk."""

from __future__ import annotations

from typing import Any

from weighers import BaseHostWeigher


class DiskWeigher(BaseHostWeigher):
    """Prefers hosts with more free disk (``disk_weight_multiplier``; negative stacks)."""

    minval = 0
    multiplier_option = "disk_weight_multiplier"
    returns_numbers = True
    host_column = True

    def _weigh_object(self, host_state: Any, weight_properties: Any) -> float:
        return host_state.free_disk_mb

    def weigh_objects(self, host_states: list[Any], weight_properties: Any) -> list[float]:
        return [h.free_disk_mb for h in host_states]
