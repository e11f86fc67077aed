"""HostState: what the scheduler knows about one compute node, as nova's HostState holds it.

Filters and weighers read these attributes by nova's names; a filter written for nova reads
the same values here. Updates from the cell database and consumption by a scheduling
decision are serialized per HostState (one per (host, node)), as nova's are.

At cloud scale (100k hosts) most of a HostState's memory would be JSON decoded per host that
many hosts share (cpu_info, supported_instances, metrics, the keys and small values of
stats): decoded values are memoised by their text, so identical reports share one object.
``metrics`` are read as nova's object layer reads them (``_monitor_metrics``).
Shared values are read-only; consumption replaces them (numa_topology, pci_stats).

Consumption lives exactly as long as the instance it counts is unknown to the compute's
report. A HostState keeps, while it has consumption of its own, the usage its last applied
compute-node report gave (its base) and the consumptions made since, in order, each a compact
``Consumption`` (flavor, NUMA and PCI requests, when). A consumption is released when the
first of these happens: a report newer than it is applied (the report counts the instance
now), nova says the instance is gone or elsewhere (the instance-info casts), its claim is
rolled back or was never made (rebuild checks), Placement no longer holds its allocation, or
it grew older than ``[scheduler] consumption_max_age``. Releasing takes the base again and
consumes the remaining ones on it (NUMA cells and PCI pools included), so the host always
reads "its last report + exactly the consumptions still pending".
"""

from __future__ import annotations

import copy
import datetime
import itertools
import json
import logging
import operator
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, NamedTuple, NoReturn

from oslo_concurrency import lockutils
from oslo_utils import timeutils

from db.queries import ComputeNodeRow, ServiceRow
from scheduler.objects import Aggregate, RequestSpec
from scheduler.resources import numa, pci
from scheduler.resources.shapes import InstanceTopology, PciRequest
from scheduler.telemetry import metrics

LOG = logging.getLogger(__name__)
# serializes the first use of each HostState's lock (see HostState._lock)
_LOCK_CREATION = threading.Lock()


def _json_or(value: Any, default: Any) -> Any:
    if value is None or value == "":
        return default
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return default
    return value


# text -> decoded value, shared by every HostState whose report has the same text
_DECODED: dict[str, Any] = {}
_TEXTS: dict[str, str] = {}
_DECODED_MAX = 20_000
_MISSING = object()


def _shared_json(value: Any, default: Any) -> Any:
    """``_json_or``, memoised by text: hosts that report the same JSON share one value."""
    if not isinstance(value, str):
        return _json_or(value, default)
    hit = _DECODED.get(value, _MISSING)
    if hit is _MISSING:
        hit = _json_or(value, _MISSING)
        if hit is _MISSING:
            return default
        if len(_DECODED) >= _DECODED_MAX:
            _DECODED.clear()  # a fleet with that many distinct reports gains nothing from it
        _DECODED[sys.intern(value) if len(value) < 64 else value] = hit
    return default if hit is None else hit


# nova-compute stores these as fractions (MonitorMetric.to_dict divides them by 100) and
# nova's scheduler reads them back as percentages (MonitorMetricList.from_json multiplies)
PERCENT_METRICS = frozenset(
    {
        "cpu.percent",
        "cpu.user.percent",
        "cpu.kernel.percent",
        "cpu.idle.percent",
        "cpu.iowait.percent",
    }
)
# metrics text -> the metrics as nova reads them, shared by every host reporting that text
_METRICS: dict[str, list[dict[str, Any]]] = {}


def _monitor_metrics(text: Any) -> list[dict[str, Any]]:
    """``compute_nodes.metrics`` as nova's scheduler sees it through
    ``MonitorMetricList.from_json``: the percent metrics (stored as fractions, 0.37) are
    multiplied by 100, and every value becomes an integer as ``MonitorMetric.value`` is
    (``int`` truncates: a stored 0.29 reads as 28, as it does in nova). A metric whose value
    nova could not read (not a number) is left out; a metric without a value is kept as is."""
    if not isinstance(text, str):
        return _read_metrics(text) if isinstance(text, list) else []
    hit = _METRICS.get(text)
    if hit is None:
        hit = _read_metrics(_json_or(text, []))
        if len(_METRICS) >= _DECODED_MAX:
            _METRICS.clear()
        _METRICS[text] = hit
    return hit


