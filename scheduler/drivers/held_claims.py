"""Our consumption of an instance lasts only while Placement holds the instance's claim.

The scheduler counts the instances it placed on a host until the host's compute node reports
them (``HostState``'s consumption). nova 34 counts none of them past the request; Placement's
allocation is what says an instance is still pending on a host. When Placement no longer
holds it (a conductor's clean-up, a build that failed before the compute claimed, an
operator's ``openstack resource provider allocation delete``), nova's next request sees the
host as its report has it, and so must ours, before it decides.

With the provider view on Placement's database, the per-request check looks the counted
claims up by consumer (``DatabaseFeed.catch_up``). With candidates from Placement's API,
``HeldClaims`` reads the answer itself: a ``DELETE /allocations`` frees usage, so a provider
whose ``used`` is below what it was last seen at plus the claims this scheduler made on it
since lost an allocation. Only then are that host's counted instances looked up
(``GET /allocations/{consumer}``), and the ones Placement no longer holds there are
released. A host answered without such a drop costs a comparison of a few integers.

What this cannot see: another writer's new allocation on the same provider between two
answers that hides a deletion of ours as large or smaller (another scheduler's claim in the
same moment). Such a consumption is released as before, by the compute's next report, nova's
casts or ``consumption_max_age``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from placement_client.api import Placement, PlacementError
from scheduler.hosts.state import HostState

LOG = logging.getLogger(__name__)

# providers watched at most (each a few integers); past it the ones of hosts that count
# nothing are dropped
_MAX_WATCHED = 50_000


def _used(summary: Mapping[str, Any]) -> dict[str, int]:
    return {rc: int(r.get("used", 0)) for rc, r in (summary.get("resources") or {}).items()}


class HeldClaims:
    """Per provider on which this scheduler counts a claim, the least ``used`` Placement
    must show while every such claim is held (see the module docstring)."""

    def __init__(self, placement: Placement):
        self.placement = placement
        self._lock = threading.Lock()
        # provider uuid -> {resource class: used at least}
        self._floor: dict[str, dict[str, int]] = {}
        # compute-node uuid -> the providers of its tree our claims took from
        self._trees: dict[str, set[str]] = {}
        # for tests and logs
        self.lookups = 0  # GET /allocations/{consumer} made
        self.released = 0

    def claimed(self, summaries: Mapping[str, Any] | None, host: HostState, alloc_req: Any) -> None:
        """A claim of ours landed on ``host``: its providers must show at least what the
        request's candidates showed plus what it took."""
        allocations = (alloc_req or {}).get("allocations") or {}
        if not host.uuid or not allocations:
            return
        with self._lock:
            tree = self._trees.setdefault(host.uuid, set())
            for rp, body in allocations.items():
                floor = self._floor.get(rp)
                if floor is None:
                    seen = (summaries or {}).get(rp)
                    floor = self._floor[rp] = _used(seen) if seen is not None else {}
                for rc, amount in (body.get("resources") or {}).items():
                    floor[rc] = floor.get(rc, 0) + int(amount)
                tree.add(rp)
            if len(self._floor) > _MAX_WATCHED:
                self._floor.clear()
                self._trees.clear()

    def observe(
        self, summaries: Mapping[str, Any], hosts: Iterable[HostState], request_id: str | None
    ) -> int:
        """Compare Placement's answer with the floors of the hosts that count claims of ours;
        look up the counted instances of a host whose providers show less, and release
        those Placement no longer holds on it. Returns how many were released."""
        dropped: list[HostState] = []
        with self._lock:
            for hs in hosts:
                if not hs.uuid or not hs.consumptions():
                    tree = self._trees.pop(hs.uuid, None) if hs.uuid else None
                    for rp in tree or ():
                        self._floor.pop(rp, None)
                    continue
                tree = self._trees.get(hs.uuid)
                if not tree:
                    # counted before this scheduler watched it (a claim made elsewhere in
                    # the driver): looked up once, then watched
                    dropped.append(hs)
                    continue
                for rp in tree:
                    seen = summaries.get(rp)
                    if seen is None:
                        continue
                    used = _used(seen)
                    floor = self._floor.get(rp, {})
                    if any(used.get(rc, 0) < n for rc, n in floor.items()):
                        dropped.append(hs)
                        break
                    self._floor[rp] = used
        released = 0
        for hs in dropped:
            released += self._look_up(hs, summaries, request_id)
        return released

    def _look_up(self, hs: HostState, summaries: Mapping[str, Any], request_id: str | None) -> int:
        claimed_from = self._trees.get(hs.uuid, ())

        def in_tree(rp: str) -> bool:
            if rp == hs.uuid or rp in claimed_from:
                return True
            seen = summaries.get(rp)
            return seen is not None and seen.get("root_provider_uuid") == hs.uuid

        gone = []
        for consumer in hs.consumptions():
            if not hs.counts_claim(consumer):
                continue
            try:
                held = self.placement.get_allocations_for_consumer(consumer, request_id=request_id)
            except PlacementError as exc:
                LOG.debug("Could not ask Placement for the allocations of %s: %s", consumer, exc)
                return 0  # counted as before; the next drop asks again
            finally:
                self.lookups += 1
            if not any(in_tree(rp) for rp in held.get("allocations") or ()):
                gone.append(consumer)
        released = hs.release_consumption(gone, "placement") if gone else 0
        if released:
            LOG.info(
                "Placement no longer holds %d instance(s) counted on %s (%s): not counted any more",
                released,
                hs.host,
                ", ".join(gone),
            )
            self.released += released
        with self._lock:
            # watched again from what this answer shows
            for rp in self._trees.setdefault(hs.uuid, set()) | ({hs.uuid} & set(summaries)):
                seen = summaries.get(rp)
                if seen is not None:
                    self._floor[rp] = _used(seen)
            if hs.uuid in summaries:
                self._trees[hs.uuid].add(hs.uuid)
        return released
