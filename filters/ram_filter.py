"""RamFilter: only hosts with enough free RAM for the flavor, overcommit included.

A filter of earlier nova releases (removed once Placement took over capacity). It still matters
where Placement is not consulted, and operators still list it in ``enabled_filters``.

This module also holds ``record_limit``, the one place the capacity filters (Ram, Disk, Core
and their Aggregate variants) write ``host_state.limits``; read its docstring before adding
another writer.
"""

from __future__ import annotations

import logging
from typing import Any

from filters import BaseHostFilter, Reject

LOG = logging.getLogger(__name__)

LARGER_THAN_HOST = Reject("flavor RAM larger than host RAM")
NOT_ENOUGH = Reject("not enough free RAM")

# the ratio nova's HostState falls back to when the compute node reports none
DEFAULT_RAM_RATIO = 1.0


def record_limit(spec_obj: Any, host_state: Any, resource: str, value: float) -> None:
    """Remember the oversubscription limit of ``resource`` on the host for this request: the
    driver puts it into the Selection it returns, and nova-compute's claim tests the
    instance against it (``memory_mb``, ``disk_gb``, ``vcpu``). It is kept on the request
    (``spec_obj.set_host_limit``), not on the HostState, which concurrent requests share."""
    spec_obj.set_host_limit(host_state, resource, value)


class RamFilter(BaseHostFilter):
    """Passes hosts whose free RAM, with the host's ``ram_allocation_ratio`` overcommit, holds
    the flavor's RAM (and whose physical RAM alone could hold it)."""

    RUN_ON_REBUILD = False
    # every instance of a multi-create consumes RAM: check each one
    run_filter_once_per_request = False

    def ram_allocation_ratio(self, host_state: Any) -> float:
        return host_state.ram_allocation_ratio or DEFAULT_RAM_RATIO

    def host_passes(self, host_state: Any, spec_obj: Any) -> bool | Reject:
        requested_mb = spec_obj.flavor.memory_mb
        total_mb = host_state.total_usable_ram_mb

        # an instance may overcommit against other instances, never against itself
        if total_mb < requested_mb:
            if LOG.isEnabledFor(logging.DEBUG):
                LOG.debug(
                    "%s does not have %s MB usable RAM before overcommit, it only has %s MB.",
                    host_state,
                    requested_mb,
                    total_mb,
                )
            return LARGER_THAN_HOST

        limit_mb = total_mb * self.ram_allocation_ratio(host_state)
        used_mb = total_mb - host_state.free_ram_mb
        usable_mb = limit_mb - used_mb
        if usable_mb < requested_mb:
            if LOG.isEnabledFor(logging.DEBUG):
                LOG.debug(
                    "%s does not have %s MB usable RAM, it only has %s MB usable RAM.",
                    host_state,
                    requested_mb,
                    usable_mb,
                )
            return NOT_ENOUGH

        record_limit(spec_obj, host_state, "memory_mb", limit_mb)
        return True
