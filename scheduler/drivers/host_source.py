"""What the filter scheduler asks of the hosts it schedules on: ``HostSource``.

Two sources implement it: ``scheduler.hosts.manager.HostManager`` (nova's per-request view:
each request reads what changed in the cells since the last one, and sees every change
committed before it arrived) and ``scheduler.drivers.caching_scheduler.HostStateCache`` (the
caching scheduler's: the HostStates of the last periodic refresh, everything else the
HostManager's it wraps). A test stand-in implements it too; ``tests/unit/scheduler/drivers/
test_host_source.py`` checks that each of the three has every member.

The driver calls every member directly: a source with nothing to do for one (a cache that
reads no cell per request has nothing to prefetch) implements it as doing nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from scheduler.hosts.state import HostState
from scheduler.objects import Aggregate, RequestSpec


class HostSource(Protocol):
    """The hosts, their aggregates and what this scheduler consumed on them."""

    # nova-compute's instance lists (update/delete/sync_instance_info)
    instance_tracker: Any
    # read each host's instances' flavor and image properties (TypeAffinityFilter, a
    # non-zero ImagePropertiesWeigher)
    instance_details: bool

    # -- the hosts a request starts from ---------------------------------------------------
    def get_host_states_by_uuids(
        self,
        compute_uuids: Iterable[str] | None,
        spec: RequestSpec | None = None,
        *,
        request_id: str | None = None,
    ) -> list[HostState]:
        """HostStates of these compute-node uuids (None: every host) in the cells the
        request may use."""
        ...

    def compute_nodes_by_host_or_node(
        self, host: str | None, node: str | None, spec: RequestSpec | None = None
    ) -> list[HostState]:
        """The compute nodes of a forced or requested destination."""
        ...

    def host_states_for(self, host: str, node: str | None = None) -> list[HostState]:
        """The HostStates held for a service host (and node), without reading a cell."""
        ...

    def prefetch(
        self, spec: RequestSpec | None = None, *, aggregates: bool = True, cells: bool = True
    ) -> None:
        """Start the reads the request will wait for, so that they overlap its other work."""
        ...

    # -- aggregates (the prefilters' AggregateView) -------------------------------------------
    def aggregates_by_metadata(
        self, key: str | None = None, value: str | None = None, key_prefix: str | None = None
    ) -> list[Aggregate]: ...

    def sync_aggregates(self, not_before: float | None = None) -> None:
        """Include every aggregate change committed before ``not_before`` (monotonic)."""
        ...

    def update_aggregates(self, aggregates: list[Aggregate]) -> None: ...

    def delete_aggregate(self, aggregate: Aggregate) -> None: ...

    def minimum_compute_version(self) -> int | None:
        """The lowest nova-compute service version of the enabled cells (owner_nova_filter)."""
        ...

    # -- what this scheduler consumed --------------------------------------------------------
    def track_consumption(self, hs: HostState, key: str) -> None:
        """Remember that ``key`` (an instance uuid) is counted on ``hs``."""
        ...

    def release_consumer(self, consumer: str, compute_uuid: str) -> None:
        """Placement no longer holds the consumer's allocation on that compute node."""
        ...

    def counted_claims(self) -> dict[str, set[str]]:
        """``{instance uuid: compute-node uuids}`` of the consumption counted now."""
        ...

    def release_deleted_instance(self, host: str, instance_uuid: str) -> int: ...

    def release_moved_instances(self, host: str, instance_uuids: Iterable[str]) -> int: ...

    def release_unlisted_instances(self, host: str, instance_uuids: Iterable[str]) -> int: ...

    # -- life cycle --------------------------------------------------------------------------
    def warm_up(self) -> int:
        """Before the first request: read every cell; the number of hosts."""
        ...

    def start_refresher(self) -> None:
        """Keep the cells' service rows current on a thread of its own."""
        ...

    def status(self) -> list[dict[str, Any]]:
        """Per cell, what an operator sees in the health endpoints and the GMR."""
        ...

    def reset(self) -> None:
        """SIGHUP: reload what it caches (cells, aggregates, ...)."""
        ...

    def stop(self) -> None: ...
