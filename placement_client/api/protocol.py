"""What the driver asks of Placement: the seam ``PlacementClient``, the what-if replay's
Placement (``scheduler/replay/fleet.py``) and the tests' stand-ins all implement, so that the
driver, its claimer, its candidate source and its held-claims check are handed any of them.
(The request filters' routed-network lookups use a client of their own, from ``[placement]``.)"""

from __future__ import annotations

from typing import Any, Protocol

from placement_client.api.client import AllocationCandidates
from placement_client.api.shapes import AllocationRequest


class Placement(Protocol):
    def get_allocation_candidates(
        self, query: Any, request_id: str | None = None, *, not_before: float | None = None
    ) -> AllocationCandidates:
        """``GET /allocation_candidates``: the candidates of one query (its object or its
        query string); an answer sent at or after ``not_before`` may be shared."""
        ...

    def claim_resources(
        self,
        consumer_uuid: str,
        alloc_request: AllocationRequest,
        project_id: str,
        user_id: str,
        *,
        request_id: str | None = None,
    ) -> None:
        """``PUT /allocations/{consumer}``: claim one allocation request (raises
        ``ClaimConflict``, ``ConsumerGenerationConflict``, ``ClaimOutcomeUnknown``, ...)."""
        ...

    def get_allocations_for_consumer(
        self, consumer_uuid: str, request_id: str | None = None
    ) -> dict[str, Any]:
        """``GET /allocations/{consumer}``: ``{"allocations": {rp: {"resources": ...}}}``."""
        ...

    def delete_allocation_for_instance(
        self, consumer_uuid: str, request_id: str | None = None
    ) -> bool:
        """``DELETE /allocations/{consumer}``: whether something was deleted."""
        ...
