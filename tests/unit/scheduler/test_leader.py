"""The elected scheduler, as nova 34 elects its discovery leader: the lowest-sorted host
among the ``nova-scheduler`` service rows that are up."""

from __future__ import annotations

import datetime

import db
from db import models
from scheduler.leader import leader, read_leader
from tests.unit.scheduler.hosts.env import service_row, utcnow

DOWN_TIME = 60


def _row(host: str, seen: datetime.datetime, **kw) -> dict:
    return {
        "host": host,
        "disabled": False,
        "forced_down": False,
        "report_count": 1,
        "created_at": seen,
        "updated_at": seen,
        "last_seen_up": seen,
        **kw,
    }


def test_the_leader_is_the_lowest_host_among_the_schedulers_that_are_up():
    now = utcnow()
    fresh, stale = now - datetime.timedelta(seconds=5), now - datetime.timedelta(minutes=5)
    rows = [_row("sched-b", fresh), _row("sched-a", stale), _row("sched-c", fresh)]
    assert leader(rows, now, DOWN_TIME) == "sched-b"  # sched-a is down
    rows.append(_row("sched-0", fresh, forced_down=True))
    assert leader(rows, now, DOWN_TIME) == "sched-b"
    # a disabled scheduler is still up: it may lead (nova looks at up only)
    rows.append(_row("sched-1", fresh, disabled=True))
    assert leader(rows, now, DOWN_TIME) == "sched-1"
    assert leader([_row("sched-a", stale)], now, DOWN_TIME) is None


def test_a_row_just_created_leads_before_its_first_heartbeat():
    # nova's service start writes no last_seen_up: created_at is the heartbeat until then
    now = utcnow()
    assert leader([_row("sched-a", now, last_seen_up=None)], now, DOWN_TIME) == "sched-a"


def test_the_leader_is_read_from_the_scheduler_rows_of_the_database(tmp_path):
    url = f"sqlite:///{tmp_path}/cell.db"
    db.create_schema(url, "cell")
    now = utcnow()
    scheduler = {"binary": "nova-scheduler", "topic": "scheduler", "last_seen_up": now}
    rows = [
        # a compute and a deleted scheduler sort lower but take no part
        service_row("a-compute", last_seen_up=now),
        service_row("b-old", **scheduler, deleted=1),
        service_row("c-sched", **scheduler),
        service_row("d-sched", **scheduler),
    ]
    with db.get_engine(url).begin() as conn:
        conn.execute(models.services.insert(), rows)
    try:
        assert read_leader(url, DOWN_TIME) == "c-sched"
    finally:
        db.dispose_engines()
