"""Unit tests of the telemetry pieces: the listen address, /readyz's verdict, the broker
probe, the worker monitor, and what the RPC manager and the driver count."""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from filters.handler import FilterReport, FilterStep
from scheduler import exceptions
from scheduler.drivers.filter_scheduler import FilterScheduler
from scheduler.drivers.outcome import count_request
from scheduler.objects import Flavor, RequestSpec, Selection
from scheduler.request import SchedulingRequest
from scheduler.rpc import wire
from scheduler.rpc.manager import SchedulerManager
from scheduler.telemetry import exporter, metrics, monitor


# -- [metrics_exporter] listen ------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, expected",
    [
        ("127.0.0.1:9180", ("127.0.0.1", 9180)),
        ("9180", ("127.0.0.1", 9180)),
        ("[::1]:9180", ("::1", 9180)),
        ("0.0.0.0:0", ("0.0.0.0", 0)),
        ("metrics.example.org:80", ("metrics.example.org", 80)),
    ],
)
def test_listen_addresses(text, expected):
    assert exporter.parse_listen(text) == expected


@pytest.mark.parametrize(
    "text", ["nowhere", ":9180", "host:port", "1.2.3.4:70000", "[::1]", "::1:9"]
)
def test_bad_listen_addresses_are_configuration_errors(text):
    with pytest.raises(exceptions.ConfigurationError, match=r"\[metrics_exporter\] listen"):
        exporter.parse_listen(text)


# -- /readyz ------------------------------------------------------------------------------------
NOW = 1_000_000.0


def _families(**workers: dict[str, Any]) -> list[Any]:
    """Metric families as the multiprocess collector gives them: one series per pid."""
    lines = []
    for pid, w in workers.items():
        lines.append(f'novasched_worker_ready{{pid="{pid}"}} {w.get("warm", 1)}')
        lines.append(f'novasched_broker_connected{{pid="{pid}"}} {w.get("broker", 1)}')
        for cell, age in w.get("cells", {"cell1": 1.0}).items():
            lines.append(
                f'novasched_cell_last_read_timestamp_seconds{{cell="{cell}",pid="{pid}"}} '
                f"{NOW - age}"
            )
        if w.get("placement", 1.0) is not None:
            lines.append(
                f'novasched_placement_last_answer_timestamp_seconds{{pid="{pid}"}} '
                f"{NOW - w.get('placement', 1.0)}"
            )
    text = "".join(f"# TYPE {n} gauge\n" for n in _GAUGES) + "\n".join(lines) + "\n"
    return list(text_string_to_metric_families(text))


_GAUGES = (
    "novasched_worker_ready",
    "novasched_broker_connected",
    "novasched_cell_last_read_timestamp_seconds",
    "novasched_placement_last_answer_timestamp_seconds",
)


def _ready(families, workers=2, pids=None):
    return exporter.evaluate(families, workers=workers, max_age=60, now=NOW, worker_pids=pids)


def _failed(readiness) -> dict[str, str]:
    return {c.name: c.detail for c in readiness.checks if not c.ok}


def test_ready_when_every_worker_is_warm_connected_and_current():
    r = _ready(_families(**{"11": {}, "12": {}}))
    assert r.ready, r.text()
    assert r.text().endswith("readyz check passed\n")
    assert "[+]workers ok: 2 of 2 worker(s) running (pid 11, 12)" in r.text()


def test_a_missing_worker_a_cold_one_and_a_disconnected_one_each_fail_their_check():
    assert _failed(_ready(_families(**{"11": {}}))) == {
        "workers": "1 of 2 worker(s) running (pid 11)"
    }
    failed = _failed(_ready(_families(**{"11": {"warm": 0}, "12": {"broker": 0}})))
    assert failed == {
        "warm-up": "worker(s) 11 still warming up",
        "broker": "worker(s) 12 not connected to the message broker",
    }


