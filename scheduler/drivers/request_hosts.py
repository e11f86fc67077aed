"""The hosts a request starts from, before any filter runs.

``RequestHosts.placement_candidates(req)`` is nova's path up to the filters: the aggregates
read fresh, the request filters (``request_filters.py``), the Placement queries
(``placement_client.query``, with a forced host's single node as ``in_tree``), their
allocation candidates from the provider view or Placement (``CandidateSource``), and the
HostStates of the candidates' compute nodes. The allocation requests by provider go to
``req.scratch.allocation_candidates``, the provider summaries to
``req.scratch.provider_summaries``. A claim of ours that Placement's answer shows lost is
not counted (``HeldClaims``). ``all_hosts(req)`` is the rebuild's path: every host of the
request's cells, Placement not asked. ``consume`` counts an instance taken on one of them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from placement_client import query
from placement_client.api import AllocationCandidates, AllocationRequest
from scheduler.drivers import request_filters as prefilters
from scheduler.drivers.candidates import CandidateSource
from scheduler.drivers.held_claims import HeldClaims
from scheduler.drivers.host_source import HostSource
from scheduler.exceptions import NoValidHost, RequestFilterFailed
from scheduler.hosts.state import HostState
from scheduler.request import SchedulingRequest

LOG = logging.getLogger(__name__)


class RequestHosts:
    """The hosts of a request (see the module docstring)."""

    def __init__(
        self,
        host_manager: HostSource,
        candidates: CandidateSource,
        held_claims: HeldClaims,
        conf: Any,
    ):
        self.host_manager = host_manager
        self.candidates = candidates
        self.held_claims = held_claims
        self.conf = conf

    def all_hosts(self, req: SchedulingRequest) -> list[HostState]:
        """Every host of the request's cells, without asking Placement (rebuild checks)."""
        with req.trace.timed("host_states"):
            self.host_manager.sync_aggregates(req.arrived_at)
            return self.host_manager.get_host_states_by_uuids(None, req, request_id=req.request_id)

    def placement_candidates(
        self, req: SchedulingRequest, *, unlimited: bool = False
    ) -> tuple[AllocationCandidates, list[HostState]]:
        """The candidates' answer (its provider summaries hold each provider's capacity and
        use) and the HostStates of its compute nodes. ``unlimited``: every candidate, not
        ``[scheduler] max_placement_results`` of them (capacity counting). Raises
        NoValidHost (a prefilter refused, Placement failed or found nothing)."""
        self._run_prefilters(req)
        in_tree, forced_unlimited = self._forced_in_tree(req)
        queries = query.build_queries(
            req, conf=self.conf, in_tree=in_tree, unlimited=unlimited or forced_unlimited
        )
        candidates = self.candidates.candidates(req, queries)
        req.scratch.allocation_candidates = by_provider(candidates.allocation_requests)
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
        # later (CandidateSource.from_view).
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

    def _held_checked(self, req: SchedulingRequest) -> bool:
        """Whether the provider view's per-request check already looked up the claims we
        count (the database feed, ``read_your_writes``): then the answer needs no reading."""
        refresher = self.candidates.view_refresher
        return (
            req.trace.candidate_source == "view"
            and refresher is not None
            and refresher.fresh_per_request
            and self.conf.scheduler.read_your_writes
        )


def by_provider(
    allocation_requests: Iterable[AllocationRequest],
) -> dict[str, list[AllocationRequest]]:
    """Each provider's allocation requests, in the answer's order (a host's first is the one
    nova claims)."""
    by_rp: dict[str, list[AllocationRequest]] = {}
    get = by_rp.get
    for areq in allocation_requests:
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
    return by_rp
