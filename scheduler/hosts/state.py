"""HostState: what the scheduler knows about one compute node, as nova's HostState holds it.

Filters and weighers read these attributes by nova's names; a filter written for nova reads
the same values here. Updates from the cell database and consumption by a scheduling
decision are serialized per HostState (one per (host, node)), as nova's are.

At cloud scale (100k hosts) most of a HostState's memory would be JSON decoded per host that
many hosts share (cpu_info, supported_instances, metrics, the keys and small values of
stats): decoded values are memoised by their text, so identical reports share one object.
``metrics`` are read as nova's object layer reads them (``_monitor_metrics``).
Shared values are read-only; consumption replaces them (numa_topology, pci_stats).
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
import threading
from typing import Any

from oslo_concurrency import lockutils

from db.queries import COMPUTE_NODE_COLUMNS
from scheduler.objects import Aggregate, RequestSpec
from scheduler.resources import numa, pci

LOG = logging.getLogger(__name__)
# serializes the first use of each HostState's lock (see HostState._lock)
_LOCK_CREATION = threading.Lock()


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(tzinfo=None)


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


class HostState:
    """Mutable information about one compute node (host, nodename)."""

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
        self.limits: dict[str, Any] = {}
        self.updated: datetime.datetime | None = None
        self.compute_updated_at: datetime.datetime | None = None
        self.allocation_candidates: list[dict[str, Any]] = []
        # the HostTable mirroring this host (a weak reference) and the host's row in it;
        # None / -1 outside any table (see scheduler/hosts/table.py)
        self._table: Any = None
        self._row = -1

    def _mirror(self) -> None:
        """Copy the values the table mirrors into this host's row (after they changed)."""
        ref = self._table
        table = ref() if ref is not None else None
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
        compute: dict[str, Any] | None = None,
        service: dict[str, Any] | None = None,
        aggregates: list[Aggregate] | None = None,
        instances: dict[str, Any] | None = None,
    ) -> None:
        """Apply fresh data from the cell database (under this host's lock)."""
        with self._lock:
            if compute is not None:
                self._update_from_compute_node(compute)
            if service is not None:
                self.service = service
            if aggregates is not None:
                self.aggregates = aggregates
            if instances is not None:
                self.instances = instances
            ref = self._table
            table = ref() if ref is not None else None
            if table is not None:
                if service is not None:
                    table.bind_service(self)
                if aggregates is not None:
                    table.bind_aggregates(self)

    def _update_from_compute_node(self, compute: dict[str, Any]) -> None:
        self._update_from_row(tuple(compute.get(name) for name in COMPUTE_NODE_COLUMNS))

    def update_from_row(self, row: tuple[Any, ...]) -> None:
        """Apply a compute-node row given as a tuple of ``db.queries.COMPUTE_NODE_COLUMNS``
        (under this host's lock)."""
        with self._lock:
            self._update_from_row(row)

    def _update_from_row(self, row: tuple[Any, ...]) -> None:
        (
            uuid,
            _host,
            hypervisor_hostname,
            memory_mb,
            free_ram_mb,
            free_disk_gb,
            disk_available_least,
            local_gb,
            local_gb_used,
            vcpus,
            vcpus_used,
            numa_topology,
            pci_stats,
            host_ip,
            hypervisor_type,
            hypervisor_version,
            cpu_info,
            supported_instances,
            stats_text,
            metrics,
            cpu_allocation_ratio,
            ram_allocation_ratio,
            disk_allocation_ratio,
            updated_at,
            created_at,
            _deleted,
        ) = row
        updated_at = updated_at or created_at
        # Keep our own consumption until the compute node reports something newer, as nova
        # does: between the claim and the compute's next report our view is the fresher one.
        if self.updated and updated_at and self.updated > updated_at:
            return
        self.compute_updated_at = updated_at
        if free_disk_gb is None:
            # usage not reported yet: nova leaves such a node zeroed, with no uuid
            return
        self.uuid = uuid
        free_gb = free_disk_gb
        if disk_available_least is not None:
            free_gb = min(disk_available_least, free_gb)
        self.free_disk_mb = free_gb * 1024
        self.total_usable_disk_gb = local_gb or 0
        self.disk_mb_used = (local_gb_used or 0) * 1024
        self.total_usable_ram_mb = memory_mb or 0
        self.free_ram_mb = free_ram_mb or 0
        self.vcpus_total = vcpus or 0
        self.vcpus_used = vcpus_used or 0
        self.updated = updated_at
        self.numa_topology = _shared_json(numa_topology, None)
        self.pci_stats = _shared_json(pci_stats, None)
        self.host_ip = host_ip
        self.hypervisor_type = _shared_text(hypervisor_type)
        self.hypervisor_version = hypervisor_version
        self.hypervisor_hostname = hypervisor_hostname
        self.cpu_info = _shared_text(cpu_info)
        self.supported_instances = _shared_json(supported_instances, []) or []
        stats = _stats_dict(stats_text)
        self.stats = stats
        self.metrics = _monitor_metrics(metrics)
        self.num_instances = _int(stats.get("num_instances"))
        self.num_io_ops = _int(stats.get("io_workload"))
        self.failed_builds = _int(stats.get("failed_builds"))
        # nova replaces a NULL or 0.0 ratio by the initial_*_allocation_ratio defaults
        self.cpu_allocation_ratio = cpu_allocation_ratio or 4.0
        self.ram_allocation_ratio = ram_allocation_ratio or 1.0
        self.disk_allocation_ratio = disk_allocation_ratio or 1.0
        if self._table is not None:
            self._mirror()

    def consume_from_request(self, spec_obj: RequestSpec) -> None:
        """Account for an instance placed here by this scheduler (under this host's lock)."""
        with self._lock:
            try:
                flavor = spec_obj.flavor
                self.free_ram_mb -= flavor.memory_mb
                self.free_disk_mb -= (flavor.root_gb + flavor.ephemeral_gb) * 1024
                self.vcpus_used += flavor.vcpus
                self.num_instances += 1
                self.num_io_ops += 1
                if self.numa_topology is not None:
                    # a new topology object (the parse caches key on identity): refit, add usage
                    self.numa_topology = numa.numa_topology_after_instance(
                        self.numa_topology,
                        spec_obj,
                        self.cpu_allocation_ratio or 4.0,
                        self.ram_allocation_ratio or 1.0,
                    )
                if spec_obj.pci_requests and self.pci_stats:
                    pools = pci.apply_requests(
                        pci.pools_from_stats(self.pci_stats), spec_obj.pci_requests
                    )
                    if pools is not None:
                        self.pci_stats = pools
                self.updated = _utcnow()
            except Exception:  # nova logs and swallows: a bad spec must not poison the cache
                LOG.exception("Error consuming %s on host %s", spec_obj.instance_uuid, self.host)
            if self._table is not None:
                self._mirror()

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


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
