"""Decision records to fill a store with (the unit and the functional tests share them)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from scheduler.records import DecisionRecord

T0 = datetime(2026, 11, 26, 10, 0, 0)


def make_record(
    i: int,
    *,
    at: datetime | None = None,
    hosts: list[str] | None = None,
    instances: list[str] | None = None,
    outcome: str = "scheduled",
    document: dict | None = None,
) -> DecisionRecord:
    """Record ``i``: made ``i`` seconds after T0 unless ``at``, request id ``req-<i>``, one
    new instance, host ``compute-<i mod 3>``."""
    return DecisionRecord(
        request_id=f"req-{i}",
        instance_uuids=instances if instances is not None else [str(uuid.uuid4())],
        created_at=at if at is not None else T0 + timedelta(seconds=i),
        outcome=outcome,
        hosts=hosts if hosts is not None else [f"compute-{i % 3}"],
        document=document if document is not None else {"i": i},
    )
