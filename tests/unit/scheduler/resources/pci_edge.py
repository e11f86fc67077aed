"""pci's request functions over nova's request data as the tests write it (plain dicts that a
test may change before it asks): each request is decoded first, as the RPC edge decodes a
request's (``pci.request_from_primitive``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from scheduler.resources import pci


def decoded(request: Any) -> pci.PciRequest:
    return request if isinstance(request, pci.PciRequest) else pci.request_from_primitive(request)


def decoded_all(requests: Iterable[Any]) -> tuple[pci.PciRequest, ...]:
    return tuple(decoded(r) for r in requests)


def support_requests(pools: Any, requests: Iterable[Any], *args: Any, **kwargs: Any) -> bool:
    return pci.support_requests(pools, decoded_all(requests), *args, **kwargs)


def apply_requests(pools: Any, requests: Iterable[Any], *args: Any, **kwargs: Any) -> pci.Applied:
    return pci.apply_requests(pools, decoded_all(requests), *args, **kwargs)


def first_unsupported(pools: Any, requests: Iterable[Any], *args: Any, **kwargs: Any) -> Any:
    return pci.first_unsupported(pools, decoded_all(requests), *args, **kwargs)


def matching_pools(pools: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
    return pci.matching_pools(pools, decoded(request), *args, **kwargs)


def placement_signature(mapping: Any, requests: Iterable[Any]) -> Any:
    return pci.placement_signature(mapping, decoded_all(requests))


def request_reason(request: Any) -> str:
    return pci.request_reason(decoded(request))


def rp_uuids_for_request(mapping: Any, request: Any) -> list[str]:
    return pci.rp_uuids_for_request(mapping, decoded(request))
