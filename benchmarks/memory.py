"""Memory section: resident memory of a scheduler process that holds N hosts.

The parent builds the fleet (benchmarks/fleet.py) and starts a child process,
``python -m benchmarks.memory --child``, which imports what the service imports, makes a
FilterScheduler (HostManager, filters, weighers) on the fleet's databases, loads every host,
runs a few requests (filter, weigh, consume) and reports ``VmRSS`` and ``VmHWM`` from
/proc/self/status: resident memory at the end, and the peak (which includes the transient
rows of the first full read).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

TARGET_RSS_MB = {100_000: 600.0}
NOVA_PEAK_MB = {100_000: 1_900.0}


def read_status_mb() -> dict[str, float]:
    """VmRSS and VmHWM of this process in MiB (Linux /proc)."""
    out: dict[str, float] = {}
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) / 1024.0
    return out


def _child(api_url: str, requests: int) -> dict[str, Any]:
    from benchmarks import core
    from benchmarks import fleet as fleet_mod
    from scheduler.conf import CONF
    from scheduler.objects import Flavor, ImageMeta, RequestSpec

    core.ensure_conf(CONF)
    gc.collect()
    baseline = read_status_mb()
    driver = core.make_driver(api_url, CONF)
    t0 = time.perf_counter()
    hosts = driver.host_manager.get_host_states_by_uuids(None)
    load_s = time.perf_counter() - t0
    count = len(hosts)
    del hosts
    gc.collect()
    loaded = read_status_mb()
    for i in range(requests):
        spec = RequestSpec(
            flavor=Flavor(memory_mb=4096, vcpus=2, root_gb=40, name="bench.medium"),
            project_id=fleet_mod.PROJECT_ID,
            user_id=fleet_mod.USER_ID,
            image=ImageMeta(id="bench-image", properties={"hw_architecture": "x86_64"}),
            instance_uuid=f"00000000-0000-4000-8000-{i:012d}",
        )
        hosts = driver.host_manager.get_host_states_by_uuids(None, spec)
        report = driver.filter_handler.run(hosts, spec, 0)
        ordered, _weights = driver.weight_handler.rank(report.hosts, spec)
        if ordered:
            ordered[0].consume_from_request(spec)
        del hosts, report, ordered
    gc.collect()
    final = read_status_mb()
    nested = _nested_view(driver)
    driver.stop()
    return {
        "hosts": count,
        "load_s": round(load_s, 2),
        "baseline_rss_mb": round(baseline["VmRSS"], 1),
        "after_load_rss_mb": round(loaded["VmRSS"], 1),
        "rss_mb": round(final["VmRSS"], 1),
        "hwm_mb": round(final["VmHWM"], 1),
        **nested,
    }


def _nested_view(driver: Any) -> dict[str, Any]:
    """The provider view of the same hosts with the nested fleet's trees (an OVS agent and two
    bridges under every compute node, four PCI devices under one in four:
    ``placement_seed.nested_children``), every other host's bridge holding a port's
    bandwidth: its resident size, per provider."""
    from benchmarks.capacity import root_record
    from benchmarks.placement_seed import BW_EGR, nested_children
    from placement_client.view import Inventory, ProviderRecord, ProviderView

    hosts = driver.host_manager.get_host_states_by_uuids(None)
    roots = [root_record(h) for h in hosts]
    del hosts
    gc.collect()
    before = read_status_mb()
    records = list(roots)
    for i, root in enumerate(roots):
        for child in nested_children({"uuid": root.uuid, "name": root.name}, i):
            used = consumers = None
            if BW_EGR in child["inventories"] and i % 2 == 0:
                used, consumers = {BW_EGR: 1000}, frozenset({f"port-{child['uuid']}"})
            records.append(
                ProviderRecord(
                    uuid=child["uuid"],
                    generation=1,
                    name=child["name"],
                    parent_uuid=child["parent_uuid"],
                    root_uuid=child["root_uuid"],
                    inventories={
                        rc: Inventory(inv["total"], max_unit=inv["max_unit"])
                        for rc, inv in child["inventories"].items()
                    },
                    used=used or {},
                    consumers=consumers or frozenset(),
                    alloc_rows=len(consumers or ()),
                    traits=frozenset(child["traits"]),
                )
            )
    del roots
    view = ProviderView()
    view.replace_all(records, view.now())
    providers = len(records)
    del records
    gc.collect()
    after = read_status_mb()
    grown = after["VmRSS"] - before["VmRSS"]
    del view
    return {
        "view_providers": providers,
        "view_mb": round(grown, 1),
        "view_bytes_per_provider": round(grown * 1024 * 1024 / max(1, providers)),
    }


def measure_size(
    size: int,
    repeats: int,
    workdir: str,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Build a fleet of ``size`` hosts and measure a child process holding it."""
    from benchmarks import fleet as fleet_mod

    say = progress or (lambda _msg: None)
    bench = fleet_mod.build(size, os.path.join(workdir, f"memory-{size}"))
    say(f"memory {size}: fleet built in {bench.build_seconds:.1f} s")
    try:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ)
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.memory", "--child", bench.api_url,
             "--requests", str(repeats)],
            capture_output=True,
            text=True,
            cwd=root,
            env=env,
            timeout=1800,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"memory child failed ({proc.returncode}): {proc.stderr[-2000:]}")
        row = json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        bench.close()
        shutil.rmtree(bench.directory, ignore_errors=True)
    if row["hosts"] != size:
        raise RuntimeError(f"the scheduler process loaded {row['hosts']} of {size} hosts")
    row["requests"] = repeats
    row["per_host_kb"] = round(
        (row["rss_mb"] - row["baseline_rss_mb"]) * 1024 / max(1, row["hosts"]), 2
    )
    target = TARGET_RSS_MB.get(size)
    if target is not None:
        row["target_rss_mb"] = target
        row["pass"] = row["rss_mb"] <= target
    if size in NOVA_PEAK_MB:
        row["nova_peak_mb"] = NOVA_PEAK_MB[size]
    return row


def run(
    sizes: list[int],
    repeats: int,
    out: dict[str, Any],
    *,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Measure every size in its own child process; fill ``out`` and return it."""
    workdir = tempfile.mkdtemp(prefix="novasched-bench-mem-")
    out.setdefault("rows", [])
    try:
        for size in sizes:
            out["rows"].append(measure_size(size, repeats, workdir, progress))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.memory")
    parser.add_argument("--child", metavar="API_URL", required=True)
    parser.add_argument("--requests", type=int, default=5)
    args = parser.parse_args(argv)
    print(json.dumps(_child(args.child, args.requests)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
