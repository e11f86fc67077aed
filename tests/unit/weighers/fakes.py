"""Helpers shared by the weigher tests."""

from __future__ import annotations

from typing import Any

from weighers import BaseHostWeigher, Same
from weighers.handler import raw_values


def weigh_all(weigher: Any, hosts: list[Any], spec_obj: Any) -> list[Any]:
    """The weigher's raw value for each host, as the weight handler gets them
    (``raw_values``): a ``Same`` from ``prepare`` gives its value to every host."""
    hosts = list(hosts)
    values = raw_values(weigher, hosts, spec_obj)
    if isinstance(values, Same):
        return [values.value] * len(hosts)
    return values


class Clamped(BaseHostWeigher):
    """A plugin-style weigher (values as strings, its own per-host multiplier) with both
    bounds, to cover the clamping and the per-host multiplier paths."""

    minval = -5
    maxval = 50
    multiplier_option = "ram_weight_multiplier"

    def _weigh_object(self, host_state, weight_properties):
        return str(host_state.num_io_ops * 10 - 20)

    def weight_multiplier(self, host_state):
        return 2.0 if host_state.num_instances % 2 else -0.5


class Flat(BaseHostWeigher):
    """Every host weighs the same, announced by prepare with Same."""

    minval = 0

    def prepare(self, weight_properties, hosts):
        return Same(3)

    def weigh(self, host_state, prepared):
        raise AssertionError("a Same from prepare: no host is weighed")
