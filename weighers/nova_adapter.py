"""A weigher class written for nova, run by our weight handler.

nova's ``BaseHostWeigher`` API: ``_weigh_object(host_state, weight_properties)``, or a
``weigh_objects`` of the plugin's own over nova's WeighedHost objects (``.obj`` is the host),
``weight_multiplier(host_state)`` and ``minval``/``maxval``. The handler normalises the raw
values as nova's ``BaseWeightHandler`` does: between the plugin's ``minval``/``maxval`` when
set (values beyond them are clamped, as nova's ``weigh_objects`` clamps them), else between
the values' own minimum and maximum; then multiplies by the plugin's ``weight_multiplier`` of
each host. The plugin sees each host as a ``NovaHostState`` and the request as a
``NovaRequestSpec`` (``scheduler/nova_plugins.py``). Only weighers loaded by class path go
through here. The weight handler asks it for all the hosts at once (``weigh_list``), so that
a nova ``weigh_objects`` sees them all, as in nova.
"""

from __future__ import annotations

from typing import Any

from scheduler.nova_plugins import NovaHostState, request_view
from weighers import BaseHostWeigher


class WeighedHost:
    """What nova's ``weigh_objects`` is given per host: ``obj`` (the host) and ``weight``."""

    __slots__ = ("obj", "weight")

    def __init__(self, obj: Any, weight: float = 0.0):
        self.obj = obj
        self.weight = weight

    def to_dict(self) -> dict[str, Any]:
        return {"weight": self.weight, "host": self.obj.host}

    def __repr__(self) -> str:
        return f"WeighedHost [host: {self.obj!r}, weight: {self.weight}]"


class NovaWeigherAdapter(BaseHostWeigher):
    """Weighs hosts with the nova weigher class it wraps."""

    def __init__(self, plugin: Any, path: str):
        self.plugin = plugin
        self.path = path

    @property
    def name(self) -> str:
        return type(self.plugin).__name__

    # read after every weigh_list, as nova's handler reads them after weigh_objects
    @property
    def minval(self) -> float | None:  # type: ignore[override]
        return getattr(self.plugin, "minval", None)

    @property
    def maxval(self) -> float | None:  # type: ignore[override]
        return getattr(self.plugin, "maxval", None)

    def weight_multiplier(self, host_state: Any) -> float:
        multiplier = getattr(self.plugin, "weight_multiplier", None)
        if multiplier is None:
            return 1.0
        return float(multiplier(NovaHostState(host_state)))

    def _weigh_object(self, host_state: Any, weight_properties: Any) -> float:
        return self.weigh_list([host_state], weight_properties)[0]

    def weigh_list(self, host_states: list[Any], weight_properties: Any) -> list[float]:
        """The plugin's raw values, one per host, in order: its own ``weigh_objects`` over
        nova's WeighedHost objects when it has one, else its ``_weigh_object`` per host."""
        spec = request_view(weight_properties)
        weigh_objects = getattr(self.plugin, "weigh_objects", None)
        if weigh_objects is not None:
            weighed = [WeighedHost(NovaHostState(h, weight_properties)) for h in host_states]
            return list(weigh_objects(weighed, spec))
        weigh = self.plugin._weigh_object
        return [weigh(NovaHostState(h, weight_properties), spec) for h in host_states]

    def __repr__(self) -> str:
        return f"NovaWeigherAdapter({self.path})"