def _read_metrics(decoded: Any) -> list[dict[str, Any]]:
    if not isinstance(decoded, list):
        return []
    out = []
    for metric in decoded:
        if not isinstance(metric, dict):
            continue
        if "value" in metric:
            value = metric["value"]
            try:
                if isinstance(value, str):  # never written by nova; read it as a number
                    value = float(value)
                if metric.get("name") in PERCENT_METRICS:
                    value = value * 100
                metric = {**metric, "value": int(value)}
            except (TypeError, ValueError, OverflowError):
                LOG.debug("Ignoring metric %s: value %r is not a number", metric.get("name"), value)
                continue
        out.append(metric)
    return out


def _shared_text(value: Any) -> Any:
    """One string object for every host reporting the same text (cpu_info, hypervisor_type)."""
    if not isinstance(value, str):
        return value
    hit = _TEXTS.get(value)
    if hit is None:
        if len(_TEXTS) >= _DECODED_MAX:
            _TEXTS.clear()
        _TEXTS[value] = hit = value
    return hit


def _stats_dict(value: Any) -> dict[str, Any]:
    """Decoded ``stats`` with interned keys and small values: stats differ per host (counts),
    but their keys and most values repeat across the fleet."""
    stats = _json_or(value, {}) or {}
    if not isinstance(stats, dict):
        return {}
    intern = sys.intern
    return {
        (intern(k) if isinstance(k, str) else k): (
            intern(v) if isinstance(v, str) and len(v) <= 40 else v
        )
        for k, v in stats.items()
    }


LIMITS_ARE_PER_REQUEST = (
    "HostState is shared between requests; record a per-request limit with "
    "spec_obj.set_host_limit(host_state, name, value)"
)


class _SharedLimits(Mapping):
    """``HostState.limits``: always empty, and read-only. nova's filters wrote the limits of
    a request into ``host_state.limits``; nova rebuilds its HostStates per request, ours are
    shared between requests, so such a write would leak into every other request. A write
    raises a TypeError telling the plugin author what to do instead."""

    __slots__ = ()

    def __getitem__(self, key: Any) -> NoReturn:
        raise KeyError(key)

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "{}"

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError(LIMITS_ARE_PER_REQUEST)

    __setitem__ = __delitem__ = __ior__ = _refuse
    setdefault = update = pop = popitem = clear = _refuse


# the one ``limits`` of every HostState
NO_LIMITS: Mapping[str, Any] = _SharedLimits()


# keys of consumptions made without an instance uuid (RPC < 4.4, and callers that give none)
_ANONYMOUS = itertools.count(1)
# consumptions a host keeps apart at most; beyond, the older half joins its base (see
# HostState._fold_oldest). A host takes a few instances per report period, not hundreds.
_MAX_PENDING = 256


@dataclass(frozen=True, slots=True)
class Consumption:
    """What ``consume_from_request`` needs to count one instance again, and when it was
    counted. It quacks like the request for the NUMA maths (``flavor``, ``numa_topology``,
    ``image``) and holds nothing else of it (not its candidate lists)."""

    flavor: Any
    numa_topology: InstanceTopology | None
    image: Any
    pci_requests: tuple[PciRequest, ...]
    consumed_at: datetime.datetime
    # False: a key of our own (no instance uuid), which nova's casts cannot name
    is_instance: bool = True
    # the providers of the request's groups when it was consumed (nova's
    # get_request_group_mapping): the PCI devices Placement allocated are the ones taken
    provider_mapping: Mapping[str, list[str]] | None = None
    # the physnets and tunnel of its ports: the refit keeps them NUMA-affine, as nova's
    # (through the host's limits)
    network_metadata: Any = None
    # this scheduler claimed it in Placement: Placement must hold it while it is counted
    claimed: bool = False
    # it counts as an I/O operation on the host (nova counts a building instance in
    # ``num_io_ops``); False: its build finished (a replay's instance its compute built)
    building: bool = True

    @classmethod
    def of(
        cls,
        spec_obj: Any,
        consumed_at: datetime.datetime,
        is_instance: bool = True,
        claimed: bool = False,
    ) -> Consumption:
        pci_requests = tuple(getattr(spec_obj, "pci_requests", None) or ())
        return cls(
            spec_obj.flavor,
            getattr(spec_obj, "numa_topology", None),
            getattr(spec_obj, "image", None),
            pci_requests,
            consumed_at,
            is_instance,
            # a copy: a multi-create sets the groups' providers again for each instance
            pci.request_group_mapping(spec_obj) if pci_requests else None,
            getattr(spec_obj, "network_metadata", None),
            claimed,
        )


