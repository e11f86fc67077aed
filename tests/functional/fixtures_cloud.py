"""A small real cloud for functional tests: API and cell databases, a fleet loaded into them
and into the real Placement service, and a running scheduler service on the real RabbitMQ.

`build_cloud` enters everything into an ExitStack, so the caller's `with` tears it all down.
"""

from __future__ import annotations

import contextlib
import threading
import uuid as uuidlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oslo_messaging import transport as om_transport

import db
from placement_client.api import PlacementClient
from scheduler.conf import CONF
from scheduler.demo import fleet as fleet_mod
from scheduler.demo.embedded_placement import EmbeddedPlacement
from scheduler.objects import Flavor
from scheduler.rpc import transport as rpc
from scheduler.rpc.rpcapi import SchedulerAPI
from scheduler.rpc.service import SchedulerService
from tests.functional.fixtures_db import make_database
from tests.functional.fixtures_rabbit import delete_queues, own_vhost

# nova's default filters with the AZ and NUMA filters: for fleets with NUMA hosts
FILTERS_WITH_NUMA = [
    "ComputeFilter",
    "AvailabilityZoneFilter",
    "ComputeCapabilitiesFilter",
    "ImagePropertiesFilter",
    "ServerGroupAntiAffinityFilter",
    "ServerGroupAffinityFilter",
    "NUMATopologyFilter",
]
# two NUMA cells of 16 GiB each: only the NUMA hosts take it, as many as their cells hold
NUMA_FLAVOR = Flavor(
    name="t.numa",
    flavorid="t-numa",
    vcpus=4,
    memory_mb=32768,
    root_gb=20,
    extra_specs={"hw:numa_nodes": "2"},
)

PROJECT = "6f70656e-7374-6163-6b00-70726f6a6563"
USER = "75736572-0000-4000-8000-000000000001"


@dataclass
class Cloud:
    fleet: fleet_mod.Fleet
    api_url: str
    cell_urls: dict[str, str]  # cell uuid -> url
    placement: PlacementClient
    client: SchedulerAPI
    service: SchedulerService
    transport_url: str
    exchange: str

    def host_az(self, host: str) -> str | None:
        for agg in self.fleet.aggregates:
            if host in agg.hosts and "availability_zone" in agg.metadata:
                return agg.metadata["availability_zone"]
        return None

    def host_cell(self, host: str) -> str:
        return self.fleet.host_cells[host]

    @property
    def unusable(self) -> set[str]:
        return self.fleet.disabled_hosts | self.fleet.down_hosts


def _database(stack: contextlib.ExitStack, kind: str, name: str, tmp: Path) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp / (name + '.sqlite')}"
    return stack.enter_context(make_database(kind, f"novasched_{name}"))


def load_fleet_and_placement(
    stack: contextlib.ExitStack,
    tmp: Path,
    api: Any,
    cell_urls: dict[str, str],
    *,
    hosts: int,
    seed: int,
    unusable_fraction: float,
    fleet_options: dict[str, Any] | None = None,
) -> tuple[str, PlacementClient, fleet_mod.Fleet]:
    """The real Placement (its own process, stopped by ``stack``) and a fleet loaded into the
    cell databases and into it, ``unusable_fraction`` of it disabled and as much down; the up
    services report every ``REPORT_INTERVAL`` seconds as nova-compute does, until ``stack``
    closes, so a module of slow tests never outlives ``service_down_time``. Returns Placement's
    URL, a client and the fleet."""
    placement_svc = EmbeddedPlacement(f"sqlite:///{tmp / 'placement.sqlite'}", mode="process")
    placement_url = placement_svc.start()
    stack.callback(placement_svc.stop)
    placement = PlacementClient(placement_url, retry_backoff=0.01)
    fleet = fleet_mod.build_fleet(
        fleet_mod.FleetSpec(
            hosts=hosts,
            cells=list(cell_urls),
            seed=seed,
            disabled_fraction=unusable_fraction,
            down_fraction=unusable_fraction,
            **{"max_instances_per_host": 1, **(fleet_options or {})},
        )
    )
    engines = {u: db.get_engine(c) for u, c in cell_urls.items()}
    fleet_mod.load_fleet(fleet, api, engines, placement)
    stack.callback(db.dispose_engines)
    stack.enter_context(computes_reporting(list(engines.values())))
    return placement_url, placement, fleet


