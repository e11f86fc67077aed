"""IoOpsWeigher: prefers hosts that are busy with fewer I/O-heavy operations."""

from __future__ import annotations

from typing import Any

from weighers import BaseHostWeigher


class IoOpsWeigher(BaseHostWeigher):
    """Prefers hosts with fewer concurrent I/O operations (builds, resizes, snapshots...)
    with the default negative ``io_ops_weight_multiplier``; a positive one prefers busy hosts."""

    minval = 0
    multiplier_option = "io_ops_weight_multiplier"
    returns_numbers = True
    host_column = True

    def _weigh_object(self, host_state: Any, weight_properties: Any) -> float:
        return host_state.num_io_ops

    def weigh_objects(self, host_states: list[Any], weight_properties: Any) -> list[float]:
        return [h.num_io_ops for h in host_states]
