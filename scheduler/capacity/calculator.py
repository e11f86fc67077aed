"""How many more instances of a flavor fit, and where: the real chain, claiming nothing.

For each flavor the calculator runs what ``select_destinations`` runs for one instance of
it: the prefilters, the candidates (the provider view, or ``GET /allocation_candidates``
without a limit), the HostStates and the enabled filters. Then, per host that passed:

- **Placement's side:** how many more allocations of the flavor the host's providers hold,
  from the candidates' provider summaries (capacity and use per resource class).
- **The filters' side:** the filters whose answer can change when an instance lands on the
  host (``BaseHostFilter.depends_on_consumption``: NUMA, PCI, instance and I/O counts, the
  legacy RAM/CPU/disk filters, a third-party filter unless it says otherwise), asked again
  after each instance counted on a private copy of the host, until one refuses. A filter
  whose ``prepare`` passes every host for this flavor is not asked.

Placing instances one after another, with the scheduler's own consumption between them
(what nova does for a stream of boots), gives the same total: a placement on one host
changes no other host's answer for a request without a server group, so each host takes as
many as it holds, whichever order the weighers choose. (``tests/unit/scheduler/capacity``
proves it against the driver's own cycle.) The weighers are not run.

What is free but no further instance of the flavor can use is its *stranded* capacity, per
resource class one instance asks Placement for (the request's own Placement groups, as
``build_queries`` writes them: the flavor's fields overridden by ``resources*:`` extra specs,
VCPU turned into PCPU by ``hw:cpu_policy=dedicated``): on every up and enabled host in scope,
what is free of that class less what the counted instances take. What is free of VCPU,
MEMORY_MB and DISK_GB is what the compute node reports (within the allocation ratios); of
any other class (PCPU, VGPU, CUSTOM_*...) it is what the host's provider tree has free in
Placement (see ``CapacityCalculator._stranded`` for where that is read).
"""

from __future__ import annotations

import math
import time
import uuid as uuidlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from oslo_utils import timeutils

from placement_client import query
from scheduler.capacity.scope import missing_cells
from scheduler.exceptions import InvalidRequest, NoValidHost
from scheduler.hosts import table as host_table
from scheduler.hosts.state import HostState
from scheduler.objects import Flavor, RequestSpec

# the resource classes whose free amount is read from the compute nodes (the others from
# Placement); listed first, in this order, wherever stranded capacity is shown
COMPUTE_NODE_CLASSES = ("VCPU", "MEMORY_MB", "DISK_GB")
# per host, at most this many instances are simulated for a flavor that asks Placement for
# nothing countable; a host that still takes more is unbounded
MAX_SIMULATED = 10_000


@dataclass(slots=True)
class FlavorCapacity:
    """How many more instances of one flavor fit (``total`` None: unbounded)."""

    flavor: str
    total: int | None
    by_az: dict[str, int] = field(default_factory=dict)
    by_aggregate: dict[str, int] = field(default_factory=dict)
    by_host: dict[str, int] = field(default_factory=dict)  # "host/node" -> instances
    stranded: dict[str, float] = field(default_factory=dict)  # resource class -> amount
    # when nothing fits: why (the NoValidHost the scheduler would give)
    reason: str = ""
    # NoValidHost's cause when the candidates could not be had (placement_refused: Placement
    # refused the flavor's query, such as a trait it does not know yet)
    cause: str = ""
    source: str = ""  # where the candidates came from: "view" or "placement"
    elapsed: float = 0.0
    # the cells that could not be read while the figures were counted: their hosts are not
    # in them (the figures are partial)
    missing_cells: list[str] = field(default_factory=list)

    @property
    def partial(self) -> bool:
        return bool(self.missing_cells)

    def as_dict(self) -> dict[str, Any]:
        return {
            "flavor": self.flavor,
            "total": self.total,
            "by_az": dict(sorted(self.by_az.items())),
            "by_aggregate": dict(sorted(self.by_aggregate.items())),
            "by_host": dict(sorted(self.by_host.items())),
            "stranded": {rc: round(v, 3) for rc, v in sorted(self.stranded.items())},
            "reason": self.reason or None,
            "source": self.source or None,
            "elapsed_ms": round(self.elapsed * 1000, 3),
            "partial": self.partial,
            "missing_cells": list(self.missing_cells),
        }