class _PciCells:
    """The PCI side of one consumption's NUMA fit, as nova's ``consume_from_request`` has it:
    the host cells are tried in an order that counts their free PCI devices (``counts``),
    each assignment of guest nodes to host cells is checked with ``support_requests`` on
    those cells (``check``), and the PCI requests are then applied NUMA-local to the cells
    of the assignment the fit accepted (``fitted``; None when nothing was fitted)."""

    __slots__ = ("pools", "requests", "mapping", "sockets", "fitted")

    def __init__(self, hs: HostState, entry: Consumption):
        self.requests = entry.pci_requests
        self.mapping = entry.provider_mapping
        self.pools = pci.pools_of(hs, hs.pci_stats)
        topology = numa.host_topology_of(hs, hs.numa_topology) if self.requests else None
        self.sockets = {c.id: c.socket for c in topology.cells} if topology else None
        self.fitted: list[int] | None = None

    def counts(self) -> dict[int | None, int]:
        return numa.pci_device_counts(self.pools)

    def check(self, cell_ids: Iterable[int]) -> bool:
        cell_ids = list(cell_ids)
        if pci.support_requests(self.pools, self.requests, self.mapping, cell_ids, self.sockets):
            self.fitted = cell_ids  # the fit takes the first assignment the check accepts
            return True
        return False


class _Usage(NamedTuple):
    """The values consumption changes, as the last applied report left them."""

    free_ram_mb: Any
    free_disk_mb: Any
    vcpus_used: Any
    num_instances: Any
    num_io_ops: Any
    numa_topology: Any
    pci_stats: Any
    updated: datetime.datetime | None


_USAGE_OF = operator.attrgetter(*_Usage._fields)


