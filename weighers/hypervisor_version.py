"""HypervisorVersionWeigher: prefers hosts running a newer hypervisor."""

from __future__ import annotations

from typing import Any

from weighers import BaseHostWeigher, host_column


@host_column
class HypervisorVersionWeigher(BaseHostWeigher):
    """Prefers hosts with a newer hypervisor version (``hypervisor_version_weight_multiplier``;
    negative prefers older ones). A host that reports no version counts as version 0."""

    multiplier_option = "hypervisor_version_weight_multiplier"
    returns_numbers = True

    def weigh(self, host_state: Any, prepared: Any) -> float:
        return host_state.hypervisor_version or 0
