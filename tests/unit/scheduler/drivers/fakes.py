"""Fakes and builders shared by the driver tests (and others that drive a FilterScheduler
without services): HostStates filled as the host manager fills them, RequestSpecs, a fake
Placement answering allocation candidates and recording claims, and a fake host manager."""

from __future__ import annotations

import datetime
from types import SimpleNamespace
from typing import Any

from placement_client.api import (
    AllocationCandidates,
    ClaimConnectionLost,
    ClaimOutcomeUnknown,
)
from placement_client.view import Inventory, ProviderRecord
from scheduler.hosts.aggregates import aggregates_matching
from scheduler.hosts.instances import InstanceTracker
from scheduler.hosts.state import HostState
from scheduler.objects import (
    Aggregate,
    Flavor,
    InstanceGroup,
    RequestSpec,
)

CELL1 = "cell-1"
CELL2 = "cell-2"
CONTEXT = SimpleNamespace(request_id="req-1", project_id="ctx-project", user_id="ctx-user")


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(tzinfo=None)


# -- builders ----------------------------------------------------------------------------------
def make_host(
    name: str,
    *,
    node: str | None = None,
    cell: str = CELL1,
    ram_mb: int = 8192,
    vcpus: int = 8,
    disk_gb: int = 100,
    disabled: bool = False,
    down: bool = False,
    aggregates: list[Aggregate] | None = None,
    supported_instances: list[list[str]] | None = None,
) -> HostState:
    """A HostState filled the way the host manager fills it from the cell database."""
    node = node or name
    hs = HostState(name, node, cell_uuid=cell)
    last_seen = _now() - datetime.timedelta(seconds=3600 if down else 1)
    hs.update(
        compute={
            "uuid": f"rp-{node}",
            "memory_mb": ram_mb,
            "free_ram_mb": ram_mb,
            "vcpus": vcpus,
            "vcpus_used": 0,
            "local_gb": disk_gb,
            "free_disk_gb": disk_gb,
            "local_gb_used": 0,
            "hypervisor_type": "QEMU",
            "hypervisor_hostname": node,
            "supported_instances": supported_instances or [["x86_64", "qemu", "hvm"]],
            "stats": {},
            "updated_at": _now() - datetime.timedelta(minutes=5),
        },
        service={
            "host": name,
            "disabled": disabled,
            "disabled_reason": "maintenance" if disabled else None,
            "forced_down": False,
            "last_seen_up": last_seen,
            "created_at": last_seen - datetime.timedelta(days=1),
        },
        aggregates=aggregates or [],
    )
    return hs


def make_spec(
    *,
    ram_mb: int = 1024,
    vcpus: int = 1,
    root_gb: int = 10,
    num_instances: int = 1,
    group: InstanceGroup | None = None,
    hints: dict[str, list[Any]] | None = None,
    **fields: Any,
) -> RequestSpec:
    return RequestSpec(
        flavor=Flavor(memory_mb=ram_mb, vcpus=vcpus, root_gb=root_gb, name="m1"),
        num_instances=num_instances,
        project_id=fields.pop("project_id", "project-1"),
        user_id=fields.pop("user_id", "user-1"),
        instance_group=group,
        scheduler_hints=dict(hints or {}),
        **fields,
    )


def alloc_request(host: HostState, requesters: tuple[str, ...] = ()) -> dict[str, Any]:
    mappings = {"": [host.uuid]}
    mappings.update({r: [host.uuid] for r in requesters})
    return {
        "allocations": {host.uuid: {"resources": {"VCPU": 1, "MEMORY_MB": 1024}}},
        "mappings": mappings,
    }


