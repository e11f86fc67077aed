"""HTTP client for the Placement API (a leaf package: it imports nothing of the scheduler).

Public API::

    PlacementClient(endpoint, *, token="admin", session=None, ks_adapter=None, timeout=30.0,
                    claim_retries=4, retry_backoff=1.0)
    AllocationCandidatesQuery, QueryGroup      the GET /allocation_candidates query
    AllocationCandidates, ProviderSpec         answers and inputs
    AllocationRequest, Allocations             the shapes of what is claimed (TypedDicts)
    Placement                                  the Protocol of what the request path asks
    PlacementError and its subclasses          typed failures
"""

from placement_client.api.client import (
    MV_CANDIDATES,
    MV_CLAIM,
    AllocationCandidates,
    PlacementClient,
    ProviderSpec,
)
from placement_client.api.errors import (
    ClaimConflict,
    ClaimConnectionLost,
    ClaimOutcomeUnknown,
    ClaimServerError,
    ConsumerGenerationConflict,
    PlacementClientError,
    PlacementConnectionError,
    PlacementError,
    PlacementServerError,
)
from placement_client.api.protocol import Placement
from placement_client.api.query import AllocationCandidatesQuery, QueryGroup
from placement_client.api.shapes import AllocationRequest, Allocations, ProviderPart

__all__ = [
    "MV_CANDIDATES",
    "MV_CLAIM",
    "AllocationCandidates",
    "AllocationRequest",
    "Allocations",
    "ProviderPart",
    "AllocationCandidatesQuery",
    "ClaimConflict",
    "ClaimConnectionLost",
    "ClaimOutcomeUnknown",
    "ClaimServerError",
    "ConsumerGenerationConflict",
    "Placement",
    "PlacementClient",
    "PlacementClientError",
    "PlacementConnectionError",
    "PlacementError",
    "PlacementServerError",
    "ProviderSpec",
    "QueryGroup",
]
