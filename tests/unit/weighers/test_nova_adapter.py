"""Weigher classes written against nova's BaseHostWeigher, loaded by class path and run by
our weight handler through NovaWeigherAdapter, weighing as nova's BaseWeightHandler does.
The nova base class here is a small stand-in with nova 34's code (nova is not installed in
this venv); the real one is proven in tests/functional/test_nova_plugins.py."""

from __future__ import annotations

import pytest

from scheduler.exceptions import PluginNotFound
from scheduler.nova_plugins import NovaPluginImportError
from tests.unit.filters.fakes import make_aggregate, make_host, make_spec, tabled
from weighers.handler import WeightHandler, load_weighers
from weighers.nova_adapter import NovaWeigherAdapter
from weighers.ram import RAMWeigher


class BaseHostWeigher:
    """nova.weights.BaseWeigher, as nova 34 has it."""

    minval = None
    maxval = None

    def weight_multiplier(self, host_state):
        return 1.0

    def _weigh_object(self, obj, weight_properties):
        raise NotImplementedError

    def weigh_objects(self, weighed_obj_list, weight_properties):
        weights = []
        for obj in weighed_obj_list:
            weight = self._weigh_object(obj.obj, weight_properties)
            if self.minval is not None:
                weight = max(weight, self.minval)
            if self.maxval is not None:
                weight = min(weight, self.maxval)
            weights.append(weight)
        return weights


def nova_weigh(weighers, hosts, spec):
    """nova 34's BaseWeightHandler.get_weighed_objects, on plain hosts: (host, weight)
    best first."""
    weighed = [[h, 0.0] for h in hosts]

    class Weighed:
        def __init__(self, obj):
            self.obj = obj

    for weigher in weighers:
        raw = weigher.weigh_objects([Weighed(h) for h in hosts], spec)
        low = float(min(raw) if weigher.minval is None else weigher.minval)
        high = float(max(raw) if weigher.maxval is None else weigher.maxval)
        norm = [0] * len(raw) if low == high else [(v - low) / (high - low) for v in raw]
        for item, value in zip(weighed, norm, strict=True):
            item[1] += weigher.weight_multiplier(item[0]) * value
    return sorted(weighed, key=lambda x: x[1], reverse=True)


class FreeDiskPercentWeigher(BaseHostWeigher):
    """Share of the disk free, on a fixed 0-100 scale; multiplier from the aggregates."""

    minval = 0
    maxval = 100

    def weight_multiplier(self, host_state):
        values = [
            float(a.metadata["disk_pct_multiplier"])
            for a in host_state.aggregates
            if "disk_pct_multiplier" in a.metadata
        ]
        return min(values) if values else 2.0

    def _weigh_object(self, host_state, weight_properties):
        return 100.0 * host_state.free_disk_mb / (host_state.total_usable_disk_gb * 1024)


class RackSpreadWeigher(BaseHostWeigher):
    """Its own weigh_objects over nova's WeighedHost: hosts outside the busy racks first."""

    def weigh_objects(self, weighed_obj_list, weight_properties):
        busy = set(weight_properties.scheduler_hints.get("busy_racks") or [])
        return [0.0 if w.obj.stats.get("rack") in busy else 1.0 for w in weighed_obj_list]


class OverflowWeigher(BaseHostWeigher):
    """Raw values beyond its maxval: nova's weigh_objects clamps them."""

    minval = 0
    maxval = 10

    def _weigh_object(self, host_state, weight_properties):
        return host_state.free_ram_mb


def disk_hosts():
    return [
        make_host("a", free_disk_mb=10 * 1024, total_usable_disk_gb=100, stats={"rack": "r1"}),
        make_host("b", free_disk_mb=50 * 1024, total_usable_disk_gb=100, stats={"rack": "r2"}),
        make_host(
            "c",
            free_disk_mb=30 * 1024,
            total_usable_disk_gb=100,
            stats={"rack": "r1"},
            aggregates=[make_aggregate(1, disk_pct_multiplier="5")],
        ),
    ]


