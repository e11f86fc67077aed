"""The what-if replay on the real FilterScheduler, filters and weighers, a real ProviderView
and private copies of the hosts: the recorded decisions are made first by a driver that
records them (its spec encoder is the service's, nova's wire form), then replayed on the
fleet as it is afterwards (the instances listed on their hosts and counted in Placement),
which the replay takes them out of.
"""

from __future__ import annotations

import datetime
import uuid as uuidlib

from placement_client.view import ProviderView
from scheduler.conf import CONF
from scheduler.drivers import decisions
from scheduler.exceptions import NoValidHost
from scheduler.objects import Flavor, InstanceGroup, RequestSpec
from scheduler.records import ERROR, SCHEDULED, DecisionRecord
from scheduler.replay import Recorded, ReplayFleet, replay
from scheduler.resources import numa
from scheduler.rpc.wire import request_spec_from_primitive, request_spec_to_primitive
from tests.unit.scheduler.capacity.cloud import provider_record_of, view_cloud
from tests.unit.scheduler.drivers.fakes import CONTEXT, FakeHostManager, make_host
from tests.unit.scheduler.resources.builders import (
    instance_cell,
    instance_topology,
    smt_host,
    stored_topology,
)

FLAVOR = Flavor(name="m1.small", vcpus=1, memory_mb=1024, root_gb=10)


def fleet_hosts():
    # RAM decides: h5 has the most, h0 the least
    return [make_host(f"h{i}", ram_mb=8192 + 1024 * i, vcpus=16, disk_gb=400) for i in range(6)]


class ListRecorder:
    def __init__(self):
        self.records: list[DecisionRecord] = []

    def record(self, rec):
        rec.id = len(self.records) + 1
        # apart in time, as real calls are
        rec.created_at = datetime.datetime(2026, 11, 26, 10) + datetime.timedelta(seconds=rec.id)
        self.records.append(rec)
        return True


def record_boots(specs):
    """Boot each spec (one instance each) on a fresh fleet with a recording driver; each
    instance is built before the next request (its compute's report ends the I/O operation
    nova counts while it builds)."""
    hosts = fleet_hosts()
    driver, _ = view_cloud(hosts)
    recorder = ListRecorder()
    driver.recorder = recorder
    driver.spec_encoder = request_spec_to_primitive
    for spec in specs:
        try:
            (selection,) = driver.select_destinations(CONTEXT, spec, [str(uuidlib.uuid4())], False)
        except NoValidHost:
            continue  # the record says so
        built(hosts, selection[0].service_host)
    return recorder.records


def built(hosts, name):
    for hs in hosts:
        if hs.host == name:
            hs.num_io_ops -= 1


def todays_fleet(records):
    """The fleet after the recorded boots: each instance listed on its host and counted in
    its compute node and in Placement, as the cells and Placement would show them."""
    hosts = {h.host: h for h in fleet_hosts()}
    view = ProviderView()
    placed: dict[str, dict[str, int]] = {}
    consumers: dict[str, set[str]] = {}
    allocations = {}
    # where each instance is now (a moved one on its last host only)
    final = {
        uuid: host
        for rec in records
        if rec.outcome == SCHEDULED
        for uuid, host in zip(rec.instance_uuids, rec.hosts, strict=True)
    }
    flavor = {"memory_mb": FLAVOR.memory_mb, "root_gb": FLAVOR.root_gb, "vcpus": FLAVOR.vcpus}
    for uuid, host in final.items():
        hs = hosts[host]
        hs.free_ram_mb -= flavor["memory_mb"]
        hs.free_disk_mb -= flavor["root_gb"] * 1024
        hs.vcpus_used += flavor["vcpus"]
        hs.num_instances += 1
        hs.instances[uuid] = None
        resources = {
            "VCPU": flavor["vcpus"],
            "MEMORY_MB": flavor["memory_mb"],
            "DISK_GB": flavor["root_gb"],
        }
        used = placed.setdefault(hs.uuid, {})
        for rc, n in resources.items():
            used[rc] = used.get(rc, 0) + n
        consumers.setdefault(hs.uuid, set()).add(uuid)
        allocations[uuid] = {hs.uuid: {"resources": resources}}
    records_ = []
    for hs in hosts.values():
        rec = provider_record_of(hs)
        rec.used = placed.get(hs.uuid, {})
        rec.consumers = frozenset(consumers.get(hs.uuid, ()))
        records_.append(rec)
    view.replace_all(records_, 0.0)
    view.mark_refreshed(view.now())
    hosts = list(hosts.values())
    return hosts, view, allocations


