"""The weight handler: scores the filtered hosts and sorts them best first.

nova's rules (``nova.weights.BaseWeightHandler``): every host starts at 0.0; for each weigher
the raw values are clamped to the weigher's ``minval``/``maxval`` when set, normalised to
[0, 1] with (x - min) / (max - min) where min/max are ``minval``/``maxval`` when set, else
taken from the values (all 0 when max == min), multiplied by the host's multiplier and
added. Hosts are sorted by descending weight; ties keep their input order. With one host or
none, nothing is weighed.

Three paths compute the same floats: ``_weigh_one_by_one`` (explain and debug logging: every
weigher, every host, with contributions), ``_weigh_batch`` (list passes), and
``_weigh_rows``, used when every host is in the host manager's table: NumPy arrays, the
``@host_column`` weighers' values read from the table, multipliers per aggregate-set code.
All three get a weigher's raw values from ``raw_values``: ``prepare`` once, ``weigh`` per
host, or the ``Same`` value ``prepare`` gave for every host.
Each array operation is the operation the list path does per host, in the same order, so
the results are the same IEEE doubles; anything the arrays cannot reproduce exactly (a NaN,
a value that is not a number) sends the call to the list path.
"""

from __future__ import annotations

import heapq
import logging
import math
from dataclasses import dataclass
from functools import partial
from operator import attrgetter
from typing import Any

import numpy as np
from stevedore import ExtensionManager

from scheduler.conf import NOVA_ALL_WEIGHERS
from scheduler.exceptions import ConfigurationError, NoValidHost, PluginNotFound
from scheduler.hosts.table import table_of
from scheduler.nova_plugins import (
    NOVA_WEIGHERS_PACKAGE,
    import_plugin,
    nova_installed,
    registered_path,
)
from weighers import BaseHostWeigher, Same, get_weight_multiplier
from weighers.nova_adapter import NovaWeigherAdapter

LOG = logging.getLogger(__name__)

WEIGHER_NAMESPACE = "novasched.weighers"
# Below this many hosts the list path costs less than setting up the arrays.
COLUMNS_MIN_HOSTS = 64


class WeigherError(NoValidHost):
    """A weigher raised an exception; the request fails with this error (a NoValidHost)
    instead of the worker dying. The traceback is in the scheduler log."""

    def __init__(self, weigher_name: str, error: BaseException):
        self.weigher_name = weigher_name
        self.error = error
        super().__init__(
            f"Weigher {weigher_name} failed: {type(error).__name__}: {error}. "
            "See the scheduler log."
        )


@dataclass(slots=True)
class Contribution:
    """One weigher's part in a host's weight (kept only when explaining)."""

    raw: float
    normalized: float
    multiplier: float

    @property
    def score(self) -> float:
        return self.multiplier * self.normalized


@dataclass(slots=True)
class WeighedHost:
    """A host with its total weight (nova's WeighedHost: ``obj`` and ``weight``)."""

    obj: Any
    weight: float = 0.0
    contributions: dict[str, Contribution] | None = None

    def __repr__(self) -> str:
        return f"WeighedHost [host: {self.obj!r}, weight: {self.weight}]"


def normalize(
    values: list[float], minval: float | None = None, maxval: float | None = None
) -> list[float]:
    """Scale ``values`` to [0, 1] between minval/maxval (defaults: the values' own)."""
    if not values:
        return []
    low = float(min(values) if minval is None else minval)
    high = float(max(values) if maxval is None else maxval)
    if low == high:
        return [0.0] * len(values)
    span = high - low
    return [(v - low) / span for v in values]


def _uses_base_multiplier(weigher: Any) -> bool:
    return (
        isinstance(weigher, BaseHostWeigher)
        and type(weigher).weight_multiplier is BaseHostWeigher.weight_multiplier
    )


