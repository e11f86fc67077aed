"""CoreFilter: only hosts with enough free vCPUs for the flavor, overcommit included.

A filter of earlier nova releases (removed once Placement took over capacity); it still matters
where Placement is not consulted. As nova's did, it lets through a host that reports no vCPUs at
all (``vcpus_total`` 0: "CPU collection broken"), with a warning; and a ratio that is not
positive gives no limit and no check against the physical CPUs (only ``vcpus_used`` counts).
"""

from __future__ import annotations

import logging
from typing import Any

from filters import Reject
from filters.capacity import CapacityFilter

LOG = logging.getLogger(__name__)

LARGER_THAN_HOST = Reject("flavor vCPUs more than host vCPUs")
NOT_ENOUGH = Reject("not enough free vCPUs")

# the ratio nova's HostState falls back to when the compute node reports none
DEFAULT_CPU_RATIO = 4.0


class CoreFilter(CapacityFilter):
    """Passes hosts whose free vCPUs, with the host's ``cpu_allocation_ratio`` overcommit, hold
    the flavor's vCPUs (and whose physical CPUs alone could hold them); hosts that report no
    vCPUs pass."""

    flavor_attr = "vcpus"
    ratio, default_ratio, limit_name = "cpu_allocation_ratio", DEFAULT_CPU_RATIO, "vcpu"
    larger_than_host, not_enough, log = LARGER_THAN_HOST, NOT_ENOUGH, LOG
    larger_debug = "%s does not have %s usable vCPUs before overcommit, it only has %s."
    not_enough_debug = "%s does not have %s usable vCPUs, it only has %s usable vCPUs."

    def used(self, host_state: Any, total: Any) -> Any:
        return host_state.vcpus_used

    def check(self, host_state: Any, prepared: tuple[Any, Any]) -> bool | Reject:
        spec_obj, requested = prepared
        total = host_state.vcpus_total
        if not total:
            # nova's fail-safe: a host that reports no vCPUs is not judged
            LOG.warning("%s: VCPUs not set; assuming CPU collection broken", host_state)
            return True

        # nova computes the limit first: a non-positive one skips the physical check
        limit = total * self.allocation_ratio(host_state)
        if limit > 0 and requested > total:
            return self._larger_than_host(host_state, requested, total)
        return self._within_limit(host_state, spec_obj, requested, total, limit, limit > 0)
