"""The select_destinations notifications: which formats are sent, when, and what the
versioned payload holds (scheduler/rpc/notifications.py, the manager's use of it and the
FilterScheduler's on_candidates hook)."""

from __future__ import annotations

from types import SimpleNamespace

import oslo_messaging
import pytest

from scheduler import exceptions
from scheduler.conf import CONF
from scheduler.drivers.filter_scheduler import FilterScheduler
from scheduler.objects import Destination, Flavor, ImageMeta, RequestSpec, SchedulerRetries
from scheduler.rpc import notifications
from scheduler.rpc import transport as sched_rpc
from scheduler.rpc.context import RequestContext
from scheduler.rpc.manager import SchedulerManager
from scheduler.rpc.wire import request_spec_to_primitive
from tests.unit.scheduler.drivers.fakes import (
    FakeHostManager,
    FakePlacement,
    make_host,
    make_spec,
)
from tests.unit.scheduler.rpc.fakes import FakeDriver

I1 = "7f4b1c1e-8a0b-4a4e-9e57-0d6f1c1e7b21"


class Recorder:
    def __init__(self, enabled: bool = True, fail: bool = False):
        self.enabled = enabled
        self.fail = fail
        self.sent: list[tuple[str, dict]] = []

    def is_enabled(self) -> bool:
        return self.enabled

    def info(self, ctxt, event_type, payload):
        if self.fail:
            raise RuntimeError("broker gone")
        self.sent.append((event_type, payload))


@pytest.mark.parametrize(
    "fmt, legacy_sends, versioned_sends",
    [("unversioned", True, False), ("versioned", False, True), ("both", True, True)],
)
def test_format_decides_which_notifiers_send(fmt, legacy_sends, versioned_sends):
    legacy, versioned = Recorder(), Recorder()
    notifier = notifications.for_format(fmt, legacy, versioned)
    notifier.notify(None, "start", RequestSpec(flavor=Flavor(memory_mb=1, vcpus=1)))
    assert bool(legacy.sent) is legacy_sends
    assert bool(versioned.sent) is versioned_sends
    for sent in (legacy.sent, versioned.sent):
        assert [event for event, _ in sent] == ["scheduler.select_destinations.start"] * len(sent)


def test_unknown_format_is_refused():
    with pytest.raises(ValueError):
        notifications.for_format("json", None, None)


def test_get_notifier_uses_nova_s_publishers_and_topics():
    CONF.set_override("notification_format", "both", group="notifications")
    CONF.set_override("versioned_notifications_topics", ["vn-a", "vn-b"], group="notifications")
    transport = oslo_messaging.get_notification_transport(CONF, url="fake:/")
    try:
        notifier = sched_rpc.get_notifier(CONF, transport, host="sched-1")
        assert notifier.legacy.publisher_id == "scheduler.sched-1"
        assert notifier.versioned.publisher_id == "nova-scheduler:sched-1"
        assert notifier.versioned._topics == ["vn-a", "vn-b"]
        assert notifier.legacy._topics == ["notifications"]
        # no [oslo_messaging_notifications] driver, as nova's default: nothing is sent
        assert notifier.is_enabled() is False
    finally:
        transport.cleanup()


def _spec() -> RequestSpec:
    return RequestSpec(
        flavor=Flavor(memory_mb=512, vcpus=1, name="tiny", flavorid="7", extra_specs={"a": 1}),
        instance_uuid=I1,
        project_id="p1",
        user_id="u1",
        image=ImageMeta(
            id="0c7a3c5b-4f0e-4c0e-9a59-6d0f8d8e8a01",
            properties={"hw_architecture": "x86_64", "hw_ephemeral_encryption_secret_uuid": "s"},
        ),
        force_hosts=["h1", "h2"],
        scheduler_hints={"group": ["g1"], "n": [3]},
        requested_destination=Destination(host="h1", cell_uuid="c1", aggregates=["a,b"]),
        retry=SchedulerRetries(num_attempts=2, hosts=[("h9", "n9")]),
    )


