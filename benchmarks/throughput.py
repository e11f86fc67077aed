"""Throughput: 8 concurrent conductors against 1 and then 2 scheduler processes on one topic,
with the candidates from Placement and from the provider view.

For each fleet size, one cloud (``placement_seed.bench_cloud``: MariaDB API/cell databases,
the real Placement on MariaDB with 2 gunicorn workers and ``allocation_conflict_retry_count =
1``). For each candidate source (``placement``: ``[placement] view_feed = none``; ``view``:
``view_feed = database`` on the cloud's Placement database), ``novasched-scheduler
--config-file`` runs with ``[scheduler] workers = 1`` and then 2, on its own RabbitMQ virtual
host (queue names are global to a vhost, so another scheduler on topic ``scheduler``
elsewhere on the broker cannot steal our requests). Each worker process loads its own view
before it listens. Eight conductor threads share ``repeats`` one-instance boots (claimed) per
run, bounded by ``RUN_TIMEOUT``.

Reported per run: requests per second (completed / wall time), latency p50/p99, the
claim-conflict rate (the scheduler's "Unable to claim" lines and Placement's 409 answers, per
request), how many requests each process served, CPU per request of each component (from
/proc: Placement's gunicorn master and workers, the schedulers, MariaDB, RabbitMQ, this
process), how many instances of the flavor the fleet had room for, over-commits (every
provider's usage against its capacity, from Placement's database for all providers and
through ``GET usages``/``GET inventories`` for each provider this run claimed on) and orphans
(consumers holding allocations after the schedulers stopped that are neither pre-seeded
instances nor instances a request got a reply for). Both must be 0. The run's claims are
deleted before the next run, so every run starts from the same fleet.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid as uuidlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import db
from benchmarks import placement_seed
from benchmarks.e2e import quiet_logging
from benchmarks.report import cpu_by_group, judge, percentile, table, target_verdicts
from scheduler.conf import CONF
from scheduler.exceptions import NoValidHost
from scheduler.objects import Flavor, RequestSpec
from scheduler.rpc import transport as rpc
from scheduler.rpc.context import RequestContext
from scheduler.rpc.rpcapi import SchedulerAPI

DEFAULT_SIZES = (1000,)
CONDUCTORS = 8
PROCESSES = (1, 2)
SOURCES = ("placement", "view")
VIEW_FEEDS = {"placement": "none", "view": "database"}
RUN_TIMEOUT = 180.0  # seconds of requests per run, whatever ``repeats`` says
START_TIMEOUT = 300.0  # a worker loads the cells and its provider view before it listens

TARGETS: dict[str, dict[str, Any]] = {
    "view_requests_per_s_1_process": {
        "limit": 60.0,
        "cmp": ">=",
        "unit": "req/s",
        "what": "requests/s with the view (database feed), 1 process, 8 conductors, 1k hosts",
        "before": "19.5 req/s with Placement's a_c",
    },
    "view_scaling_2_vs_1": {
        "limit": 1.3,
        "cmp": ">=",
        "what": "requests/s with 2 processes / with 1, the view (database feed)",
        "before": "0.62 (12.1 / 19.5 req/s) with Placement's a_c",
    },
    "placement_cpu_ms_per_instance": {
        "limit": 15.0,
        "cmp": "<=",
        "unit": "ms",
        "what": "Placement's CPU per placed instance with the view (database feed), worst run",
        "before": "53 ms with coalesced a_c queries (about 180 ms uncoalesced)",
    },
    "overcommits": {"limit": 0, "cmp": "<=", "what": "providers over capacity after the runs"},
    "orphans": {
        "limit": 0,
        "cmp": "<=",
        "what": "consumers holding allocations that are neither pre-seeded nor replied to",
    },
}

FLAVOR = Flavor(name="bench.medium", flavorid="b2", vcpus=4, memory_mb=8192, root_gb=40)

_SELECTED = re.compile(r"^\S+ \S+ (\d+) \w+ \S+ .*Selected host: ", re.MULTILINE)


# --------------------------------------------------------------------------- broker


@contextlib.contextmanager
def rabbit_vhost() -> Any:
    """A fresh RabbitMQ virtual host for guest (rabbitmqctl, as root); yields its URL."""
    name = f"novasched-bench-{uuidlib.uuid4().hex[:10]}"
    ctl = ["rabbitmqctl", "-q"]
    try:
        subprocess.run(ctl + ["add_vhost", name], check=True, capture_output=True, timeout=60)
        subprocess.run(
            ctl + ["set_permissions", "-p", name, "guest", ".*", ".*", ".*"],
            check=True,
            capture_output=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise placement_seed.BenchSetupError(
            f"cannot create a RabbitMQ vhost with rabbitmqctl (needed to isolate topic "
            f"'scheduler'): {exc}"
        ) from exc
    try:
        yield placement_seed.RABBIT_URL.rstrip("/") + "/" + name
    finally:
        subprocess.run(ctl + ["delete_vhost", name], capture_output=True, timeout=60)


# --------------------------------------------------------------------------- scheduler


def write_conf(
    path: Path,
    cloud: placement_seed.BenchCloud,
    url: str,
    workers: int,
    source: str = "placement",
) -> None:
    view = f"view_feed = {VIEW_FEEDS[source]}\n"
    if VIEW_FEEDS[source] == "database":
        view += f"view_database_connection = {cloud.placement_db_url}\n"
    path.write_text(
        "[DEFAULT]\n"
        f"transport_url = {url}\n"
        f"host = bench-throughput-{workers}\n"
        # the fleet is not heart-beating (see benchmarks.fleet.FLEET_AGE)
        "service_down_time = 86400\n"
        "[api_database]\n"
        f"connection = {cloud.api_url}\n"
        "[placement]\n"
        "auth_type = noauth2\n"
        f"endpoint_override = {cloud.placement_url}\n"
        "claim_retry_backoff = 0.05\n"
        f"{view}"
        "[scheduler]\n"
        f"workers = {workers}\n"
    )


@contextlib.contextmanager
def scheduler_processes(conf_path: Path, log_path: Path) -> Any:
    exe = Path(sys.executable).with_name("novasched-scheduler")
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [str(exe), "--config-file", str(conf_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def wait_ready(client: SchedulerAPI, proc: subprocess.Popen, log_path: Path, n: int) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise placement_seed.BenchSetupError(
                f"novasched-scheduler exited {proc.returncode}:\n{log_path.read_text()[-3000:]}"
            )
        if log_path.read_text().count("Scheduler service listening") >= n:
            client.ping(RequestContext(request_id="req-bench-ping"), "ready", timeout=30)
            return
        time.sleep(0.3)
    raise placement_seed.BenchSetupError(
        f"{n} scheduler worker(s) did not start:\n{log_path.read_text()[-3000:]}"
    )


# --------------------------------------------------------------------------- one run


def _boot(client: SchedulerAPI, cloud: placement_seed.BenchCloud, tag: str) -> dict[str, Any]:
    spec_ = cloud.fleet.spec
    instance = str(uuidlib.uuid4())
    spec = RequestSpec(flavor=FLAVOR, project_id=spec_.project_id, user_id=spec_.user_id)
    ctx = RequestContext(
        user_id=spec_.user_id, project_id=spec_.project_id, request_id=f"req-bench-{tag}"
    )
    t0 = time.perf_counter()
    outcome: dict[str, Any] = {"instance": instance}
    try:
        result = client.select_destinations(ctx, spec, [instance], True, True)
        outcome["provider"] = result[0][0].compute_node_uuid
        outcome["status"] = "ok"
    except NoValidHost:
        outcome["status"] = "novalidhost"
    except Exception as exc:  # counted and reported; the run goes on
        outcome["status"] = "error"
        outcome["error"] = f"{type(exc).__name__}: {exc}"[:300]
    outcome["seconds"] = time.perf_counter() - t0
    return outcome


def _drive(
    client: SchedulerAPI, cloud: placement_seed.BenchCloud, per_conductor: int, timeout: float
) -> tuple[list[dict[str, Any]], float]:
    """``CONDUCTORS`` threads, each up to ``per_conductor`` requests before the deadline."""
    outcomes: list[dict[str, Any]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(CONDUCTORS + 1)
    deadline = [0.0]

    def conductor(c: int) -> None:
        barrier.wait()
        for i in range(per_conductor):
            if time.monotonic() > deadline[0]:
                return
            outcome = _boot(client, cloud, f"c{c}-{i}")
            with lock:
                outcomes.append(outcome)

    threads = [threading.Thread(target=conductor, args=(c,), daemon=True) for c in range(8)]
    for t in threads:
        t.start()
    deadline[0] = time.monotonic() + timeout
    start = time.perf_counter()
    barrier.wait()
    for t in threads:
        # a call in flight at the deadline still ends within long_rpc_timeout
        t.join(timeout=timeout + 150)
    wall = time.perf_counter() - start
    with lock:
        return list(outcomes), wall


def _placement_409s(log_path: Path, offset: int) -> tuple[int, int, int]:
    """(409 answers to PUT /allocations, all PUT /allocations, GET /allocation_candidates)
    in Placement's log after ``offset``."""
    with open(log_path, errors="replace") as f:
        f.seek(offset)
        text = f.read()
    queries = len(re.findall(r'"GET /allocation_candidates[^"]*" status: ', text))
    puts = re.findall(r'"PUT /allocations/[^"]*" status: (\d+)', text)
    return sum(1 for s in puts if s == "409"), len(puts), queries