def test_cells_fail_only_when_no_cell_was_read_recently_and_stale_cells_are_named():
    stale_one = _ready(_families(**{"11": {"cells": {"cell1": 1.0, "cell2": 300.0}}}), workers=1)
    assert stale_one.ready
    (cells,) = [c for c in stale_one.checks if c.name == "cells"]
    assert "cell cell2 last read 300 s ago by worker 11" in cells.detail
    all_stale = _ready(_families(**{"11": {"cells": {"cell1": 90.0}}}), workers=1)
    assert _failed(all_stale) == {
        "cells": "worker(s) 11 (last cell read 90 s ago); "
        "cell cell1 last read 90 s ago by worker 11"
    }
    never = _ready(_families(**{"11": {"cells": {}}}), workers=1)
    assert _failed(never) == {"cells": "worker(s) 11 (no cell read yet)"}


def test_placement_fails_when_a_worker_has_not_heard_from_it_within_max_age():
    failed = _failed(_ready(_families(**{"11": {"placement": 61.0}, "12": {"placement": None}})))
    assert failed == {
        "placement": "no answer from Placement within 60 s for worker(s) 11 (61 s ago), 12"
    }


def test_no_worker_at_all_is_not_ready_and_other_processes_series_are_ignored():
    nothing = _ready([], workers=1)
    assert not nothing.ready
    assert set(_failed(nothing)) == {"workers", "warm-up", "broker", "cells", "placement"}
    # the supervisor's own (zero) series do not count as a cold worker
    families = _families(**{"10": {"warm": 0, "broker": 0}, "11": {}})
    assert _ready(families, workers=1, pids={"11"}).ready
    assert not _ready(families, workers=1).ready


# -- the broker probe ---------------------------------------------------------------------------
class _Kombu:
    def __init__(self, up: bool):
        self.up = up

    @property
    def connected(self) -> bool:
        return self.up


def test_broker_connected_follows_the_listeners_kombu_connection():
    kombu = _Kombu(True)
    rabbit = SimpleNamespace(connection=kombu)  # impl_rabbit.Connection
    context = SimpleNamespace(connection=rabbit)  # ConnectionContext
    server = SimpleNamespace(
        listener=SimpleNamespace(_poll_style_listener=SimpleNamespace(conn=context))
    )
    assert monitor.broker_connected(server) is True
    kombu.up = False
    assert monitor.broker_connected(server) is False


def test_broker_connected_is_unknown_without_a_connection():
    assert monitor.broker_connected(None) is None
    fake_driver = SimpleNamespace(listener=SimpleNamespace(_poll_style_listener=object()))
    assert monitor.broker_connected(fake_driver) is None


# -- the worker monitor -------------------------------------------------------------------------
class _Placement:
    def __init__(self, last: float):
        self.last_answer_at = last
        self.pings = 0

    def ping(self, timeout: float | None = None) -> bool:
        assert timeout is not None and timeout <= 5
        self.pings += 1
        self.last_answer_at = time.time()
        return True


def test_monitor_publishes_health_and_gauges_and_pings_an_idle_placement(registry):
    now = time.time()
    host_manager = SimpleNamespace(
        status=lambda: [
            {"name": "cell1", "uuid": "u1", "hosts": 7, "last_ok_at": now - 2, "failing": False},
            {"name": "cell2", "uuid": "u2", "hosts": 0, "last_ok_at": None, "failing": True},
        ]
    )
    placement = _Placement(now - 30)  # more than a third of ready_max_age (60) ago
    refresher = SimpleNamespace(
        status=lambda: {"loaded": True, "age": 0.5, "providers": 9, "failures": 2}
    )
    driver = SimpleNamespace(
        host_manager=host_manager, placement=placement, view_refresher=refresher
    )
    service = SimpleNamespace(serving=True, rpc_server=None, driver=driver)
    conf = SimpleNamespace(metrics_exporter=SimpleNamespace(probe_interval=1.0, ready_max_age=60))
    mon = monitor.WorkerMonitor(service, conf)
    mon.tick()
    get = registry.get_sample_value
    assert get("novasched_worker_ready") == 1
    assert get("novasched_broker_connected") == 1  # fake:// has no connection to lose
    assert get("novasched_cell_hosts", {"cell": "cell1"}) == 7
    assert get("novasched_cell_hosts", {"cell": "cell2"}) == 0
    assert get("novasched_cell_last_read_timestamp_seconds", {"cell": "cell1"}) == now - 2
    assert get("novasched_cell_last_read_timestamp_seconds", {"cell": "cell2"}) is None
    assert 2 <= get("novasched_host_refresh_lag_seconds") < 3
    assert placement.pings == 1
    assert get("novasched_placement_last_answer_timestamp_seconds") >= now
    assert get("novasched_provider_view_age_seconds") == 0.5
    assert get("novasched_provider_view_providers") == 9
    mon.tick()
    assert placement.pings == 1  # heard from recently: no second ping
    service.serving = False
    mon.tick()
    assert get("novasched_worker_ready") == 0


