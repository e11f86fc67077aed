"""aggregate_utils: nova's ways of reading aggregate metadata."""

from __future__ import annotations

import logging

from scheduler.hosts.aggregates import (
    OverrideCache,
    aggregate_metadata_get_by_host,
    aggregate_override,
    aggregate_values_from_key,
    per_aggregate_set,
)
from tests.unit.filters.fakes import make_aggregate, make_host


def host_in(*aggregates):
    return make_host(aggregates=list(aggregates))


def test_values_from_key_are_raw_and_deduplicated():
    host = host_in(
        make_aggregate(1, k="a,b", other="x"),
        make_aggregate(2, k="a,b"),
        make_aggregate(3, k="c"),
        make_aggregate(4),
    )
    assert aggregate_values_from_key(host, "k") == {"a,b", "c"}
    assert aggregate_values_from_key(host, "missing") == set()


def test_metadata_by_host_splits_on_commas_strips_and_unions():
    host = host_in(make_aggregate(1, k="a, b", z="1"), make_aggregate(2, k="c,a"))
    assert aggregate_metadata_get_by_host(host) == {"k": {"a", "b", "c"}, "z": {"1"}}
    assert aggregate_metadata_get_by_host(make_host()) == {}


def test_override_is_the_minimum_of_the_aggregate_values():
    host = host_in(make_aggregate(1, limit="7"), make_aggregate(2, limit="3"))
    assert aggregate_override(host, "limit", 10, int) == 3
    assert aggregate_override(host_in(make_aggregate(1, limit="12")), "limit", 10, int) == 12


def test_override_without_the_key_is_the_config_value():
    assert aggregate_override(host_in(make_aggregate(1, other="1")), "limit", 10, int) == 10
    assert aggregate_override(make_host(), "limit", 10, int) == 10


def test_one_bad_value_discards_all_of_them_with_a_warning(caplog):
    host = host_in(make_aggregate(1, limit="2"), make_aggregate(2, limit="many"))
    with caplog.at_level(logging.WARNING, logger="scheduler.hosts.aggregates"):
        assert aggregate_override(host, "limit", 10, int) == 10
    assert "Could not decode limit" in caplog.text
    # int() does not take "1.5", float() does
    assert aggregate_override(host_in(make_aggregate(1, limit="1.5")), "limit", 10, int) == 10
    assert aggregate_override(host_in(make_aggregate(1, limit="1.5")), "ratio", 2.0, float) == 2.0
    assert aggregate_override(host_in(make_aggregate(1, ratio="1.5")), "ratio", 2.0, float) == 1.5


def test_override_cache_computes_once_per_aggregate_combination(caplog):
    bad = make_aggregate(1, limit="bad")
    low = make_aggregate(2, limit="2")
    hosts = [
        make_host("a", aggregates=[bad]),
        make_host("b", aggregates=[bad]),
        make_host("c", aggregates=[low]),
        make_host("d"),
    ]
    cache = OverrideCache("limit", 10, int)
    with caplog.at_level(logging.WARNING, logger="scheduler.hosts.aggregates"):
        assert [cache.get(h) for h in hosts] == [10, 10, 2, 10]
    assert caplog.text.count("Could not decode") == 1


def test_per_aggregate_set_checks_once_per_list_of_aggregates():
    one, two = make_aggregate(1), make_aggregate(2)
    hosts = [
        make_host("a", aggregates=[one]),
        make_host("b", aggregates=[one]),
        make_host("c", aggregates=[one, two]),
        make_host("d"),
        make_host("e"),
    ]
    seen = []
    check = per_aggregate_set(lambda host: seen.append(host.host) or host.host)
    # the answer of the first host of each aggregate list is reused
    assert [check(h) for h in hosts] == ["a", "a", "c", "d", "d"]
    assert seen == ["a", "c", "d"]
