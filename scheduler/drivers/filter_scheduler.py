"""The filter scheduler: nova's loop of filter → weigh → pick → claim → consume, per instance.

Input is a decoded RequestSpec; output is, per instance, the chosen Selection followed by its
alternates (same cell, each with its own allocation request). Every NoValidHost says why:
which Placement query returned nothing, or how many hosts each filter removed and for what.

The steps are public, so that explain runs exactly what ``select_destinations`` runs:
``new_request`` (the request's own state, ``scheduler.request.SchedulingRequest``),
``placement_hosts`` or ``all_hosts`` (the hosts to start from), and ``cycle``, the one
per-instance cycle (``select_hosts``: narrow → filter → weigh; a placer takes a host: a
claim, the best host, or explain's pick that claims nothing; then ``consume``). The pick
among the best hosts and the rollback are the driver's alone. Two collaborators do the
rest: its ``CandidateSource`` (``scheduler/drivers/candidates.py``: the provider view or
Placement, and whether a NoValidHost is asked of Placement again) and its ``Claimer``
(``scheduler/drivers/claims.py``: the claims).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable
from typing import Any

from filters.handler import FilterHandler, load_filters
from placement_client import query
from placement_client.api import AllocationCandidates, Placement
from scheduler.conf import CONF
from scheduler.drivers import decisions, outcome, relaxations
from scheduler.drivers import request_filters as prefilters
from scheduler.drivers.base import CASTS
from scheduler.drivers.candidates import CandidateSource
from scheduler.drivers.claims import Claimer
from scheduler.drivers.held_claims import HeldClaims
from scheduler.drivers.host_source import HostSource
from scheduler.exceptions import (
    ConfigurationError,
    NoValidHost,
    PluginNotFound,
    RequestFilterFailed,
)
from scheduler.framework import Cycle, Framework, InstanceStep, Placed, Placer
from scheduler.framework.pickers import NovaPick, Picker
from scheduler.hosts.state import HostState
from scheduler.objects import Flavor, RequestSpec, Selection
from scheduler.records.completions import Completions
from scheduler.request import SchedulingRequest
from scheduler.telemetry import metrics
from weighers.handler import WeightHandler, load_weighers

LOG = logging.getLogger(__name__)
# the clock of request deadlines (a module-level name so that tests can move it)
_clock = time.monotonic


class FilterScheduler:
    """The default scheduler driver (entry point ``filter_scheduler``)."""

    # Called after every select_destinations with the seconds spent per step ("placement",
    # "host_states", "filter", "weigh", "claim", "total"); the benchmark sets it.
    timing_observer: Callable[[dict[str, float]], None] | None = None
    # Takes each call's decision record (scheduler.records.DecisionRecorder, set by the
    # service from [decision_records]); None: nothing is recorded.
    recorder: Any = None
    # Turns the request as it arrived into the JSON form the record keeps for a replay
    # (the service sets nova's wire form, ``scheduler.rpc.wire.request_spec_to_primitive``);
    # None: the record keeps the request's summary only.
    spec_encoder: Callable[[RequestSpec], dict[str, Any]] | None = None
    # nova's cache-update casts, all applied to the host source (scheduler/drivers/base.py)
    applies_casts = frozenset(CASTS)

    def __init__(
        self,
        *,
        placement: Placement | None = None,
        host_manager=None,
        view=None,
        conf=CONF,
        filters: list[Any] | None = None,
        weighers: list[Any] | None = None,
        picker: Picker | None = None,
    ):
        """``filters``/``weighers``: these instead of ``[filter_scheduler]
        enabled_filters``/``weight_classes``; ``picker``: how the filtered hosts are
        ordered and which goes first (default: nova's, ``pickers.NovaPick``)."""
        self.conf = conf
        fs = conf.filter_scheduler
        try:
            if filters is None:
                filters = load_filters(list(fs.enabled_filters))
            if weighers is None:
                weighers = load_weighers(list(fs.weight_classes))
            # the one path that filters and weighs (explain, capacity and the smallest
            # change included)
            self.framework = Framework(
                FilterHandler(filters),
                WeightHandler(weighers),
                picker if picker is not None else NovaPick(conf),
                conf,
            )
        except PluginNotFound:
            raise
        except Exception as exc:
            raise ConfigurationError(f"Could not load filters/weighers: {exc}") from exc
        if placement is None:
            from placement_client.from_conf import client_from_conf

            placement = client_from_conf(conf)
            placement.on_claim_retry = _count_claim_retry
        if host_manager is None:
            from scheduler.hosts.manager import HostManager

            host_manager = HostManager(conf)
        self.placement = placement
        self.host_manager: HostSource = host_manager
        # the provider view: a ViewRefresher from [placement] view_feed, unless one is given
        # (False: none)
        if view is None:
            from placement_client.from_conf import view_from_conf

            view = view_from_conf(conf, placement)
        self.view_refresher = view or None
        self.view = self.view_refresher.view if self.view_refresher else None
        # Placement no longer holding an instance's allocation on a compute node ends our
        # consumption of it there (a failed move's pre-check, a delete before the build)
        if self.view is not None:
            self.view.on_consumer_gone = host_manager.release_consumer
            self.view.counted_claims = host_manager.counted_claims
        self.claimer = Claimer(placement, self.view_refresher, conf, clock=lambda: _clock())
        # our consumption lasts while Placement holds the claim (answers from Placement)
        self.held_claims = HeldClaims(placement)
        # the decision records' search for the smallest change, off the request path
        self.completions = Completions()
        self.candidates = CandidateSource(
            placement, self.view_refresher, conf, clock=lambda: _clock()
        )
        # the claimer's, by their former names
        self.deferred_deletes = self.claimer.deferred_deletes
        self.claim_locks = self.claimer.locks
        prefilters.warn_unimplemented_toggles(conf)
        if self._needs_instance_details():
            host_manager.instance_details = True
        LOG.info(
            "Filter scheduler ready: filters %s; weighers %s",
            ", ".join(f.name for f in self.filter_handler.filters),
            ", ".join(w.name for w in self.weight_handler.weighers),
        )

    @property
    def filter_handler(self) -> FilterHandler:
        return self.framework.filter_handler

    @property
    def weight_handler(self) -> WeightHandler:
        return self.framework.weight_handler

    @property
    def picker(self) -> Picker:
        return self.framework.picker

    def _needs_instance_details(self) -> bool:
        """TypeAffinityFilter needs the flavor of the instances on each host, and a non-zero
        ImagePropertiesWeigher their image properties (nova reads both per host)."""
        filters = {f.name for f in self.filter_handler.filters}
        weighers = {w.name for w in self.weight_handler.weighers}
        return "TypeAffinityFilter" in filters or (
            "ImagePropertiesWeigher" in weighers
            and self.conf.filter_scheduler.image_props_weight_multiplier != 0
        )

    # -- driver interface (SchedulerDriver, scheduler/drivers/base.py) ------------------------
    def steps(self) -> FilterScheduler:
        """Its public steps are what explain, capacity and the smallest change run."""
        return self

    def explain_destinations(
        self, context: Any, spec: RequestSpec, all_hosts: bool = False
    ) -> None:
        """No explanation of its own: explain runs its steps."""
        return None

    def status(self) -> dict[str, str]:
        """Lines for the Guru Meditation Report: each cell's host cache, the provider view."""
        out: dict[str, str] = {}
        for cell in self.host_manager.status():
            last = cell["last_ok_at"]
            out[f"cell {cell['name']}"] = (
                f"{cell['hosts']} host(s), last read "
                + (f"{time.time() - last:.1f} s ago" if last else "never")
                + (", failing" if cell["failing"] else "")
            )
        if self.view_refresher is not None:
            view = self.view_refresher.status()
            out["provider view"] = (
                f"{view['source']} feed, {view['providers']} provider(s), "
                + (f"{view['age']:.1f} s old" if view["loaded"] else "not loaded")
                + f", {view['failures']} failed refresh(es)"
            )
        return out

    def reset(self) -> None:
        """SIGHUP: the host source reloads what it caches (cells, aggregates, ...)."""
        self.host_manager.reset()

    def prepare(self) -> None:
        """Before the service takes requests: load every cell, then keep the cells' service
        rows (heartbeats, enable/disable) current on a thread of their own."""
        self.host_manager.warm_up()
        self.host_manager.start_refresher()
        self.warm_up_plugins()
        if self.view_refresher is not None:
            self.view_refresher.start()

    def warm_up_plugins(self) -> None:
        """Run the filters and weighers once over every host for a plain request, claiming
        nothing, so that the columns they read are built before the first real request
        (about 30 ms at 10,000 hosts, otherwise paid by whoever asks first)."""
        started = time.perf_counter()
        try:
            spec = RequestSpec(flavor=Flavor(vcpus=1, memory_mb=1, root_gb=0, name="warm-up"))
            req = SchedulingRequest.of(spec, request_id="req-warm-up")
            hosts = self.host_manager.get_host_states_by_uuids(None, req, request_id=None)
            if hosts:
                self.select_hosts(req, hosts, 0)
        except Exception:  # a plugin that cannot weigh a made-up request: the first real one will
            LOG.debug("Warming the filters and weighers up failed", exc_info=True)
            return
        LOG.info(
            "Filters and weighers warmed up over %d host(s) in %.1f ms",
            len(hosts),
            (time.perf_counter() - started) * 1000,
        )

    def stop(self) -> None:
        self.completions.stop()
        self.claimer.stop()
        self.host_manager.stop()
        if self.view_refresher is not None:
            self.view_refresher.stop()

    def update_aggregates(self, aggregates: list[Any]) -> None:
        self.host_manager.update_aggregates(aggregates)

    def delete_aggregate(self, aggregate: Any) -> None:
        self.host_manager.delete_aggregate(aggregate)

    def update_instance_info(self, host_name: str, instance_uuids: list[str]) -> None:
        self.host_manager.instance_tracker.update_instance_info(host_name, instance_uuids)
        # the instances are on that host: no other host counts them any more
        self.host_manager.release_moved_instances(host_name, instance_uuids)

    def delete_instance_info(self, host_name: str, instance_uuid: str) -> None:
        self.host_manager.instance_tracker.delete_instance_info(host_name, instance_uuid)
        self.host_manager.release_deleted_instance(host_name, instance_uuid)
        if self.view is not None:
            # nova deletes an instance's allocations with DELETE /allocations, which leaves
            # the provider's generation as it was: read the host's providers again
            hosts = self.host_manager.host_states_for(host_name)
            self.view.mark_dirty(hs.uuid for hs in hosts if hs.uuid)

    def sync_instance_info(self, host_name: str, instance_uuids: list[str]) -> None:
        self.host_manager.instance_tracker.sync_instance_info(host_name, instance_uuids)
        self.host_manager.release_unlisted_instances(host_name, instance_uuids)

    def select_destinations(
        self,
        context: Any,
        spec_obj: RequestSpec,
        instance_uuids: list[str] | None,
        return_alternates: bool = False,
        on_candidates: Callable[[RequestSpec], None] | None = None,
    ) -> list[list[Selection]]:
        """``on_candidates`` is called with the request once its candidate hosts are known
        and before they are filtered (where nova sends ``select_destinations.start``); it
        is not called when the prefilters or Placement end the request."""
        req = self.new_request(context, spec_obj)
        start = time.perf_counter()
        result: list[list[Selection]] | None = None
        error: BaseException | None = None
        try:
            try:
                result = self._select(req, instance_uuids, return_alternates, on_candidates)
            except NoValidHost as exc:
                if not self.candidates.ask_placement_again(req, exc):
                    raise
                # the view may have been wrong (a DELETE it has not seen yet, a claim it
                # counts that was deleted): Placement has the last word on a NoValidHost
                req = self.new_request(context, spec_obj, retry_of=req)
                result = self._select(req, instance_uuids, return_alternates, on_candidates)
            return result
        except BaseException as exc:
            error = exc
            raise
        finally:
            if self.recorder is not None:
                self._record(context, spec_obj, req, instance_uuids, result, error)
            total = time.perf_counter() - start
            timings = req.trace.all_timings()
            if LOG.isEnabledFor(logging.DEBUG):
                LOG.debug(
                    "select_destinations took %.1f ms (%s)",
                    total * 1000,
                    ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in timings.items()),
                )
            observer = self.timing_observer
            if observer is not None:
                observer(dict(timings, total=total))
            if metrics.M.enabled:
                outcome.count_request(req.trace)

    def _record(
        self,
        context: Any,
        spec: RequestSpec,
        req: SchedulingRequest,
        instance_uuids: list[str] | None,
        result: list[list[Selection]] | None,
        error: BaseException | None,
    ) -> None:
        """Hand the call's decision record to the recorder (which never waits); a record
        that cannot be made is logged, never the request's failure. When the filters left
        no host, the smallest change that would fit is searched for first, after the reply
        (``relaxations``, finished by ``scheduler/records/completions.py``)."""
        try:
            encoder = self.spec_encoder
            rec = decisions.decision_record(
                req,
                instance_uuids,
                result,
                error,
                spec=encoder(spec) if encoder else None,
                weighers=self.framework.weighers,
            )
            recorder = self.recorder
            if isinstance(error, NoValidHost) and error.cause == "filters":
                self.completions.submit(
                    rec,
                    "smallest_change",
                    lambda: self.relaxations(context, spec).as_dict(),
                    recorder.record,
                )
            else:
                recorder.record(rec)
        except Exception:
            LOG.exception("Could not record the decision of request %s", req.request_id)

    def relaxations(
        self, context: Any, spec: RequestSpec, *, all_hosts: bool = False
    ) -> relaxations.Search:
        """The single changes of ``spec`` (a filter, a hint, the AZ, an extra spec) that
        would let its first instance fit, with the hosts it would then get (nothing is
        claimed; bounded in time: ``scheduler/drivers/relaxations.py``). ``all_hosts``: on
        every host of the cells, Placement not asked."""
        return relaxations.search(self, context, spec, all_hosts=all_hosts)

    def _select(
        self,
        req: SchedulingRequest,
        instance_uuids: list[str] | None,
        return_alternates: bool,
        on_candidates: Callable[[RequestSpec], None] | None = None,
    ) -> list[list[Selection]]:
        if req.is_rebuild:
            # nova: no prefilters, no Placement, every host of the cells, no claim
            hosts = self.all_hosts(req)
            if on_candidates is not None:
                on_candidates(req)
            return self._legacy_find_hosts(req, hosts, instance_uuids, return_alternates)
        hosts = self.placement_hosts(req)
        if on_candidates is not None:
            on_candidates(req)
        if instance_uuids is None:
            return self._legacy_find_hosts(req, hosts, None, return_alternates)
        return self._schedule(req, hosts, instance_uuids, return_alternates)

    # -- the steps (public: explain runs them too) -------------------------------------------
    def new_request(
        self, context: Any, spec: RequestSpec, *, retry_of: SchedulingRequest | None = None
    ) -> SchedulingRequest:
        """The request's own state for ``spec``; the spec itself is never changed. Its
        deadline starts now: the smaller of ``[DEFAULT] long_rpc_timeout`` (the caller's
        wait) and ``[scheduler] request_deadline`` (0: none). ``retry_of``: the attempt
        whose NoValidHost Placement is asked about again (its deadline holds)."""
        req = SchedulingRequest.of(
            spec,
            request_id=getattr(context, "request_id", None),
            project_id=getattr(context, "project_id", None),
            user_id=getattr(context, "user_id", None),
            arrived_at=_clock(),
            deadline_seconds=self._deadline_seconds(),
            retry_of=retry_of,
        )
        if self.recorder is not None:
            req.trace.weighed = {}
        return req

    def _deadline_seconds(self) -> float:
        limit = math.inf
        caller = getattr(self.conf, "long_rpc_timeout", None)
        if caller:
            limit = float(caller)
        own = self.conf.scheduler.request_deadline
        if own:
            limit = min(limit, float(own))
        return limit

    def all_hosts(self, req: SchedulingRequest) -> list[HostState]:
        """Every host of the request's cells, without asking Placement (rebuild checks)."""
        with req.trace.timed("host_states"):
            self.host_manager.sync_aggregates(req.arrived_at)
            return self.host_manager.get_host_states_by_uuids(None, req, request_id=req.request_id)

    def placement_hosts(self, req: SchedulingRequest) -> list[HostState]:
        """The prefilters, the Placement query and the HostStates of its candidates; the
        allocation requests by provider go to ``req.scratch.allocation_candidates``. Raises
        NoValidHost (a prefilter refused, Placement failed or found nothing)."""
        return self.placement_candidates(req)[1]

    def placement_candidates(
        self, req: SchedulingRequest, *, unlimited: bool = False
    ) -> tuple[AllocationCandidates, list[HostState]]:
        """``placement_hosts``, with the candidates' answer itself (its provider summaries
        hold each provider's capacity and use). ``unlimited``: every candidate, not
        ``[scheduler] max_placement_results`` of them (capacity counting)."""
        self._run_prefilters(req)
        return self._hosts_from_placement(req, unlimited=unlimited)

    def select_hosts(
        self,
        req: SchedulingRequest,
        hosts: list[HostState],
        index: int,
        *,
        explain: bool = False,
    ) -> InstanceStep:
        """Instance ``index``'s step through the framework: narrow (destination,
        ignore/force hosts), filter, weigh. ``explain`` keeps each weigher's share of every
        weight."""
        return self.framework.step(req, hosts, index, explain=explain)

    def consume(
        self,
        req: SchedulingRequest,
        host: HostState,
        instance_uuid: str | None,
        claimed: bool = False,
    ) -> str:
        """Count the instance on the host, and on the request's server group. Returns the
        key the host counts it under (the instance uuid, else one of the host's own).
        ``claimed``: its claim was made in Placement (counted only while Placement holds it)."""
        max_age = getattr(self.conf.scheduler, "consumption_max_age", None) or None
        key = host.consume_from_request(req, instance_uuid, max_age=max_age, claimed=claimed)
        self.host_manager.track_consumption(host, key)
        group = req.instance_group
        if group is not None:
            group.hosts.append(host.host)
            if instance_uuid:
                # copy-on-write: the instance tracker's snapshots are shared and read-only
                host.instances = {**(host.instances or {}), instance_uuid: None}
        return key

    def _run_prefilters(self, req: SchedulingRequest) -> None:
        # What the request reads to be as fresh as nova runs in the databases while the
        # request works: the aggregates' check first (the prefilters wait for it, so it
        # runs alone), then the cells' reads (services, compute-node reports) and, for the
        # provider view, Placement's; the host states and the view's answer take theirs
        # later (_candidates_from_view).
        self.host_manager.prefetch(req, cells=False)
        # nova's request filters read the aggregates per request: ours must include every
        # change committed before the request arrived
        with req.trace.timed("aggregates"):
            self.host_manager.sync_aggregates(req.arrived_at)
        self.host_manager.prefetch(req, aggregates=False)
        self.candidates.start_view_check(req)
        try:
            applied = prefilters.process_reqspec(req, self.host_manager, self.conf)
        except RequestFilterFailed as exc:
            raise NoValidHost(str(exc), "prefilter") from exc
        req.trace.prefilters = applied
        if applied and LOG.isEnabledFor(logging.DEBUG):
            LOG.debug("Request filters applied: %s", ", ".join(applied))

    def _forced_in_tree(self, req: SchedulingRequest) -> tuple[str | None, bool]:
        """For a forced or requested host/node, nova's look-up: the single node's uuid as
        ``in_tree``, or no tree and no limit when the host has several nodes."""
        dest = req.requested_destination
        host = (dest.host if dest else None) or (req.force_hosts or [None])[0]
        node = (dest.node if dest else None) or (req.force_nodes or [None])[0]
        if not host and not node:
            return None, False
        nodes = self.host_manager.compute_nodes_by_host_or_node(host, node, req)
        if not nodes:
            raise NoValidHost(f"No such host - host: {host} node: {node}", "no_such_host")
        if len(nodes) == 1:
            if dest is not None and (dest.host or dest.node):
                # as nova does: a destination given by node alone (API 2.74) names its host
                # too, so that the hosts are narrowed to that node before the filters
                dest.host = nodes[0].host
                dest.node = nodes[0].nodename
            return nodes[0].uuid, False
        return None, True

    def _hosts_from_placement(
        self, req: SchedulingRequest, *, unlimited: bool = False
    ) -> tuple[AllocationCandidates, list[HostState]]:
        in_tree, forced_unlimited = self._forced_in_tree(req)
        queries = query.build_queries(
            req, conf=self.conf, in_tree=in_tree, unlimited=unlimited or forced_unlimited
        )
        candidates = self.candidates.candidates(req, queries)
        by_rp: dict[str, list[dict[str, Any]]] = {}
        get = by_rp.get
        for areq in candidates.allocation_requests:
            allocations = areq["allocations"]
            if len(allocations) == 1:
                # the common case (a compute node alone): no setdefault, no new list per call
                (rp_uuid,) = allocations
                found = get(rp_uuid)
                if found is None:
                    by_rp[rp_uuid] = [areq]
                else:
                    found.append(areq)
                continue
            for rp_uuid in allocations:
                by_rp.setdefault(rp_uuid, []).append(areq)
        req.scratch.allocation_candidates = by_rp
        req.scratch.provider_summaries = candidates.provider_summaries
        with req.trace.timed("host_states"):
            hosts = self.host_manager.get_host_states_by_uuids(
                candidates.provider_summaries.keys(), req, request_id=req.request_id
            )
            if not self._held_checked(req):
                # a claim of ours that Placement no longer holds is not counted by this
                # request
                self.held_claims.observe(
                    candidates.provider_summaries, hosts, request_id=req.request_id
                )
        if not hosts:
            raise NoValidHost(
                f"Placement returned {len(candidates.provider_summaries)} candidate "
                "provider(s) but none is a compute node with a service record in the enabled "
                "cells (a cell may have been skipped; see the warnings)",
                "no_compute_node",
            )
        return candidates, hosts

    def _held_checked(self, req: SchedulingRequest) -> bool:
        """Whether the provider view's per-request check already looked up the claims we
        count (the database feed, ``read_your_writes``): then the answer needs no reading."""
        refresher = self.view_refresher
        return (
            req.trace.candidate_source == "view"
            and refresher is not None
            and refresher.fresh_per_request
            and self.conf.scheduler.read_your_writes
        )

    def _get_sorted_hosts(
        self, req: SchedulingRequest, hosts: list[HostState], index: int
    ) -> list[HostState]:
        return self.framework.sorted(req, hosts, index)

    def _check_deadline(self, req: SchedulingRequest) -> None:
        """Past the request's deadline no claim is made: NoValidHost (the caller rolls
        back every claim of the request)."""
        if _clock() >= req.deadline:
            raise NoValidHost(
                f"The request ran past its deadline of {req.deadline_seconds:g} s "
                "([scheduler] request_deadline, [DEFAULT] long_rpc_timeout) after placing "
                f"{len(req.trace.claimed)} instance(s); every claim of the request was deleted",
                "deadline",
            )

    def cycle(
        self,
        req: SchedulingRequest,
        hosts: list[HostState],
        instance_uuids: list[str | None],
        place: Placer,
        *,
        explain: bool = False,
        consume: bool = True,
        on_step: Callable[[int, InstanceStep, Placed | None], None] | None = None,
        into: Cycle | None = None,
    ) -> Cycle:
        """The per-instance cycle every path runs, through the framework
        (``Framework.cycle``), each instance taken counted by ``consume`` (``consume``
        False counts nothing: explain's last instance)."""
        return self.framework.cycle(
            req,
            hosts,
            instance_uuids,
            place,
            count=self.consume if consume else None,
            explain=explain,
            on_step=on_step,
            into=into,
        )

    def _claim_first(
        self, req: SchedulingRequest, hosts: list[HostState], instance_uuid: str | None
    ) -> Placed | None:
        """The first host of ``hosts`` Placement takes the instance's claim on (None: no
        host could be claimed, or Placement cannot be reached)."""
        assert instance_uuid is not None
        for host in hosts:
            self._check_deadline(req)
            alloc_req = self.claimer.claim(req, host, instance_uuid)
            if alloc_req is not None:
                req.trace.claimed.append(instance_uuid)
                self.held_claims.claimed(req.scratch.provider_summaries, host, alloc_req)
                return host, alloc_req
            if req.trace.placement_unreachable:
                break  # no other host can be claimed without Placement
        LOG.debug("Unable to successfully claim against any host.")
        return None

    @staticmethod
    def _take_first(
        req: SchedulingRequest, hosts: list[HostState], instance_uuid: str | None
    ) -> Placed | None:
        """The best host, claimed nowhere."""
        return hosts[0], None

    def _schedule(
        self,
        req: SchedulingRequest,
        hosts: list[HostState],
        instance_uuids: list[str],
        return_alternates: bool,
    ) -> list[list[Selection]]:
        """nova's main loop: per instance filter, weigh, claim the first host that Placement
        accepts, consume; then alternates. Every claim is rolled back on any failure."""
        num_instances = len(instance_uuids)
        done = Cycle(hosts=hosts)
        try:
            self.cycle(req, hosts, list(instance_uuids), self._claim_first, into=done)
            if len(done.chosen) < num_instances:
                raise self.not_enough(req, len(done.chosen), num_instances)
            return self._with_alternates(
                req, done.chosen, done.hosts, done.index, return_alternates, True
            )
        except BaseException:
            self._rollback(req, [h for h, _ in done.chosen])
            raise

    def _legacy_find_hosts(
        self,
        req: SchedulingRequest,
        hosts: list[HostState],
        instance_uuids: list[str] | None,
        return_alternates: bool,
    ) -> list[list[Selection]]:
        """nova's path without claims (RPC < 4.4 without instance uuids, and rebuild):
        filter, weigh, take the first host, consume. No Selection carries an allocation
        request, the chosen hosts' nor the alternates'."""
        num = len(instance_uuids) if instance_uuids else req.num_instances
        uuids: list[str | None] = list(instance_uuids) if instance_uuids else [None] * num
        done = Cycle(hosts=hosts)
        try:
            self.cycle(req, hosts, uuids, self._take_first, into=done)
            if len(done.chosen) < num:
                raise self.not_enough(req, len(done.chosen), num)
            return self._with_alternates(
                req, done.chosen, done.hosts, done.index, return_alternates, False
            )
        except BaseException:
            self._rollback(req, [h for h, _ in done.chosen], done.keys)
            raise
        finally:
            if req.is_rebuild:
                # a rebuild check claims nothing and the instance stays where it is: its
                # consumption served this request's alternates only
                _release_on([h for h, _ in done.chosen], done.keys, "rebuild")

    def _with_alternates(
        self,
        req: SchedulingRequest,
        chosen: list[tuple[HostState, dict[str, Any] | None]],
        hosts: list[HostState],
        index: int,
        return_alternates: bool,
        claimed: bool,
    ) -> list[list[Selection]]:
        """nova's ``_get_alternate_hosts``: per instance its Selection, then up to
        ``max_attempts - 1`` other hosts of the same cell, taken from the last sorted list
        (sorted again after the last consumption in a multi-create). With claims, an
        alternate needs an allocation candidate and carries it, unclaimed."""
        num_alts = self.conf.scheduler.max_attempts - 1 if return_alternates else 0
        if index > 0 and num_alts > 0:
            # the chosen hosts have consumed: filter and weigh again for accurate alternates
            hosts = self._get_sorted_hosts(req, hosts, index)
        chosen_keys = {(h.host, h.nodename) for h, _ in chosen}
        confirm = claimed and num_alts > 0 and self.claimer.confirms(req)
        out: list[list[Selection]] = []
        for host, alloc_req in chosen:
            selections = [self._selection(req, host, alloc_req)]
            for alt in hosts:
                if len(selections) > num_alts:
                    break
                if alt.cell_uuid != host.cell_uuid or (alt.host, alt.nodename) in chosen_keys:
                    continue
                if not claimed:
                    selections.append(self._selection(req, alt, None))
                    continue
                cands = req.candidates_for(alt)
                if not cands:
                    continue
                # the conductor claims an alternate as it is: from a view that may have
                # missed a change, Placement confirms it first (as the chosen host's claim)
                if confirm and not self.claimer.confirm(req, alt, cands[0]):
                    continue
                selections.append(self._selection(req, alt, cands[0]))
            out.append(selections)
        return out

    # -- helpers ----------------------------------------------------------------------------
    def _selection(
        self, req: SchedulingRequest, host: HostState, alloc_req: dict[str, Any] | None
    ) -> Selection:
        return outcome.selection(req, host, alloc_req, self.conf.default_availability_zone)

    def _rollback(
        self,
        req: SchedulingRequest,
        hosts: Iterable[HostState],
        keys: Iterable[str] | None = None,
    ) -> None:
        """Delete the request's claims and stop counting what it consumed on ``hosts``
        (under ``keys``; by default its claimed instances' uuids)."""
        consumers = self.claimer.delete(req)
        # our consumption is void (nova rebuilds its HostStates on the next request; ours
        # are cached): each host counts its last report and the consumptions of others
        _release_on(hosts, consumers if keys is None else keys, "rollback")

    def not_enough_reason(self, req: SchedulingRequest, got: int, wanted: int) -> str:
        """Why fewer hosts than instances were found (see ``not_enough``)."""
        return self.not_enough(req, got, wanted).reason

    # the NoValidHost of too few hosts (scheduler/drivers/outcome.py)
    not_enough = staticmethod(outcome.not_enough)


def _release_on(hosts: Iterable[HostState], keys: Iterable[str], reason: str) -> None:
    """Stop counting ``keys`` on ``hosts`` (the consumptions of one request)."""
    wanted = set(keys)
    for host in {id(h): h for h in hosts}.values():
        try:
            host.release_consumption(wanted, reason)
        except Exception:
            LOG.exception("Could not release the consumption on host %s", host.host)


def _count_claim_retry() -> None:
    metrics.M.claim_retries.inc()
