"""CoreFilter: only hosts with enough free vCPUs for the flavor, overcommit included.

A filter of earlier nova releases (removed once Placement took over capacity); it still matters
where Placement is not consulted. As nova's did, it lets through a host that reports no vCPUs at
all (``vcpus_total`` 0: "CPU collection broken"), with a warning.
"""

from __future__ import annotations

import logging
from typing import Any

from filters import BaseHostFilter, Reject
from filters.ram_filter import record_limit

LOG = logging.getLogger(__name__)

LARGER_THAN_HOST = Reject("flavor vCPUs more than host vCPUs")
NOT_ENOUGH = Reject("not enough free vCPUs")

# the ratio nova's HostState falls back to when the compute node reports none
DEFAULT_CPU_RATIO = 4.0


class CoreFilter(BaseHostFilter):
    """Passes hosts whose free vCPUs, with the host's ``cpu_allocation_ratio`` overcommit, hold
    the flavor's vCPUs (and whose physical CPUs alone could hold them); hosts that report no
    vCPUs pass."""

    RUN_ON_REBUILD = False
    # every instance of a multi-create consumes vCPUs: check each one
    run_filter_once_per_request = False

    def cpu_allocation_ratio(self, host_state: Any) -> float:
        return host_state.cpu_allocation_ratio or DEFAULT_CPU_RATIO

    def host_passes(self, host_state: Any, spec_obj: Any) -> bool | Reject:
        total = host_state.vcpus_total
        if not total:
            # nova's fail-safe: a host that reports no vCPUs is not judged
            LOG.warning("%s: VCPUs not set; assuming CPU collection broken", host_state)
            return True

        requested = spec_obj.flavor.vcpus
        limit = total * self.cpu_allocation_ratio(host_state)
        # a non-positive ratio gives no limit, and no check against the physical CPUs
        if limit > 0 and requested > total:
            # an instance may overcommit against other instances, never against itself
            if LOG.isEnabledFor(logging.DEBUG):
                LOG.debug(
                    "%s does not have %s usable vCPUs before overcommit, it only has %s.",
                    host_state,
                    requested,
                    total,
                )
            return LARGER_THAN_HOST

        free = limit - host_state.vcpus_used
        if free < requested:
            if LOG.isEnabledFor(logging.DEBUG):
                LOG.debug(
                    "%s does not have %s usable vCPUs, it only has %s usable vCPUs.",
                    host_state,
                    requested,
                    free,
                )
            return NOT_ENOUGH

        if limit > 0:
            record_limit(spec_obj, host_state, "vcpu", limit)
        return True
