"""SchedulerManager: the RPC endpoint over a fake driver (no broker)."""

from __future__ import annotations

import json
import logging
import sys
import threading

import oslo_messaging
import pytest
from oslo_messaging._drivers import common as rpc_common

from scheduler import exceptions
from scheduler.objects import Flavor, RequestSpec, SchedulerLimits, Selection
from scheduler.rpc.context import RequestContext
from scheduler.rpc.manager import BaseAPI, NovaNoValidHost, SchedulerManager
from scheduler.rpc.wire import request_spec_to_primitive
from tests.samples import NOVA_SELECT_DESTINATIONS

SAMPLE = NOVA_SELECT_DESTINATIONS


def _selection(host: str) -> Selection:
    return Selection(
        compute_node_uuid=f"uuid-{host}",
        service_host=host,
        nodename=host,
        cell_uuid="cell-1",
        allocation_request={"allocations": {f"uuid-{host}": {"resources": {"VCPU": 1}}}},
        allocation_request_version="1.36",
        limits=SchedulerLimits(),
        availability_zone="nova",
    )


class FakeDriver:
    """Records what the manager passes; answers one chosen host plus alternates."""

    def __init__(self, error: Exception | None = None):
        self.calls: list[tuple] = []
        self.error = error
        self.release = threading.Event()
        self.release.set()
        self.entered = threading.Event()
        self.reset_called = False

    def select_destinations(self, context, spec_obj, instance_uuids, return_alternates):
        self.calls.append((context, spec_obj, instance_uuids, return_alternates))
        self.entered.set()
        self.release.wait(5)
        if self.error is not None:
            raise self.error
        count = len(instance_uuids) if instance_uuids is not None else spec_obj.num_instances
        return [
            [_selection(f"host{i}")] + ([_selection(f"alt{i}")] if return_alternates else [])
            for i in range(count)
        ]

    def reset(self):
        self.reset_called = True

    def stop(self):
        pass


class FakeNotifier:
    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.sent: list[tuple[str, dict]] = []

    def is_enabled(self) -> bool:
        return self.enabled

    def info(self, ctxt, event_type, payload):
        self.sent.append((event_type, payload))


@pytest.fixture
def ctxt():
    return RequestContext(user_id="u1", project_id="p1", request_id="req-test-1")


@pytest.fixture
def spec_prim():
    spec = RequestSpec(flavor=Flavor(memory_mb=512, vcpus=1, root_gb=1, name="tiny"))
    spec.project_id = "p1"
    return request_spec_to_primitive(spec)


def test_target_is_nova_4_5():
    assert SchedulerManager.target.version == "4.5"
    assert BaseAPI.target.namespace == "baseapi"
    assert BaseAPI.target.version == "1.1"


def test_objects_with_alternates_return_selection_primitives(ctxt, spec_prim):
    driver = FakeDriver()
    manager = SchedulerManager(driver)
    reply = manager.select_destinations(
        ctxt,
        spec_obj=spec_prim,
        instance_uuids=["i1", "i2"],
        return_objects=True,
        return_alternates=True,
    )
    assert driver.calls[0][2] == ["i1", "i2"]
    assert driver.calls[0][3] is True
    assert isinstance(driver.calls[0][1], RequestSpec)
    assert [[s["nova_object.data"]["service_host"] for s in alts] for alts in reply] == [
        ["host0", "alt0"],
        ["host1", "alt1"],
    ]
    assert reply[0][0]["nova_object.name"] == "Selection"
    # the placement allocation request travels JSON-encoded, as nova's Selection field does
    assert json.loads(reply[0][0]["nova_object.data"]["allocation_request"]) == {
        "allocations": {"uuid-host0": {"resources": {"VCPU": 1}}}
    }


def test_objects_without_alternates_asks_driver_for_none(ctxt, spec_prim):
    driver = FakeDriver()
    reply = SchedulerManager(driver).select_destinations(
        ctxt, spec_obj=spec_prim, instance_uuids=["i1"], return_objects=True
    )
    assert driver.calls[0][3] is False
    assert len(reply) == 1 and len(reply[0]) == 1


