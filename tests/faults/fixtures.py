"""A small cloud whose services can be reached through fault proxies.

``build_fault_cloud`` composes the same building blocks as
``tests/functional/fixtures_cloud.build_cloud`` (schema, fleet loaded into the cell databases
and the real Placement, a SchedulerService on the real RabbitMQ, a SchedulerAPI client), but
the URLs the scheduler and its client use may go through ``FaultProxy``s: RabbitMQ, Placement,
and any MariaDB cell. Loading the fleet and the audit always talk to the services directly.

``audit`` checks the invariant every fault test ends with: each Placement consumer that holds
allocations and did not exist before the test is an instance that got a successful reply.
"""

from __future__ import annotations

import contextlib
import uuid as uuidlib
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from oslo_messaging import transport as om_transport
from oslo_messaging._drivers import impl_rabbit

import db
from placement_client.api import PlacementClient
from scheduler.conf import CONF
from scheduler.demo import fleet as fleet_mod
from scheduler.objects import Flavor, RequestSpec
from scheduler.rpc import transport as rpc
from scheduler.rpc.context import RequestContext
from scheduler.rpc.rpcapi import SchedulerAPI
from scheduler.rpc.service import SchedulerService
from tests.faults import ledger
from tests.faults.proxy import FaultProxy
from tests.functional.fixtures_cloud import PROJECT, USER, load_fleet_and_placement
from tests.functional.fixtures_db import make_database
from tests.functional.fixtures_rabbit import RABBIT_URL, delete_queues, ensure_rabbit

TINY = Flavor(name="m1.tiny", flavorid="1", vcpus=1, memory_mb=512, root_gb=1)


@dataclass
class FaultCloud:
    fleet: fleet_mod.Fleet
    cell_urls: dict[str, str]  # cell uuid -> url the loader used (direct)
    placement: PlacementClient  # direct, for the audit
    client: SchedulerAPI
    service: SchedulerService
    topic: str
    rabbit_proxy: FaultProxy | None = None
    placement_proxy: FaultProxy | None = None
    cell_proxies: dict[str, FaultProxy] = field(default_factory=dict)  # cell uuid -> proxy
    baseline: set[str] = field(default_factory=set)  # consumers before the test

    def select(self, count: int = 1, flavor: Flavor = TINY) -> tuple[list[str], list]:
        """One select_destinations call for ``count`` new instances: (uuids, reply)."""
        uuids = [str(uuidlib.uuid4()) for _ in range(count)]
        spec = RequestSpec(flavor=flavor, num_instances=count, project_id=PROJECT, user_id=USER)
        ctx = RequestContext(user_id=USER, project_id=PROJECT, request_id=f"req-{uuidlib.uuid4()}")
        ledger.count("calls")
        reply = self.client.select_destinations(
            ctx, spec, uuids, return_objects=True, return_alternates=False
        )
        ledger.count("calls answered")
        return uuids, reply

    def hosts_in(self, cell_uuid: str) -> set[str]:
        return {h for h, c in self.fleet.host_cells.items() if c == cell_uuid}

    def consumers(self) -> dict[str, set[str]]:
        """Every consumer holding allocations in Placement -> its providers (read directly,
        GET /resource_providers/{uuid}/allocations for each provider of the fleet)."""
        out: dict[str, set[str]] = {}
        for provider in self.fleet.providers:
            path = f"/resource_providers/{provider['uuid']}/allocations"
            answer = self.placement._request("GET", path, "1.0")
            assert answer.status == 200, (path, answer.status, answer.body)
            for consumer in answer.body.get("allocations", {}):
                out.setdefault(consumer, set()).add(provider["uuid"])
        return out

    def audit(self, succeeded: set[str]) -> None:
        """Every new consumer with allocations got a successful reply."""
        orphans = {c: p for c, p in self.consumers().items() if c not in self.baseline}
        orphans = {c: p for c, p in orphans.items() if c not in succeeded}
        ledger.count("audits")
        ledger.count("allocations lost", len(orphans))
        assert not orphans, f"claims without a successful reply: {orphans}"


def _through(proxy: FaultProxy, url: str) -> str:
    """``url`` with its host:port replaced by the proxy's."""
    parts = urlsplit(url)
    netloc = parts.netloc
    hostport = netloc.rsplit("@", 1)[-1]
    return url.replace(hostport, f"127.0.0.1:{proxy.port}", 1)