def _check_capacity(cloud: placement_seed.BenchCloud, providers: set[str]) -> list[str]:
    """Providers over capacity through Placement's API (usage > (total-reserved)*ratio)."""

    def one(rp: str) -> str | None:
        usages = cloud.placement.get_usages(rp)
        for rc, inv in cloud.placement.get_inventories(rp).items():
            capacity = int((inv["total"] - inv["reserved"]) * inv["allocation_ratio"])
            if usages.get(rc, 0) > capacity:
                return f"{rp} {rc} {usages[rc]} > {capacity}"
        return None

    with ThreadPoolExecutor(max_workers=4) as pool:
        return [r for r in pool.map(one, sorted(providers)) if r]


def run_once(
    cloud: placement_seed.BenchCloud,
    url: str,
    processes: int,
    per_conductor: int,
    workdir: Path,
    *,
    source: str = "placement",
    timeout: float = RUN_TIMEOUT,
) -> dict[str, Any]:
    """One throughput run against ``processes`` scheduler processes taking their candidates
    from ``source``; claims deleted after."""
    conf_path = workdir / f"nova-{source}-{processes}.conf"
    log_path = workdir / f"scheduler-{source}-{processes}.log"
    write_conf(conf_path, cloud, url, processes, source)
    room = placement_seed.room_for(cloud.placement_db_url, _resources(FLAVOR))
    lost: list[str] = []
    outcomes: list[dict[str, Any]] = []
    warm: list[dict[str, Any]] = []
    try:
        with contextlib.ExitStack() as stack:
            transport = rpc.get_transport(CONF, url=url)
            stack.callback(transport.cleanup)
            client = SchedulerAPI(transport)
            proc = stack.enter_context(scheduler_processes(conf_path, log_path))
            started = time.perf_counter()
            wait_ready(client, proc, log_path, processes)
            ready_s = time.perf_counter() - started
            # each process reads the whole cell once on its first request
            warm = [_boot(client, cloud, f"warm-{i}") for i in range(2 * processes)]
            placement_log = cloud.placement_service.log_path
            offset = placement_log.stat().st_size if placement_log.exists() else 0
            roots = {
                "schedulers": proc.pid,
                "placement": cloud.placement_pid,
            }
            comms = {"mariadb": "mariadbd", "rabbitmq": "beam.smp"}
            # this process alone (Placement and the schedulers are its children)
            singles = {"conductors": os.getpid()}
            cpu0 = cpu_by_group(roots, comms, singles)
            load = [_load()]
            outcomes, wall = _drive(client, cloud, per_conductor, timeout)
            cpu1 = cpu_by_group(roots, comms, singles)
            load.append(_load())
            cpu = {k: round(cpu1[k] - cpu0[k], 2) for k in cpu0}
            conflicts_409, claims_put, candidate_queries = _placement_409s(placement_log, offset)
        # the processes have stopped: their log is complete, nothing is in flight
        log = log_path.read_text(errors="replace")
        ok = [o for o in outcomes if o["status"] == "ok"]
        touched = {o["provider"] for o in ok + warm if o.get("provider")}
        over_sql = placement_seed.overcommitted(cloud.placement_db_url)
        over_api = _check_capacity(cloud, touched)
        replied = {o["instance"] for o in outcomes + warm if o["status"] != "error"}
        lost = placement_seed.orphans(cloud, replied)
        latencies = [o["seconds"] * 1000.0 for o in outcomes]
        served = {}
        for pid in _SELECTED.findall(log):
            served[pid] = served.get(pid, 0) + 1
        unable = len(re.findall(r"Unable to claim resources", log))
        errors = [o["error"] for o in outcomes if o["status"] == "error"]
        return {
            "hosts": len(cloud.fleet.hosts),
            "source": source,
            "processes": processes,
            "conductors": CONDUCTORS,
            "requests": len(outcomes),
            "placed": len(ok),
            "novalidhost": sum(1 for o in outcomes if o["status"] == "novalidhost"),
            "errors": len(errors),
            "first_errors": errors[:3],
            "room": room,
            "load": max(load),
            "ready_s": round(ready_s, 1),
            "wall_s": round(wall, 2),
            "requests_per_s": round(len(outcomes) / wall, 2) if wall else 0.0,
            "placed_per_s": round(len(ok) / wall, 2) if wall else 0.0,
            "latency_p50_ms": round(statistics.median(latencies), 1) if latencies else 0.0,
            "latency_p99_ms": round(percentile(latencies, 99), 1),
            "unable_to_claim": unable,
            "placement_409": conflicts_409,
            "claim_puts": claims_put,
            "claim_conflict_rate": round(conflicts_409 / claims_put, 4) if claims_put else 0.0,
            # GET /allocation_candidates Placement answered (identical queries in flight in
            # one process share one: [placement] coalesce_candidate_queries)
            "candidate_queries": candidate_queries,
            "served_by_process": sorted(served.values(), reverse=True),
            # CPU seconds per component during the run (2 cores: at most 2 x wall_s)
            "cpu_s": cpu,
            "cpu_ms_per_request": {
                k: round(v * 1000.0 / len(outcomes), 1) for k, v in cpu.items() if outcomes
            },
            "placement_cpu_ms_per_instance": (
                round(cpu["placement"] * 1000.0 / len(ok), 1) if ok else None
            ),
            "overcommits": len(over_sql) + len(over_api),
            "overcommit_examples": (over_sql[:3] + over_api[:3]),
            "orphans": len(lost),
            "orphan_examples": lost[:3],
        }
    finally:
        instances = [o["instance"] for o in outcomes + warm] + lost
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(cloud.placement.delete_allocation_for_instance, instances))


