"""The weigher contract: ``prepare`` once per request, ``weigh`` once per host, ``Same`` when
every host gets the same raw weight, nova's ``_weigh_object`` as ``weigh`` after
``prepare``, the old batch methods refused, and ``@host_column`` for its own class only."""

from __future__ import annotations

import logging

import pytest

from tests.unit.filters.fakes import make_host, make_spec, tabled
from tests.unit.weighers.fakes import weigh_all
from weighers import BaseHostWeigher, Same, host_column
from weighers.handler import WeightHandler, raw_values
from weighers.ram import RAMWeigher


class Counting(BaseHostWeigher):
    """Weighs by the ``value`` stat plus what prepare read from the request once."""

    def __init__(self):
        self.prepared = 0
        self.weighed = 0

    def prepare(self, weight_properties, hosts):
        self.prepared += 1
        return weight_properties.scheduler_hints.get("bonus", 0)

    def weigh(self, host_state, bonus):
        self.weighed += 1
        return host_state.stats["value"] + bonus


class SameForAll(BaseHostWeigher):
    """Every host gets 7 for this request: no host is weighed."""

    def prepare(self, weight_properties, hosts):
        return Same(7)

    def weigh(self, host_state, prepared):
        raise AssertionError("a Same from prepare: no host is weighed")


class NovaStyle(BaseHostWeigher):
    """Written as nova writes a weigher: only _weigh_object."""

    def _weigh_object(self, host_state, weight_properties):
        return host_state.stats["value"] * 2


def value_hosts(values=(3, 1, 2)):
    return [make_host(f"h{i}", stats={"value": v}) for i, v in enumerate(values)]


def test_prepare_once_per_request_and_weigh_once_per_host():
    weigher = Counting()
    hosts = value_hosts()
    assert weigh_all(weigher, hosts, make_spec(hints={"bonus": 10})) == [13, 11, 12]
    assert (weigher.prepared, weigher.weighed) == (1, 3)
    ranked = WeightHandler([weigher]).weigh(hosts, make_spec())
    assert [w.obj.host for w in ranked] == ["h0", "h2", "h1"]
    assert (weigher.prepared, weigher.weighed) == (2, 6)


def test_weigh_object_is_weigh_after_prepare():
    weigher = Counting()
    spec = make_spec(hints={"bonus": 5})
    for host in value_hosts():
        assert weigher._weigh_object(host, spec) == weigher.weigh(
            host, weigher.prepare(spec, [host])
        )
    # a Same from prepare is every host's value
    assert SameForAll()._weigh_object(make_host("a"), make_spec()) == 7


def test_a_nova_style_weigher_is_weighed_through_its_weigh_object():
    weigher = NovaStyle()
    hosts = value_hosts()
    assert weigher.prepare("request", hosts) == "request"
    assert weigh_all(weigher, hosts, make_spec()) == [6, 2, 4]
    assert [weigher.weigh(h, make_spec()) for h in hosts] == [6, 2, 4]


def test_a_weigher_without_weigh_or_weigh_object_names_its_class():
    class Empty(BaseHostWeigher):
        pass

    with pytest.raises(NotImplementedError, match="Empty"):
        Empty()._weigh_object(make_host("a"), make_spec())
    with pytest.raises(NotImplementedError, match="Empty"):
        weigh_all(Empty(), value_hosts(), make_spec())


def test_raw_values_hands_back_the_same():
    assert raw_values(SameForAll(), value_hosts(), make_spec()) == Same(7)
    assert weigh_all(SameForAll(), value_hosts(), make_spec()) == [7, 7, 7]
    assert repr(Same(7)) == "Same(7)"


@pytest.mark.parametrize("explain", [False, True])
def test_same_skips_weighing_on_the_list_and_explain_paths(explain):
    hosts = value_hosts()
    weighed = WeightHandler([SameForAll(), NovaStyle()]).weigh(hosts, make_spec(), explain)
    assert [(w.obj.host, w.weight) for w in weighed] == [("h0", 1.0), ("h2", 0.5), ("h1", 0.0)]
    if explain:
        assert {w.contributions["SameForAll"].raw for w in weighed} == {7.0}


