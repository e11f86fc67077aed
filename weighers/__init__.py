"""Host weighers: the plugin contract.

A weigher is one small class with two methods, like a filter::

    class RackSpreadWeigher(BaseHostWeigher):
        \"\"\"Prefers racks with fewer of the group's hosts (one sentence an operator reads).\"\"\"

        multiplier_option = "rack_spread_weight_multiplier"  # the option, and aggregate key

        def prepare(self, weight_properties, hosts):
            # once per request: what every host is weighed against; Same(value) when every
            # host gets the same raw weight (here: a request without a server group)
            group = weight_properties.instance_group
            if group is None or not group.hosts:
                return Same(0.0)
            return frozenset(group.hosts)

        def weigh(self, host_state, group_hosts):
            # once per host: the raw weight, bigger is better
            return -float(len(group_hosts & hosts_in_rack(host_state)))

``prepare`` also gets the hosts being weighed, for a weight relative to the others; it
defaults to handing the request itself to ``weigh``. nova's method,
``_weigh_object(host_state, weight_properties)``, is ``weigh(host_state,
prepare(weight_properties, [host_state]))``; a weigher written with ``_weigh_object`` alone, as nova
writes them, works as is; the batch methods of earlier releases (``weigh_objects``,
``uniform_weight``) are refused when the class is defined. Weighers never do I/O.

The weight handler (``weighers/handler.py``) normalises each weigher's raw values to [0, 1]
(using ``minval``/``maxval`` when set), multiplies by ``weight_multiplier(host_state)`` and
sums. ``weight_multiplier`` reads the option named by ``multiplier_option`` from
``multiplier_group`` and lets the host's aggregates override it: the minimum of the
parsable values of the aggregate metadata key of the same name wins, as in nova. A weigher
that keeps the base ``weight_multiplier`` has its multipliers computed once per distinct set
of aggregates; with ``Same`` the handler skips the weigher when it cannot change the order.

A few built-in weighers whose raw value depends only on the host's own numbers (free RAM,
free vCPUs, ...) declare it with ``@host_column``: ``weigh(host, None)`` is then kept as a
column of the host manager's table (``scheduler/hosts/table.py``), refreshed whenever the
host changes, and the handler reads the column instead of weighing host by host. Only the
class it decorates is read that way: a subclass is weighed through its own ``weigh``.
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


class Same:
    """``prepare``'s answer when every host gets the same raw weight for this request: the
    hosts are then not weighed one by one (and the weigher is skipped when ``value`` cannot
    change the order)."""

    __slots__ = ("value",)

    def __init__(self, value: float):
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Same) and other.value == self.value

    def __hash__(self) -> int:
        return hash((Same, self.value))

    def __repr__(self) -> str:
        return f"Same({self.value!r})"


class BaseHostWeigher:
    """Base class for host weighers: write ``weigh`` (and ``prepare`` when the request needs
    work once, not per host)."""

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
    # True when weigh (and Same) only ever give ints and floats (the handler then need not
    # convert them with float()); plugins keep False.
    returns_numbers = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        name = f"{cls.__module__}.{cls.__qualname__}"
        own = vars(cls)
        if "weigh_objects" in own:
            raise TypeError(
                f"{name} defines weigh_objects(), which novasched weighers no longer have: "
                "put the per-request work in prepare(weight_properties) and the per-host value "
                "in weigh(host_state, prepared) (see docs/plugins.md)"
            )
        if "uniform_weight" in own:
            raise TypeError(
                f"{name} defines uniform_weight(), which novasched weighers no longer have: "
                "return weighers.Same(value) from prepare(weight_properties) when every host "
                "gets the same raw weight (see docs/plugins.md)"
            )
        if "_weigh_object" in own and "weigh" not in own and cls.weigh is not BaseHostWeigher.weigh:
            # the weigher it extends weighs in weigh: an _weigh_object here would never be asked
            raise TypeError(
                f"{name} overrides _weigh_object() of a weigher that weighs in weigh(): "
                "override weigh(host_state, prepared) instead (and prepare(weight_properties) "
                "for the per-request work)"
            )

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

    def prepare(self, weight_properties: Any, hosts: list[Any]) -> Any:
        """What ``weigh`` gets for every host of this request: by default the request; or
        ``Same(value)`` when every host gets ``value``. ``hosts`` are the hosts being weighed
        (the filters' survivors, as kube-scheduler's PreScore sees the nodes): for a weight
        relative to the others."""
        return weight_properties

    def weigh(self, host_state: Any, prepared: Any) -> float:
        """The raw weight of ``host_state`` (bigger is better)."""
        return self._weigh_object(host_state, prepared)

    def _weigh_object(self, host_state: Any, weight_properties: Any) -> float:
        """nova's method: one host, one request."""
        if type(self).weigh is BaseHostWeigher.weigh:
            raise NotImplementedError(f"{self.name} must define weigh() (or _weigh_object())")
        prepared = self.prepare(weight_properties, [host_state])
        if isinstance(prepared, Same):
            return prepared.value
        return self.weigh(host_state, prepared)


def host_column(cls: type) -> type:
    """Declare that ``cls.weigh(host, prepared)`` depends only on the host's own values
    (never on the request, the host's aggregates, instances or service): the handler reads
    ``weigh(host, None)`` from a column of the host table (see the module docstring). Only
    ``cls`` itself is read that way: a subclass is weighed through its own ``weigh``."""
    cls.__host_column__ = cls
    return cls
