"""Synthetic fleets for the benchmark, written straight into SQLite with bulk inserts.

``scheduler.demo.fleet.build_fleet`` + ``load_fleet`` also fill Placement and go through
SQLAlchemy row by row: about 4 s per 10,000 hosts, 40 s at 100,000. The benchmark needs
only the API and cell databases, so this module writes them with ``sqlite3.executemany``
(about 1 s per 10,000 hosts, all of it building rows). The schema is nova's, created by
``db.create_schema``; timestamps use SQLAlchemy's SQLite text format so that the
scheduler's ``updated_at >= ?`` comparisons work as they do on rows it wrote itself.

The fleet is made so that about half of the hosts pass the default filters for a plain
x86_64 request: 8 % of the services are disabled, 7 % are down (never heartbeat), and 40 %
of the hosts are aarch64, which ImagePropertiesFilter removes for an x86_64 image.
"""

from __future__ import annotations

import datetime
import json
import os
import random
import sqlite3
import time
import uuid as uuidlib
from dataclasses import dataclass, field

from oslo_utils import timeutils

import db

# nova's [DEFAULT] report_interval: each nova-compute writes its service row this often
REPORT_INTERVAL = 10.0

DISABLED_FRACTION = 0.08
DOWN_FRACTION = 0.07
AARCH64_FRACTION = 0.40
SSD_FRACTION = 0.5
GPU_FRACTION = 0.1
AZS = ("az1", "az2", "az3")
PROJECT_ID = "6f70656e-7374-6163-6b00-70726f6a6563"
USER_ID = "75736572-0000-4000-8000-000000000001"

_VCPUS = (16, 24, 32, 48, 64, 96)
_CPU_RATIOS = (1.0, 2.0, 4.0, 4.0, 8.0, 16.0)
_RAM_GIB = (64, 96, 128, 192, 256, 384, 512, 768)
_RAM_RATIOS = (1.0, 1.0, 1.0, 1.5)
_DISK_GB = (1000, 2000, 4000, 8000)
_DISK_RATIOS = (1.0, 1.0, 2.0)
_HV_VERSIONS = (6002000, 7002000, 8002002)
_RESERVED_RAM_MB = 512
# (vcpus, memory_mb, root_gb) of the instances already on the hosts
_FLAVORS = ((1, 512, 1), (2, 2048, 20), (4, 8192, 40), (8, 16384, 80))
# (aggregate name, fraction of the hosts, metadata): weigher multipliers per aggregate
_MULTIPLIER_AGGREGATES = (
    ("stacking", 0.2, {"ram_weight_multiplier": "-1.0"}),
    ("cpu-heavy", 0.1, {"cpu_weight_multiplier": "2.0", "disk_weight_multiplier": "0.5"}),
)


def _ts(value: datetime.datetime) -> str:
    # SQLAlchemy's SQLite DateTime storage format (always with microseconds)
    return value.strftime("%Y-%m-%d %H:%M:%S.%f")


def _cpu_info(arch: str, vcpus: int) -> str:
    sockets = 2 if vcpus >= 32 else 1
    return json.dumps(
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
            "features": (
                ["avx", "avx2", "sse4.2", "aes", "vmx"]
                if arch == "x86_64"
                else ["fp", "asimd", "aes", "sha2"]
            ),
        }
    )


@dataclass(slots=True)
class ServerGroup:
    """A server group of the fleet: its members' instances live on ``hosts``."""

    uuid: str
    policy: str
    members: list[str]
    hosts: list[str]