# -- what the RPC manager counts ----------------------------------------------------------------
class _Driver:
    def __init__(self, answer: Any):
        self.answer = answer

    def select_destinations(self, ctxt, spec, uuids, alternates):
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


def _selection(host: str) -> Selection:
    return Selection(
        compute_node_uuid="cn",
        service_host=host,
        nodename=host,
        cell_uuid="c",
        allocation_request=None,
        allocation_request_version=None,
    )


def _call(manager: SchedulerManager, n: int = 2) -> Any:
    spec = wire.request_spec_to_primitive(
        RequestSpec(flavor=Flavor(vcpus=1, memory_mb=1, root_gb=0), num_instances=n)
    )
    uuids = [f"00000000-0000-4000-8000-00000000000{i}" for i in range(n)]
    return manager.select_destinations(
        {"request_id": "req-1"},
        spec_obj=spec,
        instance_uuids=uuids,
        return_objects=True,
        return_alternates=True,
    )


def test_the_manager_counts_requests_instances_alternates_and_latency(registry):
    answer = [[_selection("a"), _selection("b"), _selection("c")], [_selection("b")]]
    _call(SchedulerManager(_Driver(answer)))
    get = registry.get_sample_value
    assert get("novasched_requests_total", {"result": "scheduled"}) == 1
    assert get("novasched_select_destinations_duration_seconds_count", {"result": "scheduled"}) == 1
    assert get("novasched_instances_requested_total") == 2
    assert get("novasched_instances_scheduled_total") == 2
    assert get("novasched_alternates_returned_total") == 2
    assert get("novasched_requests_in_flight") == 0


def test_the_manager_counts_no_valid_host_by_cause_and_errors(registry):
    import oslo_messaging

    nvh = exceptions.NoValidHost("0/3 hosts available", "filters", "ComputeFilter")
    with pytest.raises(oslo_messaging.ExpectedException):
        _call(SchedulerManager(_Driver(nvh)))
    with pytest.raises(oslo_messaging.ExpectedException):
        _call(SchedulerManager(_Driver(RuntimeError("boom"))))
    get = registry.get_sample_value
    assert (
        get("novasched_no_valid_host_total", {"cause": "filters", "filter": "ComputeFilter"}) == 1
    )
    assert get("novasched_requests_total", {"result": "no_valid_host"}) == 1
    assert get("novasched_requests_total", {"result": "error"}) == 1
    assert get("novasched_select_destinations_duration_seconds_count", {"result": "error"}) == 1
    assert get("novasched_instances_scheduled_total") == 0


def test_casts_are_counted_applied_or_failed(registry):
    class Casts:
        def sync_instance_info(self, host, uuids):
            if host == "bad":
                raise ValueError("no")

    manager = SchedulerManager(Casts())
    manager.sync_instance_info({}, "good", [])
    manager.sync_instance_info({}, "bad", [])
    manager.sync_instance_info({}, "good", [])
    get = registry.get_sample_value
    assert get("novasched_casts_total", {"method": "sync_instance_info", "result": "applied"}) == 2
    assert get("novasched_casts_total", {"method": "sync_instance_info", "result": "failed"}) == 1


# -- what the driver counts ---------------------------------------------------------------------
def _request() -> SchedulingRequest:
    return SchedulingRequest.of(RequestSpec(flavor=Flavor(vcpus=1, memory_mb=1, root_gb=0)))


def _cause(req: SchedulingRequest) -> tuple[str, str]:
    exc = FilterScheduler.not_enough(req, 0, 1)
    return exc.cause, exc.filter_name


