"""The chance scheduler: a random up and enabled host among Placement's candidates.

Everything but the choice is the filter scheduler's: prefilters, the Placement query, the
claim of the chosen host (falling back to the next host when Placement refuses), rollback of
every claim on failure, alternates from the same cell, NoValidHost with its reasons. Only the
host-sorting step differs: instead of the ``[filter_scheduler]`` filters and weighers, the
candidates whose compute service is up and enabled (ComputeFilter) are shuffled. So it is the
filter scheduler with other parts, not a class of its own: ComputeFilter alone, no weighers,
and the random picker (``pickers.RandomPick``).

Requested destinations, ``ignore_hosts`` and forced hosts/nodes narrow the hosts as they do
for the filter scheduler (forced hosts skip the up/enabled check there too).
"""

from __future__ import annotations

import logging
import random
from typing import Any

from filters.compute_filter import ComputeFilter
from scheduler.conf import CONF
from scheduler.drivers.base import NO_OBSERVERS, Observers
from scheduler.drivers.filter_scheduler import FilterScheduler
from scheduler.framework.pickers import RandomPick

LOG = logging.getLogger(__name__)


def ChanceScheduler(  # noqa: N802 - the driver's name, as nova's class was named
    *,
    placement: Any = None,
    host_manager: Any = None,
    conf: Any = CONF,
    rng: random.Random | None = None,
    observers: Observers = NO_OBSERVERS,
) -> FilterScheduler:
    """The chance scheduler (entry point ``chance_scheduler``): a random up and enabled host
    among the Placement candidates; still claims it in Placement. ``rng``: a seeded
    ``random.Random`` (tests)."""
    driver = FilterScheduler(
        placement=placement,
        host_manager=host_manager,
        conf=conf,
        observers=observers,
        # the [filter_scheduler] filters and weighers do not apply: up and enabled is all
        filters=[ComputeFilter()],
        weighers=[],
        picker=RandomPick(rng),
    )
    LOG.info(
        "Chance scheduler ready: a random up and enabled host among the Placement "
        "candidates ([filter_scheduler] enabled_filters and weight_classes are not used)"
    )
    return driver


ChanceScheduler.takes_observers = True  # type: ignore[attr-defined]
