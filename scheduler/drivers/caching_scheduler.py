"""The caching scheduler: the filter scheduler over HostStates refreshed only in the background.

It is the filter scheduler with another host source, not a class of its own:
``CachingScheduler`` builds a ``FilterScheduler`` whose host manager is a ``HostStateCache``
(the cache, its periodic refresh, and everything else handed to the wrapped host manager).

nova's old CachingScheduler, with Placement: a periodic task (a background thread, every
``[scheduler] periodic_task_interval`` seconds, nova's option and default of 60) reads every
compute node, service and instance of the enabled cells; requests then filter and weigh those
cached HostStates without reading the cell databases. The Placement query, the claim, its
rollback and the alternates are the filter scheduler's, so Placement still prevents any
over-commit; what the cache costs is accuracy, not safety:

- Hosts added to a cell appear at the next refresh; a host's usage as seen by the filters is
  the cell database's at the last refresh plus what this scheduler has placed since.
- ComputeFilter judges a service by its heartbeat *as of the last refresh*: an interval close
  to ``[DEFAULT] service_down_time`` makes live hosts look down. A warning says so at start.
- After a rollback, the hosts whose claims were undone are re-read at the next refresh (in the
  background), not on the request's path.

A request for a cell the cache does not hold (a disabled cell named as the destination) reads
that cell directly, as the filter scheduler would.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from scheduler.conf import CONF
from scheduler.drivers.base import NO_OBSERVERS, Observers
from scheduler.drivers.filter_scheduler import FilterScheduler
from scheduler.hosts.state import HostState
from scheduler.objects import Aggregate, Flavor, InstanceGroup, RequestSpec

LOG = logging.getLogger(__name__)

# nova's [scheduler] periodic_task_interval: its default, and what 0 means
DEFAULT_PERIODIC_TASK_INTERVAL = 60
_FROM_CONF = object()
# nova-compute's default report_interval: how old a heartbeat already is when it is read
_REPORT_INTERVAL = 10


def periodic_task_interval(conf: Any = CONF) -> float | None:
    """Seconds between refreshes: ``[scheduler] periodic_task_interval`` (when registered),
    0 meaning the default of 60 as in nova, negative meaning no periodic refresh (None)."""
    value = getattr(conf.scheduler, "periodic_task_interval", DEFAULT_PERIODIC_TASK_INTERVAL)
    if value is None or value == 0:
        value = DEFAULT_PERIODIC_TASK_INTERVAL
    return None if value < 0 else float(value)


def _refresh_spec() -> RequestSpec:
    # The host manager loads each host's instances only for requests that can use them (a
    # server group, same/different host hints). A refresh must load them for every host: the
    # affinity filters of later requests have no other source.
    return RequestSpec(
        flavor=Flavor(memory_mb=0, vcpus=0),
        instance_group=InstanceGroup(uuid="caching-scheduler-refresh"),
    )


@dataclass(slots=True)
class _Snapshot:
    """What one refresh read: the HostStates, by compute-node uuid, and the cells they are of."""

    hosts: list[HostState]
    by_uuid: dict[str, HostState]
    cell_uuids: set[str]
    taken_at: float = field(default_factory=time.monotonic)


class HostStateCache:
    """The host manager the caching scheduler's requests see: HostStates from the last
    refresh. Everything else (cells, aggregates, the prefilters' look-ups) is the wrapped
    host manager's."""

    def __init__(self, host_manager: Any, interval: float | None = None):
        """``interval``: seconds between the periodic refreshes ``start`` runs (None: none,
        the first request reads the hosts)."""
        self.inner = host_manager
        self.interval = None if interval is None else float(interval)
        self._snapshot: _Snapshot | None = None
        self._refresh_lock = threading.Lock()
        self._stopping = threading.Event()
        self.thread: threading.Thread | None = None

    # -- the periodic task -------------------------------------------------------------------
    def warn_about(self, down_time: float) -> None:
        """Warn when the interval makes ComputeFilter take live hosts for down."""
        if self.interval is None:
            LOG.warning(
                "[scheduler] periodic_task_interval is negative: the caching scheduler reads "
                "the hosts once, at the first request, and again only on SIGHUP"
            )
        elif self.interval + _REPORT_INTERVAL > down_time:
            LOG.warning(
                "[scheduler] periodic_task_interval (%s s) plus a compute report interval "
                "exceeds [DEFAULT] service_down_time (%s s): ComputeFilter judges services by "
                "heartbeats that old and may take live hosts for down. Use an interval well "
                "below service_down_time.",
                self.interval,
                down_time,
            )

    def start(self) -> None:
        """Refresh every ``interval`` seconds on a thread of its own (nothing without one)."""
        if self.interval is None or self.thread is not None:
            return
        self.thread = threading.Thread(
            target=self._run_periodic, name="caching-scheduler-refresh", daemon=True
        )
        self.thread.start()

    def _run_periodic(self) -> None:
        while not self._stopping.is_set():
            try:
                count = self.refresh()
                LOG.debug("Caching scheduler refreshed %d host state(s)", count)
            except Exception:  # keep the last good cache and try again next period
                LOG.exception("Caching scheduler could not refresh its host states")
            if self._stopping.wait(self.interval):
                break

    def reset(self) -> None:
        """SIGHUP: reload cells and aggregates, then the host states, now."""
        self.inner.reset()
        self.refresh()

    def stop(self) -> None:
        self._stopping.set()
        thread = self.thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)
        self.inner.stop()

    @property
    def loaded(self) -> bool:
        return self._snapshot is not None

    @property
    def age(self) -> float | None:
        """Seconds since the last refresh, None before the first."""
        snap = self._snapshot
        return None if snap is None else time.monotonic() - snap.taken_at

    def refresh(self) -> int:
        """Read every host of the enabled cells (and their instances) now; the number of
        HostStates cached."""
        with self._refresh_lock:
            return len(self._refresh_locked().hosts)

    def _refresh_locked(self) -> _Snapshot:
        started = time.perf_counter()
        hosts = list(self.inner.get_host_states_by_uuids(None, _refresh_spec()))
        cell_uuids = set(self.inner.enabled_cells)
        snap = _Snapshot(
            hosts=hosts,
            by_uuid={h.uuid: h for h in hosts if h.uuid},
            cell_uuids={c for c in cell_uuids if c},
        )
        self._snapshot = snap
        LOG.debug(
            "Cached %d host state(s) of %d cell(s) in %.1f ms",
            len(hosts),
            len(snap.cell_uuids),
            (time.perf_counter() - started) * 1000,
        )
        return snap

    def _current(self) -> _Snapshot:
        snap = self._snapshot
        if snap is None:
            # the first request before the first refresh: wait for it (or do it)
            with self._refresh_lock:
                snap = self._snapshot
                if snap is None:
                    snap = self._refresh_locked()
        return snap

    # -- what requests call -----------------------------------------------------------------
    def get_host_states_by_uuids(
        self,
        compute_uuids: Iterable[str] | None,
        spec: RequestSpec | None = None,
        *,
        request_id: str | None = None,
    ) -> list[HostState]:
        """Cached HostStates for these compute-node uuids (None: all), in the cells the
        request may use. No cell database is read, except for a requested cell that is not
        cached."""
        snap = self._current()
        hosts = snap.hosts
        dest = spec.requested_destination if spec is not None else None
        if dest is not None and dest.cell_uuid and not dest.allow_cross_cell_move:
            if dest.cell_uuid not in snap.cell_uuids:
                return self.inner.get_host_states_by_uuids(
                    compute_uuids, spec, request_id=request_id
                )
            hosts = [h for h in hosts if h.cell_uuid == dest.cell_uuid]
        if compute_uuids is None:
            return list(hosts)
        wanted = set(compute_uuids)
        if len(wanted) * 4 < len(hosts):
            # a few candidates out of a big fleet: look them up, keep the cached order
            found = {id(h) for h in (snap.by_uuid.get(u) for u in wanted) if h is not None}
            return [h for h in hosts if id(h) in found]
        return [h for h in hosts if h.uuid in wanted]

    def prefetch(
        self, spec: RequestSpec | None = None, *, aggregates: bool = True, cells: bool = True
    ) -> None:
        """Nothing to start: requests of this driver read no cell (``refresh`` does)."""

    def compute_nodes_by_host_or_node(
        self, host: str | None, node: str | None, spec: RequestSpec | None = None
    ) -> list[HostState]:
        """Cached compute nodes for a forced or requested destination."""
        return [
            h
            for h in self.get_host_states_by_uuids(None, spec)
            if (host is None or h.host == host) and (node is None or h.nodename == node)
        ]

    # -- the rest is the wrapped host manager's -----------------------------------------------
    # (the cached HostStates are its objects: what a request consumes on them, it tracks, and
    # a rollback releases on them)
    def host_states_for(self, host: str, node: str | None = None) -> list[HostState]:
        return self.inner.host_states_for(host, node)

    @property
    def instance_tracker(self) -> Any:
        return self.inner.instance_tracker

    @property
    def instance_details(self) -> bool:
        return self.inner.instance_details

    @instance_details.setter
    def instance_details(self, value: bool) -> None:
        self.inner.instance_details = value

    def aggregates_by_metadata(
        self, key: str | None = None, value: str | None = None, key_prefix: str | None = None
    ) -> list[Aggregate]:
        return self.inner.aggregates_by_metadata(key, value, key_prefix)

    def sync_aggregates(self, not_before: float | None = None) -> None:
        self.inner.sync_aggregates(not_before)

    def update_aggregates(self, aggregates: list[Aggregate]) -> None:
        self.inner.update_aggregates(aggregates)

    def delete_aggregate(self, aggregate: Aggregate) -> None:
        self.inner.delete_aggregate(aggregate)

    def minimum_compute_version(self) -> int | None:
        return self.inner.minimum_compute_version()

    def track_consumption(self, hs: HostState, key: str) -> None:
        self.inner.track_consumption(hs, key)

    def release_consumer(self, consumer: str, compute_uuid: str) -> None:
        self.inner.release_consumer(consumer, compute_uuid)

    def counted_claims(self) -> dict[str, set[str]]:
        return self.inner.counted_claims()

    def release_deleted_instance(self, host: str, instance_uuid: str) -> int:
        return self.inner.release_deleted_instance(host, instance_uuid)

    def release_moved_instances(self, host: str, instance_uuids: Iterable[str]) -> int:
        return self.inner.release_moved_instances(host, instance_uuids)

    def release_unlisted_instances(self, host: str, instance_uuids: Iterable[str]) -> int:
        return self.inner.release_unlisted_instances(host, instance_uuids)

    def warm_up(self) -> int:
        return self.inner.warm_up()

    def start_refresher(self) -> None:
        self.inner.start_refresher()

    def status(self) -> list[dict[str, Any]]:
        return self.inner.status()


