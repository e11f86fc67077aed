"""NUMATopologyFilter: only hosts whose NUMA cells can hold the instance's NUMA topology.

The fitting rules live in ``scheduler/resources/numa.py`` (and the PCI NUMA affinity in
``scheduler/resources/pci.py``); this module applies them per host and per allocation candidate,
with the limits nova's filter builds: the host's allocation ratios and the request's network
metadata (whose physnets and tunnels must be NUMA-local to the chosen cells), recorded for the
host's Selection.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from filters import PASS_ALL, BaseHostFilter, Reject
from scheduler.resources import numa, pci
from scheduler.resources.shapes import PciRequest

LOG = logging.getLogger(__name__)

NO_HOST_TOPOLOGY = Reject("host has no NUMA topology")
NO_SMT = Reject(numa.REQUIRE_NO_SMT)
NO_CANDIDATE = Reject("no allocation candidate left")

# what nova's HostState falls back to when a compute node reports no ratio
DEFAULT_CPU_RATIO = 4.0
DEFAULT_RAM_RATIO = 1.0


@dataclass(slots=True)
class _Wanted:
    """What the request asks for, worked out once per request (not per host): what
    ``prepare`` hands to ``check``."""

    # the request itself: the limits and the narrowed allocation candidates are written to it
    spec_obj: Any
    topology: numa.InstanceTopology | None
    invalid: Reject | None
    requires_smt: bool
    pci_requests: tuple[PciRequest, ...]
    network: numa.NetworkMetadata | None
    # [compute] packing_host_numa_cells_allocation_strategy, read once per pass
    pack: bool
    # did Placement give this request allocation candidates? (not on rebuild)
    from_placement: bool
    # fits already worked out in this pass, by (host topology, limits, PCI devices per cell):
    # many hosts of a fleet look alike
    fits: dict[Any, numa.HostFit] = field(default_factory=dict)

    @classmethod
    def of(cls, spec_obj: Any) -> _Wanted:
        extra_specs = spec_obj.flavor.extra_specs or {}
        image = getattr(spec_obj, "image", None)
        image_props = (image.properties if image is not None else None) or {}
        topology = None
        invalid = None
        network = None
        try:
            topology = numa.requested_instance_topology(spec_obj)
            network = numa.requested_network_metadata(spec_obj)
        except (numa.InvalidNUMARequest, KeyError, TypeError, ValueError) as exc:
            LOG.warning("Instance %s has an invalid NUMA request: %s", spec_obj.instance_uuid, exc)
            invalid = Reject("invalid NUMA request in flavor or image")
        return cls(
            spec_obj=spec_obj,
            topology=topology,
            invalid=invalid,
            requires_smt=numa.requires_smt(extra_specs, image_props),
            pci_requests=spec_obj.pci_requests,
            network=network,
            pack=numa.packing_strategy(),
            from_placement=_has_candidates(spec_obj),
        )


class NUMATopologyFilter(BaseHostFilter):
    """Passes hosts whose NUMA cells can hold the instance's NUMA nodes: enough free pinned
    CPUs (by the thread policy), huge pages and memory per cell, within the host's CPU and RAM
    allocation ratios, with the PCI devices NUMA-local as their policy asks and the ports'
    physnets and tunnels NUMA-local where the host declares an affinity. Requests without a
    NUMA topology pass everywhere."""

    RUN_ON_REBUILD = False
    # every instance of a multi-create takes CPUs and memory from the cells: check each one
    run_filter_once_per_request = False

    def prepare(self, spec_obj: Any) -> _Wanted | Any:
        """The request's topology, worked out once for all hosts; PASS_ALL when it asks for
        no NUMA topology and no SMT siblings."""
        wanted = _Wanted.of(spec_obj)
        if wanted.topology is None and wanted.invalid is None and not wanted.requires_smt:
            return PASS_ALL
        return wanted

    def check(self, host_state: Any, wanted: _Wanted) -> bool | Reject:
        spec_obj = wanted.spec_obj
        host_topology = numa.host_topology_of(host_state, host_state.numa_topology)

        # nova's CPU-policy check comes first and looks at the flavor and image as given
        if wanted.requires_smt and host_topology is not None and not host_topology.has_threads:
            self._debug(
                "%s fails CPU policy: no SMT siblings for thread policy require", host_state
            )
            return NO_SMT
        if wanted.invalid is not None:
            return wanted.invalid
        if wanted.topology is None:
            return True
        if host_topology is None:
            self._debug("%s fails NUMA topology: the host reports none", host_state)
            return NO_HOST_TOPOLOGY

        limits = numa.Limits(
            cpu_allocation_ratio=host_state.cpu_allocation_ratio or DEFAULT_CPU_RATIO,
            ram_allocation_ratio=host_state.ram_allocation_ratio or DEFAULT_RAM_RATIO,
            network_metadata=wanted.network,
        )
        requests = wanted.pci_requests
        pools = pci.pools_of(host_state, host_state.pci_stats)
        # the cells' PCI devices order them: last without PCI requests, first with
        pci_counts = numa.pci_device_counts(pools)
        key = (host_topology, limits, frozenset(pci_counts.items()))
        fitter = wanted.fits.get(key)
        if fitter is None:
            fitter = numa.HostFit(
                host_topology, wanted.topology, limits, pci_counts, bool(requests), wanted.pack
            )
            wanted.fits[key] = fitter
        if not fitter.possible:
            # no candidate can fit: as nova, the host is left with none
            if wanted.from_placement:
                spec_obj.keep_candidates(host_state, [])
            self._debug("%s fails NUMA topology: %s", host_state, fitter.reason)
            return Reject(fitter.reason or "does not fit")

        sockets = {cell.id: cell.socket for cell in host_topology.cells}

        def fits(mapping: Any) -> numa.FitResult:
            if not requests:
                return fitter.fit()
            return fitter.fit(
                lambda cell_ids: pci.support_requests(pools, requests, mapping, cell_ids, sockets)
            )

        if not wanted.from_placement:
            # no allocation candidates (rebuild, or no Placement): fit the host itself
            result = fits(None)
            if not result:
                self._debug("%s fails NUMA topology: %s", host_state, result.reason)
                return Reject(result.reason or "does not fit")
        else:
            candidates = spec_obj.candidates_for(host_state)
            good: list[dict[str, Any]] = []
            # the answer depends on a candidate only through its PCI providers
            answers: dict[Any, numa.FitResult] = {}
            result = None
            for candidate in candidates:
                mapping = candidate.get("mappings")
                key = pci.placement_signature(mapping, requests) if requests else None
                result = answers.get(key)
                if result is None:
                    result = answers[key] = fits(mapping)
                if result:
                    good.append(candidate)
            if len(good) != len(candidates):
                spec_obj.keep_candidates(host_state, good)
            if not good:
                if result is None:
                    # the host has no candidate of its own: say whether it would fit at all
                    result = fits(None)
                    if result:
                        return NO_CANDIDATE
                self._debug("%s fails NUMA topology: %s", host_state, result.reason)
                return Reject(result.reason or "does not fit")

        spec_obj.set_host_limit(host_state, "numa_topology", limits.to_dict())
        return True

    @staticmethod
    def _debug(message: str, host_state: Any, *args: Any) -> None:
        if LOG.isEnabledFor(logging.DEBUG):
            LOG.debug(message, host_state, *args)


def _has_candidates(spec_obj: Any) -> bool:
    """Whether Placement's candidates came with the request (none for a rebuild, or a
    RequestSpec a test hands the filter directly)."""
    scratch = getattr(spec_obj, "scratch", None)
    return bool(scratch is not None and scratch.allocation_candidates)