def _multiplier_setting(weigher: Any) -> tuple[float, float, str] | None:
    """(configured multiplier, sign, aggregate metadata key) of a weigher that keeps the base
    ``weight_multiplier``; None when it names no option (its multiplier is 1.0)."""
    option = weigher.multiplier_option
    if option is None:
        return None
    key = weigher.aggregate_multiplier_key or option
    return weigher.configured_multiplier(), weigher.multiplier_sign, key


class _Multipliers:
    """The multipliers of one weighing call, for every weigher.

    A weigher that keeps the base ``weight_multiplier`` gets one value per distinct set of
    aggregates, and a single float when that value is the same for all hosts (the common
    case: no aggregate sets its key). The hosts' aggregates are read once per call, and only
    when some weigher needs them; hosts in the same aggregates may share one list object
    (then the work is per list, not per host). Lists and aggregate objects stay alive for
    the whole call (the hosts hold them), so their ids are stable keys."""

    def __init__(self, hosts: list[Any]):
        self.hosts = hosts
        # Per host, what identifies its aggregates: the id of its shared list of aggregates
        # (``_list_ids``, with ``_key_of`` from list id to the aggregates' ids), or the ids
        # of its aggregates (``_keys``) when lists are not shared. One host per distinct
        # set; every aggregate by id.
        self._list_ids: list[int] | None = None
        self._key_of: dict[int, tuple[int, ...]] = {}
        self._keys: list[tuple[int, ...]] = []
        self._representatives: dict[tuple[int, ...], Any] = {}
        self._by_id: dict[int, Any] | None = None

    def _aggregates(self) -> dict[int, Any]:
        """Every aggregate of the hosts, by id (and the per-host keys, on first use)."""
        if self._by_id is None:
            hosts = self.hosts
            lists = [h.aggregates or () for h in hosts]
            sample = lists[:64]
            if 2 * len(set(map(id, sample))) <= len(sample):
                # hosts share their lists: work per list (ints hash fast)
                list_ids = self._list_ids = list(map(id, lists))
                host_of_list = dict(zip(list_ids, hosts, strict=False))
                key_of = self._key_of = {
                    i: tuple(map(id, host.aggregates or ())) for i, host in host_of_list.items()
                }
                self._representatives = {key_of[i]: h for i, h in host_of_list.items()}
            else:
                keys = self._keys = [tuple(map(id, aggs)) for aggs in lists]
                self._representatives = dict(zip(keys, hosts, strict=False))
            self._by_id = {
                id(agg): agg
                for host in self._representatives.values()
                for agg in host.aggregates or ()
            }
        return self._by_id

    def of(self, weigher: Any) -> float | list[float]:
        """The weigher's multiplier: one float for every host, or one per host."""
        if not _uses_base_multiplier(weigher):
            return [float(weigher.weight_multiplier(h)) for h in self.hosts]
        setting = _multiplier_setting(weigher)
        if setting is None:
            return 1.0
        configured, sign, key = setting
        relevant = {i for i, agg in self._aggregates().items() if key in agg.metadata}
        if not relevant:
            return sign * configured
        disjoint = relevant.isdisjoint
        # one host stands for all the hosts in the same aggregates
        memo = {
            host_key: sign
            * (configured if disjoint(host_key) else get_weight_multiplier(host, key, configured))
            for host_key, host in self._representatives.items()
        }
        values = set(memo.values())
        if len(values) == 1:
            return values.pop()
        if self._list_ids is not None:
            by_list = {i: memo[k] for i, k in self._key_of.items()}
            return list(map(by_list.__getitem__, self._list_ids))
        return list(map(memo.__getitem__, self._keys))


def _multipliers(weigher: Any, hosts: list[Any]) -> list[float]:
    """The weigher's multiplier for each host (one weigher, one call)."""
    value = _Multipliers(hosts).of(weigher)
    return value if isinstance(value, list) else [value] * len(hosts)


class _AggregatesOf:
    """Stands for any host in these aggregates (what get_weight_multiplier reads)."""

    __slots__ = ("aggregates",)

    def __init__(self, aggregates: list[Any]):
        self.aggregates = aggregates


