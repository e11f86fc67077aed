"""ConsumptionLedger: where the host manager counts what this scheduler placed.

A host this scheduler consumed from counts that consumption on top of its last report
(``HostState.consume_from_request``) until the compute node reports newer data, nova says the
instance is gone or elsewhere (nova-compute's casts, through the instance tracker), its claim is
rolled back, Placement no longer holds it, or ``consumption_max_age`` passes (the sweep). The
ledger remembers on which HostStates each consumption is counted, by instance uuid, so that
those releases find them without looking at every host, and tells Placement's view which claims
must still be held for the counts to be right (``counted_claims``).
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from oslo_utils import timeutils

from scheduler.hosts.cells import CellView
from scheduler.hosts.state import HostState

# A consumption counted within this long before nova-compute's sync_instance_info is not
# released by it: the compute's list (read from a database replica) cannot hold an instance
# that has not reached its claim yet (the conductor's work after our answer, the compute's
# build queue).
_SYNC_GRACE = datetime.timedelta(seconds=30)
# at most this often, the sweep of expired consumptions runs from a consumption
_SWEEP_SECONDS = 10.0


class ConsumptionLedger:
    """Where each consumption of ours is counted: key (instance uuid) -> ((cell uuid,
    compute-node uuid), ...). Handed the cell reads' views by cell uuid (read, never
    written) and ``host_states_for`` (the HostStates of a host name, across cells)."""

    def __init__(
        self,
        conf: Any,
        views: Mapping[str, CellView],
        host_states_for: Callable[[str], list[HostState]],
    ) -> None:
        self.conf = conf
        self._views = views
        self._host_states_for = host_states_for
        # for nova's casts, Placement's view and the sweep (``track``; entries released
        # elsewhere are dropped by the sweep)
        self._consumed: dict[str, tuple[tuple[str | None, str], ...]] = {}
        self._consumed_lock = threading.Lock()
        self._next_sweep = 0.0

    @property
    def consumed(self) -> Mapping[str, tuple[tuple[str | None, str], ...]]:
        """Where each consumption is counted, by key (the ledger's own dict: read only)."""
        return self._consumed

    def sweep_due(self) -> bool:
        """Whether ``_SWEEP_SECONDS`` have passed since the last sweep (``expire``)."""
        return time.monotonic() >= self._next_sweep

    def track(self, hs: HostState, key: str) -> None:
        """Remember where the consumption ``key`` (an instance uuid) is counted, so that
        nova's casts, Placement's view and the sweep find it; sweep if one is due."""
        if hs.uuid:
            where = (hs.cell_uuid, hs.uuid)
            with self._consumed_lock:
                known = self._consumed.get(key)
                if known is None:
                    self._consumed[key] = (where,)
                elif where not in known:
                    self._consumed[key] = (*known, where)
        if time.monotonic() >= self._next_sweep:
            self.expire()

    def release_deleted_instance(self, host: str, instance_uuid: str) -> int:
        """nova-compute says ``instance_uuid`` left ``host`` (``delete_instance_info``):
        stop counting it there. Returns how many consumptions were released."""
        return sum(
            hs.release_consumption(instance_uuid, "deleted") for hs in self._host_states_for(host)
        )

    def release_moved_instances(self, host: str, instance_uuids: Iterable[str]) -> int:
        """nova-compute says these instances are on ``host`` (``update_instance_info``):
        stop counting them on every other host (a reschedule to an alternate, a reverted
        move)."""
        released = 0
        consumed = self._consumed
        for instance_uuid in instance_uuids:
            known = consumed.get(instance_uuid)
            if known is None:  # the common case: not one of ours, or long released
                continue
            for hs in self._consuming_hosts(known):
                if hs.host != host:
                    released += hs.release_consumption(instance_uuid, "moved")
        return released

    def release_unlisted_instances(self, host: str, instance_uuids: Iterable[str]) -> int:
        """nova-compute listed the instances of ``host`` (``sync_instance_info``): stop
        counting there the instances it does not list, unless consumed within the last
        ``_SYNC_GRACE`` (the compute's list, read from a database replica, cannot hold an
        instance that has not reached the compute's claim yet)."""
        hosts = self._host_states_for(host)
        if not hosts:
            return 0
        made_before = timeutils.utcnow() - _SYNC_GRACE
        listed = set(instance_uuids)
        return sum(hs.release_unlisted(listed, made_before) for hs in hosts)

    def release_consumer(self, consumer: str, compute_uuid: str) -> None:
        """Placement no longer holds ``consumer``'s allocation on the provider
        ``compute_uuid`` (the provider view's ``on_consumer_gone``): stop counting it on
        that compute node. Cheap for the consumers that are not ours (most of them)."""
        known = self._consumed.get(consumer)
        if known is None:
            return
        for hs in self._consuming_hosts(known):
            if hs.uuid == compute_uuid:
                hs.release_consumption(consumer, "placement")

    def counted_claims(self) -> dict[str, set[str]]:
        """``{instance uuid: compute-node uuids}`` of the instances whose consumption is
        counted now, by where it is counted: the claims Placement must still hold for that
        to be right (the provider view's ``counted_claims``)."""
        with self._consumed_lock:
            items = list(self._consumed.items())
        counted: dict[str, set[str]] = {}
        for key, known in items:
            for hs in self._consuming_hosts(known):
                if hs.counts_claim(key):
                    counted.setdefault(key, set()).add(hs.uuid)
        return counted

    def expire(self) -> int:
        """The sweep: release the consumptions older than ``[scheduler]
        consumption_max_age`` (their compute never reported them) and forget where the
        released ones were. Called by ``track`` every ``_SWEEP_SECONDS`` at most; cheap
        enough to be called by the refresher too. Returns how many expired."""
        self._next_sweep = time.monotonic() + _SWEEP_SECONDS
        max_age = getattr(self.conf.scheduler, "consumption_max_age", 0) or 0
        with self._consumed_lock:
            items = list(self._consumed.items())
        if not items:
            return 0
        hosts: dict[int, HostState] = {}
        for _key, known in items:
            for hs in self._consuming_hosts(known):
                hosts[id(hs)] = hs
        expired = 0
        if max_age:
            now = timeutils.utcnow()
            for hs in hosts.values():
                expired += hs.expire_consumption(max_age, now)
        counted: set[str] = set()
        for hs in hosts.values():
            counted.update(hs.consumptions())
        with self._consumed_lock:
            for key, known in items:
                if key not in counted and self._consumed.get(key) is known:
                    del self._consumed[key]
        return expired

    def _consuming_hosts(self, known: tuple[tuple[str | None, str], ...]) -> list[HostState]:
        """The cached HostStates at these (cell uuid, compute-node uuid)."""
        out = []
        for cell_uuid, uuid in known:
            view = self._views.get(cell_uuid) if cell_uuid else None
            hs = view.hosts.get(uuid) if view is not None else None
            if hs is not None:
                out.append(hs)
        return out
