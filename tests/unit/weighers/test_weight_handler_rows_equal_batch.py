"""The weight handler's array path (``_weigh_rows``, hosts in a host table) against its list
path (``_weigh_batch``) and the explain path, over random hosts, aggregates, requests and
multipliers: the same order and exactly the same floats."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings

import weighers.handler as handler_mod
from tests.unit.filters.fakes import make_aggregate, make_host, make_spec, tabled
from tests.unit.weighers.fakes import Clamped, Flat
from tests.unit.weighers.strategies import (
    ALL_WEIGHERS,
    conf,
    configured,
    hosts_and_aggregates,
    multipliers,
    requests,
)
from weighers.handler import WeighedHost, WeigherError, WeightHandler


def outcome(call):
    try:
        return call()
    except WeigherError as exc:
        return ("raised", str(exc))


def assert_rows_equal_batch(weighers, hosts, spec):
    if len(hosts) < 2:
        return False  # the handler does not weigh one host or none
    handler = WeightHandler(weighers)
    table, rows = tabled(hosts)
    by_rows = outcome(lambda: handler._weigh_rows(table, rows, list(hosts), spec))
    by_list = outcome(lambda: handler._weigh_batch(list(hosts), spec))
    if by_rows is None:  # a NaN: the list path decides
        return False
    if by_list and by_list[0] == "raised":
        assert by_rows == by_list
        return True
    assert [id(h) for h in by_rows[0]] == [id(h) for h in by_list[0]]
    assert by_rows[1] == by_list[1]
    assert all(type(w) is float for w in by_rows[1])
    # and the explain path's floats, host by host
    explained = outcome(lambda: handler.weigh(hosts, spec, explain=True))
    if isinstance(explained, tuple):
        # explain computes even a weigher whose multiplier is 0 (MetricsWeigher with a
        # required metric missing then raises); the fast paths skip it
        return True
    assert [(id(w.obj), w.weight) for w in explained] == list(
        zip(map(id, by_rows[0]), by_rows[1], strict=True)
    )
    return True


SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(hosts_and_aggregates(), requests(), conf, multipliers)
def test_weigh_rows_equals_weigh_batch(hosts, spec, values, more):
    values = {**values, **more}
    with configured(values):
        assert_rows_equal_batch([cls() for cls in ALL_WEIGHERS], hosts, spec)


@SETTINGS
@given(hosts_and_aggregates(), requests())
def test_weigh_rows_equals_weigh_batch_with_plugin_weighers(hosts, spec):
    weighers = [Clamped(), Flat(), *(cls() for cls in ALL_WEIGHERS[:4])]
    with configured({("required", "metrics"): False}):
        assert_rows_equal_batch(weighers, hosts, spec)


def test_rows_follow_consumption_between_requests():
    """A host's column value changes with its consumption: the next ranking sees it."""
    hosts = [make_host(f"h{i}", free_ram_mb=4096 - i, free_disk_mb=10_000) for i in range(80)]
    table, rows = tabled(hosts)
    handler = WeightHandler([cls() for cls in ALL_WEIGHERS])
    spec = make_spec()
    with configured({("required", "metrics"): False}):
        first, _ = handler._weigh_rows(table, rows, hosts, spec)
        assert first[0].host == "h0"
        first[0].consume_from_request(spec)  # 512 MB less on h0
        second, _ = handler._weigh_rows(table, rows, hosts, spec)
        assert second[0].host == "h1"
        assert [id(h) for h in second] == [id(h) for h in handler._weigh_batch(hosts, spec)[0]]


def test_rank_uses_the_arrays_for_many_hosts_in_a_table(monkeypatch):
    agg = make_aggregate(1, ram_weight_multiplier="-1.0")
    hosts = [
        make_host(f"h{i}", free_ram_mb=i * 100, aggregates=[agg] if i % 3 else [])
        for i in range(handler_mod.COLUMNS_MIN_HOSTS + 10)
    ]
    table, _ = tabled(hosts)  # the hosts hold their table weakly: keep it alive
    handler = WeightHandler([cls() for cls in ALL_WEIGHERS])
    calls = []
    real = WeightHandler._weigh_rows

    def spy(self, *args):
        result = real(self, *args)
        calls.append(result is not None)
        return result

    monkeypatch.setattr(WeightHandler, "_weigh_rows", spy)
    with configured({("required", "metrics"): False}):
        ranked, weights = handler.rank(hosts, make_spec())
        weighed = handler.weigh(hosts, make_spec())
    assert calls == [True, True]
    assert ranked == [w.obj for w in weighed] and weights == [w.weight for w in weighed]
    # hosts in the aggregate stack (-1.0) while the others spread: the emptiest host
    # outside it is the best, the emptiest inside it the worst
    assert (ranked[0].host, ranked[-1].host) == ("h72", "h73")
    assert all(isinstance(w, WeighedHost) for w in weighed)
    del table


def test_a_nan_in_a_column_sends_the_weighing_to_the_list_path():
    hosts = [make_host(f"h{i}", free_ram_mb=i) for i in range(5)]
    hosts[2].free_ram_mb = float("nan")
    table, rows = tabled(hosts)
    handler = WeightHandler([cls() for cls in ALL_WEIGHERS])
    with configured({("required", "metrics"): False}):
        # RAMWeigher's column holds NaN for h2: the weigher is asked host by host, and the
        # NaN it returns makes the array path step aside
        assert handler._weigh_rows(table, rows, hosts, make_spec()) is None
    ram_columns = [a for name, (_, a) in table._numeric.items() if name.endswith("RAMWeigher")]
    assert math.isnan(ram_columns[0][rows[2]])


@pytest.mark.parametrize("count", [0, 1])
def test_one_host_or_none_is_not_weighed(count):
    hosts = [make_host("only")][:count]
    handler = WeightHandler([cls() for cls in ALL_WEIGHERS])
    assert handler.rank(hosts, make_spec()) == (hosts, [0.0] * count)


class LessRam(ALL_WEIGHERS[-3]):  # RAMWeigher, extended by a plugin
    def weigh(self, host_state, prepared):
        return -host_state.free_ram_mb


def test_a_subclass_that_changes_the_value_is_not_read_from_the_column():
    assert LessRam.__mro__[1].__name__ == "RAMWeigher"
    hosts = [make_host(f"h{i}", free_ram_mb=i * 10) for i in range(5)]
    table, rows = tabled(hosts)
    handler = WeightHandler([LessRam()])
    ranked, _ = handler._weigh_rows(table, rows, hosts, make_spec())
    assert [h.host for h in ranked] == ["h0", "h1", "h2", "h3", "h4"]
