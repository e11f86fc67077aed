"""What the rest of a nova deployment sees of its scheduler (issue 18), through nova's API and
its message bus: a tenant's failed boot shows nova's own words and nothing of the cloud,
the operator finds the explanation by the request id, ``GET /os-services`` lists the
scheduler up while it runs and down once it stopped, and nova's versioned
``scheduler.select_destinations`` notifications reach a consumer on RabbitMQ.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import oslo_messaging
import pytest
from oslo_config import cfg

from tests.deployment.deployment import FAKE_TOTAL_RAM_MB, Deployment, wait_for
from tests.functional.fixtures_rabbit import NotificationRecorder

pytestmark = [pytest.mark.functional, pytest.mark.timeout(600)]

NOVA_TEXT = "No valid host was found. There are not enough hosts available."
SCHEDULER_HOST = "dep-control"  # [DEFAULT] host of the deployment's nova.conf


def test_a_tenant_sees_novas_words_and_the_operator_finds_why_by_the_request_id(
    deployment: Deployment,
):
    flavor = deployment.flavor("too-big", ram=FAKE_TOTAL_RAM_MB * 2)
    body = {
        "server": {
            "name": "nowhere",
            "imageRef": deployment.image_id,
            "flavorRef": flavor,
            "networks": "none",
        }
    }
    resp = deployment.tenant.session.post(deployment.tenant.url + "/servers", json=body)
    assert resp.status_code == 202, resp.text
    request_id = resp.headers["x-openstack-request-id"]
    server_id = resp.json()["server"]["id"]
    deployment.server_ids.append(server_id)
    deployment.wait_server(server_id, ("ERROR",))

    seen = deployment.tenant.get(f"/servers/{server_id}")["server"]
    fault = seen["fault"]
    # nova's own sentence, and the id the tenant can quote: nothing about filters, hosts,
    # providers or the Placement query
    assert fault["message"] == f"{NOVA_TEXT} (request {request_id})", fault
    assert "details" not in fault
    assert not re.search(r"MEMORY_MB|resources|Filter|[0-9]+/[0-9]+ hosts", fault["message"])

    # the operator greps novasched's log for that id and finds the explanation
    line = wait_for(
        "novasched's log line for the request",
        lambda: next(
            (
                ln
                for ln in deployment.log("novasched").read_text(errors="replace").splitlines()
                if f"No valid host for request {request_id}" in ln
            ),
            None,
        ),
        20,
        0.3,
    )
    assert "MEMORY_MB" in line, line


def _scheduler_services(cloud: Deployment) -> list[dict]:
    return cloud.admin.get("/os-services?binary=nova-scheduler")["services"]


def test_the_scheduler_is_listed_up_while_it_runs_and_down_once_it_stopped(
    nova_deployment: Deployment,
):
    # once, in whichever configuration novasched runs (it waits service_down_time, 20 s here)
    deployment = nova_deployment
    (svc,) = _scheduler_services(deployment)
    assert (svc["host"], svc["state"], svc["status"]) == (SCHEDULER_HOST, "up", "enabled")
    assert svc["zone"] == "internal"
    deployment.stop_novasched()
    try:
        # nova-api says down once service_down_time (20 s) has passed since the last
        # heartbeat
        wait_for(
            "nova-api to list the stopped scheduler as down",
            lambda: _scheduler_services(deployment)[0]["state"] == "down",
            60,
            2,
        )
    finally:
        deployment.start_novasched()
    # the same row again, up as soon as the restarted service has reported
    wait_for(
        "nova-api to list the restarted scheduler as up",
        lambda: (
            [(s["id"], s["state"]) for s in _scheduler_services(deployment)] == [(svc["id"], "up")]
        ),
        30,
        0.5,
    )


@pytest.fixture
def versioned_notifications(deployment: Deployment) -> Iterator[NotificationRecorder]:
    """A consumer of the deployment's ``versioned_notifications`` topic, as a notification
    consumer (Searchlight, Watcher, a billing service) listens."""
    conf = cfg.ConfigOpts()
    conf([], project="novasched-test")
    transport = oslo_messaging.get_notification_transport(conf, url=deployment.transport_url)
    recorder = NotificationRecorder()
    listener = oslo_messaging.get_notification_listener(
        transport,
        [oslo_messaging.Target(exchange="nova", topic="versioned_notifications")],
        [recorder],
        executor="threading",
    )
    listener.start()
    try:
        yield recorder
    finally:
        listener.stop()
        listener.wait()
        transport.cleanup()


def test_versioned_select_destinations_notifications_reach_a_consumer(
    deployment: Deployment, versioned_notifications: NotificationRecorder
):
    flavor = deployment.flavor("small")
    server = deployment.boot_and_wait(flavor, name="notified")
    deployment.expect_active(server)
    start = versioned_notifications.find("scheduler.select_destinations.start", server["id"])
    end = versioned_notifications.find("scheduler.select_destinations.end", server["id"])
    for n in (start, end):
        assert n["publisher_id"] == f"nova-scheduler:{SCHEDULER_HOST}"
        payload = n["payload"]
        assert (payload["nova_object.name"], payload["nova_object.version"]) == (
            "RequestSpecPayload",
            "1.1",
        )
        assert payload["nova_object.namespace"] == "nova"
        data = payload["nova_object.data"]
        assert data["flavor"]["nova_object.data"]["name"] == "small"
        assert data["image"]["nova_object.data"]["id"] == deployment.image_id
        assert data["num_instances"] == 1