class HostState:
    """Mutable information about one compute node (host, nodename).

    Its attributes are the truth; the host manager's HostTable mirrors some of them. Every
    change of a mirrored attribute goes through a method here, which writes the mirror too:
    ``update_from_row`` (a compute-node report), ``set_service``, ``set_aggregates``,
    ``consume_from_request`` and the releases of consumption (``release_consumption``,
    ``expire_consumption``, ``release_unlisted``), nova's ``update``, and for changes shared
    by many HostStates
    ``apply_heartbeat`` (a service record's heartbeat, in place) and ``set_aggregates_of``
    (every host's aggregates after a re-read). Assigning such an attribute directly is fine
    only for a HostState outside any table (built by hand in a test or a plugin).
    """

    __slots__ = (
        "host",
        "nodename",
        "uuid",
        "cell_uuid",
        "_lock_obj",
        "total_usable_ram_mb",
        "free_ram_mb",
        "total_usable_disk_gb",
        "disk_mb_used",
        "free_disk_mb",
        "vcpus_total",
        "vcpus_used",
        "numa_topology",
        "pci_stats",
        "host_ip",
        "hypervisor_type",
        "hypervisor_version",
        "hypervisor_hostname",
        "cpu_info",
        "supported_instances",
        "stats",
        "metrics",
        "num_instances",
        "num_io_ops",
        "failed_builds",
        "cpu_allocation_ratio",
        "ram_allocation_ratio",
        "disk_allocation_ratio",
        "service",
        "aggregates",
        "instances",
        "limits",
        "updated",
        "compute_updated_at",
        "allocation_candidates",
        "_table",
        "_row",
        "_base",
        "_pending",
        "__weakref__",
    )

    def __init__(self, host: str, nodename: str, cell_uuid: str | None = None):
        self.host = host
        self.nodename = nodename
        self.uuid: str | None = None
        self.cell_uuid = cell_uuid
        # Updates and consumption of one (host, node) are serialized by lockutils' lock named
        # ``host-node``, as nova's are. A named semaphore costs ~60 us and ~1 KB, so it is made
        # on first use: a HostState the cache has not published yet needs none, and most hosts
        # are never updated or consumed again after the first read (100k hosts: ~100 MB saved).
        self._lock_obj: Any = None
        self.total_usable_ram_mb = 0
        self.free_ram_mb = 0
        self.total_usable_disk_gb = 0
        self.disk_mb_used = 0
        self.free_disk_mb = 0
        self.vcpus_total = 0
        self.vcpus_used = 0
        self.numa_topology: Any = None
        self.pci_stats: Any = None
        self.host_ip: str | None = None
        self.hypervisor_type: str | None = None
        self.hypervisor_version: int | None = None
        self.hypervisor_hostname: str | None = None
        self.cpu_info: str | None = None
        self.supported_instances: list[list[str]] = []
        self.stats: dict[str, str] = {}
        self.metrics: list[dict[str, Any]] = []
        self.num_instances = 0
        self.num_io_ops = 0
        self.failed_builds = 0
        self.cpu_allocation_ratio: float | None = None
        self.ram_allocation_ratio: float | None = None
        self.disk_allocation_ratio: float | None = None
        # nova hands filters a read-only dict of the Service's fields; ours has the same keys
        self.service: dict[str, Any] = {}
        self.aggregates: list[Aggregate] = []
        self.instances: dict[str, Any] = {}
        # read-only and empty: per-request limits live on the request (set_host_limit)
        self.limits: Mapping[str, Any] = NO_LIMITS
        self.updated: datetime.datetime | None = None
        self.compute_updated_at: datetime.datetime | None = None
        # nova's per-request attribute, empty here: this request's candidates for the host
        # are spec_obj.candidates_for(host_state)
        self.allocation_candidates: tuple[dict[str, Any], ...] = ()
        # the HostTable mirroring this host (a weak reference) and the host's row in it;
        # None / -1 outside any table (see scheduler/hosts/table.py)
        self._table: Any = None
        self._row = -1
        # while this scheduler has consumption on the host: the usage of the last applied
        # report, and the consumptions since, by instance uuid in the order they were made
        # (None otherwise). The dict is replaced, never changed: a copy.copy of the host
        # (explain's private twins) may consume without touching this one.
        self._base: _Usage | None = None
        self._pending: dict[str, Consumption] | None = None

    def _table_or_none(self) -> Any:
        """The HostTable mirroring this host, or None."""
        ref = self._table
        return ref() if ref is not None else None

    def _mirror(self) -> None:
        """Copy the values the table mirrors into this host's row (after they changed)."""
        table = self._table_or_none()
        if table is not None:
            table.sync(self)

    @property
    def _lock_name(self) -> str:
        return f"{self.host}-{self.nodename}"

    @property
    def _lock(self) -> Any:
        lock = self._lock_obj
        if lock is None:
            with _LOCK_CREATION:
                lock = self._lock_obj
                if lock is None:
                    # the same semaphore any lockutils.lock("host-node") in this process gets
                    lock = self._lock_obj = lockutils.internal_lock(self._lock_name)
        return lock

    # -- updates ----------------------------------------------------------------------------
    def update(
        self,
        compute: ComputeNodeRow | Mapping[str, Any] | None = None,
        service: dict[str, Any] | None = None,
        aggregates: list[Aggregate] | None = None,
        instances: dict[str, Any] | None = None,
    ) -> None:
        """Apply fresh data (nova's ``HostState.update``, under this host's lock).
        ``compute`` is a ``ComputeNodeRow`` or a mapping with its field names (the ones
        missing read as NULL)."""
        with self._lock:
            if compute is not None:
                if not isinstance(compute, ComputeNodeRow):
                    compute = ComputeNodeRow._make(map(compute.get, ComputeNodeRow._fields))
                self._update_from_row(compute)
            if service is not None:
                self.set_service(service)
            if aggregates is not None:
                self.set_aggregates(aggregates)
            if instances is not None:
                self.instances = instances

    def update_from_row(self, row: ComputeNodeRow) -> None:
        """Apply a compute-node report (under this host's lock)."""
        with self._lock:
            self._update_from_row(row)

    def _update_from_row(self, row: ComputeNodeRow) -> None:
        """``update_from_row`` without the lock: the caller holds it, or no other thread can
        see this HostState yet."""
        updated_at = row.updated_at or row.created_at
        # A report older than the one applied last says nothing new (a re-read window, a
        # late commit). Our consumption is not the gate any more: a newer report is always
        # taken, and only the consumptions made after it stay counted on top of it.
        known = self.compute_updated_at
        if known and updated_at and known > updated_at:
            return
        if self._pending and _within_its_second(updated_at, self._pending):
            # nova's DATETIME keeps whole seconds: a report stamped in the second one of our
            # consumptions was made may or may not count it. nova does not take a report older
            # than its last consumption; neither do we here, so the instance is counted once
            # (by us) until the compute's next report, and never twice.
            return
        self.compute_updated_at = updated_at
        free_gb = row.free_disk_gb
        if free_gb is None:
            # usage not reported yet: nova leaves such a node zeroed, with no uuid
            return
        self.uuid = row.uuid
        disk_available_least = row.disk_available_least
        if disk_available_least is not None:
            free_gb = min(disk_available_least, free_gb)
        self.free_disk_mb = free_gb * 1024
        self.total_usable_disk_gb = row.local_gb or 0
        self.disk_mb_used = (row.local_gb_used or 0) * 1024
        self.total_usable_ram_mb = row.memory_mb or 0
        self.free_ram_mb = row.free_ram_mb or 0
        self.vcpus_total = row.vcpus or 0
        self.vcpus_used = row.vcpus_used or 0
        self.updated = updated_at
        self.numa_topology = _shared_json(row.numa_topology, None)
        self.pci_stats = _shared_json(row.pci_stats, None)
        self.host_ip = row.host_ip
        self.hypervisor_type = _shared_text(row.hypervisor_type)
        self.hypervisor_version = row.hypervisor_version
        self.hypervisor_hostname = row.hypervisor_hostname
        self.cpu_info = _shared_text(row.cpu_info)
        self.supported_instances = _shared_json(row.supported_instances, []) or []
        stats = _stats_dict(row.stats)
        self.stats = stats
        self.metrics = _monitor_metrics(row.metrics)
        self.num_instances = _int(stats.get("num_instances"))
        self.num_io_ops = _int(stats.get("io_workload"))
        self.failed_builds = _int(stats.get("failed_builds"))
        # nova replaces a NULL or 0.0 ratio by the initial_*_allocation_ratio defaults
        self.cpu_allocation_ratio = row.cpu_allocation_ratio or 4.0
        self.ram_allocation_ratio = row.ram_allocation_ratio or 1.0
        self.disk_allocation_ratio = row.disk_allocation_ratio or 1.0
        pending = self._pending
        if pending:
            # the report is the new base; what it already counts (the consumptions made
            # before it was written) is released, the later ones are counted on top of it
            kept = {
                key: c
                for key, c in pending.items()
                if updated_at is not None and c.consumed_at > updated_at
            }
            self._base = None
            self._pending = None
            if kept:
                self._base = self._usage()
                self._consume_all(kept)
            _count_released(self, [k for k in pending if k not in kept], "report")
        if self._table is not None:
            self._mirror()

    def set_service(self, service: dict[str, Any]) -> None:
        """This host's compute service record (``{}`` when there is none). The table keeps
        one service per (cell, host): give every node of a host the same record, as the host
        manager does. One assignment: no lock needed."""
        self.service = service
        table = self._table_or_none()
        if table is not None:
            table.bind_service(self)

    def set_aggregates(self, aggregates: list[Aggregate]) -> None:
        """This host's aggregates (a list hosts in the same aggregates share; never
        modified). One assignment: no lock needed."""
        self.aggregates = aggregates
        table = self._table_or_none()
        if table is not None:
            table.bind_aggregates(self)

    @staticmethod
    def apply_heartbeat(
        service: dict[str, Any], row: ServiceRow, table: Any, cell_uuid: str | None
    ) -> None:
        """A service row that differs from the cached ``service`` record only in its
        heartbeat columns: written into the record in place (every node of the host shares
        it; one key at a time, a filter reading it meanwhile sees the old or the new value),
        and into ``table``'s service columns for that (cell, host)."""
        service["last_seen_up"] = row.last_seen_up
        service["updated_at"] = row.updated_at
        service["report_count"] = row.report_count
        if table is not None:
            table.service_changed(cell_uuid, row.host, service)

    @staticmethod
    def set_aggregates_of(
        hosts: Iterable[HostState],
        aggregates_for: Callable[[str], list[Aggregate]],
        table: Any,
    ) -> None:
        """Give every one of ``hosts`` (the whole of ``table``) its aggregates after they were
        read again, by host name; the table's aggregate codes start afresh."""
        hosts = list(hosts)
        for hs in hosts:
            hs.aggregates = aggregates_for(hs.host)
        if table is not None:
            table.rebind_aggregates(hosts)

    def consume_from_request(
        self,
        spec_obj: RequestSpec,
        instance_uuid: str | None = None,
        *,
        max_age: float | None = None,
        claimed: bool = False,
    ) -> str:
        """Account for an instance placed here by this scheduler (under this host's lock);
        returns the key the consumption is kept under (``instance_uuid``, or one of our own
        when none is given: only a newer report or ``max_age`` releases that one).
        ``max_age`` (seconds): consumptions older than that are released first.
        ``claimed``: its claim was made in Placement (and must stay held there)."""
        now = timeutils.utcnow()
        key = instance_uuid or f"anonymous-{next(_ANONYMOUS)}"
        entry = Consumption.of(
            spec_obj, now, is_instance=bool(instance_uuid), claimed=claimed and bool(instance_uuid)
        )
        with self._lock:
            pending = self._pending
            if pending and (key in pending or max_age is not None):
                oldest = now - datetime.timedelta(seconds=max_age) if max_age is not None else None
                expired = [
                    k for k, c in pending.items() if oldest is not None and c.consumed_at <= oldest
                ]
                # the same key consumed again (a move to the host it was counted on) is
                # counted once, as its latest request
                if expired or key in pending:
                    gone = set(expired)
                    gone.add(key)
                    self._restore({k: c for k, c in pending.items() if k not in gone})
                    _count_released(self, expired, "expired")
                    pending = self._pending
            if pending and len(pending) >= _MAX_PENDING:
                pending = self._fold_oldest(pending)
            if not pending:
                self._base = self._usage()
            self._consume(entry)
            self._pending = {**(pending or {}), key: entry}
            self.updated = now
            if self._table is not None:
                self._mirror()
        return key

    def detached_copy(self) -> HostState:
        """A private copy to count simulated instances on (explain's multi-create, capacity):
        what it consumes reaches neither this host nor the host manager's columns."""
        twin = copy.copy(self)
        twin._table = None
        twin._row = -1
        twin.instances = dict(self.instances or {})
        return twin

    def release_consumption(self, keys: Iterable[str] | None, reason: str) -> int:
        """Stop counting these consumptions (None: all of ours) on this host: its last
        report plus the remaining ones again (under this host's lock). ``reason`` is what
        the metrics and the log say (report, deleted, moved, synced, rollback, rebuild,
        placement, expired). Returns how many were released."""
        if not self._pending:  # the common case: nothing of ours here, no lock
            return 0
        if keys is None:
            return self._release(lambda key, c: True, reason)
        wanted = {keys} if isinstance(keys, str) else set(keys)
        return self._release(lambda key, c: key in wanted, reason)

    def finish_builds(self, keys: Iterable[str]) -> int:
        """The builds of these consumptions finished: they stay counted, no longer as an I/O
        operation (a replay's instances, which their computes reported built; under this
        host's lock). Returns how many changed."""
        wanted = {keys} if isinstance(keys, str) else set(keys)
        with self._lock:
            pending = self._pending
            if not pending:
                return 0
            built = {
                key: replace(c, building=False)
                for key, c in pending.items()
                if key in wanted and c.building
            }
            if not built:
                return 0
            self._restore({key: built.get(key, c) for key, c in pending.items()})
            if self._table is not None:
                self._mirror()
        return len(built)

    def expire_consumption(self, max_age: float, now: datetime.datetime | None = None) -> int:
        """Release the consumptions made ``max_age`` seconds or more before ``now``: their
        compute never reported them (``[scheduler] consumption_max_age``)."""
        if not self._pending:
            return 0
        oldest = (now or timeutils.utcnow()) - datetime.timedelta(seconds=max_age)
        return self._release(lambda key, c: c.consumed_at <= oldest, "expired")

    def release_unlisted(
        self, instance_uuids: Iterable[str], made_before: datetime.datetime
    ) -> int:
        """nova-compute listed its instances (``sync_instance_info``): release the instances
        consumed here before ``made_before`` that the list does not have. Newer ones may
        not have reached the compute yet; consumptions without an instance uuid are not
        nova's to list."""
        if not self._pending:
            return 0
        listed = set(instance_uuids)
        return self._release(
            lambda key, c: c.is_instance and key not in listed and c.consumed_at < made_before,
            "synced",
        )

    def counts_claim(self, key: str) -> bool:
        """Whether ``key`` is counted here now as an instance this scheduler claimed in
        Placement (which must hold that claim for the count to be right)."""
        pending = self._pending
        return bool(pending) and key in pending and pending[key].claimed

    def consumptions(self) -> dict[str, datetime.datetime]:
        """``{key: when consumed}`` of the consumptions counted on this host, oldest first
        (a copy; for the host manager's sweep, logs and tests)."""
        pending = self._pending
        return {key: c.consumed_at for key, c in pending.items()} if pending else {}

    def _release(self, select: Callable[[str, Consumption], bool], reason: str) -> int:
        with self._lock:
            pending = self._pending
            if not pending:
                return 0
            gone = [key for key, c in pending.items() if select(key, c)]
            if not gone:
                return 0
            self._restore({key: c for key, c in pending.items() if key not in gone})
            if self._table is not None:
                self._mirror()
        _count_released(self, gone, reason)
        return len(gone)

    # -- consumption (lock held) ---------------------------------------------------------------
    def _usage(self) -> _Usage:
        return _Usage._make(_USAGE_OF(self))

    def _restore(self, kept: dict[str, Consumption]) -> None:
        """The base again, then ``kept`` consumed on it in their order (the mirror is the
        caller's to write)."""
        base = self._base
        if base is None:
            self._pending = kept or None
            return
        for name, value in zip(_Usage._fields, base, strict=True):
            setattr(self, name, value)
        self._pending = None
        self._base = None
        if kept:
            self._base = base
            self._consume_all(kept)

    def _fold_oldest(self, pending: dict[str, Consumption]) -> dict[str, Consumption]:
        """Make the older half of ``pending`` part of the base: they stay counted until the
        next report, as all consumption did before, and cost nothing more. Only a caller
        that consumes without ever releasing (no ``max_age``, no host manager) gets here."""
        items = list(pending.items())
        folded, rest = dict(items[: len(items) // 2]), dict(items[len(items) // 2 :])
        self._restore(folded)
        self._base = self._usage()
        self._pending = None
        if rest:
            self._consume_all(rest)
        LOG.debug("Host %s: %d consumption(s) kept until its next report", self.host, len(folded))
        return rest

    def _consume_all(self, kept: dict[str, Consumption]) -> None:
        for entry in kept.values():
            self._consume(entry)
        self._pending = kept
        last = next(reversed(kept.values())).consumed_at
        if self.updated is None or last > self.updated:
            self.updated = last

    def _consume(self, entry: Consumption) -> None:
        """nova's ``consume_from_request`` of one instance on the current values."""
        try:
            flavor = entry.flavor
            self.free_ram_mb -= flavor.memory_mb
            self.free_disk_mb -= (flavor.root_gb + flavor.ephemeral_gb) * 1024
            self.vcpus_used += flavor.vcpus
            self.num_instances += 1
            if entry.building:
                self.num_io_ops += 1
            pci_cells = _PciCells(self, entry)
            before = self.numa_topology
            if before is not None:
                # a new topology object (the parse caches key on identity): refit, add usage
                self.numa_topology = numa.numa_topology_after_instance(
                    before,
                    entry,
                    self.cpu_allocation_ratio or 4.0,
                    self.ram_allocation_ratio or 1.0,
                    pci_check=pci_cells.check if entry.pci_requests else None,
                    pci_counts=pci_cells.counts(),
                )
                if self.numa_topology is before:  # nothing fitted: no NUMA cells for PCI
                    pci_cells.fitted = None
            if entry.pci_requests and self.pci_stats:
                self._consume_pci(entry, pci_cells)
        except Exception:  # nova logs and swallows: a bad spec must not poison the cache
            LOG.exception("Error consuming an instance on host %s", self.host)

    def _consume_pci(self, entry: Consumption, cells: _PciCells) -> None:
        """nova's ``apply_requests`` in ``consume_from_request``: the devices Placement
        allocated (the request's provider mapping), NUMA-local to the host cells the
        instance was just fitted to. As nova's, a request that cannot be applied leaves
        what the ones before it took (the compute's claim decides)."""
        applied = pci.apply_requests(
            cells.pools, entry.pci_requests, entry.provider_mapping, cells.fitted, cells.sockets
        )
        self.pci_stats = applied.pools
        if not applied.ok:
            LOG.warning(
                "Selected host %s failed to consume the instance's PCI devices (%s)",
                self.host,
                pci.request_reason(applied.failed),
            )

    # -- read helpers -----------------------------------------------------------------------
    @property
    def availability_zone(self) -> str | None:
        """The first availability_zone of the host's aggregates (None if none has one)."""
        for agg in self.aggregates:
            az = agg.metadata.get("availability_zone")
            if az:
                return az
        return None

    def __repr__(self) -> str:
        return (
            f"({self.host}, {self.nodename}) ram: {self.free_ram_mb}MB "
            f"disk: {self.free_disk_mb}MB io_ops: {self.num_io_ops} "
            f"instances: {self.num_instances}"
        )


def _within_its_second(
    updated_at: datetime.datetime | None, pending: dict[str, Consumption]
) -> bool:
    """Whether a report stamped ``updated_at`` in whole seconds (MySQL and MariaDB keep no
    fraction: it was written at most a second later) may have been written after one of the
    ``pending`` consumptions that its stamp says is newer."""
    if updated_at is None or updated_at.microsecond:
        return False
    end = updated_at + datetime.timedelta(seconds=1)
    return any(updated_at < c.consumed_at < end for c in pending.values())


def _count_released(hs: HostState, keys: list[str], reason: str) -> None:
    """Metrics and log lines of released consumptions."""
    if not keys:
        return
    metrics.M.consumption_released.labels(reason=reason).inc(len(keys))
    if reason == "expired":
        LOG.info(
            "Stopped counting %s on host %s (%s): its compute did not report it within "
            "[scheduler] consumption_max_age",
            ", ".join(keys),
            hs.host,
            hs.nodename,
        )
    elif LOG.isEnabledFor(logging.DEBUG):
        LOG.debug(
            "Stopped counting %s on host %s (%s): %s", ", ".join(keys), hs.host, hs.nodename, reason
        )


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
