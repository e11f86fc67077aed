"""MetricsWeigher: weighs hosts by the metrics their compute monitors report.

``[metrics] weight_setting = name1=1.0, name2=-1.0`` makes a host's raw weight
``value(name1) * 1.0 + value(name2) * -1.0``. The metrics are the compute node's ``metrics``
column (what ``[DEFAULT] compute_monitors`` report), a list of
``{"name": ..., "value": ..., "timestamp": ..., "source": ...}``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, TypeVar

from scheduler.conf import CONF
from weighers import BaseHostWeigher, Same

LOG = logging.getLogger(__name__)

T = TypeVar("T")

# The aggregate metadata key differs from the option name ([metrics] weight_multiplier).
AGGREGATE_KEY = "metrics_weight_multiplier"

_DATA = "nova_object.data"


class ComputeHostMetricNotFound(LookupError):
    """A metric named in ``[metrics] weight_setting`` is missing on a host while
    ``[metrics] required`` is True (nova's exception of the same name). Enable MetricsFilter
    to drop such hosts before weighing, or set ``required = False``."""

    def __init__(self, host: str, node: str, name: str):
        self.host = host
        self.node = node
        self.name = name
        super().__init__(f"Metric {name} could not be found on the compute host {host}.{node}")


def parse_options(
    opts: Iterable[str], sep: str = "=", converter: Callable[[str], T] = str, name: str = ""
) -> list[tuple[str, T]]:
    """``key<sep>value`` items as (key, converter(value)) pairs, with nova's rules: an item
    without the separator, with an empty key, or whose value the converter rejects
    (ValueError) is left out, and all such items are named in one warning. Duplicates are
    kept in order. Unlike nova, keys are stripped (``name = 1`` means ``name``), as
    MetricsFilter reads them, so that filter and weigher agree on the names."""
    good: list[tuple[str, T]] = []
    bad: list[str] = []
    for opt in opts:
        key, seen_sep, raw = opt.partition(sep)
        key = key.strip()
        try:
            value = converter(raw)
        except ValueError:
            bad.append(opt)
            continue
        if key and seen_sep and value is not None:
            good.append((key, value))
        else:
            bad.append(opt)
    if bad:
        LOG.warning("Ignoring the invalid elements of the option %s: %s", name, ", ".join(bad))
    return good


class ParsedOption:
    """A ListOpt parsed with ``parse_options``, re-parsed only when its value changes (so a
    bad entry is warned about once, and a changed configuration is still picked up)."""

    def __init__(self, group: str, option: str):
        self.group = group
        self.option = option
        self._cache: tuple[tuple[str, ...], list[tuple[str, float]]] | None = None

    def get(self) -> list[tuple[str, float]]:
        raw = tuple(getattr(CONF[self.group], self.option) or ())
        cache = self._cache
        if cache is None or cache[0] != raw:
            cache = (raw, parse_options(raw, "=", float, f"{self.group}.{self.option}"))
            self._cache = cache
        return cache[1]


def metric_values(metrics: Any) -> dict[str, Any]:
    """``{name: value}`` from ``host_state.metrics``: a list of metric dicts (the decoded
    column), nova's MonitorMetricList primitive, or objects with ``name``/``value``."""
    if not metrics:
        return {}
    if isinstance(metrics, dict):
        metrics = metrics.get(_DATA, metrics).get("objects") or ()
    out: dict[str, Any] = {}
    for metric in metrics:
        if isinstance(metric, dict):
            metric = metric.get(_DATA, metric)
            name = metric.get("name")
            value = metric.get("value")
        else:
            name = getattr(metric, "name", None)
            value = getattr(metric, "value", None)
        if name is not None:
            out[name] = value
    return out


class _Settings(NamedTuple):
    """What MetricsWeigher reads from the configuration once per request."""

    setting: list[tuple[str, float]]
    required: bool
    unavailable: float


class MetricsWeigher(BaseHostWeigher):
    """Prefers hosts by the weighted sum of their reported metrics
    (``[metrics] weight_setting``, multiplier ``[metrics] weight_multiplier``, aggregate key
    ``metrics_weight_multiplier``). A host missing a metric fails the request when
    ``[metrics] required`` (use MetricsFilter), else weighs ``weight_of_unavailable``."""

    multiplier_group = "metrics"
    multiplier_option = "weight_multiplier"
    aggregate_multiplier_key = AGGREGATE_KEY
    returns_numbers = True  # floats: sums of float(metric) * ratio, or weight_of_unavailable

    def __init__(self) -> None:
        self._setting = ParsedOption("metrics", "weight_setting")

    @property
    def setting(self) -> list[tuple[str, float]]:
        """The parsed ``[metrics] weight_setting``: (metric name, ratio) pairs."""
        return self._setting.get()

    def prepare(self, weight_properties: Any, hosts: list[Any]) -> _Settings | Same:
        setting = self.setting
        if not setting:
            return Same(0.0)
        conf = CONF.metrics
        return _Settings(setting, conf.required, conf.weight_of_unavailable)

    def weigh(self, host_state: Any, prepared: _Settings) -> float:
        setting, required, unavailable = prepared
        values = metric_values(host_state.metrics)
        total = 0.0
        for name, ratio in setting:
            value = _number(values.get(name))
            if value is None:
                if required:
                    raise ComputeHostMetricNotFound(host_state.host, host_state.nodename, name)
                # A missing metric puts the host last, unless it would count for nothing.
                if ratio * self.weight_multiplier(host_state) != 0:
                    return unavailable
                continue
            total += value * ratio
        return total


def _number(value: Any) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
