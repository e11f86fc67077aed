"""A benchmark cloud on the real services: nova's API and cell databases and the real Placement
on MariaDB, all holding the same synthetic fleet.

Placement is seeded straight through SQL (``seed_placement``): through its API a provider costs
four calls and the machine manages about 60 providers a second, so 10,000 would take minutes;
SQL takes a second or two. The rows are exactly what the API would have written for the fleet
(resource providers as their own roots, inventories, traits, aggregates, the existing
instances' consumers and allocations, and provider/consumer generations that count the writes),
looked up against the trait and resource-class ids the started Placement synced. This ties the
seeding to Placement 16's schema (alembic head a082b8bb98d0). ANALYZE follows, as the plans
of the first allocation-candidate queries otherwise suffer.

``bench_cloud(hosts, stack)`` builds it all and registers the teardown (Placement stopped,
databases dropped) on the ExitStack.
"""

from __future__ import annotations

import contextlib
import socket
import time
import uuid as uuidlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from oslo_config import cfg
from oslo_messaging import opts as om_opts
from oslo_utils import timeutils

import db
import db.api
from benchmarks import fleet as bench_fleet
from placement_client.api import PlacementClient
from scheduler.demo import fleet as fleet_mod
from scheduler.demo.embedded_placement import EmbeddedPlacement
from scheduler.rpc import transport as rpc

MARIADB_SERVER = "mysql+pymysql://root@127.0.0.1:3306/?charset=utf8mb4"
RABBIT_URL = "rabbit://guest:guest@127.0.0.1:5672/"
PLACEMENT_SCHEMA_HEAD = "a082b8bb98d0"

_CHUNK = 2000


class BenchSetupError(RuntimeError):
    """A service the benchmark needs is missing; the message says which and how to start it."""


def require_rabbit(host: str = "127.0.0.1", port: int = 5672) -> None:
    """Fail loudly (no start attempt: the benchmark does not install services)."""
    try:
        with socket.create_connection((host, port), timeout=2.0):
            return
    except OSError as exc:
        raise BenchSetupError(
            f"RabbitMQ is not listening on {host}:{port} ({exc}); run scripts/ensure-services.sh"
        ) from exc


# the [DEFAULT] options oslo.messaging registers when it first makes a transport
TRANSPORT_OPTS = ("transport_url", "control_exchange")


def register_transport_opts(conf: cfg.ConfigOpts) -> None:
    """Register ``transport_url`` and ``control_exchange`` before any transport exists, so
    that a run can override them (the transport reads ``control_exchange`` when it is made).

    oslo.messaging lists its options publicly (``oslo_messaging.opts.list_opts``, what the
    sample-config generator reads) as copies; a copy registers as the same option as the one
    the transport registers later if their defaults agree, so nova's control exchange is made
    the default first, as ``scheduler.rpc.transport`` does before every transport."""
    rpc.set_defaults()
    for group, opts in om_opts.list_opts():
        if group is None:
            conf.register_opts([opt for opt in opts if opt.dest in TRANSPORT_OPTS])


# --------------------------------------------------------------------------- Placement


class MariaDBPlacement(EmbeddedPlacement):
    """The real Placement (gunicorn, process mode) on a fresh MariaDB database that is
    dropped when it stops."""

    def __init__(self, *, workers: int = 2, conflict_retries: int = 1, **kwargs: Any):
        self.database = "novasched_bench_placement_" + uuidlib.uuid4().hex[:10]
        url = db.ensure_database(MARIADB_SERVER, self.database)
        super().__init__(url, mode="process", workers=workers, conflict_retries=conflict_retries)

    def stop(self) -> None:
        super().stop()
        if self.database:
            db.drop_database(MARIADB_SERVER, self.database)
            self.database = ""


def _placement_engine(db_url: str) -> sa.engine.Engine:
    return sa.create_engine(db.api.normalize_url(db_url), poolclass=sa.pool.NullPool)


