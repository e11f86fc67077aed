"""SchedulerManager: the RPC endpoint over a fake driver (no broker)."""

from __future__ import annotations

import json
import logging
import sys
import threading

import oslo_messaging
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oslo_messaging._drivers import common as rpc_common

from scheduler import exceptions
from scheduler.objects import Flavor, RequestSpec
from scheduler.rpc import wire
from scheduler.rpc.context import RequestContext
from scheduler.rpc.manager import BaseAPI, NovaNoValidHost, SchedulerManager
from scheduler.rpc.wire import request_spec_to_primitive
from tests.samples import NOVA_SELECT_DESTINATIONS
from tests.unit.scheduler.rpc.fakes import FakeDriver

SAMPLE = NOVA_SELECT_DESTINATIONS

# instance uuids as nova sends them (the scheduler refuses anything else)
I1 = "7f4b1c1e-8a0b-4a4e-9e57-0d6f1c1e7b21"
I2 = "7f4b1c1e-8a0b-4a4e-9e57-0d6f1c1e7b22"


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
        instance_uuids=[I1, I2],
        return_objects=True,
        return_alternates=True,
    )
    assert driver.calls[0][2] == [I1, I2]
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
        ctxt, spec_obj=spec_prim, instance_uuids=[I1], return_objects=True
    )
    assert driver.calls[0][3] is False
    assert len(reply) == 1 and len(reply[0]) == 1


