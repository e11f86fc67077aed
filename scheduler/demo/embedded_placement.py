"""Run the real Placement service (openstack-placement 16.0.0) on 127.0.0.1.

Two ways, same configuration:

* ``mode="thread"``: the Placement WSGI app is built in this process and served by a threaded
  wsgiref server in a daemon thread. No extra process; used by the demo. Placement keeps
  its database context and policy enforcer in module globals, so one process can host only
  one Placement database.
* ``mode="process"``: ``gunicorn placement.wsgi.api:application`` with N sync workers, as
  in production; used by functional tests and benchmarks.

SQLite allows one writer only (Placement answers 500 "database is locked" under
concurrency), so SQLite URLs always run one worker, and thread mode serializes requests.
With several workers on MariaDB/PostgreSQL, ``conflict_retries`` stays at 1 (Placement 16
over-commits under concurrent claims with its default of 10; the client retries instead).
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import signal
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

import requests

LOG = logging.getLogger(__name__)

_MODES = ("thread", "process")
_START_TIMEOUT = 30.0

# Placement's WSGI app of this process (thread mode), keyed by database URL: its DB
# context can be configured only once per process.
_THREAD_APP: dict[str, Any] = {}
_THREAD_APP_LOCK = threading.Lock()


class EmbeddedPlacementError(RuntimeError):
    """Placement could not be prepared or started; the message includes its log tail."""


class EmbeddedPlacement:
    """A real Placement service bound to 127.0.0.1 on an ephemeral port."""

    def __init__(
        self,
        db_url: str,
        *,
        mode: str = "thread",
        workers: int = 1,
        conflict_retries: int = 1,
        extra_conf: str = "",
        log_requests: bool = False,
        start_timeout: float = _START_TIMEOUT,
        app: str = "placement.wsgi.api:application",
        app_path: str | None = None,
        port: int = 0,
    ):
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {_MODES}, not {mode!r}")
        if not 0 <= port <= 65535:
            raise ValueError(f"port must be between 0 and 65535, not {port}")
        if conflict_retries < 1:
            # 0 means Placement never even attempts the write
            raise ValueError("conflict_retries must be at least 1")
        self.db_url = db_url
        self.mode = mode
        self.is_sqlite = db_url.startswith("sqlite")
        self.workers = 1 if self.is_sqlite else max(1, int(workers))
        self.conflict_retries = int(conflict_retries)
        self.extra_conf = extra_conf
        self.log_requests = log_requests
        self.start_timeout = start_timeout
        # process mode: the WSGI application gunicorn serves, and a directory to import it
        # from (tests serve Placement with a flaw mended: tests/differential/placement_mended.py)
        self.app = app
        self.app_path = app_path
        # 0: an ephemeral port; another: that one (``demo --serve-placement`` serves the
        # address its nova.conf names)
        self.port = port
        self.run_dir: Path | None = None
        self._url: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    # -- public ------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        if self._url is None:
            raise EmbeddedPlacementError("Placement is not started; call start() first")
        return self._url

    @property
    def pid(self) -> int | None:
        """The gunicorn master's pid while Placement runs as a process (its workers are the
        master's children: a CPU meter sums that tree), else None (thread mode, stopped)."""
        return self._proc.pid if self._proc is not None else None

    @property
    def conf_path(self) -> Path:
        assert self.run_dir is not None
        return self.run_dir / "placement.conf"

    @property
    def log_path(self) -> Path:
        """Placement's own log (process mode: one INFO line per request)."""
        assert self.run_dir is not None
        return self.run_dir / "placement.log"

    def start(self) -> str:
        """Write the configuration, sync the schema, start serving; return the endpoint URL."""
        if self._url is not None:
            return self._url
        self.run_dir = Path(tempfile.mkdtemp(prefix="novasched-placement-"))
        self._write_conf()
        try:
            if self.mode == "process":
                self._db_sync()
                self._start_process()
            else:
                self._start_thread()
        except BaseException:
            self.stop()
            raise
        LOG.info("Placement (%s mode, %d worker(s)) at %s", self.mode, self.workers, self._url)
        return self.url

    def stop(self) -> None:
        """Stop serving and remove the run directory. Safe to call twice."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
            self._thread = None
        if self._proc is not None:
            _terminate(self._proc)
            self._proc = None
        self._url = None
        if self.run_dir is not None:
            shutil.rmtree(self.run_dir, ignore_errors=True)
            self.run_dir = None

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of Placement's and gunicorn's logs (for error messages)."""
        out = []
        if self.run_dir is None:
            return ""
        for name in ("gunicorn.log", "placement.log", "db-sync.log"):
            path = self.run_dir / name
            if path.exists():
                text = path.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"--- {name} ---\n" + "\n".join(text))
        return "\n".join(out)

    def __enter__(self) -> EmbeddedPlacement:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- configuration -----------------------------------------------------------------------
    def _write_conf(self) -> None:
        assert self.run_dir is not None
        in_memory = self.db_url.rstrip("/") in ("sqlite:", "sqlite:///:memory:")
        text = (
            "[DEFAULT]\n"
            "debug = False\n"
            f"log_file = {self.run_dir / 'placement.log'}\n"
            "[api]\n"
            "auth_strategy = noauth2\n"
            "[placement_database]\n"
            f"connection = {self.db_url}\n"
            # an in-memory database exists only inside the app's process: migrate it there
            f"sync_on_startup = {in_memory}\n"
            "[placement]\n"
            f"allocation_conflict_retry_count = {self.conflict_retries}\n"
        )
        if self.extra_conf:
            text += "\n" + self.extra_conf.strip() + "\n"
        self.conf_path.write_text(text)

    def _db_sync(self) -> None:
        """``placement-manage db sync`` in a child process (keeps this one's globals clean)."""
        assert self.run_dir is not None
        code = (
            "import sys; from placement.cmd.manage import main; "
            "sys.argv[0] = 'placement-manage'; main()"
        )
        cmd = [sys.executable, "-c", code, "--config-file", str(self.conf_path), "db", "sync"]
        with open(self.run_dir / "db-sync.log", "wb") as log:
            result = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=120)
        if result.returncode != 0:
            raise EmbeddedPlacementError(
                f"placement-manage db sync failed for {_redact(self.db_url)} (exit "
                f"{result.returncode}). Check that the database server is running and the "
                f"database exists.\n{self.log_tail()}"
            )

    # -- process mode ------------------------------------------------------------------------
    def _start_process(self) -> None:
        assert self.run_dir is not None
        gunicorn = Path(sys.executable).parent / "gunicorn"
        if not gunicorn.exists():
            raise EmbeddedPlacementError(
                f"gunicorn not found next to {sys.executable}; install it in this virtualenv"
            )
        port = self.port or _free_port()
        cmd = [
            str(gunicorn),
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(self.workers),
            # gunicorn 27 otherwise shares ~/.gunicorn/gunicorn.ctl between instances
            "--no-control-socket",
            "--graceful-timeout",
            "5",
            self.app,
        ]
        env = dict(os.environ)
        env["OS_PLACEMENT_CONFIG_DIR"] = str(self.run_dir)
        if self.app_path:
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (self.app_path, env.get("PYTHONPATH")) if p
            )
        log = open(self.run_dir / "gunicorn.log", "wb")  # noqa: SIM115 - owned by the child
        try:
            self._proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=str(self.run_dir),
                start_new_session=True,
            )
        finally:
            log.close()
        atexit.register(self.stop)
        self._url = f"http://127.0.0.1:{port}"
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        last_error = ""
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise EmbeddedPlacementError(
                    f"Placement (gunicorn) exited with {self._proc.returncode} while starting."
                    f"\n{self.log_tail()}"
                )
            try:
                if requests.get(self._url + "/", timeout=2).status_code == 200:
                    return
            except requests.RequestException as exc:
                last_error = str(exc)
            time.sleep(0.1)
        raise EmbeddedPlacementError(
            f"Placement did not answer at {self._url} within {self.start_timeout:.0f} s "
            f"({last_error}).\n{self.log_tail()}"
        )

    # -- thread mode -------------------------------------------------------------------------
    def _start_thread(self) -> None:
        app = _thread_app(self.db_url, self.conf_path, self.log_requests)
        if self.is_sqlite:
            app = _Serialized(app)
        server = _ThreadingWSGIServer(("127.0.0.1", self.port), _QuietHandler)
        server.set_app(app)
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="embedded-placement",
            daemon=True,
        )
        self._thread.start()
        self._url = f"http://127.0.0.1:{server.server_address[1]}"


