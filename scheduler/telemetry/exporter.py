"""The ``[metrics_exporter] listen`` HTTP listener: ``/metrics`` (Prometheus text format),
``/healthz`` and ``/livez`` (the process serves), ``/readyz`` (every worker is ready).

It runs in the process that starts the scheduler: the only process with ``workers = 1``,
the supervisor of the forked workers otherwise. Either way the values come from
prometheus-client's multiprocess files, so one scrape sees every worker, and a worker
replaced after a crash keeps its predecessor's counts.

``/readyz`` reads the per-worker health series the workers publish (``monitor.py``): every
expected worker must be running and warmed up, connected to the broker, have read a cell
and heard from Placement within ``[metrics_exporter] ready_max_age`` seconds. It answers
200 or 503 with one line per check, as kube-apiserver's ``/readyz?verbose`` does.
"""

from __future__ import annotations

import glob
import http.server
import logging
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from oslo_config import cfg

from scheduler.exceptions import ConfigurationError
from scheduler.telemetry import metrics

LOG = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[IPV6]:PORT`` or a bare ``PORT`` (127.0.0.1) -> (host, port)."""
    text = (text or "").strip()
    if text.isdigit():
        host, port_text = "127.0.0.1", text
    elif text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise ConfigurationError(f"[metrics_exporter] listen = {text!r}: expected [HOST]:PORT")
        port_text = rest[1:]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep or not host or ":" in host:
            raise ConfigurationError(
                f"[metrics_exporter] listen = {text!r}: expected HOST:PORT (e.g. 127.0.0.1:9180) "
                "or [IPV6]:PORT"
            )
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ConfigurationError(f"[metrics_exporter] listen = {text!r}: bad port {port_text!r}")
    return host, int(port_text)


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class Readiness:
    checks: list[Check] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        return all(c.ok for c in self.checks)

    def text(self) -> str:
        lines = [f"[{'+' if c.ok else '-'}]{c.name} {'ok' if c.ok else 'failed'}: {c.detail}"
                 for c in self.checks]  # fmt: skip
        lines.append("readyz check passed" if self.ready else "readyz check failed")
        return "\n".join(lines) + "\n"


def _samples_by_pid(families: list[Any], name: str) -> dict[str, list[Any]]:
    """The samples of gauge ``name`` (a ``liveall`` one) grouped by their ``pid`` label."""
    out: dict[str, list[Any]] = {}
    for family in families:
        if family.name != name:
            continue
        for sample in family.samples:
            out.setdefault(sample.labels.get("pid", "?"), []).append(sample)
    return out


def _flag_check(
    name: str, pids: list[str], series: dict[str, list[Any]], failing: str, passing: str
) -> Check:
    """A check that every worker's 0/1 gauge in ``series`` is 1."""
    off = [pid for pid in pids if not any(s.value >= 1 for s in series.get(pid, ()))]
    if off:
        return Check(name, False, f"worker(s) {', '.join(off)} {failing}")
    return Check(name, bool(pids), passing if pids else "no worker has started")


def evaluate(
    families: list[Any],
    *,
    workers: int,
    max_age: float,
    now: float,
    worker_pids: set[str] | None = None,
) -> Readiness:
    """Readiness from collected metric families (see the module docstring); only the
    series of ``worker_pids`` count when it is given."""
    warm = _samples_by_pid(families, "novasched_worker_ready")
    broker = _samples_by_pid(families, "novasched_broker_connected")
    cells = _samples_by_pid(families, "novasched_cell_last_read_timestamp_seconds")
    placement = _samples_by_pid(families, "novasched_placement_last_answer_timestamp_seconds")
    pids = sorted(p for p in warm if worker_pids is None or p in worker_pids)
    result = Readiness()
    result.checks.append(
        Check(
            "workers",
            len(pids) >= workers,
            f"{len(pids)} of {workers} worker(s) running"
            + (f" (pid {', '.join(pids)})" if pids else ""),
        )
    )
    result.checks.append(_flag_check("warm-up", pids, warm, "still warming up", "done"))
    result.checks.append(
        _flag_check("broker", pids, broker, "not connected to the message broker", "connected")
    )
    stale_cells, oldest_cell = [], 0.0
    notes = []
    for pid in pids:
        reads = {s.labels.get("cell", "?"): s.value for s in cells.get(pid, ()) if s.value > 0}
        if not reads:
            stale_cells.append(f"{pid} (no cell read yet)")
            continue
        newest = now - max(reads.values())
        oldest_cell = max(oldest_cell, newest)
        if newest > max_age:
            stale_cells.append(f"{pid} (last cell read {newest:.0f} s ago)")
        for cell, at in sorted(reads.items()):
            if now - at > max_age:
                notes.append(f"cell {cell} last read {now - at:.0f} s ago by worker {pid}")
    detail = (
        "worker(s) " + ", ".join(stale_cells) if stale_cells else f"read {oldest_cell:.1f} s ago"
    )
    if notes:
        detail += "; " + "; ".join(sorted(set(notes)))
    result.checks.append(Check("cells", bool(pids) and not stale_cells, detail))
    silent, oldest = [], 0.0
    for pid in pids:
        answers = [s.value for s in placement.get(pid, ()) if s.value > 0]
        age = now - max(answers) if answers else None
        if age is None or age > max_age:
            silent.append(pid if age is None else f"{pid} ({age:.0f} s ago)")
        else:
            oldest = max(oldest, age)
    result.checks.append(
        Check(
            "placement",
            bool(pids) and not silent,
            f"no answer from Placement within {max_age:g} s for worker(s) {', '.join(silent)}"
            if silent
            else f"last answer {oldest:.1f} s ago",
        )
    )
    return result


