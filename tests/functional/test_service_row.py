# ruff: noqa: F811 - the fixtures are imported by name, and test arguments reuse those names
"""The scheduler's own ``services`` row on MariaDB with nova's schema, as nova-scheduler keeps
it: created at start with nova 34's values, heartbeats every ``report_interval``, reused on
a restart, forced_down left to the operator, a database outage survived, and nova's own
Service object and servicegroup API (nova 34, in its venv) seeing the row up while the
scheduler runs and down once it stopped."""

from __future__ import annotations

import logging
import time
import uuid

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

import db
from db import models
from scheduler import exceptions
from scheduler.conf import CONF
from scheduler.rpc import transport as sched_rpc
from scheduler.rpc.service import SchedulerService
from scheduler.servicegroup import NOVA_SERVICE_VERSION, Heartbeat
from tests.faults.proxy import FaultProxy
from tests.functional.fixtures_db import mariadb_db  # noqa: F401  (pytest fixture)
from tests.functional.fixtures_nova import _run_nova_side, nova_python  # noqa: F401

# nova's judgement in the probe: a heartbeat older than this is down
DOWN_TIME = 3


class StubDriver:
    """A driver that schedules nothing: these tests are about the services row."""

    def reset(self) -> None:
        pass

    def stop(self) -> None:
        pass


@pytest.fixture
def cell_url(mariadb_db):
    db.create_schema(mariadb_db, "cell")
    yield mariadb_db
    db.dispose_engines()


def _rows(url: str, host: str) -> list[dict]:
    t = models.services
    with db.get_engine(url).connect() as conn:
        stmt = sa.select(t).where(t.c.host == host).order_by(t.c.id)
        return [dict(r._mapping) for r in conn.execute(stmt)]


def _row(url: str, host: str) -> dict:
    rows = _rows(url, host)
    assert len(rows) == 1, rows
    return rows[0]


def _set(url: str, row_id: int, **values) -> None:
    t = models.services
    with db.get_engine(url).begin() as conn:
        conn.execute(t.update().where(t.c.id == row_id).values(**values))


