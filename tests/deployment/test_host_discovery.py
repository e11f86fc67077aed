"""Host discovery on the elected scheduler (nova 34's ``[scheduler]
discover_hosts_in_cells_interval``), with nova's own ``nova-manage cell_v2 discover_hosts`` as
the reference.

novasched is restarted with the periodic on (an extra config file after nova.conf, which only
novasched reads) and put back on the suite's nova.conf afterwards. Each test starts
nova-computes no other test knows, each in an availability zone of its own, and removes them
as an operator would: its servers deleted, the process stopped, ``DELETE /os-services/{id}``
(which in nova 34 also removes the compute node, the host mapping, the aggregate membership
and the Placement provider), then the aggregate.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from scheduler.servicegroup import NOVA_SERVICE_VERSION
from tests.deployment.deployment import ApiError, ComputeSpec, Deployment, wait_for
from tests.functional.fixtures_placement import _mariadb_connect

pytestmark = [pytest.mark.functional, pytest.mark.timeout(600)]

# seconds between discoveries while these tests run (nova's spacing of 0 would be 60 s)
INTERVAL = 4
# how late a discovery may come past its interval on a loaded 2-core machine: well below
# the 60 s the default spacing would take, so a mapping within it is the periodic's doing
MARGIN = 20
SCHEDULER_HOST = "dep-control"  # [DEFAULT] host of the deployment's nova.conf
# a nova-scheduler host that sorts before novasched's
FAKE_LEADER = "aaa-nova-scheduler"
SKIP_LINE = f"Current leader is {FAKE_LEADER}, skipping discover hosts on {SCHEDULER_HOST}"


# -- databases ----------------------------------------------------------------------------
def _rows(cloud: Deployment, database: str, sql: str, args: tuple[Any, ...] = ()) -> list[dict]:
    """Rows of one of the deployment's databases (``api``, ``cell0``, ``cell1``) as dicts."""
    conn = _mariadb_connect(cloud.databases[database])
    try:
        with conn.cursor() as cur:
            cur.execute(sql, args or None)
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    finally:
        conn.close()


def _host_mapping(cloud: Deployment, host: str) -> dict[str, Any] | None:
    """The API database's host mapping of ``host`` with its cell's name and uuid."""
    rows = _rows(
        cloud,
        "api",
        "SELECT hm.id, hm.host, hm.cell_id, hm.created_at, hm.updated_at,"
        " cm.name AS cell_name, cm.uuid AS cell_uuid"
        " FROM host_mappings hm JOIN cell_mappings cm ON cm.id = hm.cell_id"
        " WHERE hm.host = %s",
        (host,),
    )
    return rows[0] if rows else None


def _compute_node(cloud: Deployment, host: str) -> dict[str, Any] | None:
    """cell1's live compute node row of ``host``."""
    rows = _rows(
        cloud,
        "cell1",
        "SELECT id, uuid, host, mapped, updated_at FROM compute_nodes"
        " WHERE host = %s AND deleted = 0",
        (host,),
    )
    return rows[0] if rows else None


def _mapped(cloud: Deployment, host: str) -> dict[str, Any] | None:
    """The host mapping of ``host`` once it exists and its compute node says mapped = 1."""
    mapping = _host_mapping(cloud, host)
    node = _compute_node(cloud, host)
    if mapping is None or node is None or node["mapped"] != 1:
        return None
    return mapping


def _cell1(cloud: Deployment) -> dict[str, Any]:
    (cell,) = _rows(cloud, "api", "SELECT id, uuid FROM cell_mappings WHERE name = 'cell1'")
    return cell


def _db_now(cloud: Deployment) -> Any:
    """MariaDB's UTC now (what nova's timestamps are compared with)."""
    return _rows(cloud, "api", "SELECT UTC_TIMESTAMP() AS now")[0]["now"]


# -- nova-manage --------------------------------------------------------------------------
def _list_hosts(cloud: Deployment) -> dict[str, tuple[str, str]]:
    """``nova-manage cell_v2 list_hosts``: host -> (cell name, cell uuid)."""
    out = cloud.nova_manage("cell_v2", "list_hosts")
    listed = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 3 and cells[0] != "Cell Name":
            name, cell_uuid, host = cells
            listed[host] = (name, cell_uuid)
    return listed


