"""CrossCellWeigher: during a cross-cell move, prefers hosts in the instance's current cell."""

from __future__ import annotations

from typing import Any

from weighers import BaseHostWeigher, Same


def _preferred_cell(spec_obj: Any) -> str | None:
    """The cell to prefer: only for a move allowed to cross cells (the conductor sets
    ``requested_destination.cell`` to the source cell and ``allow_cross_cell_move``)."""
    dest = getattr(spec_obj, "requested_destination", None)
    if dest is None or not dest.allow_cross_cell_move:
        return None
    return dest.cell_uuid or None


class CrossCellWeigher(BaseHostWeigher):
    """Prefers hosts in the source cell of a cross-cell move: +1 in that cell, -1 in any
    other (``cross_cell_move_weight_multiplier``, 1e6 by default); 0 for every host when
    the request is not a cross-cell move."""

    multiplier_option = "cross_cell_move_weight_multiplier"
    returns_numbers = True

    def prepare(self, weight_properties: Any, hosts: list[Any]) -> str | Same:
        cell = _preferred_cell(weight_properties)
        return Same(0) if cell is None else cell

    def weigh(self, host_state: Any, cell: str) -> float:
        return 1 if host_state.cell_uuid == cell else -1
