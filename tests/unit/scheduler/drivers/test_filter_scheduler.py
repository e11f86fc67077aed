"""Unit tests of the filter scheduler driver, with a fake Placement and a fake host manager.

The filters and weighers are the real ones with the default configuration, so a host with
more free RAM, vCPUs and disk is the better one, and ComputeFilter drops hosts whose service
is disabled or down.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pytest

from filters import BaseHostFilter
from filters.handler import FilterError, FilterHandler
from placement_client.api import (
    ClaimConflict,
    ClaimServerError,
    ConsumerGenerationConflict,
    PlacementClientError,
    PlacementConnectionError,
    PlacementServerError,
)
from scheduler.conf import CONF
from scheduler.drivers import filter_scheduler
from scheduler.drivers.claims import ClaimLocks, DeferredDeletes
from scheduler.drivers.filter_scheduler import FilterScheduler
from scheduler.exceptions import AllocationUpdateFailed, NoValidHost
from scheduler.hosts.state import HostState
from scheduler.objects import (
    Aggregate,
    Destination,
    ImageMeta,
    InstanceGroup,
    RequestGroup,
    RequestSpec,
)
from tests.unit.scheduler.drivers.fakes import (
    CELL1,
    CELL2,
    CONTEXT,
    FakeHostManager,
    FakePlacement,
    alloc_request,
    make_host,
    make_spec,
)


class Cloud:
    """A driver wired to the fakes, for one test."""

    def __init__(self, hosts: list[HostState], aggregates: list[Aggregate] | None = None):
        self.hosts = {h.nodename: h for h in hosts}
        self.placement = FakePlacement(hosts)
        self.host_manager = FakeHostManager(hosts, aggregates)
        self.driver = FilterScheduler(placement=self.placement, host_manager=self.host_manager)
        # every request's own state, for tests of what scheduling recorded there
        self.requests: list[Any] = []
        new_request = self.driver.new_request

        def capture(context: Any, spec: RequestSpec, **kw: Any) -> Any:
            self.requests.append(new_request(context, spec, **kw))
            return self.requests[-1]

        self.driver.new_request = capture

    def select(self, spec: RequestSpec, uuids: list[str] | None = None, alternates=False):
        if uuids is None:
            uuids = [f"inst-{i}" for i in range(spec.num_instances)]
        return self.driver.select_destinations(CONTEXT, spec, uuids, alternates)


def chosen_hosts(result) -> list[str]:
    return [selections[0].service_host for selections in result]


@pytest.fixture
def cloud() -> Cloud:
    # the best host by the default weighers is the one with the most free RAM
    return Cloud(
        [
            make_host("host-a", ram_mb=4096),
            make_host("host-b", ram_mb=16384),
            make_host("host-c", ram_mb=8192),
        ]
    )


# -- one instance ------------------------------------------------------------------------------
def test_one_instance_claims_the_best_host_with_its_first_candidate(cloud):
    result = cloud.select(make_spec())
    assert len(result) == 1
    assert len(result[0]) == 1  # no alternates unless asked for
    sel = result[0][0]
    best = cloud.hosts["host-b"]
    assert sel.service_host == "host-b"
    assert sel.nodename == "host-b"
    assert sel.compute_node_uuid == best.uuid
    assert sel.cell_uuid == CELL1
    assert sel.allocation_request_version == "1.36"
    assert sel.allocation_request == alloc_request(best)
    assert sel.availability_zone == CONF.default_availability_zone == "nova"
    claim = cloud.placement.claims["inst-0"]
    assert claim["host"] == "host-b"
    assert claim["alloc_req"] is sel.allocation_request
    assert (claim["project_id"], claim["user_id"]) == ("project-1", "user-1")
    assert claim["request_id"] == "req-1"
    assert cloud.placement.claim_attempts == [("inst-0", "host-b")]


def test_claim_uses_the_context_project_when_the_spec_has_none(cloud):
    cloud.select(make_spec(project_id=None, user_id=None))
    claim = cloud.placement.claims["inst-0"]
    assert (claim["project_id"], claim["user_id"]) == ("ctx-project", "ctx-user")


def test_chosen_host_consumes_the_flavor(cloud):
    host = cloud.hosts["host-b"]
    cloud.select(make_spec(ram_mb=2048, vcpus=2, root_gb=20))
    assert host.free_ram_mb == 16384 - 2048
    assert host.vcpus_used == 2
    assert host.free_disk_mb == (100 - 20) * 1024
    assert host.num_instances == 1
    # the other hosts are untouched
    assert cloud.hosts["host-c"].free_ram_mb == 8192


class RecordLimitsFilter(BaseHostFilter):
    """Records limits for the request, as the Ram/Core/NUMA filters do."""

    def host_passes(self, host_state, spec_obj):
        spec_obj.set_host_limit(host_state, "memory_mb", 12288.0)
        spec_obj.set_host_limit(host_state, "vcpu", 32.0)
        return True


def test_selection_carries_the_host_aggregate_availability_zone_and_limits():
    agg = Aggregate(id=1, uuid="agg-1", name="az1", metadata={"availability_zone": "az1"})
    cloud = Cloud([make_host("host-a", aggregates=[agg])])
    defaults = cloud.driver.framework.filter_handler
    cloud.driver.framework.filter_handler = FilterHandler([RecordLimitsFilter()])
    sel = cloud.select(make_spec())[0][0]
    assert sel.availability_zone == "az1"
    assert sel.limits.memory_mb == 12288.0
    assert sel.limits.vcpu == 32.0
    assert sel.limits.disk_gb is None
    # the limits were this request's: the next request's filters record none
    cloud.driver.framework.filter_handler = defaults
    sel = cloud.select(make_spec())[0][0]
    assert (sel.limits.memory_mb, sel.limits.vcpu) == (None, None)


def test_default_availability_zone_follows_the_config(cloud):
    CONF.set_override("default_availability_zone", "zone-x")
    assert cloud.select(make_spec())[0][0].availability_zone == "zone-x"


def test_placement_query_is_built_from_the_spec_after_the_prefilters(cloud):
    cloud.select(make_spec(ram_mb=2048, vcpus=2, root_gb=20))
    (query,) = cloud.placement.queries
    params = dict(query.to_params())
    assert params["resources"] == "DISK_GB:20,MEMORY_MB:2048,VCPU:2"
    assert params["limit"] == str(CONF.scheduler.max_placement_results)
    # compute_status_filter ran
    assert params["root_required"] == "!COMPUTE_STATUS_DISABLED"


# -- alternates --------------------------------------------------------------------------------
def test_alternates_are_other_hosts_of_the_same_cell_in_weighed_order():
    hosts = [
        make_host("a", ram_mb=16384),
        make_host("b", ram_mb=12288),
        make_host("other-cell", ram_mb=14336, cell=CELL2),
        make_host("c", ram_mb=10240),
        make_host("d", ram_mb=8192),
    ]
    cloud = Cloud(hosts)
    (selections,) = cloud.select(make_spec(), alternates=True)
    # max_attempts 3: the chosen host and two alternates, best first, same cell only
    assert [s.service_host for s in selections] == ["a", "b", "c"]
    for alt in selections[1:]:
        host = cloud.hosts[alt.nodename]
        assert alt.cell_uuid == CELL1
        assert alt.allocation_request == alloc_request(host)
        assert alt.allocation_request_version == "1.36"
    # alternates are not claimed
    assert list(cloud.placement.claims) == ["inst-0"]
    assert cloud.placement.claims["inst-0"]["host"] == "a"


def test_number_of_alternates_follows_max_attempts():
    cloud = Cloud([make_host(f"h{i}", ram_mb=4096 + 1024 * i) for i in range(6)])
    CONF.set_override("max_attempts", 5, group="scheduler")
    (selections,) = cloud.select(make_spec(), alternates=True)
    assert [s.service_host for s in selections] == ["h5", "h4", "h3", "h2", "h1"]
    CONF.set_override("max_attempts", 1, group="scheduler")
    (selections,) = cloud.select(make_spec(), alternates=True)
    assert len(selections) == 1


def test_alternates_skip_hosts_without_allocation_candidates():
    cloud = Cloud(
        [make_host("a", ram_mb=16384), make_host("b", ram_mb=12288), make_host("c", ram_mb=8192)]
    )
    cloud.placement.no_candidates.add("b")
    (selections,) = cloud.select(make_spec(), alternates=True)
    assert [s.service_host for s in selections] == ["a", "c"]


def test_alternates_list_may_be_shorter_than_max_attempts():
    cloud = Cloud([make_host("a"), make_host("b", cell=CELL2)])
    (selections,) = cloud.select(make_spec(), alternates=True)
    assert len(selections) == 1


def test_no_alternates_when_not_asked(cloud):
    (selections,) = cloud.select(make_spec(), alternates=False)
    assert len(selections) == 1


def test_multi_create_alternates_never_name_a_chosen_host():
    hosts = [make_host(f"h{i}", ram_mb=4096 * (i + 1)) for i in range(5)]
    cloud = Cloud(hosts)
    # each instance takes most of a host's RAM: the two instances land on the two best hosts
    result = cloud.select(make_spec(ram_mb=12288, num_instances=2), alternates=True)
    chosen = chosen_hosts(result)
    assert chosen == ["h4", "h3"]
    for selections in result:
        alternates = [s.service_host for s in selections[1:]]
        assert len(alternates) == 2
        assert not set(alternates) & set(chosen)
        # nova: every instance's alternates come from one list sorted after all consumption
        assert alternates == ["h2", "h1"]


def test_multi_create_alternates_come_from_the_list_sorted_after_the_last_instance(cloud):
    # nova filters once more after the last instance: for an affinity group only the group's
    # host passes, and it is chosen, so no instance gets alternates
    group = InstanceGroup(uuid="g", policy="affinity", members=["i-1", "i-2"])
    result = cloud.select(make_spec(group=group, num_instances=2), ["i-1", "i-2"], True)
    assert [len(selections) for selections in result] == [1, 1]


def test_single_instance_alternates_use_its_own_sorted_list(cloud):
    group = InstanceGroup(uuid="g", policy="affinity", members=["i-1"])
    (selections,) = cloud.select(make_spec(group=group), ["i-1"], True)
    assert [s.service_host for s in selections] == ["host-b", "host-c", "host-a"]


# -- multi-create ------------------------------------------------------------------------------
def test_each_instance_sees_the_previous_instances_consumption(cloud):
    # host-b (16 GiB) minus 10 GiB is below host-c (8 GiB): the second instance goes to host-c
    result = cloud.select(make_spec(ram_mb=10240, num_instances=2))
    assert chosen_hosts(result) == ["host-b", "host-c"]
    assert set(cloud.placement.claims) == {"inst-0", "inst-1"}
    assert cloud.placement.claims["inst-1"]["host"] == "host-c"


def test_once_per_request_filters_keep_their_effect_for_later_instances():
    # the down host would be the best by weight; ComputeFilter runs only for instance 0
    down = make_host("down", ram_mb=65536, down=True)
    cloud = Cloud([down, make_host("a", ram_mb=8192), make_host("b", ram_mb=8192)])
    result = cloud.select(make_spec(ram_mb=1024, num_instances=4))
    assert "down" not in chosen_hosts(result)
    assert down.num_instances == 0


def test_anti_affinity_group_spreads_and_grows_the_group_hosts(cloud):
    uuids = ["i-1", "i-2", "i-3"]
    group = InstanceGroup(uuid="g", policy="anti-affinity", members=list(uuids))
    result = cloud.select(make_spec(group=group, num_instances=3), uuids)
    assert sorted(chosen_hosts(result)) == ["host-a", "host-b", "host-c"]
    # the request's copy of the group grows; the caller's spec is not changed
    assert cloud.requests[-1].instance_group.hosts == chosen_hosts(result)
    assert group.hosts == []
    for uuid, selections in zip(uuids, result, strict=True):
        assert uuid in cloud.hosts[selections[0].nodename].instances


def test_anti_affinity_with_more_instances_than_hosts_fails_and_rolls_back(cloud):
    uuids = ["i-1", "i-2", "i-3", "i-4"]
    group = InstanceGroup(uuid="g", policy="anti-affinity", members=list(uuids))
    with pytest.raises(NoValidHost) as err:
        cloud.select(make_spec(group=group, num_instances=4), uuids)
    assert "Found hosts for 3 of 4 instances" in err.value.reason
    assert "ServerGroupAntiAffinityFilter" in err.value.reason
    assert sorted(cloud.placement.deleted) == ["i-1", "i-2", "i-3"]
    assert cloud.placement.claims == {}
    # nothing of the request stays counted on any host
    assert all(h.consumptions() == {} and h.num_instances == 0 for h in cloud.hosts.values())


def test_affinity_group_stacks_on_one_host(cloud):
    group = InstanceGroup(uuid="g", policy="affinity", members=["i-1", "i-2", "i-3"])
    result = cloud.select(make_spec(group=group, num_instances=3), ["i-1", "i-2", "i-3"])
    assert chosen_hosts(result) == ["host-b"] * 3
    assert cloud.requests[-1].instance_group.hosts == ["host-b"] * 3
    assert group.hosts == []
    assert cloud.hosts["host-b"].num_instances == 3


def test_affinity_group_goes_to_the_host_the_group_already_uses(cloud):
    group = InstanceGroup(uuid="g", policy="affinity", members=["old", "i-1"], hosts=["host-a"])
    result = cloud.select(make_spec(group=group), ["i-1"])
    assert chosen_hosts(result) == ["host-a"]


def test_each_instance_is_filtered_with_its_own_uuid(cloud):
    seen: list[str | None] = []
    original = cloud.driver.filter_handler.run

    def spy(hosts, spec, index=0, request_id=None):
        seen.append(spec.instance_uuid)
        return original(hosts, spec, index, request_id=request_id)

    cloud.driver.filter_handler.run = spy
    cloud.select(make_spec(num_instances=2), ["u-1", "u-2"])
    assert seen == ["u-1", "u-2"]


# -- claim failures ----------------------------------------------------------------------------
def test_claim_conflict_on_the_best_host_moves_to_the_next(cloud):
    cloud.placement.claim_errors["host-b"] = ClaimConflict("host-b is full", status=409)
    result = cloud.select(make_spec())
    assert chosen_hosts(result) == ["host-c"]
    assert cloud.placement.claim_attempts == [("inst-0", "host-b"), ("inst-0", "host-c")]
    # nothing was consumed on the host that refused
    assert cloud.hosts["host-b"].num_instances == 0
    assert cloud.hosts["host-c"].num_instances == 1


def test_placement_server_error_on_a_claim_moves_to_the_next_host(cloud):
    cloud.placement.claim_errors["host-b"] = PlacementServerError("500 on PUT", status=500)
    assert chosen_hosts(cloud.select(make_spec())) == ["host-c"]


def test_all_claims_failing_is_no_valid_host_and_rolls_back_earlier_instances(cloud):
    cloud.placement.consumer_errors["inst-1"] = ClaimConflict("full", status=409)
    with pytest.raises(NoValidHost) as err:
        cloud.select(make_spec(num_instances=2))
    assert "Found hosts for 1 of 2 instances" in err.value.reason
    # instance 1 tried every host once
    tried = [h for c, h in cloud.placement.claim_attempts if c == "inst-1"]
    assert sorted(tried) == ["host-a", "host-b", "host-c"]
    assert "Placement refused 3 claim(s)" in err.value.reason
    assert cloud.placement.deleted == ["inst-0"]
    assert cloud.placement.claims == {}
    assert cloud.hosts["host-b"].consumptions() == {}
    assert cloud.hosts["host-b"].num_instances == 0


def test_placement_errors_on_every_claim_are_in_the_reason(cloud):
    for name in ("host-a", "host-b", "host-c"):
        cloud.placement.claim_errors[name] = PlacementServerError(f"boom on {name}", status=503)
    with pytest.raises(NoValidHost) as err:
        cloud.select(make_spec())
    assert "boom on" in err.value.reason
    assert cloud.placement.deleted == []


def test_consumer_generation_conflict_fails_the_request_and_rolls_back(cloud):
    cloud.placement.consumer_errors["inst-1"] = ConsumerGenerationConflict(
        "consumer generation conflict", status=409
    )
    with pytest.raises(AllocationUpdateFailed) as err:
        cloud.select(make_spec(num_instances=2))
    assert "inst-1" in str(err.value)
    # no other host is tried for that instance
    assert len([h for c, h in cloud.placement.claim_attempts if c == "inst-1"]) == 1
    assert cloud.placement.deleted == ["inst-0"]
    assert cloud.hosts["host-b"].consumptions() == {}
    assert cloud.hosts["host-b"].num_instances == 0


def test_a_failing_rollback_does_not_hide_the_original_error(cloud):
    cloud.placement.consumer_errors["inst-1"] = ClaimConflict("full", status=409)

    def broken_delete(consumer, request_id=None):
        raise PlacementServerError("delete failed", status=500)

    cloud.placement.delete_allocation_for_instance = broken_delete
    with pytest.raises(NoValidHost):
        cloud.select(make_spec(num_instances=2))


def test_a_filter_error_after_a_claim_rolls_the_claims_back(cloud):
    original = cloud.driver.filter_handler.run

    def broken_for_the_second(hosts, spec, index=0, request_id=None):
        if index == 1:
            raise FilterError("BrokenFilter", ValueError("bad data"))
        return original(hosts, spec, index, request_id=request_id)

    cloud.driver.filter_handler.run = broken_for_the_second
    with pytest.raises(NoValidHost) as err:
        cloud.select(make_spec(num_instances=2))
    assert "BrokenFilter" in err.value.reason
    assert cloud.placement.deleted == ["inst-0"]
    assert cloud.placement.claims == {}


# -- claims whose outcome is unknown, Placement unreachable, the deadline -------------------
def test_lost_answer_of_a_claim_that_landed_uses_the_host(cloud):
    cloud.placement.lost_answers["host-b"] = True
    result = cloud.select(make_spec())
    assert chosen_hosts(result) == ["host-b"]
    assert cloud.placement.checks == ["inst-0"]
    assert cloud.placement.claims["inst-0"]["host"] == "host-b"
    assert result[0][0].allocation_request == alloc_request(cloud.hosts["host-b"])
    assert cloud.placement.deleted == []
    assert cloud.hosts["host-b"].num_instances == 1


def test_5xx_claim_that_did_not_land_moves_on_to_the_next_host(cloud):
    cloud.placement.lost_answers["host-b"] = False
    cloud.placement.unknown_error = ClaimServerError
    result = cloud.select(make_spec())
    assert chosen_hosts(result) == ["host-c"]
    assert cloud.placement.checks == ["inst-0"]
    assert cloud.placement.claims["inst-0"]["host"] == "host-c"


def test_5xx_claim_that_left_something_else_is_deleted_before_moving_on(cloud):
    cloud.placement.lost_answers["host-b"] = False
    cloud.placement.unknown_error = ClaimServerError
    cloud.placement.foreign["inst-0"] = alloc_request(cloud.hosts["host-a"])
    result = cloud.select(make_spec())
    assert chosen_hosts(result) == ["host-c"]
    assert cloud.placement.deleted == ["inst-0"]
    assert cloud.placement.claims["inst-0"]["host"] == "host-c"


def test_lost_answer_of_a_claim_that_did_not_land_stops_as_placement_unreachable(cloud):
    cloud.placement.lost_answers["host-b"] = False
    with pytest.raises(NoValidHost) as err:
        cloud.select(make_spec(num_instances=2))
    # instance 0 on host-b timed out: no other host is tried
    assert cloud.placement.claim_attempts == [("inst-0", "host-b")]
    assert "Placement unreachable" in err.value.reason
    assert "timed out" in err.value.reason
    assert "refused" not in err.value.reason
    # deleted once more, in case the PUT lands after the check
    assert cloud.placement.deleted == ["inst-0"]
    assert cloud.placement.claims == {}


def test_landed_claim_of_a_failed_request_is_rolled_back(cloud):
    cloud.placement.lost_answers["host-b"] = True  # inst-0 lands there, answer lost
    cloud.placement.consumer_errors["inst-1"] = ClaimConflict("full", status=409)
    with pytest.raises(NoValidHost) as err:
        cloud.select(make_spec(num_instances=2))
    assert "Placement refused 3 claim(s)" in err.value.reason
    assert cloud.placement.deleted == ["inst-0"]
    assert cloud.placement.claims == {}


def test_claim_that_cannot_be_checked_is_deleted_by_the_rollback(cloud):
    cloud.placement.lost_answers["host-b"] = True
    cloud.placement.check_error = PlacementConnectionError("GET timed out")
    with pytest.raises(NoValidHost) as err:
        cloud.select(make_spec(num_instances=2))
    assert cloud.placement.claim_attempts == [("inst-0", "host-b")]
    assert "Placement unreachable" in err.value.reason
    assert "could not be checked" in err.value.reason
    assert cloud.placement.deleted == ["inst-0"]
    assert cloud.placement.claims == {}  # no orphan


def test_connection_refused_stops_after_the_first_host(cloud):
    refused = PlacementConnectionError("Cannot reach Placement: connection refused")
    refused.may_have_landed = False
    for name in ("host-a", "host-b", "host-c"):
        cloud.placement.claim_errors[name] = refused
    with pytest.raises(NoValidHost) as err:
        cloud.select(make_spec())
    assert len(cloud.placement.claim_attempts) == 1
    assert "Placement unreachable: Cannot reach Placement: connection refused" in err.value.reason
    assert "refused 1 claim" not in err.value.reason
    assert cloud.placement.checks == []  # nothing was sent: nothing to check


def test_5xx_on_every_claim_is_not_called_a_refusal(cloud):
    cloud.placement.unknown_error = ClaimServerError
    for name in ("host-a", "host-b", "host-c"):
        cloud.placement.lost_answers[name] = False
    with pytest.raises(NoValidHost) as err:
        cloud.select(make_spec())
    assert "3 claim(s) failed on a Placement error" in err.value.reason
    assert "refused" not in err.value.reason


def test_deadline_stops_claiming_and_rolls_back(cloud, monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(filter_scheduler, "_clock", lambda: now[0])
    CONF.set_override("request_deadline", 2.0, group="scheduler")
    try:

        def slow(consumer, host):
            now[0] += 1.5  # each claim takes 1.5 s

        cloud.placement.on_claim = slow
        with pytest.raises(NoValidHost) as err:
            cloud.select(make_spec(num_instances=3))
    finally:
        CONF.clear_override("request_deadline", group="scheduler")
    assert "ran past its deadline of 2 s" in err.value.reason
    # inst-0 at 1000, inst-1 at 1001.5; at 1003 no third claim
    assert [c for c, _ in cloud.placement.claim_attempts] == ["inst-0", "inst-1"]
    assert sorted(cloud.placement.deleted) == ["inst-0", "inst-1"]
    assert cloud.placement.claims == {}


def test_deadline_is_the_smaller_of_long_rpc_timeout_and_request_deadline(cloud, monkeypatch):
    monkeypatch.setattr(filter_scheduler, "_clock", lambda: 50.0)
    CONF.set_override("request_deadline", 0.0, group="scheduler")
    try:
        req = cloud.driver.new_request(CONTEXT, make_spec())
        assert req.deadline == 50.0 + CONF.long_rpc_timeout
        CONF.set_override("request_deadline", 7.0, group="scheduler")
        req = cloud.driver.new_request(CONTEXT, make_spec())
        assert (req.deadline, req.deadline_seconds) == (57.0, 7.0)
    finally:
        CONF.clear_override("request_deadline", group="scheduler")


# -- Placement answers -------------------------------------------------------------------------
def test_allocation_candidates_error_is_no_valid_host_with_the_error(cloud):
    cloud.placement.candidates_error = PlacementServerError("placement is down", status=503)
    with pytest.raises(NoValidHost) as err:
        cloud.select(make_spec())
    assert "placement is down" in err.value.reason
    assert err.value.cause == "placement_unreachable"
    assert cloud.placement.claim_attempts == []


def test_a_query_placement_refuses_is_not_called_an_outage(cloud):
    cloud.placement.candidates_error = PlacementClientError(
        "400 Bad Request: Invalid query string parameters", status=400
    )
    with pytest.raises(NoValidHost) as err:
        cloud.select(make_spec())
    assert err.value.cause == "placement_refused"
    assert "refused the query resources=" in err.value.reason
    assert "Invalid query string" in err.value.reason


def test_no_candidates_is_no_valid_host_naming_the_query():
    cloud = Cloud([])
    with pytest.raises(NoValidHost) as err:
        cloud.select(make_spec(ram_mb=2048))
    assert "no allocation candidates" in err.value.reason
    assert "MEMORY_MB:2048" in err.value.reason
    # the aggregates were brought up to date for the prefilters; no host state was read
    assert cloud.host_manager.calls == ["sync_aggregates"]


def test_claimed_candidate_mappings_are_recorded_on_the_request_groups(cloud):
    cloud.placement.requesters = ("port-1",)
    group = RequestGroup(requester_id="port-1", resources={"NET_BW_EGR_KILOBIT_PER_SEC": 10})
    result = cloud.select(make_spec(requested_resources=[group]))
    [recorded] = cloud.requests[-1].requested_resources
    assert recorded.provider_uuids == [result[0][0].compute_node_uuid]
    assert group.provider_uuids == []


def test_dedicated_cpu_flavor_asks_placement_twice_and_merges_the_answers(cloud):
    spec = make_spec(vcpus=2)
    spec.flavor.extra_specs["hw:cpu_policy"] = "dedicated"
    (selections,) = cloud.select(spec, alternates=True)
    resources = [dict(q.to_params())["resources"] for q in cloud.placement.queries]
    assert sorted(resources) == [
        "DISK_GB:10,MEMORY_MB:1024,PCPU:2",
        "DISK_GB:10,MEMORY_MB:1024,VCPU:2",
    ]
    # the merged answer has each host's candidate once: three distinct hosts come back
    assert len({s.service_host for s in selections}) == 3


def test_candidates_that_are_no_known_compute_node_are_explained(cloud):
    cloud.host_manager.hosts = []
    with pytest.raises(NoValidHost) as err:
        cloud.select(make_spec())
    assert "none is a compute node" in err.value.reason


# -- filters -----------------------------------------------------------------------------------
def test_filters_removing_every_host_give_per_filter_counts():
    cloud = Cloud(
        [
            make_host("a", disabled=True),
            make_host("b", disabled=True),
            make_host("c", down=True),
        ]
    )
    with pytest.raises(NoValidHost) as err:
        cloud.select(make_spec())
    reason = err.value.reason
    assert reason.startswith("0/3 hosts available")
    assert "2 ComputeFilter (service disabled)" in reason
    assert "1 ComputeFilter (service down)" in reason
    assert cloud.placement.claim_attempts == []


def test_filters_run_in_order_and_stop_at_zero_hosts():
    cloud = Cloud([make_host("a", down=True), make_host("b")])
    spec = make_spec(image=ImageMeta(properties={"hw_architecture": "aarch64"}))
    with pytest.raises(NoValidHost) as err:
        cloud.select(spec)
    assert "0/2 hosts available" in err.value.reason
    assert "1 ComputeFilter" in err.value.reason
    assert "1 ImagePropertiesFilter" in err.value.reason


# -- ignore / force / requested destination ----------------------------------------------------
def test_ignore_hosts_is_case_insensitive(cloud):
    result = cloud.select(make_spec(ignore_hosts=["HOST-B"]))
    assert chosen_hosts(result) == ["host-c"]


def test_ignoring_every_host_is_no_valid_host(cloud):
    with pytest.raises(NoValidHost) as err:
        cloud.select(make_spec(ignore_hosts=["host-a", "host-b", "HOST-C"]))
    assert err.value.reason == "0/3 hosts available: 3 in ignore_hosts"


def test_force_hosts_skips_the_filters():
    cloud = Cloud([make_host("down", down=True, ram_mb=1024), make_host("up", ram_mb=65536)])
    result = cloud.select(make_spec(force_hosts=["DOWN"]))
    assert chosen_hosts(result) == ["down"]
    assert cloud.placement.claims["inst-0"]["host"] == "down"


def test_force_hosts_with_a_check_type_hint_runs_the_filters():
    cloud = Cloud([make_host("down", down=True), make_host("up")])
    spec = make_spec(force_hosts=["down"], hints={"_nova_check_type": ["evacuate"]})
    with pytest.raises(NoValidHost) as err:
        cloud.select(spec)
    assert "ComputeFilter (service down)" in err.value.reason


def test_force_nodes_picks_the_node_and_skips_the_filters():
    cloud = Cloud(
        [
            make_host("ironic", node="node-1", ram_mb=65536),
            make_host("ironic", node="node-2", ram_mb=1024, disabled=True),
        ]
    )
    result = cloud.select(make_spec(force_nodes=["node-2"]))
    assert [s.nodename for s in (sel[0] for sel in result)] == ["node-2"]


def test_force_nodes_matches_node_names_exactly():
    # nova lower-cases forced and ignored host names, not node names
    cloud = Cloud([make_host("ironic", node="Node-1"), make_host("ironic", node="node-2")])
    with pytest.raises(NoValidHost) as err:
        cloud.select(make_spec(force_nodes=["node-1"]))
    assert err.value.reason == "0/2 hosts available: 2 not in force_nodes"


def test_forced_host_with_one_node_is_sent_to_placement_as_in_tree(cloud):
    cloud.select(make_spec(force_hosts=["host-a"]))
    params = cloud.placement.queries[0].to_params()
    assert ("in_tree", cloud.hosts["host-a"].uuid) in params
    assert "limit" in dict(params)


def test_requested_destination_restricts_hosts_and_sets_in_tree(cloud):
    result = cloud.select(make_spec(requested_destination=Destination(host="host-a")))
    assert chosen_hosts(result) == ["host-a"]
    params = cloud.placement.queries[0].to_params()
    assert ("in_tree", cloud.hosts["host-a"].uuid) in params


def test_requested_destination_runs_the_filters():
    cloud = Cloud([make_host("down", down=True), make_host("up")])
    with pytest.raises(NoValidHost) as err:
        cloud.select(make_spec(requested_destination=Destination(host="down")))
    assert err.value.reason == (
        "0/2 hosts available: 1 ComputeFilter (service down), 1 not the requested destination"
    )


def test_requested_host_with_several_nodes_drops_the_limit():
    cloud = Cloud(
        [
            make_host("ironic", node="node-1", ram_mb=4096),
            make_host("ironic", node="node-2", ram_mb=8192),
            make_host("other", ram_mb=65536),
        ]
    )
    result = cloud.select(make_spec(requested_destination=Destination(host="ironic")))
    assert [sel[0].nodename for sel in result] == ["node-2"]
    params = dict(cloud.placement.queries[0].to_params())
    assert "in_tree" not in params
    assert "limit" not in params


def test_requested_node_restricts_to_that_node():
    cloud = Cloud(
        [
            make_host("ironic", node="node-1", ram_mb=4096),
            make_host("ironic", node="node-2", ram_mb=8192),
        ]
    )
    dest = Destination(host="ironic", node="node-1")
    result = cloud.select(make_spec(requested_destination=dest))
    assert [sel[0].nodename for sel in result] == ["node-1"]
    assert ("in_tree", "rp-node-1") in cloud.placement.queries[0].to_params()


def test_requested_node_alone_names_its_host(cloud):
    dest = Destination(node="host-c")
    result = cloud.select(make_spec(requested_destination=dest))
    assert chosen_hosts(result) == ["host-c"]
    recorded = cloud.requests[-1].requested_destination
    assert (recorded.host, recorded.node) == ("host-c", "host-c")
    assert (dest.host, dest.node) == (None, "host-c")


def test_unknown_forced_or_requested_host_is_no_such_host(cloud):
    with pytest.raises(NoValidHost) as err:
        cloud.select(make_spec(requested_destination=Destination(host="nope")))
    assert "No such host" in err.value.reason
    assert "nope" in err.value.reason
    assert cloud.placement.queries == []
    with pytest.raises(NoValidHost) as err:
        cloud.select(make_spec(force_hosts=["nope"]))
    assert "No such host" in err.value.reason


# -- rebuild -----------------------------------------------------------------------------------
def _rebuild_spec(**fields: Any) -> RequestSpec:
    return make_spec(hints={"_nova_check_type": ["rebuild"]}, **fields)


def test_rebuild_asks_no_placement_claims_nothing_and_returns_no_allocation():
    cloud = Cloud([make_host("a", ram_mb=4096), make_host("b", ram_mb=8192)])
    spec = _rebuild_spec(requested_destination=Destination(host="a"))
    result = cloud.select(spec, ["inst-0"])
    assert chosen_hosts(result) == ["a"]
    sel = result[0][0]
    assert sel.allocation_request is None
    assert sel.allocation_request_version is None
    assert cloud.placement.queries == []
    assert cloud.placement.claim_attempts == []
    # no prefilter touched the request
    assert spec.request_level_params.root_forbidden == set()


def test_rebuild_runs_only_run_on_rebuild_filters():
    # ComputeFilter does not run on rebuild: the instance's own (down) host still passes
    cloud = Cloud([make_host("a", down=True)])
    result = cloud.select(_rebuild_spec(requested_destination=Destination(host="a")))
    assert chosen_hosts(result) == ["a"]
    # ImagePropertiesFilter does run on rebuild
    spec = _rebuild_spec(
        requested_destination=Destination(host="a"),
        image=ImageMeta(properties={"hw_architecture": "aarch64"}),
    )
    with pytest.raises(NoValidHost) as err:
        cloud.select(spec)
    assert "ImagePropertiesFilter" in err.value.reason
    assert "ComputeFilter" not in err.value.reason


# -- legacy (no instance uuids) ----------------------------------------------------------------
def test_no_instance_uuids_makes_no_claims_and_returns_num_instances_selections(cloud):
    spec = make_spec(ram_mb=10240, num_instances=2)
    result = cloud.driver.select_destinations(CONTEXT, spec, None, False)
    assert chosen_hosts(result) == ["host-b", "host-c"]
    assert len(cloud.placement.queries) == 1
    assert cloud.placement.claim_attempts == []
    for selections in result:
        assert selections[0].allocation_request is None
    # the choice was still consumed, so the next request sees it
    assert cloud.hosts["host-b"].free_ram_mb == 16384 - 10240


def test_no_instance_uuids_not_enough_hosts_resets_the_chosen_hosts(cloud):
    original = cloud.driver.filter_handler.run

    def nothing_for_the_second(hosts, spec, index=0, request_id=None):
        report = original(hosts, spec, index, request_id=request_id)
        if index == 1:
            report.hosts = []
        return report

    cloud.driver.filter_handler.run = nothing_for_the_second
    with pytest.raises(NoValidHost) as err:
        cloud.driver.select_destinations(CONTEXT, make_spec(num_instances=2), None)
    assert "Found hosts for 1 of 2 instances" in err.value.reason
    assert cloud.hosts["host-b"].consumptions() == {}
    assert cloud.hosts["host-b"].num_instances == 0
    assert cloud.placement.deleted == []


def test_no_instance_uuids_with_alternates_returns_unclaimed_alternates(cloud):
    result = cloud.driver.select_destinations(CONTEXT, make_spec(), None, True)
    assert [s.service_host for s in result[0]] == ["host-b", "host-c", "host-a"]
    assert all(s.allocation_request is None for s in result[0])


# -- random picks ------------------------------------------------------------------------------
def test_host_subset_size_picks_among_the_best_n():
    hosts = [make_host(f"h{i}", ram_mb=4096 * (i + 1)) for i in range(5)]
    CONF.set_override("host_subset_size", 3, group="filter_scheduler")
    picked = set()
    for seed in range(40):
        random.seed(seed)
        cloud = Cloud([_clone(h) for h in hosts])
        picked.add(chosen_hosts(cloud.select(make_spec()))[0])
    assert picked == {"h4", "h3", "h2"}


def test_host_subset_size_one_always_takes_the_best():
    hosts = [make_host(f"h{i}", ram_mb=4096 * (i + 1)) for i in range(5)]
    for seed in range(10):
        random.seed(seed)
        cloud = Cloud([_clone(h) for h in hosts])
        assert chosen_hosts(cloud.select(make_spec())) == ["h4"]


def test_subset_pick_is_moved_to_the_front_and_the_rest_stay_in_order():
    hosts = [make_host(f"h{i}", ram_mb=4096 * (i + 1)) for i in range(5)]
    CONF.set_override("host_subset_size", 5, group="filter_scheduler")
    CONF.set_override("max_attempts", 5, group="scheduler")
    for seed in range(10):
        random.seed(seed)
        cloud = Cloud([_clone(h) for h in hosts])
        (selections,) = cloud.select(make_spec(), alternates=True)
        names = [s.service_host for s in selections]
        rest = [n for n in ["h4", "h3", "h2", "h1", "h0"] if n != names[0]]
        assert names[1:] == rest


def test_same_weighed_hosts_are_shuffled_only_when_configured():
    hosts = [make_host(f"h{i}") for i in range(4)]  # all equal
    first = set()
    for seed in range(20):
        random.seed(seed)
        cloud = Cloud([_clone(h) for h in hosts])
        first.add(chosen_hosts(cloud.select(make_spec()))[0])
    assert first == {"h0"}  # ties keep their order
    CONF.set_override("shuffle_best_same_weighed_hosts", True, group="filter_scheduler")
    for seed in range(20):
        random.seed(seed)
        cloud = Cloud([_clone(h) for h in hosts])
        first.add(chosen_hosts(cloud.select(make_spec()))[0])
    assert len(first) > 1


def test_shuffle_keeps_worse_hosts_behind_the_best():
    hosts = [make_host("best1", ram_mb=16384), make_host("best2", ram_mb=16384)]
    hosts.append(make_host("worse", ram_mb=4096))
    CONF.set_override("shuffle_best_same_weighed_hosts", True, group="filter_scheduler")
    for seed in range(10):
        random.seed(seed)
        cloud = Cloud([_clone(h) for h in hosts])
        (selections,) = cloud.select(make_spec(), alternates=True)
        assert selections[-1].service_host == "worse"


def _clone(host: HostState) -> HostState:
    """A fresh HostState like ``host`` (consumption from an earlier request left behind)."""
    return make_host(host.host, node=host.nodename, ram_mb=host.total_usable_ram_mb)


# -- prefilters --------------------------------------------------------------------------------
def test_request_filter_failure_is_no_valid_host(cloud):
    CONF.set_override("limit_tenants_to_placement_aggregate", True, group="scheduler")
    CONF.set_override("placement_aggregate_required_for_tenants", True, group="scheduler")
    with pytest.raises(NoValidHost) as err:
        cloud.select(make_spec())
    assert "project-1" in err.value.reason
    assert cloud.placement.queries == []


def test_availability_zone_prefilter_sends_the_aggregates_to_placement():
    agg = Aggregate(id=7, uuid="agg-az", name="az", metadata={"availability_zone": "az1"})
    cloud = Cloud([make_host("a", aggregates=[agg])], aggregates=[agg])
    result = cloud.select(make_spec(availability_zone="az1"))
    assert result[0][0].availability_zone == "az1"
    assert ("member_of", "in:agg-az") in cloud.placement.queries[0].to_params()


# -- driver interface --------------------------------------------------------------------------
def test_reset_refreshes_cells_and_aggregates_and_stop_stops(cloud):
    cloud.driver.reset()
    cloud.driver.stop()
    assert cloud.host_manager.calls == ["refresh_cells_caches", "refresh_aggregates", "stop"]


class FlakyDeletes:
    """A Placement whose DELETEs fail until ``up`` is set."""

    def __init__(self):
        self.up = threading.Event()
        self.deleted: list[str] = []
        self.attempts = 0

    def delete_allocation_for_instance(self, consumer, request_id=None) -> bool:
        self.attempts += 1
        if not self.up.is_set():
            raise PlacementConnectionError("connection refused")
        self.deleted.append(consumer)
        return True


def test_deletes_a_rollback_could_not_make_are_retried_until_placement_takes_them():
    placement = FlakyDeletes()
    deferred = DeferredDeletes(placement, interval=0.01)
    try:
        deferred.add("inst-1", "req-1")
        deferred.add("inst-2", "req-1")
        deadline = time.monotonic() + 5
        while placement.attempts < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sorted(deferred.pending()) == ["inst-1", "inst-2"]
        # a new claim for inst-2 makes its allocation someone else's: never delete it
        deferred.discard("inst-2")
        placement.up.set()
        while deferred.pending() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert deferred.pending() == []
        assert placement.deleted == ["inst-1"]
    finally:
        deferred.stop()


def test_a_rollback_placement_does_not_take_is_deferred(cloud):
    cloud.placement.claim_errors["host-a"] = ClaimConflict("no room")
    uuids = ["i-1", "i-2", "i-3", "i-4"]
    group = InstanceGroup(uuid="g", policy="anti-affinity", members=list(uuids))
    failing = FlakyDeletes()
    cloud.placement.delete_allocation_for_instance = failing.delete_allocation_for_instance
    cloud.driver.claimer.deferred_deletes.interval = 3600  # only the first attempt, in the rollback
    try:
        with pytest.raises(NoValidHost):
            cloud.select(make_spec(group=group, num_instances=4), uuids)
        assert sorted(cloud.driver.claimer.deferred_deletes.pending()) == ["i-1", "i-2"]
    finally:
        cloud.driver.claimer.deferred_deletes.stop()


# -- claims of one host go one after the other ---------------------------------------------------
def test_concurrent_claims_of_one_host_wait_for_each_other_and_still_land_there(cloud):
    """Two requests of one process pick the same best host: their PUTs are not sent at the
    same time (Placement would answer one of them 409), and both still land on that host."""
    in_flight: dict[str, int] = {}
    overlaps: list[str] = []
    lock = threading.Lock()

    def slow(consumer: str, host: str) -> None:
        with lock:
            in_flight[host] = in_flight.get(host, 0) + 1
            if in_flight[host] > 1:
                overlaps.append(host)
        time.sleep(0.05)
        with lock:
            in_flight[host] -= 1

    cloud.placement.on_claim = slow
    barrier = threading.Barrier(4)
    results: list[Any] = []

    def request(i: int) -> None:
        barrier.wait()
        results.append(cloud.select(make_spec(), [f"inst-{i}"]))

    threads = [threading.Thread(target=request, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert len(results) == 4
    assert overlaps == []
    assert cloud.driver.claimer.locks.waited >= 1
    # the decisions are the weighers': host-b stays the best after four 1 GB boots, and every
    # request claimed it, once
    assert [host for _, host in cloud.placement.claim_attempts] == ["host-b"] * 4
    assert sorted(chosen_hosts(r)[0] for r in results) == ["host-b"] * 4


def test_a_claim_waits_for_another_no_longer_than_the_deadline_allows():
    locks = ClaimLocks()
    with locks.holding("host-a", 1.0) as first:
        assert first
        started = time.monotonic()
        with locks.holding("host-a", 0.05) as second:
            assert not second  # went on without it
        assert time.monotonic() - started < 1.0
        other = next(
            f"host-{i}"
            for i in range(1000)
            if hash(f"host-{i}") % ClaimLocks.STRIPES != hash("host-a") % ClaimLocks.STRIPES
        )
        with locks.holding(other, 0.0) as got:
            assert got  # another host's claim does not wait
    with locks.holding("host-a", 0.0) as again:
        assert again
