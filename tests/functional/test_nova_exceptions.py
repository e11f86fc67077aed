"""What nova 34's conductor-side client gets when novasched fails a select_destinations.

nova's own `SchedulerAPI` (nova.scheduler.rpcapi, in the nova venv) calls a novasched service
over the real RabbitMQ (a vhost of the test's own). The service runs the real FilterScheduler
over in-memory Placement and host fakes, so that each failure comes from the code path that
raises it in production. nova's conductor catches NoValidHost and AllocationUpdateFailed by
class, and stores the exception's message as the instance fault, which the instance's owner
sees: the explanation must not be in it.
"""

# ruff: noqa: F811 - the nova_python fixture is imported by name; tests take it by that name

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from oslo_messaging import transport as om_transport

from placement_client.api import ConsumerGenerationConflict
from scheduler.conf import CONF
from scheduler.drivers.filter_scheduler import FilterScheduler
from scheduler.rpc import transport as rpc
from scheduler.rpc.service import SchedulerService
from tests.functional.fixtures_nova import _run_nova_side, nova_python  # noqa: F401
from tests.unit.scheduler.drivers.fakes import (
    FakeHostManager,
    FakePlacement,
    make_host,
)

PROJECT = "6f70656e-7374-6163-6b00-70726f6a6563"
USER = "75736572-0000-4000-8000-000000000001"


@pytest.fixture
def scheduler(rabbit_vhost: str) -> Iterator[SimpleNamespace]:
    """A novasched service on ``rabbit_vhost``, exchange ``nova``, topic ``scheduler`` (what
    nova's client uses), over a FilterScheduler with three hosts in fakes."""
    hosts = [make_host(f"host-{i}") for i in range(3)]
    placement = FakePlacement(hosts)
    driver = FilterScheduler(placement=placement, host_manager=FakeHostManager(hosts))
    CONF.register_opts(om_transport._transport_opts)
    CONF.set_override("control_exchange", "nova")
    CONF.set_override("transport_url", rabbit_vhost)
    transport = rpc.get_transport(CONF, url=rabbit_vhost)
    service = SchedulerService(CONF, driver=driver, transport=transport, host="nx-host")
    service.start()
    try:
        yield SimpleNamespace(placement=placement, hosts=hosts, url=rabbit_vhost)
    finally:
        service.stop()
        transport.cleanup()


def _nova_call(nova_python: Path, sched: SimpleNamespace, instance_uuids: list[str]) -> dict:
    request_id = f"req-{uuidlib.uuid4()}"
    out = _run_nova_side(
        nova_python,
        "exception_call.py",
        {
            "transport_url": sched.url,
            "exchange": "nova",
            "user_id": USER,
            "project_id": PROJECT,
            "request_id": request_id,
            "flavor_name": "m1.small",
            "instance_uuids": instance_uuids,
        },
    )
    out["request_id"] = request_id
    return out


def test_no_valid_host_is_nova_s_with_nova_s_words_and_the_request_id(nova_python, scheduler):
    # Placement answers no host: the explanation names the query; the conductor must not
    scheduler.placement.no_candidates = {h.host for h in scheduler.hosts}
    out = _nova_call(nova_python, scheduler, [str(uuidlib.uuid4())])
    assert out["class"] == "nova.exception_Remote.NoValidHost_Remote"
    assert out["is_no_valid_host"] and out["is_nova_exception"]
    reason = f"There are not enough hosts available. (request {out['request_id']})"
    assert out["kwargs"] == {"reason": reason, "code": 500}
    assert out["format_message"] == f"No valid host was found. {reason}"
    # the instance fault the owner sees: nova's text and the request id, nothing else
    assert out["fault_message"] == f"No valid host was found. {reason}"
    assert "Placement" not in out["str"] and "resources=" not in out["str"]
    # no traceback of ours travels
    assert "scheduler/" not in out["str"] and ".py" not in out["str"]


def test_no_valid_host_detail_is_an_operator_choice(nova_python, scheduler):
    CONF.set_override("novalidhost_detail", True, group="scheduler")
    scheduler.placement.no_candidates = {h.host for h in scheduler.hosts}
    out = _nova_call(nova_python, scheduler, [str(uuidlib.uuid4())])
    assert out["is_no_valid_host"]
    assert out["kwargs"]["reason"].startswith("Placement returned no allocation candidates")
    # nova keeps the first 255 characters of a fault message
    assert out["fault_message"] == f"No valid host was found. {out['kwargs']['reason']}"[:255]


def test_consumer_generation_conflict_is_nova_s_allocation_update_failed(nova_python, scheduler):
    instance = str(uuidlib.uuid4())
    scheduler.placement.consumer_errors[instance] = ConsumerGenerationConflict(
        "consumer generation conflict at http://placement.internal:8778", status=409
    )
    out = _nova_call(nova_python, scheduler, [instance])
    # what nova's evacuate and rebuild paths catch by class
    assert out["class"] == "nova.exception_Remote.AllocationUpdateFailed_Remote"
    assert out["is_allocation_update_failed"] and not out["is_no_valid_host"]
    assert out["kwargs"]["consumer_uuid"] == instance
    assert out["kwargs"]["code"] == 500
    assert out["fault_message"] == (
        f"Failed to update allocations for consumer {instance}. Error: another process "
        f"changed the consumer {instance} after the scheduler read the consumer state during "
        "the claim"
    )
    assert "placement.internal" not in out["str"]


def test_unexpected_error_is_a_remote_error_without_detail(nova_python, scheduler):
    scheduler.placement.candidates_error = RuntimeError("cell db at 10.1.2.3 on fire")
    out = _nova_call(nova_python, scheduler, [str(uuidlib.uuid4())])
    # what nova's conductor gets for its own scheduler's non-nova errors: a RemoteError,
    # caught by none of its NoValidHost/AllocationUpdateFailed clauses
    assert out["is_remote_error"] and not out["is_nova_exception"]
    assert out["exc_type"] == "RuntimeError"
    assert out["fault_message"] == "RemoteError"
    assert "10.1.2.3" not in out["str"] and ".py" not in out["str"]
    assert f"(request {out['request_id']})" in out["str"]
