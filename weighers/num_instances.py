"""NumInstancesWeigher: by the number of instances on the host."""

from __future__ import annotations

from typing import Any

from weighers import BaseHostWeigher, host_column


@host_column
class NumInstancesWeigher(BaseHostWeigher):
    """Prefers hosts with more instances when ``num_instances_weight_multiplier`` is
    positive (stacking), fewer when negative (spreading); off by default (0.0)."""

    multiplier_option = "num_instances_weight_multiplier"
    returns_numbers = True

    def weigh(self, host_state: Any, prepared: Any) -> float:
        return host_state.num_instances
