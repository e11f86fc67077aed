"""A real nova 34 on 127.0.0.1 with novasched in front, for the deployment suite.

``Deployment.start()`` stands up, in this order (each step's independent parts in parallel):

1. the Glance and Neutron stand-ins (threads of this process), a RabbitMQ vhost of its own,
   the real Placement on a MariaDB database of its own (``auth_strategy = noauth2``), and
   nova's API, cell0 and cell1 databases on MariaDB migrated by ``nova-manage``;
2. the nova-compute processes on nova's fake virt driver, each with its own ``[DEFAULT] host``
   and config file; ``cell_v2 map_cell0`` and ``create_cell --name cell1``; then nova-api
   (gunicorn on ``nova.wsgi.osapi_compute``) and nova-conductor, which keep the cell mappings
   they first read;
3. ``cell_v2 discover_hosts`` once every compute has its compute node (and the PCI devices of
   ``dep-pci`` are in Placement and in its compute node's PCI pools), the Open vSwitch agents'
   providers under their hosts' (``NeutronStandIn.report_ovs_agent``), the aggregates and
   availability zones, then ``novasched-scheduler --config-file nova.conf``: the one nova.conf
   every nova service reads (there is no nova-scheduler process).

nova's services reach Placement with keystoneauth's ``admin_token`` plugin (token ``admin``,
which Placement's noauth2 treats as the admin). nova-api runs without Keystone: ``authtoken``
is taken out of the v2.1 pipelines, and requests carry ``X-User-Id``/``X-Project-Id``/``X-Roles``.

``stop()`` ends every process it started (by process group), drops the databases and the vhost.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from tests.deployment.nova_compute import PCI_ADDRESSES, PCI_PRODUCT_ID, PCI_VENDOR_ID
from tests.deployment.stand_ins import GlanceStandIn, NeutronStandIn
from tests.functional.fixtures_placement import (
    MARIADB_HOST,
    MARIADB_PORT,
    MARIADB_USER,
    _mariadb_connect,
    ensure_mariadb,
    make_mariadb_placement,
)
from tests.functional.fixtures_rabbit import RABBIT_HOST, RABBIT_PORT, ensure_rabbit

NOVASCHED = Path(sys.executable).parent / "novasched-scheduler"
NOVASCHED_MANAGE = Path(sys.executable).parent / "novasched-manage"
MICROVERSION = "2.94"  # 2.95+ leaves an evacuated server stopped
FAKE_TOTAL_RAM_MB = 800000  # what nova's fake.FakeDriver reports
# how every instance fault of a NoValidHost begins (nova's words, tenants see them)
NO_VALID_HOST = "No valid host was found"

ADMIN_PROJECT = "a0000000000000000000000000000001"
TENANT_PROJECT = "b0000000000000000000000000000002"


# the [pci] alias of nova.conf: one of the devices dep-pci's driver reports
PCI_ALIAS = "nsfake-nic"
PCI_ALIAS_SPEC = {
    "name": PCI_ALIAS,
    "vendor_id": PCI_VENDOR_ID,
    "product_id": PCI_PRODUCT_ID,
    "device_type": "type-PCI",
}
PCI_RESOURCE_CLASS = f"CUSTOM_PCI_{PCI_VENDOR_ID}_{PCI_PRODUCT_ID}".upper()


@dataclass(frozen=True, slots=True)
class ComputeSpec:
    """One nova-compute process: its host name, virt driver and what makes it differ.
    ``pci_devices``: the addresses of the PCI devices its driver reports, which it puts in
    Placement (``[pci] device_spec``, ``report_in_placement``); ``ovs_bridges``: ``(bridge,
    physnet, kbps)`` of the Open vSwitch agent the Neutron stand-in reports on it."""

    host: str
    driver: str
    usable_ram_mb: int
    ram_allocation_ratio: float = 1.0
    cpu_allocation_ratio: float = 4.0
    pci_devices: tuple[str, ...] = ()
    ovs_bridges: tuple[tuple[str, str, int], ...] = ()

    @property
    def reserved_host_memory_mb(self) -> int:
        return FAKE_TOTAL_RAM_MB - self.usable_ram_mb


@dataclass(frozen=True, slots=True)
class ZoneSpec:
    """An aggregate with an availability zone (or only metadata) and its hosts."""

    name: str
    hosts: tuple[str, ...]
    metadata: dict[str, str] = field(default_factory=dict)


# The hosts differ in usable RAM (the reserve), RAM and CPU allocation ratios, so the weighers
# decide: in az-resched the rescheduling compute weighs more than c4 (more free RAM), so that
# flow's first attempt lands on it and its alternate is c4.
COMPUTES = (
    ComputeSpec("dep-c1", "fake.FakeDriverWithoutFakeNodes", 49152),
    ComputeSpec("dep-c2", "fake.FakeDriverWithoutFakeNodes", 32768, ram_allocation_ratio=1.5),
    ComputeSpec("dep-c3", "fake.FakeDriverWithoutFakeNodes", 24576, cpu_allocation_ratio=2.0),
    ComputeSpec("dep-c4", "fake.FakeDriverWithoutFakeNodes", 16384),
    ComputeSpec("dep-resched", "fake.FakeRescheduleDriver", 65536),
    # dedicated CPUs (PCPU) and an emulated TPM (the COMPUTE_SECURITY_TPM_* traits), alone in
    # its zone: tests/deployment/nova_compute.py
    ComputeSpec("dep-sec", "novasched_fake.SecureFakeDriver", 16384),
    # nested providers, alone in their zone (tests/deployment/test_nested_providers.py): two
    # PCI devices in Placement on dep-pci; an Open vSwitch agent on each with a bridge per
    # physnet, only dep-pci's physnet2 bridge with room for a 5 Mbit/s minimum
    ComputeSpec(
        "dep-pci",
        "novasched_fake.PciFakeDriver",
        16384,
        pci_devices=PCI_ADDRESSES,
        ovs_bridges=(("br-phy1", "physnet1", 10_000_000), ("br-phy2", "physnet2", 10_000_000)),
    ),
    ComputeSpec(
        "dep-ovs",
        "fake.FakeDriverWithoutFakeNodes",
        16384,
        ovs_bridges=(("br-phy1", "physnet1", 10_000_000), ("br-phy2", "physnet2", 1_000)),
    ),
)
ZONES = (
    ZoneSpec("main", ("dep-c1", "dep-c2"), {"availability_zone": "az-main"}),
    ZoneSpec("solo", ("dep-c3",), {"availability_zone": "az-solo"}),
    ZoneSpec("resched", ("dep-resched", "dep-c4"), {"availability_zone": "az-resched"}),
    ZoneSpec("ssd", ("dep-c2",), {"ssd": "true"}),
    ZoneSpec("sec", ("dep-sec",), {"availability_zone": "az-sec"}),
    ZoneSpec("nest", ("dep-pci", "dep-ovs"), {"availability_zone": "az-nest"}),
)
DEFAULT_ZONE = "az-main"

ENABLED_FILTERS = (
    "ComputeFilter",
    "ComputeCapabilitiesFilter",
    "ImagePropertiesFilter",
    "ServerGroupAntiAffinityFilter",
    "ServerGroupAffinityFilter",
    "AggregateInstanceExtraSpecsFilter",
    "PciPassthroughFilter",
)


class DeploymentError(RuntimeError):
    """A service did not come up; the message carries its log's tail."""