def raw_values(weigher: Any, hosts: list[Any], spec_obj: Any) -> list[Any] | Same:
    """One weigher's raw values for ``hosts``, in order: ``prepare`` once, then ``weigh``
    per host; or the ``Same`` that ``prepare`` answered (every host gets its value). A
    weigher written for nova goes through its adapter, which keeps nova's
    ``weigh_objects``."""
    if isinstance(weigher, NovaWeigherAdapter):
        return weigher.weigh_list(hosts, spec_obj)
    prepared = weigher.prepare(spec_obj, hosts)
    if isinstance(prepared, Same):
        return prepared
    weigh = weigher.weigh
    return [weigh(host, prepared) for host in hosts]


def _host_value(weigher: Any, host: Any) -> Any:
    """A ``@host_column`` weigher's column value for ``host``."""
    return weigher.weigh(host, None)


def _is_zero_array(multiplier: float | np.ndarray) -> bool:
    if isinstance(multiplier, np.ndarray):
        return not multiplier.any()
    return not multiplier


def _is_finite_array(multiplier: float | np.ndarray) -> bool:
    if isinstance(multiplier, np.ndarray):
        return bool(np.isfinite(multiplier).all())
    return math.isfinite(multiplier)


def _is_zero(multiplier: float | list[float]) -> bool:
    if isinstance(multiplier, list):
        return not any(multiplier)
    return not multiplier


def _is_finite(multiplier: float | list[float]) -> bool:
    if isinstance(multiplier, list):
        return all(map(math.isfinite, multiplier))
    return math.isfinite(multiplier)


def _uniform_normalised(uniform: float, minval: float | None, maxval: float | None) -> float | None:
    """The normalised value of a weigher that gives every host ``uniform``; None when the
    bounds are equal (every host normalises to 0)."""
    value = _clamped(float(uniform), minval, maxval)
    low = value if minval is None else float(minval)
    high = value if maxval is None else float(maxval)
    if low == high:
        return None
    return (value - low) / (high - low)


def normalized_value(
    value: float, low: float, high: float, minval: float | None, maxval: float | None
) -> float:
    """One value normalised as the weighing normalised it between ``low`` and ``high``
    (clamped to the weigher's ``minval``/``maxval`` first; 0 when the bounds are equal)."""
    value = _clamped(float(value), minval, maxval)
    return 0.0 if low == high else (value - low) / (high - low)


def _uniform_bounds(
    uniform: float, minval: float | None, maxval: float | None
) -> tuple[float, float]:
    """What a weigher that gives every host ``uniform`` was normalised between."""
    value = _clamped(float(uniform), minval, maxval)
    return (value if minval is None else float(minval), value if maxval is None else float(maxval))


def _name(weigher: Any) -> str:
    return getattr(weigher, "name", None) or type(weigher).__name__


def _clamped(value: float, minval: float | None, maxval: float | None) -> float:
    if minval is not None and not value >= minval:
        value = float(minval)
    if maxval is not None and not value <= maxval:
        value = float(maxval)
    return value


def _add_pending(
    weights: list[float], pending: list[tuple[list[float], float, float, float]]
) -> list[float]:
    """Add the pending weighers (raw values, multiplier, low, span) to ``weights`` in their
    order, up to three per pass over the hosts; empties ``pending``."""
    while pending:
        if len(pending) >= 3:
            (a, ma, la, sa), (b, mb, lb, sb), (c, mc, lc, sc) = pending[:3]
            del pending[:3]
            weights = [
                w + ma * ((x - la) / sa) + mb * ((y - lb) / sb) + mc * ((z - lc) / sc)
                for w, x, y, z in zip(weights, a, b, c, strict=False)
            ]
        elif len(pending) == 2:
            (a, ma, la, sa), (b, mb, lb, sb) = pending
            del pending[:]
            weights = [
                w + ma * ((x - la) / sa) + mb * ((y - lb) / sb)
                for w, x, y in zip(weights, a, b, strict=False)
            ]
        else:
            (a, ma, la, sa) = pending.pop()
            weights = [w + ma * ((x - la) / sa) for w, x in zip(weights, a, strict=False)]
    return weights


