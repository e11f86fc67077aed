"""A reply's alternates, on their own: the same cell, never a chosen host, and with claims only
hosts that have an allocation candidate, which they carry unclaimed."""

from __future__ import annotations

from scheduler.conf import CONF
from scheduler.drivers.alternates import with_alternates
from scheduler.drivers.claims import Claimer
from scheduler.framework import Framework
from scheduler.request import SchedulingRequest
from tests.unit.scheduler.drivers.fakes import (
    CELL1,
    CELL2,
    FakePlacement,
    alloc_request,
    make_host,
    make_spec,
)


def _reply(hosts, chosen, *, claimed, candidates=None, return_alternates=True):
    req = SchedulingRequest.of(make_spec(), request_id="req-alts")
    with_candidates = hosts if candidates is None else candidates
    req.scratch.allocation_candidates = {h.uuid: [alloc_request(h)] for h in with_candidates}
    placement = FakePlacement(hosts)
    return with_alternates(
        req,
        [(h, alloc_request(h) if claimed else None) for h in chosen],
        hosts,
        0,
        return_alternates=return_alternates,
        claimed=claimed,
        framework=Framework.from_conf(CONF),
        claimer=Claimer(placement, None, CONF),
        conf=CONF,
    ), placement


def test_alternates_are_other_hosts_of_the_chosen_hosts_cell():
    a, b = make_host("a"), make_host("b")
    other_cell = make_host("c", cell=CELL2)
    (reply,), _ = _reply([a, other_cell, b], [a], claimed=True)
    assert [s.service_host for s in reply] == ["a", "b"]
    assert all(s.cell_uuid == CELL1 for s in reply)


def test_with_claims_an_alternate_needs_a_candidate_and_is_not_claimed():
    a, b, c = make_host("a"), make_host("b"), make_host("c")
    (reply,), placement = _reply([a, b, c], [a], claimed=True, candidates=[a, c])
    assert [s.service_host for s in reply] == ["a", "c"]
    assert reply[1].allocation_request is not None
    assert placement.claims == {}  # the conductor claims an alternate only if it needs it


def test_without_claims_no_selection_carries_an_allocation_request():
    a, b = make_host("a"), make_host("b")
    (reply,), _ = _reply([a, b], [a], claimed=False, candidates=[])
    assert [s.service_host for s in reply] == ["a", "b"]
    assert all(s.allocation_request is None for s in reply)


def test_no_alternates_unless_asked_and_a_chosen_host_is_never_another_ones_alternate():
    a, b = make_host("a"), make_host("b")
    replies, _ = _reply([a, b], [a, b], claimed=True)
    assert [[s.service_host for s in r] for r in replies] == [["a"], ["b"]]
    (reply,), _ = _reply([a, b], [a], claimed=True, return_alternates=False)
    assert [s.service_host for s in reply] == ["a"]
