"""SchedulerAPI (conductor side): version negotiation, encoding, reply decoding, errors."""

from __future__ import annotations

import json
import uuid

import oslo_messaging
import pytest

from scheduler import exceptions
from scheduler.conf import CONF
from scheduler.objects import (
    Destination,
    Flavor,
    ImageMeta,
    InstanceGroup,
    RequestGroup,
    RequestLevelParams,
    RequestSpec,
    SchedulerLimits,
    SchedulerRetries,
    Selection,
)
from scheduler.resources import numa, pci
from scheduler.rpc import rpcapi, wire
from scheduler.rpc.context import RequestContext
from scheduler.rpc.manager import BaseAPI, SchedulerManager
from tests.samples import NOVA_SELECT_DESTINATIONS

SAMPLE = NOVA_SELECT_DESTINATIONS
# an instance uuid as nova sends it (the scheduler refuses anything else)
INSTANCE = "7f4b1c1e-8a0b-4a4e-9e57-0d6f1c1e7b21"


def _full_spec() -> RequestSpec:
    return RequestSpec(
        flavor=Flavor(
            memory_mb=4096,
            vcpus=4,
            root_gb=40,
            ephemeral_gb=5,
            swap=512,
            name="m1.large",
            flavorid="7",
            id=3,
            extra_specs={"hw:cpu_policy": "dedicated", "resources:CUSTOM_X": "1"},
            description="big",
        ),
        num_instances=2,
        project_id="p1",
        user_id="u1",
        availability_zone="az2",
        image=ImageMeta(
            id="img-1",
            name="cirros",
            disk_format="qcow2",
            size=123,
            min_ram=64,
            properties={"hw_architecture": "x86_64", "traits_required": ["CUSTOM_T"]},
        ),
        instance_uuid="i1",
        instance_group=InstanceGroup(
            uuid="g1",
            policy="anti-affinity",
            name="grp",
            rules={"max_server_per_host": 2},
            members=["i0"],
            hosts=["h0"],
        ),
        scheduler_hints={"group": ["g1"], "same_host": ["a", "b"]},
        ignore_hosts=["bad"],
        force_hosts=["h1"],
        force_nodes=["n1"],
        requested_destination=Destination(
            host="h1",
            node="n1",
            cell_uuid="cell-1",
            aggregates=["a,b", "c"],
            forbidden_aggregates={"z"},
            allow_cross_cell_move=True,
        ),
        retry=SchedulerRetries(num_attempts=2, hosts=[("h9", "n9")]),
        limits=SchedulerLimits(vcpu=8.0, memory_mb=1024.0),
        requested_resources=[
            RequestGroup(
                requester_id="port-1",
                resources={"NET_BW_EGR_KILOBIT_PER_SEC": 1000},
                required_traits={"CUSTOM_PHYSNET"},
                forbidden_traits={"CUSTOM_BAD"},
                aggregates=[["agg1", "agg2"]],
                forbidden_aggregates={"agg9"},
                in_tree="rp-1",
                provider_uuids=["rp-2"],
            )
        ],
        request_level_params=RequestLevelParams(
            root_required={"COMPUTE_STATUS_X"},
            root_forbidden={"COMPUTE_STATUS_DISABLED"},
            same_subtree=[["port-1", "accel"]],
        ),
        is_bfv=True,
        # decoded, as the RPC edge decodes them
        numa_topology=numa.instance_topology_from_primitive(
            {"cells": [{"id": 0, "cpuset": [0, 1], "memory": 512}]}
        ),
        pci_requests=pci.requests_from_primitive(
            [{"count": 1, "alias_name": "gpu", "request_id": "r1"}]
        ),
        requested_networks=[{"network_id": "net-1"}],
        id=17,
    )


def test_request_spec_primitive_round_trips_through_wire_decoder():
    spec = _full_spec()
    prim = wire.request_spec_to_primitive(spec)
    assert prim["nova_object.name"] == "RequestSpec"
    assert prim["nova_object.version"] == "1.15"
    # JSON-serialisable, as it must be to travel
    decoded = wire.request_spec_from_primitive(json.loads(json.dumps(prim)))
    assert decoded == spec


