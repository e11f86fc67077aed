"""RamFilter: only hosts with enough free RAM for the flavor, overcommit included.

A filter of earlier nova releases (removed once Placement took over capacity). It still matters
where Placement is not consulted, and operators still list it in ``enabled_filters``. The check
itself is ``filters.capacity.CapacityFilter``'s, shared with the Disk and Core filters.
"""

from __future__ import annotations

import logging

from filters import Reject
from filters.capacity import CapacityFilter, record_limit

__all__ = ["RamFilter", "record_limit"]

LOG = logging.getLogger(__name__)

LARGER_THAN_HOST = Reject("flavor RAM larger than host RAM")
NOT_ENOUGH = Reject("not enough free RAM")

# the ratio nova's HostState falls back to when the compute node reports none
DEFAULT_RAM_RATIO = 1.0


class RamFilter(CapacityFilter):
    """Passes hosts whose free RAM, with the host's ``ram_allocation_ratio`` overcommit, holds
    the flavor's RAM (and whose physical RAM alone could hold it)."""

    total_attr, free_attr, flavor_attr = "total_usable_ram_mb", "free_ram_mb", "memory_mb"
    ratio, default_ratio, limit_name = "ram_allocation_ratio", DEFAULT_RAM_RATIO, "memory_mb"
    larger_than_host, not_enough, log = LARGER_THAN_HOST, NOT_ENOUGH, LOG
    larger_debug = "%s does not have %s MB usable RAM before overcommit, it only has %s MB."
    not_enough_debug = "%s does not have %s MB usable RAM, it only has %s MB usable RAM."
