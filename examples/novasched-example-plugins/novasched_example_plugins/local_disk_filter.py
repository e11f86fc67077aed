"""LocalDiskFilter: instances that want local disks land on hosts that have room on them.

A flavor asks for it with the extra spec ``local_disk=true`` (or the scoped spelling
``example_plugins:local_disk=true``, which nova's AggregateInstanceExtraSpecsFilter leaves
alone). Such an instance needs its root disk, ephemeral disk and swap on the host's own disks:
``(root_gb + ephemeral_gb) * 1024 + swap`` MiB of ``free_disk_mb`` (no root disk when it
boots from a volume).

Whether a host's disks are local is declared, when it is not the usual case, by its
aggregates' metadata ``local_storage=true|false`` (the operator's word wins; any ``false``
means shared) or, failing that, by the compute node's stats key ``local_storage``. A host that
declares nothing is taken to have local storage, and its ``free_disk_mb`` to be local. Hosts
declared shared (for example with Ceph-backed ephemeral disks) never pass: their
``free_disk_mb`` is the pool's.
"""

from __future__ import annotations

import logging
from typing import Any

from oslo_utils import strutils

from filters import PASS_ALL, BaseHostFilter, Reject

LOG = logging.getLogger(__name__)

EXTRA_SPEC_KEYS = ("local_disk", "example_plugins:local_disk")
STORAGE_KEY = "local_storage"

NO_LOCAL_STORAGE = Reject("no local storage")
NOT_ENOUGH_DISK = Reject("not enough local disk")


def wants_local_disk(flavor: Any) -> bool:
    specs = flavor.extra_specs or {}
    return any(strutils.bool_from_string(specs.get(key)) for key in EXTRA_SPEC_KEYS)


def local_disk_mb(spec_obj: Any) -> int:
    """MiB the instance needs on the host's disks: root (unless boot-from-volume), ephemeral
    and swap (flavor swap is in MiB)."""
    flavor = spec_obj.flavor
    root_gb = 0 if spec_obj.is_bfv else flavor.root_gb or 0
    return (root_gb + (flavor.ephemeral_gb or 0)) * 1024 + (flavor.swap or 0)


def declared_local_storage(host_state: Any) -> bool | None:
    """True/False when the aggregates or the stats say whether the host's disks are local;
    None when nothing says."""
    declared: list[bool] = []
    for agg in host_state.aggregates:
        value = agg.metadata.get(STORAGE_KEY)
        if value is not None:
            declared.append(strutils.bool_from_string(value))
    if declared:
        return all(declared)
    value = (host_state.stats or {}).get(STORAGE_KEY)
    if value is not None:
        return strutils.bool_from_string(value)
    return None


class LocalDiskFilter(BaseHostFilter):
    """Passes, for flavors with ``local_disk=true``, only hosts with local storage and enough
    free local disk for root + ephemeral + swap; every host for other flavors."""

    # a rebuild reuses the instance's disks on the same host
    RUN_ON_REBUILD = False
    # free_disk_mb goes down with each instance of a multi-create
    run_filter_once_per_request = False

    def prepare(self, spec_obj: Any) -> int | Any:
        """The MiB needed on the host's disks; PASS_ALL for other flavors."""
        if not wants_local_disk(spec_obj.flavor):
            return PASS_ALL
        return local_disk_mb(spec_obj)

    def check(self, host_state: Any, needed: int) -> bool | Reject:
        if declared_local_storage(host_state) is False:
            if LOG.isEnabledFor(logging.DEBUG):
                LOG.debug("%s has no local storage", host_state)
            return NO_LOCAL_STORAGE
        if host_state.free_disk_mb < needed:
            if LOG.isEnabledFor(logging.DEBUG):
                LOG.debug(
                    "%s has %d MiB of local disk free; %d MiB needed",
                    host_state,
                    host_state.free_disk_mb,
                    needed,
                )
            return NOT_ENOUGH_DISK
        return True
