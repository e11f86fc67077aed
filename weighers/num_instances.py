"""NumInstancesWeigher: by the number of instances on the host."""

from __future__ import annotations

from typing import Any

from weighers import BaseHostWeigher


class NumInstancesWeigher(BaseHostWeigher):
    """Prefers hosts with more instances when ``num_instances_weight_multiplier`` is
    positive (stacking), fewer when negative (spreading); off by default (0.0)."""

    multiplier_option = "num_instances_weight_multiplier"
    returns_numbers = True
    host_column = True

    def _weigh_object(self, host_state: Any, weight_properties: Any) -> float:
        return host_state.num_instances

    def weigh_objects(self, host_states: list[Any], weight_properties: Any) -> list[float]:
        return [h.num_instances for h in host_states]
