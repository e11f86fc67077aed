"""A synthetic fleet of compute hosts, written where nova keeps them.

``build_fleet(spec)`` is pure and deterministic for a seed: it returns the cell-database
rows (services, compute nodes, instances), the API-database rows (aggregates with AZ and
weight-multiplier metadata, host mappings, server groups) and the Placement side (providers
with inventories, traits and aggregates; allocations of the existing instances) of a fleet
that looks like what nova's computes report.

This is the one place a fleet's shape is drawn: ``novasched-manage fleet load``, the demo,
the tests and the benchmarks describe the fleet they want as a ``FleetSpec`` and write what
``build_fleet`` returns. The writers differ: ``load_fleet`` here goes through SQLAlchemy and
Placement's API; the benchmarks write the same rows with SQLite bulk inserts
(``benchmarks/fleet.py``) and Placement's rows by SQL (``benchmarks/placement_seed.py``).
"""

from __future__ import annotations

import datetime
import json
import logging
import random
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import sqlalchemy as sa
from oslo_utils import timeutils
from sqlalchemy.engine import Engine

import db
from db import models

LOG = logging.getLogger(__name__)

# nova 34's SERVICE_VERSION: owner_nova_filter needs every compute at 73 or newer
NOVA_SERVICE_VERSION = 74
# nova's [DEFAULT] reserved_host_memory_mb
RESERVED_HOST_MEMORY_MB = 512
CUSTOM_TRAITS = ["CUSTOM_SSD"]

_VCPUS = [16, 24, 32, 48, 64, 96]
_DISK_GB = [1000, 2000, 4000, 8000]
_HV_VERSIONS = [6002000, 7002000, 8002002]
# (vcpus, memory_mb, root_gb, name): the flavors the existing instances were booted with
_FLAVORS = [
    (1, 512, 1, "m1.tiny"),
    (2, 2048, 20, "m1.small"),
    (4, 8192, 40, "m1.medium"),
    (8, 16384, 80, "m1.large"),
]
# the flavor of a server group's member instances
_GROUP_FLAVOR = _FLAVORS[1]
_X86_FEATURES = ["avx", "avx2", "sse4.2", "aes", "vmx", "pdpe1gb"]
_X86_TRAITS = [
    "HW_ARCH_X86_64",
    "HW_CPU_X86_AVX",
    "HW_CPU_X86_AVX2",
    "HW_CPU_X86_SSE42",
    "HW_CPU_X86_AESNI",
    "HW_CPU_X86_VMX",
]
_ARM_FEATURES = ["fp", "asimd", "aes", "sha2", "crc32"]
_ARM_TRAITS = ["HW_ARCH_AARCH64", "HW_CPU_AARCH64_ASIMD", "HW_CPU_AARCH64_FP"]
_COMMON_TRAITS = [
    "COMPUTE_NODE",
    "COMPUTE_IMAGE_TYPE_QCOW2",
    "COMPUTE_IMAGE_TYPE_RAW",
    "COMPUTE_NET_VIF_MODEL_VIRTIO",
    "COMPUTE_VOLUME_MULTI_ATTACH",
    "OWNER_NOVA",
]


# ``progress(stage, done, total)``: ``done`` of ``total`` items of ``stage`` are written (a
# command line draws a bar from it; see scheduler/cmd/progress.py)
ProgressCallback = Callable[[str, int, int], None]

# the stages load_fleet reports, in order
STAGE_CELLS = "hosts into cell databases"
STAGE_PROVIDERS = "Placement providers"
STAGE_ALLOCATIONS = "Placement allocations"

# providers created per create_providers_bulk call when progress is reported
_PROVIDER_CHUNK_PER_WORKER = 8


class PlacementWriter(Protocol):
    """The part of ``placement_client.PlacementClient`` that loading a fleet uses."""

    def ensure_traits(self, names: list[str]) -> Any: ...

    def create_providers_bulk(self, specs: list[dict[str, Any]], workers: int = 8) -> Any: ...


