"""The weight handler: scores the filtered hosts and sorts them best first.

nova's rules (``nova.weights.BaseWeightHandler``): every host starts at 0.0; for each weigher
the raw values are clamped to the weigher's ``minval``/``maxval`` when set, normalised to
[0, 1] with (x - min) / (max - min) where min/max are ``minval``/``maxval`` when set, else
taken from the values (all 0 when max == min), multiplied by the host's multiplier and
added. Hosts are sorted by descending weight; ties keep their input order. With one host or
none, nothing is weighed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from stevedore import ExtensionManager

from scheduler.conf import NOVA_ALL_WEIGHERS
from scheduler.exceptions import NoValidHost, PluginNotFound
from weighers import BaseHostWeigher, get_weight_multiplier

LOG = logging.getLogger(__name__)

WEIGHER_NAMESPACE = "novasched.weighers"


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


def _multipliers(weigher: Any, hosts: list[Any]) -> list[float]:
    """The weigher's multiplier for each host. Aggregate lookups are done once per distinct
    set of aggregates; hosts without aggregates all get the configured value."""
    if not _uses_base_multiplier(weigher):
        return [float(weigher.weight_multiplier(h)) for h in hosts]
    configured = weigher.configured_multiplier()
    option = weigher.multiplier_option
    if option is None:
        return [1.0] * len(hosts)
    cache: dict[tuple[int, ...], float] = {}
    out = []
    for host in hosts:
        aggregates = host.aggregates
        if not aggregates:
            out.append(configured)
            continue
        # the Aggregate objects are alive for the whole call, so their ids are stable keys
        key = tuple(map(id, aggregates))
        value = cache.get(key)
        if value is None:
            value = cache[key] = get_weight_multiplier(host, option, configured)
        out.append(value)
    return out


class WeightHandler:
    """Weighs hosts with an ordered list of weigher instances."""

    def __init__(self, weighers: list[BaseHostWeigher]):
        self.weighers = list(weighers)

    def weigh(self, hosts: list[Any], spec_obj: Any, explain: bool = False) -> list[WeighedHost]:
        """Hosts wrapped as WeighedHost, best first. With ``explain``, each carries the
        per-weigher raw value, normalised value and multiplier."""
        weighed = [WeighedHost(h, 0.0, {} if explain else None) for h in hosts]
        if len(weighed) <= 1:
            return weighed
        host_list = [w.obj for w in weighed]
        debug = LOG.isEnabledFor(logging.DEBUG)
        for weigher in self.weighers:
            name = getattr(weigher, "name", None) or type(weigher).__name__
            try:
                multipliers = _multipliers(weigher, host_list)
                # A weigher that counts for nothing on every host is not computed at all
                # (NumInstancesWeigher by default), unless someone asks why.
                if not explain and not any(multipliers):
                    continue
                raw = [float(v) for v in weigher.weigh_objects(host_list, spec_obj)]
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
        # sorted() is stable, also with reverse=True: equal weights keep the filtered order
        return sorted(weighed, key=attrgetter("weight"), reverse=True)


def _short_name(name: str) -> str:
    return name.strip().rsplit(".", 1)[-1]


def load_weighers(names: list[str]) -> list[BaseHostWeigher]:
    """Instantiate the named weighers from the ``novasched.weighers`` entry points.

    An empty list or nova's ``nova.scheduler.weights.all_weighers`` means every built-in
    weigher (nova's own 13, from this package), sorted by name (nova's order depends on a
    directory listing; ours is fixed). A plugin weigher runs only when named.
    nova's dotted class paths are accepted by their last component. A name given twice is
    loaded once.
    """

    def _on_failure(_manager: Any, entrypoint: Any, exc: Exception) -> None:
        LOG.error("Could not load weigher %s: %s", entrypoint.name, exc)

    manager = ExtensionManager(
        WEIGHER_NAMESPACE, invoke_on_load=False, on_load_failure_callback=_on_failure
    )
    available = {ext.name: ext.plugin for ext in manager}
    built_in = sorted(
        ext.name for ext in manager if ext.entry_point.value.startswith(f"{__package__}.")
    )
    given = [n.strip() for n in names or [] if n and n.strip()]
    if not given:
        given = [NOVA_ALL_WEIGHERS]
    wanted: list[str] = []
    unknown: list[str] = []
    for name in given:
        if name in (NOVA_ALL_WEIGHERS, "all_weighers"):
            candidates = built_in
        else:
            short = _short_name(name)
            if short not in available:
                unknown.append(name)
                continue
            candidates = [short]
        wanted.extend(c for c in candidates if c not in wanted)
    if unknown:
        raise PluginNotFound("weigher", unknown, list(available))
    return [available[w]() for w in wanted]
