"""IoOpsFilter: hosts with fewer concurrent I/O-heavy operations than the configured maximum."""

from __future__ import annotations

from filters import Reject
from filters.host_counter_limit import HostCounterLimitFilter

TOO_MANY_IO_OPS = Reject("too many I/O operations")


class IoOpsFilter(HostCounterLimitFilter):
    """Passes hosts running fewer I/O-heavy operations (builds, resizes, snapshots ...) than
    ``[filter_scheduler] max_io_ops_per_host``."""

    counter = "num_io_ops"
    option = "max_io_ops_per_host"
    reject = TOO_MANY_IO_OPS
    debug_text = "%(host)s fails I/O ops check: Max IOs per host is set to %(max)s"
