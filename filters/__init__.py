"""Host filters: the plugin contract.

A filter is one small class with two methods, in the spirit of kube-scheduler's
PreFilter/Filter::

    class LocalDiskFilter(BaseHostFilter):
        \"\"\"Passes hosts with room for the flavor's disk (one sentence an operator reads).\"\"\"

        def prepare(self, spec_obj):
            # once per request (and per instance of a multi-create): what every host is
            # checked against; PASS_ALL when the request asks nothing of this filter
            return spec_obj.flavor.root_gb * 1024

        def check(self, host_state, wanted_mb):
            # once per host: True, or a Reject that says why
            if host_state.free_disk_mb < wanted_mb:
                return Reject("not enough local disk")
            return True

``prepare`` defaults to handing the request itself to ``check``. ``check`` may return a
plain bool or a ``Reject``, which is falsy and carries the reason shown in NoValidHost and
``explain``. A filter whose answer depends only on the host's aggregates says so with
``per_aggregates = True``: the handler then checks one host per distinct set of aggregates
and gives the others the same answer. nova's own method, ``host_passes(host_state,
spec_obj)``, is ``check(host_state, prepare(spec_obj))``; a filter written with
``host_passes`` alone, as nova writes them, works as is.

Filters never do I/O: they see only the request and the HostStates. A few hot built-in
filters also decide over the host manager's columns (``filter_rows``); they declare it
with ``@column_path``, which only the class it decorates uses (a subclass is checked host by
host through its own ``check``). Both paths must give the same answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any


class Reject:
    """A falsy result of ``host_passes`` that says why the host was removed."""

    __slots__ = ("reason",)

    def __init__(self, reason: str):
        self.reason = reason

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"Reject({self.reason!r})"


@dataclass(slots=True)
class FilterOutcome:
    """What one filter did to a list of hosts: the passing hosts (in input order) and,
    for every removed host, the reason."""

    passed: list[Any] = field(default_factory=list)
    rejected: list[tuple[Any, str]] = field(default_factory=list)

    @classmethod
    def partition(
        cls,
        host_states: Iterable[Any],
        check: Callable[[Any], Any],
        default_reason: str = "rejected",
    ) -> FilterOutcome:
        """Split ``host_states`` by ``check(host)``: a truthy result passes the host, a
        falsy one (a ``Reject``, or ``False``) removes it with its reason."""
        outcome = cls()
        passed = outcome.passed
        rejected = outcome.rejected
        for host in host_states:
            result = check(host)
            if result:
                passed.append(host)
            else:
                rejected.append((host, getattr(result, "reason", None) or default_reason))
        return outcome


@dataclass(slots=True)
class RowOutcome:
    """A ``filter_rows`` answer: ``keep[i]`` says whether the i-th host passes; a removed
    host's reason is ``reasons[codes[i]]`` (``codes`` is only read where ``keep`` is False;
    None means ``reasons[0]`` for every removed host)."""

    keep: Any  # numpy bool array, one per row
    reasons: list[str]
    codes: Any = None  # numpy integer array, one per row, or None


# ``prepare``'s answer when the request asks nothing of the filter: every host passes
# unchecked (e.g. no availability zone asked for)
PASS_ALL: Any = type("PassAll", (), {"__repr__": lambda self: "PASS_ALL"})()


class BaseHostFilter:
    """Base class for host filters: write ``check`` (and ``prepare`` when the request needs
    work once, not per host)."""

    # Run on rebuild (the `_nova_check_type: rebuild` hint)? nova's default: no.
    RUN_ON_REBUILD = False
    # Run only for the first instance of a multi-create request?
    run_filter_once_per_request = False
    # Reason given for hosts removed by a check that returned a plain False.
    default_reason = "rejected"
    # Whether check's answer depends on nothing of the host but its aggregates.
    per_aggregates = False
    # Whether check's answer can change when an instance is placed on the host (its free
    # resources, instance or I/O counts, NUMA cells, PCI devices). Capacity counting
    # (scheduler/capacity) asks such a filter again after each instance it counts on a host;
    # one that says False is asked once per host. Unsure: leave it True.
    depends_on_consumption = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        name = f"{cls.__module__}.{cls.__qualname__}"
        for old in ("filter_hosts", "filter_all"):
            if old in vars(cls):
                raise TypeError(
                    f"{name} defines {old}(), which novasched filters no longer have: put "
                    "the per-request work in prepare(spec_obj) and the per-host decision in "
                    "check(host_state, prepared) (see docs/plugins.md)"
                )
        own = vars(cls)
        if "host_passes" in own and "check" not in own and cls.check is not BaseHostFilter.check:
            # the filter it extends decides in check: a host_passes here would never be asked
            raise TypeError(
                f"{name} overrides host_passes() of a filter that decides in check(): "
                "override check(host_state, prepared) (and prepare(spec_obj)) instead"
            )

    @property
    def name(self) -> str:
        return type(self).__name__

    def prepare(self, spec_obj: Any) -> Any:
        """What ``check`` gets for every host of this request: by default the request."""
        return spec_obj

    def check(self, host_state: Any, prepared: Any) -> bool | Reject:
        """Whether ``host_state`` passes: True, or a ``Reject`` (or False)."""
        return self.host_passes(host_state, prepared)

    def host_passes(self, host_state: Any, spec_obj: Any) -> bool | Reject:
        """nova's method: one host, one request."""
        if type(self).check is BaseHostFilter.check:
            raise NotImplementedError(f"{self.name} must define check() (or host_passes())")
        prepared = self.prepare(spec_obj)
        if prepared is PASS_ALL:
            return True
        return self.check(host_state, prepared)


def column_path(cls: type) -> type:
    """Declare that ``cls``'s ``filter_rows(table, rows, spec_obj)`` decides as its
    ``check`` does, over the host manager's columns (``scheduler/hosts/table.py``); it
    returns a ``RowOutcome``, or None to let the handler check the hosts. Only ``cls``
    itself is run that way: a subclass may check otherwise."""
    cls.__column_path__ = cls
    return cls


def rows_method(filter_: Any) -> Any:
    """The declared column path of ``filter_``'s own class, or None."""
    cls = type(filter_)
    if getattr(cls, "__column_path__", None) is not cls:
        return None
    return filter_.filter_rows
