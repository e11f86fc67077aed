"""The shape RamFilter, DiskFilter and CoreFilter (and their Aggregate* variants) share: the
host's usable capacity times its allocation ratio, minus what is used, must hold the request;
the product is the limit recorded for nova-compute's claim.

This module also holds ``record_limit``, the one place these filters write a host's limits;
read its docstring before adding another writer.
"""

from __future__ import annotations

import logging
from typing import Any

from filters import BaseHostFilter, Reject
from scheduler.hosts.aggregates import aggregate_override


def record_limit(spec_obj: Any, host_state: Any, resource: str, value: float) -> None:
    """Remember the oversubscription limit of ``resource`` on the host for this request: the
    driver puts it into the Selection it returns, and nova-compute's claim tests the
    instance against it (``memory_mb``, ``disk_gb``, ``vcpu``). It is kept on the request
    (``spec_obj.set_host_limit``), not on the HostState, which concurrent requests share."""
    spec_obj.set_host_limit(host_state, resource, value)


class CapacityFilter(BaseHostFilter):
    """Passes hosts whose free capacity, with the allocation ratio's overcommit, holds the
    request (and whose physical capacity alone could hold it)."""

    RUN_ON_REBUILD = False
    # every instance of a multi-create consumes the resource: check each one
    run_filter_once_per_request = False

    total_attr = ""  # HostState attribute: the usable capacity, in ``unit``s of the request
    free_attr = ""  # HostState attribute: what is free, in the request's unit
    unit = 1  # request units per unit of ``total_attr`` and of the recorded limit
    flavor_attr = ""  # Flavor attribute: the amount requested
    ratio = ""  # HostState attribute and aggregate metadata key of the allocation ratio
    default_ratio = 1.0  # nova's fallback when the compute node reports no ratio
    aggregate_ratio = False  # the host's aggregates set the ratio (the Aggregate* filters)
    limit_name = ""  # the limit recorded for nova-compute's claim
    larger_than_host = Reject("flavor larger than host")
    not_enough = Reject("not enough free capacity")
    # nova's debug lines (host, requested, what the host has), logged on ``log``
    larger_debug = "%s does not have %s usable before overcommit, it only has %s."
    not_enough_debug = "%s does not have %s usable, it only has %s usable."
    log = logging.getLogger(__name__)

    def requested(self, spec_obj: Any) -> Any:
        return getattr(spec_obj.flavor, self.flavor_attr)

    def used(self, host_state: Any, total: Any) -> Any:
        return total - getattr(host_state, self.free_attr)

    def allocation_ratio(self, host_state: Any) -> float:
        ratio = getattr(host_state, self.ratio) or self.default_ratio
        if self.aggregate_ratio:
            return aggregate_override(host_state, self.ratio, ratio, float)
        return ratio

    def prepare(self, spec_obj: Any) -> tuple[Any, Any]:
        """The request (the limit is recorded on it) and the amount it asks for."""
        return spec_obj, self.requested(spec_obj)

    def check(self, host_state: Any, prepared: tuple[Any, Any]) -> bool | Reject:
        spec_obj, requested = prepared
        total = getattr(host_state, self.total_attr) * self.unit
        if total < requested:
            return self._larger_than_host(host_state, requested, total)
        limit = total * self.allocation_ratio(host_state)
        return self._within_limit(host_state, spec_obj, requested, total, limit, True)

    def _larger_than_host(self, host_state: Any, requested: Any, total: Any) -> Reject:
        # an instance may overcommit against other instances, never against itself
        if self.log.isEnabledFor(logging.DEBUG):
            self.log.debug(self.larger_debug, host_state, requested, total)
        return self.larger_than_host

    def _within_limit(
        self, host_state: Any, spec_obj: Any, requested: Any, total: Any, limit: Any, record: bool
    ) -> bool | Reject:
        usable = limit - self.used(host_state, total)
        if usable < requested:
            if self.log.isEnabledFor(logging.DEBUG):
                self.log.debug(self.not_enough_debug, host_state, requested, usable)
            return self.not_enough
        if record:
            value = limit / self.unit if self.unit != 1 else limit
            record_limit(spec_obj, host_state, self.limit_name, value)
        return True
