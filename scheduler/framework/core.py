"""The scheduling framework: the enabled filters, weighers and picker, and one instance's step.

Every path that filters or weighs a request goes through a ``Framework``: the service's
driver (``FilterScheduler._place_all``), explain, the smallest-change search
(``scheduler/drivers/relaxations.py``) and capacity (``scheduler/capacity/calculator.py``).
One instance's step is nova's ``get_filtered_hosts`` then ``get_weighed_hosts``:

1. **narrow**: the requested destination, ``ignore_hosts``, ``force_hosts`` and
   ``force_nodes`` (forced hosts skip the filters, as in nova, except for a rebuild or
   evacuate check);
2. **filter**: the enabled filters, in order (``filters.handler.FilterHandler``);
3. **weigh**: the enabled weighers (``weighers.handler.WeightHandler``);
4. **arrange**: the picker orders the weighed hosts (nova's: as weighed).

What it does not do: take a host (the caller's placer claims, or claims nothing) and count
the instance on it (``FilterScheduler.consume``). ``without`` leaves one filter out (the
smallest-change search asks what a request would get without it), through the same steps.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from filters import PASS_ALL
from filters.handler import FilterHandler, FilterReport, load_filters
from placement_client.api.shapes import AllocationRequest
from scheduler.exceptions import ConfigurationError, PluginNotFound
from scheduler.framework.pickers import NovaPick, Picker
from scheduler.hosts.state import HostState
from scheduler.objects import Flavor, RequestSpec
from scheduler.request import SchedulingRequest
from weighers.handler import Shares, WeighedHost, WeightHandler, load_weighers

LOG = logging.getLogger(__name__)
# the instances of a multi-create whose best weighed hosts are kept for the decision record
MAX_WEIGHED_INSTANCES = 10


@dataclass(slots=True)
class InstanceStep:
    """What one instance's narrow → filter → weigh step found (``Framework.step``)."""

    narrowed: list[tuple[int, str]]  # hosts the narrowing took out: (count, why)
    forced: bool  # forced hosts/nodes: the filters were skipped
    report: FilterReport
    hosts: list[HostState]  # the filtered hosts, best weight first
    weights: list[float]
    weighed: list[WeighedHost] | None = None  # with each weigher's share (explain only)


# a host taken for an instance, with the allocation request claimed on it (None: no claim)
Placed = tuple[HostState, AllocationRequest | None]
# takes a host for an instance from the sorted hosts: (request, hosts, instance uuid)
Placer = Callable[[SchedulingRequest, list[HostState], str | None], Placed | None]
# counts an instance on the host taken: (request, host, instance uuid, claimed) -> its key
Count = Callable[[SchedulingRequest, HostState, str | None, bool], str]


def take_best(
    req: SchedulingRequest, hosts: list[HostState], instance_uuid: str | None
) -> Placed | None:
    """The placer that claims nothing: the best host (explain, a rebuild's check, RPC < 4.4)."""
    return hosts[0], None


@dataclass(slots=True)
class Cycle:
    """What ``Framework.cycle`` did: the hosts taken, in instance order, the keys the
    instances are counted under on them, the last sorted hosts (the alternates' source) and
    the index of the last instance tried."""

    hosts: list[HostState]
    chosen: list[Placed] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    index: int = 0


@dataclass(slots=True, frozen=True)
class Ranked:
    """One instance's best weighed hosts as the ranking left them, before the instance
    consumed anything, with what each weigher weighed them by (``Shares``): what the
    decision record turns into its ``weighed`` (``scheduler/drivers/decisions.py``)."""

    hosts: list[HostState]
    weights: list[float]
    shares: Shares