def test_not_enough_names_the_filter_that_removed_the_last_host():
    req = _request()
    req.trace.last_report = FilterReport(
        hosts=[],
        steps=[
            FilterStep("ComputeFilter", 5, removed=[("h1", "down"), ("h2", "down")]),
            FilterStep("RamFilter", 3, removed=[(h, "full") for h in ("h3", "h4", "h5")]),
        ],
    )
    assert _cause(req) == ("filters", "RamFilter")
    req.trace.last_report = FilterReport(hosts=[], steps=[])
    assert _cause(req) == ("narrowed", "")
    req.trace.last_report = FilterReport(hosts=["h"], steps=[])
    req.trace.claim_failures = 2
    assert _cause(req) == ("claims_refused", "")
    req.trace.placement_unreachable = "refused"
    assert _cause(req) == ("placement_unreachable", "")
    req.trace.placement_unreachable, req.trace.claim_failures = "", 0
    assert _cause(req) == ("other", "")


@pytest.mark.parametrize(
    "why, label",
    [
        ("the provider view is not loaded yet", "not_loaded"),
        ("the provider view is 12.5 s old", "too_old"),
        ("the provider view found no candidate", "no_candidate"),
        ("the provider view failed (see the log)", "failed"),
        ("the view does not answer an empty query", "empty_query"),
        ("the view does not examine more than 1,000,000 combinations of requests", "too_wide"),
        ("the provider view's freshness check took too long", "not_checked"),
        ("the provider view's refreshes are failing (timeout)", "not_checked"),
    ],
)
def test_why_the_view_declined_is_counted_by_kind(registry, why, label):
    req = _request()
    req.trace.candidate_source = "placement"
    req.trace.view_declined = why
    count_request(req.trace)
    assert registry.get_sample_value("novasched_view_declined_total", {"reason": label}) == 1


def test_a_requests_stages_sources_removals_and_claims_are_counted(registry):
    req = _request()
    req.trace.timings = {"placement": 0.2, "host_states": 0.01, "filter": 0.002, "claim": 0.05}
    req.trace.candidate_source = "placement"
    req.trace.filter_removed = {"ComputeFilter": 3, "RamFilter": 0}
    req.trace.claims_made, req.trace.claim_failures = 2, 1
    count_request(req.trace)
    get = registry.get_sample_value
    assert get("novasched_stage_duration_seconds_sum", {"stage": "placement_query"}) == 0.2
    assert get("novasched_stage_duration_seconds_count", {"stage": "filter"}) == 1
    assert get("novasched_stage_duration_seconds_count", {"stage": "weigh"}) is None
    assert get("novasched_candidate_source_total", {"source": "placement"}) == 1
    assert get("novasched_filter_hosts_removed_total", {"filter": "ComputeFilter"}) == 3
    assert get("novasched_filter_hosts_removed_total", {"filter": "RamFilter"}) is None
    assert get("novasched_claims_total", {"result": "claimed"}) == 2
    assert get("novasched_claims_total", {"result": "conflict"}) == 1


def test_a_call_asked_again_of_placement_counts_each_attempts_claims_and_one_source(registry):
    first = _request()
    first.trace.timings = {"view": 0.001, "filter": 0.002, "claim": 0.01}
    first.trace.candidate_source = "view"
    first.trace.filter_removed = {"ComputeFilter": 2}
    first.trace.claim_failures = 1
    retry = SchedulingRequest.of(first, retry_of=first)
    retry.trace.timings = {"placement": 0.2, "filter": 0.003, "claim": 0.02}
    retry.trace.candidate_source = "placement"
    retry.trace.filter_removed = {"ComputeFilter": 1}
    retry.trace.claims_made = 1
    count_request(retry.trace)
    get = registry.get_sample_value
    # the call's candidates came from Placement in the end: counted once, there
    assert get("novasched_candidate_source_total", {"source": "placement"}) == 1
    assert get("novasched_candidate_source_total", {"source": "view"}) is None
    # one observation per stage per call, adding both attempts
    assert get("novasched_stage_duration_seconds_count", {"stage": "filter"}) == 1
    assert get("novasched_stage_duration_seconds_sum", {"stage": "filter"}) == pytest.approx(0.005)
    # what each attempt's filters removed and Placement did with its claims
    assert get("novasched_filter_hosts_removed_total", {"filter": "ComputeFilter"}) == 3
    assert get("novasched_claims_total", {"result": "conflict"}) == 1
    assert get("novasched_claims_total", {"result": "claimed"}) == 1


