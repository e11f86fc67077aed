"""The driver with a provider view: which source answers, and what claims do to the view."""

from __future__ import annotations

import time

import pytest

from placement_client.api import ClaimConflict
from placement_client.view import Inventory, ProviderRecord, ProviderView, ViewRefresher
from scheduler.drivers.filter_scheduler import FilterScheduler
from scheduler.exceptions import NoValidHost
from tests.unit.scheduler.drivers.fakes import (
    CONTEXT,
    FakeHostManager,
    FakePlacement,
    NoFeed,
    make_host,
    make_spec,
    provider_record,
)


class ViewCloud:
    def __init__(self, hosts, records):
        self.placement = FakePlacement(hosts)
        self.host_manager = FakeHostManager(hosts)
        self.host_manager.host_states_for = lambda name, node=None: [
            h for h in hosts if h.host == name
        ]
        self.view = ProviderView()
        self.view.replace_all(records, time.monotonic())
        self.driver = FilterScheduler(
            placement=self.placement,
            host_manager=self.host_manager,
            view=ViewRefresher(self.view, NoFeed()),
        )
        self.requests = []
        new_request = self.driver.new_request

        def capture(context, spec, **kw):
            self.requests.append(new_request(context, spec, **kw))
            return self.requests[-1]

        self.driver.new_request = capture

    def select(self, spec, uuids=None):
        uuids = uuids or [f"inst-{i}" for i in range(spec.num_instances)]
        return self.driver.select_destinations(CONTEXT, spec, uuids, False)


@pytest.fixture
def hosts():
    return [make_host("host-a", ram_mb=4096), make_host("host-b", ram_mb=16384)]


def test_the_view_answers_and_placement_only_takes_the_claim(hosts):
    cloud = ViewCloud(hosts, [provider_record(h, ram_mb=h.total_usable_ram_mb) for h in hosts])
    result = cloud.select(make_spec(ram_mb=2048))
    assert cloud.placement.queries == []  # no GET /allocation_candidates
    assert result[0][0].service_host == "host-b"
    req = cloud.requests[-1]
    assert req.trace.candidate_source == "view"
    assert req.trace.view_age is not None and req.trace.view_age < 5
    claim = cloud.placement.claims["inst-0"]["alloc_req"]
    assert claim["allocations"] == {
        hosts[1].uuid: {"resources": {"VCPU": 1, "MEMORY_MB": 2048, "DISK_GB": 10}}
    }


def test_a_claim_is_counted_in_the_view_at_once(hosts):
    cloud = ViewCloud(hosts, [provider_record(h, ram_mb=4096) for h in hosts])
    cloud.select(make_spec(ram_mb=3000), ["first"])
    claimed_rp = next(iter(cloud.placement.claims["first"]["alloc_req"]["allocations"]))
    assert cloud.view.known(claimed_rp) == (3, 4)  # one own claim since the read
    # the next request sees that host as full (1096 MB left) without a refresh
    cloud.select(make_spec(ram_mb=3000), ["second"])
    second = next(iter(cloud.placement.claims["second"]["alloc_req"]["allocations"]))
    assert second != claimed_rp
    assert cloud.placement.queries == []


def test_a_request_group_on_a_child_provider_is_answered_by_the_view(hosts):
    fpga = ProviderRecord(
        uuid="fpga-of-host-a",
        generation=1,
        name="host-a_fpga",
        parent_uuid=hosts[0].uuid,
        root_uuid=hosts[0].uuid,
        inventories={"CUSTOM_FPGA": Inventory(1)},
    )
    cloud = ViewCloud(hosts, [*(provider_record(h) for h in hosts), fpga])
    spec = make_spec(ram_mb=1024)
    spec.flavor.extra_specs = {"resources1:CUSTOM_FPGA": "1"}
    result = cloud.select(spec)
    req = cloud.requests[-1]
    assert cloud.placement.queries == []
    assert req.trace.candidate_source == "view"
    assert result[0][0].service_host == "host-a"  # the only host with an FPGA
    claim = cloud.placement.claims["inst-0"]["alloc_req"]
    assert claim["allocations"]["fpga-of-host-a"] == {"resources": {"CUSTOM_FPGA": 1}}
    assert claim["mappings"] == {"": [hosts[0].uuid], "1": ["fpga-of-host-a"]}


def test_an_empty_answer_from_the_view_is_placements_to_give(hosts):
    # the view thinks both hosts are full; Placement (which saw a DELETE) has room
    full = {"MEMORY_MB": 8192}
    cloud = ViewCloud(hosts, [provider_record(h, used=full) for h in hosts])
    result = cloud.select(make_spec(ram_mb=2048))
    assert len(cloud.placement.queries) == 1
    assert result[0][0].service_host in {"host-a", "host-b"}
    assert cloud.requests[-1].trace.candidate_source == "placement"
    assert cloud.requests[-1].trace.view_declined == "the provider view found no candidate"