@dataclass
class BenchFleet:
    """A fleet in SQLite files under ``directory``, and the handles to change it."""

    size: int
    directory: str
    api_url: str
    cell_url: str
    cell_uuid: str
    compute_uuids: list[str]
    hosts: list[str]
    az_members: dict[str, list[str]]  # az -> compute uuids
    groups: list[ServerGroup]
    up_hosts: list[str]  # services that heartbeat (not the down ones)
    disabled_hosts: set[str]
    down_hosts: set[str]
    aarch64_hosts: set[str]
    # host -> uuids of its live instances (what nova-compute's sync_instance_info sends)
    instances_by_host: dict[str, list[str]] = field(default_factory=dict)
    build_seconds: float = 0.0
    _rng: random.Random = field(default_factory=lambda: random.Random(1))
    _beat_cursor: int = 0
    _last_beat: float = field(default_factory=time.monotonic)
    # seconds spent in our own writes since the last heartbeat: the fleet's clock skips them
    _writing: float = 0.0
    _conn: sqlite3.Connection | None = None

    # -- changes between requests ----------------------------------------------------------
    def _cell(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = sqlite3.connect(
                self.cell_url.removeprefix("sqlite:///"), isolation_level=None, timeout=30
            )
        return self._conn

    def touch_compute_nodes(self, count: int) -> int:
        """Write ``count`` random compute nodes, as their resource tracker does: usage moves
        by one small instance and ``updated_at`` becomes now."""
        if count <= 0:
            return 0
        started = time.monotonic()
        now = _ts(timeutils.utcnow())
        picked = self._rng.sample(self.compute_uuids, min(count, len(self.compute_uuids)))
        rows = []
        for uuid in picked:
            sign = 1 if self._rng.random() < 0.5 else -1
            rows.append((sign, 512 * sign, 512 * sign, now, uuid))
        conn = self._cell()
        conn.execute("BEGIN")
        conn.executemany(
            "UPDATE compute_nodes SET vcpus_used = MAX(0, vcpus_used + ?), "
            "memory_mb_used = MAX(0, memory_mb_used + ?), "
            "free_ram_mb = free_ram_mb - ?, updated_at = ? WHERE uuid = ?",
            rows,
        )
        conn.execute("COMMIT")
        self._writing += time.monotonic() - started
        return len(rows)

    def heartbeat(self, count: int | None = None) -> int:
        """Heartbeat services round-robin, as nova's DB servicegroup driver does every
        ``REPORT_INTERVAL`` seconds per compute. Without ``count``: as many as are due since
        the previous call (up services / REPORT_INTERVAL per second), not counting the time
        this object spent writing: in a real cell those writes come from other machines while
        the scheduler works, here they stop it."""
        now_mono = time.monotonic()
        if count is None:
            elapsed = max(0.0, now_mono - self._last_beat - self._writing)
            count = round(len(self.up_hosts) * elapsed / REPORT_INTERVAL)
        self._writing = 0.0
        count = min(count, len(self.up_hosts))
        if count <= 0:
            self._last_beat = now_mono
            return 0
        start = self._beat_cursor
        hosts = [self.up_hosts[(start + i) % len(self.up_hosts)] for i in range(count)]
        self._beat_cursor = (start + count) % len(self.up_hosts)
        now = _ts(timeutils.utcnow())
        conn = self._cell()
        conn.execute("BEGIN")
        conn.executemany(
            "UPDATE services SET updated_at = ?, last_seen_up = ?, "
            "report_count = report_count + 1 WHERE host = ? AND deleted = 0",
            [(now, now, h) for h in hosts],
        )
        conn.execute("COMMIT")
        # the clock restarts after our own write
        self._last_beat = time.monotonic()
        return count

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def build(size: int, directory: str, *, seed: int = 0) -> BenchFleet:
    """Write a fleet of ``size`` compute nodes (one cell) into SQLite files in ``directory``."""
    if size < 1:
        raise ValueError(f"size must be at least 1, not {size}")
    started = time.perf_counter()
    os.makedirs(directory, exist_ok=True)
    rng = random.Random(seed)
    now = timeutils.utcnow()
    api_path = os.path.join(directory, "api.db")
    cell_path = os.path.join(directory, "cell1.db")
    for path in (api_path, cell_path):
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(path + suffix):
                os.remove(path + suffix)
    api_url, cell_url = f"sqlite:///{api_path}", f"sqlite:///{cell_path}"
    db.create_schema(api_url, "api")
    db.create_schema(cell_url, "cell")
    cell_uuid = str(uuidlib.UUID(int=rng.getrandbits(128), version=4))
    db.create_cell_mapping(
        db.get_engine(api_url), name="cell1", database_connection=cell_url, uuid=cell_uuid
    )

    def new_uuid() -> str:
        return str(uuidlib.UUID(int=rng.getrandbits(128), version=4))

    width = max(5, len(str(size)))
    hosts = [f"bench-{i:0{width}d}" for i in range(size)]
    disabled = set(rng.sample(hosts, round(size * DISABLED_FRACTION)))
    down = set(rng.sample(hosts, round(size * DOWN_FRACTION)))
    aarch64 = set(rng.sample(hosts, round(size * AARCH64_FRACTION)))
    cpu_infos = {(a, v): _cpu_info(a, v) for a in ("x86_64", "aarch64") for v in _VCPUS}
    supported = {a: json.dumps([[a, "kvm", "hvm"]]) for a in ("x86_64", "aarch64")}

    service_rows, node_rows, instance_rows = [], [], []
    instances_of: dict[str, list[str]] = {}
    compute_uuids = []
    old = _ts(now - datetime.timedelta(days=200))
    # compute nodes last wrote their row a while ago: well behind any read window
    node_written = _ts(now - datetime.timedelta(minutes=10))
    for index, host in enumerate(hosts):
        service_id = index + 1
        is_down = host in down
        if is_down:
            seen = _ts(now - datetime.timedelta(hours=rng.randint(2, 72)))
        else:
            # heartbeats spread over the last report interval, as in a live fleet
            seen = _ts(now - datetime.timedelta(seconds=rng.uniform(0, REPORT_INTERVAL)))
        service_rows.append(
            (
                service_id,
                new_uuid(),
                host,
                "nova-compute",
                "compute",
                0 if is_down else rng.randint(1000, 100000),
                1 if host in disabled else 0,
                "bench: maintenance" if host in disabled else None,
                seen,
                0,
                74,
                old,
                seen,
                None,
                0,
            )
        )
        arch = "aarch64" if host in aarch64 else "x86_64"
        vcpus = rng.choice(_VCPUS)
        cpu_ratio = rng.choice(_CPU_RATIOS)
        memory_mb = rng.choice(_RAM_GIB) * 1024
        ram_ratio = rng.choice(_RAM_RATIOS)
        local_gb = rng.choice(_DISK_GB)
        disk_ratio = rng.choice(_DISK_RATIOS)
        n_inst = rng.randint(0, 6)
        used_vcpus = used_ram = used_disk = 0
        uuids = []
        busy = 0
        for _ in range(n_inst):
            f_vcpus, f_ram, f_disk = rng.choice(_FLAVORS)
            inst_uuid = new_uuid()
            uuids.append(inst_uuid)
            used_vcpus += f_vcpus
            used_ram += f_ram
            used_disk += f_disk
            building = rng.random() < 0.1
            busy += building
            instance_rows.append(
                (
                    inst_uuid,
                    USER_ID,
                    PROJECT_ID,
                    "building" if building else "active",
                    "spawning" if building else None,
                    f_ram,
                    f_vcpus,
                    f_disk,
                    host,
                    host,
                    AZS[index % len(AZS)],
                    old,
                    0,
                    0,
                    0,
                )
            )
        instances_of[host] = uuids
        # some hosts are nearly full, so the RAM/CPU/disk weighers have something to sort
        if rng.random() < 0.2:
            used_ram = int(memory_mb * rng.uniform(0.6, 0.95))
            used_vcpus = int(vcpus * cpu_ratio * rng.uniform(0.5, 0.9))
        ram_used = _RESERVED_RAM_MB + used_ram
        stats = {
            "num_instances": str(n_inst),
            "num_vm_active": str(n_inst - busy),
            "num_vm_building": str(busy),
            "num_task_None": str(n_inst - busy),
            "num_task_spawning": str(busy),
            "num_os_type_linux": str(n_inst),
            f"num_proj_{PROJECT_ID}": str(n_inst),
            "io_workload": str(busy),
            "failed_builds": str(1 if rng.random() < 0.02 else 0),
            # what ComputeCapabilitiesFilter matches with capabilities:<key> extra specs
            "storage": "ssd" if rng.random() < SSD_FRACTION else "hdd",
            "gpu": "a100" if rng.random() < GPU_FRACTION else "none",
            "rack": f"r{index // 40:04d}",
        }
        cn_uuid = new_uuid()
        compute_uuids.append(cn_uuid)
        node_rows.append(
            (
                service_id,
                host,
                cn_uuid,
                vcpus,
                memory_mb,
                local_gb,
                used_vcpus,
                ram_used,
                used_disk,
                "QEMU",
                rng.choice(_HV_VERSIONS),
                host,
                memory_mb - ram_used,
                local_gb - used_disk,
                busy,
                n_inst,
                cpu_infos[(arch, vcpus)],
                local_gb - used_disk,
                f"10.{index // 65536 % 256}.{index // 256 % 256}.{index % 256}",
                supported[arch],
                "[]",
                None,
                None,
                json.dumps(stats),
                None,
                ram_ratio,
                cpu_ratio,
                disk_ratio,
                1,
                old,
                node_written,
                None,
                0,
            )
        )

    # server groups: a few members each, on distinct hosts
    groups: list[ServerGroup] = []
    for g in range(max(1, min(50, size // 20))):
        members = rng.sample(hosts, min(len(hosts), rng.randint(2, 8)))
        group = ServerGroup(
            new_uuid(), "anti-affinity" if g % 2 == 0 else "affinity", [], list(members)
        )
        for host in members:
            inst_uuid = new_uuid()
            group.members.append(inst_uuid)
            instances_of[host].append(inst_uuid)
            instance_rows.append(
                (inst_uuid, USER_ID, PROJECT_ID, "active", None, 2048, 2, 20, host, host,
                 None, old, 0, 0, 0)
            )  # fmt: skip
        groups.append(group)

    cell = sqlite3.connect(cell_path, isolation_level=None, timeout=30)
    try:
        cell.execute("BEGIN")
        cell.executemany(
            "INSERT INTO services (id, uuid, host, binary, topic, report_count, disabled, "
            "disabled_reason, last_seen_up, forced_down, version, created_at, updated_at, "
            "deleted_at, deleted) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            service_rows,
        )
        cell.executemany(
            "INSERT INTO compute_nodes (service_id, host, uuid, vcpus, memory_mb, local_gb, "
            "vcpus_used, memory_mb_used, local_gb_used, hypervisor_type, hypervisor_version, "
            "hypervisor_hostname, free_ram_mb, free_disk_gb, current_workload, running_vms, "
            "cpu_info, disk_available_least, host_ip, supported_instances, metrics, pci_stats, "
            "extra_resources, stats, numa_topology, ram_allocation_ratio, cpu_allocation_ratio, "
            "disk_allocation_ratio, mapped, created_at, updated_at, deleted_at, deleted) "
            "VALUES (" + ",".join("?" * 33) + ")",
            node_rows,
        )
        cell.executemany(
            "INSERT INTO instances (uuid, user_id, project_id, vm_state, task_state, memory_mb, "
            "vcpus, root_gb, host, node, availability_zone, created_at, deleted, cleaned, "
            "locked) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            instance_rows,
        )
        cell.execute("COMMIT")
        cell.execute("ANALYZE")
    finally:
        cell.close()

    az_members: dict[str, list[str]] = {az: [] for az in AZS}
    aggregates: list[tuple[str, list[str], dict[str, str]]] = []
    for i, az in enumerate(AZS):
        members = hosts[i :: len(AZS)]
        az_members[az] = compute_uuids[i :: len(AZS)]
        aggregates.append((az, members, {"availability_zone": az}))
    for name, fraction, metadata in _MULTIPLIER_AGGREGATES:
        aggregates.append((name, sorted(rng.sample(hosts, round(size * fraction))), metadata))
    api = sqlite3.connect(api_path, isolation_level=None, timeout=30)
    try:
        api.execute("BEGIN")
        cell_id = api.execute(
            "SELECT id FROM cell_mappings WHERE uuid = ?", (cell_uuid,)
        ).fetchone()
        api.executemany(
            "INSERT INTO host_mappings (cell_id, host, created_at) VALUES (?,?,?)",
            [(cell_id[0], h, old) for h in hosts],
        )
        for agg_id, (name, members, metadata) in enumerate(aggregates, start=1):
            api.execute(
                "INSERT INTO aggregates (id, uuid, name, created_at) VALUES (?,?,?,?)",
                (agg_id, new_uuid(), name, old),
            )
            api.executemany(
                "INSERT INTO aggregate_hosts (host, aggregate_id, created_at) VALUES (?,?,?)",
                [(h, agg_id, old) for h in members],
            )
            api.executemany(
                "INSERT INTO aggregate_metadata (aggregate_id, key, value, created_at) "
                "VALUES (?,?,?,?)",
                [(agg_id, k, v, old) for k, v in metadata.items()],
            )
        for group_id, group in enumerate(groups, start=1):
            api.execute(
                "INSERT INTO instance_groups (id, user_id, project_id, uuid, name, created_at) "
                "VALUES (?,?,?,?,?,?)",
                (group_id, USER_ID, PROJECT_ID, group.uuid, f"group-{group_id}", old),
            )
            api.execute(
                "INSERT INTO instance_group_policy (policy, group_id, created_at) VALUES (?,?,?)",
                (group.policy, group_id, old),
            )
            api.executemany(
                "INSERT INTO instance_group_member (instance_uuid, group_id, created_at) "
                "VALUES (?,?,?)",
                [(m, group_id, old) for m in group.members],
            )
        api.execute("COMMIT")
    finally:
        api.close()

    return BenchFleet(
        size=size,
        directory=directory,
        api_url=api_url,
        cell_url=cell_url,
        cell_uuid=cell_uuid,
        compute_uuids=compute_uuids,
        hosts=hosts,
        az_members=az_members,
        groups=groups,
        up_hosts=[h for h in hosts if h not in down],
        disabled_hosts=disabled,
        down_hosts=down,
        aarch64_hosts=aarch64,
        instances_by_host=instances_of,
        build_seconds=time.perf_counter() - started,
    )