# -- fakes -------------------------------------------------------------------------------------
class FakePlacement:
    """Answers allocation candidates for the hosts it holds and records claims."""

    def __init__(self, hosts: list[HostState]):
        self.hosts = hosts
        self.no_candidates: set[str] = set()  # host names in summaries without a request
        self.requesters: tuple[str, ...] = ()  # request group suffixes mapped in every request
        self.candidates_error: Exception | None = None
        self.claim_errors: dict[str, Exception] = {}  # by host name
        self.consumer_errors: dict[str, Exception] = {}  # by consumer uuid
        self.queries: list[Any] = []
        self.claim_attempts: list[tuple[str, str]] = []  # (consumer, host name)
        self.claims: dict[str, dict[str, Any]] = {}  # consumer -> claim kwargs
        self.deleted: list[str] = []
        # PUTs whose answer is lost, by host name: True if the PUT landed anyway
        self.lost_answers: dict[str, bool] = {}
        self.unknown_error: type[ClaimOutcomeUnknown] = ClaimConnectionLost
        self.check_error: Exception | None = None  # GET /allocations/{consumer} fails
        self.checks: list[str] = []
        self.foreign: dict[str, dict[str, Any]] = {}  # consumer -> allocations not ours
        self.on_claim = None  # called before each claim (a slow Placement, a clock)

    def _host_of(self, alloc_req: dict[str, Any]) -> HostState:
        rp = next(iter(alloc_req["allocations"]))
        return next(h for h in self.hosts if h.uuid == rp)

    def get_allocation_candidates(
        self, query, request_id=None, *, not_before=None
    ) -> AllocationCandidates:
        self.queries.append(query)
        if self.candidates_error is not None:
            raise self.candidates_error
        return AllocationCandidates(
            allocation_requests=[
                alloc_request(h, self.requesters)
                for h in self.hosts
                if h.host not in self.no_candidates
            ],
            provider_summaries={
                h.uuid: {"resources": self._used(h.uuid), "traits": []} for h in self.hosts
            },
        )

    def _used(self, rp: str) -> dict[str, dict[str, int]]:
        """What the claims held use of one provider, as Placement's summaries say it."""
        used: dict[str, dict[str, int]] = {}
        for claim in self.claims.values():
            for rc, n in claim["alloc_req"]["allocations"].get(rp, {}).get("resources", {}).items():
                used.setdefault(rc, {"capacity": 1 << 20, "used": 0})["used"] += n
        return used

    def claim_resources(
        self, consumer_uuid, alloc_request, project_id, user_id, *, request_id=None
    ):
        consumer, alloc_req = consumer_uuid, alloc_request
        host = self._host_of(alloc_req)
        self.claim_attempts.append((consumer, host.host))
        if self.on_claim is not None:
            self.on_claim(consumer, host.host)
        error = self.consumer_errors.get(consumer) or self.claim_errors.get(host.host)
        if error is not None:
            raise error
        if host.host in self.lost_answers:
            if self.lost_answers[host.host]:
                self._record(consumer, host, alloc_req, project_id, user_id, request_id)
            elif consumer in self.foreign:
                self.claims[consumer] = {"host": "elsewhere", "alloc_req": self.foreign[consumer]}
            lost = self.unknown_error(f"PUT /allocations/{consumer} on {host.host}: timed out")
            lost.allocations = alloc_req["allocations"]
            lost.previous = {}
            raise lost
        self._record(consumer, host, alloc_req, project_id, user_id, request_id)

    def _record(self, consumer, host, alloc_req, project_id, user_id, request_id) -> None:
        self.claims[consumer] = {
            "host": host.host,
            "alloc_req": alloc_req,
            "project_id": project_id,
            "user_id": user_id,
            "request_id": request_id,
        }

    def get_allocations_for_consumer(self, consumer_uuid, request_id=None) -> dict[str, Any]:
        consumer = consumer_uuid
        self.checks.append(consumer)
        if self.check_error is not None:
            raise self.check_error
        claim = self.claims.get(consumer)
        allocations = claim["alloc_req"]["allocations"] if claim else {}
        return {"allocations": {rp: dict(a, generation=3) for rp, a in allocations.items()}}

    def delete_allocation_for_instance(self, consumer_uuid, request_id=None) -> bool:
        self.deleted.append(consumer_uuid)
        return self.claims.pop(consumer_uuid, None) is not None