def _ids(conn: sa.Connection, table: str, names: Iterable[str]) -> dict[str, int]:
    wanted = sorted(set(names))
    found: dict[str, int] = {}
    for chunk in db.api.chunked(wanted):
        rows = conn.execute(
            sa.text(f"SELECT name, id FROM {table} WHERE name IN :names").bindparams(
                sa.bindparam("names", expanding=True)
            ),
            {"names": chunk},
        )
        found.update({name: id_ for name, id_ in rows})
    return found


def _insert(conn: sa.Connection, table: str, rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    cols = list(rows[0])
    stmt = sa.text(
        f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join(':' + c for c in cols)})"
    )
    for i in range(0, len(rows), _CHUNK):
        conn.execute(stmt, rows[i : i + _CHUNK])


def seed_placement(
    db_url: str,
    providers: list[dict[str, Any]],
    allocations: list[dict[str, Any]] = (),  # type: ignore[assignment]
    *,
    placement: PlacementClient | None = None,
) -> dict[str, float]:
    """Write ``providers`` (fleet format: uuid, name, inventories, traits, aggregates, and
    for a child ``parent_uuid`` and ``root_uuid``, listed after its parent) and
    ``allocations`` (consumer_uuid, rp_uuid, resources, project_id, user_id) into the
    database of a Placement that has started at least once. Custom traits are created
    through ``placement`` when given (so its trait cache learns them), else by SQL.
    Returns the seconds spent per step."""
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    trait_names = {t for p in providers for t in p["traits"]}
    rc_names = {rc for p in providers for rc in p["inventories"]}
    rc_names |= {rc for a in allocations for rc in a["resources"]}
    custom = sorted(t for t in trait_names if t.startswith("CUSTOM_"))
    if placement is not None and custom:
        placement.ensure_traits(custom)
    engine = _placement_engine(db_url)
    now = timeutils.utcnow()
    try:
        with engine.begin() as conn:
            version = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
            if version != PLACEMENT_SCHEMA_HEAD:
                raise BenchSetupError(
                    f"Placement schema is at {version}, seeding knows {PLACEMENT_SCHEMA_HEAD}"
                )
            trait_ids = _ids(conn, "traits", trait_names)
            missing = [t for t in custom if t not in trait_ids]
            _insert(conn, "traits", [{"name": t, "created_at": now} for t in missing])
            trait_ids.update(_ids(conn, "traits", missing))
            unknown = sorted(trait_names - trait_ids.keys())
            if unknown:
                raise BenchSetupError(
                    f"traits unknown to Placement (has it started once?): {unknown[:5]}"
                )
            rc_ids = _ids(conn, "resource_classes", rc_names)
            if rc_names - rc_ids.keys():
                raise BenchSetupError(
                    f"resource classes unknown to Placement: {sorted(rc_names - rc_ids.keys())}"
                )

            # a provider's generation counts the writes the API would have made to it:
            # inventories, traits, aggregates, and one per consumer allocated against it
            writes = {p["uuid"]: 1 + bool(p["traits"]) + bool(p["aggregates"]) for p in providers}
            for alloc in allocations:
                writes[alloc["rp_uuid"]] += 1
            _insert(
                conn,
                "resource_providers",
                [
                    {
                        "uuid": p["uuid"],
                        "name": p["name"],
                        "generation": writes[p["uuid"]],
                        "created_at": now,
                    }
                    for p in providers
                ],
            )
            conn.execute(
                sa.text(
                    "UPDATE resource_providers SET root_provider_id = id "
                    "WHERE root_provider_id IS NULL"
                )
            )
            rp_ids: dict[str, int] = {}
            for chunk in db.api.chunked([p["uuid"] for p in providers]):
                rows = conn.execute(
                    sa.text("SELECT uuid, id FROM resource_providers WHERE uuid IN :u").bindparams(
                        sa.bindparam("u", expanding=True)
                    ),
                    {"u": chunk},
                )
                rp_ids.update({u: i for u, i in rows})
            children = [
                {
                    "id": rp_ids[p["uuid"]],
                    "p": rp_ids[p["parent_uuid"]],
                    "r": rp_ids[p["root_uuid"]],
                }
                for p in providers
                if p.get("parent_uuid")
            ]
            if children:
                conn.execute(
                    sa.text(
                        "UPDATE resource_providers SET parent_provider_id = :p, "
                        "root_provider_id = :r WHERE id = :id"
                    ),
                    children,
                )
            timings["providers"] = time.perf_counter() - t0

            inventories, rp_traits, rp_aggs = [], [], []
            agg_uuids: set[str] = set()
            for p in providers:
                rp_id = rp_ids[p["uuid"]]
                for rc, inv in p["inventories"].items():
                    inventories.append(
                        {
                            "resource_provider_id": rp_id,
                            "resource_class_id": rc_ids[rc],
                            "total": inv["total"],
                            "reserved": inv.get("reserved", 0),
                            "min_unit": inv.get("min_unit", 1),
                            "max_unit": inv.get("max_unit", 2147483647),
                            "step_size": inv.get("step_size", 1),
                            "allocation_ratio": inv.get("allocation_ratio", 1.0),
                            "created_at": now,
                        }
                    )
                for trait in p["traits"]:
                    rp_traits.append(
                        {
                            "resource_provider_id": rp_id,
                            "trait_id": trait_ids[trait],
                            "created_at": now,
                        }
                    )
                agg_uuids.update(p["aggregates"])
            _insert(conn, "inventories", inventories)
            _insert(conn, "resource_provider_traits", rp_traits)
            existing_aggs = _uuid_ids(conn, "placement_aggregates", agg_uuids)
            _insert(
                conn,
                "placement_aggregates",
                [{"uuid": u, "created_at": now} for u in sorted(agg_uuids - existing_aggs.keys())],
            )
            agg_ids = _uuid_ids(conn, "placement_aggregates", agg_uuids)
            for p in providers:
                for agg in p["aggregates"]:
                    rp_aggs.append(
                        {
                            "resource_provider_id": rp_ids[p["uuid"]],
                            "aggregate_id": agg_ids[agg],
                            "created_at": now,
                        }
                    )
            _insert(conn, "resource_provider_aggregates", rp_aggs)
            timings["inventories_traits_aggregates"] = (
                time.perf_counter() - t0 - sum(timings.values())
            )
            t1 = time.perf_counter()
            _seed_allocations(conn, allocations, rp_ids, rc_ids, now)
            timings["allocations"] = time.perf_counter() - t1
        t1 = time.perf_counter()
        _analyze(engine)
        timings["analyze"] = time.perf_counter() - t1
    finally:
        engine.dispose()
    timings["total"] = time.perf_counter() - t0
    return timings