def test_disabled_metrics_record_nothing(registry):
    reg = registry
    metrics.M.requests.labels(result="scheduled").inc()
    metrics.disable()
    m = metrics.M
    assert not m.enabled
    m.requests.labels(result="scheduled").inc()
    m.stage.labels(stage="filter").observe(1.0)
    m.in_flight.dec()
    req = _request()
    req.trace.timings, req.trace.claims_made = {"filter": 0.1}, 1
    count_request(req.trace)
    # the metrics that were real before keep their value: nothing reaches them any more
    assert reg.get_sample_value("novasched_requests_total", {"result": "scheduled"}) == 1
    stages = reg.get_sample_value("novasched_stage_duration_seconds_count", {"stage": "filter"})
    assert stages is None
    assert reg.get_sample_value("novasched_claims_total", {"result": "claimed"}) is None


# -- the exporter's set-up ----------------------------------------------------------------------
def _exporter_conf(**opts: Any) -> Any:
    values = {"listen": "127.0.0.1:0", "ready_max_age": 60, "multiproc_dir": None, **opts}
    return SimpleNamespace(metrics_exporter=SimpleNamespace(**values))


def test_an_unusable_multiproc_dir_is_a_configuration_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(exceptions.ConfigurationError, match="multiproc_dir .*cannot use it"):
        exporter.Exporter(_exporter_conf(multiproc_dir=str(blocker / "metrics")), 1)


def test_the_exporter_wipes_old_values_serves_and_cleans_up(tmp_path, monkeypatch):
    monkeypatch.delenv(exporter.MULTIPROC_ENV, raising=False)
    directory = tmp_path / "metrics"
    directory.mkdir()
    (directory / "counter_1.db").write_bytes(b"stale")
    exp = exporter.Exporter(_exporter_conf(multiproc_dir=str(directory)), 1)
    try:
        assert not (directory / "counter_1.db").exists()
        exp.start()
        metrics.M.requests.labels(result="scheduled").inc()
        base = f"http://127.0.0.1:{exp.port}"
        with urllib.request.urlopen(base + "/metrics", timeout=5) as answer:
            text = answer.read().decode()
        assert 'novasched_requests_total{result="scheduled"} 1.0' in text
        with urllib.request.urlopen(base + "/healthz", timeout=5) as answer:
            assert answer.read() == b"ok\n"
        # nothing published readiness yet: 503, one line per check
        with pytest.raises(urllib.error.HTTPError) as failed:
            urllib.request.urlopen(base + "/readyz", timeout=5)
        assert failed.value.code == 503
        assert b"[-]warm-up failed" in failed.value.read()
    finally:
        exp.stop()
    assert not metrics.M.enabled
    assert exporter.MULTIPROC_ENV not in os.environ


def test_monitor_drops_the_gauges_of_a_cell_that_went_away(registry):
    cells = [
        {"name": "cell1", "uuid": "u1", "hosts": 3, "last_ok_at": time.time(), "failing": False},
        {"name": "cell2", "uuid": "u2", "hosts": 0, "last_ok_at": None, "failing": True},
    ]
    driver = SimpleNamespace(host_manager=SimpleNamespace(status=lambda: list(cells)))
    service = SimpleNamespace(serving=True, rpc_server=None, driver=driver)
    conf = SimpleNamespace(metrics_exporter=SimpleNamespace(probe_interval=1.0, ready_max_age=60))
    mon = monitor.WorkerMonitor(service, conf)
    mon.tick()
    get = registry.get_sample_value
    assert get("novasched_cell_hosts", {"cell": "cell2"}) == 0
    cells[:] = [cells[0]]  # cell2 unmapped; it never had a good read
    mon.tick()
    mon.tick()
    assert get("novasched_cell_hosts", {"cell": "cell2"}) is None
    assert get("novasched_cell_hosts", {"cell": "cell1"}) == 3
    cells.clear()
    mon.tick()
    assert get("novasched_cell_last_read_timestamp_seconds", {"cell": "cell1"}) is None