def test_alternates_without_objects_are_not_requested(ctxt, spec_prim):
    driver = FakeDriver()
    reply = SchedulerManager(driver).select_destinations(
        ctxt, spec_obj=spec_prim, instance_uuids=["i1"], return_alternates=True
    )
    assert driver.calls[0][3] is False
    assert reply == [{"host": "host0", "nodename": "host0", "limits": {}}]


def test_rpc_4_3_without_instance_uuids_passes_none(ctxt, spec_prim):
    driver = FakeDriver()
    reply = SchedulerManager(driver).select_destinations(ctxt, spec_obj=spec_prim)
    assert driver.calls[0][2] is None
    assert reply == [{"host": "host0", "nodename": "host0", "limits": {}}]


def test_rpc_4_0_legacy_dicts_are_decoded(ctxt):
    driver = FakeDriver()
    request_spec = {
        "instance_type": {"memory_mb": 2048, "vcpus": 2, "root_gb": 20, "name": "small"},
        "instance_properties": {"uuid": "i1", "project_id": "p1", "user_id": "u1"},
        "num_instances": 2,
        "image": {"properties": {"architecture": "x86_64"}},
    }
    filter_properties = {"ignore_hosts": ["bad"], "scheduler_hints": {"foo": "bar"}}
    reply = SchedulerManager(driver).select_destinations(
        ctxt, request_spec=request_spec, filter_properties=filter_properties
    )
    spec = driver.calls[0][1]
    assert spec.flavor.memory_mb == 2048
    assert spec.num_instances == 2
    assert spec.ignore_hosts == ["bad"]
    assert spec.image.properties == {"hw_architecture": "x86_64"}
    assert driver.calls[0][2] is None
    assert [r["host"] for r in reply] == ["host0", "host1"]


def test_sample_message_from_nova_is_decoded(ctxt):
    with open(SAMPLE) as f:
        args = json.load(f)["decoded_message"]["args"]
    driver = FakeDriver()
    reply = SchedulerManager(driver).select_destinations(ctxt, **args)
    spec = driver.calls[0][1]
    assert spec.flavor.name == "m1.small"
    assert spec.instance_group.policy == "anti-affinity"
    assert driver.calls[0][2] == ["00000000-0000-0000-0000-00000000001f"]
    assert driver.calls[0][3] is True
    assert len(reply[0]) == 2


def _expected_failure(excinfo) -> dict:
    """The failure oslo.messaging would send for an ExpectedException."""
    exc_info = excinfo.value.exc_info
    return json.loads(rpc_common.serialize_remote_exception(exc_info))


def test_no_valid_host_travels_as_nova_exception(ctxt, spec_prim):
    driver = FakeDriver(error=exceptions.NoValidHost("0/3 hosts available: 3 ComputeFilter"))
    with pytest.raises(oslo_messaging.ExpectedException) as excinfo:
        SchedulerManager(driver).select_destinations(ctxt, spec_obj=spec_prim)
    failure = _expected_failure(excinfo)
    assert failure["module"] == "nova.exception"
    assert failure["class"] == "NoValidHost"
    assert failure["message"] == "No valid host was found. 0/3 hosts available: 3 ComputeFilter"
    assert failure["kwargs"] == {"reason": "0/3 hosts available: 3 ComputeFilter"}
    # no nova package was imported or faked to get there
    assert "nova" not in sys.modules and "nova.exception" not in sys.modules


def test_wire_no_valid_host_class_names_nova():
    exc = NovaNoValidHost("why")
    assert type(exc).__module__ == "nova.exception"
    assert type(exc).__name__ == "NoValidHost"
    assert str(exc) == "No valid host was found. why"


