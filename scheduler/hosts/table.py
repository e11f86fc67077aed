"""HostTable: the HostStates of a HostManager as columns, for filters and weighers that work
on whole arrays instead of one host at a time.

A HostState stays the object every filter and weigher sees, and its attributes stay the
truth. The table mirrors, per host, the few values the built-in filters and weighers read on
every request, in NumPy arrays indexed by the host's row:

- numeric columns registered by weighers whose raw value depends only on the host
  (``@weighers.host_column``): ``free_ram_mb``, free vCPUs, ... as float64, NaN when the
  host's value is not a plain finite number (the caller then asks the host itself);
- code columns: a small integer per host standing for a value many hosts share
  (``supported_instances``, a ``stats`` key), with the distinct values in a list, so that a
  filter decides once per distinct value;
- the compute service's state (enabled / disabled / forced down / no heartbeat) and its last
  heartbeat in microseconds, per (cell, host): one service row serves every node of a host,
  and a heartbeat updates it in place;
- the host's set of aggregates as a code (hosts in the same aggregates share one list).

The mirror is written only by HostState's own methods, the one way its mirrored attributes
change (``scheduler/hosts/state.py``): ``update_from_row`` and ``consume_from_request`` call
``sync``, ``set_service`` calls ``bind_service``, ``apply_heartbeat`` calls
``service_changed``, ``set_aggregates`` and ``set_aggregates_of`` call ``bind_aggregates`` and
``rebind_aggregates``. The host manager only adds, releases and collects rows. A HostState
outside any table (built by hand, in a test or a plugin) has no row, and the handlers use the
per-host path for a list that holds one.

"Is the compute service up" is decided here, once, for both the per-host and the column
paths of ComputeFilter (``service_state``, ``heartbeat_window``, ``services_up``).

Rows are never reused: a row id is global to the process (each table owns its own range), so
``rows_of`` can tell with two comparisons whether every host of a list belongs to one table.
A host the host manager drops is ``release``d: its row keeps the HostState for
``RELEASE_DELAY`` seconds (a request that holds the row can still read it), then ``collect``
lets it go. Readers do not lock; writers serialize on the table's lock (growing the arrays
copies them).
"""

from __future__ import annotations

import datetime
import fractions
import functools
import itertools
import math
import threading
import time
import weakref
from collections.abc import Callable, Hashable, Iterable
from operator import attrgetter
from typing import Any

import numpy as np

# each table owns rows [base, base + 2**32)
_ROW_SPAN = 1 << 32
_TABLE_COUNTER = itertools.count(1)
_EXACT_INT = 1 << 53
_EPOCH = datetime.datetime(1970, 1, 1)
_MICROSECOND = datetime.timedelta(microseconds=1)

# service states (svc_state): what a service record says, before its heartbeat is compared
# with the clock (``service_state``)
SERVICE_NONE = 0  # no service record, or no heartbeat at all: down
SERVICE_UP_IF_RECENT = 1  # enabled, not forced down, a naive datetime heartbeat in svc_last
SERVICE_DISABLED = 2
SERVICE_FORCED_DOWN = 3
SERVICE_ODD = 4  # a heartbeat that is not a naive datetime: ask the host

# any two datetimes are closer than this (in microseconds); fits an int64 with room to spare
_AGE_CAP = 1 << 62

_row_of = attrgetter("_row")


def _number(value: Any) -> float:
    """``value`` as a float64 that equals it exactly, or NaN (ask the host)."""
    kind = type(value)
    if kind is int:
        return float(value) if -_EXACT_INT < value < _EXACT_INT else math.nan
    if kind is float:
        return value if math.isfinite(value) else math.nan
    return math.nan


