"""NumInstancesFilter: hosts running fewer instances than the configured maximum."""

from __future__ import annotations

from filters import Reject
from filters.host_counter_limit import HostCounterLimitFilter

TOO_MANY_INSTANCES = Reject("too many instances")


class NumInstancesFilter(HostCounterLimitFilter):
    """Passes hosts that run fewer instances than ``[filter_scheduler] max_instances_per_host``."""

    counter = "num_instances"
    option = "max_instances_per_host"
    reject = TOO_MANY_INSTANCES
    debug_text = "%(host)s fails num_instances check: Max instances per host is set to %(max)s"
