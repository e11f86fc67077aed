# ruff: noqa: F811 - the fixtures are imported by name, and test arguments reuse those names
"""The scheduler RPC layer over a real RabbitMQ.

The driver here is a stand-in for the scheduling logic (it only echoes what it was asked);
what is under test is the wire: nova's exchange and topic, message versions, the
``nova.exception.NoValidHost`` failure, malformed payloads, ping, graceful stop and
several processes on one topic.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import kombu
import oslo_messaging
import pytest

from scheduler import exceptions
from scheduler.conf import CONF
from scheduler.objects import Flavor, RequestSpec, SchedulerLimits, Selection
from scheduler.rpc import rpcapi, wire
from scheduler.rpc import transport as sched_rpc
from scheduler.rpc.context import RequestContext
from scheduler.rpc.service import SchedulerService
from tests.functional.fixtures_rabbit import (  # noqa: F401  (pytest fixtures)
    kombu_url,
    rabbit_topic,
    rabbit_transport_url,
)
from tests.samples import NOVA_SELECT_DESTINATIONS

SAMPLE = NOVA_SELECT_DESTINATIONS
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# instance uuids as nova sends them (the scheduler refuses anything else)
I1 = "7f4b1c1e-8a0b-4a4e-9e57-0d6f1c1e7b21"
I2 = "7f4b1c1e-8a0b-4a4e-9e57-0d6f1c1e7b22"


class EchoDriver:
    """Stand-in scheduling logic: one host per instance named after the flavor, plus one
    alternate when asked; NoValidHost for flavors named 'none'; slow for 'slow'."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.entered = threading.Event()
        self.stopped = False

    def select_destinations(self, context, spec_obj, instance_uuids, return_alternates):
        self.calls.append((context, spec_obj, instance_uuids, return_alternates))
        self.entered.set()
        if spec_obj.flavor.name == "none":
            raise exceptions.NoValidHost("0/2 hosts available: 2 ComputeFilter (disabled)")
        if spec_obj.flavor.name == "slow":
            time.sleep(2.0)
        count = len(instance_uuids) if instance_uuids is not None else spec_obj.num_instances
        out = []
        for i in range(count):
            chosen = _selection(f"host-{i}")
            out.append([chosen, _selection(f"alt-{i}")] if return_alternates else [chosen])
        return out

    def reset(self) -> None:
        pass

    def stop(self) -> None:
        self.stopped = True


def _selection(host: str) -> Selection:
    return Selection(
        compute_node_uuid=f"cn-{host}",
        service_host=host,
        nodename=host,
        cell_uuid="cell-1",
        allocation_request={"allocations": {f"cn-{host}": {"resources": {"VCPU": 1}}}},
        allocation_request_version="1.36",
        limits=SchedulerLimits(),
        availability_zone="nova",
    )


def _spec(name: str = "m1.tiny", num_instances: int = 1) -> RequestSpec:
    return RequestSpec(
        flavor=Flavor(memory_mb=512, vcpus=1, root_gb=1, name=name),
        num_instances=num_instances,
        project_id="p1",
        user_id="u1",
    )


def _ctxt() -> RequestContext:
    return RequestContext(user_id="u1", project_id="p1", request_id=f"req-{uuid.uuid4()}")


@pytest.fixture(autouse=True)
def _bounded_call_timeout():
    # nova's 1800 s would turn a lost message into a hung test run
    CONF.set_override("long_rpc_timeout", 20)
    yield
    CONF.clear_override("long_rpc_timeout")


@pytest.fixture
def transport(rabbit_transport_url):
    transport = sched_rpc.get_transport(CONF, url=rabbit_transport_url)
    yield transport
    transport.cleanup()


@pytest.fixture
def server(transport, rabbit_topic):
    driver = EchoDriver()
    service = SchedulerService(
        CONF, driver, transport=transport, topic=rabbit_topic, host=f"{rabbit_topic}-host"
    )
    service.start()
    yield service, driver
    service.stop(graceful=False)


def _client(transport, topic, cap=None) -> rpcapi.SchedulerAPI:
    return rpcapi.SchedulerAPI(transport, version_cap=cap, topic=topic)


# -- select_destinations at every version ---------------------------------------------------