def _load() -> float:
    """The machine's 1-minute load average (the CPUs are shared: read every figure with it)."""
    return round(os.getloadavg()[0], 2)


def _resources(flavor: Flavor) -> dict[str, int]:
    return {"VCPU": flavor.vcpus, "MEMORY_MB": flavor.memory_mb, "DISK_GB": flavor.root_gb}


def run(
    sizes: list[int],
    repeats: int,
    out: dict,
    *,
    processes: tuple[int, ...] = PROCESSES,
    sources: tuple[str, ...] = SOURCES,
) -> dict:
    """The throughput section: for each size and source, 1 then 2 scheduler processes,
    ``repeats`` requests per run (shared by the conductors). Written into ``out``, which is
    returned."""
    placement_seed.require_rabbit()
    per_conductor = max(1, -(-repeats // CONDUCTORS))
    result = out
    result.update(
        {
            "section": "throughput",
            "rows": [],
            "targets": {k: dict(v) for k, v in TARGETS.items()},
            "notes": [
                f"{CONDUCTORS} conductor threads in the benchmark process, one instance each",
                "claim_conflict_rate = Placement 409 answers / PUT /allocations (generation races "
                "retried by the client, and full hosts)",
                "room = instances of the flavor the enabled hosts have room for at the start "
                "of a run; a run asks for at most repeats + warm-up instances",
                "CPU ms per request from /proc: Placement = gunicorn master + workers, "
                "schedulers = the service's process tree, mariadb and rabbitmq = the whole "
                "servers (other users included), conductors = this process",
                "Placement: gunicorn 2 workers on MariaDB; Placement, MariaDB, RabbitMQ, the "
                "schedulers and the conductors share 2 cores",
            ],
            "requests_per_conductor": per_conductor,
        }
    )
    placement_seed.register_transport_opts(CONF)
    for size in sizes:
        with contextlib.ExitStack() as stack:
            stack.enter_context(quiet_logging())
            url = stack.enter_context(rabbit_vhost())
            cloud = placement_seed.bench_cloud(size, stack)
            stack.callback(db.dispose_engines)
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="nsbench-")))
            for source in sources:
                for n in processes:
                    result["rows"].append(
                        run_once(cloud, url, n, per_conductor, workdir, source=source)
                    )
    _judge(result)
    return result


