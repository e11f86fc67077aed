"""HostState: what the scheduler knows about one compute node, as nova's HostState holds it.

Filters and weighers read these attributes by nova's names; a filter written for nova reads
the same values here. Updates from the cell database and consumption by a scheduling
decision are serialized per (host, node) with oslo.concurrency's lockutils, as nova's are.
"""

from __future__ import annotations

import datetime
import json
import logging
from typing import Any

from oslo_concurrency import lockutils

from scheduler import numa, pci
from scheduler.objects import Aggregate, RequestSpec

LOG = logging.getLogger(__name__)


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


class HostState:
    """Mutable information about one compute node (host, nodename)."""

    __slots__ = (
        "host",
        "nodename",
        "uuid",
        "cell_uuid",
        "_lock_name",
        "_lock",
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
        "__weakref__",
    )

    def __init__(self, host: str, nodename: str, cell_uuid: str | None = None):
        self.host = host
        self.nodename = nodename
        self.uuid: str | None = None
        self.cell_uuid = cell_uuid
        self._lock_name = f"{host}-{nodename}"
        # lockutils' named semaphore for (host, node), held for the HostState's life: the
        # same lock any ``lockutils.lock(name)`` in this process gets, without lockutils
        # building a new semaphore on every acquisition (~25 us each, at 10k hosts).
        self._lock = lockutils.internal_lock(self._lock_name)
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

    def _update_from_compute_node(self, compute: dict[str, Any]) -> None:
        updated_at = compute.get("updated_at") or compute.get("created_at")
        # Keep our own consumption until the compute node reports something newer, as nova
        # does: between the claim and the compute's next report our view is the fresher one.
        if self.updated and updated_at and self.updated > updated_at:
            return
        self.compute_updated_at = updated_at
        if compute.get("free_disk_gb") is None:
            # usage not reported yet: nova leaves such a node zeroed, with no uuid
            return
        self.uuid = compute.get("uuid")
        all_ram_mb = compute.get("memory_mb") or 0
        free_gb = compute["free_disk_gb"]
        least_gb = compute.get("disk_available_least")
        if least_gb is not None:
            free_gb = min(least_gb, free_gb)
        self.free_disk_mb = free_gb * 1024
        self.total_usable_disk_gb = compute.get("local_gb") or 0
        self.disk_mb_used = (compute.get("local_gb_used") or 0) * 1024
        self.total_usable_ram_mb = all_ram_mb
        self.free_ram_mb = compute.get("free_ram_mb") or 0
        self.vcpus_total = compute.get("vcpus") or 0
        self.vcpus_used = compute.get("vcpus_used") or 0
        self.updated = updated_at
        self.numa_topology = _json_or(compute.get("numa_topology"), None)
        self.pci_stats = _json_or(compute.get("pci_stats"), None)
        self.host_ip = compute.get("host_ip")
        self.hypervisor_type = compute.get("hypervisor_type")
        self.hypervisor_version = compute.get("hypervisor_version")
        self.hypervisor_hostname = compute.get("hypervisor_hostname")
        self.cpu_info = compute.get("cpu_info")
        self.supported_instances = _json_or(compute.get("supported_instances"), []) or []
        stats = _json_or(compute.get("stats"), {}) or {}
        self.stats = stats
        self.metrics = _json_or(compute.get("metrics"), []) or []
        self.num_instances = _int(stats.get("num_instances"))
        self.num_io_ops = _int(stats.get("io_workload"))
        self.failed_builds = _int(stats.get("failed_builds"))
        # nova replaces a NULL or 0.0 ratio by the initial_*_allocation_ratio defaults
        self.cpu_allocation_ratio = compute.get("cpu_allocation_ratio") or 4.0
        self.ram_allocation_ratio = compute.get("ram_allocation_ratio") or 1.0
        self.disk_allocation_ratio = compute.get("disk_allocation_ratio") or 1.0

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