class Framework:
    """The enabled filters, weighers and picker (see the module docstring)."""

    def __init__(
        self,
        filter_handler: FilterHandler,
        weight_handler: WeightHandler,
        picker: Picker,
        conf: Any,
    ):
        self.filter_handler = filter_handler
        self.weight_handler = weight_handler
        self.picker = picker
        self.conf = conf

    @classmethod
    def from_conf(
        cls,
        conf: Any,
        *,
        filters: list[Any] | None = None,
        weighers: list[Any] | None = None,
        picker: Picker | None = None,
    ) -> Framework:
        """The framework of ``[filter_scheduler] enabled_filters`` and ``weight_classes``
        (or ``filters``/``weighers``), with ``picker`` (default: nova's). An unknown plugin
        raises PluginNotFound; a plugin that cannot be loaded, ConfigurationError."""
        fs = conf.filter_scheduler
        try:
            if filters is None:
                filters = load_filters(list(fs.enabled_filters))
            if weighers is None:
                weighers = load_weighers(list(fs.weight_classes))
            return cls(
                FilterHandler(filters),
                WeightHandler(weighers),
                picker if picker is not None else NovaPick(conf),
                conf,
            )
        except PluginNotFound:
            raise
        except Exception as exc:
            raise ConfigurationError(f"Could not load filters/weighers: {exc}") from exc

    def needs_instance_details(self) -> bool:
        """TypeAffinityFilter needs the flavor of the instances on each host, and a
        non-zero ImagePropertiesWeigher their image properties (nova reads both per host)."""
        filters = {f.name for f in self.filters}
        weighers = {w.name for w in self.weighers}
        return "TypeAffinityFilter" in filters or (
            "ImagePropertiesWeigher" in weighers
            and self.conf.filter_scheduler.image_props_weight_multiplier != 0
        )

    def warm_up(self, hosts_of: Callable[[SchedulingRequest], list[HostState]]) -> None:
        """Run the filters and weighers once over every host (``hosts_of`` a request) for a
        plain request, claiming nothing, so that the columns they read are built before the
        first real request (about 30 ms at 10,000 hosts, otherwise paid by whoever asks
        first). A plugin that cannot weigh a made-up request is left to the first real one."""
        started = time.perf_counter()
        try:
            spec = RequestSpec(flavor=Flavor(vcpus=1, memory_mb=1, root_gb=0, name="warm-up"))
            req = SchedulingRequest.of(spec, request_id="req-warm-up")
            hosts = hosts_of(req)
            if hosts:
                self.step(req, hosts, 0)
        except Exception:
            LOG.debug("Warming the filters and weighers up failed", exc_info=True)
            return
        LOG.info(
            "Filters and weighers warmed up over %d host(s) in %.1f ms",
            len(hosts),
            (time.perf_counter() - started) * 1000,
        )

    @property
    def filters(self) -> list[Any]:
        return self.filter_handler.filters

    @property
    def weighers(self) -> list[Any]:
        return self.weight_handler.weighers

    def step(
        self,
        req: SchedulingRequest,
        hosts: list[HostState],
        index: int,
        *,
        explain: bool = False,
        without: str | None = None,
    ) -> InstanceStep:
        """Instance ``index``'s step: narrow, filter, weigh, arrange. ``explain`` keeps each
        weigher's share of every weight; ``without``: the filter of that name left out."""
        if index == 0:
            req.trace.total_hosts = len(hosts)
        with req.trace.timed("filter"):
            narrowed, forced = narrow(req, hosts)
            if forced:
                report = FilterReport(hosts=list(narrowed))
            else:
                handler = self.filter_handler
                if without is not None:
                    handler = FilterHandler([f for f in handler.filters if f.name != without])
                report = handler.run(narrowed, req, index, request_id=req.request_id)
                removed = req.trace.filter_removed
                for name, reasons in report.removed_by.items():
                    removed[name] = removed.get(name, 0) + sum(reasons.values())
            req.trace.last_report = report
            if index == 0:
                req.trace.first_report = report
        step = InstanceStep(list(req.trace.narrowed), forced, report, [], [])
        if not report.hosts:
            return step
        weighed = req.trace.weighed
        # what the ranking weighed the best hosts by, for the decision record (the first
        # instances)
        k = self.conf.decision_records.top_weighed
        shares = (
            Shares(k)
            if weighed is not None
            and not explain
            and index not in weighed
            and index < MAX_WEIGHED_INSTANCES
            else None
        )
        with req.trace.timed("weigh"):
            if explain:
                step.weighed = self.weight_handler.weigh(report.hosts, req, explain=True)
                step.hosts = [w.obj for w in step.weighed]
                step.weights = [w.weight for w in step.weighed]
            else:
                step.hosts, step.weights = self.weight_handler.rank(
                    report.hosts, req, shares=shares
                )
        step = self.picker.arrange(step)
        if shares is not None:
            # before the instance consumes anything: the values it was chosen by
            req.trace.weighed[index] = Ranked(step.hosts[:k], step.weights[:k], shares)
        return step

    def sorted(self, req: SchedulingRequest, hosts: list[HostState], index: int) -> list[HostState]:
        """Instance ``index``'s step, then the order the picker tries the hosts in (nova's:
        a random pick among the best ``host_subset_size`` first)."""
        return self.picker.first(self.step(req, hosts, index))

    def cycle(
        self,
        req: SchedulingRequest,
        hosts: list[HostState],
        instance_uuids: list[str | None],
        place: Placer,
        *,
        count: Count | None = None,
        explain: bool = False,
        on_step: Callable[[int, InstanceStep, Placed | None], None] | None = None,
        into: Cycle | None = None,
    ) -> Cycle:
        """The per-instance cycle every path runs (a claiming request, one without claims,
        explain): for each instance, filter and weigh the previous instance's survivors (so
        once-per-request filters keep their effect, as in nova), let ``place`` take a host
        from the sorted list (a claim, the first host, ...), then ``count`` the instance on
        it (None: nothing is counted). It stops at the first instance ``place`` finds no
        host for (``Cycle.chosen`` is then shorter than ``instance_uuids``). ``explain``:
        the steps keep each weigher's share and the order is the weighed one (no random
        pick among the best); ``on_step`` sees each step and what was placed. ``into``: the
        Cycle to fill as it goes (what a caller rolls back when an instance fails)."""
        out = into if into is not None else Cycle(hosts=hosts)
        out.hosts = hosts
        for index, instance_uuid in enumerate(instance_uuids):
            out.index = index
            if instance_uuid:
                req.instance_uuid = instance_uuid
            if explain:
                step = self.step(req, out.hosts, index, explain=True)
                ordered = step.hosts
            else:
                step = None
                ordered = self.sorted(req, out.hosts, index)
            placed = place(req, ordered, instance_uuid) if ordered else None
            if on_step is not None and step is not None:
                on_step(index, step, placed)
            out.hosts = ordered
            if not ordered or placed is None:
                break
            host, alloc_req = placed
            if alloc_req is not None:
                _record_mappings(req, alloc_req)
            if count is not None:
                out.keys.append(count(req, host, instance_uuid, alloc_req is not None))
            out.chosen.append(placed)
            if not explain:
                LOG.info("Selected host: %s for instance %s", host.host, instance_uuid)
        return out

    def filtered(self, req: SchedulingRequest, hosts: list[HostState]) -> FilterReport:
        """The first instance's narrow and filter steps alone (what passes, and what each
        filter took out), for callers that do not weigh: capacity."""
        narrowed, forced = narrow(req, hosts)
        if forced:
            return FilterReport(hosts=list(narrowed))
        return self.filter_handler.run(narrowed, req, 0, request_id=req.request_id)

    def consumption_filters(self, req: SchedulingRequest) -> list[tuple[Any, Any]]:
        """The enabled filters whose answer changes as a host takes instances
        (``depends_on_consumption``), prepared for ``req``; a filter that passes every host
        for it is left out."""
        out = []
        for filter_ in self.filters:
            if not getattr(filter_, "depends_on_consumption", True):
                continue
            prepared = filter_.prepare(req)
            if prepared is not PASS_ALL:
                out.append((filter_, prepared))
        return out

    @staticmethod
    def count(
        req: SchedulingRequest,
        host: HostState,
        dependent: list[tuple[Any, Any]],
        limit: int,
        answered: list[Any],
    ) -> int:
        """How many instances the ``dependent`` filters (``consumption_filters``) let
        ``host`` take, counting each on a private copy (the first one passed already), up to
        ``limit``; the host's allocation requests are ``answered`` again before each."""
        twin = host.detached_copy()
        taken = 1
        candidates = req.scratch.allocation_candidates
        while taken < limit:
            twin.consume_from_request(req)
            if host.uuid:
                candidates[host.uuid] = list(answered)
            for filter_, prepared in dependent:
                if not filter_.check(twin, prepared):
                    return taken
            taken += 1
        return taken

    def best(
        self,
        req: SchedulingRequest,
        hosts: list[HostState],
        count: int,
        *,
        without: str | None = None,
    ) -> list[HostState]:
        """The first instance's ``count`` best hosts (``without``: that filter left out);
        none when nothing passes."""
        if not hosts:
            return []
        return self.step(req, hosts, 0, without=without).hosts[:count]