def replay_on_today(records, view_max_age=None):
    hosts, view, allocations = todays_fleet(records)
    fleet = ReplayFleet(hosts, FakeHostManager(hosts), view)
    if view_max_age is not None:
        view.max_age = view_max_age
    recorded = [Recorded.of(r, request_spec_from_primitive) for r in records]
    specs = {
        u: item.spec
        for item in recorded
        if item.spec is not None and item.record.outcome == SCHEDULED
        for u in item.record.instance_uuids
    }
    taken = fleet.take_out(specs, allocations)
    from scheduler.drivers.filter_scheduler import FilterScheduler

    driver = FilterScheduler(placement=fleet.placement, host_manager=fleet, view=False)
    report = replay(driver, fleet, recorded)
    report.taken_out = taken
    return report, hosts, fleet


def _decoded(rec):
    spec = rec.document.get("spec")
    return request_spec_from_primitive(spec) if spec else None


def spec():
    return RequestSpec(flavor=FLAVOR, num_instances=1, project_id="p", user_id="u")


def test_the_record_keeps_the_request_as_nova_sent_it():
    (rec,) = record_boots([spec()])
    kept = request_spec_from_primitive(rec.document["spec"])
    assert kept.flavor.memory_mb == 1024 and kept.project_id == "p"
    assert rec.document["version"] == decisions.DOCUMENT_VERSION >= 2


def test_taking_the_recorded_instances_out_gives_the_fleet_back_as_it_was():
    records = record_boots([spec() for _ in range(4)])
    hosts, view, allocations = todays_fleet(records)
    fleet = ReplayFleet(hosts, FakeHostManager(hosts), view)
    specs = {r.instance_uuids[0]: _decoded(r) for r in records}
    taken = fleet.take_out(specs, allocations)
    assert (taken.instances, taken.allocations, taken.held_numa_pci) == (4, 4, 0)
    fresh = {h.host: h for h in fleet_hosts()}
    for hs in fleet.hosts:
        assert hs.free_ram_mb == fresh[hs.host].free_ram_mb
        assert hs.vcpus_used == 0 and hs.num_instances == 0 and not hs.instances
        rec = fleet.view.record(hs.uuid)
        assert not any(rec.used.values()) and not rec.consumers
    # the host manager's own HostStates are not touched: the fleet holds copies
    assert sum(h.num_instances for h in hosts) == 4


def test_an_unchanged_configuration_reproduces_every_decision():
    records = record_boots([spec() for _ in range(8)])
    # spread by free RAM: the larger hosts took one or two each
    assert [r.hosts[0] for r in records] == ["h5", "h4", "h5", "h3", "h4", "h5", "h2", "h3"]
    report, _, _ = replay_on_today(records)
    counts = report.counts()
    assert counts["replayed"] == 8 and counts["changed"] == 0, report.changed
    assert [c.replayed for c in report.calls] == [c.recorded for c in report.calls]
    assert report.before.as_dict() == report.after.as_dict()
    assert report.before.hosts_used == 4


def test_a_flipped_ram_multiplier_packs_and_the_summary_says_so():
    records = record_boots([spec() for _ in range(8)])
    CONF.set_override("ram_weight_multiplier", -1.0, group="filter_scheduler")
    report, _, fleet = replay_on_today(records)
    counts = report.counts()
    assert counts["replayed"] == 8 and counts["changed"] == 8  # spread: h0 took none
    # packing: everything on the host with the least free RAM that still fits
    assert {h for c in report.calls for h in c.replayed} == {"h0/h0"}
    assert (report.before.hosts_used, report.after.hosts_used) == (4, 1)
    assert (report.before.max_per_host, report.after.max_per_host) == (3, 8)
    assert (report.before.empty_hosts, report.after.empty_hosts) == (2, 5)
    assert report.after.ram_used_pct[100] > report.before.ram_used_pct[100]
    # the replay claimed in its own view, nothing else
    assert set(fleet.placement.claims) == {r.instance_uuids[0] for r in records}


def test_records_without_a_request_or_of_a_failed_call_are_skipped_and_said_why():
    records = record_boots([spec(), spec()])
    records[0].document.pop("spec")
    records[1].outcome = ERROR
    report, _, _ = replay_on_today(records)
    assert report.counts()["skipped"] == 2 and report.counts()["replayed"] == 0
    assert "does not hold the request" in report.calls[0].skipped
    assert "failed" in report.calls[1].skipped


