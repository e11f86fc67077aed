"""The elected scheduler: nova's rule for the one host that does a cloud-wide periodic job.

nova 34's scheduler runs host discovery on one host only: the lowest-sorted ``host`` among
the ``nova-scheduler`` service rows that are up, read from the database of ``[database]
connection`` (nova's main database, where every scheduler keeps its row). novasched keeps
the same row (``servicegroup.py``) and elects with the same rule, for host discovery and for
the capacity gauges.

novasched's row is nova-scheduler's, column for column (binary, topic, version), so that
nova's API and upgrade checks read it as nova's own: an election counts nova's schedulers
and novasched's alike, and cannot tell them apart.
"""

from __future__ import annotations

import datetime
from typing import Any

from oslo_utils import timeutils

import db
from scheduler.hosts.table import service_is_up

BINARY = "nova-scheduler"


def leader(
    rows: list[dict[str, Any]], now: datetime.datetime, service_down_time: float
) -> str | None:
    """The lowest-sorted host of the ``nova-scheduler`` rows that are up (None: none is).
    Up is nova's servicegroup rule: not forced down, heard from within service_down_time; a
    disabled scheduler is up (``service_is_up`` is the compute filter's rule, which a
    disabled service fails)."""
    up = sorted(
        r["host"] for r in rows if service_is_up({**r, "disabled": False}, now, service_down_time)
    )
    return up[0] if up else None


def read_leader(url: str, service_down_time: float) -> str | None:
    """The elected host now, from the services rows of the database at ``url`` (None: no
    scheduler's row is up). A database error is raised to the caller."""
    rows = db.get_service_rows(db.get_engine(url), BINARY)
    return leader(rows, timeutils.utcnow(), service_down_time)
