"""Throughput: 8 concurrent conductors against 1 and then 2 scheduler processes on one topic.

For each fleet size, one cloud (``placement_seed.bench_cloud``: MariaDB API/cell databases,
the real Placement on MariaDB with 2 gunicorn workers and ``allocation_conflict_retry_count =
1``). ``novasched-scheduler --config-file`` runs with ``[scheduler] workers = 1`` and then 2,
on its own RabbitMQ virtual host (queue names are global to a vhost, so another scheduler on
topic ``scheduler`` elsewhere on the broker cannot steal our requests). Eight conductor
threads share ``repeats`` one-instance boots (claimed) per run, bounded by ``RUN_TIMEOUT``.

Reported per run: requests per second (completed / wall time), latency p50/p99, the
claim-conflict rate (the scheduler's "Unable to claim" lines and Placement's 409 answers, per
request), how many requests each process served, and over-commits: every provider's usage
against its capacity, from Placement's database for all providers and through
``GET usages``/``GET inventories`` for each provider this run claimed on. It must be 0.
The run's claims are deleted before the next run, so both runs start from the same fleet.
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

from oslo_messaging import transport as om_transport

import db
from benchmarks import placement_seed
from benchmarks.e2e import quiet_logging
from benchmarks.report import percentile, table
from scheduler.conf import CONF
from scheduler.exceptions import NoValidHost
from scheduler.objects import Flavor, RequestSpec
from scheduler.rpc import transport as rpc
from scheduler.rpc.context import RequestContext
from scheduler.rpc.rpcapi import SchedulerAPI

DEFAULT_SIZES = (1000,)
CONDUCTORS = 8
PROCESSES = (1, 2)
RUN_TIMEOUT = 180.0  # seconds of requests per run, whatever ``repeats`` says
START_TIMEOUT = 90.0

TARGETS = {
    "overcommits": {"limit": 0, "what": "providers over capacity after the runs"},
    "scaling_2_vs_1": {"limit": 1.0, "what": "requests/s with 2 processes / with 1, above"},
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


def write_conf(path: Path, cloud: placement_seed.BenchCloud, url: str, workers: int) -> None:
    path.write_text(
        "[DEFAULT]\n"
        f"transport_url = {url}\n"
        f"host = bench-throughput-{workers}\n"
        # the fleet is not heart-beating (see placement_seed.FLEET_AGE)
        "service_down_time = 86400\n"
        "[api_database]\n"
        f"connection = {cloud.api_url}\n"
        "[placement]\n"
        "auth_type = noauth2\n"
        f"endpoint_override = {cloud.placement_url}\n"
        "claim_retry_backoff = 0.05\n"
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


# --------------------------------------------------------------------------- CPU accounting

_TICK = os.sysconf("SC_CLK_TCK")


def _proc_table() -> dict[int, tuple[int, str, float]]:
    """pid -> (ppid, comm, cpu seconds) of every process we can read."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        # fields[1] is ppid; utime and stime are fields 14 and 15 of stat (1-based)
        table[int(entry)] = (int(fields[1]), comm, (int(fields[11]) + int(fields[12])) / _TICK)
    return table


def cpu_by_group(
    roots: dict[str, int], comms: dict[str, str], singles: dict[str, int]
) -> dict[str, float]:
    """CPU seconds so far of each named process tree (``roots``: name -> pid), of every
    process whose command is ``comms[name]``, and of single processes (``singles``)."""
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out: dict[str, float] = {}
    for name, root in roots.items():
        total, todo = 0.0, [root]
        while todo:
            pid = todo.pop()
            if pid in table:
                total += table[pid][2]
            todo.extend(children.get(pid, []))
        out[name] = total
    for name, comm in comms.items():
        out[name] = sum(cpu for _, c, cpu in table.values() if c == comm)
    for name, pid in singles.items():
        out[name] = table[pid][2] if pid in table else 0.0
    return out


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


