"""Failures at the RPC edge travel as nova's classes, without our explanation by default
(scheduler/rpc/manager.py), and our own client turns them back into ours (rpcapi.py)."""

from __future__ import annotations

import json
import logging

import oslo_messaging
import pytest
from oslo_messaging._drivers import common as rpc_common

from scheduler import exceptions
from scheduler.conf import CONF
from scheduler.objects import Flavor, RequestSpec
from scheduler.rpc import rpcapi
from scheduler.rpc.context import RequestContext
from scheduler.rpc.manager import SchedulerManager
from scheduler.rpc.wire import request_spec_to_primitive
from tests.unit.scheduler.rpc.fakes import FakeDriver

I1 = "7f4b1c1e-8a0b-4a4e-9e57-0d6f1c1e7b21"
DETAIL = "0/3 hosts available: 3 AggregateInstanceExtraSpecsFilter (agg 1c0ffee0)"


def _failure(error: Exception, request_id: str | None = "req-e-1") -> dict:
    spec = request_spec_to_primitive(RequestSpec(flavor=Flavor(memory_mb=1, vcpus=1)))
    # a context dict: oslo.context would make up a request id for a missing one
    ctxt = RequestContext(request_id=request_id) if request_id else {}
    with pytest.raises(oslo_messaging.ExpectedException) as excinfo:
        SchedulerManager(FakeDriver(error=error)).select_destinations(
            ctxt, spec_obj=spec, instance_uuids=[I1]
        )
    return json.loads(rpc_common.serialize_remote_exception(excinfo.value.exc_info))


def test_no_valid_host_keeps_the_explanation_in_the_log(caplog):
    with caplog.at_level(logging.INFO, logger="scheduler.rpc.manager"):
        failure = _failure(exceptions.NoValidHost(DETAIL))
    reason = "There are not enough hosts available. (request req-e-1)"
    assert failure["kwargs"] == {"reason": reason, "code": 500}
    assert DETAIL not in json.dumps(failure)
    # no traceback of ours travels: only the exception line
    assert failure["tb"] == [f"nova.exception.NoValidHost: No valid host was found. {reason}\n"]
    assert any("req-e-1" in r.getMessage() and DETAIL in r.getMessage() for r in caplog.records)


def test_no_valid_host_without_a_request_id_is_nova_s_text():
    failure = _failure(exceptions.NoValidHost(DETAIL), request_id=None)
    assert failure["kwargs"]["reason"] == "There are not enough hosts available."


def test_no_valid_host_detail_option_sends_the_explanation():
    CONF.set_override("novalidhost_detail", True, group="scheduler")
    assert _failure(exceptions.NoValidHost(DETAIL))["kwargs"]["reason"] == DETAIL


def test_allocation_update_failed_travels_as_nova_s():
    failure = _failure(exceptions.AllocationUpdateFailed(I1, "another process changed it"))
    assert (failure["module"], failure["class"]) == ("nova.exception", "AllocationUpdateFailed")
    assert failure["kwargs"] == {
        "consumer_uuid": I1,
        "error": "another process changed it",
        "code": 500,
    }
    assert failure["message"] == (
        f"Failed to update allocations for consumer {I1}. Error: another process changed it"
    )


def test_our_client_turns_nova_s_allocation_update_failed_back_into_ours():
    error = oslo_messaging.RemoteError(
        "AllocationUpdateFailed",
        f"Failed to update allocations for consumer {I1}. Error: raced",
        "tb",
    )
    ours = rpcapi.allocation_update_failed_from_remote(error)
    assert isinstance(ours, exceptions.AllocationUpdateFailed)
    assert (ours.consumer_uuid, ours.error) == (I1, "raced")
    assert (
        rpcapi.allocation_update_failed_from_remote(
            oslo_messaging.RemoteError("NoValidHost", "x", "tb")
        )
        is None
    )


def test_our_client_reads_the_generic_no_valid_host():
    error = oslo_messaging.RemoteError(
        "NoValidHost",
        "No valid host was found. There are not enough hosts available. (request req-1)",
        "tb",
    )
    ours = rpcapi.no_valid_host_from_remote(error)
    assert ours.reason == "There are not enough hosts available. (request req-1)"
