"""The fleet a replay runs on: today's hosts and providers, private to the replay, with the
recorded instances taken out.

A replay must not see the instances it is about to place again: they sit on today's hosts
and in Placement's usage, and a request replayed on top of them would find the fleet fuller
than it was. ``ReplayFleet`` therefore holds

- **the hosts**: a private copy of every HostState the host manager read (a copy consumes
  nothing on the manager's), from which each recorded instance still listed on a host is
  taken out: its flavor's RAM, disk and vCPUs are given back, it leaves the host's instance
  list, and the NUMA cells' use its compute stored for it (``instance_extra.numa_topology``:
  the cells, pinned CPUs and pages it got) is taken back from the host's NUMA topology. The
  PCI devices it holds are not (which pool a device came from is the compute's to say), so
  such an instance, and a NUMA one whose topology was not found, is counted in
  ``held_numa_pci`` and its host keeps that use;
- **the providers**: a ProviderView loaded once by a feed (Placement's database or API),
  never refreshed, from which each recorded instance's allocations (``GET
  /allocations/{uuid}``, as Placement holds them today) are subtracted.

It is the host source (``scheduler.drivers.host_source.HostSource``) and, through
``placement``, the Placement of the driver the replay runs: what the replay places is
consumed on the copies and claimed in the private view, so that each request sees the ones
replayed before it, and nothing reaches Placement or the cells.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from placement_client.api import (
    AllocationCandidates,
    AllocationRequest,
    ClaimConflict,
    PlacementClientError,
)
from placement_client.view import ProviderRecord, ProviderView
from scheduler.hosts.state import HostState
from scheduler.objects import Aggregate, Flavor, RequestSpec
from scheduler.resources import numa


class NotReplayable(PlacementClientError):
    """The private provider view cannot answer a request's query as Placement would
    (granular groups, nested or sharing providers): the request is not replayed."""

    def __init__(self, reason: str):
        super().__init__(f"the replay cannot answer this query: {reason}")
        self.reason = reason


class ReplayPlacement:
    """Placement as the replay's private view holds it: candidates from the view (every
    one: no sample), claims checked as Placement checks them (a claim past a provider's
    capacity is refused with 409, as ``PUT /allocations`` refuses it, and the claimer tries
    the next host) and counted in the view, nothing sent anywhere."""

    def __init__(self, view: ProviderView):
        self.view = view
        self.claims: dict[str, dict[str, Any]] = {}  # consumer -> its allocations
        self.refused = 0  # claims refused as Placement would (capacity, inventory)

    def get_allocation_candidates(
        self,
        query: Any,
        request_id: str | None = None,
        *,
        coalesce: bool = True,
        not_before: float | None = None,
    ) -> AllocationCandidates:
        if getattr(query, "limit", None) is not None:
            # Placement samples at random past the limit; the replay looks at every host
            query = dataclasses.replace(query, limit=None)
        answer = self.view.candidates(query)
        if answer.candidates is None:
            raise NotReplayable(answer.reason)
        return answer.candidates

    def claim_resources(
        self,
        consumer_uuid: str,
        alloc_request: AllocationRequest,
        project_id: str,
        user_id: str,
        *,
        consumer_generation: int | None = None,
        request_id: str | None = None,
    ) -> None:
        allocations = alloc_request.get("allocations") or {}
        refused = self.view.claim_refusal(consumer_uuid, allocations)
        if refused is not None:
            # what Placement's PUT /allocations answers: 409, the claimer tries the next host
            self.refused += 1
            raise ClaimConflict(f"the replay's Placement refuses the claim: {refused}", status=409)
        if consumer_uuid in self.claims:
            # a move of an instance the replay placed: its claim moves (the source counted
            # while the destination was chosen, as nova's migration allocation does)
            self.view.forget(consumer_uuid)
        self.claims[consumer_uuid] = allocations
        self.view.assume(consumer_uuid, allocations)

    def delete_allocation_for_instance(
        self, consumer_uuid: str, request_id: str | None = None
    ) -> bool:
        if self.claims.pop(consumer_uuid, None) is None:
            return False
        self.view.forget(consumer_uuid)
        return True

    def get_allocations_for_consumer(
        self, consumer_uuid: str, request_id: str | None = None
    ) -> dict[str, Any]:
        held = self.claims.get(consumer_uuid) or {}
        return {"allocations": {rp: dict(body) for rp, body in held.items()}}

    def get_aggregates(self, uuid: str, request_id: str | None = None) -> list[str]:
        record = self.view.record(uuid)
        return sorted(record.aggregates) if record is not None else []


@dataclasses.dataclass(slots=True)
class TakenOut:
    """What taking the recorded instances out of today's fleet did."""

    instances: int = 0  # recorded instances found on a host and taken out
    allocations: int = 0  # recorded instances whose Placement allocations were subtracted
    numa: int = 0  # taken out of their host's NUMA cells
    held_numa_pci: int = 0  # taken out, but their host keeps their NUMA cell / PCI use


