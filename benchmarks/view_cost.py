"""view: what keeping the provider view current costs Placement (issue 11).

For each size N a fresh Placement 16 on MariaDB (``placement_seed.MariaDBPlacement``: gunicorn,
2 sync workers, ``allocation_conflict_retry_count = 1``), seeded by SQL with N providers of the
benchmark fleet (``benchmarks.fleet.cloud_spec`` with up to ``MAX_INSTANCES`` existing
instances per provider: about 2 consumers and 6 allocation rows per provider on average). The
fleet is built and seeded in a child process, so that this process holds nothing but the view.

Then, for each feed (``database``: ``DatabaseFeed`` on Placement's database; ``api``: ``ApiFeed``
through ``PlacementClient`` with nova's defaults, 8 threads, ``view_sweep_period`` 600 s):

1. **writer alone**, for each rate R: a writer process claims, through Placement's API, one
   new consumer at a time on a random provider (``PUT /allocations``, VCPU 1 and MEMORY_MB
   512) R times a second for the window, and deletes every ``DELETE_EVERY``-th of them
   ``DELETE_AFTER_S`` later (``DELETE /allocations``, which frees usage without changing the
   provider's generation). No view. This is what the writer costs Placement by itself.
2. **cold load**: the view read whole (``feed.load``). The API feed's load takes four GETs per
   provider: above 1,000 providers a sample of ``API_SAMPLE`` providers is read first (plus
   one full listing) and the load is extrapolated from its per-provider cost; the load is
   measured too when the extrapolation says it takes less than ``API_LOAD_BUDGET_S``.
   Otherwise the view is loaded with the database feed and kept current by the API feed (the
   steady state is what the API feed's polls cost).
3. **idle**: the view polled every ``INTERVAL`` seconds (``view_refresh_interval``; the next
   poll starts an interval after the previous one started, or at once when it took longer,
   as ``ViewRefresher`` does) for ``repeats`` seconds, nothing else happening.
4. **under load**, for each rate R: the writer of step 1 again while the view polls. The figures
   are the window's minus the writer-alone window's (same claims, same count), so that they
   say what keeping the view current adds. Staleness: the time from a claim's 204 (in the
   writer) to the end of the first poll after which the view lists the consumer on the
   provider (and the same for deletes: until it no longer lists it).

The database feed's windows run without its full (id, generation) scan, which it makes every
30 s: that is measured apart (a few polls with the scan) and amortized ("+scan/30s"), so that
a 30 s window does not hold one scan or none depending on where the 30 s fell.

Each window starts with one unmeasured poll (the API feed: a fresh ``ApiFeed`` per window,
whose first poll is a listing without sweep). Placement's requests per window are counted
in its request log (one line per request). CPU comes from /proc (utime + stime):
Placement = the gunicorn master and its workers; MariaDB = the server threads that serve this
Placement database's connections (``information_schema.PROCESSLIST.TID``; the feed's and
Placement's connections, InnoDB's background threads not included) and, apart, the whole
mariadbd (shared with every other user of the server); client = this process (the view and
its feed; the writer is its own process). "others" = every CPU second the machine spent
that is none of these: the noise the figures were taken in.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import multiprocessing
import os
import random
import re
import signal
import statistics
import sys
import time
import uuid as uuidlib
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any

import sqlalchemy as sa

import db.api
from benchmarks import placement_seed
from benchmarks.report import cpu_by_group, percentile, proc_table, table
from placement_client.api import PlacementClient
from placement_client.view import ApiFeed, ProviderView
from placement_client.view.db_feed import DatabaseFeed

LOG = logging.getLogger(__name__)

DEFAULT_SIZES = (1_000, 10_000, 100_000)
QUICK_SIZES = (200,)
DEFAULT_REPEATS = 30  # seconds (polls) per window
QUICK_REPEATS = 4
FEEDS = ("database", "api")
RATES = (20, 50)  # claims per second of the writer
QUICK_RATES = (20,)
INTERVAL = 1.0  # [placement] view_refresh_interval
SWEEP_PERIOD = 600.0  # [placement] view_sweep_period
API_THREADS = 8  # ApiFeed's default
API_SAMPLE = 1000  # providers read to extrapolate the API feed's cold load
API_LOAD_BUDGET_S = 240.0  # the API feed's cold load is measured when expected to take less
MAX_INSTANCES = 4  # existing instances per provider: 0..4, about 2 on average
CLAIM = {"VCPU": 1, "MEMORY_MB": 512}
DELETE_EVERY = 10
DELETE_AFTER_S = 3.0
WRITER_THREADS = 8
FULL_SCAN_POLLS = 5  # database feed: polls measured with the full (id, generation) scan
# a window whose others' CPU (not this cloud's) exceeds this share of the machine is noisy
NOISY_OTHERS_MS_PER_S = 300.0

_SPAWN = multiprocessing.get_context("spawn")
_TICK = os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------- the cloud


def _seed_child(hosts: int, db_url: str, placement_url: str, seed: int) -> dict[str, Any]:
    """Build the fleet and seed Placement (in a child process: the fleet's rows take about
    6 KB a provider, which would stay in this process's RSS)."""
    from benchmarks import fleet as bench_fleet
    from scheduler.demo import fleet as fleet_mod

    t0 = time.perf_counter()
    spec = bench_fleet.cloud_spec(hosts, "view-cost-cell", seed)
    spec.max_instances_per_host = MAX_INSTANCES
    fleet = fleet_mod.build_fleet(spec)
    built = time.perf_counter() - t0
    timings = placement_seed.seed_placement(
        db_url,
        fleet.providers,
        fleet.allocations,
        placement=PlacementClient(placement_url, retry_backoff=0.05),
    )
    rows = sum(len(a["resources"]) for a in fleet.allocations)
    return {
        "uuids": [p["uuid"] for p in fleet.providers],
        "project": spec.project_id,
        "user": spec.user_id,
        "consumers": len({a["consumer_uuid"] for a in fleet.allocations}),
        "allocation_rows": rows,
        "build_fleet_s": round(built, 2),
        "seed_s": {k: round(v, 2) for k, v in timings.items()},
    }


class Cloud:
    """A started Placement on its own MariaDB database, seeded with ``hosts`` providers."""

    def __init__(self, hosts: int, stack: contextlib.ExitStack, seed: int = 11):
        t0 = time.perf_counter()
        self.service = placement_seed.MariaDBPlacement(workers=2, conflict_retries=1)
        stack.callback(self.service.stop)
        self.service.start()
        self.started_s = time.perf_counter() - t0
        self.url = self.service.url
        self.db_url = self.service.db_url
        self.db_name = self.service.database
        with ProcessPoolExecutor(1, mp_context=_SPAWN) as pool:
            seeded = pool.submit(_seed_child, hosts, self.db_url, self.url, seed).result()
        self.uuids: list[str] = seeded.pop("uuids")
        self.project: str = seeded.pop("project")
        self.user: str = seeded.pop("user")
        self.seeded = seeded
        self.setup_s = time.perf_counter() - t0
        self.client = PlacementClient(self.url, retry_backoff=0.05)
        self.pid = self.service.pid or 0
        self.meter = Meter(self.pid, self.db_name)
        stack.callback(self.meter.close)


# --------------------------------------------------------------------------- measuring


def _task_cpu(pid: int) -> dict[int, float]:
    """tid -> CPU seconds of every thread of ``pid``."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(tid)] = (int(fields[11]) + int(fields[12])) / _TICK
    return out


def _busy_seconds() -> float:
    """CPU seconds the whole machine has been busy (/proc/stat; idle and iowait left out)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / _TICK


def _rss_mb(pid: int | str = "self") -> dict[str, float]:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    out[key] = int(value.split()[0]) / 1024.0
    except OSError:
        pass
    return out


def _reset_peak_rss() -> None:
    """Start VmHWM again from the current RSS (Linux: 5 > clear_refs)."""
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _tree_rss_mb(root: int) -> float:
    procs = proc_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += _rss_mb(pid).get("VmRSS", 0.0)
        todo.extend(children.get(pid, []))
    return total


_REQUEST = re.compile(rb'"(GET|PUT|POST|DELETE|PATCH) ')


def _log_offset(cloud: Cloud) -> int:
    path = cloud.service.log_path
    return path.stat().st_size if path.exists() else 0


def _requests_since(cloud: Cloud, offset: int) -> dict[str, int]:
    """Requests Placement logged since ``offset`` of its log, by method (one requestlog line
    per request, written when it is answered)."""
    counts: dict[str, int] = {}
    path = cloud.service.log_path
    if not path.exists():
        return counts
    with open(path, "rb") as f:
        f.seek(offset)
        for m in _REQUEST.finditer(f.read()):
            method = m.group(1).decode()
            counts[method] = counts.get(method, 0) + 1
    return counts


class Meter:
    """CPU seconds so far of Placement, MariaDB (this database's connection threads and the
    whole server), this process, the writer, and the whole machine."""

    def __init__(self, placement_pid: int, db_name: str):
        self.placement_pid = placement_pid
        self.db_name = db_name
        self._engine = sa.create_engine(
            db.api.normalize_url(placement_seed.MARIADB_SERVER), pool_size=1, max_overflow=0
        )
        self.mariadb_pid = next(
            (pid for pid, (_, comm, _) in proc_table().items() if comm == "mariadbd"), 0
        )

    def close(self) -> None:
        self._engine.dispose()

    def _db_tids(self) -> set[int]:
        with self._engine.connect() as conn:
            rows = conn.execute(
                sa.text("SELECT TID FROM information_schema.PROCESSLIST WHERE DB = :db"),
                {"db": self.db_name},
            )
            return {int(tid) for (tid,) in rows if tid}

    def snapshot(self, writer_pid: int | None = None) -> dict[str, Any]:
        tids = self._db_tids()
        threads = _task_cpu(self.mariadb_pid) if self.mariadb_pid else {}
        singles = {"client": os.getpid()}
        if writer_pid:
            singles["writer"] = writer_pid
        cpu = cpu_by_group({"placement": self.placement_pid}, {"mariadb": "mariadbd"}, singles)
        return {
            "at": time.monotonic(),
            "cpu": cpu,
            "tids": tids,
            "threads": threads,
            "busy": _busy_seconds(),
            "load": os.getloadavg(),
        }

    @staticmethod
    def delta(a: dict[str, Any], b: dict[str, Any]) -> dict[str, float]:
        """CPU seconds between two snapshots: placement, mariadb_conns (this database's
        connection threads), mariadb_server, client, writer, others (the rest of the
        machine)."""
        conns = 0.0
        for tid in a["tids"] | b["tids"]:
            if tid in b["threads"]:
                conns += b["threads"][tid] - a["threads"].get(tid, 0.0)
        out = {
            "placement": b["cpu"]["placement"] - a["cpu"]["placement"],
            "mariadb_conns": conns,
            "mariadb_server": b["cpu"]["mariadb"] - a["cpu"]["mariadb"],
            "client": b["cpu"]["client"] - a["cpu"]["client"],
            "writer": b["cpu"].get("writer", 0.0) - a["cpu"].get("writer", 0.0),
        }
        busy = b["busy"] - a["busy"]
        ours = out["placement"] + out["mariadb_conns"] + out["client"] + out["writer"]
        out["others"] = max(0.0, busy - ours)
        return out


def _per_s(cpu: dict[str, float], wall: float) -> dict[str, float]:
    """CPU seconds → CPU ms per second of wall time."""
    return {k: round(v * 1000.0 / wall, 1) for k, v in cpu.items()} if wall > 0 else {}


def _stats_ms(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ms = [v * 1000.0 for v in values]
    return {
        "p50": round(statistics.median(ms), 1),
        "p99": round(percentile(ms, 99), 1),
        "max": round(max(ms), 1),
    }


# --------------------------------------------------------------------------- the writer


def make_plan(
    uuids: list[str], rate: float, seconds: float, seed: int
) -> list[tuple[float, str, str, str]]:
    """(offset s, "claim" or "delete", consumer, provider) sorted by offset: ``rate`` claims a
    second of new consumers on random providers, every ``DELETE_EVERY``-th consumer deleted
    ``DELETE_AFTER_S`` later (when that is still inside the window)."""
    rng = random.Random(seed)
    plan = []
    for i in range(int(rate * seconds)):
        offset = i / rate
        consumer = str(uuidlib.UUID(int=rng.getrandbits(128), version=4))
        rp = rng.choice(uuids)
        plan.append((offset, "claim", consumer, rp))
        if i % DELETE_EVERY == DELETE_EVERY - 1 and offset + DELETE_AFTER_S < seconds:
            plan.append((offset + DELETE_AFTER_S, "delete", consumer, rp))
    plan.sort(key=lambda step: step[0])
    return plan


def _writer_main(conn: Any, url: str, plan: list, project: str, user: str) -> None:
    """The writer process: waits for the start time, then follows ``plan``; sends back per
    step (lateness s, seconds taken, monotonic time done, status)."""
    client = PlacementClient(url, retry_backoff=0.05)
    client.ping()
    conn.send("ready")
    t0 = conn.recv()
    results: list[Any] = [None] * len(plan)

    def step(i: int, op: str, consumer: str, rp: str, due: float) -> None:
        sent = time.monotonic()
        try:
            if op == "claim":
                alloc = {"allocations": {rp: {"resources": dict(CLAIM)}}}
                client.claim_resources(consumer, alloc, project, user)
                status = "ok"
            else:
                status = "ok" if client.delete_allocation_for_instance(consumer) else "absent"
        except Exception as exc:  # reported with the window
            status = f"{type(exc).__name__}: {exc}"[:200]
        done = time.monotonic()
        results[i] = (sent - due, done - sent, done, status)

    with ThreadPoolExecutor(WRITER_THREADS) as pool:
        for i, (offset, op, consumer, rp) in enumerate(plan):
            due = t0 + offset
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            pool.submit(step, i, op, consumer, rp, due)
    conn.send(results)


class Writer:
    """The writer process, started and ready; ``go()`` starts the plan, ``results()`` waits
    for its end."""

    def __init__(self, cloud: Cloud, plan: list):
        self.plan = plan
        self._conn, child = _SPAWN.Pipe()
        self.proc = _SPAWN.Process(
            target=_writer_main,
            args=(child, cloud.url, plan, cloud.project, cloud.user),
            daemon=True,
        )
        self.proc.start()
        if not self._conn.poll(120) or self._conn.recv() != "ready":
            self.stop()
            raise placement_seed.BenchSetupError("the writer process did not start")

    def go(self, t0: float) -> None:
        self._conn.send(t0)

    def results(self, timeout: float) -> list[Any]:
        if not self._conn.poll(timeout):
            raise placement_seed.BenchSetupError(f"the writer did not finish in {timeout:.0f} s")
        return self._conn.recv()

    def stop(self) -> None:
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)


def writer_summary(plan: list, results: list, t0: float) -> dict[str, Any]:
    """What the writer did: claims made (and refused: the provider is full), deletes,
    errors, the rate it achieved over its own span, its claims' latency and how late it
    fell behind its plan (it kept up when never more than a second late)."""
    claims = [(p, r) for p, r in zip(plan, results, strict=True) if p[1] == "claim" and r]
    deletes = [(p, r) for p, r in zip(plan, results, strict=True) if p[1] == "delete" and r]
    ok = [r for _, r in claims if r[3] == "ok"]
    full = [r for _, r in claims if r[3].startswith("ClaimConflict")]
    errors = [r[3] for _, r in claims + deletes if r[3] not in ("ok", "absent")]
    errors = [e for e in errors if not e.startswith("ClaimConflict")]
    span = max((r[2] for _, r in claims + deletes), default=t0) - t0
    late = max((r[0] for _, r in claims), default=0.0)
    return {
        "claims": len(claims),
        "claims_ok": len(ok),
        "claims_refused_full": len(full),
        "claims_per_s": round(len(ok) / span, 1) if span > 0 else 0.0,
        "span_s": round(span, 2),
        "deletes": len(deletes),
        "deletes_ok": sum(1 for _, r in deletes if r[3] == "ok"),
        "errors": len(errors),
        "first_errors": sorted({e[:120] for e in errors})[:3],
        "claim_ms": _stats_ms([r[1] for r in ok]),
        "late_max_ms": round(late * 1000.0, 1),
        "kept_up": late < 1.0,
    }


# --------------------------------------------------------------------------- staleness


class Tracker:
    """After every poll: which planned claims the view shows by now, and which planned
    deletes it no longer shows. ``t0`` is the monotonic time the plan started."""

    def __init__(self, view: ProviderView, plan: list, t0: float):
        self.view = view
        self.t0 = t0
        self._steps = plan
        self._next = 0
        self._open_claims: dict[str, str] = {}  # consumer -> provider, due, not seen yet
        self._open_deletes: dict[str, str] = {}
        self._deleted: set[str] = set()
        self.seen: dict[str, float] = {}  # consumer -> end of the poll that showed it
        self.gone: dict[str, float] = {}  # consumer -> end of the poll that dropped it

    def after_poll(self, end: float) -> None:
        elapsed = end - self.t0
        steps = self._steps
        while self._next < len(steps) and steps[self._next][0] <= elapsed:
            _, op, consumer, rp = steps[self._next]
            if op == "claim":
                self._open_claims[consumer] = rp
            else:
                self._deleted.add(consumer)
                self._open_deletes[consumer] = rp
            self._next += 1
        view = self.view
        for consumer, rp in list(self._open_claims.items()):
            rec = view.record(rp)
            if rec is not None and consumer in rec.consumers:
                self.seen[consumer] = end
                del self._open_claims[consumer]
        for consumer, rp in list(self._open_deletes.items()):
            if consumer not in self.seen:
                continue  # never shown (yet): nothing to drop
            rec = view.record(rp)
            if rec is None or consumer not in rec.consumers:
                self.gone[consumer] = end
                del self._open_deletes[consumer]

    def staleness(self, plan: list, results: list, last_poll_start: float) -> dict[str, Any]:
        """Claims (and deletes) Placement answered 204 before the last poll started: how long
        after the 204 the view showed them (p50/p99/max ms), how many within one and two
        intervals, how many it never showed. A claim deleted (204) before the view showed it
        is left out (counted as ``deleted_first``): there was nothing left to show."""
        deleted_at = {
            step[2]: res[2]
            for step, res in zip(plan, results, strict=True)
            if step[1] == "delete" and res and res[3] == "ok"
        }
        out: dict[str, Any] = {}
        for op, found in (("claim", self.seen), ("delete", self.gone)):
            lags, unseen, eligible, deleted_first = [], 0, 0, 0
            for step, res in zip(plan, results, strict=True):
                if step[1] != op or not res or res[3] != "ok" or res[2] >= last_poll_start:
                    continue
                consumer = step[2]
                if op == "delete" and consumer not in self.seen:
                    continue  # the claim was never shown: its delete cannot be
                if op == "claim" and consumer not in found and consumer in deleted_at:
                    deleted_first += 1
                    continue
                eligible += 1
                if consumer in found:
                    lags.append(found[consumer] - res[2])
                else:
                    unseen += 1
            after = sum(
                1
                for step, res in zip(plan, results, strict=True)
                if step[1] == op and res and res[3] == "ok" and res[2] >= last_poll_start
            )
            out[op] = {
                "eligible": eligible,
                "after_last_poll": after,
                "seen": len(lags),
                "unseen": unseen,
                "lag_ms": _stats_ms(lags),
                "within_1_interval": _share(lags, INTERVAL, eligible),
                "within_2_intervals": _share(lags, 2 * INTERVAL, eligible),
            }
            if op == "claim":
                out[op]["deleted_first"] = deleted_first
        return out


def _share(values: list[float], limit: float, of: int) -> float | None:
    return round(sum(1 for v in values if v <= limit) / of, 3) if of else None


# --------------------------------------------------------------------------- windows


class Poller:
    """Polls ``feed`` on ``view`` as ``ViewRefresher`` does, recording each poll."""

    def __init__(self, view: ProviderView, feed: Any):
        self.view = view
        self.feed = feed
        self.polls: list[tuple[float, float, int]] = []  # (start, end, providers read)
        self.failures: list[str] = []

    def poll(self) -> tuple[float, float]:
        start = time.monotonic()
        try:
            read = self.feed.poll(self.view)
        except Exception as exc:  # the refresher logs and tries again next interval
            self.failures.append(f"{type(exc).__name__}: {exc}"[:200])
            read = -1
        end = time.monotonic()
        self.polls.append((start, end, read))
        return start, end

    def run_until(self, deadline: float, after: Callable[[float], None] | None = None) -> None:
        """Poll every ``INTERVAL`` (or at once after a poll that took longer) until
        ``deadline``; no poll starts after it."""
        next_at = time.monotonic()
        while True:
            now = time.monotonic()
            if now >= deadline:
                return
            if now < next_at:
                time.sleep(min(next_at, deadline) - now)
                continue
            start, end = self.poll()
            if after is not None:
                after(end)
            next_at = start + INTERVAL


def _counters(feed: Any) -> dict[str, int]:
    return {
        k: getattr(feed, k)
        for k in ("reads", "full_scans", "usage_scans")
        if isinstance(getattr(feed, k, None), int)
    }


def window(
    cloud: Cloud,
    seconds: float,
    *,
    view: ProviderView | None = None,
    feed: Any = None,
    plan: list | None = None,
) -> dict[str, Any]:
    """One measured window: the view polled (when ``feed`` is given) and/or the writer
    following ``plan``."""
    writer = Writer(cloud, plan) if plan is not None else None
    poller = None
    try:
        if feed is not None:
            assert view is not None
            poller = Poller(view, feed)
            poller.poll()  # unmeasured: the view is current when the window starts
            poller.polls.clear()
            poller.failures.clear()
        _reset_peak_rss()
        before_counters = _counters(feed) if feed is not None else {}
        writer_pid = writer.proc.pid if writer else None
        snap0 = cloud.meter.snapshot(writer_pid)
        log0 = _log_offset(cloud)
        t0 = time.monotonic() + 0.05
        tracker = Tracker(view, plan, t0) if (plan is not None and view is not None) else None
        if writer is not None:
            writer.go(t0)
        if poller is not None:
            time.sleep(max(0.0, t0 - time.monotonic()))
            poller.run_until(t0 + seconds, tracker.after_poll if tracker else None)
        results = None
        if writer is not None:
            results = writer.results(timeout=seconds + 600)
        else:
            time.sleep(max(0.0, t0 + seconds - time.monotonic()))
        snap1 = cloud.meter.snapshot(writer_pid)
        requests = _requests_since(cloud, log0)
    finally:
        if writer is not None:
            writer.stop()
    wall = snap1["at"] - t0
    cpu = Meter.delta(snap0, snap1)
    out: dict[str, Any] = {
        "seconds": round(wall, 2),
        "cpu_s": {k: round(v, 3) for k, v in cpu.items()},
        "cpu_ms_per_s": _per_s(cpu, wall),
        "load_avg": [round(x, 2) for x in snap0["load"]],
        "load_avg_end": [round(x, 2) for x in snap1["load"]],
        "noisy": cpu["others"] * 1000.0 / wall > NOISY_OTHERS_MS_PER_S if wall > 0 else False,
        "placement_requests": requests,
        "placement_requests_per_s": {k: round(v / wall, 1) for k, v in requests.items()}
        if wall > 0
        else {},
    }
    mem = _rss_mb()
    out["client_rss_mb"] = round(mem.get("VmRSS", 0.0), 1)
    out["client_peak_rss_mb"] = round(mem.get("VmHWM", 0.0), 1)
    out["placement_rss_mb"] = round(_tree_rss_mb(cloud.pid), 1)
    if poller is not None:
        polls = poller.polls
        walls = [end - start for start, end, _ in polls]
        reads = [r for _, _, r in polls if r >= 0]
        after_counters = _counters(feed)
        out.update(
            {
                "polls": len(polls),
                "poll_ms": _stats_ms(walls),
                "polls_over_interval": sum(1 for w in walls if w > INTERVAL),
                "read_per_poll": round(sum(reads) / len(reads), 1) if reads else 0.0,
                "poll_failures": len(poller.failures),
                "first_poll_failures": poller.failures[:3],
                "feed_counters": {
                    k: after_counters[k] - before_counters.get(k, 0) for k in after_counters
                },
                # (poll wall s, providers read) of the first polls, in order
                "poll_series": [(round(e - b, 2), r) for b, e, r in polls[:40]],
            }
        )
    if writer is not None and results is not None:
        assert plan is not None
        out["writer"] = writer_summary(plan, results, t0)
        if tracker is not None and poller is not None and poller.polls:
            last_start = poller.polls[-1][0]
            out["staleness"] = tracker.staleness(plan, results, last_start)
    return out


def view_added(alone: dict[str, Any], loaded: dict[str, Any]) -> dict[str, float]:
    """CPU ms per second that the view adds under load: the window with the view less the
    writer-alone window (same claims), over the wall time of the window with the view."""
    wall = loaded["seconds"]
    out = {}
    for key in ("placement", "mariadb_conns", "mariadb_server"):
        out[key] = round((loaded["cpu_s"][key] - alone["cpu_s"][key]) * 1000.0 / wall, 1)
    out["client"] = loaded["cpu_ms_per_s"]["client"]
    gets = loaded.get("placement_requests", {}).get("GET", 0)
    gets -= alone.get("placement_requests", {}).get("GET", 0)
    out["placement_gets_per_s"] = round(gets / wall, 1)
    return out


# --------------------------------------------------------------------------- cold loads


def _measured(cloud: Cloud, fn: Callable[[], Any]) -> tuple[Any, dict[str, Any]]:
    """Run ``fn`` measured: wall time, CPU seconds per component, the client's RSS."""
    rss0 = _rss_mb().get("VmRSS", 0.0)
    _reset_peak_rss()
    snap0 = cloud.meter.snapshot()
    t0 = time.monotonic()
    value = fn()
    wall = time.monotonic() - t0
    snap1 = cloud.meter.snapshot()
    cpu = Meter.delta(snap0, snap1)
    mem = _rss_mb()
    return value, {
        "wall_s": round(wall, 3),
        "cpu_s": {k: round(v, 3) for k, v in cpu.items() if k != "writer"},
        "client_rss_before_mb": round(rss0, 1),
        "client_rss_mb": round(mem.get("VmRSS", 0.0), 1),
        "client_peak_rss_mb": round(mem.get("VmHWM", 0.0), 1),
        "load_avg": [round(x, 2) for x in snap0["load"]],
    }


def load_database(cloud: Cloud) -> tuple[ProviderView, DatabaseFeed, dict[str, Any]]:
    view = ProviderView()
    feed = DatabaseFeed(cloud.db_url)
    _, figures = _measured(cloud, lambda: feed.load(view))
    figures["providers"] = len(view)
    return view, feed, figures


def _api_feed(cloud: Cloud) -> ApiFeed:
    return ApiFeed(cloud.client, threads=API_THREADS, sweep_period=SWEEP_PERIOD)


def sample_api_load(cloud: Cloud, size: int) -> dict[str, Any]:
    """The API feed's cold load extrapolated: one full listing, and ``API_SAMPLE`` providers
    read as the load reads them (four GETs each, ``API_THREADS`` at a time)."""
    listing, listed = _measured(cloud, cloud.client.list_providers)
    feed = _api_feed(cloud)
    sample = random.Random(size).sample(listing, min(API_SAMPLE, len(listing)))
    del listing

    def read() -> int:
        with ThreadPoolExecutor(API_THREADS) as pool:
            return len(list(pool.map(feed.read_provider, sample)))

    try:
        _, sampled = _measured(cloud, read)
    finally:
        feed.close()
    scale = size / len(sample)
    cpu = {
        k: round(listed["cpu_s"][k] + sampled["cpu_s"][k] * scale, 2)
        for k in ("placement", "mariadb_conns", "mariadb_server", "client", "others")
    }
    return {
        "wall_s": round(listed["wall_s"] + sampled["wall_s"] * scale, 1),
        "cpu_s": cpu,
        "listing": listed,
        "sample": dict(sampled, providers=len(sample)),
        "per_provider_ms": {
            "wall": round(sampled["wall_s"] * 1000.0 / len(sample), 2),
            "placement_cpu": round(sampled["cpu_s"]["placement"] * 1000.0 / len(sample), 2),
            "client_cpu": round(sampled["cpu_s"]["client"] * 1000.0 / len(sample), 2),
        },
        "load_avg": listed["load_avg"],
    }


def load_api(cloud: Cloud, size: int) -> tuple[ProviderView | None, dict[str, Any]]:
    """The API feed's cold load: measured when expected within ``API_LOAD_BUDGET_S``, else
    extrapolated (the view is then None)."""
    estimate = None
    if size > 1000:
        estimate = sample_api_load(cloud, size)
        if estimate["wall_s"] > API_LOAD_BUDGET_S:
            return None, dict(estimate, extrapolated=True)
    view = ProviderView()
    feed = _api_feed(cloud)
    try:
        _, figures = _measured(cloud, lambda: feed.load(view))
    finally:
        feed.close()
    figures["providers"] = len(view)
    figures["extrapolated"] = False
    if estimate is not None:
        figures["estimate"] = estimate
    return view, figures


def full_scan_cost(
    cloud: Cloud, view: ProviderView, feed: DatabaseFeed, idle: dict[str, Any], every: float
) -> dict[str, Any]:
    """The database feed's full scan (every provider's (id, generation) compared, every
    ``every`` seconds), measured apart: the windows run without it, so that each does not
    hold one full scan or none depending on where the 30 s fell. ``FULL_SCAN_POLLS`` polls
    with the scan, back to back; amortized = (a poll with it - an idle poll) / ``every``."""
    walls: list[float] = []

    def polls() -> None:
        for _ in range(FULL_SCAN_POLLS):
            t = time.monotonic()
            feed.poll(view)
            walls.append(time.monotonic() - t)

    before = feed.full_scans
    feed.full_scan_every = 1e-9  # every poll
    try:
        _, figures = _measured(cloud, polls)
    finally:
        feed.full_scan_every = 0
    keys = ("placement", "mariadb_conns", "mariadb_server", "client")
    per_poll = {k: figures["cpu_s"][k] / FULL_SCAN_POLLS for k in keys}
    idle_per_poll = {k: idle["cpu_s"][k] / max(1, idle.get("polls", 1)) for k in keys}
    return {
        "polls": FULL_SCAN_POLLS,
        "full_scans": feed.full_scans - before,
        "every_s": every,
        "poll_ms": _stats_ms(walls),
        "cpu_ms_per_poll": {k: round(v * 1000.0, 2) for k, v in per_poll.items()},
        "amortized_ms_per_s": {
            k: round((per_poll[k] - idle_per_poll[k]) * 1000.0 / every, 2) for k in keys
        },
        "load_avg": figures["load_avg"],
    }


# --------------------------------------------------------------------------- one size


def measure_feed(
    cloud: Cloud, size: int, feed_name: str, seconds: float, rates: Iterable[int], seed: int
) -> dict[str, Any]:
    row: dict[str, Any] = {"hosts": size, "feed": feed_name, "interval_s": INTERVAL}
    plans = {
        rate: (
            make_plan(cloud.uuids, rate, seconds, seed * 1000 + rate),
            make_plan(cloud.uuids, rate, seconds, seed * 1000 + rate + 500),
        )
        for rate in rates
    }
    alone = {rate: window(cloud, seconds, plan=plans[rate][0]) for rate in plans}

    db_feed = None
    if feed_name == "database":
        view, db_feed, row["load"] = load_database(cloud)
        full_every = db_feed.full_scan_every
        db_feed.full_scan_every = 0  # measured apart (full_scan_cost)
        make_feed: Callable[[], Any] = lambda: db_feed  # noqa: E731 - one feed for all windows
    else:
        view, row["load"] = load_api(cloud, size)
        if view is None:
            # the steady state is what the API feed's polls cost: load through the database
            view, loader, loaded = load_database(cloud)
            loader.close()
            row["view_loaded_by_database_s"] = loaded["wall_s"]
        make_feed = lambda: _api_feed(cloud)  # noqa: E731 - a fresh feed per window
    row["providers_in_view"] = len(view)

    def with_view(plan: list | None) -> dict[str, Any]:
        feed = make_feed()
        try:
            return window(cloud, seconds, view=view, feed=feed, plan=plan)
        finally:
            if feed is not db_feed:
                feed.close()

    try:
        row["idle"] = with_view(None)
        if db_feed is not None and full_every:
            row["full_scan"] = full_scan_cost(cloud, view, db_feed, row["idle"], full_every)
        row["under_load"] = {}
        for rate, (_, plan) in plans.items():
            loaded = with_view(plan)
            row["under_load"][str(rate)] = {
                "rate": rate,
                "alone": alone[rate],
                "with_view": loaded,
                "view_added_ms_per_s": view_added(alone[rate], loaded),
            }
    finally:
        if db_feed is not None:
            db_feed.close()
    return row


def run(
    sizes: list[int],
    repeats: int,
    out: dict,
    *,
    feeds: tuple[str, ...] = FEEDS,
    rates: tuple[int, ...] | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict:
    """The view section: for each size and feed, the cold load and what keeping the view
    current costs idle and under load. ``repeats`` is the length of each window in seconds
    (polls at 1 Hz); below 10 only the first rate runs. Written into ``out`` (returned)."""
    from benchmarks.e2e import quiet_logging

    if rates is None:
        rates = RATES if repeats >= 10 else QUICK_RATES
    say = progress or (lambda message: LOG.info("%s", message))
    result = out
    result.update(
        {
            "section": "view",
            "rows": [],
            "clouds": [],
            "window_s": repeats,
            "rates": list(rates),
            "notes": [
                "Placement 16 on MariaDB, gunicorn 2 sync workers; Placement, MariaDB, the "
                "writer and the view share 2 cores",
                f"view polled every {INTERVAL:g} s; API feed: {API_THREADS} threads, sweep "
                f"period {SWEEP_PERIOD:g} s; database feed: its windows run without the full "
                "scan (every 30 s), measured apart and amortized ('+scan/30s'; the summary's "
                "idle figure includes it)",
                "CPU in ms per second of wall time (1000 = one core busy); MariaDB = the "
                "threads serving this Placement database's connections, 'server' = the "
                "whole mariadbd (shared)",
                "under load: the window with the view less the writer alone (same number of "
                "claims); client = this process (the writer is its own process)",
                f"writer: PUT /allocations of new consumers (VCPU 1, MEMORY_MB 512) on random "
                f"providers, every {DELETE_EVERY}th deleted {DELETE_AFTER_S:g} s later",
                "staleness: from the writer's 204 to the end of the first poll after which "
                "the view shows the change",
            ],
        }
    )
    for size in sizes:
        with contextlib.ExitStack() as stack:
            stack.enter_context(quiet_logging())
            say(f"{size:,} providers: starting Placement and seeding")
            cloud = Cloud(size, stack)
            result["clouds"].append(
                {
                    "hosts": size,
                    "setup_s": round(cloud.setup_s, 1),
                    "placement_start_s": round(cloud.started_s, 1),
                    **cloud.seeded,
                }
            )
            for n, feed_name in enumerate(feeds):
                say(f"{size:,} providers: {feed_name} feed")
                row = measure_feed(cloud, size, feed_name, float(repeats), rates, seed=n)
                result["rows"].append(row)
    result["summary"] = summarize(result["rows"])
    return result


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per feed and size, what keeping the view current costs Placement's service and its
    database (CPU ms/s): idle (the database feed's full scan amortized) and what the view
    adds to each rate of claims."""
    out: dict[str, Any] = {}
    for r in rows:
        idle = dict(r["idle"]["cpu_ms_per_s"])
        for k, v in (r.get("full_scan") or {}).get("amortized_ms_per_s", {}).items():
            idle[k] = idle.get(k, 0.0) + v
        entry = {"idle": {"placement": round(idle["placement"], 1)}}
        entry["idle"]["mariadb"] = round(idle["mariadb_conns"], 1)
        for rate, load in r.get("under_load", {}).items():
            added = load["view_added_ms_per_s"]
            entry[f"{rate}/s"] = {
                "placement": added["placement"],
                "mariadb": added["mariadb_conns"],
            }
        out.setdefault(r["feed"], {})[str(r["hosts"])] = entry
    return out


# --------------------------------------------------------------------------- the tables


def _f(value: Any, fmt: str = "{:,.0f}") -> str:
    return "-" if value is None else fmt.format(value)


def _pm(stats: dict[str, float] | None) -> str:
    if not stats:
        return "-"
    return f"{_f(stats.get('p50'))} / {_f(stats.get('p99'))}"


def _load1(figures: dict[str, Any]) -> str:
    load = figures.get("load_avg")
    return f"{load[0]:.1f}" if load else "-"


def _stale(claim: dict[str, Any]) -> str:
    if not claim:
        return "-"
    if not claim.get("eligible") and claim.get("after_last_poll"):
        return "no later poll"  # every claim came after the window's last poll started
    return _pm(claim.get("lag_ms"))


def _kept(writer: dict[str, Any]) -> str:
    if writer.get("kept_up"):
        return "kept up"
    return f"up to {writer.get('late_max_ms', 0) / 1000:.0f} s late"


def format_table(result: dict) -> str:
    rows = result.get("rows") or []
    text = []
    loads = []
    for r in rows:
        ld = r["load"]
        cpu = ld["cpu_s"]
        note = "extrapolated" if ld.get("extrapolated") else ""
        if ld.get("estimate"):
            note = f"(estimated {ld['estimate']['wall_s']:.0f} s)"
        loads.append(
            [
                f"{r['hosts']:,}",
                r["feed"],
                _f(ld["wall_s"], "{:,.2f}"),
                _f(cpu.get("placement"), "{:,.2f}"),
                _f(cpu.get("mariadb_conns"), "{:,.2f}"),
                _f(cpu.get("mariadb_server"), "{:,.2f}"),
                _f(cpu.get("client"), "{:,.2f}"),
                _f(ld.get("client_rss_mb"), "{:,.0f}"),
                note,
                _load1(ld),
            ]
        )
    text.append("cold load (seconds; CPU seconds):")
    text.append(
        table(
            [
                "hosts",
                "feed",
                "wall s",
                "Placement CPU",
                "MariaDB CPU",
                "(server)",
                "client CPU",
                "client RSS MB",
                "",
                "load1",
            ],
            loads,
        )
    )
    lines = []
    for r in rows:
        phases = [("idle", r["idle"], r["idle"]["cpu_ms_per_s"])]
        if r.get("full_scan"):
            fs = r["full_scan"]
            phases.append((f"+scan/{fs['every_s']:g}s", fs, fs["amortized_ms_per_s"]))
        for rate, load in r.get("under_load", {}).items():
            behind = not all(
                load[k].get("writer", {}).get("kept_up", True) for k in ("alone", "with_view")
            )
            marker = "*" if behind else ""
            phases.append((f"{rate}/s{marker}", load["with_view"], load["view_added_ms_per_s"]))
        for name, w, cpu in phases:
            gets = cpu.get("placement_gets_per_s")
            if gets is None and "placement_requests_per_s" in w:
                gets = w["placement_requests_per_s"].get("GET", 0.0)
            stale = (w.get("staleness") or {}).get("claim") or {}
            dele = (w.get("staleness") or {}).get("delete") or {}
            within = stale.get("within_1_interval")
            lines.append(
                [
                    f"{r['hosts']:,}",
                    r["feed"],
                    name,
                    w.get("polls"),
                    _pm(w.get("poll_ms")),
                    _f((w.get("poll_ms") or {}).get("max")),
                    _f(w.get("read_per_poll"), "{:,.1f}"),
                    _f(gets, "{:,.1f}"),
                    _f(cpu.get("placement"), "{:,.1f}"),
                    _f(cpu.get("mariadb_conns"), "{:,.1f}"),
                    _f(cpu.get("mariadb_server"), "{:,.1f}"),
                    _f(cpu.get("client"), "{:,.1f}"),
                    _stale(stale),
                    _f(within, "{:.0%}"),
                    f"{dele.get('seen', 0)}/{dele.get('eligible', 0)}" if dele else "-",
                    _f((w.get("cpu_ms_per_s") or {}).get("others")),
                    _load1(w) + ("!" if w.get("noisy") else ""),
                ]
            )
    text.append("")
    text.append(
        "keeping the view current (CPU ms per second of wall time; under load: what the view "
        "adds to the writer alone):"
    )
    text.append(
        table(
            [
                "hosts",
                "feed",
                "phase",
                "polls",
                "poll ms p50/p99",
                "max",
                "read/poll",
                "GET/s",
                "Placement",
                "MariaDB",
                "(server)",
                "client",
                "stale ms p50/p99",
                "<=1 int",
                "deletes seen",
                "others",
                "load1",
            ],
            lines,
        )
    )
    text.append("")
    for r in rows:
        for rate, load in r.get("under_load", {}).items():
            a, w = load["alone"], load["with_view"]
            wa, ww = a.get("writer", {}), w.get("writer", {})
            stale = (w.get("staleness") or {}).get("claim") or {}
            dele = (w.get("staleness") or {}).get("delete") or {}
            kept, kept_v = _kept(wa), _kept(ww)
            text.append(
                f"  {r['hosts']:,} {r['feed']} {rate}/s: writer alone: Placement "
                f"{a['cpu_ms_per_s']['placement']:.0f} ms/s, MariaDB "
                f"{a['cpu_ms_per_s']['mariadb_conns']:.0f} ms/s, {wa.get('claims_per_s')} "
                f"claims/s ({kept}), claim ms p50/p99 {_pm(wa.get('claim_ms'))}; with the "
                f"view: {ww.get('claims_per_s')} claims/s ({kept_v}), claim ms "
                f"{_pm(ww.get('claim_ms'))}, {ww.get('claims_refused_full', 0)} refused "
                f"(full); stale max {_f((stale.get('lag_ms') or {}).get('max'))} ms, unseen "
                f"{stale.get('unseen', '-')}, deleted before shown "
                f"{stale.get('deleted_first', '-')}; deletes seen {dele.get('seen', 0)}/"
                f"{dele.get('eligible', 0)} (lag {_pm(dele.get('lag_ms'))} ms); feed "
                f"{w.get('feed_counters')}"
                + (f"; writer errors {ww['first_errors']}" if ww.get("errors") else "")
            )
        for name, w in [("idle", r["idle"])] + [
            (f"{k}/s", v["with_view"]) for k, v in r.get("under_load", {}).items()
        ]:
            if w.get("poll_failures"):
                text.append(
                    f"  {r['hosts']:,} {r['feed']} {name}: {w['poll_failures']} poll(s) "
                    f"failed: {w['first_poll_failures']}"
                )
        counters = r["idle"].get("feed_counters") or {}
        text.append(
            f"  {r['hosts']:,} {r['feed']}: view {r['providers_in_view']:,} providers, client "
            f"RSS {r['idle']['client_rss_mb']:.0f} MB (peak while idle "
            f"{r['idle']['client_peak_rss_mb']:.0f} MB), Placement RSS "
            f"{r['idle']['placement_rss_mb']:.0f} MB; idle counters {counters}"
        )
        if r["load"].get("extrapolated"):
            ld = r["load"]
            text.append(
                f"  {r['hosts']:,} {r['feed']}: cold load extrapolated from one listing "
                f"({ld['listing']['wall_s']:.1f} s, Placement CPU "
                f"{ld['listing']['cpu_s']['placement']:.1f} s) and {ld['sample']['providers']} "
                f"providers read ({ld['per_provider_ms']}); the view was loaded through the "
                f"database ({r.get('view_loaded_by_database_s')} s) for the polls"
            )
    for c in result.get("clouds", []):
        text.append(
            f"  {c['hosts']:,} providers: {c.get('consumers', 0):,} consumers, "
            f"{c.get('allocation_rows', 0):,} allocation rows; setup {c['setup_s']} s "
            f"(fleet {c.get('build_fleet_s')} s, SQL seeding {c.get('seed_s', {}).get('total')} s)"
        )
    summary = result.get("summary") or {}
    if summary:
        text.append(
            "  what keeping the view current costs Placement + its MariaDB connections (CPU "
            "ms/s; idle with the database feed's full scan amortized; under load: added to the "
            "writer's own):"
        )
        for feed, by_size in summary.items():
            parts = [
                f"{int(size):,}: "
                + ", ".join(
                    f"{k} {v['placement']:,.0f} + {v['mariadb']:,.0f}" for k, v in entry.items()
                )
                for size, entry in by_size.items()
            ]
            text.append(f"    {feed}: " + "; ".join(parts))
    behind = [
        f"{r['hosts']:,} {r['feed']} {rate}/s"
        for r in rows
        for rate, load in r.get("under_load", {}).items()
        if not all(load[k].get("writer", {}).get("kept_up", True) for k in ("alone", "with_view"))
    ]
    if behind:
        text.append(
            "  * the writer fell more than a second behind its plan (the machine did not keep "
            f"up) in {', '.join(behind)}: its windows ran longer than planned, so what the "
            "view adds per second is not reliable there"
        )
    noisy = sum(
        1
        for r in rows
        for w in [r["idle"]] + [v["with_view"] for v in r.get("under_load", {}).values()]
        if w.get("noisy")
    )
    if noisy:
        text.append(
            f"  ! {noisy} window(s) ran while other processes used more than "
            f"{NOISY_OTHERS_MS_PER_S:.0f} ms/s of CPU ('others'): repeat them on a quieter machine"
        )
    return "\n".join(text)


# --------------------------------------------------------------------------- standalone


def _parse_sizes(text: str) -> list[int]:
    sizes = []
    for part in text.split(","):
        part = part.strip().lower().replace("_", "")
        if part:
            mult = 1000 if part.endswith("k") else 1
            sizes.append(int(float(part.rstrip("k")) * mult))
    return sizes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.view_cost",
        description="What keeping the provider view current costs Placement (issue 11).",
    )
    parser.add_argument("--sizes", type=_parse_sizes, default=None)
    parser.add_argument("--repeats", type=int, default=None, help="seconds per window")
    parser.add_argument("--feeds", default=",".join(FEEDS))
    parser.add_argument("--rates", default=None, help="claims per second, e.g. 20,50")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    # stopped with SIGTERM: unwind, so that Placement stops and its database is dropped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    sizes = args.sizes or list(QUICK_SIZES if args.quick else DEFAULT_SIZES)
    repeats = args.repeats or (QUICK_REPEATS if args.quick else DEFAULT_REPEATS)
    rates = tuple(int(x) for x in args.rates.split(",")) if args.rates else None

    def progress(message: str) -> None:
        if args.verbose:
            print(f"  .. {time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)

    out: dict[str, Any] = {"sizes": sizes, "repeats": repeats}
    result = run(
        sizes,
        repeats,
        out,
        feeds=tuple(args.feeds.split(",")),
        rates=rates,
        progress=progress,
    )
    print(format_table(result))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