def test_malformed_spec_is_a_clear_expected_error(ctxt, spec_prim):
    del spec_prim["nova_object.data"]["flavor"]
    driver = FakeDriver()
    with pytest.raises(oslo_messaging.ExpectedException) as excinfo:
        SchedulerManager(driver).select_destinations(ctxt, spec_obj=spec_prim)
    exc = excinfo.value.exc_info[1]
    assert isinstance(exc, exceptions.InvalidRequest)
    assert "flavor" in str(exc)
    assert driver.calls == []


def test_wrong_type_in_spec_names_the_field(ctxt, spec_prim):
    spec_prim["nova_object.data"]["num_instances"] = "many"
    with pytest.raises(oslo_messaging.ExpectedException) as excinfo:
        SchedulerManager(FakeDriver()).select_destinations(ctxt, spec_obj=spec_prim)
    assert "num_instances" in str(excinfo.value.exc_info[1])


def test_unexpected_driver_error_is_logged_with_request_id(ctxt, spec_prim, caplog):
    driver = FakeDriver(error=RuntimeError("database on fire"))
    with caplog.at_level(logging.ERROR, logger="scheduler.rpc.manager"):
        with pytest.raises(oslo_messaging.ExpectedException) as excinfo:
            SchedulerManager(driver).select_destinations(ctxt, spec_obj=spec_prim)
    assert isinstance(excinfo.value.exc_info[1], RuntimeError)
    assert any("req-test-1" in r.getMessage() for r in caplog.records)


def test_in_flight_calls_are_counted(ctxt, spec_prim):
    driver = FakeDriver()
    driver.release.clear()
    manager = SchedulerManager(driver)
    worker = threading.Thread(
        target=manager.select_destinations, args=(ctxt,), kwargs={"spec_obj": spec_prim}
    )
    worker.start()
    assert driver.entered.wait(5)
    assert manager.in_flight.count == 1
    assert manager.in_flight.wait_idle(0.1) is False
    driver.release.set()
    assert manager.in_flight.wait_idle(5) is True
    worker.join(5)
    assert manager.in_flight.count == 0


def test_in_flight_count_drops_after_failure(ctxt, spec_prim):
    manager = SchedulerManager(FakeDriver(error=exceptions.NoValidHost("x")))
    with pytest.raises(oslo_messaging.ExpectedException):
        manager.select_destinations(ctxt, spec_obj=spec_prim)
    assert manager.in_flight.count == 0


def test_notifications_start_and_end_carry_legacy_request_spec(ctxt, spec_prim):
    notifier = FakeNotifier()
    SchedulerManager(FakeDriver(), notifier=notifier).select_destinations(ctxt, spec_obj=spec_prim)
    assert [event for event, _ in notifier.sent] == [
        "scheduler.select_destinations.start",
        "scheduler.select_destinations.end",
    ]
    payload = notifier.sent[0][1]
    assert payload["request_spec"]["instance_type"]["memory_mb"] == 512
    assert payload["request_spec"]["num_instances"] == 1


def test_disabled_notifier_sends_nothing(ctxt, spec_prim):
    notifier = FakeNotifier(enabled=False)
    SchedulerManager(FakeDriver(), notifier=notifier).select_destinations(ctxt, spec_obj=spec_prim)
    assert notifier.sent == []


def test_no_end_notification_when_no_valid_host(ctxt, spec_prim):
    notifier = FakeNotifier()
    manager = SchedulerManager(FakeDriver(error=exceptions.NoValidHost("x")), notifier=notifier)
    with pytest.raises(oslo_messaging.ExpectedException):
        manager.select_destinations(ctxt, spec_obj=spec_prim)
    assert [event for event, _ in notifier.sent] == ["scheduler.select_destinations.start"]


def test_cache_update_casts_are_accepted(ctxt):
    manager = SchedulerManager(FakeDriver())  # a driver without the aggregate methods
    assert manager.update_aggregates(ctxt, aggregates={"nova_object.name": "x"}) is None
    assert manager.delete_aggregate(ctxt, aggregate={}) is None
    assert manager.update_instance_info(ctxt, "h1", {}) is None
    assert manager.delete_instance_info(ctxt, "h1", "i1") is None
    assert manager.sync_instance_info(ctxt, "h1", ["i1"]) is None


