"""Builders shared by the host manager's tests (and others that run a real HostManager): an
API database with helpers to make cells and write nova's rows into them (``Env``), nova-style
service and compute node rows, a request spec, a cell whose reads fail, and the check that a
host table mirrors its hosts."""

from __future__ import annotations

import datetime
import uuid as uuidlib

import numpy as np
import sqlalchemy as sa

import db
from db import models, queries
from scheduler.conf import CONF
from scheduler.hosts.manager import HostManager
from scheduler.hosts.state import HostState
from scheduler.hosts.table import HostTable, _number, service_state, table_of
from scheduler.objects import Aggregate, Flavor, RequestSpec


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(tzinfo=None)


# rows loaded "before the scheduler started": well behind any read window
BASE = utcnow() - datetime.timedelta(hours=1)


def new_uuid() -> str:
    return str(uuidlib.uuid4())


class Env:
    """An API database and helpers to make cells and write nova's rows into them."""

    def __init__(self, tmp_path):
        self.tmp_path = tmp_path
        self.api = db.get_engine(f"sqlite:///{tmp_path}/api.db")
        db.create_schema(self.api, "api")
        self.cells: dict[str, sa.Engine] = {}
        self.managers: list[HostManager] = []

    def cell_url(self, name: str) -> str:
        return f"sqlite:///{self.tmp_path}/{name}.db"

    def add_cell(self, name: str, *, disabled: bool = False, uuid: str | None = None) -> str:
        url = self.cell_url(name)
        db.create_schema(url, "cell")
        cell = db.create_cell_mapping(
            self.api, name=name, database_connection=url, disabled=disabled, uuid=uuid
        )
        self.cells[cell["uuid"]] = db.get_engine(url)
        return cell["uuid"]

    def add_host(self, cell: str, host: str, *, service: dict | None = None, **node) -> str:
        """A nova-compute service (unless service is False) and one compute node."""
        engine = self.cells[cell]
        with engine.begin() as conn:
            service_id = None
            if service is not False:
                service_id = conn.execute(
                    models.services.insert().values(**service_row(host, **(service or {})))
                ).inserted_primary_key[0]
            row = node_row(host, service_id=service_id, **node)
            conn.execute(models.compute_nodes.insert().values(**row))
        return row["uuid"]

    def update_node(self, cell: str, uuid: str, **values) -> None:
        values.setdefault("updated_at", utcnow())
        t = models.compute_nodes
        with self.cells[cell].begin() as conn:
            conn.execute(t.update().where(t.c.uuid == uuid).values(**values))

    def delete_node(self, cell: str, uuid: str) -> None:
        t = models.compute_nodes
        with self.cells[cell].begin() as conn:
            conn.execute(
                t.update().where(t.c.uuid == uuid).values(deleted=t.c.id, deleted_at=utcnow())
            )

    def update_service(self, cell: str, host: str, **values) -> None:
        values.setdefault("updated_at", utcnow())
        t = models.services
        with self.cells[cell].begin() as conn:
            conn.execute(t.update().where(t.c.host == host, t.c.deleted == 0).values(**values))

    def delete_service(self, cell: str, host: str) -> None:
        t = models.services
        with self.cells[cell].begin() as conn:
            conn.execute(
                t.update()
                .where(t.c.host == host, t.c.deleted == 0)
                .values(deleted=t.c.id, deleted_at=utcnow())
            )

    def add_aggregate(self, name: str, hosts: list[str], metadata: dict[str, str]) -> Aggregate:
        agg_uuid = new_uuid()
        with self.api.begin() as conn:
            agg_id = conn.execute(
                models.aggregates.insert().values(uuid=agg_uuid, name=name, created_at=BASE)
            ).inserted_primary_key[0]
            for h in hosts:
                conn.execute(models.aggregate_hosts.insert().values(aggregate_id=agg_id, host=h))
            for k, v in metadata.items():
                conn.execute(
                    models.aggregate_metadata.insert().values(aggregate_id=agg_id, key=k, value=v)
                )
        return Aggregate(id=agg_id, uuid=agg_uuid, name=name, hosts=set(hosts), metadata=metadata)

    def add_instance(self, cell: str, host: str, *, deleted: bool = False) -> str:
        inst_uuid = new_uuid()
        t = models.instances
        with self.cells[cell].begin() as conn:
            conn.execute(
                t.insert().values(
                    uuid=inst_uuid, host=host, node=host, created_at=BASE, deleted=0, cleaned=0
                )
            )
            if deleted:
                conn.execute(
                    t.update().where(t.c.uuid == inst_uuid).values(deleted=t.c.id, deleted_at=BASE)
                )
        return inst_uuid

    def manager(self, window_read_interval: float = 0.0) -> HostManager:
        """A HostManager; by default one that reads the whole change window on every
        request (the tests of what a read sees), else at most every so many seconds."""
        hm = HostManager(conf=CONF, api_engine=self.api)
        hm.window_read_interval = window_read_interval
        self.managers.append(hm)
        return hm