def _record_mappings(req: SchedulingRequest, alloc_req: AllocationRequest) -> None:
    """The request groups' providers, from the allocation request taken (nova's
    ``get_request_group_mapping``): the PCI and port groups of the next instances read
    them."""
    mappings = alloc_req.get("mappings") or {}
    for group in req.requested_resources:
        if group.requester_id in mappings:
            group.provider_uuids = list(mappings[group.requester_id])


def narrow(req: SchedulingRequest, hosts: list[HostState]) -> tuple[list[HostState], bool]:
    """nova's pre-filter narrowing (``get_filtered_hosts``): requested destination,
    ignore_hosts, force_hosts and force_nodes. Returns the hosts and whether the filters
    must be skipped (forced). What each step took out is kept in ``req.trace.narrowed``."""
    narrowed: list[tuple[int, str]] = []

    def keep(selected: list[HostState], why: str) -> list[HostState]:
        if len(selected) < len(hosts):
            narrowed.append((len(hosts) - len(selected), why))
        return selected

    dest = req.requested_destination
    if dest is not None and dest.host:
        hosts = keep(
            [
                h
                for h in hosts
                if h.host == dest.host and (not dest.node or h.nodename == dest.node)
            ],
            "not the requested destination",
        )
    if req.ignore_hosts:
        ignored = {h.lower() for h in req.ignore_hosts}
        hosts = keep([h for h in hosts if h.host.lower() not in ignored], "in ignore_hosts")
    forced = False
    if req.force_hosts:
        wanted = {h.lower() for h in req.force_hosts}
        hosts = keep([h for h in hosts if h.host.lower() in wanted], "not in force_hosts")
        forced = True
    if req.force_nodes:
        # nova compares forced node names as given (host names case-insensitively)
        wanted = set(req.force_nodes)
        hosts = keep([h for h in hosts if h.nodename in wanted], "not in force_nodes")
        forced = True
    if forced and req.get_scheduler_hint("_nova_check_type") is not None:
        forced = False  # nova runs the filters on forced hosts for rebuild/evacuate checks
    req.trace.narrowed = narrowed
    return hosts, forced