class CapacityCalculator:
    """Capacity per flavor over the hosts of ``driver`` (a FilterScheduler), optionally
    within one availability zone and one aggregate (by name), for ``project_id`` (None: a
    project no tenant-isolated aggregate admits)."""

    def __init__(
        self,
        driver: Any,
        *,
        availability_zone: str | None = None,
        aggregate: str | None = None,
        project_id: str | None = None,
    ):
        self.driver = driver
        self.availability_zone = availability_zone
        self.aggregate = aggregate
        self.project_id = project_id
        self._scope: list[HostState] | None = None
        self._free: list[tuple[HostState, dict[str, float]]] | None = None
        # root provider uuid -> free per resource class, from the provider view
        self._view_free: dict[str, dict[str, float]] | None = None
        # the cells missing from the scope's hosts (stranded capacity is counted on them)
        self._scope_missing: set[str] = set()

    # -- per flavor ----------------------------------------------------------------------------
    def flavor(self, flavor: Flavor) -> FlavorCapacity:
        started = time.perf_counter()
        out = FlavorCapacity(flavor=flavor.name or flavor.flavorid or "?", total=0)
        req = self.driver.new_request(self._context(), self._spec(flavor), purpose="capacity")
        fits: list[tuple[HostState, int | None]] = []
        summaries: dict[str, dict[str, Any]] = {}
        try:
            candidates, hosts = self.driver.placement_candidates(req, unlimited=True)
        except NoValidHost as exc:
            out.reason = exc.reason
            out.cause = exc.cause
        else:
            out.source = req.trace.candidate_source
            summaries = candidates.provider_summaries
            fits, out.reason = self._fits(req, hosts, summaries)
        missing = set(missing_cells(getattr(self.driver, "host_manager", None)))
        default_az = self.driver.conf.default_availability_zone
        for host, n in fits:
            if not n:
                continue
            az = host.availability_zone or default_az
            out.by_az[az] = out.by_az.get(az, 0) + n
            for agg in host.aggregates or ():
                name = getattr(agg, "name", None) or getattr(agg, "uuid", "?")
                out.by_aggregate[name] = out.by_aggregate.get(name, 0) + n
            out.by_host[f"{host.host}/{host.nodename}"] = n
        unbounded = any(n is None for _, n in fits)
        out.total = None if unbounded else sum(out.by_host.values())
        if out.total != 0:
            out.reason = ""
        counted = {(h.host, h.nodename): n for h, n in fits if n}
        out.stranded = self._stranded(req, counted, summaries)
        out.missing_cells = sorted(missing | self._scope_missing)
        out.elapsed = time.perf_counter() - started
        return out

    def flavors(self, flavors: Iterable[Flavor]) -> list[FlavorCapacity]:
        return [self.flavor(f) for f in flavors]

    # -- the steps -----------------------------------------------------------------------------
    def _context(self) -> Any:
        return SimpleNamespace(
            request_id=f"req-capacity-{uuidlib.uuid4()}",
            project_id=self.project_id,
            user_id=None,
        )

    def _spec(self, flavor: Flavor) -> RequestSpec:
        return RequestSpec(
            flavor=flavor,
            num_instances=1,
            project_id=self.project_id,
            availability_zone=self.availability_zone,
        )

    def _fits(
        self, req: Any, hosts: list[HostState], summaries: dict[str, dict[str, Any]]
    ) -> tuple[list[tuple[HostState, int | None]], str]:
        """Each host that passes the filters, with how many instances it takes (None:
        unbounded); when none does, why."""
        # the filters narrow the scratch area's candidates for the first instance; Placement's
        # arithmetic starts from what Placement answered
        answered = dict(req.scratch.allocation_candidates)
        report = self.driver.framework.filtered(req, hosts)
        passed = self._in_aggregate(report.hosts)
        if not passed:
            reason = (
                report.summary(len(hosts))
                if not report.hosts
                else (f"no host of aggregate {self.aggregate} passes the filters")
            )
            return [], reason
        framework = self.driver.framework
        dependent = framework.consumption_filters(req)
        fits: list[tuple[HostState, int | None]] = []
        for host in passed:
            placement = _placement_fit(answered.get(host.uuid) or [], summaries)
            if placement == 0:
                continue
            if not dependent:
                fits.append((host, None if placement == math.inf else int(placement)))
                continue
            limit = MAX_SIMULATED if placement == math.inf else int(placement)
            taken = framework.count(req, host, dependent, limit, answered.get(host.uuid) or [])
            unbounded = placement == math.inf and taken >= MAX_SIMULATED
            fits.append((host, None if unbounded else taken))
        return fits, ""

    def _in_aggregate(self, hosts: list[HostState]) -> list[HostState]:
        if not self.aggregate:
            return list(hosts)
        wanted = self.aggregate
        return [
            h
            for h in hosts
            if any(getattr(a, "name", None) == wanted for a in (h.aggregates or ()))
        ]

    def _hosts_in_scope(self) -> list[HostState]:
        """Every up and enabled host of the scope (AZ, aggregate): stranded capacity is
        counted on them."""
        if self._scope is None:
            req = self.driver.new_request(
                self._context(), self._spec(Flavor(name="scope", vcpus=0, memory_mb=0))
            )
            hosts = self.driver.all_hosts(req)
            self._scope_missing = set(missing_cells(getattr(self.driver, "host_manager", None)))
            # ComputeFilter's rule, without its warnings about the hosts that are down
            window = host_table.heartbeat_bounds(
                timeutils.utcnow(), self.driver.conf.service_down_time
            )
            up = [
                h
                for h in hosts
                if host_table.services_up(*host_table.read_service(h.service, True), window)
            ]
            if self.availability_zone:
                default = self.driver.conf.default_availability_zone
                up = [h for h in up if (h.availability_zone or default) == self.availability_zone]
            self._scope = self._in_aggregate(up)
        return self._scope

    def _stranded(
        self,
        req: Any,
        counted: dict[tuple[str, str], int],
        summaries: dict[str, dict[str, Any]],
    ) -> dict[str, float]:
        """Per resource class one instance asks Placement for: what the hosts of the scope
        have free of it less what their counted instances take, summed over the hosts.

        VCPU, MEMORY_MB and DISK_GB are read from the compute nodes. Any other class is read
        from Placement's provider summaries of this flavor's candidates: a host's providers
        are its tree (root provider uuid = the HostState's uuid). A host where the flavor fits
        nowhere in Placement is in no summary: its tree is read from the driver's provider
        view (usage as the view last read it). Without a view, or for a host the view does not
        hold, the free amount of such a class is unknown, and the figure covers the hosts
        whose providers are known only.
        """
        asked = _asked(req, self.driver.conf)
        placement_classes = [rc for rc in asked if rc not in COMPUTE_NODE_CLASSES]
        trees = _free_by_root(summaries) if placement_classes else {}
        totals = dict.fromkeys(asked, 0.0)
        for host, node_free in self._scope_free():
            free = dict(node_free)
            if placement_classes:
                tree = trees.get(host.uuid) if host.uuid else None
                if tree is None:
                    tree = self._free_in_view(host.uuid)
                if tree is not None:
                    free.update((rc, tree.get(rc, 0.0)) for rc in placement_classes)
            n = counted.get((host.host, host.nodename), 0)
            for rc, amount in asked.items():
                if rc not in free:
                    continue
                left = free[rc] - n * amount
                if left > 0:
                    totals[rc] += left
        return totals

    def _scope_free(self) -> list[tuple[HostState, dict[str, float]]]:
        """What each host of the scope has free of VCPU, MEMORY_MB and DISK_GB, read once
        per calculator."""
        if self._free is None:
            self._free = [(h, _free(h)) for h in self._hosts_in_scope()]
        return self._free

    def _free_in_view(self, root: str | None) -> dict[str, float] | None:
        """What the provider tree of ``root`` has free per resource class in the driver's
        provider view, or None (no root, no loaded view, a tree the view does not hold).
        The view is read once per calculator, for the trees of the scope."""
        if not root:
            return None
        if self._view_free is None:
            roots = {h.uuid for h in self._hosts_in_scope() if h.uuid}
            self._view_free = _free_in_view(getattr(self.driver, "view", None), roots)
        return self._view_free.get(root)