class ReplayFleet:
    """Private copies of the hosts and providers (see the module docstring). ``hosts``: the
    host manager's HostStates, with their instance lists; ``source``: the host manager,
    asked for aggregates and the compute services' version; ``view``: a loaded
    ProviderView the fleet owns from now on."""

    instance_tracker: Any = None
    instance_details = False

    def __init__(self, hosts: Iterable[HostState], source: Any, view: ProviderView):
        self._hosts = {hs.uuid: hs.detached_copy() for hs in hosts if hs.uuid}
        self._source = source
        self.view = view
        view.max_age = float("inf")  # never refreshed: always the replay's truth
        self.placement = ReplayPlacement(view)
        self._placed: dict[str, HostState] = {}  # instance uuid -> where the replay put it
        # how long the recorded instances were building (``run.Builds``, read from the
        # cells by whoever builds the fleet); None: built by the next request
        self.builds: Any = None

    @property
    def hosts(self) -> list[HostState]:
        return list(self._hosts.values())

    def copy_hosts(self) -> dict[str, HostState]:
        """Another private copy of the hosts as they are now (the recorded decisions are
        laid on one to compare the replay with)."""
        return {uuid: hs.detached_copy() for uuid, hs in self._hosts.items()}

    # -- taking the recorded instances out -------------------------------------------------------
    def take_out(
        self,
        flavors: Mapping[str, RequestSpec],
        allocations: Mapping[str, Mapping[str, Any]],
        numa_topologies: Mapping[str, Any] | None = None,
    ) -> TakenOut:
        """Take the recorded instances out: ``flavors`` maps each instance uuid to the
        request it was placed by, ``allocations`` each to what Placement holds for it today
        (``{rp: {"resources": {rc: n}}}``; missing or empty: nothing held),
        ``numa_topologies`` each to the NUMA topology its compute stored for it."""
        done = TakenOut()
        stored = numa_topologies or {}
        for hs in self._hosts.values():
            here = [u for u in (hs.instances or ()) if u in flavors]
            for uuid in here:
                spec = flavors[uuid]
                _give_back(hs, spec.flavor)
                hs.instances.pop(uuid, None)
                done.instances += 1
                held = bool(hs.pci_stats and spec.pci_requests)
                if hs.numa_topology is not None and uuid in stored:
                    fitted = numa.fitted_cells_of_instance(stored[uuid])
                    hs.numa_topology = numa.host_topology_without_usage(hs.numa_topology, fitted)
                    done.numa += 1
                elif hs.numa_topology is not None and _asks_numa(spec):
                    held = True
                done.held_numa_pci += held
        by_provider: dict[str, dict[str, int]] = {}
        gone: dict[str, set[str]] = {}
        for uuid, held in allocations.items():
            if not held:
                continue
            done.allocations += 1
            for rp, body in held.items():
                used = by_provider.setdefault(rp, {})
                for rc, n in (body.get("resources") or {}).items():
                    used[rc] = used.get(rc, 0) + int(n)
                gone.setdefault(rp, set()).add(uuid)
        records = []
        for rp, freed in by_provider.items():
            rec = self.view.record(rp)
            if rec is None:
                continue
            records.append(_without(rec, freed, gone[rp]))
        if records:
            self.view.apply(records, (), self.view.now())
        return done

    # -- the host source -------------------------------------------------------------------------
    def get_host_states_by_uuids(
        self,
        compute_uuids: Iterable[str] | None,
        spec: RequestSpec | None = None,
        *,
        request_id: str | None = None,
    ) -> list[HostState]:
        if compute_uuids is None:
            found = list(self._hosts.values())
        else:
            get = self._hosts.get
            found = [hs for hs in map(get, dict.fromkeys(compute_uuids)) if hs is not None]
        cell = _requested_cell(spec)
        return found if cell is None else [hs for hs in found if hs.cell_uuid == cell]

    def compute_nodes_by_host_or_node(
        self, host: str | None, node: str | None, spec: RequestSpec | None = None
    ) -> list[HostState]:
        return [
            hs
            for hs in self.get_host_states_by_uuids(None, spec)
            if (host is None or hs.host == host) and (node is None or hs.nodename == node)
        ]

    def host_states_for(self, host: str, node: str | None = None) -> list[HostState]:
        return self.compute_nodes_by_host_or_node(host, node)

    def prefetch(
        self, spec: RequestSpec | None = None, *, aggregates: bool = True, cells: bool = True
    ) -> None:
        """Nothing to read: the fleet was read once."""

    def aggregates_by_metadata(
        self, key: str | None = None, value: str | None = None, key_prefix: str | None = None
    ) -> list[Aggregate]:
        return self._source.aggregates_by_metadata(key, value, key_prefix)

    def sync_aggregates(self, not_before: float | None = None) -> None:
        """Today's aggregates, as read once."""

    def update_aggregates(self, aggregates: list[Aggregate]) -> None:
        """A replay takes no cast."""

    def delete_aggregate(self, aggregate: Aggregate) -> None:
        """A replay takes no cast."""

    def minimum_compute_version(self) -> int | None:
        return self._source.minimum_compute_version()

    def track_consumption(self, hs: HostState, key: str) -> None:
        """A replayed instance is on its host for the requests replayed after it (the
        affinity filters and the same/different host hints read the host's instances)."""
        if hs.instances is None:
            hs.instances = {}
        hs.instances.setdefault(key, None)
        self._placed[key] = hs

    def placed_on(self, instance_uuid: str) -> HostState | None:
        """The host the replay last put the instance on (None: not placed by the replay)."""
        return self._placed.get(instance_uuid)

    def release_consumer(self, consumer: str, compute_uuid: str) -> None:
        """Nothing else consumes on the copies."""

    def counted_claims(self) -> dict[str, set[str]]:
        """The replay's Placement is its own copy: it loses no claim."""
        return {}

    def release_deleted_instance(self, host: str, instance_uuid: str) -> int:
        return 0

    def release_moved_instances(self, host: str, instance_uuids: Iterable[str]) -> int:
        return 0

    def release_unlisted_instances(self, host: str, instance_uuids: Iterable[str]) -> int:
        return 0

    def warm_up(self) -> int:
        return len(self._hosts)

    def start_refresher(self) -> None:
        """Never refreshed."""

    def status(self) -> list[dict[str, Any]]:
        return [{"replay": True, "hosts": len(self._hosts)}]

    def reset(self) -> None:
        """Nothing cached to reload."""

    def stop(self) -> None:
        """Nothing running."""