def _placement_409s(log_path: Path, offset: int) -> tuple[int, int]:
    """(409 answers to PUT /allocations, all PUT /allocations) in Placement's log after
    ``offset``."""
    with open(log_path, errors="replace") as f:
        f.seek(offset)
        text = f.read()
    puts = re.findall(r'"PUT /allocations/[^"]*" status: (\d+)', text)
    return sum(1 for s in puts if s == "409"), len(puts)


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
    timeout: float = RUN_TIMEOUT,
) -> dict[str, Any]:
    """One throughput run against ``processes`` scheduler processes; claims deleted after."""
    conf_path = workdir / f"nova-{processes}.conf"
    log_path = workdir / f"scheduler-{processes}.log"
    write_conf(conf_path, cloud, url, processes)
    outcomes: list[dict[str, Any]] = []
    warm: list[dict[str, Any]] = []
    try:
        with contextlib.ExitStack() as stack:
            transport = rpc.get_transport(CONF, url=url)
            stack.callback(transport.cleanup)
            client = SchedulerAPI(transport)
            proc = stack.enter_context(scheduler_processes(conf_path, log_path))
            wait_ready(client, proc, log_path, processes)
            # each process reads the whole cell once on its first request
            warm = [_boot(client, cloud, f"warm-{i}") for i in range(2 * processes)]
            placement_log = cloud.placement_service.log_path
            offset = placement_log.stat().st_size if placement_log.exists() else 0
            roots = {
                "schedulers": proc.pid,
                "placement": cloud.placement_service._proc.pid,
            }
            comms = {"mariadb": "mariadbd", "rabbitmq": "beam.smp"}
            # this process alone (Placement and the schedulers are its children)
            singles = {"conductors": os.getpid()}
            cpu0 = cpu_by_group(roots, comms, singles)
            outcomes, wall = _drive(client, cloud, per_conductor, timeout)
            cpu1 = cpu_by_group(roots, comms, singles)
            cpu = {k: round(cpu1[k] - cpu0[k], 2) for k in cpu0}
            conflicts_409, claims_put = _placement_409s(placement_log, offset)
        # the processes have stopped: their log is complete
        log = log_path.read_text(errors="replace")
        ok = [o for o in outcomes if o["status"] == "ok"]
        touched = {o["provider"] for o in ok + warm if o.get("provider")}
        over_sql = placement_seed.overcommitted(cloud.placement_db_url)
        over_api = _check_capacity(cloud, touched)
        latencies = [o["seconds"] * 1000.0 for o in outcomes]
        served = {}
        for pid in _SELECTED.findall(log):
            served[pid] = served.get(pid, 0) + 1
        unable = len(re.findall(r"Unable to claim resources", log))
        errors = [o["error"] for o in outcomes if o["status"] == "error"]
        return {
            "hosts": len(cloud.fleet.hosts),
            "processes": processes,
            "conductors": CONDUCTORS,
            "requests": len(outcomes),
            "placed": len(ok),
            "novalidhost": sum(1 for o in outcomes if o["status"] == "novalidhost"),
            "errors": len(errors),
            "first_errors": errors[:3],
            "wall_s": round(wall, 2),
            "requests_per_s": round(len(outcomes) / wall, 2) if wall else 0.0,
            "placed_per_s": round(len(ok) / wall, 2) if wall else 0.0,
            "latency_p50_ms": round(statistics.median(latencies), 1) if latencies else 0.0,
            "latency_p99_ms": round(percentile(latencies, 99), 1),
            "unable_to_claim": unable,
            "placement_409": conflicts_409,
            "claim_puts": claims_put,
            "claim_conflict_rate": round(conflicts_409 / claims_put, 4) if claims_put else 0.0,
            "served_by_process": sorted(served.values(), reverse=True),
            # CPU seconds per component during the run (2 cores: at most 2 x wall_s)
            "cpu_s": cpu,
            "cpu_ms_per_request": {
                k: round(v * 1000.0 / len(outcomes), 1) for k, v in cpu.items() if outcomes
            },
            "overcommits": len(over_sql) + len(over_api),
            "overcommit_examples": (over_sql[:3] + over_api[:3]),
        }
    finally:
        instances = [o["instance"] for o in outcomes + warm]
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(cloud.placement.delete_allocation_for_instance, instances))


