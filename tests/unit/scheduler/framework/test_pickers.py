"""The pickers: nova's (a random pick among the best ``host_subset_size``, ties for the best
shuffled when asked) and the chance scheduler's (a random order, no weights)."""

from __future__ import annotations

import random
from collections import Counter
from types import SimpleNamespace

from filters.handler import FilterReport
from scheduler.framework import InstanceStep, NovaPick, RandomPick
from tests.unit.scheduler.drivers.fakes import make_host


def _conf(subset: int = 1, shuffle: bool = False) -> SimpleNamespace:
    return SimpleNamespace(
        filter_scheduler=SimpleNamespace(
            host_subset_size=subset, shuffle_best_same_weighed_hosts=shuffle
        )
    )


def _step(weights: list[float]) -> InstanceStep:
    hosts = [make_host(f"h{i}") for i in range(len(weights))]
    return InstanceStep([], False, FilterReport(hosts=list(hosts)), list(hosts), list(weights))


def test_nova_pick_takes_the_best_with_a_subset_of_one():
    step = _step([3.0, 2.0, 1.0])
    for _ in range(20):
        assert NovaPick(_conf()).first(_step([3.0, 2.0, 1.0]))[0].host == "h0"
    # the order of the others is kept: they are the alternates' source
    assert [h.host for h in NovaPick(_conf()).first(step)] == ["h0", "h1", "h2"]


def test_nova_pick_chooses_among_the_best_few_and_never_beyond():
    random.seed(7)
    firsts = Counter(
        NovaPick(_conf(subset=2)).first(_step([3.0, 2.0, 1.0]))[0].host for _ in range(200)
    )
    assert set(firsts) == {"h0", "h1"}


def test_ties_for_the_best_are_shuffled_only_when_asked():
    random.seed(3)
    firsts = Counter(
        NovaPick(_conf(shuffle=True)).first(_step([5.0, 5.0, 5.0, 1.0]))[0].host for _ in range(200)
    )
    assert set(firsts) == {"h0", "h1", "h2"}
    assert {NovaPick(_conf()).first(_step([5.0, 5.0, 1.0]))[0].host for _ in range(50)} == {"h0"}


def test_random_pick_orders_the_filtered_hosts_at_random_without_weights():
    step = RandomPick(random.Random(1)).arrange(_step([3.0, 2.0, 1.0, 0.5]))
    assert sorted(h.host for h in step.hosts) == ["h0", "h1", "h2", "h3"]
    assert step.weights == [0.0] * 4
    orders = {
        tuple(h.host for h in RandomPick(random.Random(seed)).arrange(_step([1.0] * 4)).hosts)
        for seed in range(20)
    }
    assert len(orders) > 1