# -- is the service up --------------------------------------------------------------------
# The one rule, nova's (ComputeFilter and the db servicegroup driver): a host's compute service
# is up when it is not disabled, not forced down, and its last heartbeat (``last_seen_up``,
# else ``created_at``) is at most ``service_down_time`` seconds away from now. It is written
# once, in three parts that ComputeFilter's per-host and column paths share:
#   read_service      what the record says: (state, heartbeat); the table keeps exactly this
#                     per service (``service_state``: the heartbeat in microseconds);
#   heartbeat_window  the heartbeats that count as recent at ``now``: now ± the largest age
#                     nova accepts, in microseconds (heartbeat_bounds: as datetimes);
#   services_up       state and window combined: for one host (a state and a datetime) or for
#                     columns (two arrays).


def naive_utc(value: Any) -> datetime.datetime | None:
    """A service timestamp as a naive UTC datetime (nova stores naive UTC); None when it is
    not a datetime or an ISO 8601 string."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    if not isinstance(value, datetime.datetime):
        return None
    if value.tzinfo is not None:
        value = value.astimezone(datetime.UTC).replace(tzinfo=None)
    return value


def read_service(service: Any, parse: bool = False) -> tuple[int, datetime.datetime]:
    """(state, last heartbeat as a naive UTC datetime) of a service dict: ``disabled``, then
    ``forced_down``, then the heartbeat (``last_seen_up``, else ``created_at``). The heartbeat
    is 1970-01-01 unless the state is SERVICE_UP_IF_RECENT.

    A heartbeat that is not a naive datetime (an ISO string, an aware datetime) is
    SERVICE_ODD, unless ``parse``: it is then read as ``naive_utc`` reads it (the per-host
    path; the table leaves such rare services to it). A service that is not a mapping is
    SERVICE_ODD either way."""
    if not service:
        return SERVICE_NONE, _EPOCH
    try:
        if service.get("disabled"):
            return SERVICE_DISABLED, _EPOCH
        if service.get("forced_down"):
            return SERVICE_FORCED_DOWN, _EPOCH
        last = service.get("last_seen_up") or service.get("created_at")
    except Exception:  # not a mapping: let the filter look at it
        return SERVICE_ODD, _EPOCH
    if last is None:
        return SERVICE_NONE, _EPOCH
    if type(last) is not datetime.datetime or last.tzinfo is not None:
        if not parse:
            return SERVICE_ODD, _EPOCH
        last = naive_utc(last)
        if last is None:
            return SERVICE_NONE, _EPOCH
    return SERVICE_UP_IF_RECENT, last


def service_state(service: Any) -> tuple[int, int]:
    """``read_service`` as the table keeps it: (state, heartbeat in microseconds since 1970,
    0 unless the state is SERVICE_UP_IF_RECENT)."""
    state, last = read_service(service)
    if last is _EPOCH:
        return state, 0
    return state, (last - _EPOCH) // _MICROSECOND


@functools.lru_cache(maxsize=16)
def _max_age(down_time: Any) -> int:
    """The largest heartbeat age, in whole microseconds, that nova's
    ``abs((now - last).total_seconds()) <= down_time`` accepts. ``total_seconds()`` is the
    microsecond difference divided by 10**6, correctly rounded, and so grows with it: the
    ages accepted are exactly 0 .. this (none when it is negative)."""
    if type(down_time) is int and 0 <= down_time < 2**32:
        # k / 10**6 == down_time exactly, and (k + 1) / 10**6 rounds above it
        return down_time * 1_000_000
    if not isinstance(down_time, int | float):
        raise TypeError(f"service_down_time must be a number, not {down_time!r}")
    if math.isnan(down_time) or down_time < 0:
        return -1  # no age is accepted
    if down_time >= _AGE_CAP // 1_000_000:
        return _AGE_CAP
    age = math.floor(fractions.Fraction(down_time) * 1_000_000)
    while (age + 1) / 1_000_000 <= down_time:  # a neighbour that rounds down to it
        age += 1
    return age


def heartbeat_window(now: datetime.datetime, down_time: Any) -> tuple[int, int]:
    """(earliest, latest) heartbeat, in microseconds since 1970, that counts as recent at
    ``now`` (naive UTC) for a ``service_down_time`` of ``down_time`` seconds."""
    now_us = (now - _EPOCH) // _MICROSECOND
    age = _max_age(down_time)
    return now_us - age, now_us + age


def heartbeat_bounds(now: datetime.datetime, down_time: Any) -> tuple[datetime.datetime, ...]:
    """``heartbeat_window`` as naive datetimes (for one host, whose heartbeat ``read_service``
    gives as a datetime): the same ``now`` ± the same age. Bounds beyond the datetime range
    are clamped to it, which changes no comparison."""
    age = _max_age(down_time)
    if age < 0:
        return datetime.datetime.max, datetime.datetime.min  # no datetime is in it
    delta = _age_delta(age)
    try:
        earliest = now - delta
    except OverflowError:
        earliest = datetime.datetime.min
    try:
        latest = now + delta
    except OverflowError:
        latest = datetime.datetime.max
    return earliest, latest


@functools.lru_cache(maxsize=16)
def _age_delta(age: int) -> datetime.timedelta:
    return datetime.timedelta(microseconds=age)


def services_up(state: Any, last: Any, window: tuple[Any, Any]) -> Any:
    """Whether services are up: one (a state and a heartbeat datetime from ``read_service``
    and a window from ``heartbeat_bounds``: a bool) or columns of them (``services``' state
    and heartbeat arrays and a window from ``heartbeat_window``: a bool array)."""
    earliest, latest = window
    return (state == SERVICE_UP_IF_RECENT) & (last >= earliest) & (last <= latest)


def service_is_up(service: Any, now: datetime.datetime, down_time: Any) -> bool:
    """Whether one service dict is up at ``now`` (nova's rule; see above)."""
    state, last = read_service(service, True)
    return services_up(state, last, heartbeat_bounds(now, down_time))


def microseconds(moment: datetime.datetime) -> int:
    """A naive UTC datetime as microseconds since 1970 (the unit of ``svc_last``)."""
    return (moment - _EPOCH) // _MICROSECOND


class _CodeColumn:
    """Per row, the code of a shared value: ``codes[row]`` indexes ``values``; -1 when the
    host's value has no hashable key (ask the host).

    ``state`` is the (codes, values) pair readers take in one read: values only grow (a new
    list each time), and a renumbering (``HostTable._recode``) or a growth installs new
    arrays, so a reader's pair stays consistent as long as it checks its codes against its
    own ``len(values)``."""

    __slots__ = ("func", "key", "_index", "state")

    def __init__(self, func: Callable[[Any], Any], key: Callable[[Any], Hashable], capacity: int):
        self.func = func
        self.key = key
        self._index: dict[Hashable, int] = {}
        self.state: tuple[np.ndarray, list[Any]] = (np.full(capacity, -1, dtype=np.int32), [])

    @property
    def codes(self) -> np.ndarray:
        return self.state[0]

    @property
    def values(self) -> list[Any]:
        return self.state[1]

    def code_of(self, host: Any) -> int:
        try:
            value = self.func(host)
            key = self.key(value)
            code = self._index.get(key)
        except Exception:
            return -1
        if code is None:
            codes, values = self.state
            code = self._index[key] = len(values)
            # copy-on-write: a reader iterating ``values`` keeps the list it got
            self.state = (codes, [*values, value])
        return code


class HostTable:
    """Columns mirroring the HostStates of one host manager (see the module docstring)."""

    MAX_CODE_COLUMNS = 64
    # no request holds its rows that long
    RELEASE_DELAY = 600.0

    def __init__(self, capacity: int = 1024):
        self.base = next(_TABLE_COUNTER) * _ROW_SPAN
        self._lock = threading.RLock()
        self._ref = weakref.ref(self)
        self.size = 0
        self._capacity = capacity
        self.objects = np.empty(capacity, dtype=object)
        self._numeric: dict[str, tuple[Callable[[Any], Any], np.ndarray]] = {}
        self._codes: dict[str, _CodeColumn] = {}
        # services, by slot; the slot of each row (-1: none bound)
        self.service_slot = np.full(capacity, -1, dtype=np.int32)
        self._slots: dict[tuple[Any, str], int] = {}
        self._slot_keys: list[tuple[Any, str]] = []  # the key of each slot
        self.svc_state = np.zeros(64, dtype=np.int8)
        self.svc_last = np.zeros(64, dtype=np.int64)
        # aggregates: (codes by row, the aggregate list of each code), swapped as one value
        self.aggregates: tuple[np.ndarray, list[list[Any]]] = (
            np.zeros(capacity, dtype=np.int32),
            [[]],
        )
        self._agg_index: dict[int, int] = {}
        self._released: list[tuple[float, int]] = []  # (when, local row)

    # -- rows --------------------------------------------------------------------------------
    def add(self, host: Any) -> None:
        """Give ``host`` a row and fill it (the host manager calls this for every HostState
        it creates, before publishing it)."""
        with self._lock:
            if self.size == self._capacity:
                self._grow()
            local = self.size
            self.objects[local] = host
            host._table = self._ref
            host._row = self.base + local
            self.size = local + 1
            self._fill(host, local)
            self.bind_aggregates(host)
            self.bind_service(host)

    def _grow(self) -> None:
        capacity = self._capacity * 2

        def grown(array: np.ndarray, fill: Any) -> np.ndarray:
            out = np.full(capacity, fill, dtype=array.dtype)
            out[: self._capacity] = array
            return out

        objects = np.empty(capacity, dtype=object)
        objects[: self._capacity] = self.objects
        self.objects = objects
        for name, (func, array) in list(self._numeric.items()):
            self._numeric[name] = (func, grown(array, math.nan))
        for column in self._codes.values():
            column.state = (grown(column.codes, -1), column.values)
        self.service_slot = grown(self.service_slot, -1)
        codes, lists = self.aggregates
        self.aggregates = (grown(codes, 0), lists)
        self._capacity = capacity

    def release(self, host: Any) -> None:
        """The host manager dropped ``host``: free its row's HostState after RELEASE_DELAY."""
        local = getattr(host, "_row", -1) - self.base
        if 0 <= local < self.size:
            with self._lock:
                self._released.append((time.monotonic(), local))

    def collect(self, now: float | None = None) -> int:
        """Let go of the HostStates released more than RELEASE_DELAY seconds ago; returns
        how many."""
        now = time.monotonic() if now is None else now
        with self._lock:
            due = [local for when, local in self._released if now - when >= self.RELEASE_DELAY]
            if due:
                for host in self.objects[due].tolist():
                    if host is not None:  # out of the table: the per-host paths take it
                        host._table = None
                        host._row = -1
                self._released = [
                    (when, local)
                    for when, local in self._released
                    if now - when < self.RELEASE_DELAY
                ]
                self.objects[due] = None
                self.service_slot[due] = -1
        return len(due)

    def rows_of(self, hosts: list[Any]) -> np.ndarray | None:
        """The local rows of ``hosts``, in order; None unless every one is in this table."""
        n = len(hosts)
        rows = np.fromiter(map(_row_of, hosts), dtype=np.int64, count=n)
        if n:
            rows -= self.base
            if rows.min() < 0 or rows.max() >= self.size:
                return None
        return rows

    def hosts_at(self, rows: np.ndarray) -> list[Any]:
        """The HostStates of these local rows, in order."""
        return self.objects[rows].tolist()

    # -- values --------------------------------------------------------------------------------
    def sync(self, host: Any) -> None:
        """Copy the host's current values into its row (after an update or a consumption)."""
        local = host._row - self.base
        with self._lock:
            self._fill(host, local)

    def _fill(self, host: Any, local: int) -> None:
        for func, array in self._numeric.values():
            try:
                array[local] = _number(func(host))
            except Exception:
                array[local] = math.nan
        for column in self._codes.values():
            column.codes[local] = column.code_of(host)
            if len(column.values) > 2 * self.size + 1024:
                # values that churn (a counter, a timestamp) would grow the list forever:
                # start it again from the values the hosts hold now
                self._recode(column)

    def _recode(self, column: _CodeColumn) -> None:
        """Rebuild a code column from the hosts' current values (under the lock)."""
        fresh = _CodeColumn(column.func, column.key, len(column.codes))
        self._fill_codes(fresh, skip_empty=True)
        # readers switch from one (codes, values) pair to the other in one read
        column._index, column.state = fresh._index, fresh.state

    def _fill_codes(self, column: _CodeColumn, *, skip_empty: bool = False) -> None:
        """Every row's code in a new column (under the lock): one pass over the hosts, no
        NumPy item access per host (the first request that uses a column waits for this:
        at 10k hosts a per-row loop is several milliseconds per column)."""
        hosts = self.objects[: self.size].tolist()
        codes = column.codes
        if skip_empty and None in hosts:
            for local, host in enumerate(hosts):
                if host is not None:
                    codes[local] = column.code_of(host)
            return
        codes[: len(hosts)] = np.fromiter(map(column.code_of, hosts), np.int32, len(hosts))

    def _numbers(self, func: Callable[[Any], Any]) -> np.ndarray:
        """``_number(func(host))`` of every row, NaN where it raises: one pass over the
        hosts when none raises (the first request that uses a column waits for this)."""
        hosts = self.objects[: self.size].tolist()
        try:
            values = list(map(func, hosts))
        except Exception:  # some host's value cannot be read: ask each one
            out = np.empty(len(hosts))
            for local, host in enumerate(hosts):
                try:
                    out[local] = _number(func(host))
                except Exception:
                    out[local] = math.nan
            return out
        return np.fromiter(map(_number, values), np.float64, len(values))

    def numeric(self, name: str, func: Callable[[Any], Any]) -> np.ndarray:
        """The float64 column ``name`` (registered with ``func(host)`` on first use: every
        row is computed then, and on every ``sync`` after)."""
        found = self._numeric.get(name)
        if found is not None:
            return found[1]
        with self._lock:
            found = self._numeric.get(name)
            if found is None:
                array = np.full(self._capacity, math.nan)
                array[: self.size] = self._numbers(func)
                found = self._numeric[name] = (func, array)
            return found[1]

    def codes(
        self, name: str, func: Callable[[Any], Any], key: Callable[[Any], Hashable]
    ) -> tuple[np.ndarray, list[Any]] | None:
        """The code column ``name``: (codes by row, distinct values). None when the table
        already holds ``MAX_CODE_COLUMNS`` code columns (the caller asks the hosts). A code
        written after this call may be beyond ``len(values)``: check before indexing."""
        column = self._codes.get(name)
        if column is None:
            with self._lock:
                column = self._codes.get(name)
                if column is None:
                    if len(self._codes) >= self.MAX_CODE_COLUMNS:
                        return None
                    column = _CodeColumn(func, key, self._capacity)
                    self._fill_codes(column)
                    self._codes[name] = column
        return column.state

    # -- services ------------------------------------------------------------------------------
    def bind_service(self, host: Any) -> None:
        """Mirror ``host.service`` (the service record of its host name in its cell)."""
        with self._lock:
            key = (host.cell_uuid, host.host)
            slot = self._slots.get(key)
            if slot is None:
                slot = self._slots[key] = len(self._slots)
                self._slot_keys.append(key)
                if slot >= len(self.svc_state):
                    size = 2 * len(self.svc_state)
                    state = np.zeros(size, dtype=np.int8)
                    state[:slot] = self.svc_state
                    last = np.zeros(size, dtype=np.int64)
                    last[:slot] = self.svc_last
                    self.svc_state, self.svc_last = state, last
            state, last = service_state(host.service)
            self.svc_last[slot] = last
            self.svc_state[slot] = state
            self.service_slot[host._row - self.base] = slot

    def service_changed(self, cell_uuid: Any, host_name: str, service: Any) -> None:
        """A service record changed in place (a heartbeat): mirror it for every node of it."""
        slot = self._slots.get((cell_uuid, host_name))
        if slot is None:
            return
        state, last = service_state(service)
        with self._lock:
            self.svc_last[slot] = last
            self.svc_state[slot] = state

    def heartbeats_outside(
        self, earliest: datetime.datetime, latest: datetime.datetime
    ) -> np.ndarray:
        """The service slots (every cell's) whose service, enabled and not forced down, has a
        heartbeat mirrored here before ``earliest`` or after ``latest`` (naive UTC): those
        ComputeFilter finds down, or soon will. Slots are never reused, so equal arrays name
        the same services (``hosts_of_slots`` names them)."""
        with self._lock:
            n = len(self._slot_keys)
            last = self.svc_last[:n]
            late = (self.svc_state[:n] == SERVICE_UP_IF_RECENT) & (
                (last < microseconds(earliest)) | (last > microseconds(latest))
            )
            return np.flatnonzero(late)

    def hosts_of_slots(self, slots: np.ndarray, cell_uuid: Any) -> set[str]:
        """The host names of ``cell_uuid`` among the service ``slots``."""
        keys = self._slot_keys  # append-only: a slot's key never changes
        return {host for cell, host in (keys[i] for i in slots) if cell == cell_uuid}

    def services(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(state, last heartbeat) of the service of each row (SERVICE_NONE when unbound)."""
        slots = self.service_slot[rows]
        state = self.svc_state[slots]
        last = self.svc_last[slots]
        unbound = slots < 0
        if unbound.any():
            state = np.where(unbound, SERVICE_NONE, state)
        return state, last

    # -- aggregates ----------------------------------------------------------------------------
    def bind_aggregates(self, host: Any) -> None:
        """Mirror ``host.aggregates`` (its code stands for the list object: hosts in the same
        aggregates share one list)."""
        with self._lock:
            codes, lists = self.aggregates
            aggregates = host.aggregates or []
            code = self._agg_index.get(id(aggregates))
            if code is None or lists[code] is not aggregates:
                code = len(lists)
                lists = [*lists, aggregates]
                self._agg_index[id(aggregates)] = code
                self.aggregates = (codes, lists)
            codes[host._row - self.base] = code

    def rebind_aggregates(self, hosts: Iterable[Any]) -> None:
        """Mirror new aggregate lists for ``hosts`` (every host of the table after the
        aggregates were re-read): the codes start afresh and replace the old ones at once."""
        with self._lock:
            codes = np.zeros(self._capacity, dtype=np.int32)
            lists: list[list[Any]] = [[]]
            index: dict[int, int] = {}
            for host in hosts:
                aggregates = host.aggregates or []
                code = index.get(id(aggregates))
                if code is None:
                    code = index[id(aggregates)] = len(lists)
                    lists.append(aggregates)
                codes[host._row - self.base] = code
            self._agg_index = index
            self.aggregates = (codes, lists)


def table_of(hosts: list[Any]) -> tuple[HostTable, np.ndarray] | None:
    """The table holding every one of ``hosts`` and their rows, or None (some host is not in
    a table, or not in the same one)."""
    if not hosts:
        return None
    ref = getattr(hosts[0], "_table", None)
    table = ref() if ref is not None else None
    if table is None:
        return None
    try:
        rows = table.rows_of(hosts)
    except (AttributeError, TypeError, ValueError):
        return None
    if rows is None:
        return None
    return table, rows