def test_4_5_objects_with_alternates(server, transport, rabbit_topic):
    _, driver = server
    result = _client(transport, rabbit_topic).select_destinations(
        _ctxt(), _spec(), [I1, I2], return_objects=True, return_alternates=True
    )
    assert [[s.service_host for s in alts] for alts in result] == [
        ["host-0", "alt-0"],
        ["host-1", "alt-1"],
    ]
    assert result[0][0].allocation_request == {
        "allocations": {"cn-host-0": {"resources": {"VCPU": 1}}}
    }
    _, spec, uuids, alternates = driver.calls[-1]
    assert spec == _spec()
    assert uuids == [I1, I2]
    assert alternates is True


def test_4_5_objects_without_alternates(server, transport, rabbit_topic):
    _, driver = server
    result = _client(transport, rabbit_topic).select_destinations(
        _ctxt(), _spec(), [I1], return_objects=True, return_alternates=False
    )
    assert [[s.service_host for s in alts] for alts in result] == [["host-0"]]
    assert driver.calls[-1][3] is False


def test_4_5_without_objects_gives_legacy_dicts(server, transport, rabbit_topic):
    _, driver = server
    result = _client(transport, rabbit_topic).select_destinations(
        _ctxt(), _spec(), [I1], return_objects=False, return_alternates=True
    )
    assert result == [{"host": "host-0", "nodename": "host-0", "limits": {}}]
    assert driver.calls[-1][3] is False


@pytest.mark.parametrize(
    "cap, expect_uuids",
    [("4.4", [I1, I2]), ("4.3", None), ("4.0", None)],
)
def test_capped_versions_give_legacy_dicts(server, transport, rabbit_topic, cap, expect_uuids):
    _, driver = server
    result = _client(transport, rabbit_topic, cap).select_destinations(
        _ctxt(), _spec(num_instances=2), [I1, I2]
    )
    assert result == [
        {"host": "host-0", "nodename": "host-0", "limits": {}},
        {"host": "host-1", "nodename": "host-1", "limits": {}},
    ]
    _, spec, uuids, alternates = driver.calls[-1]
    assert uuids == expect_uuids
    assert alternates is False
    assert spec.flavor == _spec().flavor
    assert spec.num_instances == 2


def test_context_arrives_with_request_id(server, transport, rabbit_topic):
    _, driver = server
    ctxt = _ctxt()
    _client(transport, rabbit_topic).select_destinations(ctxt, _spec(), [I1])
    received = driver.calls[-1][0]
    assert isinstance(received, RequestContext)
    assert received.request_id == ctxt.request_id
    assert received.project_id == "p1"


# -- nova's own message, raw on the broker -----------------------------------------------------


def _raw_call(url: str, topic: str, message: dict, timeout: float = 15.0) -> dict:
    """Publish ``message`` as nova's conductor does (exchange nova, routing key ``topic``,
    oslo envelope 2.0) and return the decoded final reply."""
    reply_q = f"reply_{uuid.uuid4().hex}"
    message = dict(message)
    message.update(
        {
            "_msg_id": uuid.uuid4().hex,
            "_reply_q": reply_q,
            "_unique_id": uuid.uuid4().hex,
            "_timeout": 60,
        }
    )
    envelope = {"oslo.version": "2.0", "oslo.message": json.dumps(message)}
    with kombu.Connection(kombu_url(url)) as conn:
        channel = conn.channel()
        channel.queue_declare(queue=reply_q, auto_delete=True)
        try:
            exchange = kombu.Exchange("nova", type="topic", durable=False, auto_delete=False)
            producer = kombu.Producer(channel, exchange=exchange, routing_key=topic)
            producer.publish(envelope, serializer="json")
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                raw = channel.basic_get(reply_q, no_ack=True)
                if raw is None:
                    time.sleep(0.05)
                    continue
                reply = json.loads(json.loads(raw.body)["oslo.message"])
                assert reply["_msg_id"] == message["_msg_id"]
                if reply.get("ending"):
                    return reply
            raise AssertionError(f"no reply on {reply_q} within {timeout} s")
        finally:
            channel.queue_delete(reply_q)


def _sample_message() -> dict:
    with open(SAMPLE) as f:
        sample = json.load(f)["decoded_message"]
    return {k: v for k, v in sample.items() if not k.startswith("_") or k.startswith("_context")}