def _uuid_ids(conn: sa.Connection, table: str, uuids: Iterable[str]) -> dict[str, int]:
    found: dict[str, int] = {}
    for chunk in db.api.chunked(sorted(set(uuids))):
        rows = conn.execute(
            sa.text(f"SELECT uuid, id FROM {table} WHERE uuid IN :u").bindparams(
                sa.bindparam("u", expanding=True)
            ),
            {"u": chunk},
        )
        found.update({u: i for u, i in rows})
    return found


def _external_ids(conn: sa.Connection, table: str, names: set[str], now: Any) -> dict[str, int]:
    def lookup() -> dict[str, int]:
        rows = conn.execute(
            sa.text(f"SELECT external_id, id FROM {table} WHERE external_id IN :n").bindparams(
                sa.bindparam("n", expanding=True)
            ),
            {"n": sorted(names)},
        )
        return {e: i for e, i in rows}

    if not names:
        return {}
    have = lookup()
    _insert(conn, table, [{"external_id": n, "created_at": now} for n in sorted(names - set(have))])
    return lookup()


def _seed_allocations(
    conn: sa.Connection,
    allocations: list[dict[str, Any]],
    rp_ids: dict[str, int],
    rc_ids: dict[str, int],
    now: Any,
) -> None:
    if not allocations:
        return
    projects = _external_ids(conn, "projects", {a["project_id"] for a in allocations}, now)
    users = _external_ids(conn, "users", {a["user_id"] for a in allocations}, now)
    consumers: dict[str, dict[str, Any]] = {}
    rows = []
    for alloc in allocations:
        # one PUT per consumer: generation 1 (a new consumer starts at 0)
        consumers.setdefault(
            alloc["consumer_uuid"],
            {
                "uuid": alloc["consumer_uuid"],
                "project_id": projects[alloc["project_id"]],
                "user_id": users[alloc["user_id"]],
                "generation": 1,
                "created_at": now,
            },
        )
        for rc, used in alloc["resources"].items():
            rows.append(
                {
                    "resource_provider_id": rp_ids[alloc["rp_uuid"]],
                    "consumer_id": alloc["consumer_uuid"],
                    "resource_class_id": rc_ids[rc],
                    "used": used,
                    "created_at": now,
                }
            )
    _insert(conn, "consumers", list(consumers.values()))
    _insert(conn, "allocations", rows)