def build_fault_cloud(
    stack: contextlib.ExitStack,
    tmp: Path,
    *,
    cell_kinds: tuple[str, ...] = ("mariadb", "sqlite"),
    proxied_cells: tuple[int, ...] = (),
    rabbit_proxy: bool = False,
    placement_proxy: bool = False,
    hosts: int = 16,
    seed: int = 7,
    rpc_timeout: int = 10,
    cell_timeout: float = 2.0,
    placement_timeout: float = 5.0,
) -> FaultCloud:
    """Build and start a cloud; ``proxied_cells`` are indexes (0-based) into ``cell_kinds``
    of MariaDB cells the scheduler reaches through a proxy."""
    rabbit = ensure_rabbit()
    api_url = f"sqlite:///{tmp / 'api.sqlite'}"
    api = db.get_engine(api_url)
    db.create_schema(api, "api")
    cell_urls: dict[str, str] = {}
    proxies: dict[str, FaultProxy] = {}
    for i, kind in enumerate(cell_kinds):
        if kind == "sqlite":
            url = f"sqlite:///{tmp / f'cell{i}.sqlite'}"
        else:
            url = stack.enter_context(make_database(kind, f"novasched_fault{i}"))
        seen = url
        if i in proxied_cells:
            parts = urlsplit(url)
            proxy = stack.enter_context(FaultProxy(parts.hostname, parts.port or 3306))
            seen = _through(proxy, url)
        mapping = db.create_cell_mapping(api, name=f"cell{i}", database_connection=seen)
        db.create_schema(url, "cell")
        cell_urls[mapping["uuid"]] = url
        if i in proxied_cells:
            proxies[mapping["uuid"]] = proxy
    placement_url, placement, fleet = load_fleet_and_placement(
        stack, tmp, api, cell_urls, hosts=hosts, seed=seed, unusable_fraction=0.0
    )

    p_proxy = None
    sched_placement_url = placement_url
    if placement_proxy:
        parts = urlsplit(placement_url)
        p_proxy = stack.enter_context(FaultProxy(parts.hostname, parts.port))
        sched_placement_url = _through(p_proxy, placement_url)
    r_proxy = None
    transport_url = rabbit
    if rabbit_proxy:
        parts = urlsplit(RABBIT_URL)
        r_proxy = stack.enter_context(FaultProxy(parts.hostname, parts.port))
        transport_url = _through(r_proxy, rabbit)

    CONF.set_override("connection", api_url, group="api_database")
    CONF.set_override("auth_type", "noauth2", group="placement")
    CONF.set_override("endpoint_override", sched_placement_url, group="placement")
    CONF.set_override("claim_retry_backoff", 0.01, group="placement")
    CONF.set_override("timeout", placement_timeout, group="placement")
    CONF.set_override("cell_timeout", cell_timeout, group="scheduler")
    CONF.set_override("aggregate_cache_ttl", 0, group="scheduler")
    # the scenarios read why a request failed from the reason the caller gets
    CONF.set_override("novalidhost_detail", True, group="scheduler")
    CONF.set_override("host", f"fault-{uuidlib.uuid4().hex[:8]}")
    CONF.set_override("long_rpc_timeout", rpc_timeout)
    CONF.register_opts(om_transport._transport_opts)
    CONF.register_opts(impl_rabbit.rabbit_opts, group="oslo_messaging_rabbit")
    # reconnect every second after a broker outage, not with a growing back-off
    CONF.set_override("rabbit_retry_interval", 1, group="oslo_messaging_rabbit")
    CONF.set_override("rabbit_retry_backoff", 0, group="oslo_messaging_rabbit")
    CONF.set_override("rabbit_interval_max", 1, group="oslo_messaging_rabbit")
    CONF.set_override("kombu_reconnect_delay", 0.1, group="oslo_messaging_rabbit")
    CONF.set_override("control_exchange", "nova")
    topic = f"scheduler-fault-{uuidlib.uuid4().hex[:10]}"
    transport = rpc.get_transport(CONF, url=transport_url)
    stack.callback(transport.cleanup)
    service = SchedulerService(CONF, transport=transport, topic=topic)
    service.start()
    stack.callback(service.stop, True, 10)
    stack.callback(delete_queues, rabbit, [topic, f"{topic}.{service.host}"])
    client_transport = rpc.get_transport(CONF, url=transport_url)
    stack.callback(client_transport.cleanup)
    client = SchedulerAPI(client_transport, topic=topic)
    cloud = FaultCloud(
        fleet,
        cell_urls,
        placement,
        client,
        service,
        topic,
        rabbit_proxy=r_proxy,
        placement_proxy=p_proxy,
        cell_proxies=proxies,
    )
    cloud.baseline = set(cloud.consumers())
    # every proxy back to normal before the services stop (the ExitStack runs LIFO)
    for proxy in [r_proxy, p_proxy, *proxies.values()]:
        if proxy is not None:
            stack.callback(proxy.restore)
    return cloud