def test_versioned_payload_has_nova_s_objects_and_versions():
    raw = request_spec_to_primitive(_spec())["nova_object.data"]
    raw["security_groups"] = {
        "nova_object.name": "SecurityGroupList",
        "nova_object.data": {"objects": [{"nova_object.data": {"name": "default"}}]},
    }
    raw["image"]["nova_object.data"]["visibility"] = "public"
    payload = notifications.request_spec_payload(_spec(), raw)
    assert payload["nova_object.name"] == "RequestSpecPayload"
    assert payload["nova_object.version"] == "1.1"
    assert payload["nova_object.namespace"] == "nova"
    data = payload["nova_object.data"]
    assert "image_meta" not in data  # nova never sets it
    assert data["force_hosts"] == "h1" and data["force_nodes"] is None
    assert data["scheduler_hints"] == {"group": ["g1"], "n": ["3"]}
    assert data["security_groups"] == ["default"]
    assert data["flavor"]["nova_object.data"]["extra_specs"] == {"a": "1"}
    assert data["flavor"]["nova_object.data"]["projects"] is None
    image = data["image"]["nova_object.data"]
    assert image["visibility"] == "public" and image["created_at"] is None
    assert image["properties"]["nova_object.data"] == {"hw_architecture": "x86_64"}
    dest = data["requested_destination"]
    assert dest["nova_object.name"] == "DestinationPayload"
    assert dest["nova_object.data"]["host"] == "h1" and "node" not in dest["nova_object.data"]
    assert dest["nova_object.data"]["cell"]["nova_object.version"] == "2.0"
    assert dest["nova_object.data"]["aggregates"] == ["a,b"]
    retry = data["retry"]["nova_object.data"]
    assert retry == {"num_attempts": 2, "hosts": ["n9"]}
    pci = data["pci_requests"]
    assert pci["nova_object.data"] == {"instance_uuid": I1, "requests": []}


def test_a_failing_notifier_never_fails_the_scheduling(caplog):
    legacy, versioned = Recorder(fail=True), Recorder(fail=True)
    manager = SchedulerManager(
        FakeDriver(), notifier=notifications.for_format("both", legacy, versioned)
    )
    spec_prim = request_spec_to_primitive(_spec())
    reply = manager.select_destinations(
        RequestContext(request_id="req-n-1"), spec_obj=spec_prim, instance_uuids=[I1]
    )
    assert len(reply) == 1
    assert "Could not emit" in caplog.text


class HookedDriver(FakeDriver):
    """Says when its candidates are known, as the FilterScheduler does."""

    def __init__(self, calls: int = 1, **kw):
        super().__init__(**kw)
        self.hook_calls = calls
        self.order: list[str] = []

    def select_destinations(
        self, context, spec_obj, instance_uuids, return_alternates, on_candidates=None
    ):
        self.order.append("placement")
        for _ in range(self.hook_calls):
            on_candidates(spec_obj)
        self.order.append("filters")
        return super().select_destinations(context, spec_obj, instance_uuids, return_alternates)


def test_start_goes_once_when_the_driver_says_and_end_after():
    legacy, versioned = Recorder(), Recorder()
    driver = HookedDriver(calls=2)  # a NoValidHost from the view asked again of Placement
    manager = SchedulerManager(driver, notifier=notifications.for_format("both", legacy, versioned))
    manager.select_destinations(
        RequestContext(request_id="req-n-2"),
        spec_obj=request_spec_to_primitive(_spec()),
        instance_uuids=[I1],
    )
    for sent in (legacy.sent, versioned.sent):
        assert [e for e, _ in sent] == [
            "scheduler.select_destinations.start",
            "scheduler.select_destinations.end",
        ]


def test_no_start_when_the_driver_fails_before_its_candidates():
    legacy = Recorder()
    driver = HookedDriver(calls=0, error=exceptions.NoValidHost("no candidates"))
    manager = SchedulerManager(driver, notifier=legacy)
    with pytest.raises(oslo_messaging.ExpectedException):
        manager.select_destinations(
            RequestContext(), spec_obj=request_spec_to_primitive(_spec()), instance_uuids=[I1]
        )
    assert legacy.sent == []


def _filter_scheduler(hosts):
    placement = FakePlacement(hosts)
    return FilterScheduler(placement=placement, host_manager=FakeHostManager(hosts)), placement


def test_filter_scheduler_calls_the_hook_after_placement_before_filtering():
    hosts = [make_host("h1"), make_host("h2")]
    driver, placement = _filter_scheduler(hosts)
    seen = []

    def hook(req):
        seen.append((len(placement.queries), len(placement.claim_attempts), req.project_id))

    ctx = SimpleNamespace(request_id="req-h", project_id=None, user_id=None)
    driver.select_destinations(ctx, make_spec(), ["i-1"], on_candidates=hook)
    # Placement was asked, nothing was claimed yet; the hook gets the request (a RequestSpec)
    assert seen == [(1, 0, "project-1")]


def test_filter_scheduler_skips_the_hook_when_placement_finds_nothing():
    hosts = [make_host("h1")]
    driver, placement = _filter_scheduler(hosts)
    placement.no_candidates = {"h1"}
    seen = []
    ctx = SimpleNamespace(request_id="req-h", project_id=None, user_id=None)
    with pytest.raises(exceptions.NoValidHost):
        driver.select_destinations(ctx, make_spec(), ["i-1"], on_candidates=seen.append)
    assert seen == []
