"""BuildFailureWeigher: hosts where recent builds failed sink to the bottom."""

from __future__ import annotations

from typing import Any

from weighers import BaseHostWeigher, host_column


@host_column
class BuildFailureWeigher(BaseHostWeigher):
    """Prefers hosts without recent build failures: the weight is the host's ``failed_builds``
    count times the negated ``build_failure_weight_multiplier`` (1e6 by default, so one
    failure outweighs every resource weigher). The compute service resets the count after a
    successful build."""

    multiplier_option = "build_failure_weight_multiplier"
    # Negated after the aggregate override, as nova does: an aggregate value of 10 means
    # "failures cost 10".
    multiplier_sign = -1.0
    returns_numbers = True

    def weigh(self, host_state: Any, prepared: Any) -> float:
        return host_state.failed_builds