def pci_provider_name(host: str, address: str) -> str:
    """The name nova-compute gives a PCI device's provider (``pci_placement_translator``)."""
    return f"{host}_{address.upper()}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, lines: int = 40) -> str:
    if not path.exists():
        return f"({path.name} is empty)"
    return f"--- {path.name} ---\n" + "\n".join(
        path.read_text(errors="replace").splitlines()[-lines:]
    )


def wait_for(
    what: str, probe: Callable[[], Any], timeout: float = 60.0, interval: float = 0.2
) -> Any:
    """Poll ``probe`` until it returns something truthy; fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


class ApiError(AssertionError):
    def __init__(self, method: str, path: str, resp: requests.Response):
        super().__init__(
            f"{method} {path} -> {resp.status_code} "
            f"(req {resp.headers.get('x-openstack-request-id')}): {resp.text[:1000]}"
        )
        self.status = resp.status_code
        self.body = resp.text


class RestClient:
    """A requests session for one API and one identity; retries idempotent calls once on a
    reset connection."""

    def __init__(self, url: str, headers: dict[str, str]):
        self.url = url.rstrip("/")
        self.session = requests.Session()
        self.session.headers.update(headers)

    def call(self, method: str, path: str, body: Any = None, ok: tuple[int, ...] = ()) -> Any:
        for attempt in (1, 2):
            try:
                resp = self.session.request(method, self.url + path, json=body, timeout=60)
                break
            except requests.ConnectionError:
                if attempt == 2 or method not in ("GET", "PUT", "DELETE"):
                    raise
        if (ok and resp.status_code not in ok) or (not ok and resp.status_code >= 400):
            raise ApiError(method, path, resp)
        if not resp.content:
            return None
        try:
            return resp.json()
        except ValueError:
            return resp.text

    def get(self, path: str, **kw: Any) -> Any:
        return self.call("GET", path, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> Any:
        return self.call("POST", path, body, **kw)

    def put(self, path: str, body: Any = None, **kw: Any) -> Any:
        return self.call("PUT", path, body, **kw)

    def delete(self, path: str, **kw: Any) -> Any:
        return self.call("DELETE", path, **kw)


def compute_client(url: str, project: str, roles: str) -> RestClient:
    return RestClient(
        url + "/v2.1",
        {
            "X-User-Id": "u-" + project[:12],
            "X-Project-Id": project,
            "X-Roles": roles,
            "X-Auth-Token": "no-keystone",
            "OpenStack-API-Version": f"compute {MICROVERSION}",
            "X-OpenStack-Nova-API-Version": MICROVERSION,
        },
    )


class Deployment:
    """The whole deployment. Once started, ``admin`` and ``tenant`` (another project, no admin
    role) talk to nova's API, ``placement_api`` to Placement's; ``hosts`` maps a host name to
    its ComputeSpec, ``server_ids`` lists every server asked for."""

    def __init__(self, run_dir: Path, nova_python: Path, *, view_database: bool = False):
        self.run_dir = run_dir
        self.nova_bin = nova_python.parent
        self.view_database = view_database
        self.tag = uuid.uuid4().hex[:10]
        self.vhost = f"novasched-deploy-{self.tag}"
        self.databases = {n: f"nsdep_{self.tag}_{n}" for n in ("api", "cell0", "cell1")}
        self.hosts = {c.host: c for c in COMPUTES}
        self.glance = GlanceStandIn()
        self.neutron = NeutronStandIn()
        self.placement = make_mariadb_placement(workers=2)
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._vhost_made = False
        self.api_port = _free_port()
        self.timings: dict[str, float] = {}
        self.image_id = ""
        self.image2_id = ""
        self.server_ids: list[str] = []
        self._flavors: dict[str, str] = {}
        self._flavor_lock = threading.Lock()

    # -- URLs and files ----------------------------------------------------------------------
    def db_url(self, name: str) -> str:
        return (
            f"mysql+pymysql://{MARIADB_USER}@{MARIADB_HOST}:{MARIADB_PORT}/"
            f"{self.databases[name]}?charset=utf8"
        )

    @property
    def transport_url(self) -> str:
        return f"rabbit://guest:guest@{RABBIT_HOST}:{RABBIT_PORT}/{self.vhost}"

    @property
    def nova_conf(self) -> Path:
        return self.run_dir / "nova.conf"

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def log(self, name: str) -> Path:
        return self.run_dir / f"{name}.log"

    # -- start -------------------------------------------------------------------------------
    def start(self) -> None:
        t0 = time.monotonic()
        ensure_mariadb()
        ensure_rabbit()
        self.glance.start()
        self.neutron.start()
        self.image_id = self.glance.add_image("cirros")
        self.image2_id = self.glance.add_image("cirros-rebuilt")
        for sub in ("state", "instances", "locks"):
            (self.run_dir / sub).mkdir(exist_ok=True)
        with ThreadPoolExecutor(max_workers=6) as pool:
            jobs = [
                pool.submit(self.placement.start),
                pool.submit(self._make_vhost),
                pool.submit(self._sync_databases),
            ]
            for job in jobs:
                job.result()
        self.placement_api = RestClient(
            self.placement.url,
            {"X-Auth-Token": "admin", "OpenStack-API-Version": "placement 1.39"},
        )
        self.timings["databases, Placement"] = time.monotonic() - t0
        self._write_nova_conf()
        self._write_api_paste()
        for spec in COMPUTES:
            self._start_compute(spec)
        # nova-api and nova-conductor cache the cell mappings they first see
        self._map_cells()
        self._start_api()
        self._start_conductor()
        self._wait_computes()
        self._manage("cell_v2", "discover_hosts", "--verbose")
        self.timings["nova services"] = time.monotonic() - t0
        self.admin = compute_client(self.api_url, ADMIN_PROJECT, "admin,member,reader")
        self.tenant = compute_client(self.api_url, TENANT_PROJECT, "member,reader")
        # as the Open vSwitch agents report their bridges once their hosts' providers exist
        for spec in COMPUTES:
            if spec.ovs_bridges:
                self.neutron.report_ovs_agent(self.placement_api, spec.host, spec.ovs_bridges)
        self._wait_api()
        self._make_zones()
        self.start_novasched()
        self.timings["total"] = time.monotonic() - t0

    def _make_vhost(self) -> None:
        for args in (
            ["add_vhost", self.vhost],
            ["set_permissions", "-p", self.vhost, "guest", ".*", ".*", ".*"],
        ):
            done = subprocess.run(
                ["rabbitmqctl", *args], capture_output=True, text=True, timeout=60
            )
            if done.returncode != 0:
                raise DeploymentError(f"rabbitmqctl {' '.join(args)} failed: {done.stderr}")
            self._vhost_made = True

    def _sync_databases(self) -> None:
        conn = _mariadb_connect()
        try:
            with conn.cursor() as cur:
                for name in self.databases.values():
                    cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8")
        finally:
            conn.close()
        confs = {
            "api": f"[api_database]\nconnection = {self.db_url('api')}\n",
            "cell0": f"[database]\nconnection = {self.db_url('cell0')}\n",
            "cell1": f"[database]\nconnection = {self.db_url('cell1')}\n",
        }
        with ThreadPoolExecutor(max_workers=3) as pool:
            jobs = []
            for name, text in confs.items():
                path = self.run_dir / f"sync-{name}.conf"
                path.write_text(text)
                args = ("api_db", "sync") if name == "api" else ("db", "sync", "--local_cell")
                jobs.append(pool.submit(self._manage, *args, conf=path, log=f"sync-{name}"))
            for job in jobs:
                job.result()

    def decisions(self, key: str, timeout: float = 20.0) -> list[dict[str, Any]]:
        """novasched's decision records of an instance or a request (``novasched-manage
        decision show --json`` on the deployment's nova.conf), once the scheduler's writer
        has written them."""
        deadline = time.monotonic() + timeout
        cmd = [str(NOVASCHED_MANAGE), "--config-file", str(self.nova_conf)]
        while True:
            done = subprocess.run(
                [*cmd, "decision", "show", key, "--json"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            if done.returncode == 0:
                return json.loads(done.stdout)
            if done.returncode != 2 or time.monotonic() > deadline:
                raise DeploymentError(f"novasched-manage decision show {key}: {done.stderr}")
            time.sleep(0.5)

    def replay(self, record: dict[str, Any], *extra: str) -> dict[str, Any]:
        """``novasched-manage replay --from-records --json`` of one recorded decision (by
        its time) on the deployment's nova.conf, with ``extra`` arguments."""
        when = record["created_at"]
        done = subprocess.run(
            [str(NOVASCHED_MANAGE), "--config-file", str(self.nova_conf), "replay"]
            + ["--from-records", "--since", when, "--until", when, "--json", *extra],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            raise DeploymentError(f"novasched-manage replay: {done.stderr}")
        return json.loads(done.stdout)

    def nova_manage(self, *args: str) -> str:
        """``nova-manage`` of nova 34 on the deployment's nova.conf; its output (it fails with
        the command's stderr). Logged to nova-manage.log."""
        return self._manage(*args)

    def _manage(self, *args: str, conf: Path | None = None, log: str = "nova-manage") -> str:
        cmd = [
            str(self.nova_bin / "nova-manage"),
            "--config-file",
            str(conf or self.nova_conf),
            *args,
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
        with open(self.log(log), "a") as fh:
            fh.write(f"$ {' '.join(args)}\n{done.stdout}{done.stderr}\n")
        if done.returncode != 0:
            raise DeploymentError(
                f"nova-manage {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}"
            )
        return done.stdout

    def _map_cells(self) -> None:
        self._manage("cell_v2", "map_cell0", "--database_connection", self.db_url("cell0"))
        self._manage(
            "cell_v2",
            "create_cell",
            "--name",
            "cell1",
            "--database_connection",
            self.db_url("cell1"),
            "--transport-url",
            self.transport_url,
        )

    def _write_nova_conf(self) -> None:
        view_line = (
            f"view_database_connection = {self.placement.db_url}\n" if self.view_database else ""
        )
        text = f"""[DEFAULT]
transport_url = {self.transport_url}
host = dep-control
my_ip = 127.0.0.1
debug = false
state_path = {self.run_dir / "state"}
instances_path = {self.run_dir / "instances"}
compute_driver = fake.FakeDriverWithoutFakeNodes
shelved_offload_time = 0
default_schedule_zone = {DEFAULT_ZONE}
instance_usage_audit = false
heal_instance_info_cache_interval = -1
# heartbeats every 4 s and down after 20 s (nova: 10 and 60), so that a stopped service is
# seen down within the suite's patience
report_interval = 4
service_down_time = 20

[api]
auth_strategy = keystone

[wsgi]
api_paste_config = {self.run_dir / "api-paste.ini"}

[api_database]
connection = {self.db_url("api")}

[database]
connection = {self.db_url("cell1")}

[conductor]
workers = 1

[scheduler]
discover_hosts_in_cells_interval = -1
max_attempts = 3

[filter_scheduler]
enabled_filters = {",".join(ENABLED_FILTERS)}
# the rescheduling compute fails the first spawn of every server and never succeeds one, so
# the build-failure weigher would keep every later server off it: the reschedule flow runs
# once per novasched configuration
build_failure_weight_multiplier = 0
# dep-pci reports its PCI devices to Placement: a flavor's PCI alias is a request group
pci_in_placement = true

[pci]
alias = {json.dumps(PCI_ALIAS_SPEC)}

[placement]
auth_type = admin_token
endpoint = {self.placement.url}
token = admin
{view_line}
[glance]
api_servers = {self.glance.url}

[neutron]
auth_type = admin_token
endpoint = {self.neutron.url}
token = admin
endpoint_override = {self.neutron.url}

[quota]
driver = nova.quota.NoopQuotaDriver

[oslo_concurrency]
lock_path = {self.run_dir / "locks"}

[oslo_messaging_notifications]
driver = messagingv2

[notifications]
# every service, novasched included, sends nova's versioned notifications only
notification_format = versioned

[vnc]
enabled = false

[os_vif_ovs]
ovsdb_connection = tcp:127.0.0.1:1
"""
        self.nova_conf.write_text(text)

    def _write_api_paste(self) -> None:
        source = self.nova_bin.parent / "etc" / "nova" / "api-paste.ini"
        lines = []
        for line in source.read_text().splitlines():
            if line.startswith("keystone =") and "osapi_compute_app_v21" in line:
                line = line.replace(" authtoken", "")
            lines.append(line)
        (self.run_dir / "api-paste.ini").write_text("\n".join(lines) + "\n")
        # replace gunicorn's argv before nova parses it as its own command line
        (self.run_dir / "nova_api_wsgi.py").write_text(
            "import sys\n"
            "sys.argv = sys.argv[:1]\n"
            "from nova.wsgi.osapi_compute import application  # noqa: E402,F401\n"
        )

    def _spawn(self, name: str, cmd: list[str], env: dict[str, str] | None = None) -> None:
        log = open(self.log(name), "ab")  # noqa: SIM115 - owned by the child
        try:
            self._procs[name] = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=str(self.run_dir),
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
        finally:
            log.close()

    def _start_api(self) -> None:
        self._spawn(
            "nova-api",
            [
                str(self.nova_bin / "gunicorn"),
                "--bind",
                f"127.0.0.1:{self.api_port}",
                "--workers",
                "2",
                "--threads",
                "4",
                "--keep-alive",
                "75",
                "--timeout",
                "120",
                "--no-control-socket",
                "--chdir",
                str(self.run_dir),
                "nova_api_wsgi:application",
            ],
            env={"OS_NOVA_CONFIG_DIR": str(self.run_dir)},
        )

    def _start_conductor(self) -> None:
        self._spawn(
            "nova-conductor",
            [str(self.nova_bin / "nova-conductor"), "--config-file", str(self.nova_conf)],
        )

    def compute_conf(self, spec: ComputeSpec) -> Path:
        return self.run_dir / f"{spec.host}.conf"

    def _start_compute(self, spec: ComputeSpec) -> None:
        state = self.run_dir / "state" / spec.host
        state.mkdir(parents=True, exist_ok=True)
        conf = self.compute_conf(spec)
        text = (
            "[DEFAULT]\n"
            f"host = {spec.host}\n"
            f"compute_driver = {spec.driver}\n"
            f"state_path = {state}\n"
            f"instances_path = {state / 'instances'}\n"
            f"reserved_host_memory_mb = {spec.reserved_host_memory_mb}\n"
            f"ram_allocation_ratio = {spec.ram_allocation_ratio}\n"
            f"cpu_allocation_ratio = {spec.cpu_allocation_ratio}\n"
        )
        if spec.pci_devices:
            # its driver's devices are passed through and tracked in Placement
            device_spec = {"vendor_id": PCI_VENDOR_ID, "product_id": PCI_PRODUCT_ID}
            text += f"[pci]\ndevice_spec = {json.dumps(device_spec)}\nreport_in_placement = true\n"
        conf.write_text(text)
        # nova's own entry point, or the launcher that adds the suite's drivers to nova.virt
        if spec.driver.startswith("novasched_fake."):
            command = [
                str(self.nova_bin / "python"),
                str(Path(__file__).with_name("nova_compute.py")),
            ]
        else:
            command = [str(self.nova_bin / "nova-compute")]
        self._spawn(
            spec.host,
            [*command, "--config-file", str(self.nova_conf), "--config-file", str(conf)],
        )

    def _check_alive(self) -> None:
        for name, proc in self._procs.items():
            if proc.poll() is not None:
                raise DeploymentError(
                    f"{name} exited with {proc.returncode} while starting\n{_tail(self.log(name))}"
                )

    def _cell1_rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple]:
        conn = _mariadb_connect(self.databases["cell1"])
        try:
            with conn.cursor() as cur:
                cur.execute(sql, args or None)
                return list(cur.fetchall())
        finally:
            conn.close()

    def _wait_computes(self, timeout: float = 120.0) -> None:
        want = set(self.hosts)

        def registered() -> bool:
            self._check_alive()
            try:
                rows = self._cell1_rows("SELECT host FROM compute_nodes WHERE deleted = 0")
            except Exception:  # the table appears with the schema
                return False
            return want <= {r[0] for r in rows}

        try:
            wait_for("every nova-compute's compute node", registered, timeout, 0.5)
            wait_for(
                "every compute's resource provider in Placement",
                lambda: want <= set(self._provider_uuids()),
                timeout,
                0.5,
            )
            wait_for(
                "every PCI device in Placement and in its compute node's PCI pools",
                self._pci_devices_reported,
                timeout,
                0.5,
            )
        except AssertionError as exc:
            tails = "\n".join(_tail(self.log(h), 15) for h in want)
            raise DeploymentError(f"{exc}\n{tails}") from None

    def _provider_uuids(self) -> dict[str, str]:
        """Every resource provider in Placement: name -> uuid."""
        listed = self.placement_api.get("/resource_providers")["resource_providers"]
        return {p["name"]: p["uuid"] for p in listed}

    def _pci_devices_reported(self) -> bool:
        """Whether each PCI device of the computes that report them is a provider in
        Placement and in a PCI pool of its compute node (the pools the PCI filters read name
        their device's provider: nova-compute writes them after the providers)."""
        providers = self._provider_uuids()
        pools = dict(
            self._cell1_rows("SELECT host, pci_stats FROM compute_nodes WHERE deleted = 0")
        )
        for spec in COMPUTES:
            for address in spec.pci_devices:
                rp = providers.get(pci_provider_name(spec.host, address))
                if rp is None or rp not in (pools.get(spec.host) or ""):
                    return False
        return True

    def _wait_api(self) -> None:
        def answers() -> bool:
            self._check_alive()
            try:
                return requests.get(self.api_url + "/", timeout=5).status_code == 200
            except requests.RequestException:
                return False

        try:
            wait_for("nova-api", answers, 60, 0.3)
        except AssertionError as exc:
            raise DeploymentError(f"{exc}\n{_tail(self.log('nova-api'))}") from None

    def _make_zones(self) -> None:
        for zone in ZONES:
            body: dict[str, Any] = {"name": zone.name}
            if "availability_zone" in zone.metadata:
                body["availability_zone"] = zone.metadata["availability_zone"]
            agg = self.admin.post("/os-aggregates", {"aggregate": body})["aggregate"]
            others = {k: v for k, v in zone.metadata.items() if k != "availability_zone"}
            if others:
                self.admin.post(
                    f"/os-aggregates/{agg['id']}/action", {"set_metadata": {"metadata": others}}
                )
            for host in zone.hosts:
                self.admin.post(f"/os-aggregates/{agg['id']}/action", {"add_host": {"host": host}})

    # -- novasched ---------------------------------------------------------------------------
    def start_novasched(self, timeout: float = 90.0, *, extra_config: Path | None = None) -> None:
        """Start novasched on nova.conf (and ``extra_config`` after it, whose options win:
        a test's overrides, which the next plain start drops) and wait until it listens."""
        log = self.log("novasched")
        offset = log.stat().st_size if log.exists() else 0
        extra = ["--config-file", str(extra_config)] if extra_config else []
        self._spawn("novasched", [str(NOVASCHED), "--config-file", str(self.nova_conf), *extra])
        proc = self._procs["novasched"]

        def listening() -> bool:
            if proc.poll() is not None:
                raise DeploymentError(
                    f"novasched-scheduler exited with {proc.returncode}\n{_tail(log, 60)}"
                )
            with open(log, "rb") as fh:
                fh.seek(offset)
                text = fh.read()
            # every worker process warms up and listens on its own
            workers = max(1, text.count(b"Started scheduler worker"))
            return text.count(b"Scheduler service listening on topic scheduler") >= workers

        try:
            wait_for("novasched-scheduler to listen on topic scheduler", listening, timeout, 0.3)
        except AssertionError as exc:
            raise DeploymentError(f"{exc}\n{_tail(log, 60)}") from None

    def stop_novasched(self) -> None:
        self._stop_proc("novasched")

    def use_novasched_config(self, *, view_database: bool) -> None:
        """Run novasched with its provider view fed by Placement's database
        (``[placement] view_database_connection``) or not (the default): rewrite nova.conf
        and restart novasched if that changes anything. nova's services keep running; they
        ignore the option."""
        if view_database == self.view_database and "novasched" in self._procs:
            return
        self.stop_novasched()
        self.view_database = view_database
        self._write_nova_conf()
        self.start_novasched()

    # -- computes ----------------------------------------------------------------------------
    def start_compute(self, spec: ComputeSpec) -> None:
        """Start a nova-compute that COMPUTES does not list (``hosts`` does not learn of it;
        ``stop_compute`` stops it). It is not waited for."""
        self._start_compute(spec)

    def stop_compute(self, host: str) -> None:
        self._stop_proc(host)

    def restart_compute(self, host: str) -> None:
        self._start_compute(self.hosts[host])

    def _stop_proc(self, name: str) -> None:
        proc = self._procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=8)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
        except ProcessLookupError:
            pass

    # -- stop --------------------------------------------------------------------------------
    def stop(self) -> None:
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(self._stop_proc, list(self._procs)))
        # what nova asked of the stand-ins, beside the services' logs
        (self.run_dir / "stand-ins.json").write_text(
            json.dumps(
                {"glance": self.glance.requests, "neutron": self.neutron.requests},
                indent=1,
                sort_keys=True,
            )
        )
        self.placement.stop()
        for stand_in in (self.glance, self.neutron):
            try:
                stand_in.stop()
            except Exception:  # never started
                pass
        try:
            conn = _mariadb_connect()
            try:
                with conn.cursor() as cur:
                    for name in self.databases.values():
                        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
            finally:
                conn.close()
        finally:
            if self._vhost_made:
                subprocess.run(
                    ["rabbitmqctl", "delete_vhost", self.vhost], capture_output=True, timeout=60
                )

    def logs_tail(self, names: tuple[str, ...] = ("novasched", "nova-conductor")) -> str:
        return "\n".join(_tail(self.log(n), 30) for n in names)

    # -- what the tests do through nova's and Placement's APIs --------------------------------
    def flavor(self, name: str, ram: int = 512, vcpus: int = 1, disk: int = 1, **specs: str) -> str:
        """The id of flavor ``name``, created (with ``specs`` as extra specs) on first use."""
        with self._flavor_lock:
            if name in self._flavors:
                return self._flavors[name]
            body = {"flavor": {"name": name, "ram": ram, "vcpus": vcpus, "disk": disk}}
            flavor_id = self.admin.post("/flavors", body)["flavor"]["id"]
            if specs:
                self.admin.post(f"/flavors/{flavor_id}/os-extra_specs", {"extra_specs": specs})
            self._flavors[name] = flavor_id
            return flavor_id

    def boot(
        self,
        flavor: str,
        *,
        name: str = "server",
        az: str | None = None,
        hints: dict[str, Any] | None = None,
        count: int = 1,
        client: RestClient | None = None,
        networks: str | list[dict[str, str]] = "none",
    ) -> list[str]:
        """Ask nova for ``count`` servers (one request); return their ids (not waited for).
        ``networks``: nova's ``networks`` of the server (``[{"port": id}]``: a port of the
        Neutron stand-in)."""
        server: dict[str, Any] = {
            "name": name,
            "imageRef": self.image_id,
            "flavorRef": flavor,
            "networks": networks,
        }
        if az:
            server["availability_zone"] = az
        if count > 1:
            server.update(min_count=count, max_count=count, return_reservation_id=True)
        body: dict[str, Any] = {"server": server}
        if hints:
            body["os:scheduler_hints"] = hints
        reply = (client or self.tenant).post("/servers", body, ok=(202,))
        if count == 1:
            ids = [reply["server"]["id"]]
        else:
            found = self.admin.get(
                f"/servers/detail?all_tenants=1&reservation_id={reply['reservation_id']}"
            )["servers"]
            ids = [s["id"] for s in found]
        self.server_ids.extend(ids)
        return ids

    def server(self, server_id: str) -> dict[str, Any]:
        """The server as the admin sees it (host, fault details included)."""
        return self.admin.get(f"/servers/{server_id}")["server"]

    def wait_server(
        self,
        server_id: str,
        statuses: tuple[str, ...] = ("ACTIVE", "ERROR"),
        timeout: float = 90.0,
        until: Callable[[dict[str, Any]], bool] | None = None,
    ) -> dict[str, Any]:
        """Poll until the server's status is one of ``statuses`` with no task in progress
        (and ``until`` holds); return it."""

        def settled() -> dict[str, Any] | None:
            server = self.server(server_id)
            if server["status"] in statuses and server.get("OS-EXT-STS:task_state") is None:
                if until is None or until(server):
                    return server
            return None

        try:
            return wait_for(f"server {server_id} to reach {statuses}", settled, timeout, 0.3)
        except AssertionError as exc:
            server = self.server(server_id)
            raise AssertionError(
                f"{exc}: status {server['status']}, task {server.get('OS-EXT-STS:task_state')}, "
                f"host {host_of(server)}, fault {server.get('fault')}\n{self.logs_tail()}"
            ) from None

    def boot_and_wait(self, flavor: str, **kw: Any) -> dict[str, Any]:
        (server_id,) = self.boot(flavor, **kw)
        return self.wait_server(server_id)

    def expect_active(self, server: dict[str, Any], hosts: set[str] | None = None) -> str:
        """Assert ``server`` is ACTIVE (on one of ``hosts``); return its host."""
        assert server["status"] == "ACTIVE", (
            f"server {server['id']} is {server['status']}: {server.get('fault')}\n"
            f"{self.logs_tail()}"
        )
        host = host_of(server)
        if hosts is not None:
            assert host in hosts, f"server {server['id']} on {host}, expected one of {hosts}"
        return host

    def service_id(self, host: str, binary: str = "nova-compute") -> str:
        (svc,) = self.admin.get(f"/os-services?binary={binary}&host={host}")["services"]
        return svc["id"]

    def service(self, host: str) -> dict[str, Any]:
        (svc,) = self.admin.get(f"/os-services?binary=nova-compute&host={host}")["services"]
        return svc

    def provider_uuid(self, host: str) -> str:
        (rp,) = self.placement_api.get(f"/resource_providers?name={host}")["resource_providers"]
        return rp["uuid"]

    def provider(self, rp: str) -> dict[str, Any]:
        """Placement's resource provider ``rp`` (name, parent, root), with its traits."""
        provider = self.placement_api.get(f"/resource_providers/{rp}")
        provider["traits"] = self.placement_api.get(f"/resource_providers/{rp}/traits")["traits"]
        return provider

    def pci_devices_of(self, server_id: str) -> list[str]:
        """The addresses of the PCI devices nova-compute claimed for the server."""
        rows = self._cell1_rows(
            "SELECT address FROM pci_devices WHERE deleted = 0 AND instance_uuid = %s"
            " ORDER BY address",
            (server_id,),
        )
        return [r[0] for r in rows]

    def allocations(self, consumer: str) -> dict[str, dict[str, int]]:
        """Placement's allocations of ``consumer``: provider uuid -> resources."""
        got = self.placement_api.get(f"/allocations/{consumer}")["allocations"]
        return {rp: alloc["resources"] for rp, alloc in got.items()}

    def host_allocations_match(self, server: dict[str, Any]) -> bool:
        """The server's allocations are on its host's provider only."""
        allocs = self.allocations(server["id"])
        return set(allocs) == {self.provider_uuid(host_of(server))}

    def preferred_host(self, hosts: tuple[str, ...]) -> str:
        """The host of ``hosts`` nova 34's default weighers put first: the sum of the RAM,
        CPU and disk weighers' values less the I/O ops weigher's, each scaled to 0..1 over
        ``hosts`` from 0 (their ``minval``), from the compute node rows nova-scheduler reads
        (which nova-compute may update after a move, as nova's scheduler sees them; its count
        of I/O-heavy tasks stays until its next periodic update, and IoOpsWeigher reads it)."""
        values = self.weighed_values(hosts)
        totals = dict.fromkeys(hosts, 0.0)
        for i, multiplier in enumerate((1.0, 1.0, 1.0, -1.0)):
            # each of these weighers has minval = 0: a value is scaled by the largest
            high = max(max(v[i] for v in values.values()), 0.0)
            for host in hosts:
                if high > 0:
                    totals[host] += multiplier * max(values[host][i], 0.0) / high
        return max(hosts, key=lambda h: totals[h])

    def weighed_values(
        self, hosts: tuple[str, ...]
    ) -> dict[str, tuple[float, float, float, float]]:
        """Per host: free RAM, free vCPUs (times the CPU ratio), free disk and I/O-heavy
        tasks (``stats.io_workload``), as nova's RAM, CPU, disk and I/O ops weighers take
        them from the compute node row."""
        rows = self._cell1_rows(
            "SELECT host, free_ram_mb, vcpus, cpu_allocation_ratio, vcpus_used, free_disk_gb,"
            " disk_available_least, stats FROM compute_nodes WHERE deleted = 0"
        )
        values = {}
        for host, ram, vcpus, ratio, vcpus_used, disk, least, stats in rows:
            if host in hosts:
                free_disk = disk if least is None else min(disk, least)
                io_ops = float(json.loads(stats or "{}").get("io_workload", 0))
                values[host] = (float(ram), vcpus * ratio - vcpus_used, float(free_disk), io_ops)
        return values

    def instance_events(self, server_id: str) -> list[dict[str, Any]]:
        events = []
        actions = self.admin.get(f"/servers/{server_id}/os-instance-actions")["instanceActions"]
        for action in actions:
            detail = self.admin.get(
                f"/servers/{server_id}/os-instance-actions/{action['request_id']}"
            )["instanceAction"]
            events.extend(detail.get("events", []))
        return events


def host_of(server: dict[str, Any]) -> str | None:
    return server.get("OS-EXT-SRV-ATTR:host")


def fault_message(server: dict[str, Any]) -> str:
    return (server.get("fault") or {}).get("message", "")
