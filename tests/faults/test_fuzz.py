"""Malformed and huge requests over the real RabbitMQ, to a scheduler with the real Placement.

Hypothesis builds select_destinations calls from a valid nova RequestSpec primitive by
breaking it: wrong types, missing and unknown fields, huge strings, long lists, deep nesting,
bad instance uuids. Each call must come back as the caller's error (InvalidRequest or
NoValidHost) or as a reply whose claims exist; afterwards the service still answers a good
request, its resident memory has stayed bounded, and no allocation exists without a reply.
"""

from __future__ import annotations

import contextlib
import copy
import time
import uuid as uuidlib
from pathlib import Path

import oslo_messaging
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import db
from scheduler import exceptions
from scheduler.conf import CONF
from scheduler.objects import RequestSpec
from scheduler.rpc import wire
from scheduler.rpc.context import RequestContext
from tests.faults import ledger
from tests.faults.fixtures import TINY, build_fault_cloud
from tests.functional.fixtures_cloud import PROJECT, USER
from tests.hunt import examples

MIB = 1024 * 1024
# how many malformed calls one run sends (each is one round trip over RabbitMQ); hunt mode
# (NOVASCHED_HUNT, tests/hunt.py) sends more
EXAMPLES = examples(300)


def _rss_bytes() -> int:
    """This process's resident memory now (the scheduler service runs in it)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


@pytest.fixture(scope="module")
def cloud(tmp_path_factory):
    with contextlib.ExitStack() as stack:
        yield build_fault_cloud(
            stack, Path(tmp_path_factory.mktemp("fuzz")), cell_kinds=("sqlite",), hosts=8
        )


def _good_primitive() -> dict:
    spec = RequestSpec(flavor=TINY, num_instances=1, project_id=PROJECT, user_id=USER)
    return wire.request_spec_to_primitive(spec)


# values that break a field: wrong types, huge strings and lists, deep nesting
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["x" * MIB, "é" * (MIB // 2), "-1", "0", "2147483648", "not-a-uuid"]),
)
_junk = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.text(max_size=8), children, max_size=4),
    ),
    max_leaves=12,
)


def _deep(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth):
        value = {"k": value}
    return value


_huge = st.sampled_from(
    [
        ["a"] * 200_000,
        {f"k{i}": "v" for i in range(200_000)},
        _deep(500),
        [str(uuidlib.uuid4())] * 3,
    ]
)
_field = st.sampled_from(
    [
        "flavor",
        "num_instances",
        "project_id",
        "user_id",
        "availability_zone",
        "image",
        "scheduler_hints",
        "instance_group",
        "requested_destination",
        "request_level_params",
        "requested_resources",
        "ignore_hosts",
        "force_hosts",
        "retry",
        "limits",
        "numa_topology",
        "pci_requests",
        "unknown_field",
    ]
)
_flavor_field = st.sampled_from(
    ["vcpus", "memory_mb", "root_gb", "ephemeral_gb", "swap", "extra_specs", "name"]
)
_instance_uuids = st.one_of(
    st.none(),
    st.just("7f4b1c1e-8a0b-4a4e-9e57-0d6f1c1e7b21"),  # a bare string
    st.integers(),
    st.lists(st.one_of(st.none(), st.integers(), st.text(max_size=40)), max_size=5),
    st.just(["7f4b1c1e-8a0b-4a4e-9e57-0d6f1c1e7b21"] * 2),  # duplicated
    st.just([str(uuidlib.UUID(int=i)) for i in range(5000)]),  # too many
)


@st.composite
def _bad_call(draw) -> tuple[object, object]:
    prim = _good_primitive()
    data = prim["nova_object.data"]
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        kind = draw(st.sampled_from(["field", "flavor", "huge", "drop", "envelope"]))
        if kind == "field":
            data[draw(_field)] = draw(_junk)
        elif kind == "flavor" and isinstance(data.get("flavor"), dict):
            flavor = data["flavor"].get("nova_object.data")
            if isinstance(flavor, dict):
                flavor[draw(_flavor_field)] = draw(_junk)
        elif kind == "huge":
            data[draw(_field)] = draw(_huge)
        elif kind == "drop" and data:
            data.pop(draw(st.sampled_from(sorted(data))), None)
        elif kind == "envelope":
            prim = draw(st.one_of(_junk, _huge))
            break
    uuids = draw(_instance_uuids)
    return prim, uuids


def test_malformed_requests_over_rpc_lose_nothing(cloud):
    raw = cloud.client.client.prepare(version="4.5", timeout=30)
    answered: set[str] = set()
    outcomes = {"invalid": 0, "no_valid_host": 0, "scheduled": 0}
    before = _rss_bytes()

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(_bad_call())
    def one_call(call):
        prim, uuids = call
        ledger.count("malformed requests tried")
        ctxt = RequestContext(
            user_id=USER, project_id=PROJECT, request_id=f"req-{uuidlib.uuid4()}"
        ).to_dict()
        try:
            reply = raw.call(
                ctxt,
                "select_destinations",
                spec_obj=copy.deepcopy(prim),
                instance_uuids=uuids,
                return_objects=True,
                return_alternates=False,
            )
        except exceptions.InvalidRequest:
            outcomes["invalid"] += 1
        except oslo_messaging.RemoteError as exc:
            assert exc.exc_type in ("InvalidRequest", "NoValidHost"), exc
            outcomes["invalid" if exc.exc_type == "InvalidRequest" else "no_valid_host"] += 1
        except exceptions.NoValidHost:
            outcomes["no_valid_host"] += 1
        else:
            # a call that the breakage left valid: one answer per instance; without
            # instance uuids (RPC < 4.4's path) nothing is claimed, with them the claims
            # must exist (the audit checks them)
            if uuids is None:
                assert reply, reply
            else:
                assert len(reply) == len(uuids)
                answered.update(uuids)
            outcomes["scheduled"] += 1

    one_call()
    assert sum(outcomes.values()) >= EXAMPLES // 2, outcomes
    assert outcomes["invalid"] > 0
    # still serving, memory bounded, nothing claimed without a reply (the computes report
    # again first, as nova-compute does every 10 s: the run outlasts service_down_time)
    for url in cloud.cell_urls.values():
        db.touch_services(db.get_engine(url))
    time.sleep(2 * CONF.scheduler.service_refresh_interval + 0.5)
    uuids, reply = cloud.select(1)
    answered.update(uuids)
    assert reply[0][0].service_host
    assert _rss_bytes() - before < 300 * MIB
    cloud.audit(answered)
