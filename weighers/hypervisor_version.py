"""HypervisorVersionWeigher: prefers hosts running a newer hypervisor."""

from __future__ import annotations

from typing import Any

from weighers import BaseHostWeigher


class HypervisorVersionWeigher(BaseHostWeigher):
    """Prefers hosts with a newer hypervisor version (``hypervisor_version_weight_multiplier``;
    negative prefers older ones). A host that reports no version counts as version 0."""

    multiplier_option = "hypervisor_version_weight_multiplier"
    returns_numbers = True
    host_column = True

    def _weigh_object(self, host_state: Any, weight_properties: Any) -> float:
        return host_state.hypervisor_version or 0

    def weigh_objects(self, host_states: list[Any], weight_properties: Any) -> list[float]:
        return [h.hypervisor_version or 0 for h in host_states]
