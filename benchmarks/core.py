"""Core section: the scheduler's own per-request cost, without Placement or a broker.

For each fleet size N: a fleet of N compute nodes in one SQLite cell (benchmarks/fleet.py), a
real HostManager, and the handlers of a real FilterScheduler (the configured filters and
weighers: nova's defaults and all weighers unless the configuration says otherwise). Every
compute node is a candidate, as if Placement had returned them all (an AZ request gets the
hosts of its AZ, as Placement's member_of would). Per request, timed separately:

- refresh: ``HostManager.get_host_states_by_uuids`` (compute-node rows changed since the last
  read, plus the instance lists when the request has a server group; service rows are read
  by the host manager's refresher thread, as in the service, which competes for the CPU),
- filter: ``FilterHandler.run``,
- weigh: ``WeightHandler.weigh``,

and their sum. Between requests the fleet changes as a live one does: 0.1 % of the compute
nodes write new usage, and services heartbeat at nova's rate (each every 10 s of wall time).
The chosen host consumes the request, as the driver does after a claim. The instance lists
are in the steady state of a live cell (seeded at start-up and confirmed by every compute's
periodic sync_instance_info), so a server-group request reads no instances from the database.

"Refresh, nothing changed" is measured after the fleet has been quiet for longer than the
host manager's read window, so the read finds no row.

To tell where a tail comes from, each row also gives the first request's total (it builds the
host table's columns the filters and weighers use: the cold start of every new process), the
cyclic garbage collector's collections during the requests (any thread's), and the load
average before and after: on a machine shared with other work, the slowest requests are
mostly ones that waited for a CPU.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import shutil
import statistics
import tempfile
import time
import uuid as uuidlib
from collections.abc import Callable, Iterator
from typing import Any

import db
from benchmarks import fleet as fleet_mod
from benchmarks.report import percentile
from scheduler.objects import Flavor, ImageMeta, InstanceGroup, RequestSpec

LOG = logging.getLogger(__name__)

# target per-request total (p50) in ms, and nova 34's numbers (HostStates, filter+weigh, total)
TARGETS_MS = {10_000: 20.0, 100_000: 250.0}
NOTHING_CHANGED_TARGET_MS = {10_000: 2.0}
NOVA_MS = {
    1_000: (110.0, 70.0, 180.0),
    10_000: (1_400.0, 900.0, 2_300.0),
    100_000: (13_800.0, 10_000.0, 24_000.0),
}
COMPUTE_NODE_CHANGE_FRACTION = 0.001
KINDS = ("plain", "az", "anti-affinity", "capability")


def summarize(values: list[float]) -> dict[str, float]:
    """Median and p99 in ms of durations given in seconds."""
    return {
        "p50": round(statistics.median(values) * 1000, 3),
        "p99": round(percentile(values, 99) * 1000, 3),
    }


class _GCWatch:
    """The cyclic GC's collections while it is installed (from any thread): per generation,
    how many, and the longest and total pause."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.longest = [0.0, 0.0, 0.0]
        self.total = [0.0, 0.0, 0.0]
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        gen = info["generation"]
        took = time.perf_counter() - self._started
        self.count[gen] += 1
        self.longest[gen] = max(self.longest[gen], took)
        self.total[gen] += took

    def summary(self, requests: int) -> dict[str, Any]:
        return {
            "collections": {f"gen{g}": self.count[g] for g in range(3)},
            "longest_ms": {f"gen{g}": round(self.longest[g] * 1000, 2) for g in range(3)},
            "total_ms_per_request": round(sum(self.total) * 1000 / max(1, requests), 3),
        }


def _load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def ensure_conf(conf: Any) -> None:
    """Parse an empty command line once, so that the options have their defaults."""
    try:
        conf.scheduler.aggregate_cache_ttl  # noqa: B018 - raises if not parsed yet
    except Exception:
        conf([], project="nova", default_config_files=[])


def make_request(kind: str, bench: fleet_mod.BenchFleet, i: int) -> tuple[RequestSpec, list[str]]:
    """The ``i``-th request of ``kind`` and its candidate compute uuids."""
    flavor = Flavor(memory_mb=4096, vcpus=2, root_gb=40, name="bench.medium", flavorid="b2")
    spec = RequestSpec(
        flavor=flavor,
        project_id=fleet_mod.PROJECT_ID,
        user_id=fleet_mod.USER_ID,
        image=ImageMeta(id="bench-image", properties={"hw_architecture": "x86_64"}),
        instance_uuid=str(uuidlib.uuid4()),
    )
    candidates = bench.compute_uuids
    if kind == "az":
        az = fleet_mod.AZS[i % len(fleet_mod.AZS)]
        spec.availability_zone = az
        candidates = bench.az_members[az]
    elif kind == "anti-affinity":
        groups = [g for g in bench.groups if g.policy == "anti-affinity"] or bench.groups
        group = groups[i % len(groups)]
        spec.instance_group = InstanceGroup(
            uuid=group.uuid,
            policy="anti-affinity",
            members=list(group.members),
            hosts=list(group.hosts),
        )
    elif kind == "capability":
        flavor.extra_specs = {"capabilities:storage": "ssd", "capabilities:gpu": "none"}
    return spec, candidates