@dataclass(slots=True)
class WeigherShare:
    """One weigher's part in a ranking, for the ``k`` best hosts: their raw values (as
    weighed: clamped to ``minval``/``maxval``), what the values of every host weighed were
    normalised between, and their multipliers."""

    raws: list[float]
    low: float
    high: float
    multipliers: list[float]


class Shares:
    """What a decision record reads of one ranking (``WeightHandler.rank``), taken from the
    very pass that ranked the hosts, not weighed again: ``hosts`` the ``k`` best, best first,
    and per weigher that counted, its ``WeigherShare`` for them. A weigher whose ``prepare``
    looks at every host weighed gives the record what it gave the ranking."""

    def __init__(self, k: int):
        self.k = k
        self.hosts: list[Any] = []
        self.weighers: dict[str, WeigherShare] = {}
        # per weigher, while a pass runs: (raw values in the hosts' order, or one for all;
        # low; high; multiplier: one for all, or per host)
        self._columns: dict[str, tuple[Any, float, float, Any]] = {}

    def _start(self) -> None:
        self._columns = {}

    def _keep(self, weigher: Any, raw: Any, low: float, high: float, multiplier: Any) -> None:
        self._columns[_name(weigher)] = (raw, low, high, multiplier)

    def _finish(self, host_list: list[Any], weights: Any, best: Any = None) -> None:
        """``weights`` in the hosts' order: the ``k`` best as the ranking sorts them (a
        stable sort, best first: ``nlargest`` keeps that order); ``best``: their indices,
        when the ranking has them already."""
        if best is None:
            best = heapq.nlargest(self.k, range(len(host_list)), key=weights.__getitem__)
        else:
            best = [int(i) for i in best[: self.k]]
        self.hosts = [host_list[i] for i in best]

        def at(column: Any, i: int) -> float:
            if isinstance(column, (list, np.ndarray)):
                return float(column[i])
            return float(column)

        self.weighers = {
            name: WeigherShare([at(raw, i) for i in best], low, high, [at(m, i) for i in best])
            for name, (raw, low, high, m) in self._columns.items()
        }
        self._columns = {}