# nova-compute's [DEFAULT] report_interval
REPORT_INTERVAL = 10.0


@contextlib.contextmanager
def computes_reporting(engines: list[Any]) -> Any:
    """The up compute services heartbeat now and every REPORT_INTERVAL seconds (the fleet's
    down hosts, which never reported, stay down), as long as the context is open."""
    for engine in engines:
        db.touch_services(engine)
    stop = threading.Event()

    def report() -> None:
        while not stop.wait(REPORT_INTERVAL):
            for engine in engines:
                with contextlib.suppress(Exception):  # a test may have dropped a database
                    db.touch_services(engine)

    thread = threading.Thread(target=report, name="compute-heartbeats", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def build_cloud(
    stack: contextlib.ExitStack,
    tmp: Path,
    *,
    api_kind: str = "mariadb",
    cell_kinds: tuple[str, ...] = ("mariadb", "postgresql", "sqlite"),
    hosts: int = 30,
    seed: int = 11,
    topic: str | None = None,
    exchange: str | None = None,
    aggregate_cache_ttl: int = 0,
    fleet_options: dict[str, Any] | None = None,
) -> Cloud:
    """Build and start a cloud, on a RabbitMQ vhost of its own (``own_vhost``: nova's own
    client always uses topic ``scheduler``, which no exchange isolates from another test run
    on the same broker); ``topic``/``exchange`` name the cloud's topic and exchange.
    ``aggregate_cache_ttl`` 0 re-reads aggregates on every request; -1 never re-reads them,
    so that only the ``update_aggregates`` casts can change them. ``fleet_options``: more
    ``FleetSpec`` fields (NUMA hosts, ...)."""
    url = own_vhost(stack, "novasched-cloud")
    api_url = _database(stack, api_kind, "e2e_api", tmp)
    api = db.get_engine(api_url)
    db.create_schema(api, "api")
    cell_urls: dict[str, str] = {}
    for i, kind in enumerate(cell_kinds, start=1):
        cell_url = _database(stack, kind, f"e2e_cell{i}", tmp)
        mapping = db.create_cell_mapping(api, name=f"cell{i}", database_connection=cell_url)
        db.create_schema(cell_url, "cell")
        cell_urls[mapping["uuid"]] = cell_url
    placement_url, placement, fleet = load_fleet_and_placement(
        stack,
        tmp,
        api,
        cell_urls,
        hosts=hosts,
        seed=seed,
        unusable_fraction=0.125,
        fleet_options=fleet_options,
    )

    CONF.set_override("connection", api_url, group="api_database")
    CONF.set_override("auth_type", "noauth2", group="placement")
    CONF.set_override("endpoint_override", placement_url, group="placement")
    CONF.set_override("claim_retry_backoff", 0.01, group="placement")
    CONF.set_override("host", f"e2e-{uuidlib.uuid4().hex[:8]}")
    CONF.set_override("aggregate_cache_ttl", aggregate_cache_ttl, group="scheduler")
    CONF.set_override("long_rpc_timeout", 60)
    exchange = exchange or "nova"
    CONF.register_opts(om_transport._transport_opts)
    CONF.set_override("control_exchange", exchange)
    transport = rpc.get_transport(CONF, url=url)
    stack.callback(transport.cleanup)
    topic = topic or rpc.RPC_TOPIC
    service = SchedulerService(CONF, transport=transport, topic=topic)
    service.start()
    stack.callback(service.stop)
    stack.callback(delete_queues, url, [topic, f"{topic}.{service.host}"])
    client = SchedulerAPI(transport, topic=topic)
    return Cloud(fleet, api_url, cell_urls, placement, client, service, url, exchange)