def _judge(result: dict[str, Any]) -> None:
    rows = result["rows"]
    targets = result["targets"]
    if rows:
        judge(targets["overcommits"], sum(r["overcommits"] for r in rows))
        judge(targets["orphans"], sum(r["orphans"] for r in rows))
    view = [r for r in rows if r["source"] == "view"]
    one = [r["requests_per_s"] for r in view if r["processes"] == 1 and r["hosts"] == 1000]
    if one:
        judge(targets["view_requests_per_s_1_process"], min(one))
    cpu = [r["placement_cpu_ms_per_instance"] for r in view if r["placement_cpu_ms_per_instance"]]
    if cpu:
        judge(targets["placement_cpu_ms_per_instance"], max(cpu))
    scaling: dict[str, float] = {}
    for (size, source), by_proc in _by_processes(rows).items():
        if 1 in by_proc and 2 in by_proc and by_proc[1]["requests_per_s"]:
            ratio = by_proc[2]["requests_per_s"] / by_proc[1]["requests_per_s"]
            scaling[f"{source} {size}"] = round(ratio, 2)
    result["scaling_2_vs_1"] = scaling
    view_ratios = [v for k, v in scaling.items() if k.startswith("view ")]
    if view_ratios:
        judge(targets["view_scaling_2_vs_1"], min(view_ratios))