class WeightHandler:
    """Weighs hosts with an ordered list of weigher instances."""

    def __init__(self, weighers: list[BaseHostWeigher]):
        self.weighers = list(weighers)

    def weigh(self, hosts: list[Any], spec_obj: Any, explain: bool = False) -> list[WeighedHost]:
        """Hosts wrapped as WeighedHost, best first. With ``explain``, each carries the
        per-weigher raw value, normalised value and multiplier."""
        host_list = list(hosts)
        if len(host_list) <= 1:
            return [WeighedHost(h, 0.0, {} if explain else None) for h in host_list]
        if explain or LOG.isEnabledFor(logging.DEBUG):
            return self._weigh_one_by_one(host_list, spec_obj, explain)
        ranked, weights = self._weigh_fast(hosts, host_list, spec_obj)
        return list(map(WeighedHost, ranked, weights))

    def rank(
        self, hosts: list[Any], spec_obj: Any, *, shares: Shares | None = None
    ) -> tuple[list[Any], list[float]]:
        """The hosts best first and their weights, in two lists: what ``weigh`` returns
        without building a WeighedHost per host (the cheaper call for a driver that only
        needs the order and the best weights). ``shares``: filled with the best hosts and,
        per weigher, their raw values, bounds and multipliers from this very pass (a host's
        share of the weight is ``multiplier * (value - low) / (high - low)``, 0 when they
        are equal; a weigher that counted for nothing on any host is not in it)."""
        host_list = list(hosts)
        if len(host_list) <= 1:
            if shares is not None:
                shares._start()
                shares._finish(host_list, [0.0] * len(host_list))
            return host_list, [0.0] * len(host_list)
        if LOG.isEnabledFor(logging.DEBUG):
            weighed = self._weigh_one_by_one(host_list, spec_obj, False, shares)
            return [w.obj for w in weighed], [w.weight for w in weighed]
        return self._weigh_fast(hosts, host_list, spec_obj, shares)

    def _weigh_fast(
        self, hosts: Any, host_list: list[Any], spec_obj: Any, shares: Shares | None = None
    ) -> tuple[list[Any], list[float]]:
        """``_weigh_rows`` when the hosts are in a host table, else ``_weigh_batch``."""
        if len(host_list) >= COLUMNS_MIN_HOSTS:
            # the filter handler hands over the rows it already has
            table = getattr(hosts, "table", None)
            rows = getattr(hosts, "rows", None)
            if table is None or rows is None or len(rows) != len(host_list):
                located = table_of(host_list)
                table, rows = located if located is not None else (None, None)
            if table is not None:
                result = self._weigh_rows(table, rows, host_list, spec_obj, shares)
                if result is not None:
                    return result
        return self._weigh_batch(host_list, spec_obj, shares)

    def _row_multiplier(
        self, weigher: Any, host_list: list[Any], agg_codes: Any, lists: list[list[Any]]
    ) -> float | np.ndarray:
        """The weigher's multiplier for each host: a float for all, or an array."""
        if not _uses_base_multiplier(weigher):
            return np.array([float(weigher.weight_multiplier(h)) for h in host_list])
        setting = _multiplier_setting(weigher)
        if setting is None:
            return 1.0
        configured, sign, key = setting
        present = np.flatnonzero(np.bincount(agg_codes, minlength=len(lists)))
        by_code = np.full(len(lists), sign * configured)
        for code in present.tolist():
            aggregates = lists[code]
            if any(key in agg.metadata for agg in aggregates):
                holder = _AggregatesOf(aggregates)
                by_code[code] = sign * get_weight_multiplier(holder, key, configured)
        values = by_code[present]
        if len(values) and (values == values[0]).all():
            return float(values[0])
        return by_code[agg_codes]

    def _weigh_rows(
        self,
        table: Any,
        rows: Any,
        host_list: list[Any],
        spec_obj: Any,
        shares: Shares | None = None,
    ) -> tuple[list[Any], list[float]] | None:
        """``_weigh_batch`` over arrays (see the module docstring); None when a value would
        make the arrays differ from the list path (NaN), which then weighs instead."""
        n = len(host_list)
        if shares is not None:
            shares._start()
        codes, lists = table.aggregates
        agg_codes = codes[rows]
        weights = np.zeros(n)
        for weigher in self.weighers:
            try:
                multiplier = self._row_multiplier(weigher, host_list, agg_codes, lists)
                if _is_zero_array(multiplier):
                    continue
                uniform = None
                raw = self._raw_column(weigher, table, rows)
                if raw is None:
                    values = raw_values(weigher, host_list, spec_obj)
                    if isinstance(values, Same):
                        uniform = values.value
                    else:
                        if len(values) != n:
                            name = getattr(weigher, "name", None) or type(weigher).__name__
                            raise WeigherError(
                                name, ValueError(f"{len(values)} weights for {n} hosts")
                            )
                        raw = np.array(list(map(float, values)), dtype=np.float64)
            except WeigherError:
                raise
            except Exception as exc:
                name = getattr(weigher, "name", None) or type(weigher).__name__
                LOG.exception("Weigher %s raised an error", name)
                raise WeigherError(name, exc) from exc
            finite = _is_finite_array(multiplier)
            minval = getattr(weigher, "minval", None)
            maxval = getattr(weigher, "maxval", None)
            if raw is None:
                if shares is not None:
                    low, high = _uniform_bounds(uniform, minval, maxval)
                    shares._keep(
                        weigher, _clamped(float(uniform), minval, maxval), low, high, multiplier
                    )
                norm = _uniform_normalised(uniform, minval, maxval)
                if norm is None and finite:
                    continue
                norm = norm or 0.0
                weights = weights + multiplier * norm
                continue
            if np.isnan(raw).any():
                return None
            if minval is not None:
                raw = np.where(raw >= minval, raw, float(minval))
            if maxval is not None:
                raw = np.where(raw <= maxval, raw, float(maxval))
            low = float(raw.min() if minval is None else minval)
            high = float(raw.max() if maxval is None else maxval)
            if shares is not None:
                shares._keep(weigher, raw, low, high, multiplier)
            if low == high:
                if finite:
                    continue
                weights = weights + multiplier * np.zeros(n)
                continue
            weights = weights + multiplier * ((raw - low) / (high - low))
        if np.isnan(weights).any():
            return None
        # descending and stable: equal weights keep the filtered order, as sorted() does
        order = np.argsort(-weights, kind="stable")
        if shares is not None:
            shares._finish(host_list, weights, order)
        return table.hosts_at(rows[order]), weights[order].tolist()

    @staticmethod
    def _raw_column(weigher: Any, table: Any, rows: Any) -> np.ndarray | None:
        """A ``@host_column`` weigher's values for these rows, from the table; None when the
        weigher's own class is not one (a subclass of one is weighed through its own
        ``weigh``), or some host's value is not a plain number (NaN in the column)."""
        cls = type(weigher)
        if getattr(cls, "__host_column__", None) is not cls:
            return None
        name = f"weigher:{cls.__module__}.{cls.__qualname__}"
        column = table.numeric(name, partial(_host_value, weigher))
        raw = column[rows]
        return None if np.isnan(raw).any() else raw

    def _weigh_batch(
        self, host_list: list[Any], spec_obj: Any, shares: Shares | None = None
    ) -> tuple[list[Any], list[float]]:
        """nova's arithmetic in a few list passes; the hosts best first, and their weights.

        Per host the operations are exactly those of ``_weigh_one_by_one`` (weight +
        multiplier * ((value - low) / span), weigher after weigher), so the weights are the
        same floats. What is skipped only ever adds zero: a weigher whose multiplier is 0
        everywhere, or whose values are all equal (normalised to 0) with finite multipliers.
        Up to three weighers with one multiplier for all hosts are added in one pass
        (``(w + a) + b`` is what adding them one after the other computes). Every list
        zipped here has one item per host (checked), so the hot loops use zip without
        ``strict``, which costs about half again as much per item.
        """
        n = len(host_list)
        if shares is not None:
            shares._start()
        multipliers = _Multipliers(host_list)
        weights = [0.0] * n
        # weighers waiting to be added in one pass: (raw values, multiplier, low, span)
        pending: list[tuple[list[float], float, float, float]] = []
        for weigher in self.weighers:
            try:
                multiplier = multipliers.of(weigher)
                if _is_zero(multiplier):
                    continue
                values = raw_values(weigher, host_list, spec_obj)
            except Exception as exc:
                name = getattr(weigher, "name", None) or type(weigher).__name__
                LOG.exception("Weigher %s raised an error", name)
                raise WeigherError(name, exc) from exc
            minval = getattr(weigher, "minval", None)
            maxval = getattr(weigher, "maxval", None)
            if isinstance(values, Same):
                # every host has the same value: one normalised value for all
                if shares is not None:
                    low, high = _uniform_bounds(values.value, minval, maxval)
                    uniform = _clamped(float(values.value), minval, maxval)
                    shares._keep(weigher, uniform, low, high, multiplier)
                norm = _uniform_normalised(values.value, minval, maxval)
                if norm is None and _is_finite(multiplier):
                    continue
                norm = norm or 0.0
                weights = _add_pending(weights, pending)
                if isinstance(multiplier, list):
                    weights = [w + m * norm for w, m in zip(weights, multiplier, strict=False)]
                else:
                    weights = [w + multiplier * norm for w in weights]
                continue
            raw = values
            if len(raw) != n:
                name = getattr(weigher, "name", None) or type(weigher).__name__
                raise WeigherError(name, ValueError(f"{len(raw)} weights for {n} hosts"))
            if not getattr(weigher, "returns_numbers", False):
                raw = list(map(float, raw))
            if minval is not None or maxval is not None:
                total = sum(raw)
                if (
                    total != total  # a NaN (clamped like any other out-of-range value)
                    or (minval is not None and min(raw) < minval)
                    or (maxval is not None and max(raw) > maxval)
                ):
                    raw = [_clamped(v, minval, maxval) for v in raw]
            low = float(min(raw) if minval is None else minval)
            high = float(max(raw) if maxval is None else maxval)
            if shares is not None:
                shares._keep(weigher, raw, low, high, multiplier)
            if low != high and not isinstance(multiplier, list):
                pending.append((raw, multiplier, low, high - low))
                continue
            if low == high and _is_finite(multiplier):
                continue
            weights = _add_pending(weights, pending)
            if low == high:
                normalized = [0.0] * n
            else:
                span = high - low
                normalized = [(v - low) / span for v in raw]
            if isinstance(multiplier, list):
                weights = [
                    w + m * x for w, m, x in zip(weights, multiplier, normalized, strict=False)
                ]
            else:
                weights = [w + multiplier * x for w, x in zip(weights, normalized, strict=False)]
        weights = _add_pending(weights, pending)
        if shares is not None:
            shares._finish(host_list, weights)
        # sorted() is stable, also with reverse=True: equal weights keep the filtered order.
        # The hosts are sorted by their weights fed in list order (no per-host lookups in
        # random order), and the weights by themselves: the same keys give the same order.
        ranked = sorted(host_list, key=partial(next, iter(weights)), reverse=True)
        return ranked, sorted(weights, reverse=True)

    def _weigh_one_by_one(
        self, host_list: list[Any], spec_obj: Any, explain: bool, shares: Shares | None = None
    ) -> list[WeighedHost]:
        """The plain path, for ``explain`` and debug logging: every weigher, every host,
        with per-weigher contributions and nova's debug lines."""
        weighed = [WeighedHost(h, 0.0, {} if explain else None) for h in host_list]
        if shares is not None:
            shares._start()
        debug = LOG.isEnabledFor(logging.DEBUG)
        for weigher in self.weighers:
            name = getattr(weigher, "name", None) or type(weigher).__name__
            try:
                multipliers = _multipliers(weigher, host_list)
                # A weigher that counts for nothing on every host is not computed at all
                # (NumInstancesWeigher by default), unless someone asks why.
                if not explain and not any(multipliers):
                    continue
                values = raw_values(weigher, host_list, spec_obj)
                if isinstance(values, Same):
                    values = [values.value] * len(host_list)
                raw = [float(v) for v in values]
            except Exception as exc:
                LOG.exception("Weigher %s raised an error", name)
                raise WeigherError(name, exc) from exc
            if len(raw) != len(host_list):
                raise WeigherError(
                    name, ValueError(f"{len(raw)} weights for {len(host_list)} hosts")
                )
            minval = getattr(weigher, "minval", None)
            maxval = getattr(weigher, "maxval", None)
            if minval is not None:
                raw = [v if v >= minval else float(minval) for v in raw]
            if maxval is not None:
                raw = [v if v <= maxval else float(maxval) for v in raw]
            normalized = normalize(raw, minval, maxval)
            if shares is not None and raw:
                shares._keep(
                    weigher,
                    raw,
                    float(min(raw) if minval is None else minval),
                    float(max(raw) if maxval is None else maxval),
                    multipliers,
                )
            for i, item in enumerate(weighed):
                item.weight += multipliers[i] * normalized[i]
                if explain:
                    item.contributions[name] = Contribution(raw[i], normalized[i], multipliers[i])
            if debug:
                keys = [(h.host, h.nodename) for h in host_list]
                LOG.debug("%s: raw weights %s", name, dict(zip(keys, raw, strict=True)))
                LOG.debug(
                    "%s: normalized weights %s", name, dict(zip(keys, normalized, strict=True))
                )
                LOG.debug(
                    "%s: score (multiplier * weight) %s",
                    name,
                    {
                        k: f"{m} * {n}"
                        for k, m, n in zip(keys, multipliers, normalized, strict=True)
                    },
                )
        if shares is not None:
            shares._finish(host_list, [w.weight for w in weighed])
        # sorted() is stable, also with reverse=True: equal weights keep the filtered order
        return sorted(weighed, key=attrgetter("weight"), reverse=True)