def test_a_request_that_no_longer_fits_is_counted():
    records = record_boots([spec() for _ in range(8)])  # h5, h4 and h3 took two or three
    # the configuration tried allows one instance per host
    CONF.set_override(
        "enabled_filters",
        [*CONF.filter_scheduler.enabled_filters, "NumInstancesFilter"],
        group="filter_scheduler",
    )
    CONF.set_override("max_instances_per_host", 1, group="filter_scheduler")
    report, _, _ = replay_on_today(records)
    counts = report.counts()
    assert (counts["replayed"], counts["no_longer_fit"]) == (8, 2)
    assert report.after.max_per_host == 1 and report.after.hosts_used == 6
    failed = [c for c in report.calls if c.outcome == "no_valid_host"]
    assert [c.request_id for c in failed] == [r.request_id for r in records[6:]]
    assert all("NumInstancesFilter" in c.reason for c in failed)


def test_a_server_group_keeps_its_members_apart_where_the_replay_put_them():
    group_uuid = str(uuidlib.uuid4())
    driver, _ = view_cloud(fleet_hosts())
    recorder = ListRecorder()
    driver.recorder = recorder
    driver.spec_encoder = request_spec_to_primitive
    members: list[str] = []
    hosts: list[str] = []
    for _ in range(3):
        uuid = str(uuidlib.uuid4())
        members.append(uuid)
        s = spec()
        # as nova's conductor sends it: the members so far and the hosts they are on
        s.instance_group = InstanceGroup(
            uuid=group_uuid, policy="anti-affinity", members=list(members), hosts=list(hosts)
        )
        (selection,) = driver.select_destinations(CONTEXT, s, [uuid], False)
        hosts.append(selection[0].service_host)
        built(driver.host_manager.hosts, selection[0].service_host)
    assert len(set(hosts)) == 3
    CONF.set_override("ram_weight_multiplier", -1.0, group="filter_scheduler")
    report, _, _ = replay_on_today(recorder.records)
    replayed = [c.replayed[0] for c in report.calls]
    assert None not in replayed and len(set(replayed)) == 3, replayed
    assert replayed[0] == "h0/h0"  # packing starts on the host with the least free RAM


def test_a_numa_instance_gives_its_host_its_cells_back():
    raw = smt_host()
    inst = instance_topology(instance_cell(0, [0, 1], 1024, "dedicated", "require"))
    fitted = numa.fit_instance_to_host(
        numa.host_topology_from_primitive(raw),
        numa.instance_topology_from_primitive(inst),
        numa.Limits(4.0, 1.0),
    ).cells
    flavor = Flavor(
        name="pinned", vcpus=2, memory_mb=1024, extra_specs={"hw:cpu_policy": "dedicated"}
    )
    spec = RequestSpec(flavor=flavor, num_instances=1, project_id="p", user_id="u")
    hosts = []
    for name in ("n1", "n2"):
        hs = make_host(name, vcpus=16, ram_mb=32768)
        hs.numa_topology = numa.host_topology_with_usage(raw, fitted)
        hs.instances = {f"{name}-i": None}
        hosts.append(hs)
    view = ProviderView()
    view.replace_all([provider_record_of(h) for h in hosts], 0.0)
    fleet = ReplayFleet(hosts, FakeHostManager(hosts), view)
    # n1's compute stored its instance's topology; n2's is not found
    stored = {"n1-i": stored_topology(inst, fitted)}
    taken = fleet.take_out({"n1-i": spec, "n2-i": spec}, {}, stored)
    assert (taken.instances, taken.numa, taken.held_numa_pci) == (2, 1, 1)
    n1, n2 = sorted(fleet.hosts, key=lambda h: h.host)
    assert n1.numa_topology == raw  # its pinned CPUs and memory given back
    assert n2.numa_topology == hosts[1].numa_topology  # kept, and said so