def test_nova_sample_message_published_raw_is_decoded(server, rabbit_transport_url, rabbit_topic):
    _, driver = server
    reply = _raw_call(rabbit_transport_url, rabbit_topic, _sample_message())
    assert reply["failure"] is None
    result = reply["result"]
    # a list of lists of Selection primitives, as nova's conductor expects for 4.5 objects
    assert result[0][0]["nova_object.name"] == "Selection"
    assert result[0][0]["nova_object.version"] == "1.1"
    assert isinstance(result[0][0]["nova_object.data"]["allocation_request"], str)
    assert len(result[0]) == 2
    ctxt, spec, uuids, alternates = driver.calls[-1]
    assert ctxt.request_id == "req-00000000-0000-0000-0000-000000000007"
    assert spec.flavor.name == "m1.small" and spec.flavor.vcpus == 2
    assert spec.image.properties == {"hw_architecture": "x86_64", "hw_vm_mode": "hvm"}
    assert spec.instance_group.policy == "anti-affinity"
    assert spec.instance_group.hosts == ["compute-0007"]
    assert spec.scheduler_hints == {"group": ["00000000-0000-0000-0000-000000000015"]}
    assert spec.availability_zone == "az1"
    assert uuids == ["00000000-0000-0000-0000-00000000001f"]
    assert alternates is True


def test_no_valid_host_raw_failure_names_nova_exception(server, rabbit_transport_url, rabbit_topic):
    message = _sample_message()
    message["args"]["spec_obj"]["nova_object.data"]["flavor"]["nova_object.data"]["name"] = "none"
    reply = _raw_call(rabbit_transport_url, rabbit_topic, message)
    failure = json.loads(reply["failure"])
    assert failure["module"] == "nova.exception"
    assert failure["class"] == "NoValidHost"
    # nova's words and the request id: the explanation (filters, counts) is only logged
    reason = (
        "There are not enough hosts available. (request req-00000000-0000-0000-0000-000000000007)"
    )
    assert failure["message"] == f"No valid host was found. {reason}"
    assert failure["kwargs"] == {"reason": reason, "code": 500}
    assert "ComputeFilter" not in reply["failure"]
    assert reply["result"] is None


def test_no_valid_host_detail_when_the_operator_asks(server, rabbit_transport_url, rabbit_topic):
    CONF.set_override("novalidhost_detail", True, group="scheduler")
    message = _sample_message()
    message["args"]["spec_obj"]["nova_object.data"]["flavor"]["nova_object.data"]["name"] = "none"
    failure = json.loads(_raw_call(rabbit_transport_url, rabbit_topic, message)["failure"])
    assert failure["kwargs"]["reason"] == "0/2 hosts available: 2 ComputeFilter (disabled)"


def test_no_valid_host_reaches_a_plain_oslo_client_as_remote_error(server, transport, rabbit_topic):
    # what nova's conductor sees when it cannot rebuild the class: exc_type NoValidHost
    client = oslo_messaging.get_rpc_client(
        transport,
        oslo_messaging.Target(topic=rabbit_topic, version="4.0"),
        serializer=sched_rpc.get_serializer(),
    )
    spec = wire.request_spec_to_primitive(_spec("none"))
    with pytest.raises(oslo_messaging.RemoteError) as excinfo:
        client.prepare(version="4.5", timeout=15).call(
            _ctxt(), "select_destinations", spec_obj=spec, instance_uuids=[I1]
        )
    assert excinfo.value.exc_type == "NoValidHost"
    assert excinfo.value.value.startswith(
        "No valid host was found. There are not enough hosts available. (request req-"
    )


def test_no_valid_host_is_converted_by_our_client(server, transport, rabbit_topic):
    with pytest.raises(exceptions.NoValidHost) as excinfo:
        _client(transport, rabbit_topic).select_destinations(
            _ctxt(), _spec("none"), [I1], True, True
        )
    assert excinfo.value.reason.startswith("There are not enough hosts available. (request req-")


