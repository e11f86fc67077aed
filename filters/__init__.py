"""Host filters: the plugin contract.

A filter is one small class with nova's method names::

    class MyFilter(BaseHostFilter):
        \"\"\"Passes hosts that ... (one sentence an operator understands).\"\"\"

        def host_passes(self, host_state, spec_obj):
            if something_wrong:
                return Reject("why, in a few words")
            return True

``host_passes`` may return a plain bool (a nova filter copied as is works) or a ``Reject``,
which is falsy and carries the reason shown in NoValidHost and ``explain``. Built-in filters
may override ``filter_hosts`` with a batch implementation, and may add
``filter_rows(table, rows, spec_obj)``, which decides over the host manager's columns
(``scheduler/hosts/table.py``) and returns a ``RowOutcome``, or None to let the handler use
``filter_hosts``. Both must give the same answer as the per-host path. Filters never do I/O:
they see only the request and the HostStates.
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


class BaseHostFilter:
    """Base class for host filters."""

    # Run on rebuild (the `_nova_check_type: rebuild` hint)? nova's default: no.
    RUN_ON_REBUILD = False
    # Run only for the first instance of a multi-create request?
    run_filter_once_per_request = False
    # Reason given for hosts removed by a host_passes that returned a plain False.
    default_reason = "rejected"

    @property
    def name(self) -> str:
        return type(self).__name__

    def host_passes(self, host_state: Any, spec_obj: Any) -> bool | Reject:
        raise NotImplementedError

    def filter_hosts(self, host_states: Iterable[Any], spec_obj: Any) -> FilterOutcome:
        """Apply ``host_passes`` to each host. Subclasses may override with a batch version."""
        host_passes = self.host_passes
        return FilterOutcome.partition(
            host_states, lambda host: host_passes(host, spec_obj), self.default_reason
        )