def test_a_moved_instance_leaves_its_first_host_once_it_has_a_new_one():
    hosts = fleet_hosts()
    driver, _ = view_cloud(hosts)
    recorder = ListRecorder()
    driver.recorder = recorder
    driver.spec_encoder = request_spec_to_primitive
    uuid = str(uuidlib.uuid4())
    (first,) = driver.select_destinations(CONTEXT, spec(), [uuid], False)
    built(hosts, first[0].service_host)
    # a cold migration: the same instance, its current host left out
    move = spec()
    move.ignore_hosts = [first[0].service_host]
    (second,) = driver.select_destinations(CONTEXT, move, [uuid], False)
    assert second[0].service_host != first[0].service_host
    report, _, fleet = replay_on_today(recorder.records)
    assert report.counts()["changed"] == 0
    # counted once, where it ended, on both sides
    assert report.before.placed == report.after.placed == 1
    assert report.after.hosts_used == 1
    by_host = {h.host: h for h in fleet.hosts}
    assert uuid not in by_host[first[0].service_host].consumptions()
    assert uuid in by_host[second[0].service_host].consumptions()
    # the claim moved in the view: nothing left on the first host's provider
    old, new = (by_host[s[0].service_host].uuid for s in (first, second))
    assert fleet.view.known(old)[0] == fleet.view.known(old)[1]
    assert fleet.view.known(new)[1] == fleet.view.known(new)[0] + 1
    answer = fleet.placement.get_allocations_for_consumer(uuid)["allocations"]
    assert list(answer) == [by_host[second[0].service_host].uuid]


def test_a_request_group_is_replayed_and_what_the_view_cannot_answer_is_skipped_with_why():
    records = record_boots([spec(), spec(), spec()])
    # the second asked for a granular group, which the replay's view answers as Placement
    granular = spec()
    granular.flavor = Flavor(
        name="g", vcpus=1, memory_mb=1024, root_gb=10, extra_specs={"resources1:VCPU": "1"}
    )
    records[1].document["spec"] = request_spec_to_primitive(granular)
    report, _, _ = replay_on_today(records)
    assert report.counts()["replayed"] == 3
    assert not report.calls[1].skipped and report.calls[1].outcome == "scheduled"
    # a view the replay cannot trust (here: older than it may be) answers nothing
    report, _, _ = replay_on_today(records, view_max_age=-1.0)
    assert report.counts()["replayed"] == 0
    assert all("provider view is" in call.skipped for call in report.calls)


def test_builds_say_how_long_the_service_saw_an_instance_building():
    from scheduler.replay import Builds

    t = datetime.datetime(2026, 11, 29, 12, 0, 0)
    later = t + datetime.timedelta(seconds=40)
    earlier = t - datetime.timedelta(seconds=5)
    builds = Builds(
        rows={"launched": (earlier, later), "building": (earlier, None), "reported": (later, None)},
        max_age=120,
        known=True,
    )
    assert builds.until("launched", t) == later  # its compute finished the build then
    assert builds.until("building", t) is None  # still building when the window ended
    assert builds.until("reported", t) == later  # a row written after the decision
    # no compute ever reported it: the service counted it until consumption_max_age
    assert builds.until("unreported", t) == t + datetime.timedelta(seconds=120)
    assert Builds(known=True).until("unreported", t) is None
    assert Builds().until("anything", t) == t  # nothing known: built by the next request


def test_a_what_if_is_compared_with_the_replay_of_the_configuration_in_use():
    from scheduler.replay import Replayed, ReplayReport, against_baseline

    def call(n, recorded, replayed, outcome=SCHEDULED):
        return Replayed(
            request_id=f"req-{n}",
            created_at="2026-11-29T12:00:00Z",
            instance_uuids=[f"i-{n}"],
            recorded_outcome=SCHEDULED,
            recorded=[recorded],
            outcome=outcome,
            replayed=[replayed],
        )

    # the configuration in use reproduces req-1, not req-2 (noise: the fleet changed)
    baseline = ReplayReport(calls=[call(1, "a/a", "a/a"), call(2, "a/a", "b/b")])
    # the what-if decides req-1 otherwise, and req-2 as the baseline did
    what_if = ReplayReport(calls=[call(1, "a/a", "c/c"), call(2, "a/a", "b/b")])
    assert [c.changed for c in what_if.calls] == [True, True]  # against the record
    against_baseline(what_if, baseline)
    assert [c.changed for c in what_if.calls] == [True, False]
    counts = what_if.counts()
    assert (counts["baseline_replayed"], counts["baseline_reproduced"]) == (2, 1)
    assert (counts["changed"], counts["instances_moved"]) == (1, 1)
    doc = what_if.as_dict()["calls"][1]
    assert doc["baseline"] == {"outcome": SCHEDULED, "hosts": ["b/b"]} and not doc["changed"]