class FakeHostManager:
    """Holds HostStates and aggregates; records the calls the driver makes."""

    def __init__(self, hosts: list[HostState], aggregates: list[Aggregate] | None = None):
        self.hosts = hosts
        self.aggregates = aggregates or []
        self.calls: list[str] = []
        self.instance_tracker = InstanceTracker()
        self.enabled_cells: dict[str, Any] = dict.fromkeys(h.cell_uuid for h in hosts)

    def get_host_states_by_uuids(self, compute_uuids, spec=None, *, request_id=None):
        self.calls.append("get_host_states_by_uuids")
        if compute_uuids is None:
            return list(self.hosts)
        wanted = set(compute_uuids)
        return [h for h in self.hosts if h.uuid in wanted]

    def compute_nodes_by_host_or_node(self, host, node, spec=None):
        # case-insensitive, as the cell database's default MySQL collation compares
        def same(a: str, b: str | None) -> bool:
            return b is None or a.lower() == b.lower()

        return [h for h in self.hosts if same(h.host, host) and same(h.nodename, node)]

    def aggregates_by_metadata(self, key=None, value=None, key_prefix=None):
        return aggregates_matching(self.aggregates, key, value, key_prefix)

    def refresh_cells_caches(self) -> None:
        self.calls.append("refresh_cells_caches")

    def refresh_aggregates(self) -> None:
        self.calls.append("refresh_aggregates")

    def reset(self) -> None:
        # as HostManager.reset
        self.refresh_cells_caches()
        self.refresh_aggregates()

    def sync_aggregates(self, not_before=None) -> None:
        self.calls.append("sync_aggregates")

    def stop(self) -> None:
        self.calls.append("stop")

    # the rest of scheduler.drivers.host_source.HostSource: what these tests do not look at
    instance_details = False

    def host_states_for(self, host, node=None):
        return [h for h in self.hosts if h.host == host and node in (None, h.nodename)]

    def prefetch(self, spec=None, *, aggregates=True, cells=True) -> None:
        pass

    def update_aggregates(self, aggregates) -> None:
        known = {a.uuid: a for a in self.aggregates}
        known.update((a.uuid, a) for a in aggregates)
        self.aggregates = list(known.values())

    def delete_aggregate(self, aggregate) -> None:
        self.aggregates = [a for a in self.aggregates if a.uuid != aggregate.uuid]

    def minimum_compute_version(self):
        return None

    def track_consumption(self, hs, key) -> None:
        self.calls.append("track_consumption")

    def release_consumer(self, consumer, compute_uuid) -> None:
        for hs in self.hosts:
            if hs.uuid == compute_uuid:
                hs.release_consumption(consumer, "placement")

    def counted_claims(self) -> dict[str, set[str]]:
        counted: dict[str, set[str]] = {}
        for hs in self.hosts:
            for key in hs.consumptions():
                if hs.counts_claim(key):
                    counted.setdefault(key, set()).add(hs.uuid)
        return counted

    def release_deleted_instance(self, host, instance_uuid) -> int:
        return sum(
            hs.release_consumption(instance_uuid, "deleted") for hs in self.host_states_for(host)
        )

    def release_moved_instances(self, host, instance_uuids) -> int:
        return 0

    def release_unlisted_instances(self, host, instance_uuids) -> int:
        return 0

    def warm_up(self) -> int:
        return len(self.hosts)

    def start_refresher(self) -> None:
        pass

    def status(self) -> list[dict]:
        return []


# -- the provider view, filled by a test ----------------------------------------------------
class NoFeed:
    """The view is filled by the test; nothing reads Placement."""

    name = "test"

    def load(self, view):
        pass

    def poll(self, view):
        return 0

    def close(self):
        pass


def provider_record(host, *, vcpus=8, ram_mb=8192, disk_gb=100, used=None, consumers=()):
    return ProviderRecord(
        uuid=host.uuid,
        generation=3,
        name=host.nodename,
        inventories={
            "VCPU": Inventory(vcpus),
            "MEMORY_MB": Inventory(ram_mb),
            "DISK_GB": Inventory(disk_gb),
        },
        used=dict(used or {}),
        consumers=frozenset(consumers),
    )


class ListRecorder:
    """A decision recorder that keeps the records it is handed, in a list."""

    def __init__(self):
        self.records = []

    def record(self, rec):
        self.records.append(rec)
        return True
