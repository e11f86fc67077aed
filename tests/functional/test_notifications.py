"""nova's select_destinations notifications, consumed from the real RabbitMQ.

A novasched service (the real FilterScheduler over in-memory Placement and host fakes) on a
RabbitMQ vhost of the test's own is called by nova 34's own conductor-side client (nova
builds the RequestSpec); listeners on nova's default topics, ``notifications`` (legacy) and
``versioned_notifications``, record what arrives for each ``[notifications]
notification_format``. The versioned payloads are then read back by nova 34's own objects.
"""

# ruff: noqa: F811 - the nova_python fixture is imported by name; tests take it by that name

from __future__ import annotations

import time
import uuid as uuidlib
from pathlib import Path

import oslo_messaging
import pytest
from oslo_messaging import transport as om_transport
from oslo_messaging.notify import notifier as om_notifier

from scheduler.conf import CONF
from scheduler.drivers.filter_scheduler import FilterScheduler
from scheduler.rpc import transport as rpc
from scheduler.rpc.service import SchedulerService
from tests.functional.fixtures_nova import (  # noqa: F401 - nova_python is a fixture
    _run_nova_side,
    nova_conductor_call,
    nova_python,
)
from tests.functional.fixtures_rabbit import (
    NotificationRecorder,
)
from tests.unit.scheduler.drivers.fakes import (
    FakeHostManager,
    FakePlacement,
    make_host,
)

PROJECT = "6f70656e-7374-6163-6b00-70726f6a6563"
USER = "75736572-0000-4000-8000-000000000001"
HOST = "notif-host"


@pytest.fixture
def world(rabbit_vhost: str):
    """Start a scheduler for a notification format: ``start(fmt)`` returns the legacy and
    versioned recorders."""
    stack: list = []

    def start(fmt: str) -> tuple[NotificationRecorder, NotificationRecorder]:
        CONF.register_opts(om_transport._transport_opts)
        CONF.register_opts(om_notifier._notifier_opts, group="oslo_messaging_notifications")
        CONF.set_override("control_exchange", "nova")
        CONF.set_override("transport_url", rabbit_vhost)
        CONF.set_override("driver", ["messagingv2"], group="oslo_messaging_notifications")
        CONF.set_override("notification_format", fmt, group="notifications")
        transport = rpc.get_transport(CONF, url=rabbit_vhost)
        stack.append(transport.cleanup)
        listen = oslo_messaging.get_notification_transport(CONF, url=rabbit_vhost)
        stack.append(listen.cleanup)
        recorders = (NotificationRecorder(), NotificationRecorder())
        for topic, recorder in zip(
            ("notifications", "versioned_notifications"), recorders, strict=True
        ):
            listener = oslo_messaging.get_notification_listener(
                listen, [oslo_messaging.Target(topic=topic)], [recorder], executor="threading"
            )
            listener.start()
            stack.append(listener.wait)
            stack.append(listener.stop)
        hosts = [make_host(f"host-{i}") for i in range(4)]
        driver = FilterScheduler(
            placement=FakePlacement(hosts), host_manager=FakeHostManager(hosts)
        )
        service = SchedulerService(CONF, driver=driver, transport=transport, host=HOST)
        service.start()
        stack.append(service.stop)
        return recorders

    yield start
    for undo in reversed(stack):
        undo()


def _boot(nova_python: Path, url: str, request_id: str) -> dict:
    return nova_conductor_call(
        nova_python,
        transport_url=url,
        exchange="nova",
        user_id=USER,
        project_id=PROJECT,
        request_id=request_id,
        flavor={"name": "m1.notif", "vcpus": 1, "memory_mb": 512, "root_gb": 1},
        count=2,
        anti_affinity=True,
        image_properties={"hw_architecture": "x86_64"},
    )