@dataclass(slots=True)
class FleetSpec:
    """What fleet to make. ``cells`` are the keys (cell uuids) hosts are spread over."""

    hosts: int = 10
    cells: list[str] = field(default_factory=lambda: ["cell1"])
    seed: int = 0
    disabled_fraction: float = 0.05
    down_fraction: float = 0.05
    azs: list[str] = field(default_factory=lambda: ["az1", "az2", "az3"])
    aarch64_fraction: float = 0.1
    ssd_fraction: float = 0.3
    # hosts in the aggregate carrying multiplier_metadata (weigher overrides)
    multiplier_fraction: float = 0.2
    multiplier_aggregate: str = "stacking"
    multiplier_metadata: dict[str, str] = field(
        default_factory=lambda: {"ram_weight_multiplier": "-1.0"}
    )
    # more weigher-override aggregates: (name, fraction of the hosts, metadata)
    more_multiplier_aggregates: tuple[tuple[str, float, dict[str, str]], ...] = ()
    max_instances_per_host: int = 4
    # hosts whose compute node reports a NUMA topology: two cells, each with half the CPUs
    # and half the memory (drawn apart from the rest: 0 changes no other draw)
    numa_fraction: float = 0.0
    # share of the existing instances still building (vm_state building, task spawning)
    building_fraction: float = 0.15
    # per host, each capacity and allocation ratio is drawn from these (one value: no draw)
    ram_gib: tuple[int, ...] = (64, 96, 128, 192, 256, 384, 512)
    cpu_ratios: tuple[float, ...] = (4.0, 4.0, 4.0, 16.0, 16.0, 1.0)
    ram_ratios: tuple[float, ...] = (1.0,)
    disk_ratios: tuple[float, ...] = (1.0,)
    # hosts whose stats say gpu=a100, the others gpu=none (at 0 the key is left out)
    gpu_fraction: float = 0.0
    # hosts whose compute node reports more use than their instances (60-95 % of the RAM,
    # 50-90 % of the vCPUs), so that the weighers have something to sort; Placement's
    # allocations stay those of the instances
    nearly_full_fraction: float = 0.0
    # hosts with one failed build in their stats (BuildFailureWeigher)
    failed_build_fraction: float = 0.0
    # server groups, alternately anti-affinity and affinity: one per 20 hosts and at most
    # this many, each with a member instance on 2-8 hosts
    max_server_groups: int = 0
    # a live cell: the up services' last heartbeats are spread over this many seconds
    # before ``now`` (0: all at ``now``)
    heartbeat_spread: float = 0.0
    # the fleet has been quiet this long before ``now``: the compute nodes' reports, the
    # instances and the down services' rows were last written then (heartbeats are newer)
    quiet_for: datetime.timedelta = datetime.timedelta(0)
    host_prefix: str = "compute"
    project_id: str = "6f70656e-7374-6163-6b00-70726f6a6563"
    user_id: str = "75736572-0000-4000-8000-000000000001"
    # the clock of the fleet; None means "now" when build_fleet runs
    now: datetime.datetime | None = None

    def validate(self) -> None:
        """Raise ValueError on a spec that cannot make a fleet."""
        if self.hosts < 1:
            raise ValueError(f"hosts must be at least 1, not {self.hosts}")
        if not self.cells:
            raise ValueError("at least one cell is needed")
        for name in (
            "disabled_fraction",
            "down_fraction",
            "aarch64_fraction",
            "ssd_fraction",
            "multiplier_fraction",
            "building_fraction",
            "gpu_fraction",
            "nearly_full_fraction",
            "failed_build_fraction",
            "numa_fraction",
        ):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1, not {value}")
        for name, fraction, _ in self.more_multiplier_aggregates:
            if not 0.0 <= fraction <= 1.0:
                raise ValueError(f"aggregate {name}: fraction must be between 0 and 1")
        for name in ("ram_gib", "cpu_ratios", "ram_ratios", "disk_ratios"):
            values = getattr(self, name)
            if not values or min(values) <= 0:
                raise ValueError(f"{name} must hold positive values, not {values!r}")
        for name in ("max_instances_per_host", "max_server_groups", "heartbeat_spread"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        if self.quiet_for < datetime.timedelta(0):
            raise ValueError("quiet_for must not be negative")
        if not self.host_prefix:
            raise ValueError("host_prefix must not be empty")


@dataclass(slots=True)
class FleetAggregate:
    """A host aggregate of the fleet (nova's, mirrored as a Placement aggregate)."""

    uuid: str
    name: str
    hosts: list[str]
    metadata: dict[str, str]


@dataclass(slots=True)
class FleetServerGroup:
    """A server group of the fleet: ``members`` are its instances, one on each of ``hosts``."""

    uuid: str
    policy: str
    members: list[str]
    hosts: list[str]


@dataclass(slots=True)
class Fleet:
    """Everything ``load_fleet`` writes. Row dicts use nova's column names."""

    spec: FleetSpec
    host_cells: dict[str, str]  # host -> cell key
    services: dict[str, list[dict[str, Any]]]  # cell key -> rows
    compute_nodes: dict[str, list[dict[str, Any]]]
    instances: dict[str, list[dict[str, Any]]]
    aggregates: list[FleetAggregate]
    providers: list[dict[str, Any]]  # uuid, name, inventories, traits, aggregates
    allocations: list[dict[str, Any]]  # consumer_uuid, rp_uuid, resources, project/user
    disabled_hosts: set[str]
    down_hosts: set[str]
    aarch64_hosts: set[str] = field(default_factory=set)
    numa_hosts: set[str] = field(default_factory=set)
    server_groups: list[FleetServerGroup] = field(default_factory=list)

    @property
    def hosts(self) -> list[str]:
        """Host names in creation order."""
        return list(self.host_cells)


# what uuid.UUID(version=4) clears and sets in 128 random bits: the variant and the version
_UUID4_CLEAR = ~((0xC000 << 48) | (0xF000 << 64)) & ((1 << 128) - 1)
_UUID4_SET = (0x8000 << 48) | (4 << 76)


def _uuid(rng: random.Random) -> str:
    # str(uuid.UUID(int=rng.getrandbits(128), version=4)) without UUID's checks: a fleet of
    # 100,000 hosts draws about 500,000 of them
    digits = f"{rng.getrandbits(128) & _UUID4_CLEAR | _UUID4_SET:032x}"
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


def _pick(rng: random.Random, options: tuple[Any, ...] | list[Any]) -> Any:
    # a single option draws nothing: a value that became a choice keeps the fleets of the
    # specs written before it (their seeds draw the same numbers in the same order)
    return options[0] if len(options) == 1 else rng.choice(options)


def _sample(rng: random.Random, hosts: list[str], fraction: float) -> list[str]:
    return rng.sample(hosts, round(len(hosts) * fraction))


def _aggregates(
    rng: random.Random,
    spec: FleetSpec,
    hosts: list[str],
    weighted: list[tuple[str, list[str], dict[str, str]]],
) -> tuple[list[FleetAggregate], dict[str, str]]:
    """The AZ aggregates (hosts dealt round-robin) and the weigher-override ones, and each
    host's AZ."""
    aggregates: list[FleetAggregate] = []
    host_az: dict[str, str] = {}
    if spec.azs:
        by_az: dict[str, list[str]] = {az: [] for az in spec.azs}
        for i, h in enumerate(hosts):
            az = spec.azs[i % len(spec.azs)]
            host_az[h] = az
            by_az[az].append(h)
        for az, members in by_az.items():
            aggregates.append(FleetAggregate(_uuid(rng), az, members, {"availability_zone": az}))
    for name, members, metadata in weighted:
        if members and metadata:
            aggregates.append(FleetAggregate(_uuid(rng), name, members, dict(metadata)))
    return aggregates, host_az


def _server_groups(rng: random.Random, spec: FleetSpec, hosts: list[str]) -> list[FleetServerGroup]:
    if not spec.max_server_groups:
        return []
    groups = []
    for g in range(max(1, min(spec.max_server_groups, len(hosts) // 20))):
        members = rng.sample(hosts, min(len(hosts), rng.randint(2, 8)))
        policy = "anti-affinity" if g % 2 == 0 else "affinity"
        group = FleetServerGroup(_uuid(rng), policy, [], list(members))
        group.members.extend(_uuid(rng) for _ in members)
        groups.append(group)
    return groups


_CPU_INFO: dict[tuple[str, int], str] = {}


def _cpu_info(arch: str, vcpus: int) -> str:
    """What the compute reports in ``cpu_info`` (the same text for the same arch and size)."""
    text = _CPU_INFO.get((arch, vcpus))
    if text is None:
        sockets = 2 if vcpus >= 32 else 1
        text = _CPU_INFO[(arch, vcpus)] = json.dumps(
            {
                "arch": arch,
                "model": "Cascadelake-Server" if arch == "x86_64" else "Neoverse-N1",
                "vendor": "Intel" if arch == "x86_64" else "ARM",
                "topology": {
                    "cells": sockets,
                    "sockets": sockets,
                    "cores": max(1, vcpus // (2 * sockets)),
                    "threads": 2,
                },
                "features": list(_X86_FEATURES if arch == "x86_64" else _ARM_FEATURES),
                "maxphysaddr": {"mode": "passthrough", "bits": 46 if arch == "x86_64" else 48},
            }
        )
    return text


def _instance(
    spec: FleetSpec,
    inst_uuid: str,
    host: str,
    flavor: tuple[int, int, int, str],
    busy: bool,
    created: datetime.datetime,
    written: datetime.datetime,
    az: str | None,
    arch: str,
) -> dict[str, Any]:
    """A live instance's row on ``host``, booted with ``flavor`` a day after the host came."""
    f_vcpus, f_ram, f_disk, _ = flavor
    return {
        "uuid": inst_uuid,
        "user_id": spec.user_id,
        "project_id": spec.project_id,
        "image_ref": "155d900f-4e14-4e4c-a73d-069cbf4541e6",
        "power_state": 1,
        "vm_state": "building" if busy else "active",
        "task_state": "spawning" if busy else None,
        "memory_mb": f_ram,
        "vcpus": f_vcpus,
        "root_gb": f_disk,
        "ephemeral_gb": 0,
        "hostname": f"vm-{inst_uuid[:8]}",
        "display_name": f"vm-{inst_uuid[:8]}",
        "host": host,
        "node": host,
        "instance_type_id": _FLAVORS.index(flavor) + 1,
        "launched_at": created + datetime.timedelta(days=1),
        "availability_zone": az,
        "os_type": "linux",
        "architecture": arch,
        "vm_mode": "hvm",
        "created_at": created + datetime.timedelta(days=1),
        "updated_at": written,
        "deleted_at": None,
        "deleted": 0,
    }


def _allocation(
    spec: FleetSpec, inst_uuid: str, rp_uuid: str, flavor: tuple[int, int, int, str]
) -> dict[str, Any]:
    f_vcpus, f_ram, f_disk, _ = flavor
    return {
        "consumer_uuid": inst_uuid,
        "rp_uuid": rp_uuid,
        "resources": {"VCPU": f_vcpus, "MEMORY_MB": f_ram, "DISK_GB": f_disk},
        "project_id": spec.project_id,
        "user_id": spec.user_id,
    }


def build_fleet(spec: FleetSpec) -> Fleet:
    """Make the fleet ``spec`` describes; the same spec (seed and now) gives the same fleet.

    Every random choice comes from one generator seeded with ``spec.seed``, in a fixed
    order; a choice a spec leaves at its default (a fraction of 0, a single value) draws
    nothing, so adding one keeps every fleet made before it."""
    spec.validate()
    rng = random.Random(spec.seed)
    now = spec.now or timeutils.utcnow()
    written = now - spec.quiet_for
    width = max(4, len(str(spec.hosts)))
    hosts = [f"{spec.host_prefix}-{i:0{width}d}" for i in range(1, spec.hosts + 1)]
    host_cells = {h: spec.cells[i % len(spec.cells)] for i, h in enumerate(hosts)}

    disabled = set(_sample(rng, hosts, spec.disabled_fraction))
    down = set(_sample(rng, hosts, spec.down_fraction))
    aarch64 = set(_sample(rng, hosts, spec.aarch64_fraction))
    ssd = set(_sample(rng, hosts, spec.ssd_fraction))
    weighted = [
        (
            spec.multiplier_aggregate,
            sorted(_sample(rng, hosts, spec.multiplier_fraction)),
            spec.multiplier_metadata,
        )
    ]
    gpu = set(_sample(rng, hosts, spec.gpu_fraction))
    weighted.extend(
        (name, sorted(_sample(rng, hosts, fraction)), metadata)
        for name, fraction, metadata in spec.more_multiplier_aggregates
    )
    aggregates, host_az = _aggregates(rng, spec, hosts, weighted)
    aggs_of: dict[str, list[str]] = {h: [] for h in hosts}
    for agg in aggregates:
        for h in agg.hosts:
            aggs_of[h].append(agg.uuid)
    groups = _server_groups(rng, spec, hosts)
    numa = set(_sample(random.Random(f"{spec.seed}-numa"), hosts, spec.numa_fraction))
    # host -> the group members' instances on it
    grouped: dict[str, list[str]] = {}
    for group in groups:
        for h, inst_uuid in zip(group.hosts, group.members, strict=True):
            grouped.setdefault(h, []).append(inst_uuid)

    services: dict[str, list[dict[str, Any]]] = {c: [] for c in spec.cells}
    nodes: dict[str, list[dict[str, Any]]] = {c: [] for c in spec.cells}
    instances: dict[str, list[dict[str, Any]]] = {c: [] for c in spec.cells}
    providers: list[dict[str, Any]] = []
    allocations: list[dict[str, Any]] = []

    for index, host in enumerate(hosts):
        cell = host_cells[host]
        cn_uuid = _uuid(rng)
        vcpus = rng.choice(_VCPUS)
        cpu_ratio = _pick(rng, spec.cpu_ratios)
        memory_mb = _pick(rng, spec.ram_gib) * 1024
        ram_ratio = _pick(rng, spec.ram_ratios)
        local_gb = rng.choice(_DISK_GB)
        disk_ratio = _pick(rng, spec.disk_ratios)
        arch = "aarch64" if host in aarch64 else "x86_64"
        created = now - datetime.timedelta(days=rng.randint(30, 900))
        az = host_az.get(host)

        host_instances = []
        used_vcpus = used_ram = used_disk = 0
        for inst_uuid in grouped.get(host, ()):
            used_vcpus += _GROUP_FLAVOR[0]
            used_ram += _GROUP_FLAVOR[1]
            used_disk += _GROUP_FLAVOR[2]
            host_instances.append(
                _instance(spec, inst_uuid, host, _GROUP_FLAVOR, False, created, written, az, arch)
            )
            allocations.append(_allocation(spec, inst_uuid, cn_uuid, _GROUP_FLAVOR))
        n_inst = rng.randint(0, spec.max_instances_per_host)
        for _ in range(n_inst):
            flavor = rng.choice(_FLAVORS)
            f_vcpus, f_ram, f_disk, _name = flavor
            if (
                used_vcpus + f_vcpus > vcpus * cpu_ratio
                or used_disk + f_disk > local_gb * disk_ratio
                or used_ram + f_ram > (memory_mb - RESERVED_HOST_MEMORY_MB) * ram_ratio
            ):
                break
            used_vcpus += f_vcpus
            used_ram += f_ram
            used_disk += f_disk
            inst_uuid = _uuid(rng)
            busy = rng.random() < spec.building_fraction
            host_instances.append(
                _instance(spec, inst_uuid, host, flavor, busy, created, written, az, arch)
            )
            allocations.append(_allocation(spec, inst_uuid, cn_uuid, flavor))
        # an instance deleted long ago: a soft-deleted row readers must not see
        if rng.random() < 0.1:
            gone = _uuid(rng)
            host_instances.append(
                {
                    "uuid": gone,
                    "user_id": spec.user_id,
                    "project_id": spec.project_id,
                    "vm_state": "deleted",
                    "task_state": None,
                    "memory_mb": 512,
                    "vcpus": 1,
                    "root_gb": 1,
                    "ephemeral_gb": 0,
                    "host": host,
                    "node": host,
                    "hostname": f"vm-{gone[:8]}",
                    "display_name": f"vm-{gone[:8]}",
                    "availability_zone": az,
                    "created_at": created,
                    "updated_at": now - datetime.timedelta(days=2),
                    "deleted_at": now - datetime.timedelta(days=2),
                    "deleted": 0,
                }
            )
        instances[cell].extend(host_instances)
        live = [i for i in host_instances if i["deleted_at"] is None]
        io_workload = sum(1 for i in live if i["task_state"] is not None)
        if spec.nearly_full_fraction and rng.random() < spec.nearly_full_fraction:
            used_ram = max(used_ram, int(memory_mb * rng.uniform(0.6, 0.95)))
            used_vcpus = max(used_vcpus, int(vcpus * cpu_ratio * rng.uniform(0.5, 0.9)))

        failed = spec.failed_build_fraction and rng.random() < spec.failed_build_fraction
        stats = {
            "num_instances": str(len(live)),
            "num_vm_active": str(sum(1 for i in live if i["vm_state"] == "active")),
            "num_vm_building": str(sum(1 for i in live if i["vm_state"] == "building")),
            "num_task_None": str(sum(1 for i in live if i["task_state"] is None)),
            "num_task_spawning": str(io_workload),
            "num_os_type_linux": str(len(live)),
            f"num_proj_{spec.project_id}": str(len(live)),
            "io_workload": str(io_workload),
            "failed_builds": "1" if failed else "0",
            # capability-ish keys ComputeCapabilitiesFilter can match (capabilities:storage)
            "storage": "ssd" if host in ssd else "hdd",
        }
        if spec.gpu_fraction:
            stats["gpu"] = "a100" if host in gpu else "none"
        stats["rack"] = f"r{index // 40:02d}"
        memory_mb_used = RESERVED_HOST_MEMORY_MB + used_ram
        nodes[cell].append(
            {
                "uuid": cn_uuid,
                "service_id": None,  # filled in by load_fleet from the inserted service
                "host": host,
                "hypervisor_hostname": host,
                "vcpus": vcpus,
                "memory_mb": memory_mb,
                "local_gb": local_gb,
                "vcpus_used": used_vcpus,
                "memory_mb_used": memory_mb_used,
                "local_gb_used": used_disk,
                "hypervisor_type": "QEMU",
                "hypervisor_version": rng.choice(_HV_VERSIONS),
                "free_ram_mb": memory_mb - memory_mb_used,
                "free_disk_gb": local_gb - used_disk,
                "current_workload": io_workload,
                "running_vms": len(live),
                "cpu_info": _cpu_info(arch, vcpus),
                "disk_available_least": local_gb - used_disk,
                "host_ip": f"10.{index // 65536 % 256}.{index // 256 % 256}.{index % 256}",
                "supported_instances": json.dumps([[arch, "kvm", "hvm"]]),
                "metrics": "[]",
                "pci_stats": None,
                "extra_resources": None,
                "stats": json.dumps(stats),
                "numa_topology": (
                    json.dumps(numa_topology(vcpus, memory_mb)) if host in numa else None
                ),
                "ram_allocation_ratio": ram_ratio,
                "cpu_allocation_ratio": cpu_ratio,
                "disk_allocation_ratio": disk_ratio,
                "mapped": 1,
                "created_at": created,
                "updated_at": written,
                "deleted_at": None,
                "deleted": 0,
            }
        )
        services[cell].append(
            _service(rng, spec, host, host in disabled, host in down, created, now, written)
        )
        traits = list(_COMMON_TRAITS) + list(_X86_TRAITS if arch == "x86_64" else _ARM_TRAITS)
        if host in ssd:
            traits.append("CUSTOM_SSD")
        if host in disabled:
            # what nova's compute sets on its root provider when the service is disabled
            traits.append("COMPUTE_STATUS_DISABLED")
        providers.append(
            {
                "uuid": cn_uuid,
                "name": host,
                "inventories": {
                    "VCPU": _inventory(vcpus, 0, cpu_ratio),
                    "MEMORY_MB": _inventory(memory_mb, RESERVED_HOST_MEMORY_MB, ram_ratio),
                    "DISK_GB": _inventory(local_gb, 0, disk_ratio),
                },
                "traits": sorted(traits),
                "aggregates": list(aggs_of[host]),
            }
        )

    return Fleet(
        spec=spec,
        host_cells=host_cells,
        services=services,
        compute_nodes=nodes,
        instances=instances,
        aggregates=aggregates,
        providers=providers,
        allocations=allocations,
        disabled_hosts=disabled,
        down_hosts=down,
        aarch64_hosts=aarch64,
        numa_hosts=numa,
        server_groups=groups,
    )


def _service(
    rng: random.Random,
    spec: FleetSpec,
    host: str,
    disabled: bool,
    down: bool,
    created: datetime.datetime,
    now: datetime.datetime,
    written: datetime.datetime,
) -> dict[str, Any]:
    """The host's nova-compute row: a down service never reported and beat hours ago; an
    up one beat at ``now`` (or within ``heartbeat_spread`` of it), which wrote its row."""
    service_uuid = _uuid(rng)
    # a service that never reported: down, and left alone by "fleet heartbeat"
    report_count = 0 if down else rng.randint(1000, 100000)
    if down:
        last_seen = now - datetime.timedelta(hours=rng.randint(2, 72))
    elif spec.heartbeat_spread:
        last_seen = now - datetime.timedelta(seconds=rng.uniform(0, spec.heartbeat_spread))
    else:
        last_seen = now
    return {
        "uuid": service_uuid,
        "host": host,
        "binary": "nova-compute",
        "topic": "compute",
        "report_count": report_count,
        "disabled": disabled,
        "disabled_reason": "fleet: maintenance" if disabled else None,
        "last_seen_up": last_seen,
        "forced_down": False,
        "version": NOVA_SERVICE_VERSION,
        "created_at": created,
        "updated_at": written if down else last_seen,
        "deleted_at": None,
        "deleted": 0,
    }


def _inventory(total: int, reserved: int, ratio: float) -> dict[str, Any]:
    # nova's compute reports max_unit = total
    return {
        "total": total,
        "reserved": reserved,
        "min_unit": 1,
        "max_unit": total,
        "step_size": 1,
        "allocation_ratio": ratio,
    }


class FleetConflict(Exception):
    """The fleet's hosts already exist in a cell database (the message names them)."""


def load_fleet(
    fleet: Fleet,
    api_engine: Engine,
    cell_engines: dict[str, Engine],
    placement: PlacementWriter | None,
    *,
    workers: int = 8,
    progress: ProgressCallback | None = None,
) -> None:
    """Write ``fleet`` into the API database, the cell databases and Placement.

    ``cell_engines`` maps each cell key of the fleet (its cell uuid) to that cell's engine;
    the cells must already be mapped in the API database. Aggregates that exist by name are
    reused (hosts and metadata added), so the Placement aggregates carry their uuids.
    ``placement=None`` skips the Placement side. Raises FleetConflict if a host exists.
    ``progress``, if given, is called as hosts, providers and allocations are written
    (stages ``STAGE_CELLS``, ``STAGE_PROVIDERS``, ``STAGE_ALLOCATIONS``); the providers are
    then created a few dozen per ``create_providers_bulk`` call instead of all in one.
    """
    missing = [c for c in fleet.compute_nodes if c not in cell_engines]
    if missing:
        raise ValueError(f"no engine given for cell(s) {', '.join(missing)}")
    _check_no_existing_hosts(fleet, cell_engines)
    agg_uuid_map = _write_aggregates(api_engine, fleet.aggregates)
    _write_server_groups(api_engine, fleet)
    written = 0
    if progress is not None:
        progress(STAGE_CELLS, 0, len(fleet.host_cells))
    for cell, engine in cell_engines.items():
        if cell in fleet.compute_nodes:
            _write_cell(engine, fleet, cell)
            hosts = [h for h, c in fleet.host_cells.items() if c == cell]
            db.map_hosts(api_engine, cell, hosts)
            written += len(hosts)
            if progress is not None:
                progress(STAGE_CELLS, written, len(fleet.host_cells))
    if placement is None:
        return
    placement.ensure_traits(CUSTOM_TRAITS)
    specs = [
        dict(p, aggregates=[agg_uuid_map.get(a, a) for a in p["aggregates"]])
        for p in fleet.providers
    ]
    if progress is None:
        placement.create_providers_bulk(specs, workers=workers)
    else:
        # a fleet's providers are all roots, so any chunk order keeps parents first
        chunk = max(1, workers) * _PROVIDER_CHUNK_PER_WORKER
        progress(STAGE_PROVIDERS, 0, len(specs))
        for start in range(0, len(specs), chunk):
            placement.create_providers_bulk(specs[start : start + chunk], workers=workers)
            progress(STAGE_PROVIDERS, min(start + chunk, len(specs)), len(specs))
    _write_allocations(placement, fleet.allocations, workers, progress)


def _check_no_existing_hosts(fleet: Fleet, cell_engines: dict[str, Engine]) -> None:
    t = models.services
    for cell, rows in fleet.services.items():
        hosts = [r["host"] for r in rows]
        with cell_engines[cell].connect() as conn:
            for chunk in db.api.chunked(hosts):
                clash = conn.execute(
                    sa.select(t.c.host).where(t.c.host.in_(chunk), t.c.deleted == 0).limit(3)
                ).scalars()
                found = list(clash)
                if found:
                    raise FleetConflict(
                        f"host(s) {', '.join(found)} already exist in cell {cell}; "
                        "choose another host prefix"
                    )


def _write_aggregates(api_engine: Engine, aggs: list[FleetAggregate]) -> dict[str, str]:
    a, ah, am = models.aggregates, models.aggregate_hosts, models.aggregate_metadata
    uuid_map: dict[str, str] = {}
    now = timeutils.utcnow()
    with api_engine.begin() as conn:
        for agg in aggs:
            row = conn.execute(sa.select(a.c.id, a.c.uuid).where(a.c.name == agg.name)).first()
            if row is None:
                agg_id = conn.execute(
                    a.insert().values(uuid=agg.uuid, name=agg.name, created_at=now)
                ).inserted_primary_key[0]
                agg_uuid = agg.uuid
                have_hosts: set[str] = set()
                have_meta: set[str] = set()
            else:
                agg_id, agg_uuid = row.id, row.uuid
                have_hosts = set(
                    conn.execute(sa.select(ah.c.host).where(ah.c.aggregate_id == agg_id)).scalars()
                )
                have_meta = set(
                    conn.execute(sa.select(am.c.key).where(am.c.aggregate_id == agg_id)).scalars()
                )
            uuid_map[agg.uuid] = agg_uuid
            host_rows = [
                {"host": h, "aggregate_id": agg_id, "created_at": now}
                for h in agg.hosts
                if h not in have_hosts
            ]
            if host_rows:
                conn.execute(ah.insert(), host_rows)
            meta_rows = [
                {"aggregate_id": agg_id, "key": k, "value": v, "created_at": now}
                for k, v in agg.metadata.items()
                if k not in have_meta
            ]
            if meta_rows:
                conn.execute(am.insert(), meta_rows)
    return uuid_map


def _write_server_groups(api_engine: Engine, fleet: Fleet) -> None:
    g, gp, gm = models.instance_groups, models.instance_group_policy, models.instance_group_member
    now = timeutils.utcnow()
    with api_engine.begin() as conn:
        for number, group in enumerate(fleet.server_groups, start=1):
            group_id = conn.execute(
                g.insert().values(
                    uuid=group.uuid,
                    name=f"group-{number}",
                    user_id=fleet.spec.user_id,
                    project_id=fleet.spec.project_id,
                    created_at=now,
                )
            ).inserted_primary_key[0]
            conn.execute(gp.insert().values(policy=group.policy, group_id=group_id, created_at=now))
            conn.execute(
                gm.insert(),
                [
                    {"instance_uuid": m, "group_id": group_id, "created_at": now}
                    for m in group.members
                ],
            )


def _write_cell(engine: Engine, fleet: Fleet, cell: str) -> None:
    svc, cn, inst = models.services, models.compute_nodes, models.instances
    with engine.begin() as conn:
        if fleet.services[cell]:
            conn.execute(svc.insert(), fleet.services[cell])
        hosts = [r["host"] for r in fleet.services[cell]]
        service_ids: dict[str, int] = {}
        for chunk in db.api.chunked(hosts):
            service_ids.update(
                conn.execute(
                    sa.select(svc.c.host, svc.c.id).where(
                        svc.c.host.in_(chunk), svc.c.binary == "nova-compute", svc.c.deleted == 0
                    )
                ).all()
            )
        node_rows = [dict(r, service_id=service_ids[r["host"]]) for r in fleet.compute_nodes[cell]]
        if node_rows:
            conn.execute(cn.insert(), node_rows)
        rows = fleet.instances[cell]
        if rows:
            conn.execute(inst.insert(), [_instance_row(r) for r in rows])
            gone = [r["uuid"] for r in rows if r.get("deleted_at") is not None]
            for chunk in db.api.chunked(gone):
                # nova soft-deletes by writing the row's own id into ``deleted``
                conn.execute(inst.update().where(inst.c.uuid.in_(chunk)).values(deleted=inst.c.id))


_INSTANCE_COLUMNS = tuple(c.name for c in models.instances.columns if c.name != "id")


# what an instance row the fleet leaves out holds (every writer fills these in)
INSTANCE_DEFAULTS = {"cleaned": 0, "locked": False}


def _instance_row(row: dict[str, Any]) -> dict[str, Any]:
    # executemany needs every row to carry the same keys
    return {k: row.get(k, INSTANCE_DEFAULTS.get(k)) for k in _INSTANCE_COLUMNS}


def _write_allocations(
    placement: Any,
    allocations: list[dict[str, Any]],
    workers: int,
    progress: ProgressCallback | None = None,
) -> None:
    if not allocations:
        return
    claim = getattr(placement, "claim_resources", None)
    if claim is None:
        LOG.warning("Placement client cannot write allocations; existing instances have none")
        return

    def _one(alloc: dict[str, Any]) -> None:
        body = {"allocations": {alloc["rp_uuid"]: {"resources": alloc["resources"]}}}
        claim(alloc["consumer_uuid"], body, alloc["project_id"], alloc["user_id"])

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        if progress is None:
            # list() re-raises the first failure
            list(pool.map(_one, allocations))
            return
        progress(STAGE_ALLOCATIONS, 0, len(allocations))
        # consuming the results in order re-raises the first failure too
        for done, _ in enumerate(pool.map(_one, allocations), start=1):
            progress(STAGE_ALLOCATIONS, done, len(allocations))


def _nova_object(name: str, version: str, data: dict[str, Any]) -> dict[str, Any]:
    return {
        "nova_object.name": name,
        "nova_object.namespace": "nova",
        "nova_object.version": version,
        "nova_object.data": data,
        "nova_object.changes": list(data),
    }


def numa_topology(vcpus: int, memory_mb: int, cells: int = 2) -> dict[str, Any]:
    """A compute node's NUMATopology primitive as nova-compute stores it: ``cells`` cells,
    each with an equal share of the CPUs (shared, not dedicated) and of the memory in 4 KiB
    pages, nothing used."""
    per_cpu = max(1, vcpus // cells)
    per_mb = memory_mb // cells
    out = []
    for cell in range(cells):
        cpus = list(range(cell * per_cpu, (cell + 1) * per_cpu))
        pages = _nova_object(
            "NUMAPagesTopology",
            "1.1",
            {"size_kb": 4, "total": per_mb * 256, "used": 0, "reserved": 0},
        )
        metadata = _nova_object("NetworkMetadata", "1.0", {"physnets": [], "tunneled": False})
        out.append(
            _nova_object(
                "NUMACell",
                "1.5",
                {
                    "id": cell,
                    "cpuset": cpus,
                    "pcpuset": [],
                    "memory": per_mb,
                    "cpu_usage": 0,
                    "memory_usage": 0,
                    "pinned_cpus": [],
                    "siblings": [[c] for c in cpus],
                    "mempages": [pages],
                    "network_metadata": metadata,
                    "socket": cell,
                },
            )
        )
    return _nova_object("NUMATopology", "1.2", {"cells": out})
