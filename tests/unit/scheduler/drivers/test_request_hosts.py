"""The hosts a request starts from, on their own: prefilters, the candidates' source, the
HostStates of the candidates, a forced host's tree, and counting an instance on a host."""

from __future__ import annotations

import pytest

from placement_client.api import PlacementClientError, PlacementConnectionError
from scheduler.conf import CONF
from scheduler.drivers.candidates import CandidateSource
from scheduler.drivers.held_claims import HeldClaims
from scheduler.drivers.request_hosts import RequestHosts, by_provider
from scheduler.exceptions import NoValidHost
from scheduler.objects import Destination, InstanceGroup
from scheduler.request import SchedulingRequest
from tests.unit.scheduler.drivers.fakes import (
    FakeHostManager,
    FakePlacement,
    alloc_request,
    make_host,
    make_spec,
)


def _hosts_of(hosts, placement=None):
    placement = placement or FakePlacement(hosts)
    manager = FakeHostManager(hosts)
    source = CandidateSource(placement, None, CONF)
    return RequestHosts(manager, source, HeldClaims(placement), CONF), placement, manager


def _req(**spec):
    return SchedulingRequest.of(make_spec(**spec), request_id="req-hosts")


def test_the_candidates_hosts_and_their_allocation_requests_by_provider():
    hosts = [make_host("h1"), make_host("h2"), make_host("h3")]
    placement = FakePlacement(hosts)
    placement.no_candidates = {"h3"}  # in the summaries, without an allocation request
    rh, _, manager = _hosts_of(hosts, placement)
    req = _req()
    candidates, got = rh.placement_candidates(req)
    assert [h.host for h in got] == ["h1", "h2", "h3"]  # every provider summarised
    assert set(req.scratch.allocation_candidates) == {"rp-h1", "rp-h2"}
    assert req.candidates_for(got[0]) == [alloc_request(hosts[0])]
    assert req.candidates_for(got[2]) == []
    assert req.scratch.provider_summaries is candidates.provider_summaries
    assert req.trace.candidate_source == "placement" and req.trace.candidate_count == 2
    # the aggregates were read before the prefilters, then the host states
    assert manager.calls.index("sync_aggregates") < manager.calls.index("get_host_states_by_uuids")


def test_placement_refusing_or_unreachable_is_a_novalidhost_that_says_which():
    hosts = [make_host("h1")]
    rh, placement, _ = _hosts_of(hosts)
    placement.candidates_error = PlacementClientError("no such trait", status=400)
    with pytest.raises(NoValidHost) as refused:
        rh.placement_candidates(_req())
    assert refused.value.cause == "placement_refused" and "no such trait" in refused.value.reason
    placement.candidates_error = PlacementConnectionError("connection refused")
    with pytest.raises(NoValidHost) as down:
        rh.placement_candidates(_req())
    assert down.value.cause == "placement_unreachable"


def test_candidates_without_a_known_compute_node_are_no_valid_host():
    placed = [make_host("h1")]
    rh, _, _ = _hosts_of([], FakePlacement(placed))  # Placement knows h1, no cell does
    with pytest.raises(NoValidHost) as exc:
        rh.placement_candidates(_req())
    assert exc.value.cause == "no_compute_node"


def test_a_requested_node_is_asked_as_its_tree_and_names_its_host():
    hosts = [make_host("h1"), make_host("h2")]
    rh, placement, _ = _hosts_of(hosts)
    req = _req(requested_destination=Destination(node="H2"))
    rh.placement_candidates(req)
    (q,) = placement.queries
    assert "in_tree=rp-h2" in q.describe()
    assert (req.requested_destination.host, req.requested_destination.node) == ("h2", "h2")


def test_an_unknown_forced_host_is_no_such_host():
    rh, placement, _ = _hosts_of([make_host("h1")])
    with pytest.raises(NoValidHost) as exc:
        rh.placement_candidates(_req(force_hosts=["nowhere"]))
    assert exc.value.cause == "no_such_host" and placement.queries == []


def test_all_hosts_asks_placement_nothing():
    hosts = [make_host("h1"), make_host("h2")]
    rh, placement, _ = _hosts_of(hosts)
    assert [h.host for h in rh.all_hosts(_req())] == ["h1", "h2"]
    assert placement.queries == []


def test_consume_counts_on_the_host_and_the_server_group():
    host = make_host("h1", ram_mb=8192)
    rh, _, manager = _hosts_of([host])
    group = InstanceGroup(uuid="g-1", policy="anti-affinity", members=["i-1"], hosts=[])
    req = _req(ram_mb=1024, group=group)
    free = host.free_ram_mb
    key = rh.consume(req, host, "i-1", claimed=True)
    assert key == "i-1" and host.free_ram_mb == free - 1024
    assert req.instance_group.hosts == ["h1"] and "i-1" in host.instances
    assert "track_consumption" in manager.calls


def test_by_provider_keeps_the_answers_order_per_provider():
    a = {"allocations": {"rp-1": {}}, "n": 1}
    b = {"allocations": {"rp-2": {}}, "n": 2}
    c = {"allocations": {"rp-1": {}, "rp-shared": {}}, "n": 3}
    d = {"allocations": {"rp-1": {}}, "n": 4}
    got = by_provider([a, b, c, d])
    assert [r["n"] for r in got["rp-1"]] == [1, 3, 4]
    assert [r["n"] for r in got["rp-2"]] == [2]
    assert [r["n"] for r in got["rp-shared"]] == [3]