def _assert_nothing_left_to_map(cloud: Deployment) -> None:
    """nova's own discover_hosts finds no unmapped compute in cell1."""
    out = cloud.nova_manage("cell_v2", "discover_hosts", "--verbose")
    assert "Creating host mapping" not in out, out
    assert f"Found 0 unmapped computes in cell: {_cell1(cloud)['uuid']}" in out, out


# -- novasched and its log ----------------------------------------------------------------
class LogWatch:
    """novasched's log from the moment the watch was made."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = path.stat().st_size if path.exists() else 0

    def text(self) -> str:
        with open(self.path, "rb") as fh:
            fh.seek(self.offset)
            return fh.read().decode(errors="replace")

    def lines(self, needle: str) -> list[str]:
        return [ln for ln in self.text().splitlines() if needle in ln]


@contextmanager
def discovering_novasched(cloud: Deployment, *, debug: bool = False) -> Iterator[None]:
    """novasched restarted with host discovery every INTERVAL seconds (and debug logging),
    restarted on the suite's nova.conf alone afterwards, whatever happened."""
    extra = cloud.run_dir / "novasched-discovery.conf"
    text = f"[scheduler]\ndiscover_hosts_in_cells_interval = {INTERVAL}\n"
    if debug:
        text = f"[DEFAULT]\ndebug = true\n{text}"
    extra.write_text(text)
    cloud.stop_novasched()
    try:
        cloud.start_novasched(extra_config=extra)
        yield
    finally:
        cloud.stop_novasched()
        cloud.start_novasched()


