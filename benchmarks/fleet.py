"""The benchmarks' fleets: which fleet each section wants, and a fast SQLite writer for it.

The shape of a fleet (host names, cells, AZ and weigher aggregates, capacities, allocation
ratios, instances, server groups, heartbeats) is drawn by ``scheduler.demo.fleet.build_fleet``
for the demo, the tests and the benchmarks alike; this module only describes the benchmark's
fleets as ``FleetSpec``s and writes them:

- ``core_spec``: the core and memory sections' fleet (one cell), written here into SQLite files
  by ``build``. ``scheduler.demo.fleet.load_fleet`` writes the same rows through SQLAlchemy
  row by row and fills Placement (about 4 s per 10,000 hosts for the databases alone); these
  sections need only the API and cell databases, up to 100,000 hosts, so ``write`` inserts
  them with ``sqlite3.executemany``. The schema is nova's, created by ``db.create_schema``;
  timestamps use SQLAlchemy's SQLite text format so that the scheduler's ``updated_at >= ?``
  comparisons work as they do on rows it wrote itself.
- ``cloud_spec``: the fleet of the e2e, throughput and view sections, written into MariaDB by
  ``load_fleet`` and into Placement by SQL (``benchmarks/placement_seed.py``).

The core fleet is made so that about half of the hosts pass the default filters for a plain
x86_64 request: 8 % of the services are disabled, 7 % are down (never heartbeat), and 40 %
of the hosts are aarch64, which ImagePropertiesFilter removes for an x86_64 image.
"""

from __future__ import annotations

import datetime
import itertools
import os
import random
import sqlite3
import time
import uuid as uuidlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from oslo_utils import timeutils

import db
from db import models
from scheduler.demo.fleet import INSTANCE_DEFAULTS, Fleet, FleetServerGroup, FleetSpec, build_fleet

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
# the compute nodes last wrote their row this long ago: well behind any read window
QUIET_FOR = datetime.timedelta(minutes=10)
# the API database's rows (host mappings, aggregates, groups) were made long ago
_API_ROWS_AGE = datetime.timedelta(days=200)

# weigher multipliers per aggregate, beside the fleet's "stacking" one (ram -1.0, 20 %)
_MORE_MULTIPLIER_AGGREGATES = (
    ("cpu-heavy", 0.1, {"cpu_weight_multiplier": "2.0", "disk_weight_multiplier": "0.5"}),
)

# The cloud's rows carry a clock this far in the past, so that after the first (full) read
# the scheduler's incremental refresh finds nothing changed (its read window starts 5 s
# before the previous read); a just-loaded fleet would be re-read for those seconds.
FLEET_AGE = datetime.timedelta(minutes=5)


def core_spec(size: int, cell_uuid: str, seed: int = 0) -> FleetSpec:
    """The core and memory sections' fleet of ``size`` hosts in one cell: capacities from 6
    vCPU, 8 RAM and 4 disk sizes, allocation ratios varied per host, 0-6 instances each and
    a fifth of the hosts nearly full, the mix of disabled, down and aarch64 hosts above, three
    AZs and two weigher-multiplier aggregates, server groups, ``storage`` and ``gpu`` keys for
    ComputeCapabilitiesFilter, and heartbeats spread over the report interval."""
    return FleetSpec(
        hosts=size,
        cells=[cell_uuid],
        seed=seed,
        disabled_fraction=DISABLED_FRACTION,
        down_fraction=DOWN_FRACTION,
        azs=list(AZS),
        aarch64_fraction=AARCH64_FRACTION,
        ssd_fraction=SSD_FRACTION,
        gpu_fraction=GPU_FRACTION,
        more_multiplier_aggregates=_MORE_MULTIPLIER_AGGREGATES,
        max_instances_per_host=6,
        building_fraction=0.1,
        ram_gib=(64, 96, 128, 192, 256, 384, 512, 768),
        cpu_ratios=(1.0, 2.0, 4.0, 4.0, 8.0, 16.0),
        ram_ratios=(1.0, 1.0, 1.0, 1.5),
        disk_ratios=(1.0, 1.0, 2.0),
        nearly_full_fraction=0.2,
        failed_build_fraction=0.02,
        max_server_groups=50,
        heartbeat_spread=REPORT_INTERVAL,
        quiet_for=QUIET_FOR,
        host_prefix="bench",
        project_id=PROJECT_ID,
        user_id=USER_ID,
        now=timeutils.utcnow(),
    )


def cloud_spec(hosts: int, cell_uuid: str, seed: int = 4) -> FleetSpec:
    """The e2e, throughput and view sections' fleet: varied capacities and allocation
    ratios, 5 % disabled and 5 % down services, AZ and multiplier aggregates, SSD/arch
    traits, a few instances each. Run the scheduler with a ``service_down_time`` longer than
    ``FLEET_AGE``."""
    return FleetSpec(
        now=timeutils.utcnow() - FLEET_AGE,
        hosts=hosts,
        cells=[cell_uuid],
        seed=seed,
        disabled_fraction=0.05,
        down_fraction=0.05,
        max_instances_per_host=2,
        host_prefix="bench",
    )


