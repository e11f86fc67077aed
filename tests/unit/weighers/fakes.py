"""Helpers shared by the weigher tests."""

from __future__ import annotations

from typing import Any

from weighers import Same
from weighers.handler import raw_values


def weigh_all(weigher: Any, hosts: list[Any], spec_obj: Any) -> list[Any]:
    """The weigher's raw value for each host, as the weight handler gets them
    (``raw_values``): a ``Same`` from ``prepare`` gives its value to every host."""
    hosts = list(hosts)
    values = raw_values(weigher, hosts, spec_obj)
    if isinstance(values, Same):
        return [values.value] * len(hosts)
    return values