def service_row(host: str, **kw) -> dict:
    row = dict(
        uuid=new_uuid(),
        host=host,
        binary="nova-compute",
        topic="compute",
        report_count=1,
        disabled=False,
        disabled_reason=None,
        last_seen_up=BASE,
        forced_down=False,
        version=74,
        created_at=BASE,
        updated_at=BASE,
        deleted_at=None,
        deleted=0,
    )
    row.update(kw)
    return row


def node_row(host: str, **kw) -> dict:
    row = dict(
        uuid=new_uuid(),
        host=host,
        hypervisor_hostname=host,
        vcpus=16,
        memory_mb=65536,
        local_gb=1000,
        vcpus_used=2,
        memory_mb_used=4608,
        local_gb_used=40,
        hypervisor_type="QEMU",
        hypervisor_version=8002002,
        cpu_info='{"arch": "x86_64", "model": "Cascadelake-Server"}',
        free_ram_mb=60928,
        free_disk_gb=960,
        disk_available_least=900,
        host_ip="10.0.0.1",
        supported_instances='[["x86_64", "kvm", "hvm"]]',
        metrics="[]",
        stats='{"num_instances": "3", "io_workload": "1", "failed_builds": "2"}',
        ram_allocation_ratio=1.5,
        cpu_allocation_ratio=16.0,
        disk_allocation_ratio=1.0,
        mapped=1,
        created_at=BASE,
        updated_at=BASE,
        deleted_at=None,
        deleted=0,
    )
    row.update(kw)
    return row


def states_by_host(states) -> dict:
    return {hs.host: hs for hs in states}


def request_spec(**kw) -> RequestSpec:
    return RequestSpec(flavor=Flavor(memory_mb=1024, vcpus=2, root_gb=10, ephemeral_gb=5), **kw)


def break_cell(monkeypatch, env, cell: str) -> dict:
    """Make every read of ``cell`` raise while ``state["broken"]``."""
    url = str(env.cells[cell].url)
    state = {"broken": True}
    real_services, real_nodes = queries.get_compute_services, queries.get_compute_nodes

    def check(engine):
        if state["broken"] and str(engine.url) == url:
            raise sa.exc.OperationalError("SELECT", {}, Exception("Lost connection"))

    def services(engine, updated_since=None):
        check(engine)
        return real_services(engine, updated_since=updated_since)

    def nodes(engine, *args, **kw):
        check(engine)
        return real_nodes(engine, *args, **kw)

    monkeypatch.setattr(queries, "get_compute_services", services)
    monkeypatch.setattr(queries, "get_compute_nodes", nodes)
    return state


def assert_table_mirrors(table: HostTable, hosts: list[HostState]) -> None:
    """Every column the table keeps equals what it mirrors on each host."""
    located = table_of(hosts)
    assert located is not None and located[0] is table
    rows = located[1]
    for name, (func, array) in table._numeric.items():
        expected = np.array([_number(func(h)) for h in hosts], dtype=np.float64)
        assert np.array_equal(array[rows], expected, equal_nan=True), name
    for name, column in table._codes.items():
        values = column.values
        for host, code in zip(hosts, column.codes[rows].tolist(), strict=True):
            assert code >= 0, name
            assert column.key(values[code]) == column.key(column.func(host)), name
    state, last = table.services(rows)
    for host, s, t in zip(hosts, state.tolist(), last.tolist(), strict=True):
        assert (s, t) == service_state(host.service), host.host
    codes, lists = table.aggregates
    for host, code in zip(hosts, codes[rows].tolist(), strict=True):
        assert lists[code] == (host.aggregates or []), host.host
