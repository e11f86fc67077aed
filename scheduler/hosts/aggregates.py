"""Reading host aggregate metadata the way nova's filters do.

Three helpers, with nova's semantics:

* ``aggregate_values_from_key(host, key)``: the set of raw values of ``key`` across the host's
  aggregates (``"a,b"`` stays one value).
* ``aggregate_metadata_get_by_host(host)``: every key of the host's aggregates mapped to the set
  of its values, comma-split and stripped (``"a, b"`` gives ``{"a", "b"}``).
* ``aggregate_override(host, key, default, cast)``: a per-aggregate override of a config value
  (``max_io_ops_per_host`` ...): the minimum of the values when every value converts, the config
  value when no aggregate sets the key, and the config value (with a warning) when any value does
  not convert -- nova's ``validate_num_values``: one bad value discards them all.

``OverrideCache`` memoizes ``aggregate_override`` per combination of aggregates within one batch
of hosts: hosts in the same aggregates share one computation (and one warning);
``per_aggregate_set`` does the same for any per-host check that depends only on the aggregates
(the filter handler's, for a filter with ``per_aggregates``).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

LOG = logging.getLogger(__name__)

T = TypeVar("T", int, float)
R = TypeVar("R")


def aggregate_values_from_key(host_state: Any, key: str) -> set[str]:
    """The raw values of ``key`` in the metadata of the host's aggregates."""
    values: set[str] = set()
    for agg in host_state.aggregates or ():
        value = agg.metadata.get(key)
        if value is not None:
            values.add(value)
    return values


def aggregate_metadata_get_by_host(host_state: Any) -> dict[str, set[str]]:
    """Every metadata key of the host's aggregates -> the union of its comma-split values."""
    metadata: dict[str, set[str]] = defaultdict(set)
    for agg in host_state.aggregates or ():
        for key, value in agg.metadata.items():
            metadata[key].update(part.strip() for part in str(value).split(","))
    return metadata


def validate_num_values(values: set[str], default: T, cast: Callable[[Any], T]) -> T:
    """The minimum of ``values`` converted with ``cast``; ``default`` when there are none.
    Raises ValueError if any value does not convert."""
    if not values:
        return default
    if len(values) > 1 and LOG.isEnabledFor(logging.DEBUG):
        LOG.debug("%d values found, of which the minimum value will be used.", len(values))
    try:
        return min(cast(value) for value in values)
    except TypeError as exc:  # a non-string value from a hand-built aggregate
        raise ValueError(str(exc)) from exc


def aggregate_override(host_state: Any, key: str, default: T, cast: Callable[[Any], T]) -> T:
    """The aggregate override of a config value for this host (see the module docstring)."""
    values = aggregate_values_from_key(host_state, key)
    try:
        return validate_num_values(values, default, cast)
    except ValueError as exc:
        LOG.warning("Could not decode %s: '%s'", key, exc)
        return default


class OverrideCache:
    """``aggregate_override`` for many hosts of one request, computed once per distinct set of
    aggregates (HostStates share the aggregate objects of the cache). Use within one call."""

    __slots__ = ("_key", "_default", "_cast", "_memo")

    def __init__(self, key: str, default: T, cast: Callable[[Any], T]):
        self._key = key
        self._default = default
        self._cast = cast
        self._memo: dict[tuple[int, ...], Any] = {}

    def get(self, host_state: Any) -> Any:
        aggregates = host_state.aggregates
        if not aggregates:
            return self._default
        # the aggregate objects stay alive for the whole batch, so their ids are stable keys
        memo_key = tuple(map(id, aggregates))
        value = self._memo.get(memo_key)
        if value is None:
            value = self._memo[memo_key] = aggregate_override(
                host_state, self._key, self._default, self._cast
            )
        return value


def aggregates_matching(
    aggregates: Iterable[Any],
    key: str | None = None,
    value: str | None = None,
    key_prefix: str | None = None,
) -> list[Any]:
    """The aggregates having one metadata item that matches every given condition (``key``
    exactly, ``key`` starting with ``key_prefix``, ``value`` exactly), in their order: what
    nova's request filters ask the host manager for."""
    out = []
    for agg in aggregates:
        for k, v in agg.metadata.items():
            if key is not None and k != key:
                continue
            if key_prefix is not None and not k.startswith(key_prefix):
                continue
            if value is not None and v != value:
                continue
            out.append(agg)
            break
    return out


def per_aggregate_set(check: Callable[[Any], R]) -> Callable[[Any], R]:
    """``check(host)`` memoized per list of aggregate objects, for a check whose answer
    depends only on the host's aggregates (and the request). Use within one batch: the
    aggregate objects stay alive there, so their ids are stable keys."""
    memo: dict[tuple[int, ...], R] = {}

    def get(host_state: Any) -> R:
        key = tuple(map(id, host_state.aggregates or ()))
        try:
            return memo[key]
        except KeyError:
            value = memo[key] = check(host_state)
            return value

    return get