def test_malformed_spec_is_a_clear_error_and_server_keeps_answering(
    server, transport, rabbit_topic
):
    _, driver = server
    api = _client(transport, rabbit_topic)
    bad = wire.request_spec_to_primitive(_spec())
    bad["nova_object.data"]["flavor"]["nova_object.data"]["memory_mb"] = "lots"
    with pytest.raises(exceptions.InvalidRequest) as excinfo:
        api.select_destinations(_ctxt(), bad, [I1])
    assert "memory_mb" in str(excinfo.value)
    calls_before = len(driver.calls)
    assert api.select_destinations(_ctxt(), _spec(), [I1])[0]["host"] == "host-0"
    assert len(driver.calls) == calls_before + 1


def test_ping_on_baseapi(server, transport, rabbit_topic):
    reply = _client(transport, rabbit_topic).ping(_ctxt(), "hello", timeout=15)
    assert reply == {"service": "scheduler", "arg": "hello"}


def test_fanout_casts_are_accepted(server, transport, rabbit_topic):
    api = _client(transport, rabbit_topic)
    api.update_aggregates(_ctxt(), {"nova_object.name": "AggregateList"})
    api.sync_instance_info(_ctxt(), "compute-1", [I1])
    # the casts must not have hurt the server
    assert api.ping(_ctxt(), 1, timeout=15) == {"service": "scheduler", "arg": 1}


# -- lifecycle ---------------------------------------------------------------------------------


def test_graceful_stop_finishes_in_flight_call(transport, rabbit_topic):
    driver = EchoDriver()
    service = SchedulerService(
        CONF, driver, transport=transport, topic=rabbit_topic, host=f"{rabbit_topic}-host"
    )
    service.start()
    api = _client(transport, rabbit_topic)
    outcome: dict = {}

    def slow_call():
        try:
            outcome["result"] = api.select_destinations(_ctxt(), _spec("slow"), [I1])
        except Exception as exc:  # pragma: no cover - reported below
            outcome["error"] = exc

    caller = threading.Thread(target=slow_call)
    caller.start()
    assert driver.entered.wait(15), "the slow call never reached the driver"
    assert service.in_flight == 1
    started = time.monotonic()
    service.stop(graceful=True, timeout=30)
    # stop returned only after the slow call had finished and replied
    assert service.in_flight == 0
    assert time.monotonic() - started > 0.5
    caller.join(15)
    assert outcome.get("result") == [{"host": "host-0", "nodename": "host-0", "limits": {}}]
    assert driver.stopped
    assert service.wait(0)


_WORKERS_SCRIPT = textwrap.dedent(
    """
    import os, sys
    from scheduler.conf import CONF
    from scheduler import objects
    from scheduler.rpc import service
    from scheduler.rpc import transport as sched_rpc

    url, topic, marker_dir = sys.argv[1:4]

    class PidDriver:
        def select_destinations(self, context, spec, uuids, alternates):
            host = f"pid-{os.getpid()}"
            return [[objects.Selection(host, host, host, "cell", None, None)]]

        def reset(self):
            open(os.path.join(marker_dir, f"reset-{os.getpid()}"), "w").close()

        def stop(self):
            pass

    CONF([], project="nova", default_config_files=[], default_config_dirs=[])

    def factory():
        return service.SchedulerService(
            CONF, PidDriver(), transport=sched_rpc.get_transport(CONF, url=url),
            topic=topic, host=topic + "-host",
        )

    sys.exit(service.run_workers(CONF, 2, service_factory=factory))
    """
)


