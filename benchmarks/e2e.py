"""End to end: select_destinations over RabbitMQ against the real Placement on MariaDB.

For each fleet size N a fresh cloud (``placement_seed.bench_cloud``: API and cell databases
and Placement on MariaDB, 2 gunicorn workers, ``allocation_conflict_retry_count = 1``, N
providers seeded by SQL), a SchedulerService in this process on a unique exchange and topic
of the real broker, and a conductor-side SchedulerAPI. Each request boots one instance with a
fresh uuid and is claimed; the claims are deleted after each run. Runs use
``[scheduler] max_placement_results`` 1000 and, for N above 1000, N.

Per request we keep the latency at the client and the driver's own split (the driver's
``timing_observer``): Placement (allocation candidates + claim), database (HostState
refresh), the scheduler's own work (filters, weighers, prefilters, bookkeeping) and the
RPC/serialisation overhead (client latency - driver total).

Services are kept up by ``[DEFAULT] service_down_time`` = 1 day instead of a heartbeat, so
the incremental HostState refresh reads nothing between requests (see the result's notes).
"""

from __future__ import annotations

import contextlib
import logging
import statistics
import time
import uuid as uuidlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from oslo_messaging import transport as om_transport

import db
from benchmarks import placement_seed
from benchmarks.report import percentile, table
from scheduler.conf import CONF
from scheduler.drivers.filter_scheduler import FilterScheduler
from scheduler.objects import Flavor, RequestSpec
from scheduler.rpc import transport as rpc
from scheduler.rpc.context import RequestContext
from scheduler.rpc.rpcapi import SchedulerAPI
from scheduler.rpc.service import SchedulerService

DEFAULT_SIZES = (100, 1000, 10000)
WARMUP = 2
RUN_TIMEOUT = 600.0  # seconds per (size, limit) run, whatever ``repeats`` says

TARGETS = {
    "scheduler_own_incl_db_p50_ms_at_1000": {
        "limit": 10.0,
        "what": "everything but Placement and the broker, p50, 1k hosts",
    },
}

FLAVORS = (
    Flavor(name="bench.small", flavorid="b1", vcpus=2, memory_mb=2048, root_gb=20),
    Flavor(name="bench.medium", flavorid="b2", vcpus=4, memory_mb=8192, root_gb=40),
)


def summarize(samples: list[dict[str, float]]) -> dict[str, float]:
    """p50/p99 in ms of each part of the per-request split."""
    parts: dict[str, list[float]] = {}
    for s in samples:
        placement = s.get("placement", 0.0) + s.get("claim", 0.0)
        database = s.get("host_states", 0.0)
        total = s["total"]
        split = {
            "client": s["client"],
            "placement": placement,
            "candidates": s.get("placement", 0.0),
            "claim": s.get("claim", 0.0),
            "database": database,
            "own": total - placement - database,
            "own_incl_db": total - placement,
            "rpc": s["client"] - total,
            "filter": s.get("filter", 0.0),
            "weigh": s.get("weigh", 0.0),
        }
        for key, value in split.items():
            parts.setdefault(key, []).append(value * 1000.0)
    out: dict[str, float] = {}
    for key, values in parts.items():
        out[f"{key}_p50_ms"] = round(statistics.median(values), 2)
        out[f"{key}_p99_ms"] = round(percentile(values, 99), 2)
    return out


@contextlib.contextmanager
def scheduler_in_process(cloud: placement_seed.BenchCloud):
    """A SchedulerService in this process on a unique exchange and topic, and its client."""
    tag = uuidlib.uuid4().hex[:10]
    exchange, topic, host = f"novasched-bench-{tag}", f"scheduler-bench-{tag}", f"bench-{tag}"
    overrides = [
        ("connection", cloud.api_url, "api_database"),
        ("auth_type", "noauth2", "placement"),
        ("endpoint_override", cloud.placement_url, "placement"),
        ("claim_retry_backoff", 0.05, "placement"),
        ("host", host, None),
        ("service_down_time", 86400, None),
        ("long_rpc_timeout", 120, None),
        ("control_exchange", exchange, None),
    ]
    # oslo.messaging registers control_exchange when it first makes a transport
    CONF.register_opts(om_transport._transport_opts)
    for name, value, group in overrides:
        CONF.set_override(name, value, group=group)
    with contextlib.ExitStack() as stack:
        for name, _, group in overrides:
            stack.callback(CONF.clear_override, name, group=group)
        stack.callback(CONF.clear_override, "max_placement_results", group="scheduler")
        transport = rpc.get_transport(CONF, url=placement_seed.RABBIT_URL)
        stack.callback(transport.cleanup)
        service = SchedulerService(CONF, transport=transport, topic=topic)
        service.start()
        stack.callback(_delete_queues, [topic, f"{topic}.{host}"])
        stack.callback(service.stop)
        yield SchedulerAPI(transport, topic=topic)


@contextlib.contextmanager
def quiet_logging():
    """Log records are still made (as in production, where they go to a file) but not
    printed: without any handler Python's last-resort handler would print every warning
    (down hosts, ...) into the benchmark's output."""
    root = logging.getLogger()
    handler = None
    if not root.handlers:
        handler = logging.NullHandler()
        root.addHandler(handler)
    try:
        yield
    finally:
        if handler is not None:
            root.removeHandler(handler)


def _delete_queues(names: list[str]) -> None:
    import kombu

    url = "amqp://" + placement_seed.RABBIT_URL.split("://", 1)[1]
    with kombu.Connection(url) as conn:
        channel = conn.channel()
        for name in names:
            try:
                channel.queue_delete(name)
            except Exception:  # already gone: the channel closes on a missing queue
                channel = conn.channel()


