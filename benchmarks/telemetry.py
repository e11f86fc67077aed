"""Telemetry section: what counting a request into the Prometheus metrics costs.

Runs in a child process (``python -m benchmarks.telemetry --child``) so that
prometheus-client's multiprocess mode, chosen when it is imported, is this section's own.
Per mode — metrics off (the do-nothing stand-ins), in-memory values, multiprocess files
(what ``[metrics_exporter] listen`` uses) — it times what the RPC manager and the driver
record for one scheduled request (latency, result, instances, alternates, in-flight, five
stages, candidate source, two filters' removals, one claim), and, for the multiprocess
mode, one scrape of ``/metrics``' text from the files of two processes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any


def _record(m: Any, req: Any, count_request: Any) -> None:
    """One scheduled request, as scheduler/rpc/manager.py and the driver count it."""
    m.in_flight.inc()
    m.instances_requested.inc(1)
    count_request(req.trace)
    m.instances_scheduled.inc(1)
    m.alternates.inc(2)
    m.in_flight.dec()
    m.select_destinations.labels(result="scheduled").observe(0.03)
    m.requests.labels(result="scheduled").inc()


def _child(requests: int) -> dict[str, Any]:
    directory = tempfile.mkdtemp(prefix="novasched-bench-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.multiprocess import MultiProcessCollector

    from scheduler.drivers.outcome import count_request
    from scheduler.objects import Flavor, RequestSpec
    from scheduler.request import SchedulingRequest
    from scheduler.telemetry import metrics

    req = SchedulingRequest.of(RequestSpec(flavor=Flavor(vcpus=1, memory_mb=1, root_gb=0)))
    req.trace.timings = {
        "view": 1e-3,
        "host_states": 1e-3,
        "filter": 2e-3,
        "weigh": 1e-3,
        "claim": 0.01,
    }
    req.trace.candidate_source = "view"
    req.trace.filter_removed = {"ComputeFilter": 3, "ImagePropertiesFilter": 1}
    req.trace.claims_made = 1
    rows = []
    for mode in ("off", "in-memory", "multiprocess"):
        if mode == "off":
            metrics.disable()
        else:
            metrics.enable(multiprocess=mode == "multiprocess")
        m = metrics.M
        for _ in range(min(requests, 200)):  # warm: the label children exist
            _record(m, req, count_request)
        started = time.perf_counter()
        for _ in range(requests):
            _record(m, req, count_request)
        per_request = (time.perf_counter() - started) / requests
        rows.append({"mode": mode, "requests": requests, "us_per_request": per_request * 1e6})
    # a second process's values, as a worker would leave them
    pid = os.fork()
    if pid == 0:
        for _ in range(100):
            _record(metrics.M, req, count_request)
        os._exit(0)
    os.waitpid(pid, 0)
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=directory)
    started = time.perf_counter()
    scrapes = 20
    for _ in range(scrapes):
        text = generate_latest(registry)
    scrape = (time.perf_counter() - started) / scrapes
    return {
        "rows": rows,
        "scrape_ms": scrape * 1e3,
        "scrape_bytes": len(text),
        "series": sum(1 for line in text.decode().splitlines() if not line.startswith("#")),
    }


def run(sizes: list[int], repeats: int, out: dict[str, Any]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.telemetry", "--child", "--requests", str(repeats)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if proc.returncode != 0:
        out["error"] = proc.stderr.strip()[-2000:]
        return out
    out.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.telemetry")
    parser.add_argument("--child", action="store_true", required=True)
    parser.add_argument("--requests", type=int, default=20_000)
    args = parser.parse_args(argv)
    print(json.dumps(_child(args.requests)))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
