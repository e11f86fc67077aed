"""The metrics and health listener of a real ``novasched-scheduler``.

One scheduler (``[scheduler] workers = 2``, forked) runs as its own process with
``[metrics_exporter] listen`` on 127.0.0.1, against SQLite API and cell databases, the real
Placement service and the real RabbitMQ, reached through a fault proxy so that a test can
take the broker away from the scheduler (and only from it). A conductor-side client sends
real requests over RabbitMQ; the tests scrape ``/metrics`` over HTTP and check that the
counters and histograms moved by exactly what was asked, summed over both workers; that
``/readyz`` turns unready when the broker goes (cut off by the proxy, and RabbitMQ itself
stopped with ``rabbitmqctl stop_app``) and ready again when it is back; that SIGUSR2 writes a
Guru Meditation Report per process while the service keeps serving; and that a killed worker
is replaced without losing its counts.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

import db
from scheduler.exceptions import NoValidHost
from scheduler.objects import Flavor, RequestSpec
from scheduler.rpc.context import RequestContext
from scheduler.rpc.rpcapi import SchedulerAPI
from tests.faults.proxy import FaultProxy
from tests.functional.fixtures_cloud import load_fleet_and_placement
from tests.functional.fixtures_rabbit import RABBIT_PORT, ensure_rabbit, own_vhost
from tests.functional.fixtures_race import (
    scheduler_client,
    scheduler_nova_conf,
    scheduler_processes,
)

HOSTS = 12


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Scheduler:
    """The running service and what the tests need to reach it."""

    def __init__(self, proc: subprocess.Popen, base: str, log: Path, reports: Path, **kw: Any):
        self.proc = proc
        self.base = base
        self.log = log
        self.reports = reports
        self.client: SchedulerAPI = kw["client"]
        self.proxy: FaultProxy = kw["proxy"]
        self.fleet = kw["fleet"]
        self.cells: dict[str, int] = kw["cells"]  # cell name -> hosts
        self.workers: int = kw["workers"]

    def get(self, path: str) -> requests.Response:
        return requests.get(self.base + path, timeout=10)

    def scrape(self) -> dict[tuple[str, frozenset], float]:
        """Every sample of /metrics by (name, labels)."""
        answer = self.get("/metrics")
        assert answer.status_code == 200, answer.text
        samples = {}
        for family in text_string_to_metric_families(answer.text):
            for s in family.samples:
                samples[(s.name, frozenset(s.labels.items()))] = s.value
        return samples

    def wait_readyz(self, status: int, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"the scheduler exited {self.proc.returncode}:\n{self.log_text()}")
            try:
                last = self.get("/readyz")
            except requests.ConnectionError:
                last = None
            if last is not None and last.status_code == status:
                return last.text
            time.sleep(0.2)
        got = "no answer" if last is None else f"{last.status_code}:\n{last.text}"
        pytest.fail(f"/readyz did not answer {status} within {timeout} s ({got})")

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def delta(before: dict, after: dict, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


@pytest.fixture(
    scope="module", params=[("threading", 2), ("eventlet", 1)], ids=["threading-2", "eventlet-1"]
)
def scheduler(request, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scheduler]:
    """The service with 2 forked workers (threading, the default), or with one eventlet
    worker (``[DEFAULT] concurrency_backend = eventlet``: the listener, the monitor and the
    report run on green threads)."""
    backend, workers = request.param
    ensure_rabbit()
    tmp = tmp_path_factory.mktemp("exporter")
    exchange = f"novasched-metrics-{uuidlib.uuid4().hex[:8]}"
    with contextlib.ExitStack() as stack:
        api_url = f"sqlite:///{tmp / 'api.sqlite'}"
        api = db.get_engine(api_url)
        db.create_schema(api, "api")
        cell_urls = {}
        for name in ("cell1", "cell2"):
            url = f"sqlite:///{tmp / (name + '.sqlite')}"
            mapping = db.create_cell_mapping(api, name=name, database_connection=url)
            db.create_schema(url, "cell")
            cell_urls[mapping["uuid"]] = url
        placement_url, _, fleet = load_fleet_and_placement(
            stack, tmp, api, cell_urls, hosts=HOSTS, seed=5, unusable_fraction=0.0
        )
        names = {u: f"cell{i}" for i, u in enumerate(cell_urls, start=1)}
        cells: dict[str, int] = {}
        for cell in fleet.host_cells.values():
            cells[names[cell]] = cells.get(names[cell], 0) + 1
        proxy = FaultProxy("127.0.0.1", RABBIT_PORT)
        stack.callback(proxy.close)
        vhost = own_vhost(stack, "novasched-metrics")
        # the service reaches the broker through the proxy, the test's client directly
        via_proxy = vhost.replace(f":{RABBIT_PORT}/", f":{proxy.port}/")
        port = _free_port()
        reports = tmp / "reports"
        reports.mkdir()
        conf = scheduler_nova_conf(
            tmp / "nova.conf",
            transport_url=via_proxy,
            exchange=exchange,
            host="metrics-scheduler",
            api_url=api_url,
            placement_url=placement_url,
            workers=workers,
            default=f"concurrency_backend = {backend}\n",
            extra="[filter_scheduler]\n"
            "enabled_filters = ComputeFilter,SameHostFilter\n"
            "[metrics_exporter]\n"
            f"listen = 127.0.0.1:{port}\n"
            "probe_interval = 0.2\n"
            f"multiproc_dir = {tmp / 'metrics'}\n"
            "[oslo_reports]\n"
            f"log_dir = {reports}\n",
        )
        log = tmp / "scheduler.log"
        proc = stack.enter_context(scheduler_processes(conf, log))
        client = scheduler_client(stack, exchange, 60, vhost)
        svc = Scheduler(
            proc,
            f"http://127.0.0.1:{port}",
            log,
            reports,
            client=client,
            proxy=proxy,
            fleet=fleet,
            cells=cells,
            workers=workers,
        )
        svc.wait_readyz(200)
        yield svc


def _flavor(memory_mb: int = 512) -> Flavor:
    return Flavor(name="m", flavorid="m", vcpus=1, memory_mb=memory_mb, root_gb=1)


def _boot(svc: Scheduler, n: int = 1, **spec: Any) -> list[list[Any]]:
    spec.setdefault("flavor", _flavor())
    req = RequestSpec(project_id="p", user_id="u", num_instances=n, **spec)
    ctx = RequestContext(user_id="u", project_id="p", request_id=f"req-{uuidlib.uuid4()}")
    uuids = [str(uuidlib.uuid4()) for _ in range(n)]
    return svc.client.select_destinations(ctx, req, uuids, True, True)


def test_health_endpoints_answer(scheduler):
    assert scheduler.get("/healthz").text == "ok\n"
    assert scheduler.get("/livez").status_code == 200
    ready = scheduler.get("/readyz")
    assert ready.status_code == 200, ready.text
    for check in ("workers", "warm-up", "broker", "cells", "placement"):
        assert re.search(rf"^\[\+\]{check} ok", ready.text, re.MULTILINE), ready.text
    assert f"{scheduler.workers} of {scheduler.workers} worker(s) running" in ready.text
    assert scheduler.get("/nothing").status_code == 404


def test_the_log_names_the_backend_the_service_runs_on(scheduler):
    """oslo.messaging imports oslo.service, which logged "Loading backend: eventlet" in a
    service that then reported the threading executor: the log must name what runs."""
    backend = "eventlet" if scheduler.workers == 1 else "threading"
    other = "threading" if backend == "eventlet" else "eventlet"
    text = scheduler.log_text()
    assert f"Loading backend: {backend}" in text, text[-3000:]
    assert f"Loading backend: {other}" not in text
    assert f"({backend} executor" in text


def test_counters_and_histograms_move_by_what_was_asked_over_both_workers(scheduler):
    before = scheduler.scrape()
    ctx = RequestContext(request_id="req-casts")
    alternates = 0
    scheduled = 0
    for _ in range(6):
        (selections,) = _boot(scheduler)
        alternates += len(selections) - 1
        scheduled += 1
    multi = _boot(scheduler, 2)
    assert len(multi) == 2
    alternates += sum(len(s) - 1 for s in multi)
    scheduled += 2
    with pytest.raises(NoValidHost):
        _boot(scheduler, flavor=_flavor(memory_mb=10_000_000))  # no Placement candidate
    with pytest.raises(NoValidHost):
        _boot(scheduler, scheduler_hints={"same_host": [str(uuidlib.uuid4())]})
    # a fanout cast: every worker applies it
    scheduler.client.sync_instance_info(ctx, scheduler.fleet.hosts[0], [])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        after = scheduler.scrape()
        casts = delta(before, after, "novasched_casts_total", method="sync_instance_info",
                      result="applied")  # fmt: skip
        if casts >= scheduler.workers:
            break
        time.sleep(0.2)

    assert casts == scheduler.workers
    m = "novasched_select_destinations_duration_seconds_count"
    assert delta(before, after, m, result="scheduled") == 7
    assert delta(before, after, m, result="no_valid_host") == 2
    assert delta(before, after, m, result="error") == 0
    assert delta(before, after, "novasched_requests_total", result="scheduled") == 7
    assert delta(before, after, "novasched_instances_requested_total") == 10
    assert delta(before, after, "novasched_instances_scheduled_total") == scheduled
    assert delta(before, after, "novasched_alternates_returned_total") == alternates
    assert alternates > 0
    nvh = "novasched_no_valid_host_total"
    assert delta(before, after, nvh, cause="no_candidates", filter="") == 1
    assert delta(before, after, nvh, cause="filters", filter="SameHostFilter") == 1
    # one claim per scheduled instance, no conflict without competition
    assert delta(before, after, "novasched_claims_total", result="claimed") == scheduled
    assert delta(before, after, "novasched_claims_total", result="conflict") == 0
    # every request that reached the filters timed them (7 scheduled + the SameHostFilter one)
    stage = "novasched_stage_duration_seconds_count"
    assert delta(before, after, stage, stage="filter") == 8
    assert delta(before, after, stage, stage="claim") == 7
    queried = delta(before, after, stage, stage="placement_query") + delta(
        before, after, stage, stage="provider_view"
    )
    assert queried >= 9
    sources = delta(before, after, "novasched_candidate_source_total", source="view") + delta(
        before, after, "novasched_candidate_source_total", source="placement"
    )
    assert sources >= 8
    # the latency sum is real time, not a count
    total = delta(before, after, "novasched_select_destinations_duration_seconds_sum",
                  result="scheduled")  # fmt: skip
    assert 0 < total < 60
    # SameHostFilter removed every up host it saw
    assert delta(before, after, "novasched_filter_hosts_removed_total",
                 filter="SameHostFilter") == HOSTS  # fmt: skip
    # both workers served (RabbitMQ hands a queue's messages to its consumers in turn)
    selected = r"^\S+ \S+ (\d+) \w+ \S+ \[\S+ req-.*Selected host"
    pids = set(re.findall(selected, scheduler.log_text(), re.MULTILINE))
    assert len(pids) == scheduler.workers, pids
    # gauges: hosts per cell (the same in each worker), one readiness series per worker
    for cell, hosts in scheduler.cells.items():
        assert value(after, "novasched_cell_hosts", cell=cell) == hosts
    ready = [k for k in after if k[0] == "novasched_worker_ready"]
    assert len(ready) == scheduler.workers and all(after[k] == 1 for k in ready)
    assert value(after, "novasched_requests_in_flight") == 0


def test_sigusr2_writes_a_report_per_process_and_the_service_keeps_serving(scheduler):
    # the supervisor's own report and one per worker; one process alone writes one
    expected = 1 if scheduler.workers == 1 else scheduler.workers + 1
    before = set(scheduler.reports.iterdir())
    os.kill(scheduler.proc.pid, signal.SIGUSR2)
    deadline = time.monotonic() + 20
    new: set[Path] = set()
    while time.monotonic() < deadline:
        new = set(scheduler.reports.iterdir()) - before
        if len(new) >= expected and all(p.stat().st_size for p in new):
            break
        time.sleep(0.2)
    assert len(new) == expected, sorted(p.name for p in new)
    assert any(f"-{scheduler.proc.pid}_gurumeditation_" in p.name for p in new)
    time.sleep(0.5)  # a report is written in one go; let the last one finish
    texts = [p.read_text() for p in new]
    workers = [t for t in texts if "scheduler worker" in t]
    assert len(workers) == scheduler.workers
    for text in texts:
        assert "Threads" in text and "Configuration" in text and "Package" in text
    for text in workers:
        for cell, hosts in scheduler.cells.items():
            assert f"cell {cell} = {hosts} host(s), last read" in text, text[-3000:]
    assert "novasched-scheduler" in texts[0]
    # still serving
    (selections,) = _boot(scheduler)
    assert selections[0].service_host in scheduler.fleet.hosts
    assert scheduler.proc.poll() is None


THREADING_2 = ("threading", 2)


@pytest.mark.parametrize("scheduler", [THREADING_2], indirect=True, ids=["threading-2"])
def test_a_killed_worker_is_replaced_and_its_counts_are_kept(scheduler):
    """(Forked workers only: one process alone has no supervisor to replace it.)"""
    before = scheduler.scrape()
    served = value(before, "novasched_requests_total", result="scheduled")
    assert served > 0
    old = {dict(k[1])["pid"] for k in before if k[0] == "novasched_worker_ready"}
    victim = sorted(old)[0]
    os.kill(int(victim), signal.SIGKILL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        text = scheduler.wait_readyz(200, timeout=60)
        now = {dict(k[1])["pid"] for k in scheduler.scrape() if k[0] == "novasched_worker_ready"}
        if victim not in now and len(now) == scheduler.workers:
            break
        time.sleep(0.3)
    assert victim not in now and len(now) == scheduler.workers, (old, now)
    assert victim not in text
    after = scheduler.scrape()
    # the dead worker's counters are still in the sums; its live gauges are gone
    assert value(after, "novasched_requests_total", result="scheduled") == served
    assert not [k for k in after if dict(k[1]).get("pid") == victim]
    (selections,) = _boot(scheduler)
    assert selections[0].service_host in scheduler.fleet.hosts


def test_readyz_unready_without_the_broker_and_ready_when_it_is_back(scheduler):
    scheduler.proxy.cut()
    try:
        text = scheduler.wait_readyz(503, timeout=30)
        assert re.search(r"^\[-\]broker failed: worker\(s\) .* not connected", text, re.M), text
        assert "[+]placement ok" in text and "[+]cells ok" in text
        assert "readyz check failed" in text
        # readyz fails as soon as one worker lost the broker; every worker notices in turn
        deadline = time.monotonic() + 30
        while True:
            samples = scheduler.scrape()
            connected = [v for k, v in samples.items() if k[0] == "novasched_broker_connected"]
            if (connected and not any(connected)) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert connected and not any(connected)
        # the process itself still serves HTTP
        assert scheduler.get("/healthz").status_code == 200
    finally:
        scheduler.proxy.restore()
    text = scheduler.wait_readyz(200, timeout=60)
    assert "[+]broker ok: connected" in text
    (selections,) = _boot(scheduler)
    assert selections[0].service_host in scheduler.fleet.hosts


def _rabbitmqctl(*args: str) -> None:
    exe = shutil.which("rabbitmqctl")
    if exe is None:
        pytest.fail("rabbitmqctl is not installed: cannot stop and start the broker")
    done = subprocess.run([exe, *args], capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        pytest.fail(f"rabbitmqctl {' '.join(args)} failed: {done.stderr.strip()}")


@pytest.mark.parametrize("scheduler", [THREADING_2], indirect=True, ids=["threading-2"])
def test_readyz_unready_while_rabbitmq_is_stopped_and_ready_when_it_runs_again(scheduler):
    """The broker itself stopped (``rabbitmqctl stop_app``), not only cut off by the proxy."""
    _rabbitmqctl("stop_app")
    try:
        text = scheduler.wait_readyz(503, timeout=30)
        assert re.search(r"^\[-\]broker failed: worker\(s\) .* not connected", text, re.M), text
        assert scheduler.get("/healthz").status_code == 200
    finally:
        _rabbitmqctl("start_app")
        ensure_rabbit()
    text = scheduler.wait_readyz(200, timeout=90)
    assert "[+]broker ok: connected" in text
    (selections,) = _boot(scheduler)
    assert selections[0].service_host in scheduler.fleet.hosts


def test_a_bad_listen_address_stops_the_service_at_start(tmp_path):
    conf = tmp_path / "nova.conf"
    conf.write_text(
        "[DEFAULT]\ntransport_url = fake://\n[metrics_exporter]\nlisten = nowhere\n"
        "[scheduler]\nworkers = 1\n"
    )
    exe = Path(sys.executable).with_name("novasched-scheduler")
    result = subprocess.run(
        [str(exe), "--config-file", str(conf)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 78  # EX_CONFIG: not to be restarted
    assert "[metrics_exporter] listen = 'nowhere': expected HOST:PORT" in result.stderr
