"""PciPassthroughFilter: only hosts with free PCI devices for all the PCI requests together.

As nova's filter: per allocation candidate, ``support_requests`` with the candidate's
``mappings`` (the providers Placement allocated the PCI devices from), keeping the candidates
that pass; no NUMA restriction here (NUMATopologyFilter checks the NUMA affinity). The
matching rules live in ``scheduler/resources/pci.py``.
"""

from __future__ import annotations

import logging
from typing import Any

from filters import PASS_ALL, BaseHostFilter, Reject
from scheduler.resources import pci
from scheduler.resources.shapes import PciRequest

LOG = logging.getLogger(__name__)

NO_PCI_DEVICES = Reject("host has no PCI devices")
NO_CANDIDATE = Reject("no allocation candidate left")


class PciPassthroughFilter(BaseHostFilter):
    """Passes hosts whose free PCI devices (by vendor, product and tags such as the physical
    network) can satisfy all the PCI requests of the instance together, one after the other:
    flavor aliases and SR-IOV ports. Requests without PCI devices pass everywhere."""

    RUN_ON_REBUILD = False
    # every instance of a multi-create takes devices: check each one
    run_filter_once_per_request = False

    def prepare(self, spec_obj: Any) -> tuple[Any, tuple[PciRequest, ...]] | Any:
        """The request and its PCI requests (decoded at the RPC edge); PASS_ALL when it
        has none."""
        requests = spec_obj.pci_requests
        if not requests:
            return PASS_ALL
        return spec_obj, requests

    def check(self, host_state: Any, prepared: tuple[Any, tuple[PciRequest, ...]]) -> bool | Reject:
        # the narrowed allocation candidates are written to the request
        spec_obj, requests = prepared
        pools = pci.pools_of(host_state, host_state.pci_stats)
        if not pools:
            self._debug(host_state, requests)
            # as nova's filter_candidates: none of the host's candidates passes
            spec_obj.keep_candidates(host_state, [])
            return NO_PCI_DEVICES

        if not spec_obj.scratch.allocation_candidates:
            # no allocation candidates (rebuild, or no Placement): check the host itself
            failed = pci.first_unsupported(pools, requests)
            if failed is not None:
                self._debug(host_state, requests)
                return Reject(pci.request_reason(failed))
            return True

        candidates = spec_obj.candidates_for(host_state)
        good: list[dict[str, Any]] = []
        # the answer depends on a candidate only through the providers of its PCI groups
        answers: dict[Any, Any] = {}
        failed: Any = None
        for candidate in candidates:
            mapping = candidate.get("mappings")
            key = pci.placement_signature(mapping, requests)
            if key not in answers:
                answers[key] = pci.first_unsupported(pools, requests, mapping)
            failed = answers[key]
            if failed is None:
                good.append(candidate)
        if len(good) != len(candidates):
            spec_obj.keep_candidates(host_state, good)
        if good:
            return True
        self._debug(host_state, requests)
        if not candidates:
            failed = pci.first_unsupported(pools, requests)
            if failed is None:
                return NO_CANDIDATE
        return Reject(pci.request_reason(failed))

    @staticmethod
    def _debug(host_state: Any, requests: tuple[PciRequest, ...]) -> None:
        if LOG.isEnabledFor(logging.DEBUG):
            LOG.debug(
                "%(host_state)s doesn't have the required PCI devices (%(requests)s)",
                {"host_state": host_state, "requests": requests},
            )