def test_minimal_request_spec_round_trips():
    spec = RequestSpec(flavor=Flavor(memory_mb=64, vcpus=1))
    assert wire.request_spec_from_primitive(wire.request_spec_to_primitive(spec)) == spec


def test_nested_object_versions_match_nova_34():
    data = wire.request_spec_to_primitive(_full_spec())["nova_object.data"]
    versions = {
        key: data[key]["nova_object.version"]
        for key in (
            "flavor",
            "image",
            "instance_group",
            "requested_destination",
            "limits",
            "request_level_params",
        )
    }
    assert versions == {
        "flavor": "1.2",
        "image": "1.8",
        "instance_group": "1.11",
        "requested_destination": "1.4",
        "limits": "1.0",
        "request_level_params": "1.1",
    }
    assert data["image"]["nova_object.data"]["properties"]["nova_object.version"] == "1.44"
    assert data["requested_resources"][0]["nova_object.version"] == "1.3"
    assert data["instance_group"]["nova_object.data"]["_rules"] == {"max_server_per_host": "2"}
    assert data["instance_group"]["nova_object.data"]["policies"] == ["anti-affinity"]


def test_sample_primitive_reencodes_to_an_equal_spec():
    with open(SAMPLE) as f:
        prim = json.load(f)["decoded_message"]["args"]["spec_obj"]
    spec = wire.request_spec_from_primitive(prim)
    assert wire.request_spec_from_primitive(wire.request_spec_to_primitive(spec)) == spec


def test_selection_from_sample_reply():
    with open(SAMPLE) as f:
        reply = json.load(f)["reply_return_objects_true"]
    sel = wire.selection_from_primitive(reply[0][0])
    assert sel.service_host == "compute-0001"
    assert sel.allocation_request["mappings"] == {"": ["00000000-0000-0000-0000-00000000003d"]}
    assert sel.allocation_request_version == "1.36"
    assert sel.availability_zone == "az1"
    assert sel.limits == SchedulerLimits()


def test_selection_round_trips_through_wire_encoder():
    sel = Selection(
        compute_node_uuid="cn",
        service_host="h",
        nodename="n",
        cell_uuid="c",
        allocation_request={"allocations": {}, "mappings": {}},
        allocation_request_version="1.36",
        limits=SchedulerLimits(vcpu=2.0),
        availability_zone="nova",
    )
    assert wire.selection_from_primitive(wire.selection_to_primitive(sel)) == sel


def test_selection_without_host_is_invalid():
    with pytest.raises(exceptions.InvalidRequest, match="service_host"):
        wire.selection_from_primitive(
            {
                "nova_object.name": "Selection",
                "nova_object.namespace": "nova",
                "nova_object.version": "1.1",
                "nova_object.data": {"compute_node_uuid": "x"},
            }
        )


@pytest.mark.parametrize(
    "value, expected",
    [(None, None), ("auto", None), ("pike", "4.4"), ("Ocata", "4.3"), ("4.3", "4.3")],
)
def test_version_cap_aliases(value, expected):
    assert rpcapi.resolve_version_cap(value) == expected


# -- negotiation, against a recording client ------------------------------------------------


class RecordingClient:
    def __init__(self, cap: str | None):
        self.cap = cap
        self.prepared: dict = {}
        self.called: tuple | None = None
        self.reply: object = []

    def can_send_version(self, version):
        if self.cap is None:
            return True
        return tuple(map(int, version.split("."))) <= tuple(map(int, self.cap.split(".")))

    def prepare(self, **kwargs):
        self.prepared = kwargs
        return self

    def call(self, ctxt, method, **kwargs):
        self.called = (method, kwargs)
        return self.reply

    def cast(self, ctxt, method, **kwargs):
        self.called = (method, kwargs)


@pytest.fixture
def fake_transport():
    transport = oslo_messaging.get_rpc_transport(CONF, url="fake:/")
    yield transport
    transport.cleanup()


