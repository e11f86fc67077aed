"""Placement 16 with two flaws of its allocation-candidates search mended, served by gunicorn
for tests/differential/test_placement_trees.py (``placement_mended:application``).

The provider view follows Placement's rules; where Placement's code departs from its own rules
in a way that depends on the iteration order of its Python sets, the view keeps the rule. The
differential test compares the view with this Placement exactly, and this Placement with the
real one where the flaws cannot apply. Each mend changes a behaviour, not Placement's code:

1. **Every tree a sharing provider serves keeps the unsuffixed group's candidate.** The
   unsuffixed group's candidates are collected in a set of ``AllocationRequest`` objects
   whose equality ignores the anchor (the tree the request is for), so a candidate served
   only by a sharing provider survives for one of the trees it serves. Here the anchor takes
   part in equality; requests equal but for their anchor are made one just before ``limit``
   is applied, as the real Placement makes them one when it merges the groups.
2. **Amounts merged per provider are not written into shared objects.** With
   ``group_policy=isolate`` the merge adds the amounts of a class two groups take from one
   provider into the ``AllocationRequestResource`` of one of them, which later candidates
   share (VCPU 1 + 2 became 5 on a second candidate). Here it is copied first, as it already
   is with ``group_policy=none``.
"""

from __future__ import annotations

import copy

from placement.objects import allocation_candidate, research_context

_Request = allocation_candidate.AllocationRequest


def _key(request: _Request) -> tuple:
    return (
        frozenset(
            (r.resource_provider.id, r.resource_class, r.amount) for r in request.resource_requests
        ),
        frozenset((s, frozenset(rps)) for s, rps in request.mappings.items()),
    )


def _eq(self: _Request, other: object) -> bool:
    if not isinstance(other, _Request):
        return NotImplemented
    return (
        _key(self) == _key(other)
        and self.anchor_root_provider_uuid == other.anchor_root_provider_uuid
    )


def _hash(self: _Request) -> int:
    return hash((_key(self)[0], self.anchor_root_provider_uuid))


_Request.__eq__ = _eq
_Request.__hash__ = _hash

_Context = research_context.RequestWideSearchContext
_limit_results = _Context.limit_results


def _limit_once(self, alloc_request_objs, summary_objs):
    unique = {}
    for request in alloc_request_objs:
        unique.setdefault(_key(request), request)
    return _limit_results(self, list(unique.values()), summary_objs)


def _copy_always(self, arr):
    if arr.resource_class in self.multi_group_rcs:
        return copy.copy(arr)
    return arr


_Context.limit_results = _limit_once
_Context.copy_arr_if_needed = _copy_always

from placement.wsgi.api import application  # noqa: E402 - served after the mends

__all__ = ["application"]