_TABLES = (
    "resource_providers",
    "inventories",
    "resource_provider_traits",
    "resource_provider_aggregates",
    "placement_aggregates",
    "traits",
    "consumers",
    "allocations",
    "projects",
    "users",
)


def _analyze(engine: sa.engine.Engine) -> None:
    with engine.connect() as conn:
        if engine.dialect.name == "mysql":
            conn.exec_driver_sql("ANALYZE TABLE " + ", ".join(_TABLES)).fetchall()
        else:
            conn.exec_driver_sql("ANALYZE " + ", ".join(_TABLES))
        conn.commit()


def overcommitted(db_url: str) -> list[dict[str, Any]]:
    """Every (provider, resource class) whose allocations exceed its capacity
    ``(total - reserved) * allocation_ratio``, read from Placement's database."""
    engine = _placement_engine(db_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT rp.uuid, rc.name, i.total, i.reserved, i.allocation_ratio, "
                    "SUM(a.used) AS used "
                    "FROM inventories i "
                    "JOIN resource_providers rp ON rp.id = i.resource_provider_id "
                    "JOIN resource_classes rc ON rc.id = i.resource_class_id "
                    "JOIN allocations a ON a.resource_provider_id = i.resource_provider_id "
                    "AND a.resource_class_id = i.resource_class_id "
                    "GROUP BY rp.uuid, rc.name, i.total, i.reserved, i.allocation_ratio"
                )
            ).all()
    finally:
        engine.dispose()
    over = []
    for uuid, rc, total, reserved, ratio, used in rows:
        capacity = int((total - reserved) * ratio)
        if used > capacity:
            over.append(
                {"provider": uuid, "resource_class": rc, "used": int(used), "cap": capacity}
            )
    return over