def _ts(value: datetime.datetime) -> str:
    # SQLAlchemy's SQLite DateTime storage format (always with microseconds)
    return value.isoformat(" ", "microseconds")


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
    groups: list[FleetServerGroup]
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


def _cell_uuid(seed: int) -> str:
    # the cell's uuid comes from the seed too, so that a seed names the same cell every run
    return str(uuidlib.UUID(int=random.Random(seed).getrandbits(128), version=4))


def build(size: int, directory: str, *, seed: int = 0) -> BenchFleet:
    """Write the core fleet of ``size`` compute nodes (one cell) into SQLite files in
    ``directory``; the same size and seed give the same fleet."""
    if size < 1:
        raise ValueError(f"size must be at least 1, not {size}")
    started = time.perf_counter()
    bench = write(build_fleet(core_spec(size, _cell_uuid(seed), seed)), directory)
    bench.build_seconds = time.perf_counter() - started
    return bench


def write(fleet: Fleet, directory: str) -> BenchFleet:
    """Write ``fleet`` (one cell) into ``api.db`` and ``cell1.db`` in ``directory``, replacing
    what was there, and return the handles the benchmark changes it through.

    The rows' times move with the clock: the fleet's ``now`` becomes the moment of writing,
    so that its heartbeats are as recent as the spec says however long drawing 100,000 hosts
    took (a fleet without ``now`` in its spec is written as drawn)."""
    if len(fleet.spec.cells) != 1:
        raise ValueError(f"the SQLite writer takes a fleet of one cell, not {fleet.spec.cells}")
    [cell_uuid] = fleet.spec.cells
    os.makedirs(directory, exist_ok=True)
    api_path = os.path.join(directory, "api.db")
    cell_path = os.path.join(directory, "cell1.db")
    for path in (api_path, cell_path):
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(path + suffix):
                os.remove(path + suffix)
    api_url, cell_url = f"sqlite:///{api_path}", f"sqlite:///{cell_path}"
    db.create_schema(api_url, "api")
    db.create_schema(cell_url, "cell")
    db.create_cell_mapping(
        db.get_engine(api_url), name="cell1", database_connection=cell_url, uuid=cell_uuid
    )
    _write_cell(cell_path, fleet, cell_uuid)
    _write_api(api_path, fleet, cell_uuid)

    nodes = fleet.compute_nodes[cell_uuid]
    compute_uuid = {n["host"]: n["uuid"] for n in nodes}
    az_members = {
        agg.metadata["availability_zone"]: [compute_uuid[h] for h in agg.hosts]
        for agg in fleet.aggregates
        if "availability_zone" in agg.metadata
    }
    hosts = fleet.hosts
    instances_by_host: dict[str, list[str]] = {h: [] for h in hosts}
    for row in fleet.instances[cell_uuid]:
        if row["deleted_at"] is None:
            instances_by_host[row["host"]].append(row["uuid"])
    return BenchFleet(
        size=len(hosts),
        directory=directory,
        api_url=api_url,
        cell_url=cell_url,
        cell_uuid=cell_uuid,
        compute_uuids=[n["uuid"] for n in nodes],
        hosts=hosts,
        az_members=az_members,
        groups=fleet.server_groups,
        up_hosts=[h for h in hosts if h not in fleet.down_hosts],
        disabled_hosts=fleet.disabled_hosts,
        down_hosts=fleet.down_hosts,
        aarch64_hosts=fleet.aarch64_hosts,
        instances_by_host=instances_by_host,
    )


def _datetime_columns(table: sa.Table) -> frozenset[str]:
    return frozenset(c.name for c in table.columns if isinstance(c.type, sa.DateTime))


def _columns(rows: Iterable[dict[str, Any]]) -> list[str]:
    """Every key of ``rows``, in the order they first appear (rows may leave some out)."""
    return list(dict.fromkeys(itertools.chain.from_iterable(rows)))


def _values(
    rows: list[dict[str, Any]],
    columns: list[str],
    table: sa.Table,
    shift: datetime.timedelta,
    extra: tuple[Any, ...] = (),
) -> list[list[Any]]:
    """``rows`` as lists of ``columns``' values (NULL where a row has none) followed by
    ``extra``, the datetimes moved by ``shift`` and as SQLAlchemy stores them."""
    times = [i for i, c in enumerate(columns) if c in _datetime_columns(table)]
    text: dict[datetime.datetime, str] = {}  # most rows share their times with others
    out = []
    for row in rows:
        values = [*map(row.get, columns), *extra]
        for i in times:
            value = values[i]
            if value is not None:
                values[i] = text.get(value) or text.setdefault(value, _ts(value + shift))
        out.append(values)
    return out