def _request(i: int, project: str, user: str) -> tuple[RequestContext, RequestSpec]:
    flavor = FLAVORS[i % len(FLAVORS)]
    spec = RequestSpec(flavor=flavor, project_id=project, user_id=user)
    ctx = RequestContext(user_id=user, project_id=project, request_id=f"req-bench-{i}")
    return ctx, spec


def measure(
    client: SchedulerAPI,
    cloud: placement_seed.BenchCloud,
    repeats: int,
    *,
    timeout: float = RUN_TIMEOUT,
) -> tuple[list[dict[str, float]], int]:
    """``WARMUP`` then ``repeats`` sequential one-instance boots; returns the per-request
    samples (driver split + client latency) and the number of failed requests. Every claim
    made is deleted before returning."""
    spec_project = cloud.fleet.spec.project_id
    spec_user = cloud.fleet.spec.user_id
    observed: list[dict[str, float]] = []
    FilterScheduler.timing_observer = observed.append
    samples: list[dict[str, float]] = []
    instances: list[str] = []
    failures = 0
    deadline = time.monotonic() + timeout
    try:
        for i in range(WARMUP + repeats):
            if time.monotonic() > deadline:
                break
            ctx, spec = _request(i, spec_project, spec_user)
            instance = str(uuidlib.uuid4())
            instances.append(instance)
            del observed[:]
            t0 = time.perf_counter()
            try:
                client.select_destinations(ctx, spec, [instance], True, True)
            except Exception:
                failures += 1
                continue
            client_s = time.perf_counter() - t0
            if i >= WARMUP and observed:
                samples.append(dict(observed[-1], client=client_s))
    finally:
        FilterScheduler.timing_observer = None
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(cloud.placement.delete_allocation_for_instance, instances))
    return samples, failures


def run(sizes: list[int], repeats: int, out: dict) -> dict:
    """The end-to-end section for each fleet size, written into ``out`` (which is returned;
    it holds the rows measured so far if a later size fails)."""
    placement_seed.require_rabbit()
    result = out
    result.update(
        {
            "section": "e2e",
            "rows": [],
            "targets": {k: dict(v) for k, v in TARGETS.items()},
            "notes": [
                "placement = GET /allocation_candidates + claim (GET and PUT /allocations)",
                "database = HostState refresh (incremental; nothing changed between requests)",
                "own = driver total - placement - database (filters, weighers, bookkeeping)",
                "rpc = client latency - driver total (broker, serialisation, dispatch)",
                "Placement: gunicorn 2 workers on MariaDB; everything shares 2 cores",
            ],
        }
    )
    for size in sizes:
        with contextlib.ExitStack() as stack:
            stack.enter_context(quiet_logging())
            t0 = time.perf_counter()
            cloud = placement_seed.bench_cloud(size, stack)
            stack.callback(db.dispose_engines)
            setup_s = time.perf_counter() - t0
            client = stack.enter_context(scheduler_in_process(cloud))
            # up to 1000 hosts, a limit of N returns what 1000 returns: one run is enough
            for limit in [1000] + ([size] if size > 1000 else []):
                CONF.set_override("max_placement_results", limit, group="scheduler")
                samples, failures = measure(client, cloud, repeats)
                row: dict[str, Any] = {
                    "hosts": size,
                    "max_placement_results": limit,
                    "requests": len(samples),
                    "failures": failures,
                    "setup_s": round(setup_s, 1),
                    "seed_placement_sql_s": round(cloud.seed_seconds.get("total", 0.0), 2),
                }
                row.update(summarize(samples))
                result["rows"].append(row)
    _judge(result)
    return result


def _judge(result: dict[str, Any]) -> None:
    target = result["targets"]["scheduler_own_incl_db_p50_ms_at_1000"]
    rows = [r for r in result["rows"] if r["hosts"] == 1000 and r.get("requests")]
    if rows:
        measured = max(r["own_incl_db_p50_ms"] for r in rows)
        target["measured"] = measured
        target["met"] = measured <= target["limit"]


_COLUMNS = (
    ("hosts", "hosts", "{}"),
    ("max_placement_results", "limit", "{}"),
    ("requests", "n", "{}"),
    ("client_p50_ms", "client p50", "{:.1f}"),
    ("client_p99_ms", "p99", "{:.1f}"),
    ("placement_p50_ms", "placement p50", "{:.1f}"),
    ("placement_p99_ms", "p99", "{:.1f}"),
    ("database_p50_ms", "db p50", "{:.2f}"),
    ("database_p99_ms", "p99", "{:.2f}"),
    ("own_p50_ms", "own p50", "{:.2f}"),
    ("own_p99_ms", "p99", "{:.2f}"),
    ("own_incl_db_p50_ms", "own+db p50", "{:.2f}"),
    ("rpc_p50_ms", "rpc p50", "{:.2f}"),
    ("rpc_p99_ms", "p99", "{:.2f}"),
)


def format_table(result: dict) -> str:
    """The rows as a fixed-width table, then the target line."""
    header = [title for _, title, _ in _COLUMNS]
    lines = [[fmt.format(row.get(key, 0)) for key, _, fmt in _COLUMNS] for row in result["rows"]]
    text = [table(header, lines)]
    text.append("(ms; placement = candidates + claim; db = HostState refresh; own = the rest of")
    text.append(" the driver; rpc = client latency - driver total)")
    for name, target in result.get("targets", {}).items():
        measured = target.get("measured")
        verdict = "not measured" if measured is None else ("met" if target["met"] else "MISSED")
        shown = "-" if measured is None else f"{measured:.2f}"
        text.append(f"target {name}: <= {target['limit']} ms, measured {shown}: {verdict}")
    return "\n".join(text)