def test_same_skips_weighing_on_the_array_path():
    hosts = [make_host(f"h{i}", free_ram_mb=i) for i in range(5)]
    table, rows = tabled(hosts)
    ranked, weights = WeightHandler([SameForAll(), RAMWeigher()])._weigh_rows(
        table, rows, hosts, make_spec()
    )
    assert [h.host for h in ranked] == ["h4", "h3", "h2", "h1", "h0"]
    assert weights == [1.0, 0.75, 0.5, 0.25, 0.0]


def test_same_with_debug_logging(caplog):
    with caplog.at_level(logging.DEBUG, logger="weighers.handler"):
        ranked, _ = WeightHandler([SameForAll(), NovaStyle()]).rank(value_hosts(), make_spec())
    assert [h.host for h in ranked] == ["h0", "h2", "h1"]
    assert any(r.getMessage().startswith("SameForAll: raw weights") for r in caplog.records)


@pytest.mark.parametrize(
    ("method", "advice"),
    [("weigh_objects", "weigh(host_state, prepared)"), ("uniform_weight", "Same")],
)
def test_the_old_batch_methods_are_refused_saying_where_the_code_goes(method, advice):
    with pytest.raises(TypeError, match="no longer") as err:
        type("Old", (BaseHostWeigher,), {method: lambda self, *args: None})
    assert method in str(err.value)
    assert advice in str(err.value)
    assert "prepare(weight_properties)" in str(err.value)


def test_weigh_object_beneath_a_weigher_that_weighs_in_weigh_is_refused():
    with pytest.raises(TypeError, match=r"override weigh\(host_state, prepared\) instead"):

        class MoreRam(RAMWeigher):
            def _weigh_object(self, host_state, weight_properties):
                return 2 * host_state.free_ram_mb

    # beneath a weigher written nova's way, _weigh_object is still the method
    class Triple(NovaStyle):
        def _weigh_object(self, host_state, weight_properties):
            return host_state.stats["value"] * 3

    assert weigh_all(Triple(), value_hosts(), make_spec()) == [9, 3, 6]

    # with its own weigh, a subclass may also keep a nova _weigh_object of its own
    class Both(RAMWeigher):
        def weigh(self, host_state, prepared):
            return -host_state.free_ram_mb

        def _weigh_object(self, host_state, weight_properties):
            return self.weigh(host_state, self.prepare(weight_properties, [host_state]))

    assert weigh_all(Both(), [make_host("a", free_ram_mb=5)], make_spec()) == [-5]


def test_host_column_marks_only_the_class_it_decorates():
    @host_column
    class Ram(BaseHostWeigher):
        def weigh(self, host_state, prepared):
            return host_state.free_ram_mb

    class Sub(Ram):
        pass

    assert Ram.__host_column__ is Ram
    assert Sub.__host_column__ is not Sub
    assert RAMWeigher.__host_column__ is RAMWeigher


def test_a_subclass_weighing_otherwise_under_a_column_weigher_is_not_read_from_the_column():
    class LessRam(RAMWeigher):
        def weigh(self, host_state, prepared):
            return -host_state.free_ram_mb

    hosts = [make_host(f"h{i}", free_ram_mb=i * 10) for i in range(5)]
    table, rows = tabled(hosts)
    assert WeightHandler._raw_column(LessRam(), table, rows) is None
    assert WeightHandler._raw_column(RAMWeigher(), table, rows).tolist() == [0, 10, 20, 30, 40]
    ranked, _ = WeightHandler([LessRam()])._weigh_rows(table, rows, hosts, make_spec())
    assert [h.host for h in ranked] == ["h0", "h1", "h2", "h3", "h4"]
    ranked, _ = WeightHandler([RAMWeigher()])._weigh_rows(table, rows, hosts, make_spec())
    assert [h.host for h in ranked] == ["h4", "h3", "h2", "h1", "h0"]