def _thread_app(db_url: str, conf_path: Path, log_requests: bool) -> Any:
    """Build (once per process) Placement's WSGI app for ``db_url``."""
    with _THREAD_APP_LOCK:
        if db_url in _THREAD_APP:
            return _THREAD_APP[db_url]
        if _THREAD_APP:
            raise EmbeddedPlacementError(
                "This process already runs an embedded Placement on "
                f"{_redact(next(iter(_THREAD_APP)))}; Placement's database context is global, "
                "so use the same database or mode='process'"
            )
        placement_log = logging.getLogger("placement")
        if not log_requests and placement_log.getEffectiveLevel() < logging.WARNING:
            # one INFO line per request would drown the scheduler's own log (a caller that
            # quietened Placement further, as the demo does, keeps its level)
            placement_log.setLevel(logging.WARNING)
        from oslo_config import cfg
        from placement import conf as placement_conf
        from placement import db_api, deploy

        # Placement's own ConfigOpts, not our global CONF; and no oslo.log setup, which
        # would reconfigure this process's root logger.
        config = cfg.ConfigOpts()
        placement_conf.register_opts(config)
        config([], project="placement", default_config_files=[str(conf_path)])
        if not config.placement_database.sync_on_startup:
            _sync_in_child(conf_path)
        db_api.configure(config)
        app = deploy.loadapp(config)
        _THREAD_APP[db_url] = app
        return app


def _sync_in_child(conf_path: Path) -> None:
    code = (
        "import sys; from placement.cmd.manage import main; "
        "sys.argv[0] = 'placement-manage'; main()"
    )
    cmd = [sys.executable, "-c", code, "--config-file", str(conf_path), "db", "sync"]
    result = subprocess.run(cmd, capture_output=True, timeout=120)
    if result.returncode != 0:
        raise EmbeddedPlacementError(
            "placement-manage db sync failed: " + result.stderr.decode(errors="replace")[-2000:]
        )


class _Serialized:
    """Run one request at a time (SQLite allows one writer), including the response body."""

    def __init__(self, app: Any):
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        with self.lock:
            result = self.app(environ, start_response)
            try:
                return list(result)
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()


class _ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
        LOG.debug("placement: " + format, *args)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _terminate(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)
    except ProcessLookupError:
        pass


def _redact(url: str) -> str:
    """The URL without its password."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        user = creds.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}" if ":" in creds else url
    return url