def _check_legacy(seen: list[dict], out: dict) -> None:
    assert [n["event_type"] for n in seen] == [
        "scheduler.select_destinations.start",
        "scheduler.select_destinations.end",
    ]
    # as nova's: the spec names the instance being scheduled, so the end names the last
    for n, instance in zip(
        seen, (out["instance_uuids"][0], out["instance_uuids"][-1]), strict=True
    ):
        assert n["publisher_id"] == f"scheduler.{HOST}"
        spec = n["payload"]["request_spec"]
        assert spec["instance_type"]["name"] == "m1.notif"
        assert spec["num_instances"] == 2
        assert spec["instance_properties"]["uuid"] == instance


def _check_versioned(seen: list[dict], out: dict) -> None:
    assert [n["event_type"] for n in seen] == [
        "scheduler.select_destinations.start",
        "scheduler.select_destinations.end",
    ]
    for n, instance in zip(
        seen, (out["instance_uuids"][0], out["instance_uuids"][-1]), strict=True
    ):
        assert n["publisher_id"] == f"nova-scheduler:{HOST}"
        payload = n["payload"]
        assert payload["nova_object.name"] == "RequestSpecPayload"
        assert payload["nova_object.namespace"] == "nova"
        assert payload["nova_object.version"] == "1.1"
        assert "nova_object.changes" not in payload
        data = payload["nova_object.data"]
        assert data["instance_uuid"] == instance
        assert data["project_id"] == PROJECT and data["user_id"] == USER
        assert data["num_instances"] == 2
        assert data["security_groups"] == []
        flavor = data["flavor"]
        assert (flavor["nova_object.name"], flavor["nova_object.version"]) == (
            "FlavorPayload",
            "1.4",
        )
        assert flavor["nova_object.data"]["name"] == "m1.notif"
        image = data["image"]
        assert (image["nova_object.name"], image["nova_object.version"]) == (
            "ImageMetaPayload",
            "1.0",
        )
        props = image["nova_object.data"]["properties"]
        assert props["nova_object.name"] == "ImageMetaPropsPayload"
        assert props["nova_object.version"] == "1.20"
        assert props["nova_object.data"]["hw_architecture"] == "x86_64"
        group = data["instance_group"]
        assert (group["nova_object.name"], group["nova_object.version"]) == (
            "ServerGroupPayload",
            "1.1",
        )
        assert group["nova_object.data"]["policy"] == "anti-affinity"
        assert data["pci_requests"]["nova_object.name"] == "InstancePCIRequestsPayload"
    # the end notification sees the request as scheduled: both hosts joined the group
    end_hosts = seen[1]["payload"]["nova_object.data"]["instance_group"]["nova_object.data"]
    assert sorted(end_hosts["hosts"]) == sorted(s[0]["service_host"] for s in out["selections"])


@pytest.mark.parametrize(
    "fmt, legacy_count, versioned_count",
    [("unversioned", 2, 0), ("versioned", 0, 2), ("both", 2, 2)],
)
def test_notification_format_decides_what_is_sent(
    nova_python, rabbit_vhost, world, fmt, legacy_count, versioned_count
):
    legacy, versioned = world(fmt)
    out = _boot(nova_python, rabbit_vhost, f"req-{uuidlib.uuid4()}")
    assert len(out["selections"]) == 2
    seen_legacy = legacy.wait_for(legacy_count)
    seen_versioned = versioned.wait_for(versioned_count)
    time.sleep(0.5)  # nothing more arrives
    assert len(legacy.seen) == legacy_count and len(versioned.seen) == versioned_count
    if legacy_count:
        _check_legacy(seen_legacy, out)
    if versioned_count:
        _check_versioned(seen_versioned, out)
        # nova's own objects read the payloads, and write back exactly what we sent
        checked = _run_nova_side(
            nova_python,
            "notification_check.py",
            {"payloads": [n["payload"] for n in seen_versioned]},
        )
        for got, n in zip(checked, seen_versioned, strict=True):
            assert got["is_request_spec_payload"] and got["version"] == "1.1"
            assert got["flavor_class"] == "FlavorPayload" and got["flavor_name"] == "m1.notif"
            assert got["image_properties_class"] == "ImageMetaPropsPayload"
            assert got["instance_group_policy"] == "anti-affinity"
            assert got["instance_uuid"] == n["payload"]["nova_object.data"]["instance_uuid"]
            assert got["round_trip_equal"], got["round_trip"]