def run(
    sizes: list[int], repeats: int, out: dict, *, processes: tuple[int, ...] = PROCESSES
) -> dict:
    """The throughput section: for each size, 1 then 2 scheduler processes, ``repeats``
    requests per run (shared by the conductors). Written into ``out``, which is returned."""
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
                "Placement: gunicorn 2 workers on MariaDB; Placement, MariaDB, RabbitMQ, the "
                "schedulers and the conductors share 2 cores",
            ],
            "requests_per_conductor": per_conductor,
        }
    )
    CONF.register_opts(om_transport._transport_opts)
    for size in sizes:
        with contextlib.ExitStack() as stack:
            stack.enter_context(quiet_logging())
            url = stack.enter_context(rabbit_vhost())
            cloud = placement_seed.bench_cloud(size, stack)
            stack.callback(db.dispose_engines)
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="nsbench-")))
            for n in processes:
                result["rows"].append(run_once(cloud, url, n, per_conductor, workdir))
    _judge(result)
    return result


def _judge(result: dict[str, Any]) -> None:
    rows = result["rows"]
    targets = result["targets"]
    if rows:
        over = sum(r["overcommits"] for r in rows)
        targets["overcommits"].update(measured=over, met=over == 0)
    ratios = []
    for size in sorted({r["hosts"] for r in rows}):
        by_proc = {r["processes"]: r for r in rows if r["hosts"] == size}
        if 1 in by_proc and 2 in by_proc and by_proc[1]["requests_per_s"]:
            ratios.append(by_proc[2]["requests_per_s"] / by_proc[1]["requests_per_s"])
    if ratios:
        worst = round(min(ratios), 2)
        targets["scaling_2_vs_1"].update(measured=worst, met=worst > 1.0)


_COLUMNS = (
    ("hosts", "hosts", "{}"),
    ("processes", "procs", "{}"),
    ("requests", "n", "{}"),
    ("placed", "placed", "{}"),
    ("novalidhost", "NVH", "{}"),
    ("errors", "err", "{}"),
    ("requests_per_s", "req/s", "{:.1f}"),
    ("latency_p50_ms", "p50 ms", "{:.0f}"),
    ("latency_p99_ms", "p99 ms", "{:.0f}"),
    ("claim_conflict_rate", "409/PUT", "{:.1%}"),
    ("unable_to_claim", "unable", "{}"),
    ("overcommits", "over", "{}"),
)


def format_table(result: dict) -> str:
    """The rows as a fixed-width table, then the target lines."""
    header = [title for _, title, _ in _COLUMNS]
    lines = [[fmt.format(row.get(key, 0)) for key, _, fmt in _COLUMNS] for row in result["rows"]]
    text = [table(header, lines)]
    for row in result["rows"]:
        per_req = ", ".join(f"{k} {v}" for k, v in row.get("cpu_ms_per_request", {}).items())
        text.append(
            f"CPU ms per request ({row['hosts']} hosts, {row['processes']} procs): {per_req}"
        )
        if row.get("first_errors"):
            text.append(f"errors ({row['processes']} procs): {row['first_errors']}")
    for name, target in result.get("targets", {}).items():
        measured = target.get("measured")
        verdict = "not measured" if measured is None else ("met" if target["met"] else "MISSED")
        text.append(
            f"target {name}: {target['what']} (limit {target['limit']}): "
            f"measured {measured}: {verdict}"
        )
    return "\n".join(text)
