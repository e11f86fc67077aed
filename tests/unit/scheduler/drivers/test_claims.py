"""The claimer, on its own: what a claim Placement takes, refuses, cannot be sent or conflicts
on does to the request's trace and to the caller."""

from __future__ import annotations

import pytest

from placement_client.api import ClaimConflict, ConsumerGenerationConflict, PlacementConnectionError
from scheduler.conf import CONF
from scheduler.drivers.claims import Claimer
from scheduler.exceptions import AllocationUpdateFailed
from scheduler.request import SchedulingRequest
from tests.unit.scheduler.drivers.fakes import FakePlacement, alloc_request, make_host, make_spec


@pytest.fixture
def hosts():
    return [make_host("h1"), make_host("h2")]


def _req(hosts) -> SchedulingRequest:
    req = SchedulingRequest.of(make_spec(), request_id="req-claims", project_id="p", user_id="u")
    req.scratch.allocation_candidates = {h.uuid: [alloc_request(h)] for h in hosts}
    return req


def test_a_claim_placement_takes_is_the_hosts_first_allocation_request(hosts):
    placement = FakePlacement(hosts)
    req = _req(hosts)
    got = Claimer(placement, None, CONF).claim(req, hosts[0], "i-1")
    assert got == alloc_request(hosts[0])
    assert placement.claims["i-1"]["host"] == "h1"
    assert placement.claims["i-1"]["request_id"] == "req-claims"
    assert req.trace.claims_made == 1


def test_a_host_without_a_candidate_is_not_claimed(hosts):
    placement = FakePlacement(hosts)
    req = _req(hosts[:1])
    assert Claimer(placement, None, CONF).claim(req, hosts[1], "i-1") is None
    assert placement.claim_attempts == []


def test_a_refused_claim_lets_the_caller_try_the_next_host(hosts):
    placement = FakePlacement(hosts)
    placement.claim_errors["h1"] = ClaimConflict("no room", status=409)
    req = _req(hosts)
    assert Claimer(placement, None, CONF).claim(req, hosts[0], "i-1") is None
    assert req.trace.claim_failures == 1 and not req.trace.placement_unreachable


def test_a_consumer_generation_conflict_is_novas_allocation_update_failed(hosts):
    placement = FakePlacement(hosts)
    placement.consumer_errors["i-1"] = ConsumerGenerationConflict("changed", status=409)
    with pytest.raises(AllocationUpdateFailed):
        Claimer(placement, None, CONF).claim(_req(hosts), hosts[0], "i-1")


def test_a_claim_that_never_reached_placement_stops_the_request(hosts):
    placement = FakePlacement(hosts)
    placement.claim_errors["h1"] = PlacementConnectionError("connection refused")
    req = _req(hosts)
    assert Claimer(placement, None, CONF).claim(req, hosts[0], "i-1") is None
    assert req.trace.placement_unreachable and req.trace.claims_unsent == 1