class FakeScheduler:
    """A ``nova-scheduler`` services row of another host in the database of ``[database]
    connection``, kept up as a running nova-scheduler keeps its row (its db servicegroup
    driver's heartbeat, here every second) until ``down()``."""

    def __init__(self, cloud: Deployment, host: str):
        self.cloud = cloud
        self.host = host
        self.uuid = str(uuid.uuid4())
        self.row_id: int | None = None
        self.beats = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _execute(self, sql: str, args: tuple[Any, ...]) -> int:
        conn = _mariadb_connect(self.cloud.databases["cell1"])
        try:
            with conn.cursor() as cur:
                cur.execute(sql, args)
                return cur.lastrowid or cur.rowcount
        finally:
            conn.close()

    def __enter__(self) -> FakeScheduler:
        self.row_id = self._execute(
            "INSERT INTO services (created_at, updated_at, host, `binary`, topic, report_count,"
            " disabled, deleted, last_seen_up, forced_down, version, uuid) VALUES"
            " (UTC_TIMESTAMP(), UTC_TIMESTAMP(), %s, 'nova-scheduler', 'scheduler', 1, 0, 0,"
            " UTC_TIMESTAMP(), 0, %s, %s)",
            (self.host, NOVA_SERVICE_VERSION, self.uuid),
        )
        self._thread = threading.Thread(target=self._beat, name="fake-scheduler", daemon=True)
        self._thread.start()
        return self

    def _beat(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self._execute(
                    "UPDATE services SET last_seen_up = UTC_TIMESTAMP(), updated_at ="
                    " UTC_TIMESTAMP(), report_count = report_count + 1 WHERE id = %s",
                    (self.row_id,),
                )
                self.beats += 1
            except Exception as exc:  # report it, keep beating
                self.errors.append(repr(exc))

    def _stop_beating(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None

    def down(self) -> None:
        """Stop heartbeating, and date the last heartbeat back past service_down_time (20 s
        in the suite), as if it had stopped a minute ago."""
        self._stop_beating()
        self._execute(
            "UPDATE services SET last_seen_up = UTC_TIMESTAMP() - INTERVAL 60 SECOND,"
            " updated_at = UTC_TIMESTAMP() - INTERVAL 60 SECOND WHERE id = %s",
            (self.row_id,),
        )

    def __exit__(self, *exc: object) -> None:
        self._stop_beating()
        if self.row_id is None:
            return
        # as an operator removes a scheduler that is gone
        try:
            self.cloud.admin.delete(f"/os-services/{self.uuid}", ok=(204, 404))
        finally:
            self._execute("DELETE FROM services WHERE id = %s", (self.row_id,))
        listed = self.cloud.admin.get("/os-services?binary=nova-scheduler")["services"]
        assert [s["host"] for s in listed] == [SCHEDULER_HOST], listed


# -- computes of these tests alone ---------------------------------------------------------
@dataclass
class LateCompute:
    """A nova-compute started by a test, alone in availability zone ``az``."""

    host: str
    az: str
    node_seen: float = 0.0  # time.monotonic() when its compute node row was first seen
    aggregate: int | None = None
    server_ids: list[str] = field(default_factory=list)


def _provider(cloud: Deployment, host: str) -> list[dict[str, Any]]:
    return cloud.placement_api.get(f"/resource_providers?name={host}")["resource_providers"]


def _services(cloud: Deployment, host: str) -> list[dict[str, Any]]:
    return cloud.admin.get(f"/os-services?binary=nova-compute&host={host}")["services"]


@contextmanager
def late_compute(cloud: Deployment, name: str) -> Iterator[LateCompute]:
    """Start a new nova-compute (fake driver) and wait for its compute node row and its
    Placement provider, then put it alone in an availability zone (nova-api mirrors the
    aggregate into Placement only for a provider that exists); on the way out remove it all
    as nova does and check nothing of it is left."""
    host = f"dep-{name}-{uuid.uuid4().hex[:6]}"
    late = LateCompute(host, f"az-{host}")
    cloud.start_compute(ComputeSpec(host, "fake.FakeDriverWithoutFakeNodes", 16384))
    try:
        wait_for(f"{host}'s compute node", lambda: _compute_node(cloud, host), 180, 0.2)
        late.node_seen = time.monotonic()
        wait_for(f"{host}'s resource provider", lambda: _provider(cloud, host), 120, 0.5)
        body = {"aggregate": {"name": f"late-{host}", "availability_zone": late.az}}
        late.aggregate = cloud.admin.post("/os-aggregates", body)["aggregate"]["id"]
        cloud.admin.post(f"/os-aggregates/{late.aggregate}/action", {"add_host": {"host": host}})
        yield late
    finally:
        _remove(cloud, late)


def _remove(cloud: Deployment, late: LateCompute) -> None:
    host = late.host
    for server_id in late.server_ids:
        cloud.admin.delete(f"/servers/{server_id}", ok=(204, 404))

    def gone(server_id: str) -> bool:
        try:
            cloud.admin.get(f"/servers/{server_id}")
        except ApiError as exc:
            return exc.status == 404
        return False

    wait_for(f"{host}'s servers to be deleted", lambda: all(map(gone, late.server_ids)), 90, 0.5)
    cloud.stop_compute(host)
    for svc in _services(cloud, host):
        cloud.admin.delete(f"/os-services/{svc['id']}", ok=(204,))
    if late.aggregate is not None:
        agg = cloud.admin.get(f"/os-aggregates/{late.aggregate}")["aggregate"]
        assert agg["hosts"] == [], agg  # nova's service delete took the host out
        cloud.admin.delete(f"/os-aggregates/{late.aggregate}")
    # as nova's service delete leaves it: nothing of the host anywhere
    assert _services(cloud, host) == []
    assert _compute_node(cloud, host) is None
    assert _host_mapping(cloud, host) is None
    assert _provider(cloud, host) == []


def _mapping_like_novas(ours: dict[str, Any], novas: dict[str, Any]) -> None:
    """Host mapping rows made the same way: same cell, created_at set (UTC), updated_at
    unset, each for its own host."""

    def shape(row: dict[str, Any]) -> tuple:
        return (row["cell_id"], row["cell_name"], row["created_at"] is not None, row["updated_at"])

    assert shape(ours) == shape(novas), (ours, novas)


# -- tests --------------------------------------------------------------------------------
def test_a_compute_started_after_the_scheduler_is_mapped_within_the_interval(
    deployment: Deployment,
):
    cloud = deployment
    flavor = cloud.flavor("small")
    cell1 = _cell1(cloud)
    log = LogWatch(cloud.log("novasched"))
    with discovering_novasched(cloud), late_compute(cloud, "late") as late:
        mapping = wait_for(
            f"novasched to map {late.host} within {INTERVAL} s (+{MARGIN} s)",
            lambda: _mapped(cloud, late.host),
            INTERVAL + MARGIN,
            0.2,
        )
        took = time.monotonic() - late.node_seen
        assert (mapping["host"], mapping["cell_id"], mapping["cell_name"]) == (
            late.host,
            cell1["id"],
            "cell1",
        )
        (line,) = wait_for(
            "novasched's discovery log line",
            lambda: log.lines(f"Discovered 1 new hosts: cell1:{late.host}"),
            10,
            0.3,
        )
        assert " INFO " in line, line
        # nova made its created_at in UTC: so did novasched
        assert abs((_db_now(cloud) - mapping["created_at"]).total_seconds()) < 300, mapping

        # schedulable: a boot into its zone goes there
        server = cloud.boot_and_wait(flavor, name="after-discovery", az=late.az)
        late.server_ids.append(server["id"])
        cloud.expect_active(server, {late.host})
        assert cloud.host_allocations_match(server)

        # nova's own discover_hosts finds nothing left, and lists the host as novasched
        # mapped it, beside the computes nova-manage mapped when the suite started
        _assert_nothing_left_to_map(cloud)
        listed = _list_hosts(cloud)
        assert listed[late.host] == ("cell1", cell1["uuid"]) == listed["dep-c1"], listed
        _mapping_like_novas(mapping, _host_mapping(cloud, "dep-c1"))
    print(f"\n{late.host} mapped {took:.1f} s after its compute node appeared")


def test_a_lower_scheduler_that_is_up_leads_discovery_until_it_is_down(
    nova_deployment: Deployment,
):
    # once, in whichever configuration novasched runs (discovery does not depend on it)
    cloud = nova_deployment
    log = LogWatch(cloud.log("novasched"))
    with (
        FakeScheduler(cloud, FAKE_LEADER) as leader,
        discovering_novasched(cloud, debug=True),
        late_compute(cloud, "by-nova") as by_nova,
    ):
        # nova's reference: nova-manage maps the first compute, novasched leaving it alone
        out = cloud.nova_manage("cell_v2", "discover_hosts", "--verbose")
        assert f"Creating host mapping for compute host '{by_nova.host}'" in out, out
        assert f"Found 1 unmapped computes in cell: {_cell1(cloud)['uuid']}" in out, out
        novas = _mapped(cloud, by_nova.host)
        assert novas is not None

        with late_compute(cloud, "led") as late:
            skips = len(log.lines(SKIP_LINE))
            # several intervals: novasched must not map it while the lower scheduler is up
            hold_until = time.monotonic() + 4 * INTERVAL
            while time.monotonic() < hold_until:
                assert _host_mapping(cloud, late.host) is None, f"{late.host} mapped\n{log.text()}"
                assert _compute_node(cloud, late.host)["mapped"] == 0
                time.sleep(0.5)
            assert leader.beats > 0 and not leader.errors, leader.errors
            assert len(log.lines(SKIP_LINE)) - skips >= 2, log.lines("discover")
            assert log.lines("Discovered") == []

            # the lower scheduler is down: novasched leads, and maps it within the interval
            leader.down()
            released = time.monotonic()
            ours = wait_for(
                f"novasched to map {late.host} once {FAKE_LEADER} is down",
                lambda: _mapped(cloud, late.host),
                INTERVAL + MARGIN,
                0.2,
            )
            took = time.monotonic() - released
            found = wait_for(
                "novasched's discovery log line",
                lambda: log.lines(f"Discovered 1 new hosts: cell1:{late.host}"),
                10,
                0.3,
            )
            assert log.lines("Discovered") == found  # (and nothing else discovered)

            # field by field, the row novasched made is the row nova-manage made
            _mapping_like_novas(ours, novas)
            assert ours["host"] == late.host and novas["host"] == by_nova.host
            assert _compute_node(cloud, late.host)["mapped"] == 1
            assert _compute_node(cloud, by_nova.host)["mapped"] == 1
            listed = _list_hosts(cloud)
            assert listed[late.host] == listed[by_nova.host] == ("cell1", ours["cell_uuid"])
            _assert_nothing_left_to_map(cloud)
    print(f"\n{late.host} mapped {took:.1f} s after {FAKE_LEADER} went down")
