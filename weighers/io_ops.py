"""IoOpsWeigher: prefers hosts that are busy with fewer I/O-heavy operations."""

from __future__ import annotations

from typing import Any

from weighers import BaseHostWeigher, host_column


@host_column
class IoOpsWeigher(BaseHostWeigher):
    """Prefers hosts with fewer concurrent I/O operations (builds, resizes, snapshots...)
    with the default negative ``io_ops_weight_multiplier``; a positive one prefers busy hosts."""

    minval = 0
    multiplier_option = "io_ops_weight_multiplier"
    returns_numbers = True

    def weigh(self, host_state: Any, prepared: Any) -> float:
        return host_state.num_io_ops