# The first whole read of 100k hosts takes about 11 s, beyond the default [scheduler]
# cell_timeout (10 s): the request would skip the cell. The benchmark waits for it.
BENCH_CELL_TIMEOUT = 600.0


@contextlib.contextmanager
def warmed_driver(
    section: str, size: int, workdir: str, progress: Callable[[str], None] | None = None
) -> Iterator[Any]:
    """The core fleet of ``size`` hosts, built under ``workdir``, and a ``make_driver``
    driver whose host manager has read it (stopped on the way out): what the capacity and
    replay sections measure on."""
    from scheduler.conf import CONF

    ensure_conf(CONF)
    bench = fleet_mod.build(size, os.path.join(workdir, f"{section}-{size}"))
    if progress is not None:
        progress(f"{section} {size}: fleet built in {bench.build_seconds:.1f} s")
    driver = make_driver(bench.api_url, CONF)
    try:
        driver.host_manager.warm_up()
        yield driver
    finally:
        driver.host_manager.stop()


def rows_per_size(
    section: str,
    sizes: list[int],
    out: dict[str, Any],
    measure: Callable[[int, str], dict[str, Any]],
) -> dict[str, Any]:
    """``out["rows"]``: ``measure(size, workdir)`` for each size, in a work directory of the
    section's that is removed afterwards."""
    workdir = tempfile.mkdtemp(prefix=f"novasched-bench-{section}-")
    out.setdefault("rows", [])
    try:
        for size in sizes:
            out["rows"].append(measure(size, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return out


def make_driver(api_url: str, conf: Any) -> Any:
    """A FilterScheduler on the fleet whose API database is ``api_url``, without Placement
    (the core and memory sections hand the candidates over themselves)."""
    from scheduler.drivers.filter_scheduler import FilterScheduler
    from scheduler.hosts.manager import HostManager

    if conf.scheduler.cell_timeout < BENCH_CELL_TIMEOUT:
        conf.set_override("cell_timeout", BENCH_CELL_TIMEOUT, group="scheduler")

    host_manager = HostManager(conf, api_engine=db.get_engine(api_url))
    return FilterScheduler(placement=object(), host_manager=host_manager, conf=conf)


def sync_instances(driver: Any, bench: fleet_mod.BenchFleet) -> None:
    """The steady state of a live cell: the instance lists read at start-up (nova's
    ``_init_instance_info``) and confirmed by every compute's periodic ``sync_instance_info``
    (every 120 s), so server-group requests need not read instances from the database."""
    driver.host_manager.instance_tracker.seed(bench.instances_by_host)
    for host, uuids in bench.instances_by_host.items():
        driver.sync_instance_info(host, uuids)


def measure_size(
    size: int,
    repeats: int,
    workdir: str,
    *,
    conf: Any = None,
    quiet_seconds: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Build a fleet of ``size`` hosts and time ``repeats`` requests against it."""
    from scheduler.conf import CONF
    from scheduler.hosts import manager as hm_mod

    conf = conf or CONF
    ensure_conf(conf)
    say = progress or (lambda _msg: None)
    bench = fleet_mod.build(size, os.path.join(workdir, f"core-{size}"))
    say(f"core {size}: fleet built in {bench.build_seconds:.1f} s")
    driver = make_driver(bench.api_url, conf)
    hm = driver.host_manager
    gc_watch = _GCWatch()
    try:
        # as the service starts: every cell read whole before the first request, then the
        # refresher thread keeps the service rows current off the request path
        t0 = time.perf_counter()
        loaded = hm.warm_up()
        initial_load = time.perf_counter() - t0
        if loaded != size:
            raise RuntimeError(f"the first read found {loaded} of {size} hosts")
        hm.start_refresher()
        driver.warm_up_plugins()  # as FilterScheduler.prepare does
        sync_instances(driver, bench)

        timings: dict[str, list[float]] = {"refresh": [], "filter": [], "weigh": [], "total": []}
        by_kind: dict[str, list[float]] = {k: [] for k in KINDS}
        pass_ratio: dict[str, list[float]] = {k: [] for k in KINDS}
        changed_nodes = max(1, round(size * COMPUTE_NODE_CHANGE_FRACTION))
        beats = 0
        # the candidates as the driver hands them over: the keys of Placement's provider
        # summaries (a dict decoded from Placement's answer, not the scheduler's time)
        summaries: dict[int, Any] = {}
        load_before = _load_average()
        gc.callbacks.append(gc_watch)
        bench.heartbeat(0)  # start the heartbeat clock now
        for i in range(repeats):
            kind = KINDS[i % len(KINDS)]
            spec, candidates = make_request(kind, bench, i // len(KINDS))
            candidates = summaries.setdefault(id(candidates), dict.fromkeys(candidates).keys())
            bench.touch_compute_nodes(changed_nodes)
            beats += bench.heartbeat()
            t0 = time.perf_counter()
            hosts = hm.get_host_states_by_uuids(candidates, spec)
            t1 = time.perf_counter()
            report = driver.filter_handler.run(hosts, spec, 0)
            t2 = time.perf_counter()
            # what the driver does: the order and weights, no WeighedHost per host
            ordered, _weights = driver.weight_handler.rank(report.hosts, spec)
            t3 = time.perf_counter()
            if ordered:
                ordered[0].consume_from_request(spec)
            timings["refresh"].append(t1 - t0)
            timings["filter"].append(t2 - t1)
            timings["weigh"].append(t3 - t2)
            timings["total"].append(t3 - t0)
            by_kind[kind].append(t3 - t0)
            pass_ratio[kind].append(len(report.hosts) / max(1, len(hosts)))
        gc.callbacks.remove(gc_watch)
        load_after = _load_average()

        # quiet: no writes for longer than the read window, then one read that sees the last
        # writes; the reads after it find nothing
        wait = quiet_seconds
        if wait is None:
            wait = hm_mod.WATERMARK_SLACK.total_seconds() + 0.5
        time.sleep(wait)
        every = dict.fromkeys(bench.compute_uuids).keys()
        hm.get_host_states_by_uuids(every)
        quiet: list[float] = []
        for _ in range(max(5, repeats)):
            t0 = time.perf_counter()
            hm.get_host_states_by_uuids(every)
            quiet.append(time.perf_counter() - t0)
    finally:
        if gc_watch in gc.callbacks:
            gc.callbacks.remove(gc_watch)
        conf.clear_override("cell_timeout", group="scheduler")
        driver.stop()
        bench.close()
        db.dispose_engines()
        shutil.rmtree(bench.directory, ignore_errors=True)

    row: dict[str, Any] = {
        "hosts": size,
        "requests": repeats,
        "fleet_build_s": round(bench.build_seconds, 2),
        "initial_load_ms": round(initial_load * 1000, 1),
        "refresh_ms": summarize(timings["refresh"]),
        "filter_ms": summarize(timings["filter"]),
        "weigh_ms": summarize(timings["weigh"]),
        "total_ms": summarize(timings["total"]),
        "by_kind_total_ms": {k: summarize(v) for k, v in by_kind.items() if v},
        "first_request_ms": round(timings["total"][0] * 1000, 3) if timings["total"] else None,
        "gc_during_requests": gc_watch.summary(repeats),
        "load_average": {"before": load_before, "after": load_after},
        "pass_ratio": {k: round(statistics.mean(v), 3) for k, v in pass_ratio.items() if v},
        "refresh_nothing_changed_ms": summarize(quiet),
        "changes_per_request": {
            "compute_nodes": changed_nodes,
            "service_heartbeats": round(beats / max(1, repeats), 1),
        },
        "filters": [f.name for f in driver.filter_handler.filters],
        "weighers": [getattr(w, "name", type(w).__name__) for w in driver.weight_handler.weighers],
    }
    target = TARGETS_MS.get(size)
    if target is not None:
        row["target_total_p50_ms"] = target
        row["pass"] = row["total_ms"]["p50"] <= target
    quiet_target = NOTHING_CHANGED_TARGET_MS.get(size)
    if quiet_target is not None:
        row["target_nothing_changed_p50_ms"] = quiet_target
        row["pass_nothing_changed"] = row["refresh_nothing_changed_ms"]["p50"] <= quiet_target
    nova = NOVA_MS.get(size)
    if nova is not None:
        row["nova_ms"] = {"host_states": nova[0], "filter_weigh": nova[1], "total": nova[2]}
    return row


def run(
    sizes: list[int],
    repeats: int,
    out: dict[str, Any],
    *,
    workdir: str | None = None,
    quiet_seconds: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Measure every size; fill ``out`` (JSON-able) and return it."""
    own = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="novasched-bench-")
    out.setdefault("rows", [])
    out["repeats"] = repeats
    out["request_mix"] = list(KINDS)
    try:
        for size in sizes:
            out["rows"].append(
                measure_size(size, repeats, workdir, quiet_seconds=quiet_seconds, progress=progress)
            )
    finally:
        if own:
            shutil.rmtree(workdir, ignore_errors=True)
    return out
