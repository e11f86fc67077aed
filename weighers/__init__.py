"""Host weighers: the plugin contract.

A weigher has nova's method names::

    class MyWeigher(BaseHostWeigher):
        multiplier_option = "my_weight_multiplier"   # [filter_scheduler] option, aggregate key

        def _weigh_object(self, host_state, weight_properties):
            return host_state.free_ram_mb

The weight handler (``weighers/handler.py``) normalises each weigher's raw values to [0, 1]
(using ``minval``/``maxval`` when set), multiplies by ``weight_multiplier(host_state)`` and
sums. ``weight_multiplier`` reads the option named by ``multiplier_option`` from
``[filter_scheduler]`` and lets the host's aggregates override it: the minimum of the
parsable values of the aggregate metadata key of the same name wins, as in nova.

For speed, a built-in weigher may also say, per request, that every host gets the same raw
value (``uniform_weight``); the handler then skips it when it cannot change the order. A
weigher that keeps the base ``weight_multiplier`` (described by ``multiplier_option``,
``aggregate_multiplier_key`` and ``multiplier_sign``) has its multipliers computed once per
distinct set of aggregates rather than once per host. A weigher whose raw value depends
only on the host's own numbers (free RAM, free vCPUs, ...) and never on the request says so
with ``host_column = True``: its ``_weigh_object(host, None)`` is then kept as a column of
the host manager's table (``scheduler/hosts/table.py``), refreshed whenever the host changes,
and the handler reads the column instead of calling the weigher per host.
"""

from __future__ import annotations

import logging
from typing import Any

from scheduler.conf import CONF
from scheduler.hosts.aggregates import aggregate_override

LOG = logging.getLogger(__name__)


def get_weight_multiplier(host_state: Any, multiplier_name: str, multiplier_config: float) -> float:
    """The multiplier for a host, as nova computes it: the minimum of the host's aggregate
    metadata values for ``multiplier_name``; the config value when no aggregate sets it, or
    when any of those values is not a number (logged)."""
    return aggregate_override(host_state, multiplier_name, multiplier_config, float)


class BaseHostWeigher:
    """Base class for host weighers."""

    minval: float | None = None
    maxval: float | None = None
    # Name of the [filter_scheduler] option (and aggregate metadata key) of the multiplier.
    multiplier_option: str | None = None
    multiplier_group = "filter_scheduler"
    # The aggregate metadata key that overrides the multiplier, when it is not the option's
    # name (MetricsWeigher: ``metrics_weight_multiplier``).
    aggregate_multiplier_key: str | None = None
    # Applied after the aggregate override (BuildFailureWeigher: -1, as nova negates it).
    multiplier_sign = 1.0
    # True when weigh_objects only ever returns ints and floats (the handler then need not
    # convert them with float()); plugins keep False.
    returns_numbers = False
    # True when _weigh_object(host, request) depends only on the host's own values (never on
    # the request, the host's aggregates, instances or service): the value is then kept as a
    # column of the host table (see the module docstring).
    host_column = False

    @property
    def name(self) -> str:
        return type(self).__name__

    def configured_multiplier(self) -> float:
        if self.multiplier_option is None:
            return 1.0
        return float(getattr(CONF[self.multiplier_group], self.multiplier_option))

    def weight_multiplier(self, host_state: Any) -> float:
        if self.multiplier_option is None:
            return 1.0
        key = self.aggregate_multiplier_key or self.multiplier_option
        return self.multiplier_sign * get_weight_multiplier(
            host_state, key, self.configured_multiplier()
        )

    def uniform_weight(self, weight_properties: Any) -> float | None:
        """The raw value every host gets for this request when it is the same for all of
        them (a soft-affinity weigher without a group ...), else None. It must equal what
        ``weigh_objects`` would return for each host."""
        return None

    def _weigh_object(self, host_state: Any, weight_properties: Any) -> float:
        raise NotImplementedError

    def weigh_objects(self, host_states: list[Any], weight_properties: Any) -> list[float]:
        """Raw values, one per host, in order. Override for a batch version."""
        return [self._weigh_object(h, weight_properties) for h in host_states]