def _by_processes(rows: list[dict[str, Any]]) -> dict[tuple[int, str], dict[int, dict]]:
    out: dict[tuple[int, str], dict[int, dict]] = {}
    for r in rows:
        out.setdefault((r["hosts"], r["source"]), {})[r["processes"]] = r
    return out


_COLUMNS = (
    ("hosts", "hosts", "{:,}"),
    ("source", "source", "{}"),
    ("processes", "procs", "{}"),
    ("requests", "n", "{}"),
    ("placed", "placed", "{}"),
    ("novalidhost", "NVH", "{}"),
    ("errors", "err", "{}"),
    ("room", "room", "{:,}"),
    ("requests_per_s", "req/s", "{:.1f}"),
    ("latency_p50_ms", "p50 ms", "{:.0f}"),
    ("latency_p99_ms", "p99 ms", "{:.0f}"),
    ("placement_cpu_ms_per_instance", "Placement CPU ms/inst", "{:.1f}"),
    ("placement_409", "409s", "{}"),
    ("claim_conflict_rate", "409/PUT", "{:.1%}"),
    ("candidate_queries", "a_c GETs", "{}"),
    ("unable_to_claim", "unable", "{}"),
    ("overcommits", "over", "{}"),
    ("orphans", "orphans", "{}"),
    ("load", "load", "{:.1f}"),
)


def format_table(result: dict) -> str:
    """The rows as a fixed-width table, the CPU per request, then the targets."""
    header = [title for _, title, _ in _COLUMNS]
    lines = [
        [fmt.format(row[key]) if row.get(key) is not None else "-" for key, _, fmt in _COLUMNS]
        for row in result["rows"]
    ]
    text = [table(header, lines)]
    for row in result["rows"]:
        per_req = ", ".join(f"{k} {v}" for k, v in row.get("cpu_ms_per_request", {}).items())
        text.append(
            f"CPU ms per request ({row['hosts']} hosts, {row['source']}, {row['processes']} "
            f"procs): {per_req}; served per process {row.get('served_by_process')}"
        )
        run_name = f"{row['source']}, {row['processes']} procs"
        if row.get("first_errors"):
            text.append(f"errors ({run_name}): {row['first_errors']}")
        if row.get("orphan_examples"):
            text.append(f"orphans ({run_name}): {row['orphan_examples']}")
    if result.get("scaling_2_vs_1"):
        shown = ", ".join(f"{k}: {v}x" for k, v in result["scaling_2_vs_1"].items())
        text.append(f"requests/s with 2 processes / with 1: {shown}")
    verdicts = target_verdicts(result)
    if verdicts:
        text.append("")
        text.append("targets:")
        text.append(verdicts)
    return "\n".join(text)