def leave(hs: HostState, instance_uuid: str) -> None:
    """The instance consumed on ``hs`` (a private copy) is no longer there."""
    hs.release_consumption(instance_uuid, "moved")
    if hs.instances:
        hs.instances.pop(instance_uuid, None)


def _give_back(hs: HostState, flavor: Flavor) -> None:
    """The inverse of what ``HostState.consume_from_request`` counts for the flavor's RAM,
    disk, vCPUs and instance count (on a private copy)."""
    hs.free_ram_mb += flavor.memory_mb or 0
    hs.free_disk_mb += ((flavor.root_gb or 0) + (flavor.ephemeral_gb or 0)) * 1024
    hs.vcpus_used = max(0, (hs.vcpus_used or 0) - (flavor.vcpus or 0))
    hs.num_instances = max(0, (hs.num_instances or 0) - 1)


def _asks_numa(spec: RequestSpec) -> bool:
    try:
        return numa.requested_instance_topology(spec) is not None
    except Exception:  # a request the NUMA maths refuses asked for a topology all the same
        return True


def _without(rec: ProviderRecord, freed: Mapping[str, int], consumers: set[str]) -> ProviderRecord:
    used = {rc: max(0, n - freed.get(rc, 0)) for rc, n in rec.used.items()}
    return dataclasses.replace(rec, used=used, consumers=rec.consumers - consumers)


def _requested_cell(spec: RequestSpec | None) -> str | None:
    dest = getattr(spec, "requested_destination", None)
    return dest.cell_uuid if dest is not None else None