def consumers_with_allocations(db_url: str) -> set[str]:
    """Every consumer that holds at least one allocation, read from Placement's database."""
    engine = _placement_engine(db_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT DISTINCT consumer_id FROM allocations")).all()
    finally:
        engine.dispose()
    return {consumer for (consumer,) in rows}


def orphans(cloud: BenchCloud, replied: set[str]) -> list[str]:
    """Consumers holding allocations that are neither one of the fleet's pre-seeded
    instances nor an instance a request got a reply for (``replied``): allocations nobody
    will ever delete. Read after the schedulers have stopped."""
    seeded = {a["consumer_uuid"] for a in cloud.fleet.allocations}
    return sorted(consumers_with_allocations(cloud.placement_db_url) - seeded - replied)


def room_for(db_url: str, resources: dict[str, int]) -> int:
    """How many instances asking ``resources`` fit on the providers that are not disabled
    (no ``COMPUTE_STATUS_DISABLED`` trait), from Placement's inventories and usage: the
    capacity a run can use before it meets NoValidHost (down hosts and the filters take a
    few more out)."""
    engine = _placement_engine(db_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT i.resource_provider_id, rc.name, i.total, i.reserved, "
                    "i.allocation_ratio, i.max_unit, "
                    "(SELECT COALESCE(SUM(a.used), 0) FROM allocations a "
                    " WHERE a.resource_provider_id = i.resource_provider_id "
                    " AND a.resource_class_id = i.resource_class_id) "
                    "FROM inventories i "
                    "JOIN resource_classes rc ON rc.id = i.resource_class_id "
                    "WHERE i.resource_provider_id NOT IN ("
                    " SELECT rpt.resource_provider_id FROM resource_provider_traits rpt "
                    " JOIN traits t ON t.id = rpt.trait_id "
                    " WHERE t.name = 'COMPUTE_STATUS_DISABLED')"
                )
            ).all()
    finally:
        engine.dispose()
    fits: dict[int, dict[str, int]] = {}
    for rp, rc, total, reserved, ratio, max_unit, used in rows:
        if rc not in resources:
            continue
        want = resources[rc]
        free = (total - reserved) * ratio - int(used)
        fits.setdefault(rp, {})[rc] = int(free // want) if want <= max_unit else 0
    return sum(min(by_rc.values()) for by_rc in fits.values() if set(by_rc) == set(resources))


# --------------------------------------------------------------------------- the cloud


@dataclass
class BenchCloud:
    """The fleet, the database URLs and a started Placement holding the same hosts."""

    fleet: fleet_mod.Fleet
    api_url: str
    cell_uuid: str
    cell_url: str
    placement_service: MariaDBPlacement
    placement: PlacementClient
    seed_seconds: dict[str, float]

    @property
    def placement_url(self) -> str:
        return self.placement_service.url

    @property
    def placement_db_url(self) -> str:
        return self.placement_service.db_url

    @property
    def placement_pid(self) -> int:
        """The gunicorn master's pid: Placement's CPU is that process tree's."""
        pid = self.placement_service.pid
        if pid is None:
            raise BenchSetupError("Placement does not run as a process")
        return pid


# the nested fleet (issue 29): what Neutron's OVS agent and nova's PCI in Placement put
# under each compute node
PHYSNETS = ("CUSTOM_PHYSNET_PUBLIC", "CUSTOM_PHYSNET_TENANT")
VNIC = "CUSTOM_VNIC_TYPE_NORMAL"
BW_EGR, BW_IGR = "NET_BW_EGR_KILOBIT_PER_SEC", "NET_BW_IGR_KILOBIT_PER_SEC"
PCI_CLASS = "CUSTOM_PCI_8086_1572"
PCI_TRAITS = ("COMPUTE_MANAGED_PCI_DEVICE", "OWNER_NOVA")
PCI_EVERY = 4  # one host in four has PCI devices
PCI_DEVICES = 4


def nested_children(root: dict[str, Any], index: int) -> list[dict[str, Any]]:
    """The providers under one compute node's root: an OVS agent with one bridge per
    physnet (bandwidth inventory), and on one host in ``PCI_EVERY`` ``PCI_DEVICES`` PCI
    devices, named as Neutron and nova name them."""
    node, uuid = root["name"], root["uuid"]

    def child(suffix: str, parent: str, **kw: Any) -> dict[str, Any]:
        return {
            "uuid": str(uuidlib.uuid5(uuidlib.UUID(uuid), suffix)),
            "name": f"{node}{suffix}",
            "parent_uuid": parent,
            "root_uuid": uuid,
            "inventories": kw.get("inventories", {}),
            "traits": kw.get("traits", []),
            "aggregates": [],
        }

    agent = child(":Open vSwitch agent", uuid, traits=[VNIC])
    found = [agent]
    for net in PHYSNETS:
        bandwidth = {"total": 10_000_000, "max_unit": 10_000_000}
        found.append(
            child(
                f":Open vSwitch agent:br-{net.rsplit('_', 1)[1].lower()}",
                agent["uuid"],
                inventories={BW_EGR: dict(bandwidth), BW_IGR: dict(bandwidth)},
                traits=[VNIC, net],
            )
        )
    if index % PCI_EVERY == 0:
        for d in range(PCI_DEVICES):
            found.append(
                child(
                    f"_0000:81:00.{d}",
                    uuid,
                    inventories={PCI_CLASS: {"total": 1, "max_unit": 1}},
                    traits=list(PCI_TRAITS),
                )
            )
    return found


# Placement bug 2070257's tree: eight PCI devices under every compute node
WIDE_DEVICES = 8


def wide_children(root: dict[str, Any], index: int) -> list[dict[str, Any]]:
    """``WIDE_DEVICES`` PCI devices under one compute node, as nova names them."""
    return [
        {
            "uuid": str(uuidlib.uuid5(uuidlib.UUID(root["uuid"]), f"pci{d}")),
            "name": f"{root['name']}_0000:81:00.{d}",
            "parent_uuid": root["uuid"],
            "root_uuid": root["uuid"],
            "inventories": {PCI_CLASS: {"total": 1, "max_unit": 1}},
            "traits": list(PCI_TRAITS),
            "aggregates": [],
        }
        for d in range(WIDE_DEVICES)
    ]


def bench_cloud(
    hosts: int,
    stack: contextlib.ExitStack,
    *,
    seed: int = 4,
    nested: bool = False,
    children: Callable[[dict[str, Any], int], list[dict[str, Any]]] | None = None,
) -> BenchCloud:
    """Build the cloud for ``hosts`` compute nodes; teardown goes on ``stack``. ``nested``:
    each compute node's provider has children (``nested_children``), or those ``children``
    makes."""
    t0 = time.perf_counter()
    tag = uuidlib.uuid4().hex[:10]
    api_name, cell_name = f"novasched_bench_api_{tag}", f"novasched_bench_cell_{tag}"
    api_url = db.ensure_database(MARIADB_SERVER, api_name)
    stack.callback(db.drop_database, MARIADB_SERVER, api_name)
    cell_url = db.ensure_database(MARIADB_SERVER, cell_name)
    stack.callback(db.drop_database, MARIADB_SERVER, cell_name)
    api = db.get_engine(api_url)
    db.create_schema(api, "api")
    cell = db.create_cell_mapping(api, name="cell1", database_connection=cell_url)
    db.create_schema(cell_url, "cell")

    placement_service = MariaDBPlacement(workers=2, conflict_retries=1)
    stack.callback(placement_service.stop)
    placement_service.start()
    placement = PlacementClient(placement_service.url, retry_backoff=0.05)

    fleet = fleet_mod.build_fleet(bench_fleet.cloud_spec(hosts, cell["uuid"], seed))
    cell_engine = db.get_engine(cell_url)
    fleet_mod.load_fleet(fleet, api, {cell["uuid"]: cell_engine}, None)
    t1 = time.perf_counter()
    providers = list(fleet.providers)
    if nested or children is not None:
        placement.ensure_resource_classes([PCI_CLASS])
        for i, root in enumerate(fleet.providers):
            providers.extend((children or nested_children)(root, i))
    # the API database is fresh, so its aggregates keep the fleet's uuids
    seeded = seed_placement(
        placement_service.db_url, providers, fleet.allocations, placement=placement
    )
    seeded["nova_databases"] = t1 - t0
    return BenchCloud(
        fleet=fleet,
        api_url=api_url,
        cell_uuid=cell["uuid"],
        cell_url=cell_url,
        placement_service=placement_service,
        placement=placement,
        seed_seconds=seeded,
    )
