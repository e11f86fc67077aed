"""The seam between a scheduler driver and what drives it: ``SchedulerDriver``.

The RPC edge (``scheduler/rpc/manager.py``), the service (``scheduler/rpc/service.py``) and the
tools call a driver only through this Protocol. A plugin driver needs only
``select_destinations``, ``reset`` and ``stop`` (docs/plugins.md, "A scheduler driver"):
``as_scheduler_driver`` looks at it once, when it is handed over, and gives it the rest
(nova's casts ignored, nothing to prepare, no record, no steps for explain or capacity), so
that nothing on a request's path asks a driver what it has.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

LOG = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Observers:
    """What watches a driver's calls, handed to its constructor as ``observers=`` (by the
    service to a driver whose factory declares ``takes_observers = True``: novasched's own;
    a plugin driver is built as before and records nothing)."""

    # takes each call's decision record (the service's DecisionRecorder); None: none kept
    recorder: Any = None
    # the request as it arrived, in the JSON form a record keeps for a replay (nova's wire
    # form); None: the record keeps the request's summary only
    spec_encoder: Callable[[Any], dict[str, Any]] | None = None
    # called after every select_destinations with the seconds per step and "total"
    timing: Callable[[dict[str, float]], None] | None = None


NO_OBSERVERS = Observers()

# nova's cache-update casts a driver may apply
CASTS = (
    "update_aggregates",
    "delete_aggregate",
    "update_instance_info",
    "delete_instance_info",
    "sync_instance_info",
)


@runtime_checkable
class SchedulerDriver(Protocol):
    """What the RPC edge, the service and the tools ask of a scheduler driver."""

    # the names of nova's cache-update casts (``CASTS``) it applies; the others are ignored
    applies_casts: frozenset[str]

    def select_destinations(
        self,
        context: Any,
        spec_obj: Any,
        instance_uuids: list[str] | None,
        return_alternates: bool = False,
        on_candidates: Callable[[Any], None] | None = None,
    ) -> list[list[Any]]:
        """Per instance, its Selection then its alternates; ``on_candidates`` is called
        once the candidate hosts are known (nova's start notification)."""
        ...

    def update_aggregates(self, aggregates: list[Any]) -> None: ...

    def delete_aggregate(self, aggregate: Any) -> None: ...

    def update_instance_info(self, host_name: str, instance_uuids: list[str]) -> None: ...

    def delete_instance_info(self, host_name: str, instance_uuid: str) -> None: ...

    def sync_instance_info(self, host_name: str, instance_uuids: list[str]) -> None: ...

    def prepare(self) -> None:
        """Before the service takes requests (warm caches, start threads)."""
        ...

    def reset(self) -> None:
        """SIGHUP: reload what is cached."""
        ...

    def stop(self) -> None: ...

    def status(self) -> dict[str, str]:
        """Lines for the Guru Meditation Report (the host cache, the provider view)."""
        ...

    def steps(self) -> Any:
        """The filter scheduler's public steps, which explain, capacity and the smallest
        change run (None: a driver they cannot look inside)."""
        ...

    def explain_destinations(self, context: Any, spec: Any, all_hosts: bool = False) -> Any:
        """A driver's own explanation of ``spec`` (None: explain runs the driver's
        steps)."""
        ...


class PluginDriver:
    """A plugin driver with what it lacks of ``SchedulerDriver`` (see the module doc)."""

    def __init__(self, inner: Any):
        self.inner = inner
        try:
            parameters = inspect.signature(inner.select_destinations).parameters
        except (AttributeError, TypeError, ValueError):
            parameters = {}
        # nova's start notification goes after the candidates when the driver says when
        self._tells_candidates = "on_candidates" in parameters
        self._casts = {name: getattr(inner, name, None) for name in CASTS}
        self.applies_casts = frozenset(name for name, cast in self._casts.items() if cast)
        self._prepare = getattr(inner, "prepare", None)
        self._status = getattr(inner, "status", None)
        self._explain = getattr(inner, "explain_destinations", None)

    def select_destinations(
        self,
        context: Any,
        spec_obj: Any,
        instance_uuids: list[str] | None,
        return_alternates: bool = False,
        on_candidates: Callable[[Any], None] | None = None,
    ) -> list[list[Any]]:
        if self._tells_candidates:
            return self.inner.select_destinations(
                context, spec_obj, instance_uuids, return_alternates, on_candidates=on_candidates
            )
        if on_candidates is not None:
            on_candidates(spec_obj)  # before the driver runs: nova's order without a hook
        return self.inner.select_destinations(context, spec_obj, instance_uuids, return_alternates)

    def _cast(self, name: str, *args: Any) -> None:
        target = self._casts[name]
        if target is not None:
            target(*args)

    def update_aggregates(self, aggregates: list[Any]) -> None:
        self._cast("update_aggregates", aggregates)

    def delete_aggregate(self, aggregate: Any) -> None:
        self._cast("delete_aggregate", aggregate)

    def update_instance_info(self, host_name: str, instance_uuids: list[str]) -> None:
        self._cast("update_instance_info", host_name, instance_uuids)

    def delete_instance_info(self, host_name: str, instance_uuid: str) -> None:
        self._cast("delete_instance_info", host_name, instance_uuid)

    def sync_instance_info(self, host_name: str, instance_uuids: list[str]) -> None:
        self._cast("sync_instance_info", host_name, instance_uuids)

    def prepare(self) -> None:
        if self._prepare is not None:
            self._prepare()

    def reset(self) -> None:
        self.inner.reset()

    def stop(self) -> None:
        self.inner.stop()

    def status(self) -> dict[str, str]:
        return dict(self._status()) if self._status is not None else {}

    def steps(self) -> Any:
        return None

    def explain_destinations(self, context: Any, spec: Any, all_hosts: bool = False) -> Any:
        if self._explain is None:
            return None
        return self._explain(context, spec, all_hosts=all_hosts)


def as_scheduler_driver(driver: Any) -> SchedulerDriver:
    """``driver`` itself when it has the whole of ``SchedulerDriver`` (the filter
    scheduler), else a ``PluginDriver`` over it."""
    if isinstance(driver, SchedulerDriver):
        return driver
    return PluginDriver(driver)