@pytest.mark.parametrize("explain", [False, True])
def test_weights_and_order_are_nova_arithmetic(explain):
    hosts = disk_hosts()
    spec = make_spec(hints={"busy_racks": ["r1"]})
    plugins = [FreeDiskPercentWeigher(), RackSpreadWeigher()]
    handler = WeightHandler([NovaWeigherAdapter(p, "p") for p in plugins])
    weighed = handler.weigh(hosts, spec, explain=explain)
    expected = nova_weigh(plugins, hosts, spec)
    assert [w.obj.host for w in weighed] == [h.host for h, _ in expected] == ["b", "c", "a"]
    assert [w.weight for w in weighed] == pytest.approx([w for _, w in expected])
    # b: 2 * 0.5 + 1 (rack r2 is not busy); c: 5 * 0.3 (its aggregate's multiplier); a: 2 * 0.1
    assert [w.weight for w in weighed] == pytest.approx([2.0, 1.5, 0.2])
    ranked, weights = handler.rank(hosts, spec)
    assert [h.host for h in ranked] == ["b", "c", "a"]
    assert weights == pytest.approx([2.0, 1.5, 0.2])
    if explain:
        assert set(weighed[0].contributions) == {"FreeDiskPercentWeigher", "RackSpreadWeigher"}


def test_values_beyond_maxval_are_clamped_as_nova_does():
    hosts = [make_host("a", free_ram_mb=4), make_host("b", free_ram_mb=400)]
    weighed = WeightHandler([NovaWeigherAdapter(OverflowWeigher(), "p")]).weigh(hosts, make_spec())
    assert [(w.obj.host, w.weight) for w in weighed] == [("b", 1.0), ("a", pytest.approx(0.4))]


def test_weigh_objects_is_given_nova_weighed_hosts_and_request():
    seen = []

    class Probe(BaseHostWeigher):
        def weigh_objects(self, weighed_obj_list, weight_properties):
            seen.extend((type(w).__name__, w.obj.host, w.weight) for w in weighed_obj_list)
            seen.append(weight_properties.get_scheduler_hint("x"))
            return [1.0] * len(weighed_obj_list)

    WeightHandler([NovaWeigherAdapter(Probe(), "p")]).weigh(
        [make_host("a"), make_host("b")], make_spec(hints={"x": ["y"]})
    )
    assert seen == [("WeighedHost", "a", 0.0), ("WeighedHost", "b", 0.0), "y"]


def test_load_weighers_imports_other_paths_and_keeps_nova_builtins_ours():
    module = __name__
    loaded = load_weighers(
        [
            "nova.scheduler.weights.ram.RAMWeigher",
            f"{module}.FreeDiskPercentWeigher",
            f"{module}.RackSpreadWeigher",
        ]
    )
    assert type(loaded[0]) is RAMWeigher
    assert [type(w.plugin) for w in loaded[1:]] == [FreeDiskPercentWeigher, RackSpreadWeigher]
    assert [w.name for w in loaded] == ["RAMWeigher", "FreeDiskPercentWeigher", "RackSpreadWeigher"]


def test_load_weighers_refuses_an_unimportable_path_naming_the_module():
    with pytest.raises(NovaPluginImportError) as err:
        load_weighers(["RAMWeigher", "mycloud_not_installed.weighers.RackWeigher"])
    assert "'mycloud_not_installed.weighers'" in str(err.value)
    assert "No module named 'mycloud_not_installed'" in str(err.value)


def test_nova_weigher_novasched_does_not_implement_without_nova_is_unknown():
    with pytest.raises(PluginNotFound) as err:
        load_weighers(["nova.scheduler.weights.future.FutureWeigher"])
    assert err.value.names == ["nova.scheduler.weights.future.FutureWeigher"]


def test_hosts_in_the_host_table_weigh_as_the_list_path():
    hosts = [
        make_host(
            f"h{i:03d}",
            free_disk_mb=(i % 17) * 1024,
            total_usable_disk_gb=20,
            stats={"rack": f"r{i % 3}"},
            aggregates=[make_aggregate(1, disk_pct_multiplier="0.5")] if i % 5 == 0 else [],
        )
        for i in range(80)
    ]
    spec = make_spec(hints={"busy_racks": ["r0"]})
    plugins = [FreeDiskPercentWeigher(), RackSpreadWeigher()]
    handler = WeightHandler([NovaWeigherAdapter(p, "p") for p in plugins])
    table, _ = tabled(hosts)
    ranked, weights = handler.rank(hosts, spec)
    expected = nova_weigh(plugins, hosts, spec)
    assert [h.host for h in ranked] == [h.host for h, _ in expected]
    assert weights == pytest.approx([w for _, w in expected])
    del table