def test_alternates_without_objects_are_not_requested(ctxt, spec_prim):
    driver = FakeDriver()
    reply = SchedulerManager(driver).select_destinations(
        ctxt, spec_obj=spec_prim, instance_uuids=[I1], return_alternates=True
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
    reason = "There are not enough hosts available. (request req-test-1)"
    assert failure["message"] == f"No valid host was found. {reason}"
    assert failure["args"] == [f"No valid host was found. {reason}"]
    assert failure["kwargs"] == {"reason": reason, "code": 500}
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
    # the traceback and the message stay in our log; the caller gets the class name and
    # the request id
    assert any("req-test-1" in r.getMessage() for r in caplog.records)
    assert any("database on fire" in r.exc_text for r in caplog.records if r.exc_text)
    failure = _expected_failure(excinfo)
    assert failure["class"] == "RuntimeError"
    assert failure["module"] == "novasched.internal"
    assert "database on fire" not in json.dumps(failure)
    assert "(request req-test-1)" in failure["message"]


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
    assert manager.sync_instance_info(ctxt, "h1", [I1]) is None


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


# -- limits on input, checked before any work (issue 10) ---------------------------------------

BIG = 20 * 1024 * 1024
UUID_1 = "00000000-0000-0000-0000-000000000001"
UUID_2 = "00000000-0000-0000-0000-000000000002"


class ExplainingDriver(FakeDriver):
    def explain_destinations(self, ctxt, spec, all_hosts=False):
        self.calls.append(("explain", spec))
        return {"explained": True}


def _refused(manager, ctxt, **kwargs) -> str:
    """The InvalidRequest message of a select_destinations the manager refuses."""
    with pytest.raises(oslo_messaging.ExpectedException) as excinfo:
        manager.select_destinations(ctxt, **kwargs)
    exc = excinfo.value.exc_info[1]
    assert isinstance(exc, exceptions.InvalidRequest), exc
    return str(exc)


def _data(prim: dict) -> dict:
    return prim["nova_object.data"]


def test_twenty_megabyte_project_id_is_refused_with_little_log(ctxt, spec_prim, caplog):
    _data(spec_prim)["project_id"] = "p" * BIG
    driver = FakeDriver()
    with caplog.at_level(logging.DEBUG):
        message = _refused(
            SchedulerManager(driver), ctxt, spec_obj=spec_prim, instance_uuids=[UUID_1]
        )
    assert "project_id" in message and "1048576" in message
    assert driver.calls == []
    logged = sum(len(r.getMessage()) + len(r.exc_text or "") for r in caplog.records)
    assert 0 < logged < 2048
    assert len(caplog.records) <= 2


def test_project_id_over_255_is_refused(ctxt, spec_prim):
    _data(spec_prim)["project_id"] = "p" * 256
    driver = FakeDriver()
    message = _refused(SchedulerManager(driver), ctxt, spec_obj=spec_prim)
    assert message == "RequestSpec.project_id: is 256 characters long; the limit is 255"
    assert driver.calls == []


def test_twenty_megabyte_hint_is_refused(ctxt, spec_prim, caplog):
    _data(spec_prim)["scheduler_hints"] = {"group": ["g" * BIG]}
    driver = FakeDriver()
    with caplog.at_level(logging.DEBUG):
        message = _refused(SchedulerManager(driver), ctxt, spec_obj=spec_prim)
    assert message.startswith("spec_obj.scheduler_hints.group[0]: the request is larger")
    assert "1048576 bytes ([scheduler] max_request_bytes)" in message
    assert driver.calls == []
    assert sum(len(r.getMessage()) for r in caplog.records) < 2048


def test_200k_extra_specs_are_refused(ctxt, spec_prim):
    flavor = _data(_data(spec_prim)["flavor"])
    flavor["extra_specs"] = {f"k{i}": "v" for i in range(200_000)}
    driver = FakeDriver()
    message = _refused(SchedulerManager(driver), ctxt, spec_obj=spec_prim)
    # 200k specs pass 1 MiB first
    assert message == (
        "spec_obj.flavor.extra_specs: the request is larger than 1048576 bytes "
        "([scheduler] max_request_bytes) at this field"
    )
    assert driver.calls == []


def test_extra_specs_have_no_count_of_their_own(ctxt, spec_prim):
    # nova puts no bound on a flavor's extra specs: only the size guard bounds them
    flavor = _data(_data(spec_prim)["flavor"])
    flavor["extra_specs"] = {f"k{i}": "v" for i in range(5000)}
    driver = FakeDriver()
    SchedulerManager(driver).select_destinations(ctxt, spec_obj=spec_prim)
    assert len(driver.calls[0][1].flavor.extra_specs) == 5000


def test_hints_as_large_as_nova_api_takes_are_decided(ctxt, spec_prim):
    # a same_host list of instance uuids filling nova-api's whole request body (114,688
    # bytes, oslo.middleware's default): about 2,900 uuids
    uuids = [f"00000000-0000-4000-8000-{n:012d}" for n in range(wire.NOVA_API_BODY_BYTES // 39)]
    # and an unknown hint whose value is as long as that body
    _data(spec_prim)["scheduler_hints"] = {
        "same_host": uuids,
        "vendor:note": ["n" * (wire.NOVA_API_BODY_BYTES - 100)],
    }
    driver = FakeDriver()
    SchedulerManager(driver).select_destinations(ctxt, spec_obj=spec_prim)
    assert driver.calls[0][1].scheduler_hints["same_host"] == uuids
    # far past it: the size guard
    _data(spec_prim)["scheduler_hints"] = {"same_host": uuids * 10}
    message = _refused(SchedulerManager(FakeDriver()), ctxt, spec_obj=spec_prim)
    assert message.startswith("spec_obj.scheduler_hints.same_host[")
    assert message.endswith(
        "larger than 1048576 bytes ([scheduler] max_request_bytes) at this field"
    )


def test_request_size_limit_follows_the_option(ctxt, spec_prim):
    class Conf:
        class scheduler:  # noqa: N801 - the option group's name
            max_request_bytes = 1024
            max_instances_per_request = 1000

    _data(spec_prim)["scheduler_hints"] = {"h": ["v" * 200] * 10}
    driver = FakeDriver()
    message = _refused(SchedulerManager(driver, conf=Conf), ctxt, spec_obj=spec_prim)
    assert "larger than 1024 bytes ([scheduler] max_request_bytes)" in message
    assert driver.calls == []
    # the default 1 MiB takes it
    SchedulerManager(driver).select_destinations(ctxt, spec_obj=spec_prim)
    assert len(driver.calls) == 1


def test_deep_nesting_is_refused(ctxt, spec_prim):
    deep: list = []
    for _ in range(100):
        deep = [deep]
    _data(spec_prim)["numa_topology"] = deep
    driver = FakeDriver()
    message = _refused(SchedulerManager(driver), ctxt, spec_obj=spec_prim)
    assert "spec_obj.numa_topology" in message and "deeper than 32 levels" in message
    assert driver.calls == []


def test_as_many_instance_uuids_as_the_size_guard_carries_are_decided(ctxt, spec_prim):
    # nova bounds a boot's instances by the project's quota only (maybe unlimited): 10,000
    # uuids are decided, 30,000 (past 1 MiB) are refused by the size guard
    uuids = [f"00000000-0000-4000-8000-{n:012d}" for n in range(10_000)]
    _data(spec_prim)["num_instances"] = len(uuids)
    driver = FakeDriver()
    SchedulerManager(driver).select_destinations(ctxt, spec_obj=spec_prim, instance_uuids=uuids)
    assert driver.calls[0][2] == uuids
    many = [f"00000000-0000-4000-8000-{n:012d}" for n in range(30_000)]
    message = _refused(
        SchedulerManager(FakeDriver()), ctxt, spec_obj=spec_prim, instance_uuids=many
    )
    assert message.startswith("instance_uuids[")
    assert "larger than 1048576 bytes ([scheduler] max_request_bytes)" in message


def test_max_instances_per_request_set_by_the_operator_is_the_limit(ctxt, spec_prim):
    class Conf:
        class scheduler:  # noqa: N801 - the option group's name
            max_request_bytes = 1048576
            max_instances_per_request = 1000

    uuids = [f"00000000-0000-0000-0000-{n:012d}" for n in range(10_000)]
    driver = FakeDriver()
    message = _refused(
        SchedulerManager(driver, conf=Conf), ctxt, spec_obj=spec_prim, instance_uuids=uuids
    )
    assert message == (
        "instance_uuids: has 10000 items; the limit is 1000 ([scheduler] max_instances_per_request)"
    )
    assert driver.calls == []


@pytest.mark.parametrize(
    ("uuids", "message"),
    [
        (UUID_1, "instance_uuids: expected a list of instance UUIDs or null"),
        (12345, "instance_uuids: expected a list of instance UUIDs or null, got 12345 (int)"),
        ([None], "instance_uuids[0]: expected an instance UUID string, got None"),
        ([UUID_1, UUID_1], f"instance_uuids[1]: repeats instance_uuids[0] ('{UUID_1}')"),
    ],
)
def test_malformed_instance_uuids_are_refused(ctxt, spec_prim, uuids, message):
    driver = FakeDriver()
    refused = _refused(SchedulerManager(driver), ctxt, spec_obj=spec_prim, instance_uuids=uuids)
    assert refused.startswith(message)
    assert driver.calls == []


def test_non_uuid_instance_ids_are_refused_when_checked(ctxt, spec_prim):
    driver = FakeDriver()
    manager = SchedulerManager(driver)
    message = _refused(manager, ctxt, spec_obj=spec_prim, instance_uuids=["not-a-uuid"])
    assert message == "instance_uuids[0]: expected an instance UUID, got 'not-a-uuid' (str)"
    assert driver.calls == []
    manager.select_destinations(ctxt, spec_obj=spec_prim, instance_uuids=[UUID_1, UUID_2])
    assert driver.calls[0][2] == [UUID_1, UUID_2]


def test_huge_num_instances_with_one_uuid_is_refused(ctxt, spec_prim):
    _data(spec_prim)["num_instances"] = 2**31
    driver = FakeDriver()
    message = _refused(SchedulerManager(driver), ctxt, spec_obj=spec_prim, instance_uuids=[UUID_1])
    # as many as 1 MiB of instance uuids (39 bytes each) would be
    assert message == (
        f"RequestSpec.num_instances: is {2**31}; the limit is 26886 "
        "([scheduler] max_instances_per_request)"
    )
    assert driver.calls == []


def test_legacy_num_instances_has_the_same_limit(ctxt):
    request_spec = {
        "instance_type": {"memory_mb": 512, "vcpus": 1, "name": "tiny"},
        "num_instances": 10**6,
    }
    driver = FakeDriver()
    message = _refused(SchedulerManager(driver), ctxt, request_spec=request_spec)
    assert message.startswith("RequestSpec.num_instances: is 1000000; the limit is 26886")
    assert driver.calls == []


@pytest.mark.parametrize(("vcpus", "got"), [(-1, "-1"), (0, "0")])
def test_vcpus_below_one_are_refused(ctxt, spec_prim, vcpus, got):
    _data(_data(spec_prim)["flavor"])["vcpus"] = vcpus
    driver = FakeDriver()
    message = _refused(SchedulerManager(driver), ctxt, spec_obj=spec_prim)
    assert message == f"RequestSpec.flavor.vcpus: must be at least 1, got {got}"
    assert driver.calls == []


def test_a_raw_decoder_error_is_logged_bounded(ctxt, spec_prim, caplog, monkeypatch):
    from scheduler.rpc import wire

    def broken(prim):
        raise ValueError("x" * BIG)

    monkeypatch.setattr(wire, "request_spec_from_primitive", broken)
    driver = FakeDriver()
    with caplog.at_level(logging.DEBUG):
        message = _refused(SchedulerManager(driver), ctxt, spec_obj=spec_prim)
    assert message.startswith("malformed request spec: ValueError(") and len(message) < 1000
    assert sum(len(r.getMessage()) for r in caplog.records) < 2048


def test_a_huge_request_id_is_logged_bounded(spec_prim, caplog):
    huge_ctxt = RequestContext(user_id="u1", project_id="p1", request_id="r" * BIG)
    _data(spec_prim)["project_id"] = "p" * 300
    with caplog.at_level(logging.DEBUG):
        _refused(SchedulerManager(FakeDriver()), huge_ctxt, spec_obj=spec_prim)
    assert sum(len(r.getMessage()) for r in caplog.records) < 2048


@pytest.mark.parametrize(
    "spoil",
    [
        lambda p: _data(p).__setitem__("project_id", "p" * BIG),
        lambda p: _data(p).__setitem__("scheduler_hints", {"h": ["v" * (BIG + 1)]}),
        lambda p: _data(_data(p)["flavor"]).__setitem__("vcpus", 0),
        lambda p: _data(p).__setitem__("num_instances", 2**31),
    ],
)
def test_explain_destinations_has_the_same_checks(ctxt, spec_prim, spoil):
    spoil(spec_prim)
    driver = ExplainingDriver()
    with pytest.raises(oslo_messaging.ExpectedException) as excinfo:
        SchedulerManager(driver).explain_destinations(ctxt, spec_prim)
    assert isinstance(excinfo.value.exc_info[1], exceptions.InvalidRequest)
    assert driver.calls == []


def test_explain_destinations_takes_a_good_request(ctxt, spec_prim):
    driver = ExplainingDriver()
    assert SchedulerManager(driver).explain_destinations(ctxt, spec_prim) == {"explained": True}
    assert len(driver.calls) == 1


# any malformed or huge payload: InvalidRequest or NoValidHost, and the driver only ever sees
# a request within the limits

_MAX_INSTANCES = 20
_MAX_BYTES = 16 * 1024


class _SmallLimits:
    class scheduler:  # noqa: N801 - the option group's name
        max_request_bytes = _MAX_BYTES
        max_instances_per_request = _MAX_INSTANCES


class ValidatingDriver(FakeDriver):
    """Records every request that reaches it that breaks a limit; sometimes NoValidHost."""

    def __init__(self):
        super().__init__()
        self.violations: list[str] = []

    def select_destinations(self, context, spec_obj, instance_uuids, return_alternates):
        flavor = spec_obj.flavor
        if not (isinstance(flavor.vcpus, int) and flavor.vcpus >= 1):
            self.violations.append(f"vcpus {flavor.vcpus!r}")
        if not (isinstance(flavor.memory_mb, int) and flavor.memory_mb >= 1):
            self.violations.append(f"memory_mb {flavor.memory_mb!r}")
        if min(flavor.root_gb, flavor.ephemeral_gb, flavor.swap) < 0:
            self.violations.append("negative disk")
        if not 1 <= spec_obj.num_instances <= _MAX_INSTANCES:
            self.violations.append(f"num_instances {spec_obj.num_instances}")
        for text in (spec_obj.project_id, spec_obj.user_id, spec_obj.availability_zone):
            if text is not None and len(text) > 255:
                self.violations.append("long string")
        limit = wire.MAX_HINT_LENGTH  # nova-api's body: any hint may be that long
        for name, values in spec_obj.scheduler_hints.items():
            if len(name) > limit or any(len(v) > limit for v in values):
                self.violations.append("long hint")
        if instance_uuids is not None:
            if not isinstance(instance_uuids, list) or len(instance_uuids) > _MAX_INSTANCES:
                self.violations.append("instance_uuids shape")
            elif len(set(instance_uuids)) != len(instance_uuids) or not all(
                isinstance(u, str) for u in instance_uuids
            ):
                self.violations.append("instance_uuids items")
        if spec_obj.flavor.name == "none":
            raise exceptions.NoValidHost("0/1 hosts available")
        return super().select_destinations(context, spec_obj, instance_uuids, return_alternates)


_huge_text = st.integers(min_value=0, max_value=40_000).map(lambda n: "x" * n)
_bad_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**40), max_value=2**40)
    | st.sampled_from([2**31, 2**63, -1, 0])
    | st.floats(allow_nan=False)
    | st.text(max_size=5)
    | _huge_text
    | st.just(UUID_1),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=5) | _huge_text, children, max_size=4)
        | st.integers(min_value=0, max_value=3000).map(lambda n: ["u"] * n)
        | st.integers(min_value=0, max_value=3000).map(lambda n: {f"k{i}": "v" for i in range(n)})
    ),
    max_leaves=6,
)
_SPEC_PATHS = [
    ("num_instances",),
    ("project_id",),
    ("user_id",),
    ("availability_zone",),
    ("scheduler_hints",),
    ("instance_uuid",),
    ("ignore_hosts",),
    ("numa_topology",),
    ("flavor", "vcpus"),
    ("flavor", "memory_mb"),
    ("flavor", "root_gb"),
    ("flavor", "swap"),
    ("flavor", "name"),
    ("flavor", "extra_specs"),
]
_instance_uuids = (
    st.none()
    | _bad_values
    | st.lists(st.sampled_from([UUID_1, UUID_2, "not-a-uuid", None, 5, "u" * 300]), max_size=5)
    | st.integers(min_value=0, max_value=40).map(
        lambda n: [f"00000000-0000-0000-0000-{i:012d}" for i in range(n)]
    )
)


