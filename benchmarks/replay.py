"""Replay section: what ``novasched-manage replay`` costs per recorded request.

For each fleet size N: the core section's fleet (one SQLite cell, benchmarks/fleet.py), read
once by a real HostManager, and a provider view holding one provider per compute node (the
capacity section's). ``RECORDS`` recorded boots of the capacity section's twenty flavors, in
nova's wire form as the records keep them, are replayed through a FilterScheduler with the
configured filters and weighers on a ``ReplayFleet`` (private copies of the hosts, the view's
candidates without a limit, claims in the view). Timed: one ``replay`` call, ``repeats``
times, each on a fresh fleet and view (built untimed). No target: the figure tells an
operator how long a replay of a week of records takes.
"""

from __future__ import annotations

import datetime
import random
import statistics
import time
import uuid as uuidlib
from collections.abc import Callable
from typing import Any

from benchmarks.capacity import FLAVORS, view_of
from benchmarks.core import rows_per_size, warmed_driver

RECORDS = {200: 200, 1_000: 200, 10_000: 30}


def _records(hosts: list[Any], count: int, seed: int = 7) -> list[Any]:
    """``count`` recorded boots of one instance each, a minute apart, on random hosts."""
    from scheduler.objects import RequestSpec
    from scheduler.records import SCHEDULED, DecisionRecord
    from scheduler.rpc.wire import request_spec_to_primitive

    rng = random.Random(seed)
    start = datetime.datetime(2026, 11, 1)
    flavors = [f for f in FLAVORS if f.vcpus <= 8]
    out = []
    for i in range(count):
        spec = RequestSpec(flavor=rng.choice(flavors), num_instances=1, project_id="p")
        host = rng.choice(hosts)
        out.append(
            DecisionRecord(
                id=i + 1,
                request_id=f"req-bench-{i}",
                instance_uuids=[str(uuidlib.uuid4())],
                created_at=start + datetime.timedelta(minutes=i),
                outcome=SCHEDULED,
                hosts=[host.host],
                document={
                    "spec": request_spec_to_primitive(spec),
                    "selections": [[{"host": host.host, "node": host.nodename}]],
                },
            )
        )
    return out


def measure_size(
    size: int,
    repeats: int,
    workdir: str,
    *,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    from scheduler.conf import CONF
    from scheduler.drivers.filter_scheduler import FilterScheduler
    from scheduler.replay import Recorded, ReplayFleet, replay
    from scheduler.rpc.wire import request_spec_from_primitive

    count = RECORDS.get(size, 100)
    seconds = []
    counts: dict[str, int] = {}
    with warmed_driver("replay", size, workdir, progress) as base:
        hosts = base.host_manager.get_host_states_by_uuids(None)
        recorded = [Recorded.of(r, request_spec_from_primitive) for r in _records(hosts, count)]
        for _ in range(max(1, repeats)):
            fleet = ReplayFleet(hosts, base.host_manager, view_of(base).view)
            driver = FilterScheduler(
                placement=fleet.placement, host_manager=fleet, view=False, conf=CONF
            )
            started = time.perf_counter()
            report = replay(driver, fleet, recorded)
            seconds.append(time.perf_counter() - started)
            counts = report.counts()
            driver.stop()
    per_request = statistics.median(seconds) / count
    return {
        "hosts": size,
        "records": count,
        "replayed": counts.get("replayed"),
        "seconds_p50": round(statistics.median(seconds), 3),
        "ms_per_request": round(per_request * 1000, 1),
        "minutes_per_10k_records": round(per_request * 10_000 / 60, 1),
    }


def run(
    sizes: list[int],
    repeats: int,
    out: dict[str, Any],
    *,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    return rows_per_size(
        "replay",
        sizes,
        out,
        lambda size, workdir: measure_size(size, repeats, workdir, progress=progress),
    )
