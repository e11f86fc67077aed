"""CPUWeigher: spreads (or, with a negative multiplier, stacks) by free vCPUs."""

from __future__ import annotations

from typing import Any

from weighers import BaseHostWeigher, host_column

# nova-compute always stores a ratio; nova's initial_cpu_allocation_ratio is the value a
# compute node gets when none is configured, so it stands in for a missing one.
DEFAULT_CPU_ALLOCATION_RATIO = 4.0


def free_vcpus(host_state: Any) -> float:
    """vcpus_total * cpu_allocation_ratio - vcpus_used."""
    ratio = host_state.cpu_allocation_ratio or DEFAULT_CPU_ALLOCATION_RATIO
    return host_state.vcpus_total * ratio - host_state.vcpus_used


@host_column
class CPUWeigher(BaseHostWeigher):
    """Prefers hosts with more free vCPUs, counting the allocation ratio
    (``cpu_weight_multiplier``; negative stacks)."""

    minval = 0
    multiplier_option = "cpu_weight_multiplier"
    returns_numbers = True

    def weigh(self, host_state: Any, prepared: Any) -> float:
        return free_vcpus(host_state)
