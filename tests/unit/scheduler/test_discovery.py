"""Host discovery on the elected scheduler, as nova 34's periodic task does it (the election
itself: test_leader.py).

Real SQLite API and cell databases (the ``env`` fixture); the scheduler rows live in the
database of ``[database] connection``, here a cell's.
"""

from __future__ import annotations

import datetime
import logging
from types import SimpleNamespace

import pytest
import sqlalchemy as sa

import db
from db import models
from scheduler import discovery
from scheduler.discovery import HostDiscovery
from tests.unit.scheduler.hosts.env import service_row, utcnow

DOWN_TIME = 60


def _mappings(env) -> dict[str, str]:
    return db.get_host_mappings(env.api)


def _mapped_flags(env, cell: str) -> dict[str, int]:
    t = models.compute_nodes
    with env.cells[cell].connect() as conn:
        return dict(conn.execute(sa.select(t.c.hypervisor_hostname, t.c.mapped)).all())


@pytest.fixture
def cloud(env):
    """cell0, two cells: new computes (mapped 0), one already mapped, a deleted node, and
    a node whose host another cell's mapping holds already."""
    env.add_cell("cell0", uuid=db.CELL0_UUID)
    c1, c2 = env.add_cell("cell1"), env.add_cell("cell2")
    env.add_host(c1, "new-1", mapped=0)
    env.add_host(c1, "new-2", mapped=0)
    env.add_host(c1, "old-1", mapped=1)
    db.map_hosts(env.api, c1, ["old-1"])
    gone = env.add_host(c1, "gone-1", mapped=0)
    env.delete_node(c1, gone)
    env.add_host(c2, "new-3", mapped=0)
    env.add_host(c2, "elsewhere", mapped=0)
    db.map_hosts(env.api, c1, ["elsewhere"])
    return SimpleNamespace(c1=c1, c2=c2)


def test_discovery_maps_each_unmapped_compute_once(env, cloud):
    cells = db.get_cell_mappings(env.api)
    found = discovery.discover_hosts(env.api, cells)
    assert found == [("cell1", "new-1"), ("cell1", "new-2"), ("cell2", "new-3")]
    assert _mappings(env) == {
        "new-1": cloud.c1,
        "new-2": cloud.c1,
        "old-1": cloud.c1,
        "new-3": cloud.c2,
        "elsewhere": cloud.c1,  # mapped before: left where it is, its node left unmapped
    }
    assert _mapped_flags(env, cloud.c1) == {"new-1": 1, "new-2": 1, "old-1": 1, "gone-1": 0}
    assert _mapped_flags(env, cloud.c2) == {"new-3": 1, "elsewhere": 0}
    # idempotent
    assert discovery.discover_hosts(env.api, cells) == []


def _conf(env, cell: str, interval: int = 60):
    return SimpleNamespace(
        scheduler=SimpleNamespace(discover_hosts_in_cells_interval=interval),
        api_database=SimpleNamespace(connection=str(env.api.url)),
        database=SimpleNamespace(connection=env.cell_url("cell1")),
        service_down_time=DOWN_TIME,
    )


def _scheduler_row(env, cell: str, host: str, **kw) -> None:
    now = utcnow()
    row = service_row(
        host,
        binary="nova-scheduler",
        topic="scheduler",
        last_seen_up=now,
        updated_at=now,
        created_at=now,
        **kw,
    )
    with env.cells[cell].begin() as conn:
        conn.execute(models.services.insert().values(**row))


def test_only_the_elected_scheduler_discovers(env, cloud, tmp_path, caplog):
    # novasched's row and a nova-scheduler's that sorts lower, both up
    _scheduler_row(env, cloud.c1, "ctl-2")
    _scheduler_row(env, cloud.c1, "ctl-1")
    ours = HostDiscovery(_conf(env, cloud.c1), "ctl-2", lock_dir=str(tmp_path))
    assert ours.interval == 60.0
    assert ours.run_once() == [] and set(_mappings(env)) == {"old-1", "elsewhere"}
    # the other one stops reporting: novasched leads, and says what it mapped as nova does
    env.update_service(cloud.c1, "ctl-1", last_seen_up=utcnow() - datetime.timedelta(hours=1),
                       updated_at=utcnow() - datetime.timedelta(hours=1))  # fmt: skip
    with caplog.at_level(logging.INFO, logger="scheduler.discovery"):
        assert len(ours.run_once()) == 3
    assert "Discovered 3 new hosts: cell1:new-1,cell1:new-2,cell2:new-3" in caplog.text
    assert set(_mappings(env)) == {"old-1", "elsewhere", "new-1", "new-2", "new-3"}
    assert ours.run_once() == []


def test_a_mapping_made_meanwhile_by_someone_else_is_one_warning(
    env, cloud, tmp_path, caplog, monkeypatch
):
    _scheduler_row(env, cloud.c1, "ctl-1")
    ours = HostDiscovery(_conf(env, cloud.c1), "ctl-1", lock_dir=str(tmp_path))

    def racing(api, cell, engine):
        # nova-manage cell_v2 discover_hosts inserted the mapping after our check
        raise db.HostMappingExists("Host 'new-1' mapping already exists")

    monkeypatch.setattr(db, "discover_cell_hosts", racing)
    with caplog.at_level(logging.DEBUG, logger="scheduler.discovery"):
        assert ours.run_once() == []
        assert ours.run_once() == []
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, caplog.text
    assert "should only be enabled if discover hosts is not run via nova-manage" in (
        warnings[0].message
    )


def test_the_nodes_of_one_host_take_one_mapping(env):
    # an ironic host: nova maps the host with its first node and leaves the others unmapped
    cell = env.add_cell("cell1")
    env.add_host(cell, "ironic-1", mapped=0, hypervisor_hostname="node-a")
    env.add_host(cell, "ironic-1", service=False, mapped=0, hypervisor_hostname="node-b")
    found = discovery.discover_hosts(env.api, db.get_cell_mappings(env.api))
    assert found == [("cell1", "ironic-1")]
    assert _mapped_flags(env, cell) == {"node-a": 1, "node-b": 0}


def test_discovery_is_off_at_nova_s_minus_one(env, cloud, tmp_path):
    off = HostDiscovery(_conf(env, cloud.c1, interval=-1), "ctl-1", lock_dir=str(tmp_path))
    assert off.interval is None
    off.start()
    assert off._thread is None
    # 0: oslo.service's default spacing
    assert HostDiscovery(_conf(env, cloud.c1, interval=0), "x").interval == 60.0