def _wait_for(what: str, predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


def _service(host: str) -> SchedulerService:
    transport = sched_rpc.get_transport(CONF, url="fake://")
    return SchedulerService(CONF, StubDriver(), transport=transport, host=host)


def _nova_state(python, url: str, host: str) -> dict:
    return _run_nova_side(
        python,
        "service_state.py",
        {"op": "state", "url": url, "host": host, "service_down_time": DOWN_TIME},
    )


def test_start_creates_novas_row_which_nova_sees_up_then_down_after_stop(cell_url, nova_python):
    host = f"sched-{uuid.uuid4().hex[:8]}"
    CONF.set_override("connection", cell_url, group="database")
    CONF.set_override("report_interval", 1)
    service = _service(host)
    service.start()
    try:
        row = _row(cell_url, host)
        # what nova's Service.create writes; the rest are the schema's defaults
        assert row["binary"] == "nova-scheduler" and row["topic"] == "scheduler"
        assert row["version"] == NOVA_SERVICE_VERSION == 74
        assert str(uuid.UUID(row["uuid"])) == row["uuid"]
        assert row["report_count"] == 0 and row["last_seen_up"] is None
        assert row["disabled"] in (False, 0) and row["forced_down"] in (False, 0)
        assert row["deleted"] == 0 and row["created_at"] is not None
        _wait_for("two heartbeats", lambda: _row(cell_url, host)["report_count"] >= 2)
        beat = _row(cell_url, host)
        assert beat["last_seen_up"] is not None and beat["updated_at"] is not None
        assert beat["last_seen_up"] >= row["created_at"]
        seen = _nova_state(nova_python, cell_url, host)
        assert seen["found"] and seen["up"], seen
        assert (seen["uuid"], seen["version"], seen["topic"]) == (row["uuid"], 74, "scheduler")
    finally:
        service.stop(graceful=False)
    assert service.heartbeat is None
    stopped = _row(cell_url, host)
    time.sleep(DOWN_TIME + 1.5)
    # no heartbeat after stop; the row stays, and nova now says it is down
    assert _row(cell_url, host)["report_count"] == stopped["report_count"]
    seen = _nova_state(nova_python, cell_url, host)
    assert seen["found"] and not seen["up"], seen


def test_restart_reuses_the_row_and_brings_its_version_to_novas(cell_url):
    host = f"sched-{uuid.uuid4().hex[:8]}"
    first = Heartbeat(CONF, host, url=cell_url, interval=0.2, initial_delay=0.1)
    first.start()
    _wait_for("a heartbeat", lambda: _row(cell_url, host)["report_count"] >= 1)
    first.stop()
    before = _row(cell_url, host)
    _set(cell_url, before["id"], version=70)  # as an older scheduler would have left it
    second = Heartbeat(CONF, host, url=cell_url, interval=0.2, initial_delay=0.1)
    second.start()
    try:
        assert second.service_id == before["id"] and second.service_uuid == before["uuid"]
        assert _row(cell_url, host)["version"] == NOVA_SERVICE_VERSION
        count = before["report_count"]
        _wait_for("the count to go on", lambda: _row(cell_url, host)["report_count"] > count)
    finally:
        second.stop()
    assert len(_rows(cell_url, host)) == 1


def test_forced_down_is_left_to_the_operator_and_nova_sees_it_down(cell_url, nova_python):
    host = f"sched-{uuid.uuid4().hex[:8]}"
    beat = Heartbeat(CONF, host, url=cell_url, interval=0.3, initial_delay=0.1)
    beat.start()
    try:
        row_id = beat.service_id
        _set(cell_url, row_id, forced_down=True, disabled=True, disabled_reason="maintenance")
        count = _row(cell_url, host)["report_count"]
        # nova's db driver goes on reporting a forced-down service, and never resets the flag
        _wait_for("heartbeats", lambda: _row(cell_url, host)["report_count"] >= count + 2)
        row = _row(cell_url, host)
        assert row["forced_down"] in (True, 1) and row["disabled"] in (True, 1)
        assert row["disabled_reason"] == "maintenance"
        seen = _nova_state(nova_python, cell_url, host)
        assert seen["forced_down"] and not seen["up"], seen
        _set(cell_url, row_id, forced_down=False)
        seen = _nova_state(nova_python, cell_url, host)
        assert seen["up"], seen
    finally:
        beat.stop()


def test_a_database_outage_does_not_stop_the_heartbeats(cell_url, caplog):
    host = f"sched-{uuid.uuid4().hex[:8]}"
    parsed = make_url(cell_url)
    with FaultProxy(parsed.host, parsed.port or 3306) as proxy:
        url = parsed.set(port=proxy.port).render_as_string(hide_password=False)
        beat = Heartbeat(CONF, host, url=url, interval=0.2, initial_delay=0.1)
        with caplog.at_level(logging.INFO, logger="scheduler.servicegroup"):
            beat.start()
            try:
                _wait_for("a heartbeat", lambda: beat.reports >= 1)
                proxy.cut()
                _wait_for(
                    "the lost-connection warning",
                    lambda: any("Lost connection" in r.getMessage() for r in caplog.records),
                )
                time.sleep(1.0)  # several failed ticks
                assert beat.running
                reports = beat.reports
                proxy.restore()
                _wait_for("heartbeats again", lambda: beat.reports >= reports + 2)
            finally:
                beat.stop()
    messages = [r.getMessage() for r in caplog.records]
    # one warning for the whole outage, one recovery
    assert sum("Lost connection" in m for m in messages) == 1
    assert sum("Recovered from being unable to report status" in m for m in messages) == 1
    assert _row(cell_url, host)["report_count"] == beat.reports


def test_workers_of_one_host_share_one_row(cell_url):
    host = f"sched-{uuid.uuid4().hex[:8]}"
    beats = [Heartbeat(CONF, host, url=cell_url, interval=0.2, initial_delay=0.1) for _ in "ab"]
    for beat in beats:
        beat.start()
    try:
        assert beats[0].service_id == beats[1].service_id
        _wait_for("both workers' heartbeats", lambda: min(b.reports for b in beats) >= 2)
    finally:
        for beat in beats:
            beat.stop()
    # the count is incremented in SQL: no worker writes back another's count
    assert _row(cell_url, host)["report_count"] == sum(b.reports for b in beats)


def test_a_row_deleted_through_the_api_is_not_recreated(cell_url, caplog):
    host = f"sched-{uuid.uuid4().hex[:8]}"
    beat = Heartbeat(CONF, host, url=cell_url, interval=0.2, initial_delay=0.1)
    beat.start()
    try:
        # nova's service delete: a soft delete
        _set(cell_url, beat.service_id, deleted=beat.service_id)
        with caplog.at_level(logging.ERROR, logger="scheduler.servicegroup"):
            _wait_for(
                "the error",
                lambda: any("is gone" in r.getMessage() for r in caplog.records),
            )
            time.sleep(0.6)
        assert beat.running
        assert sum("is gone" in r.getMessage() for r in caplog.records) == 1
    finally:
        beat.stop()
    assert [r["deleted"] for r in _rows(cell_url, host)] == [_rows(cell_url, host)[0]["id"]]


def test_without_a_database_connection_one_warning_and_no_row(caplog):
    with caplog.at_level(logging.WARNING, logger="scheduler.servicegroup"):
        beat = Heartbeat(CONF, "sched-none", url="")
        beat.start()
    assert not beat.running and beat.service_id is None
    assert [r.getMessage() for r in caplog.records if "[database] connection" in r.getMessage()]


def test_memcached_servicegroup_driver_refuses_to_start():
    CONF.set_override("servicegroup_driver", "mc")
    service = _service("sched-mc")
    with pytest.raises(exceptions.ConfigurationError) as err:
        service.start()
    message = str(err.value)
    assert "servicegroup_driver = mc" in message and "servicegroup_driver = db" in message
    assert "services table" in message
    assert not service.serving