def CachingScheduler(  # noqa: N802 - the driver's name, as nova's class was named
    *,
    placement: Any = None,
    host_manager: Any = None,
    conf: Any = CONF,
    interval: float | None | object = _FROM_CONF,
    start_periodic: bool = True,
    observers: Observers = NO_OBSERVERS,
) -> FilterScheduler:
    """The caching scheduler (entry point ``caching_scheduler``): the filter scheduler whose
    host source is a ``HostStateCache``, refreshed by a periodic task instead of on every
    request; still claims in Placement. ``interval`` overrides ``[scheduler]
    periodic_task_interval`` (None: no periodic refresh); ``start_periodic=False`` leaves
    refreshing to the caller (tests)."""
    if host_manager is None:
        from scheduler.hosts.manager import HostManager

        host_manager = HostManager(conf)
    if interval is _FROM_CONF:
        interval = periodic_task_interval(conf)
    cache = HostStateCache(host_manager, interval=interval)  # type: ignore[arg-type]
    driver = FilterScheduler(
        placement=placement, host_manager=cache, conf=conf, observers=observers
    )
    cache.warn_about(conf.service_down_time)
    if start_periodic:
        cache.start()
    LOG.info(
        "Caching scheduler ready: host states refreshed %s",
        f"every {cache.interval:g} s" if cache.interval is not None else "on demand",
    )
    return driver


CachingScheduler.takes_observers = True  # type: ignore[attr-defined]
