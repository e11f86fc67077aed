"""The filter scheduler: ``select_destinations`` → candidates → framework → alternates → reply.

Input is a decoded RequestSpec; output is, per instance, the chosen Selection followed by its
alternates (same cell, each with its own allocation request), or a NoValidHost that says why.
The driver keeps only that order; each step has its own module:

- the hosts a request starts from: ``RequestHosts`` (request_hosts.py: prefilters, candidates
  from the provider view or Placement through ``CandidateSource``, HostStates; counting an
  instance on a host);
- the per-instance cycle (narrow → filter → weigh → pick, then a placer and the count):
  ``scheduler.framework.Framework``;
- claims, the deadline and the rollback: ``Claimer`` (claims.py); the claims Placement still
  holds: ``HeldClaims`` (held_claims.py);
- alternates and Selections: alternates.py, outcome.py; nova's casts: host_casts.py;
- the decision record and the smallest-change search, observers of the finished call:
  decisions.py, relaxations.py.

The steps are public, so that explain, capacity and the smallest change run exactly what
``select_destinations`` runs: ``new_request``, ``placement_hosts``/``placement_candidates`` or
``all_hosts``, and the framework's ``cycle`` with the driver's ``consume``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from filters.handler import FilterHandler
from placement_client.api import AllocationCandidates, Placement
from scheduler.conf import CONF
from scheduler.drivers import alternates, decisions, host_casts, outcome, relaxations
from scheduler.drivers import request_filters as prefilters
from scheduler.drivers.base import CASTS, NO_OBSERVERS, Observers
from scheduler.drivers.candidates import CandidateSource
from scheduler.drivers.claims import Claimer, release_on
from scheduler.drivers.held_claims import HeldClaims
from scheduler.drivers.host_casts import HostCasts
from scheduler.drivers.host_source import HostSource
from scheduler.drivers.request_hosts import RequestHosts
from scheduler.exceptions import NoValidHost
from scheduler.framework import Cycle, Framework, InstanceStep, Placed, take_best
from scheduler.framework.pickers import Picker
from scheduler.hosts.state import HostState
from scheduler.objects import RequestSpec, Selection
from scheduler.records.completions import Completions
from scheduler.request import SchedulingRequest, deadline_seconds
from scheduler.telemetry import metrics
from weighers.handler import WeightHandler

LOG = logging.getLogger(__name__)
# the clock of request deadlines (a module-level name so that tests can move it)
_clock = time.monotonic


class FilterScheduler:
    """The default scheduler driver (entry point ``filter_scheduler``)."""

    # nova's cache-update casts, all applied to the host source (scheduler/drivers/base.py)
    applies_casts = frozenset(CASTS)
    # the service hands it its Observers (the decision recorder, the request's encoder)
    takes_observers = True

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
        observers: Observers = NO_OBSERVERS,
    ):
        """``filters``/``weighers``: these instead of ``[filter_scheduler]
        enabled_filters``/``weight_classes``; ``picker``: how the filtered hosts are
        ordered and which goes first (default: nova's, ``pickers.NovaPick``);
        ``observers``: what watches each call (``base.Observers``: none by default)."""
        self.conf = conf
        self.recorder = observers.recorder
        self.spec_encoder = observers.spec_encoder
        self.timing_observer = observers.timing
        # the one path that filters and weighs (explain, capacity and the smallest change too)
        self.framework = Framework.from_conf(
            conf, filters=filters, weighers=weighers, picker=picker
        )
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
        # nova's casts and the view's lost claims end our consumption on a host
        self.casts = HostCasts(host_manager, self.view)
        self.claimer = Claimer(placement, self.view_refresher, conf, clock=lambda: _clock())
        # our consumption lasts while Placement holds the claim (answers from Placement)
        self.held_claims = HeldClaims(placement)
        # the decision records' search for the smallest change, off the request path
        self.completions = Completions()
        self.candidates = CandidateSource(
            placement, self.view_refresher, conf, clock=lambda: _clock()
        )
        # the hosts a request starts from (prefilters, candidates, host states)
        self.hosts = RequestHosts(host_manager, self.candidates, self.held_claims, conf)
        prefilters.warn_unimplemented_toggles(conf)
        if self.framework.needs_instance_details():
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
        return host_casts.status_lines(self.host_manager, self.view_refresher, time.time())

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
        """The filters and weighers' columns built before the first request
        (``Framework.warm_up``)."""
        self.framework.warm_up(
            lambda req: self.host_manager.get_host_states_by_uuids(None, req, request_id=None)
        )

    def stop(self) -> None:
        self.completions.stop()
        self.claimer.stop()
        self.host_manager.stop()
        if self.view_refresher is not None:
            self.view_refresher.stop()

    # nova's casts go to the host state (scheduler/drivers/host_casts.py)
    def update_aggregates(self, aggregates: list[Any]) -> None:
        self.casts.update_aggregates(aggregates)

    def delete_aggregate(self, aggregate: Any) -> None:
        self.casts.delete_aggregate(aggregate)

    def update_instance_info(self, host_name: str, instance_uuids: list[str]) -> None:
        self.casts.update_instance_info(host_name, instance_uuids)

    def delete_instance_info(self, host_name: str, instance_uuid: str) -> None:
        self.casts.delete_instance_info(host_name, instance_uuid)

    def sync_instance_info(self, host_name: str, instance_uuids: list[str]) -> None:
        self.casts.sync_instance_info(host_name, instance_uuids)

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
                encoder = self.spec_encoder
                decisions.hand_over(
                    self.recorder,
                    self.completions,
                    req,
                    instance_uuids,
                    result,
                    error,
                    spec=(lambda: encoder(spec_obj)) if encoder is not None else None,
                    weighers=self.framework.weighers,
                    smallest_change=lambda: relaxations.search(self, context, spec_obj).as_dict(),
                )
            outcome.observe(req.trace, time.perf_counter() - start, self.timing_observer)

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
        else:
            hosts = self.placement_hosts(req)
        if on_candidates is not None:
            on_candidates(req)
        claimed = instance_uuids is not None and not req.is_rebuild
        uuids: list[str | None] = list(
            instance_uuids if claimed else (instance_uuids or [None] * req.num_instances)
        )
        return self._place_all(req, hosts, uuids, return_alternates, claimed=claimed)

    # -- the steps (public: explain runs them too) -------------------------------------------
    def new_request(
        self,
        context: Any,
        spec: RequestSpec,
        *,
        retry_of: SchedulingRequest | None = None,
        purpose: str = "schedule",
    ) -> SchedulingRequest:
        """The request's own state for ``spec``; the spec itself is never changed. Its
        deadline starts now: the smaller of ``[DEFAULT] long_rpc_timeout`` (the caller's
        wait) and ``[scheduler] request_deadline`` (0: none). ``retry_of``: the attempt
        whose NoValidHost Placement is asked about again (its deadline holds); ``purpose``:
        who asks (``SchedulingRequest.purpose``)."""
        req = SchedulingRequest.of(
            spec,
            request_id=getattr(context, "request_id", None),
            project_id=getattr(context, "project_id", None),
            user_id=getattr(context, "user_id", None),
            arrived_at=_clock(),
            deadline_seconds=deadline_seconds(self.conf),
            retry_of=retry_of,
            purpose=retry_of.purpose if retry_of is not None else purpose,
        )
        if self.recorder is not None:
            req.trace.weighed = {}
        return req

    def all_hosts(self, req: SchedulingRequest) -> list[HostState]:
        """Every host of the request's cells, without asking Placement (rebuild checks)."""
        return self.hosts.all_hosts(req)

    def placement_hosts(self, req: SchedulingRequest) -> list[HostState]:
        """The prefilters, the Placement query and the HostStates of its candidates
        (``RequestHosts``). Raises NoValidHost."""
        return self.hosts.placement_candidates(req)[1]

    def placement_candidates(
        self, req: SchedulingRequest, *, unlimited: bool = False
    ) -> tuple[AllocationCandidates, list[HostState]]:
        """``placement_hosts`` with the candidates' answer (``RequestHosts``)."""
        return self.hosts.placement_candidates(req, unlimited=unlimited)

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
        """Count the instance on the host and the request's server group
        (``RequestHosts.consume``); returns the key the host counts it under."""
        return self.hosts.consume(req, host, instance_uuid, claimed)

    def _claim_first(
        self, req: SchedulingRequest, hosts: list[HostState], instance_uuid: str | None
    ) -> Placed | None:
        """The first host of ``hosts`` Placement takes the instance's claim on, its claim
        remembered as held (``HeldClaims``); None: none could be claimed."""
        placed = self.claimer.claim_first(req, hosts, instance_uuid)
        if placed is not None:
            self.held_claims.claimed(req.scratch.provider_summaries, *placed)
        return placed

    def _place_all(
        self,
        req: SchedulingRequest,
        hosts: list[HostState],
        instance_uuids: list[str | None],
        return_alternates: bool,
        *,
        claimed: bool,
    ) -> list[list[Selection]]:
        """nova's main loop: per instance filter, weigh, take a host (``claimed``: the first
        Placement accepts the claim on; else the best, claimed nowhere: RPC < 4.4 without
        instance uuids, and rebuild), consume; then the alternates. On any failure every
        claim is rolled back and the consumption released."""
        done = Cycle(hosts=hosts)
        try:
            place = self._claim_first if claimed else take_best
            self.framework.cycle(req, hosts, instance_uuids, place, count=self.consume, into=done)
            if len(done.chosen) < len(instance_uuids):
                raise self.not_enough(req, len(done.chosen), len(instance_uuids))
            return alternates.with_alternates(
                req,
                done.chosen,
                done.hosts,
                done.index,
                return_alternates=return_alternates,
                claimed=claimed,
                framework=self.framework,
                claimer=self.claimer,
                conf=self.conf,
            )
        except BaseException:
            self.claimer.rollback(req, [h for h, _ in done.chosen], None if claimed else done.keys)
            raise
        finally:
            if req.is_rebuild:
                # a rebuild check claims nothing and the instance stays where it is: its
                # consumption served this request's alternates only
                release_on([h for h, _ in done.chosen], done.keys, "rebuild")

    def not_enough_reason(self, req: SchedulingRequest, got: int, wanted: int) -> str:
        """Why fewer hosts than instances were found (see ``not_enough``)."""
        return self.not_enough(req, got, wanted).reason

    # the NoValidHost of too few hosts (scheduler/drivers/outcome.py)
    not_enough = staticmethod(outcome.not_enough)


def _count_claim_retry() -> None:
    metrics.M.claim_retries.inc()
