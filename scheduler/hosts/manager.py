"""HostManager: the in-memory view of the compute nodes of every enabled cell.

The host source of the filter scheduler (``scheduler.drivers.host_source.HostSource``): it
hands out HostStates per request, with their aggregates, and counts on them what this
scheduler placed. It reads the cell mappings from nova's API database and composes the
parts that do the rest, each in its own module of this package:

- ``cell_reads.py``: ``CellReads``, the cells and what is held of each (a ``CellView`` of
  HostStates), kept current by reading the cell databases per request, at start-up
  (``warm_up``) and on the refresher thread, with a per-cell timeout;
- ``aggregate_cache.py``: ``AggregateCache``, nova's host aggregates, read from the API
  database, checked per request with ``read_your_writes``, changed by nova-api's casts;
- ``consumption.py``: ``ConsumptionLedger``, where each consumption of ours is counted, for
  nova's casts, Placement's view and the sweep of expired ones.

The manager owns what they share: the host table the HostStates are kept in (for the batch
filters and weighers), the thread pool the reads run on, and the refresher thread
(``refresher.py``, handed ``background_round``). Elsewhere in this package: ``cells.py`` holds
``Cell``, a cell's health and the machinery of one read; ``instances.py`` the per-host
instance lists nova-compute's casts keep current; ``gc_policy.py`` the process's cyclic-GC
policy the refresher installs.
"""

from __future__ import annotations

import concurrent.futures
import logging
import operator
import threading
import time
from collections.abc import Iterable, KeysView, Mapping
from typing import Any

import db
from scheduler.conf import CONF, database_connection
from scheduler.hosts.aggregate_cache import AggregateCache
from scheduler.hosts.cell_reads import WATERMARK_SLACK, CellReads
from scheduler.hosts.cells import Cell, CellReadFailed, CellView
from scheduler.hosts.consumption import ConsumptionLedger
from scheduler.hosts.gc_policy import install_gc_policy
from scheduler.hosts.instances import InstanceTracker
from scheduler.hosts.refresher import Refresher
from scheduler.hosts.state import HostState
from scheduler.hosts.table import HostTable
from scheduler.objects import Aggregate, RequestSpec
from scheduler.request import SchedulingRequest

# used elsewhere under this module's name
__all__ = ["Cell", "CellReadFailed", "HostManager", "WATERMARK_SLACK", "install_gc_policy"]

LOG = logging.getLogger(__name__)
_HOST_OF = operator.attrgetter("host")

CELL0_UUID = "00000000-0000-0000-0000-000000000000"


