"""The JSON shapes of Placement's answers that travel through the scheduler, typed.

They stay plain dicts at run time (Placement's JSON, parsed once and not copied; nova's NUMA
and PCI filters and third-party plugins read them as dicts), so these are ``TypedDict``s:
names for readers and type checkers, no cost on the request path.
"""

from __future__ import annotations

from typing import TypedDict


class ProviderPart(TypedDict):
    """One provider's part of an allocation request: ``{"resources": {class: amount}}``."""

    resources: dict[str, int]


class _Mappings(TypedDict, total=False):
    # request group suffix ("" for the unsuffixed group) -> the providers that satisfy it
    # (microversion 1.34 and later)
    mappings: dict[str, list[str]]


class AllocationRequest(_Mappings):
    """One allocation request of ``GET /allocation_candidates`` (what ``PUT
    /allocations/{consumer}`` claims): ``{"allocations": {provider uuid: ProviderPart},
    "mappings": {suffix: [provider uuid]}}``."""

    allocations: dict[str, ProviderPart]


# a consumer's allocations as GET /allocations/{consumer} holds them, without the generations
Allocations = dict[str, ProviderPart]
