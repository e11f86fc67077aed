"""A filter class written for nova, run by our filter handler.

nova's ``BaseHostFilter`` API: ``host_passes(host_state, spec_obj)``, or a ``filter_all(hosts,
spec_obj)`` of the plugin's own (returning the survivors, or None to stop filtering), the
``RUN_ON_REBUILD`` and ``run_filter_once_per_request`` flags and ``run_filter_for_index``.
The plugin sees each host as a ``NovaHostState`` and the request as a ``NovaRequestSpec``
(``scheduler/nova_plugins.py`` says what they hold). Only filters loaded by class path go
through here; our own filters are called directly.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from filters import BaseHostFilter, FilterOutcome
from scheduler.nova_plugins import NovaHostState, request_view

# a host removed by a nova filter: nova's filters say only yes or no
REJECTED = "rejected"
STOPPED = "filter asked to stop filtering"


def _written_by_nova(cls: type, method: str) -> bool:
    """Whether ``cls`` has ``method`` from nova's own base classes (or not at all)."""
    owner = next((c for c in cls.__mro__ if method in vars(c)), None)
    return owner is None or owner.__module__.split(".", 1)[0] == "nova"


class NovaFilterAdapter(BaseHostFilter):
    """Passes the hosts the nova filter class it wraps lets through."""

    def __init__(self, plugin: Any, path: str):
        self.plugin = plugin
        self.path = path
        cls = type(plugin)
        # nova's filter_all only calls _filter_one, which only skips on a rebuild (the
        # handler already did) and calls host_passes: call host_passes directly
        self._per_host = _written_by_nova(cls, "filter_all") and _written_by_nova(
            cls, "_filter_one"
        )

    @property
    def name(self) -> str:
        return type(self.plugin).__name__

    @property
    def RUN_ON_REBUILD(self) -> bool:  # noqa: N802 - nova's name
        return bool(getattr(self.plugin, "RUN_ON_REBUILD", False))

    @property
    def run_filter_once_per_request(self) -> bool:
        return bool(getattr(self.plugin, "run_filter_once_per_request", False))

    def run_filter_for_index(self, index: int) -> bool:
        """Whether the filter runs for the ``index``-th instance of a multi-create (the
        plugin's own answer when it has one, else nova's rule)."""
        run_for_index = getattr(self.plugin, "run_filter_for_index", None)
        if run_for_index is not None:
            return bool(run_for_index(index))
        return not (self.run_filter_once_per_request and index > 0)

    def host_passes(self, host_state: Any, spec_obj: Any) -> bool:
        outcome = self.filter_list([host_state], spec_obj)
        return bool(outcome.passed)

    def filter_list(self, host_states: Iterable[Any], spec_obj: Any) -> FilterOutcome:
        """The hosts the plugin lets through (nova's ``filter_all``, or ``host_passes``
        host by host), with the others rejected."""
        hosts = list(host_states)
        spec = request_view(spec_obj)
        outcome = FilterOutcome()
        if self._per_host:
            host_passes = self.plugin.host_passes
            passed = outcome.passed
            rejected = outcome.rejected
            for host in hosts:
                if host_passes(NovaHostState(host, spec_obj), spec):
                    passed.append(host)
                else:
                    rejected.append((host, REJECTED))
            return outcome
        views = [NovaHostState(host, spec_obj) for host in hosts]
        survivors = self.plugin.filter_all(views, spec)
        if survivors is None:
            outcome.rejected = [(host, STOPPED) for host in hosts]
            return outcome
        host_of = {id(view): host for view, host in zip(views, hosts, strict=True)}
        kept: set[int] = set()
        for view in survivors:  # in the plugin's order, as nova keeps it
            key = id(view)
            if key not in host_of:
                raise TypeError(f"{self.name}.filter_all returned a host it was not given")
            if key not in kept:
                kept.add(key)
                outcome.passed.append(host_of[key])
        outcome.rejected = [
            (h, REJECTED) for v, h in zip(views, hosts, strict=True) if id(v) not in kept
        ]
        return outcome

    def __repr__(self) -> str:
        return f"NovaFilterAdapter({self.path})"