def load_weighers(names: list[str]) -> list[BaseHostWeigher]:
    """Instantiate the named weighers.

    An empty list or nova's ``nova.scheduler.weights.all_weighers`` means every built-in
    weigher (nova's own 13, from this package), sorted by name (nova's order depends on a
    directory listing; ours is fixed). A plugin weigher runs only when named. A name is an
    entry point of ``novasched.weighers``; nova's path to a built-in we implement
    (``nova.scheduler.weights.ram.RAMWeigher``) loads ours; any other class path (or path
    to a function returning classes) is imported (``scheduler/nova_plugins.py``) and, unless
    it is a novasched weigher, run through ``NovaWeigherAdapter``. A name given twice is
    loaded once.
    """

    def _on_failure(_manager: Any, entrypoint: Any, exc: Exception) -> None:
        LOG.error("Could not load weigher %s: %s", entrypoint.name, exc)

    manager = ExtensionManager(
        WEIGHER_NAMESPACE, invoke_on_load=False, on_load_failure_callback=_on_failure
    )
    available = {ext.name: ext.plugin for ext in manager}
    targets = {ext.name: ext.entry_point.value.replace(":", ".") for ext in manager}
    built_in = sorted(
        ext.name for ext in manager if ext.entry_point.value.startswith(f"{__package__}.")
    )
    given = [n.strip() for n in names or [] if n and n.strip()]
    if not given:
        given = [NOVA_ALL_WEIGHERS]
    # registered names, and class paths to import, in order
    wanted: list[str] = []
    paths: set[str] = set()
    unknown: list[str] = []
    for name in given:
        if name in (NOVA_ALL_WEIGHERS, "all_weighers"):
            candidates = built_in
        elif "." not in name:
            if name not in available:
                unknown.append(name)
                continue
            candidates = [name]
        else:
            ours = registered_path(name, targets, NOVA_WEIGHERS_PACKAGE)
            if ours is not None:
                candidates = [ours]
            elif name.startswith(NOVA_WEIGHERS_PACKAGE + ".") and not nova_installed():
                # one of nova's weighers that novasched does not implement, without nova
                unknown.append(name)
                continue
            else:
                candidates = [name]
                paths.add(name)
        wanted.extend(c for c in candidates if c not in wanted)
    if unknown:
        raise PluginNotFound("weigher", unknown, list(available))
    loaded: list[BaseHostWeigher] = []
    for name in wanted:
        if name not in paths:
            loaded.append(available[name]())
            continue
        for cls in import_plugin(name, "weigher"):
            loaded.append(_weigher_of(cls, name))
    return loaded


def _weigher_of(cls: type, path: str) -> BaseHostWeigher:
    """An imported weigher class, ready to run: a novasched weigher as it is, a nova weigher
    through the adapter."""
    if issubclass(cls, BaseHostWeigher):
        return cls()
    if not (hasattr(cls, "_weigh_object") or hasattr(cls, "weigh_objects")):
        raise ConfigurationError(
            f"{path} is not a weigher class: it has neither _weigh_object nor weigh_objects"
        )
    return NovaWeigherAdapter(cls(), path)
