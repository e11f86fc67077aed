"""MetricsFilter: hosts that report every metric the MetricsWeigher weighs."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from filters import PASS_ALL, BaseHostFilter, Reject
from scheduler.conf import CONF

LOG = logging.getLogger(__name__)

MISSING_METRICS = Reject("missing metrics named in weight_setting")


def weight_setting_names(setting: Iterable[str]) -> set[str]:
    """The metric names of ``[metrics] weight_setting`` (``name=ratio`` entries). Entries
    without ``=``, with an empty name or a ratio that is not a number are ignored with a
    warning, as nova does."""
    names: set[str] = set()
    bad: list[str] = []
    for entry in setting:
        name, sep, ratio = entry.partition("=")
        try:
            float(ratio)
        except ValueError:
            bad.append(entry)
            continue
        if not sep or not name.strip():
            bad.append(entry)
            continue
        names.add(name.strip())
    if bad:
        LOG.warning(
            "Ignoring the invalid elements of the option metrics.weight_setting: %s",
            ", ".join(bad),
        )
    return names


def metric_names(host_state: Any) -> set[str]:
    """The names of the metrics the host reports (dicts, or objects with a ``name``)."""
    names: set[str] = set()
    for metric in host_state.metrics or ():
        name = metric.get("name") if isinstance(metric, dict) else getattr(metric, "name", None)
        if name is not None:
            names.add(name)
    return names


class MetricsFilter(BaseHostFilter):
    """Passes hosts that report every metric named in ``[metrics] weight_setting`` (every
    host when it names none), so that the MetricsWeigher can weigh them."""

    depends_on_consumption = False

    RUN_ON_REBUILD = False
    run_filter_once_per_request = False

    def __init__(self) -> None:
        # as nova, the option is read once, when the filter is loaded
        self.keys = frozenset(weight_setting_names(CONF.metrics.weight_setting))

    def prepare(self, spec_obj: Any) -> Any:
        """The required metric names; PASS_ALL when ``weight_setting`` names none."""
        return self.keys or PASS_ALL

    def check(self, host_state: Any, keys: frozenset[str]) -> bool | Reject:
        reported = metric_names(host_state)
        if keys <= reported:
            return True
        if LOG.isEnabledFor(logging.DEBUG):
            LOG.debug(
                "%(host)s does not have the following metrics: %(metrics)s",
                {"host": host_state, "metrics": ", ".join(sorted(keys - reported))},
            )
        return MISSING_METRICS
