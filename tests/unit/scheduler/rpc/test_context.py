"""The request context: nova's dict form both ways, the RPC serializer, and log lines."""

from __future__ import annotations

import datetime
import io
import json
import logging

import oslo_messaging
import pytest
from oslo_config import cfg
from oslo_context import context as oslo_context
from oslo_log import formatters
from oslo_log import log as oslo_log
from oslo_messaging._metrics import client as metrics_client
from oslo_messaging._tracing import client as tracing_client

from scheduler.rpc import context
from tests.samples import nova_select_destinations

SAMPLE = nova_select_destinations()
PREFIX = "_context_"
SAMPLE_CONTEXT = {
    key[len(PREFIX) :]: value
    for key, value in SAMPLE["decoded_message"].items()
    if key.startswith(PREFIX)
}


def test_from_dict_reads_nova_context():
    ctxt = context.RequestContext.from_dict(SAMPLE_CONTEXT)
    assert ctxt.user_id == "u-111111111111111111111111111111"
    assert ctxt.project_id == "p-222222222222222222222222222222"
    assert ctxt.request_id == "req-00000000-0000-0000-0000-000000000007"
    assert ctxt.is_admin is False
    assert ctxt.read_deleted == "no"
    assert ctxt.timestamp == datetime.datetime(2026, 11, 22, 4, 57, 40, 336854)
    assert ctxt.roles == [] and ctxt.service_catalog == []


def test_to_dict_gives_back_what_nova_sent():
    ctxt = context.RequestContext.from_dict(SAMPLE_CONTEXT)
    assert ctxt.to_dict() == SAMPLE_CONTEXT
    json.dumps(ctxt.to_dict())


def test_from_dict_accepts_the_prefixed_message_keys():
    ctxt = context.context_from_dict(SAMPLE["decoded_message"])
    assert ctxt.request_id == "req-00000000-0000-0000-0000-000000000007"
    assert ctxt.user_id == "u-111111111111111111111111111111"


def test_round_trip_keeps_nova_specific_fields():
    ctxt = context.RequestContext(
        user_id="u",
        project_id="p",
        roles=["member"],
        read_deleted="yes",
        remote_address="10.0.0.1",
        quota_class="gold",
        service_catalog=[{"type": "placement", "endpoints": []}],
        global_request_id="req-global",
        user_name="alice",
        project_name="demo",
    )
    again = context.context_from_dict(json.loads(json.dumps(ctxt.to_dict())))
    assert again.to_dict() == ctxt.to_dict()
    assert again.global_request_id == "req-global"
    assert again.remote_address == "10.0.0.1" and again.quota_class == "gold"
    assert again.timestamp == ctxt.timestamp


def test_is_admin_defaults_from_the_admin_role():
    assert context.RequestContext(roles=["Admin"]).is_admin is True
    assert context.RequestContext(roles=["member"]).is_admin is False


def test_bad_read_deleted_is_refused():
    with pytest.raises(ValueError, match="read_deleted"):
        context.RequestContext(read_deleted="sometimes")


def test_iso_timestamp_with_zone_is_read_as_naive_utc():
    ctxt = context.RequestContext(timestamp="2026-01-01T02:00:00+02:00")
    assert ctxt.timestamp == datetime.datetime(2026, 1, 1, 0, 0)


def test_creating_a_context_makes_it_current():
    ctxt = context.context_from_dict(SAMPLE_CONTEXT)
    assert oslo_context.get_current() is ctxt


def test_admin_context_is_admin_and_does_not_replace_the_current_one():
    current = context.RequestContext(user_id="someone")
    admin = context.get_admin_context()
    assert admin.is_admin is True and admin.user_id is None
    assert oslo_context.get_current() is current


def test_elevated_copy_is_admin_and_keeps_request_id():
    ctxt = context.RequestContext(user_id="u", roles=["member"])
    admin = ctxt.elevated(read_deleted="yes")
    assert admin.is_admin and "admin" in admin.roles and admin.read_deleted == "yes"
    assert admin.request_id == ctxt.request_id
    assert ctxt.is_admin is False and ctxt.roles == ["member"]


class _Base(oslo_messaging.NoOpSerializer):
    def serialize_entity(self, ctxt, entity):
        return ("out", entity)

    def deserialize_entity(self, ctxt, entity):
        return ("in", entity)


def test_serializer_converts_contexts_and_delegates_entities():
    serializer = context.RequestContextSerializer(_Base())
    ctxt = context.context_from_dict(SAMPLE_CONTEXT)
    assert serializer.serialize_context(ctxt) == SAMPLE_CONTEXT
    back = serializer.deserialize_context(SAMPLE_CONTEXT)
    assert isinstance(back, context.RequestContext)
    assert back.request_id == ctxt.request_id
    assert serializer.serialize_entity(ctxt, 1) == ("out", 1)
    assert serializer.deserialize_entity(ctxt, 2) == ("in", 2)
    assert context.RequestContextSerializer(None).serialize_entity(ctxt, 3) == 3


def test_log_lines_carry_the_request_id():
    conf = cfg.ConfigOpts()
    oslo_log.register_options(conf)
    conf([], project="novasched")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatters.ContextFormatter(config=conf, project="novasched"))
    logger = logging.getLogger("novasched.test.context")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        context.context_from_dict({**SAMPLE_CONTEXT, "request_id": "req-log-line-check"})
        logger.info("scheduling")
    finally:
        logger.removeHandler(handler)
    line = stream.getvalue()
    assert "req-log-line-check" in line
    assert "scheduling" in line


class _Endpoint:
    target = oslo_messaging.Target(version="4.5")

    def whoami(self, ctxt, value):
        return {
            "type": type(ctxt).__name__,
            "request_id": ctxt.request_id,
            "user_id": ctxt.user_id,
            "current": oslo_context.get_current() is ctxt,
            "value": value,
        }


def test_context_survives_an_rpc_call_through_oslo_messaging():
    conf = cfg.ConfigOpts()
    # oslo.messaging registers its tracing and metrics options on the global CONF only.
    conf.register_opts(tracing_client.oslo_messaging_tracing, group="oslo_messaging_tracing")
    conf.register_opts(metrics_client.oslo_messaging_metrics, group="oslo_messaging_metrics")
    conf([])
    transport = oslo_messaging.get_rpc_transport(conf, url="fake:")
    serializer = context.RequestContextSerializer(oslo_messaging.NoOpSerializer())
    server = oslo_messaging.get_rpc_server(
        transport,
        oslo_messaging.Target(topic="scheduler", server="s1"),
        [_Endpoint()],
        executor="threading",
        serializer=serializer,
    )
    server.start()
    try:
        client = oslo_messaging.get_rpc_client(
            transport,
            oslo_messaging.Target(topic="scheduler", version="4.5"),
            serializer=serializer,
        )
        ctxt = context.RequestContext(user_id="u-rpc", request_id="req-rpc-check")
        reply = client.prepare(timeout=10).call(ctxt, "whoami", value=3)
    finally:
        server.stop()
        server.wait()
        transport.cleanup()
    assert reply == {
        "type": "RequestContext",
        "request_id": "req-rpc-check",
        "user_id": "u-rpc",
        "current": True,
        "value": 3,
    }