def _api(fake_transport, cap):
    api = rpcapi.SchedulerAPI(fake_transport, version_cap=cap)
    api.client = RecordingClient(api.version_cap)
    return api


def _spec():
    return RequestSpec(flavor=Flavor(memory_mb=64, vcpus=1), project_id="p1")


def test_4_5_sends_flags_and_timeouts(fake_transport):
    api = _api(fake_transport, None)
    api.select_destinations({}, _spec(), ["i1"], return_objects=False, return_alternates=False)
    method, kwargs = api.client.called
    assert method == "select_destinations"
    assert api.client.prepared["version"] == "4.5"
    assert api.client.prepared["timeout"] == CONF.long_rpc_timeout
    assert api.client.prepared["call_monitor_timeout"] == CONF.rpc_response_timeout
    assert set(kwargs) == {"spec_obj", "instance_uuids", "return_objects", "return_alternates"}
    assert kwargs["spec_obj"]["nova_object.name"] == "RequestSpec"


def test_cap_below_4_5_with_objects_requested_refuses(fake_transport):
    api = _api(fake_transport, "4.4")
    with pytest.raises(rpcapi.SelectionObjectsWithOldRPCVersionNotSupported):
        api.select_destinations({}, _spec(), ["i1"], return_objects=True)
    assert api.client.called is None


def test_cap_4_4_drops_flags(fake_transport):
    api = _api(fake_transport, "pike")
    api.select_destinations({}, _spec(), ["i1"])
    assert api.client.prepared["version"] == "4.4"
    assert set(api.client.called[1]) == {"spec_obj", "instance_uuids"}


def test_cap_4_3_drops_instance_uuids(fake_transport):
    api = _api(fake_transport, "4.3")
    api.select_destinations({}, _spec(), ["i1"])
    assert api.client.prepared["version"] == "4.3"
    assert set(api.client.called[1]) == {"spec_obj"}


def test_cap_4_0_sends_legacy_dicts(fake_transport):
    api = _api(fake_transport, "4.0")
    spec = _full_spec()
    api.select_destinations({}, spec, ["i1"])
    assert api.client.prepared["version"] == "4.0"
    kwargs = api.client.called[1]
    assert set(kwargs) == {"request_spec", "filter_properties"}
    # what nova 4.0 sends is what our server can rebuild the request from
    rebuilt = wire.request_spec_from_legacy(kwargs["request_spec"], kwargs["filter_properties"])
    assert rebuilt.flavor == spec.flavor
    assert rebuilt.ignore_hosts == ["bad"]
    assert rebuilt.force_hosts == ["h1"]
    assert rebuilt.retry == spec.retry
    assert rebuilt.instance_group.hosts == ["h0"]
    assert rebuilt.instance_group.policy == "anti-affinity"
    assert rebuilt.scheduler_hints == {"group": ["g1"], "same_host": ["a", "b"]}


def test_primitive_spec_is_accepted_as_is(fake_transport):
    api = _api(fake_transport, None)
    prim = wire.request_spec_to_primitive(_spec())
    api.select_destinations({}, prim, ["i1"])
    assert api.client.called[1]["spec_obj"] is prim


def test_reply_with_objects_is_decoded_to_selections(fake_transport):
    with open(SAMPLE) as f:
        reply = json.load(f)["reply_return_objects_true"]
    api = _api(fake_transport, None)
    api.client.reply = reply
    result = api.select_destinations({}, _spec(), ["i1"], True, True)
    assert isinstance(result[0][0], Selection)
    assert result[0][0].nodename == "compute-0001"


def test_remote_no_valid_host_becomes_ours(fake_transport):
    api = _api(fake_transport, None)

    def fail(ctxt, method, **kwargs):
        raise oslo_messaging.RemoteError(
            "NoValidHost", "No valid host was found. 0/2 hosts available", "tb"
        )

    api.client.call = fail
    with pytest.raises(exceptions.NoValidHost) as excinfo:
        api.select_destinations({}, _spec(), ["i1"])
    assert excinfo.value.reason == "0/2 hosts available"