class _Handler(http.server.BaseHTTPRequestHandler):
    exporter: Exporter  # set on the subclass built per exporter
    server_version = "novasched"

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        path = urlsplit(self.path).path.rstrip("/") or "/"
        try:
            if path == "/metrics":
                body, ctype = self.exporter.metrics_text(self.headers.get("Accept", ""))
                self._send(200, body, ctype)
            elif path in ("/healthz", "/livez"):
                self._send(200, b"ok\n")
            elif path == "/readyz":
                readiness = self.exporter.readiness()
                self._send(200 if readiness.ready else 503, readiness.text().encode())
            else:
                self._send(404, b"not found: try /metrics, /healthz, /livez or /readyz\n")
        except Exception as exc:  # never let a scrape kill the listener
            LOG.exception("Metrics listener failed to answer %s", self.path)
            self._send(500, f"error: {exc}\n".encode())

    def _send(self, status: int, body: bytes, ctype: str = "text/plain; charset=utf-8") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        LOG.debug("metrics listener: %s - %s", self.address_string(), format % args)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class Exporter:
    """Owns the multiprocess directory, the real metrics and the HTTP listener."""

    def __init__(self, conf: cfg.ConfigOpts, workers: int):
        opts = conf.metrics_exporter
        self.host, self.port = parse_listen(opts.listen)
        self.workers = max(1, int(workers))
        self.max_age = float(opts.ready_max_age)
        self._own_dir = False
        path = opts.multiproc_dir or os.environ.get(MULTIPROC_ENV)
        try:
            if path:
                os.makedirs(path, exist_ok=True)
                for stale in glob.glob(os.path.join(path, "*.db")):
                    os.remove(stale)  # a previous run's values would be added to ours
            else:
                path = tempfile.mkdtemp(prefix="novasched-metrics-")
                self._own_dir = True
        except OSError as exc:
            raise ConfigurationError(
                f"[metrics_exporter] multiproc_dir (or {MULTIPROC_ENV}) {path}: cannot use it "
                f"for the metrics' files: {exc}"
            ) from exc
        self.directory = path
        os.environ[MULTIPROC_ENV] = path
        metrics.enable(multiprocess=True)
        from prometheus_client import CollectorRegistry
        from prometheus_client.multiprocess import MultiProcessCollector

        self._registry = CollectorRegistry()
        MultiProcessCollector(self._registry, path=path)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        # the pids of the scheduler workers now: this process until ``supervising``
        self.worker_pids: Callable[[], Iterable[int]] = lambda: (os.getpid(),)

    # -- serving ----------------------------------------------------------------------------
    def start(self) -> None:
        handler = type("Handler", (_Handler,), {"exporter": self})
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        server_cls = type("Server", (_Server,), {"address_family": family})
        try:
            self._server = server_cls((self.host, self.port), handler)
        except OSError as exc:
            raise ConfigurationError(
                f"[metrics_exporter] listen = {self.host}:{self.port}: cannot listen: {exc}"
            ) from exc
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics-listener", daemon=True
        )
        self._thread.start()
        LOG.info(
            "Serving metrics and health on http://%s:%d/metrics, /healthz, /readyz "
            "(%d worker(s); values in %s)",
            self.host if family == socket.AF_INET else f"[{self.host}]",
            self.port,
            self.workers,
            self.directory,
        )

    def metrics_text(self, accept: str = "") -> tuple[bytes, str]:
        from prometheus_client.exposition import choose_encoder

        encoder, ctype = choose_encoder(accept)
        return encoder(self._registry), ctype

    def readiness(self) -> Readiness:
        families = list(self._registry.collect())
        pids = {str(pid) for pid in self.worker_pids()}
        return evaluate(
            families, workers=self.workers, max_age=self.max_age, now=time.time(), worker_pids=pids
        )

    # -- the worker processes ---------------------------------------------------------------
    def close_in_child(self) -> None:
        """In a forked worker: let go of the listening socket (the thread is not copied)."""
        if self._server is not None:
            self._server.socket.close()
            self._server = None

    def supervising(self, worker_pids: Callable[[], Iterable[int]]) -> None:
        """This process forks the workers (``worker_pids()`` are theirs now) and serves no
        request: the zero-valued live gauges that creating the metrics wrote for it are
        dropped."""
        self.worker_pids = worker_pids
        self.worker_exited(os.getpid())

    def worker_exited(self, pid: int) -> None:
        """A worker is gone: its ``live*`` gauges stop counting (its counters stay)."""
        from prometheus_client import multiprocess

        try:
            multiprocess.mark_process_dead(pid, self.directory)
        except OSError:
            LOG.debug("Could not remove the live gauges of worker %d", pid, exc_info=True)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        metrics.disable()
        if os.environ.get(MULTIPROC_ENV) == self.directory:
            del os.environ[MULTIPROC_ENV]
        if self._own_dir:
            shutil.rmtree(self.directory, ignore_errors=True)


def exporter_from_conf(conf: cfg.ConfigOpts, workers: int) -> Exporter | None:
    """The exporter ``[metrics_exporter] listen`` asks for, started; None when unset."""
    if not (conf.metrics_exporter.listen or "").strip():
        return None
    exporter = Exporter(conf, workers)
    try:
        exporter.start()
    except BaseException:
        exporter.stop()
        raise
    return exporter
