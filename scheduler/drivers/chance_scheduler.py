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
from typing import Any

from filters.compute_filter import ComputeFilter
from filters.handler import FilterHandler
from scheduler.conf import CONF
from scheduler.drivers.filter_scheduler import FilterScheduler, InstanceStep
from scheduler.hosts.state import HostState
from scheduler.request import SchedulingRequest
from weighers.handler import WeightHandler

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

    def select_hosts(
        self,
        req: SchedulingRequest,
        hosts: list[HostState],
        index: int,
        *,
        explain: bool = False,
    ) -> InstanceStep:
        """The up and enabled hosts in random order (all weighing 0): the driver claims the
        first one that Placement accepts, and the others are its alternates."""
        step = super().select_hosts(req, hosts, index, explain=explain)
        order = list(range(len(step.report.hosts)))
        self._random.shuffle(order)
        step.hosts = [step.report.hosts[i] for i in order]
        step.weights = [0.0] * len(order)
        if step.weighed is not None:
            step.weighed = [step.weighed[i] for i in order]
        return step

    def _get_sorted_hosts(
        self, req: SchedulingRequest, hosts: list[HostState], index: int
    ) -> list[HostState]:
        # the order is the random one: no subset pick, no tie shuffling
        return self.select_hosts(req, hosts, index).hosts
