"""DiskFilter: only hosts with enough free local disk for the flavor, overcommit included.

A filter of earlier nova releases (removed once Placement took over capacity); it still matters
where Placement is not consulted. Like nova's, it counts root + ephemeral + swap even for a
boot-from-volume request. The host's total disk is in GiB (``total_usable_disk_gb``), what is
free in MiB (``free_disk_mb``); the check is in MiB and the ``disk_gb`` limit in GiB.
"""

from __future__ import annotations

import logging
from typing import Any

from filters import Reject
from filters.capacity import CapacityFilter

LOG = logging.getLogger(__name__)

LARGER_THAN_HOST = Reject("flavor disk larger than host disk")
NOT_ENOUGH = Reject("not enough free disk")

# the ratio nova's HostState falls back to when the compute node reports none
DEFAULT_DISK_RATIO = 1.0


def requested_disk_mb(spec_obj: Any) -> int:
    """Root and ephemeral disk (GiB) plus swap (MiB), in MiB."""
    flavor = spec_obj.flavor
    return 1024 * (flavor.root_gb + flavor.ephemeral_gb) + flavor.swap


class DiskFilter(CapacityFilter):
    """Passes hosts whose free disk, with the host's ``disk_allocation_ratio`` overcommit, holds
    the flavor's root, ephemeral and swap disk (and whose physical disk alone could hold it)."""

    total_attr, unit, free_attr = "total_usable_disk_gb", 1024, "free_disk_mb"
    requested = staticmethod(requested_disk_mb)
    ratio, default_ratio, limit_name = "disk_allocation_ratio", DEFAULT_DISK_RATIO, "disk_gb"
    larger_than_host, not_enough, log = LARGER_THAN_HOST, NOT_ENOUGH, LOG
    larger_debug = "%s does not have %s MB usable disk before overcommit, it only has %s MB."
    not_enough_debug = "%s does not have %s MB usable disk, it only has %s MB usable disk."