def _insert(
    conn: sqlite3.Connection, table: sa.Table, columns: list[str], rows: list[list[Any]]
) -> None:
    """A bulk load: the table's indexes are dropped and made again over all the rows at
    once, about twice as fast as keeping the instances' ten indexes current row by row."""
    if not rows:
        return
    indexes = conn.execute(
        "SELECT name, sql FROM sqlite_master "
        "WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL",
        (table.name,),
    ).fetchall()
    for name, _ in indexes:
        conn.execute(f'DROP INDEX "{name}"')
    conn.executemany(
        f"INSERT INTO {table.name} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
        rows,
    )
    for _, sql in indexes:
        conn.execute(sql)


# the page cache of the writer's connection (KiB): the uniqueness indexes of 100,000 hosts'
# rows are written in random order
_WRITE_CACHE = "PRAGMA cache_size = -262144"


def _write_cell(cell_path: str, fleet: Fleet, cell_uuid: str) -> None:
    services = fleet.services[cell_uuid]
    # the services take the ids 1..n in host order; their compute nodes point at them
    service_id = {row["host"]: number for number, row in enumerate(services, start=1)}
    nodes = [
        dict(row, service_id=service_id[row["host"]]) for row in fleet.compute_nodes[cell_uuid]
    ]
    instances = fleet.instances[cell_uuid]
    drawn_at = fleet.spec.now
    shift = timeutils.utcnow() - drawn_at if drawn_at else datetime.timedelta(0)
    conn = sqlite3.connect(cell_path, isolation_level=None, timeout=30)
    try:
        conn.execute(_WRITE_CACHE)
        conn.execute("BEGIN")
        columns = ["id", *_columns(services)]
        rows = _values(services, columns[1:], models.services, shift)
        _insert(conn, models.services, columns, [[n, *r] for n, r in enumerate(rows, start=1)])
        columns = _columns(nodes)
        rows = _values(nodes, columns, models.compute_nodes, shift)
        _insert(conn, models.compute_nodes, columns, rows)
        columns = _columns(instances)
        defaults = {k: v for k, v in INSTANCE_DEFAULTS.items() if k not in columns}
        rows = _values(instances, columns, models.instances, shift, tuple(defaults.values()))
        _insert(conn, models.instances, [*columns, *defaults], rows)
        # nova soft-deletes by writing the row's own id into ``deleted``
        conn.execute("UPDATE instances SET deleted = id WHERE deleted_at IS NOT NULL")
        conn.execute("COMMIT")
        conn.execute("ANALYZE")
    finally:
        conn.close()


def _write_api(api_path: str, fleet: Fleet, cell_uuid: str) -> None:
    made = _ts(timeutils.utcnow() - _API_ROWS_AGE)
    conn = sqlite3.connect(api_path, isolation_level=None, timeout=30)
    try:
        conn.execute("BEGIN")
        (cell_id,) = conn.execute(
            "SELECT id FROM cell_mappings WHERE uuid = ?", (cell_uuid,)
        ).fetchone()
        conn.executemany(
            "INSERT INTO host_mappings (cell_id, host, created_at) VALUES (?,?,?)",
            [(cell_id, h, made) for h in fleet.hosts],
        )
        for agg_id, agg in enumerate(fleet.aggregates, start=1):
            conn.execute(
                "INSERT INTO aggregates (id, uuid, name, created_at) VALUES (?,?,?,?)",
                (agg_id, agg.uuid, agg.name, made),
            )
            conn.executemany(
                "INSERT INTO aggregate_hosts (host, aggregate_id, created_at) VALUES (?,?,?)",
                [(h, agg_id, made) for h in agg.hosts],
            )
            conn.executemany(
                "INSERT INTO aggregate_metadata (aggregate_id, key, value, created_at) "
                "VALUES (?,?,?,?)",
                [(agg_id, k, v, made) for k, v in agg.metadata.items()],
            )
        spec = fleet.spec
        for group_id, group in enumerate(fleet.server_groups, start=1):
            conn.execute(
                "INSERT INTO instance_groups (id, user_id, project_id, uuid, name, created_at) "
                "VALUES (?,?,?,?,?,?)",
                (group_id, spec.user_id, spec.project_id, group.uuid, f"group-{group_id}", made),
            )
            conn.execute(
                "INSERT INTO instance_group_policy (policy, group_id, created_at) VALUES (?,?,?)",
                (group.policy, group_id, made),
            )
            conn.executemany(
                "INSERT INTO instance_group_member (instance_uuid, group_id, created_at) "
                "VALUES (?,?,?)",
                [(m, group_id, made) for m in group.members],
            )
        conn.execute("COMMIT")
    finally:
        conn.close()