@settings(max_examples=300, deadline=None)
@given(
    changes=st.lists(st.tuples(st.sampled_from(_SPEC_PATHS), _bad_values), max_size=3),
    instance_uuids=_instance_uuids,
    no_valid_host=st.booleans(),
)
def test_malformed_or_huge_payloads_never_reach_the_driver(changes, instance_uuids, no_valid_host):
    spec = RequestSpec(flavor=Flavor(memory_mb=512, vcpus=1, root_gb=1, name="tiny"))
    if no_valid_host:
        spec.flavor.name = "none"
    spec_prim = request_spec_to_primitive(spec)
    for path, value in changes:
        target = _data(spec_prim)
        for key in path[:-1]:
            target = _data(target[key])
        target[path[-1]] = value
    driver = ValidatingDriver()
    manager = SchedulerManager(driver, conf=_SmallLimits)
    ctxt = RequestContext(user_id="u1", project_id="p1", request_id="req-hypothesis")
    try:
        manager.select_destinations(
            ctxt,
            spec_obj=spec_prim,
            instance_uuids=instance_uuids,
            return_objects=True,
            return_alternates=True,
        )
    except oslo_messaging.ExpectedException as excinfo:
        exc = excinfo.exc_info[1]
        assert isinstance(exc, (exceptions.InvalidRequest, NovaNoValidHost)), repr(exc)
        assert len(str(exc)) < 2000
    assert driver.violations == []
