"""The chance scheduler: a random up and enabled host among Placement's candidates.

Everything but the choice is the filter scheduler's: prefilters, the Placement query, the
claim of the chosen host (falling back to the next host when Placement refuses), rollback of
every claim on failure, alternates from the same cell, NoValidHost with its reasons. Only the
host-sorting step differs: instead of the ``[filter_scheduler]`` filters and weighers, the
candidates whose compute service is up and enabled (ComputeFilter) are shuffled.

Requested destinations, ``ignore_hosts`` and forced hosts/nodes narrow the hosts as they do
for the filter scheduler (forced hosts skip the up/enabled check there too).
"""

from __future__ import annotations

import logging
import random
import time
from typing import TYPE_CHECKING, Any

from filters.compute_filter import ComputeFilter
from filters.handler import FilterHandler, FilterReport
from scheduler.conf import CONF
from scheduler.drivers.filter_scheduler import FilterScheduler
from scheduler.hosts.state import HostState
from weighers.handler import WeightHandler

if TYPE_CHECKING:
    from scheduler.drivers.filter_scheduler import _Request

LOG = logging.getLogger(__name__)


class ChanceScheduler(FilterScheduler):
    """Picks a random up and enabled host among the Placement candidates (entry point
    ``chance_scheduler``); still claims it in Placement."""

    def __init__(
        self,
        *,
        placement: Any = None,
        host_manager: Any = None,
        conf: Any = CONF,
        rng: random.Random | None = None,
    ):
        super().__init__(placement=placement, host_manager=host_manager, conf=conf)
        # the [filter_scheduler] filters and weighers do not apply: up and enabled is all
        self.filter_handler = FilterHandler([ComputeFilter()])
        self.weight_handler = WeightHandler([])
        self._random = rng if rng is not None else random.Random()
        LOG.info(
            "Chance scheduler ready: a random up and enabled host among the Placement "
            "candidates ([filter_scheduler] enabled_filters and weight_classes are not used)"
        )

    def _get_sorted_hosts(
        self, req: _Request, hosts: list[HostState], index: int
    ) -> list[HostState]:
        """The up and enabled hosts in random order: the driver claims the first one that
        Placement accepts, and the others are its alternates."""
        started = time.perf_counter()
        if index == 0:
            req.total_hosts = len(hosts)
        narrowed, forced = self._narrow(req, hosts)
        if forced:
            report = FilterReport(hosts=list(narrowed))
        else:
            report = self.filter_handler.run(narrowed, req.spec, index, request_id=req.request_id)
        req.last_report = report
        ordered = list(report.hosts)
        self._random.shuffle(ordered)
        req.timings["filter"] = req.timings.get("filter", 0.0) + (time.perf_counter() - started)
        return ordered
