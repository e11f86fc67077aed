"""nova 34's own scheduler on the benchmark's cloud, so that "N times nova 34" is measured in
the same sitting as novasched, on the same fleet, Placement, databases and broker.

A Placement claim costs several times more on one machine than on another (36-51 ms p50 on
one, 16-22 ms on another a few days earlier), and so does nova's whole request: a ratio
against a figure measured on another machine says more about the two machines than about
the two schedulers. ``nova_scheduler(cloud)`` starts ``nova-scheduler`` (nova 34.0.0, from
``.venv-nova``, made on first use as the compatibility tests make it) with one worker, on a
RabbitMQ virtual host of its own (nova's topic is always ``scheduler``; a queue belongs to
its vhost, whatever the exchange), reading the cloud's API and cell databases and asking the
cloud's Placement, and yields a conductor-side ``SchedulerAPI`` to it. nova's defaults
otherwise: the same filters and weighers novasched runs by default.
"""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import sqlalchemy as sa

import db
from benchmarks import placement_seed
from scheduler.conf import CONF
from scheduler.rpc import transport as rpc
from scheduler.rpc.context import RequestContext
from scheduler.rpc.rpcapi import SchedulerAPI
from tests import peers

START_TIMEOUT = 180.0


class NovaUnavailable(placement_seed.BenchSetupError):
    """nova 34 could not be installed or did not start."""


def nova_python() -> Path:
    """``.venv-nova``'s interpreter with nova 34 and PyMySQL in it (installed on first use,
    as the compatibility tests install it)."""
    try:
        return peers.nova_venv(("PyMySQL",))
    except peers.PeerUnavailable as exc:
        raise NovaUnavailable(str(exc)) from exc


@contextlib.contextmanager
def own_vhost() -> Iterator[str]:
    """A RabbitMQ virtual host of its own (guest may use it); its transport URL."""
    try:
        vhost = peers.add_vhost("novasched-bench-nova")
    except peers.PeerUnavailable as exc:
        raise NovaUnavailable(f"nova's queue needs a vhost of its own: {exc}") from exc
    try:
        yield placement_seed.RABBIT_URL.rstrip("/") + "/" + vhost
    finally:
        peers.delete_vhost(vhost)


def nova_conf(cloud: placement_seed.BenchCloud, transport_url: str, run_dir: Path) -> str:
    """nova.conf for nova-scheduler on ``cloud`` (one worker, no notifications)."""
    return f"""[DEFAULT]
transport_url = {transport_url}
host = bench-nova-scheduler
debug = false
log_file = {run_dir / "nova-scheduler.log"}
state_path = {run_dir}
# the fleet's services never heartbeat: they stay up as in novasched's runs
service_down_time = 86400

[api_database]
connection = {cloud.api_url}

[database]
connection = {cloud.cell_url}

[scheduler]
workers = 1
discover_hosts_in_cells_interval = -1

[placement]
auth_type = admin_token
endpoint = {cloud.placement_url}
token = admin

[oslo_concurrency]
lock_path = {run_dir / "locks"}

[oslo_messaging_notifications]
driver = noop
"""


def _listening(vhost: str) -> bool:
    """Whether nova's ``scheduler`` queue in ``vhost`` has a consumer."""
    return peers.queue_consumers(vhost, "scheduler") > 0


@contextlib.contextmanager
def nova_scheduler(
    cloud: placement_seed.BenchCloud, timeout: float = START_TIMEOUT
) -> Iterator[tuple[SchedulerAPI, int]]:
    """nova-scheduler on ``cloud``; yields a client to it and the process's pid."""
    python = nova_python()
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(own_vhost())
        run_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-nova-")))
        conf = run_dir / "nova.conf"
        conf.write_text(nova_conf(cloud, url, run_dir))
        cmd = [str(python.parent / "nova-scheduler"), "--config-file", str(conf)]
        with open(run_dir / "stdout.log", "wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=run_dir)

        def stop() -> None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

        stack.callback(stop)
        deadline = time.monotonic() + timeout
        while not _listening(url.rsplit("/", 1)[1]):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = b""
                for name in ("nova-scheduler.log", "stdout.log"):
                    path = run_dir / name
                    if path.exists():
                        tail += path.read_bytes()[-3000:]
                raise NovaUnavailable(
                    f"nova-scheduler {'exited' if proc.poll() is not None else 'did not listen'}"
                    f":\n{tail.decode(errors='replace')}"
                )
            time.sleep(0.5)
        transport = rpc.get_transport(CONF, url=url)
        stack.callback(transport.cleanup)
        client = SchedulerAPI(transport, topic="scheduler")
        sync_instances(client, cloud)
        yield client, proc.pid


def sync_instances(client: SchedulerAPI, cloud: placement_seed.BenchCloud) -> None:
    """Each host's instances, as its nova-compute sends them at start and every two minutes
    (``sync_instance_info``). Without them nova's HostManager reads every host's instances
    from the cell database on every request ("updates aren't flowing from nova-compute"),
    which a deployment with its computes running does not. Sent twice, a second apart: the
    first recreates the list of a host nova's start-up read has not reached yet, the second
    marks it current."""
    engine = sa.create_engine(db.api.normalize_url(cloud.cell_url), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            hosts = conn.execute(sa.text("SELECT host FROM compute_nodes WHERE deleted = 0"))
            by_host: dict[str, list[str]] = {host: [] for (host,) in hosts}
            rows = conn.execute(
                sa.text("SELECT host, uuid FROM instances WHERE deleted = 0 AND host IS NOT NULL")
            ).all()
    finally:
        engine.dispose()
    for host, uuid in rows:
        by_host.setdefault(host, []).append(uuid)
    ctx = RequestContext(is_admin=True, request_id="req-bench-nova-sync")
    time.sleep(2.0)  # nova's own start-up read of the instances
    for _ in range(2):
        for host, uuids in by_host.items():
            client.sync_instance_info(ctx, host, uuids)
        time.sleep(1.0)
