"""How a driver orders the filtered hosts and which goes first: its picker.

A picker has two steps. ``arrange(step)`` may reorder an instance's filtered and weighed
hosts (``InstanceStep``). ``first(step)`` gives the order in which hosts are tried: the
first is claimed, and the rest are the fallbacks and alternates.

* ``NovaPick`` (the filter scheduler's, nova's ``_get_sorted_hosts``): the weighed order.
  The hosts that tie for the best weight are shuffled when
  ``[filter_scheduler] shuffle_best_same_weighed_hosts`` asks for it. A random pick among
  the best ``host_subset_size`` goes first.
* ``RandomPick`` (the chance scheduler's): the filtered hosts in random order, all weighing
  0, tried in that order.
"""

from __future__ import annotations

import random
from typing import Any, Protocol

from scheduler.conf import CONF
from scheduler.hosts.state import HostState


class Picker(Protocol):
    def arrange(self, step: Any) -> Any: ...

    def first(self, step: Any) -> list[HostState]: ...


class NovaPick:
    """nova's pick (see the module docstring)."""

    def __init__(self, conf: Any = CONF):
        self.conf = conf

    def arrange(self, step: Any) -> Any:
        return step

    def first(self, step: Any) -> list[HostState]:
        ordered, weights = step.hosts, step.weights
        if not ordered:
            return []
        fs = self.conf.filter_scheduler
        if fs.shuffle_best_same_weighed_hosts and len(ordered) > 1:
            # fewer claim races between schedulers when many hosts tie for the best weight
            best = weights[0]
            n_ties = next((i for i, w in enumerate(weights) if w != best), len(weights))
            ties = ordered[:n_ties]
            random.shuffle(ties)
            ordered = ties + ordered[n_ties:]
        # a random pick among the best few spreads the load of similar requests
        chosen = random.choice(ordered[: max(1, fs.host_subset_size)])
        if chosen is not ordered[0]:
            ordered.remove(chosen)
            ordered.insert(0, chosen)
        return ordered


class RandomPick:
    """The chance scheduler's pick: a random order, no weights (``rng``: a seeded
    ``random.Random`` for tests)."""

    def __init__(self, rng: random.Random | None = None):
        self._random = rng if rng is not None else random.Random()

    def arrange(self, step: Any) -> Any:
        order = list(range(len(step.report.hosts)))
        self._random.shuffle(order)
        step.hosts = [step.report.hosts[i] for i in order]
        step.weights = [0.0] * len(order)
        if step.weighed is not None:
            step.weighed = [step.weighed[i] for i in order]
        return step

    def first(self, step: Any) -> list[HostState]:
        # the order is the random one: no subset pick, no tie shuffling
        return step.hosts