class HostManager:
    """Reads cells, aggregates and compute nodes; hands out HostStates per request."""

    def __init__(self, conf=CONF, api_engine=None):
        self.conf = conf
        if api_engine is None:
            url = conf.api_database.connection
            if not url:
                from scheduler.exceptions import ConfigurationError

                raise ConfigurationError(
                    "[api_database] connection is not set: novasched reads cell mappings and "
                    "aggregates from nova's API database"
                )
            api_engine = db.get_engine(url)
        self.api_engine = api_engine
        # the HostStates of every cell as columns, for the batch filters and weighers
        self.table = HostTable()
        # the cells' reads and the aggregates' checks that are not run by a request's thread
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=conf.cell_worker_thread_pool_size, thread_name_prefix="cell-read"
        )
        # the refresher thread (start_refresher, stop)
        self._refresher = Refresher(lambda: self.window_read_interval, self.background_round)
        refreshing = self._refresher.running
        self._cell_reads = CellReads(conf, self.table, self._executor, refreshing)
        self._aggregate_cache = AggregateCache(
            conf, api_engine, self._executor, refreshing, self._cell_reads.attach_aggregates
        )
        self._consumption = ConsumptionLedger(
            conf, self._cell_reads.views, self._cell_reads.host_states_for
        )
        # per-host instance lists kept current by nova-compute's casts (nova's _instance_info)
        self.instance_tracker = InstanceTracker(conf, loader=self._read_host_instances)
        # Set by the driver when a plugin needs more than the uuids of the instances on every
        # host (TypeAffinityFilter: their flavor; ImagePropertiesWeigher: their image
        # properties): instances are then read, with those details, for every request.
        self.instance_details = False
        self.refresh_cells_caches()
        self.refresh_aggregates()

    def reset(self) -> None:
        """SIGHUP: reload the cell mappings and the aggregates now."""
        self.refresh_cells_caches()
        self.refresh_aggregates()

    # -- cells ------------------------------------------------------------------------------
    def refresh_cells_caches(self) -> None:
        """(Re)load cell mappings: cell0 is left out, disabled cells are not scheduled to."""
        cells: dict[str, Cell] = {}
        for row in db.get_cell_mappings(
            self.api_engine, database_connection(self.conf), skip_unusable=True
        ):
            if row["uuid"] == CELL0_UUID:
                continue
            cells[row["uuid"]] = Cell(
                uuid=row["uuid"],
                name=row.get("name") or row["uuid"],
                database_connection=row["database_connection"],
                disabled=bool(row.get("disabled")),
            )
        self._cell_reads.adopt(cells)
        enabled = self._cell_reads.enabled_cells
        LOG.info(
            "Found %d cell(s), %d enabled: %s",
            len(cells),
            len(enabled),
            ", ".join(c.name for c in enabled.values()) or "-",
        )

    @property
    def cells(self) -> dict[str, Cell]:
        """Every cell mapping but cell0, by uuid."""
        return self._cell_reads.cells

    @property
    def enabled_cells(self) -> dict[str, Cell]:
        """The cells scheduled to, by uuid."""
        return self._cell_reads.enabled_cells

    @property
    def window_read_interval(self) -> float:
        """Seconds between window reads of a cell on the request path (0: every request),
        and between two rounds of the refresher."""
        return self._cell_reads.window_read_interval

    @window_read_interval.setter
    def window_read_interval(self, seconds: float) -> None:
        self._cell_reads.window_read_interval = seconds

    @property
    def cell_failure_log_interval(self) -> float:
        """Seconds between two reminders that a cell is still failing (``CellHealth``)."""
        return self._cell_reads.cell_failure_log_interval

    @cell_failure_log_interval.setter
    def cell_failure_log_interval(self, seconds: float) -> None:
        self._cell_reads.cell_failure_log_interval = seconds

    def _cells_for(self, spec: RequestSpec | None) -> list[Cell]:
        reads = self._cell_reads
        dest = spec.requested_destination if spec is not None else None
        if dest is not None and dest.cell_uuid and not dest.allow_cross_cell_move:
            # as nova: the requested cell is used even if it is disabled
            cell = reads.cells.get(dest.cell_uuid)
            return [cell] if cell else []
        return list(reads.enabled_cells.values())

    # -- aggregates (AggregateCache) --------------------------------------------------------
    def refresh_aggregates(self) -> None:
        """Re-read every aggregate from the API database and attach them to the HostStates."""
        self._aggregate_cache.refresh()

    def sync_aggregates(self, not_before: float | None = None) -> None:
        """Include every aggregate change committed before ``not_before`` (monotonic; default
        now), a request's arrival (``AggregateCache.catch_up``)."""
        self._aggregate_cache.catch_up(not_before)

    @property
    def aggregates(self) -> list[Aggregate]:
        return self._aggregate_cache.aggregates

    def aggregates_for_host(self, host: str) -> list[Aggregate]:
        return self._aggregate_cache.for_host(host)

    def aggregates_by_metadata(
        self, key: str | None = None, value: str | None = None, key_prefix: str | None = None
    ) -> list[Aggregate]:
        return self._aggregate_cache.by_metadata(key, value, key_prefix)

    def update_aggregates(self, aggregates: list[Aggregate]) -> None:
        """Apply aggregates sent by nova-api (update_aggregates RPC)."""
        self._aggregate_cache.update(aggregates)

    def delete_aggregate(self, aggregate: Aggregate) -> None:
        """Forget an aggregate deleted in nova-api (delete_aggregate RPC)."""
        self._aggregate_cache.delete(aggregate)

    # -- start-up and the refresher ----------------------------------------------------------
    def warm_up(self) -> int:
        """Read every enabled cell whole (before the service takes requests: at 100k hosts
        the first read takes seconds). A cell that fails is skipped with a warning; requests
        read it later. Returns the number of hosts loaded."""
        return self._cell_reads.warm_up()

    def status(self) -> list[dict[str, Any]]:
        """Per enabled cell: its name and uuid, the hosts in the cache (with a service
        record), when the last good read ended (``time.time()``, None if never), and whether
        it is failing now. For health checks and metrics; takes no lock."""
        return self._cell_reads.status()

    def background_round(self, stopping: threading.Event) -> None:
        """One round of the refresher thread: each enabled cell's change window (the
        whole cell every five minutes), then, with ``read_your_writes``, the aggregates with
        the count of their hosts that requests' checks leave out, and the sweep of expired
        consumption when it is due. ``stopping`` ends the round between two cells."""
        if not self._cell_reads.read_in_background(stopping):
            return
        if self.conf.scheduler.read_your_writes:
            try:  # what the requests' checks leave out: a host out of an aggregate
                self._aggregate_cache.check(count_hosts=True)
            except Exception as exc:  # the next round tries again
                LOG.debug("Could not check the aggregates: %s", exc)
        if self._consumption.sweep_due():
            try:
                self._consumption.expire()
            except Exception:  # the next round tries again
                LOG.exception("Could not release expired consumption")

    def start_refresher(self) -> None:
        """Start the refresher thread (``Refresher.start``): every enabled cell's change
        window read every ``service_refresh_interval`` seconds, so that requests do not."""
        self._refresher.start()

    # -- host states ------------------------------------------------------------------------
    def get_host_states_by_uuids(
        self,
        compute_uuids: Iterable[str] | None,
        spec: RequestSpec | None = None,
        *,
        request_id: str | None = None,
    ) -> list[HostState]:
        """HostStates for these compute-node uuids (None: every compute node) in the cells
        the request may use. Hosts whose compute node has no service record are skipped.
        ``compute_uuids`` given as a dict, its keys or a set is taken as free of duplicates
        (Placement's provider summaries); another iterable is de-duplicated first."""
        self._aggregate_cache.refresh_if_stale()
        cells = self._cells_for(spec)
        # every host: a rebuild, the caching scheduler's refresh, explain --all-hosts; they
        # want the cell as it is now, not as of the last window read
        arrived = spec.arrived_at if isinstance(spec, SchedulingRequest) else None
        reads = self._cell_reads.scatter_gather(
            cells, request_id, window=compute_uuids is None, not_before=arrived
        )
        wanted: Iterable[str] | None = compute_uuids
        if wanted is not None and not isinstance(wanted, dict | KeysView | set | frozenset):
            wanted = dict.fromkeys(wanted)
        out: list[HostState] = []
        for read in reads:
            if wanted is None:
                items: list[HostState] = list(read.hosts.values())
                found = list(read.servable.values())
            else:
                # (a HostState is always true: filter(None) drops only the misses)
                found = list(filter(None, map(read.servable.get, wanted)))
                items = found
                if len(read.servable) != len(read.hosts):
                    items = list(filter(None, map(read.hosts.get, wanted)))
            if len(found) != len(items):
                for hs in items:
                    if not hs.service:
                        LOG.warning(
                            "No compute service record found for host %(host)s in cell "
                            "%(cell)s; skipping it",
                            {"host": hs.host, "cell": read.view.cell.name},
                        )
            out.extend(found)
        if self.instance_details or (spec is not None and _needs_instances(spec)):
            self._load_instances([r.view for r in reads], out)
        return out

    def prefetch(
        self, spec: RequestSpec | None = None, *, aggregates: bool = True, cells: bool = True
    ) -> None:
        """Start the request's check of the aggregates and its reads of its cells now,
        without waiting for them: they run (in the databases) while the request does other
        work, and ``sync_aggregates`` and ``get_host_states_by_uuids`` join them
        (``FreshReads``: they started after the request arrived). A second call joins
        what the first started; ``aggregates`` / ``cells`` False leave those out (a caller
        that wants the database to answer something else first)."""
        arrived = spec.arrived_at if isinstance(spec, SchedulingRequest) else None
        now = time.monotonic() if arrived is None else arrived
        if aggregates:
            # the aggregates' check first (sync_aggregates joins it)
            self._aggregate_cache.prefetch(now)
        if cells:
            for cell in self._cells_for(spec):
                self._cell_reads.cell_read(cell, False, now)

    def _load_instances(self, views: list[CellView], hosts: list[HostState]) -> None:
        """Fill host.instances for the hosts of this request (needed by affinity filters,
        same/different host hints): one query per cell."""
        by_cell: dict[str, list[HostState]] = {}
        details = self.instance_details
        if details:
            # the casts carry uuids only: with details asked for, read the database
            tracked: list[Any] = [None] * len(hosts)
        else:
            # one lookup pass for every host (a server-group request has them all)
            tracked = self.instance_tracker.trusted_instances(list(map(_HOST_OF, hosts)))
        for hs, known in zip(hosts, tracked, strict=True):
            if known is not None:  # kept current by the compute's casts
                hs.instances = known
            else:
                by_cell.setdefault(hs.cell_uuid, []).append(hs)
        for view in views:
            cell_hosts = by_cell.get(view.cell.uuid)
            if not cell_hosts:
                continue
            try:
                engine = db.get_engine(view.cell.database_connection)
                names = sorted({hs.host for hs in cell_hosts})
                if details:
                    by_host = db.get_instance_details_by_host(engine, names)
                else:
                    uuids_by_host = db.get_instance_uuids_by_host(engine, names)
            except Exception as exc:
                LOG.warning("Could not read instances of cell %s: %s", view.cell.name, exc)
                continue
            for hs in cell_hosts:
                if details:
                    hs.instances = dict(by_host.get(hs.host, {}))
                else:
                    hs.instances = {u: None for u in uuids_by_host.get(hs.host, ())}

    def _read_host_instances(self, host: str) -> list[str] | None:
        """The instance uuids of one host from its cell database (the instance tracker's
        re-read); None while no cell read so far has shown the host."""
        for view in list(self._cell_reads.views.values()):
            if host in view.services:
                engine = db.get_engine(view.cell.database_connection)
                return sorted(db.get_instance_uuids_by_host(engine, [host]).get(host, ()))
        return None

    def minimum_compute_version(self) -> int | None:
        """The lowest nova-compute service version across the enabled cells (None when no
        service is known), from the cached service rows (owner_nova_filter asks it)."""
        return self._cell_reads.minimum_compute_version()

    def host_states_for(self, host: str, node: str | None = None) -> list[HostState]:
        """Cached HostStates of one host (and node), across cells, by an index of host
        names rebuilt only after a read added or removed hosts."""
        return self._cell_reads.host_states_for(host, node)

    def compute_nodes_by_host_or_node(
        self, host: str | None, node: str | None, spec: RequestSpec | None = None
    ) -> list[HostState]:
        """Compute nodes for a forced or requested destination (refreshing the cells)."""
        out = []
        for read in self._cell_reads.scatter_gather(self._cells_for(spec), window=True):
            for hs in read.hosts.values():
                if host is not None and hs.host != host:
                    continue
                if node is not None and hs.nodename != node:
                    continue
                out.append(hs)
        return out

    # -- what this scheduler consumed (ConsumptionLedger) ------------------------------------
    def track_consumption(self, hs: HostState, key: str) -> None:
        """Remember where the consumption ``key`` (an instance uuid) is counted, so that
        nova's casts, Placement's view and the sweep find it; sweep if one is due."""
        self._consumption.track(hs, key)

    def release_deleted_instance(self, host: str, instance_uuid: str) -> int:
        """nova-compute says ``instance_uuid`` left ``host`` (``delete_instance_info``):
        stop counting it there. Returns how many consumptions were released."""
        return self._consumption.release_deleted_instance(host, instance_uuid)

    def release_moved_instances(self, host: str, instance_uuids: Iterable[str]) -> int:
        """nova-compute says these instances are on ``host`` (``update_instance_info``):
        stop counting them on every other host."""
        return self._consumption.release_moved_instances(host, instance_uuids)

    def release_unlisted_instances(self, host: str, instance_uuids: Iterable[str]) -> int:
        """nova-compute listed the instances of ``host`` (``sync_instance_info``): stop
        counting there the older ones it does not list."""
        return self._consumption.release_unlisted_instances(host, instance_uuids)

    def release_consumer(self, consumer: str, compute_uuid: str) -> None:
        """Placement no longer holds ``consumer``'s allocation on the provider
        ``compute_uuid`` (the provider view's ``on_consumer_gone``)."""
        self._consumption.release_consumer(consumer, compute_uuid)

    def counted_claims(self) -> dict[str, set[str]]:
        """``{instance uuid: compute-node uuids}`` of the claims Placement must still hold
        for our counts to be right (the provider view's ``counted_claims``)."""
        return self._consumption.counted_claims()

    def expire_consumption(self) -> int:
        """The sweep: release the consumptions older than ``[scheduler]
        consumption_max_age``. Returns how many expired."""
        return self._consumption.expire()

    @property
    def _consumed(self) -> Mapping[str, tuple[tuple[str | None, str], ...]]:
        """Where each consumption is counted, by key (``ConsumptionLedger.consumed``)."""
        return self._consumption.consumed

    def stop(self) -> None:
        self._refresher.stop()
        self._executor.shutdown(wait=False, cancel_futures=True)


def _needs_instances(spec: RequestSpec) -> bool:
    if spec.instance_group is not None:
        return True
    hints = spec.scheduler_hints or {}
    return "same_host" in hints or "different_host" in hints
