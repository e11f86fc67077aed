"""DiskFilter: only hosts with enough free local disk for the flavor, overcommit included.

A filter of earlier nova releases (removed once Placement took over capacity); it still matters
where Placement is not consulted. Like nova's, it counts root + ephemeral + swap even for a
boot-from-volume request.
"""

from __future__ import annotations

import logging
from typing import Any

from filters import BaseHostFilter, Reject
from filters.ram_filter import record_limit

LOG = logging.getLogger(__name__)

LARGER_THAN_HOST = Reject("flavor disk larger than host disk")
NOT_ENOUGH = Reject("not enough free disk")

# the ratio nova's HostState falls back to when the compute node reports none
DEFAULT_DISK_RATIO = 1.0


def requested_disk_mb(spec_obj: Any) -> int:
    """Root and ephemeral disk (GiB) plus swap (MiB), in MiB."""
    flavor = spec_obj.flavor
    return 1024 * (flavor.root_gb + flavor.ephemeral_gb) + flavor.swap


class DiskFilter(BaseHostFilter):
    """Passes hosts whose free disk, with the host's ``disk_allocation_ratio`` overcommit, holds
    the flavor's root, ephemeral and swap disk (and whose physical disk alone could hold it)."""

    RUN_ON_REBUILD = False
    # every instance of a multi-create consumes disk: check each one
    run_filter_once_per_request = False

    def disk_allocation_ratio(self, host_state: Any) -> float:
        return host_state.disk_allocation_ratio or DEFAULT_DISK_RATIO

    def host_passes(self, host_state: Any, spec_obj: Any) -> bool | Reject:
        requested_mb = requested_disk_mb(spec_obj)
        total_mb = host_state.total_usable_disk_gb * 1024

        # an instance may overcommit against other instances, never against itself
        if total_mb < requested_mb:
            if LOG.isEnabledFor(logging.DEBUG):
                LOG.debug(
                    "%s does not have %s MB usable disk before overcommit, it only has %s MB.",
                    host_state,
                    requested_mb,
                    total_mb,
                )
            return LARGER_THAN_HOST

        limit_mb = total_mb * self.disk_allocation_ratio(host_state)
        used_mb = total_mb - host_state.free_disk_mb
        usable_mb = limit_mb - used_mb
        if usable_mb < requested_mb:
            if LOG.isEnabledFor(logging.DEBUG):
                LOG.debug(
                    "%s does not have %s MB usable disk, it only has %s MB usable disk.",
                    host_state,
                    requested_mb,
                    usable_mb,
                )
            return NOT_ENOUGH

        record_limit(spec_obj, host_state, "disk_gb", limit_mb / 1024)
        return True