def _placement_fit(
    alloc_reqs: Sequence[dict[str, Any]], summaries: dict[str, dict[str, Any]]
) -> float:
    """How many allocations like the host's candidates its providers hold: per resource
    class, the sum over the providers that serve it of what is free there divided by the
    amount asked, and the smallest of those (inf: nothing countable is asked)."""
    if len(alloc_reqs) == 1 and len(alloc_reqs[0]["allocations"]) == 1:
        # the common case, a compute node alone
        ((rp, alloc),) = alloc_reqs[0]["allocations"].items()
        room = (summaries.get(rp) or {}).get("resources") or {}
        fit = math.inf
        for rc, amount in (alloc.get("resources") or {}).items():
            if amount:
                have = room.get(rc)
                if have is None:
                    return 0
                fit = min(fit, (have["capacity"] - have["used"]) // amount)
        return max(0, fit)
    per_class: dict[str, dict[str, int]] = {}  # rc -> provider -> amount per instance
    for areq in alloc_reqs:
        for rp, alloc in (areq.get("allocations") or {}).items():
            for rc, amount in (alloc.get("resources") or {}).items():
                if amount:
                    per_class.setdefault(rc, {}).setdefault(rp, amount)
    fit = math.inf
    for rc, providers in per_class.items():
        total = 0
        for rp, amount in providers.items():
            summary = ((summaries.get(rp) or {}).get("resources") or {}).get(rc) or {}
            free = summary.get("capacity", 0) - summary.get("used", 0)
            total += max(0, int(free // amount))
        fit = min(fit, total)
    return fit


def _asked(spec: RequestSpec, conf: Any) -> dict[str, int]:
    """What one instance asks Placement for per resource class: the amounts of the request's
    groups in the query nova sends first (``build_queries``; with ``hw:cpu_policy=dedicated``
    the PCPU query, not its VCPU fallback), summed over the groups. A request Placement or
    nova would refuse asks for nothing."""
    try:
        queries = query.build_queries(spec, conf=conf, unlimited=True)
    except (InvalidRequest, NoValidHost):
        return {}
    asked: dict[str, int] = {}
    for group in queries[0].groups:
        for rc, amount in group.resources.items():
            if amount:
                asked[rc] = asked.get(rc, 0) + amount
    return asked


def _free_by_root(summaries: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per provider tree (by root provider uuid) of the provider summaries, what it has free
    per resource class: capacity (reserved and allocation ratio applied) less used, summed
    over its providers."""
    trees: dict[str, dict[str, float]] = {}
    for rp, summary in summaries.items():
        free = trees.setdefault(summary.get("root_provider_uuid") or rp, {})
        for rc, room in (summary.get("resources") or {}).items():
            left = max(0, room.get("capacity", 0) - room.get("used", 0))
            free[rc] = free.get(rc, 0.0) + left
    return trees


def _free_in_view(view: Any, roots: set[str]) -> dict[str, dict[str, float]]:
    """Per provider tree of ``roots`` that the provider view holds, what it has free per
    resource class as the view last read it (nothing without a loaded view)."""
    if view is None or not view.loaded:
        return {}
    trees: dict[str, dict[str, float]] = {}
    for uuid in view.uuids():
        rec = view.record(uuid)
        if rec is None or rec.root_uuid not in roots:
            continue
        free = trees.setdefault(rec.root_uuid, {})
        for rc, inventory in rec.inventories.items():
            left = max(0, inventory.capacity - rec.used.get(rc, 0))
            free[rc] = free.get(rc, 0.0) + left
    return trees


def _free(host: HostState) -> dict[str, float]:
    """What the host's compute node reports free, within its allocation ratios."""
    ram_total = host.total_usable_ram_mb or 0
    disk_total = host.total_usable_disk_gb or 0
    return {
        "VCPU": (host.vcpus_total or 0) * (host.cpu_allocation_ratio or 1.0)
        - (host.vcpus_used or 0),
        "MEMORY_MB": ram_total * (host.ram_allocation_ratio or 1.0)
        - (ram_total - (host.free_ram_mb or 0)),
        "DISK_GB": disk_total * (host.disk_allocation_ratio or 1.0)
        - (disk_total - (host.free_disk_mb or 0) / 1024),
    }