def test_reset_reaches_driver():
    driver = FakeDriver()
    SchedulerManager(driver).reset()
    assert driver.reset_called


def test_baseapi_ping_reply_shape(ctxt):
    api = BaseAPI()
    assert api.ping(ctxt, "hello") == {"service": "scheduler", "arg": "hello"}
    assert api.get_backdoor_port(ctxt) is None


class AggregateDriver(FakeDriver):
    def __init__(self):
        super().__init__()
        self.updated: list = []
        self.deleted: list = []

    def update_aggregates(self, aggregates):
        self.updated.extend(aggregates)

    def delete_aggregate(self, aggregate):
        self.deleted.append(aggregate)


def _aggregate_primitive(agg_id: int, name: str, hosts: list[str], metadata: dict) -> dict:
    return {
        "nova_object.name": "Aggregate",
        "nova_object.namespace": "nova",
        "nova_object.version": "1.3",
        "nova_object.data": {
            "id": agg_id,
            "uuid": f"00000000-0000-0000-0000-{agg_id:012d}",
            "name": name,
            "hosts": hosts,
            "metadata": metadata,
        },
    }


def test_aggregate_casts_reach_the_driver(ctxt):
    driver = AggregateDriver()
    manager = SchedulerManager(driver)
    agg = _aggregate_primitive(7, "fast", ["h1", "h2"], {"availability_zone": "az9"})
    manager.update_aggregates(
        ctxt,
        aggregates={
            "nova_object.name": "AggregateList",
            "nova_object.namespace": "nova",
            "nova_object.version": "1.3",
            "nova_object.data": {"objects": [agg]},
        },
    )
    assert [(a.id, a.hosts, a.metadata) for a in driver.updated] == [
        (7, {"h1", "h2"}, {"availability_zone": "az9"})
    ]
    manager.delete_aggregate(ctxt, aggregate=agg)
    assert [a.name for a in driver.deleted] == ["fast"]
    # nova-api's own form: a plain list of Aggregate primitives
    renamed = _aggregate_primitive(8, "faster", ["h3"], {"availability_zone": "az10"})
    manager.update_aggregates(ctxt, aggregates=[renamed])
    assert [(a.id, a.availability_zone) for a in driver.updated] == [(7, "az9"), (8, "az10")]
    # a malformed cast is logged and dropped; the manager keeps serving
    manager.update_aggregates(ctxt, aggregates={"nova_object.name": "Nonsense"})
    assert len(driver.updated) == 2


def test_manager_decodes_instance_list_casts():
    from scheduler.rpc.manager import SchedulerManager

    class Driver:
        def __init__(self):
            self.calls = []

        def update_instance_info(self, host, uuids):
            self.calls.append(("update", host, uuids))

        def delete_instance_info(self, host, uuid):
            self.calls.append(("delete", host, uuid))

        def sync_instance_info(self, host, uuids):
            self.calls.append(("sync", host, uuids))

    mgr = SchedulerManager.__new__(SchedulerManager)
    mgr.driver = Driver()
    inst = {
        "nova_object.name": "Instance",
        "nova_object.namespace": "nova",
        "nova_object.version": "2.8",
        "nova_object.data": {"uuid": "i-1", "host": "h1"},
    }
    listed = {
        "nova_object.name": "InstanceList",
        "nova_object.namespace": "nova",
        "nova_object.version": "2.6",
        "nova_object.data": {"objects": [inst]},
    }
    mgr.update_instance_info({}, "h1", listed)
    mgr.update_instance_info({}, "h1", {"bad": 1})  # logged, not raised
    mgr.delete_instance_info({}, "h1", "i-1")
    mgr.sync_instance_info({}, "h1", ["i-1"])
    assert mgr.driver.calls == [
        ("update", "h1", ["i-1"]),
        ("delete", "h1", "i-1"),
        ("sync", "h1", ["i-1"]),
    ]