def test_other_remote_errors_pass_through():
    error = oslo_messaging.RemoteError("ValueError", "boom", "tb")
    assert rpcapi.no_valid_host_from_remote(error) is None


@pytest.mark.parametrize(
    "method, args, version",
    [
        ("update_aggregates", {"aggregates": {}}, "4.1"),
        ("delete_aggregate", {"aggregate": {}}, "4.1"),
        ("update_instance_info", {"host_name": "h", "instance_info": {}}, "4.2"),
        ("delete_instance_info", {"host_name": "h", "instance_uuid": "i"}, "4.2"),
        ("sync_instance_info", {"host_name": "h", "instance_uuids": ["i"]}, "4.2"),
    ],
)
def test_cache_updates_are_fanout_casts(fake_transport, method, args, version):
    api = _api(fake_transport, None)
    getattr(api, method)({}, **args)
    assert api.client.prepared == {"fanout": True, "version": version}
    assert api.client.called == (method, args)


# -- end to end over oslo.messaging's in-memory transport -------------------------------------


class EchoDriver:
    def __init__(self):
        self.calls = []

    def select_destinations(self, context, spec_obj, instance_uuids, return_alternates):
        self.calls.append((spec_obj, instance_uuids, return_alternates))
        if spec_obj.flavor.memory_mb > 10_000:
            raise exceptions.NoValidHost("too big")
        sel = Selection("cn1", "h1", "n1", "c1", {"allocations": {}}, "1.36", SchedulerLimits())
        return [[sel, sel] if return_alternates else [sel]]

    def reset(self):
        pass

    def stop(self):
        pass


@pytest.fixture(scope="module")
def _served():
    """One in-memory server for the module: stopping one waits a second for its poll."""
    fake_transport = oslo_messaging.get_rpc_transport(CONF, url="fake:/")
    topic = f"scheduler-{uuid.uuid4().hex}"
    driver = EchoDriver()
    from scheduler.rpc import transport as sched_rpc

    server = oslo_messaging.get_rpc_server(
        fake_transport,
        oslo_messaging.Target(topic=topic, server="test-host"),
        [SchedulerManager(driver), BaseAPI()],
        serializer=sched_rpc.get_serializer(),
    )
    server.start()
    api = rpcapi.SchedulerAPI(fake_transport, topic=topic)
    yield api, driver
    server.stop()
    server.wait()
    fake_transport.cleanup()


@pytest.fixture
def fake_server(_served):
    api, driver = _served
    driver.calls.clear()
    return api, driver


def test_in_memory_round_trip_with_alternates(fake_server):
    api, driver = fake_server
    ctxt = RequestContext(request_id="req-mem-1")
    result = api.select_destinations(ctxt, _spec(), [INSTANCE], True, True)
    assert [s.service_host for s in result[0]] == ["h1", "h1"]
    assert driver.calls[0][0] == _spec()
    assert driver.calls[0][2] is True


def test_in_memory_no_valid_host(fake_server):
    api, _ = fake_server
    spec = RequestSpec(flavor=Flavor(memory_mb=99_999, vcpus=1))
    with pytest.raises(exceptions.NoValidHost) as excinfo:
        api.select_destinations(RequestContext(request_id="req-mem-2"), spec, [INSTANCE])
    # nova's words and the request id; the explanation stays in the scheduler's log
    assert excinfo.value.reason == "There are not enough hosts available. (request req-mem-2)"


def test_in_memory_no_valid_host_with_detail(fake_server):
    from scheduler.conf import CONF

    CONF.set_override("novalidhost_detail", True, group="scheduler")
    api, _ = fake_server
    spec = RequestSpec(flavor=Flavor(memory_mb=99_999, vcpus=1))
    with pytest.raises(exceptions.NoValidHost) as excinfo:
        api.select_destinations(RequestContext(), spec, [INSTANCE])
    assert excinfo.value.reason == "too big"


def test_in_memory_ping(fake_server):
    api, _ = fake_server
    assert api.ping(RequestContext(), "x", timeout=5) == {"service": "scheduler", "arg": "x"}