def test_a_refused_claim_marks_the_providers_dirty_and_placement_is_asked_again(hosts):
    cloud = ViewCloud(hosts, [provider_record(h) for h in hosts])
    for h in hosts:  # the view is wrong about both hosts
        cloud.placement.claim_errors[h.host] = ClaimConflict("would exceed the capacity")
    with pytest.raises(NoValidHost):
        cloud.select(make_spec(ram_mb=1024))
    assert cloud.view.take_dirty() == {h.uuid for h in hosts}
    # the view's NoValidHost was asked again of Placement (which also refused here)
    assert len(cloud.placement.queries) == 1
    assert [r.trace.candidate_source for r in cloud.requests] == ["view", "placement"]


def test_placement_asked_again_is_an_attempt_with_its_own_trace(hosts):
    cloud = ViewCloud(hosts, [provider_record(h) for h in hosts])
    for h in hosts:
        cloud.placement.claim_errors[h.host] = ClaimConflict("would exceed the capacity")
    seen = []
    cloud.driver.timing_observer = seen.append
    with pytest.raises(NoValidHost):
        cloud.select(make_spec(ram_mb=1024))
    first, retry = cloud.requests
    # the retry records what it did alone, and links to the first attempt's record
    assert first.trace is not retry.trace and first.trace.timings is not retry.trace.timings
    assert retry.trace.previous is first.trace
    assert retry.trace.attempts() == [first.trace, retry.trace]
    assert first.trace.claim_failures == 2 and retry.trace.claim_failures == 2
    assert "placement" not in first.trace.timings and "view" in first.trace.timings
    assert "placement" in retry.trace.timings
    # the retry keeps the first attempt's deadline and does not ask the view
    assert retry.deadline == first.deadline and not retry.use_view
    # one observation per call, over both attempts
    (observed,) = seen
    assert observed["view"] >= first.trace.timings["view"]
    assert observed["placement"] == retry.trace.timings["placement"]


def test_the_view_failing_is_recovered_by_placement(hosts):
    cloud = ViewCloud(hosts, [provider_record(h) for h in hosts])
    cloud.placement.claim_errors["host-b"] = ClaimConflict("would exceed the capacity")
    # host-a is refused on the first pass (the view's candidates) and taken on the second
    attempts = []

    def refuse_first_pass(consumer, host):
        attempts.append(host)
        if len(attempts) <= 2:
            cloud.placement.claim_errors["host-a"] = ClaimConflict("full")
        else:
            cloud.placement.claim_errors.pop("host-a", None)

    cloud.placement.on_claim = refuse_first_pass
    result = cloud.select(make_spec(ram_mb=1024))
    assert result[0][0].service_host == "host-a"
    assert [r.trace.candidate_source for r in cloud.requests] == ["view", "placement"]


def test_a_rollback_stops_counting_the_claims(hosts):
    cloud = ViewCloud(hosts, [provider_record(h) for h in hosts])
    cloud.placement.consumer_errors["inst-1"] = ClaimConflict("full")
    with pytest.raises(NoValidHost):
        cloud.select(make_spec(ram_mb=1024, num_instances=2))
    assert "inst-0" in cloud.placement.deleted
    for h in hosts:
        assert cloud.view.known(h.uuid) == (3, 3)  # no own claim counted any more


def test_delete_instance_info_reads_the_hosts_provider_again(hosts):
    cloud = ViewCloud(hosts, [provider_record(h) for h in hosts])
    cloud.driver.host_manager.instance_tracker = type(
        "Tracker", (), {"delete_instance_info": lambda self, host, uuid: None}
    )()
    cloud.driver.delete_instance_info("host-a", "some-instance")
    assert cloud.view.take_dirty() == {hosts[0].uuid}


def test_an_old_view_is_not_used(hosts):
    cloud = ViewCloud(hosts, [provider_record(h) for h in hosts])
    cloud.view.max_age = 0.0
    time.sleep(0.01)
    cloud.select(make_spec(ram_mb=1024))
    req = cloud.requests[-1]
    assert req.trace.candidate_source == "placement"
    assert "old" in req.trace.view_declined


def test_a_view_that_raises_hands_the_request_to_placement(hosts):
    cloud = ViewCloud(hosts, [provider_record(h) for h in hosts])

    def broken(query, **kw):
        raise RuntimeError("a bug in the view")

    cloud.view.candidates = broken
    result = cloud.select(make_spec(ram_mb=1024))
    assert result[0][0].service_host in {"host-a", "host-b"}
    assert cloud.requests[-1].trace.candidate_source == "placement"
    assert "failed" in cloud.requests[-1].trace.view_declined