def test_two_worker_processes_answer_on_one_topic(
    transport, rabbit_transport_url, rabbit_topic, tmp_path
):
    proc = subprocess.Popen(
        [sys.executable, "-c", _WORKERS_SCRIPT, rabbit_transport_url, rabbit_topic, tmp_path],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        # until the workers have declared their queues, a call is dropped: ask briefly
        CONF.set_override("long_rpc_timeout", 2)
        api = _client(transport, rabbit_topic)
        hosts: set[str] = set()
        deadline = time.monotonic() + 30
        while len(hosts) < 2 and time.monotonic() < deadline:
            try:
                reply = api.select_destinations(_ctxt(), _spec(), [I1])
            except oslo_messaging.MessagingTimeout:
                continue
            hosts.add(reply[0]["host"])
        assert len(hosts) == 2, f"only {hosts} answered: {_drain(proc)}"
        pids = {int(h.split("-", 1)[1]) for h in hosts}
        assert proc.pid not in pids

        proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while len(list(tmp_path.glob("reset-*"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert {p.name for p in tmp_path.glob("reset-*")} == {f"reset-{p}" for p in pids}

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        for pid in pids:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        output = proc.stdout.read() if proc.stdout else ""
        if proc.returncode not in (0, None):
            print(output)


def _drain(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        return "(workers still running)"
    return proc.stdout.read() if proc.stdout else ""


@pytest.mark.parametrize("workers", [1, 2])
def test_command_exits_with_one_line_on_unknown_driver(tmp_path, workers):
    """EX_CONFIG (78) whether the one process or a forked worker found it: a service
    manager must not restart a configuration it cannot run."""
    conf_file = tmp_path / "nova.conf"
    conf_file.write_text(f"[scheduler]\ndriver = no_such_driver\nworkers = {workers}\n")
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from scheduler.cmd.scheduler import main; sys.exit(main())",
            "--config-file",
            str(conf_file),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 78, result.stderr[-2000:]
    assert "no_such_driver" in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    if workers == 1:
        assert "no_such_driver" in last
    assert "filter_scheduler" in last  # the names that do exist


def test_wire_sample_reply_shape_matches_ours():
    with open(SAMPLE) as f:
        sample = json.load(f)
    ours = wire.selections_to_primitive(
        [[wire.selection_from_primitive(sample["reply_return_objects_true"][0][0])]]
    )
    assert ours[0][0]["nova_object.data"] == sample["reply_return_objects_true"][0][0][
        "nova_object.data"
    ] | {"allocation_request": ours[0][0]["nova_object.data"]["allocation_request"]}


_EVENTLET_SCRIPT = textwrap.dedent(
    """
    import eventlet
    eventlet.monkey_patch()
    import sys
    from scheduler.conf import CONF
    from scheduler import objects
    from scheduler.rpc import service
    from scheduler.rpc import transport as sched_rpc

    url, topic = sys.argv[1:3]

    class GreenDriver:
        def select_destinations(self, context, spec, uuids, alternates):
            eventlet.sleep(0.05)
            return [[objects.Selection("cn", "green-host", "n", "cell", None, None)]]

        def reset(self):
            pass

        def stop(self):
            pass

    CONF([], project="nova", default_config_files=[], default_config_dirs=[])
    CONF.set_override("concurrency_backend", "eventlet")

    def factory():
        return service.SchedulerService(
            CONF, GreenDriver(), transport=sched_rpc.get_transport(CONF, url=url),
            topic=topic, host=topic + "-host",
        )

    sys.exit(service.run_workers(CONF, 1, service_factory=factory))
    """
)


def test_eventlet_backend_serves_and_stops(transport, rabbit_transport_url, rabbit_topic):
    proc = subprocess.Popen(
        [sys.executable, "-c", _EVENTLET_SCRIPT, rabbit_transport_url, rabbit_topic],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        CONF.set_override("long_rpc_timeout", 2)
        api = _client(transport, rabbit_topic)
        reply = None
        deadline = time.monotonic() + 30
        while reply is None and time.monotonic() < deadline:
            try:
                reply = api.select_destinations(_ctxt(), _spec(), [I1])
            except oslo_messaging.MessagingTimeout:
                continue
        assert reply == [{"host": "green-host", "nodename": "n", "limits": {}}], _drain(proc)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_twenty_megabyte_hint_is_refused_and_server_keeps_answering(
    server, transport, rabbit_topic
):
    _, driver = server
    api = _client(transport, rabbit_topic)
    huge = _spec()
    huge.scheduler_hints = {"group": ["g" * (20 * 1024 * 1024)]}
    calls_before = len(driver.calls)
    with pytest.raises(exceptions.InvalidRequest) as excinfo:
        api.select_destinations(_ctxt(), huge, [I1])
    message = str(excinfo.value)
    assert "scheduler_hints" in message and "max_request_bytes" in message
    # the reason plus the server's short traceback, never the 20 MB
    assert len(message) < 4096
    assert len(driver.calls) == calls_before
    assert api.select_destinations(_ctxt(), _spec(), [I1])[0]["host"] == "host-0"
    assert len(driver.calls) == calls_before + 1
