"""Hypothesis strategies of hosts and requests shared by the default filters' equivalence
tests (list against per host, rows against per host), their settings, and the per-host
reference (``host_passes`` one host at a time)."""

from __future__ import annotations

import datetime
import json

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from scheduler.objects import InstanceGroup
from tests.unit.filters.fakes import NOW, make_host, make_service, make_spec

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def per_host(filt, hosts, spec):
    """What the chain would get from host_passes, one host at a time."""
    passed, rejected = [], []
    for host in hosts:
        result = filt.host_passes(host, spec)
        if result:
            passed.append(host)
        else:
            rejected.append((host, getattr(result, "reason", None) or filt.default_reason))
    return passed, rejected


def _timestamp(kind, offset):
    moment = NOW - datetime.timedelta(seconds=offset)
    if kind == "naive":
        return moment
    if kind == "aware":
        tz = datetime.timezone(datetime.timedelta(hours=2))
        return moment.replace(tzinfo=datetime.UTC).astimezone(tz)
    if kind == "string":
        return moment.isoformat()
    if kind == "date":
        return moment.date()
    return None


KINDS = ["naive"] * 6 + ["aware", "string", "date", "none"]


@st.composite
def compute_case(draw):
    # service_down_time is an IntOpt (min 1); 2**40 s does not fit a datetime window
    down_time = draw(st.one_of(st.integers(1, 150), st.sampled_from([60, 2**40])))
    # heartbeats around the edges of the window, and anywhere
    near = down_time if down_time < 1000 else 60
    offsets = st.one_of(
        st.sampled_from([near, near + 1, near - 1, near + 1e-6, near - 1e-6]).flatmap(
            lambda d: st.sampled_from([d, -d])
        ),
        st.floats(-300, 300, allow_nan=False).map(lambda v: round(v, 6)),
    )
    timestamps = st.builds(_timestamp, st.sampled_from(KINDS), offsets)
    services = st.one_of(
        st.builds(
            make_service,
            disabled=st.sampled_from([False, False, False, True]),
            forced_down=st.sampled_from([False, False, False, True]),
            last_seen_up=timestamps,
            created_at=timestamps,
        ),
        st.just({}),
    )
    hosts = []
    for i, service in enumerate(draw(st.lists(services, max_size=15))):
        host = make_host(f"h{i}")
        host.service = service
        hosts.append(host)
    return hosts, down_time


ARCHES = ["x86_64", "i686", "aarch64", "AMD64", "ppc64le", ""]


HV_TYPES = ["kvm", "qemu", "xen", "xapi", "QEMU"]


VM_MODES = ["hvm", "xen", "hv", "exe"]


triples = st.lists(
    st.one_of(st.sampled_from(ARCHES), st.sampled_from(HV_TYPES), st.sampled_from(VM_MODES)),
    min_size=0,
    max_size=3,
)


supported_lists = st.one_of(
    st.lists(triples, max_size=3),
    st.just(["x86_64", "kvm", "hvm"]),  # malformed: a flat list of strings
)


cpu_infos = st.one_of(
    st.none(),
    st.just("not json"),
    st.integers(30, 52).map(lambda b: json.dumps({"arch": "x86_64", "maxphysaddr": {"bits": b}})),
    st.just(json.dumps({"arch": "x86_64"})),
)


image_props = st.fixed_dictionaries(
    {},
    optional={
        "hw_architecture": st.sampled_from(ARCHES),
        "img_hv_type": st.sampled_from(HV_TYPES),
        "hw_vm_mode": st.sampled_from(VM_MODES),
        "img_hv_requested_version": st.sampled_from([">=6.0", "<7", ">=6.0,<6.2", "6.2", "junk"]),
        "hw_maxphysaddr_bits": st.integers(30, 52),
    },
)


@st.composite
def image_hosts(draw):
    count = draw(st.integers(0, 12))
    hosts = []
    for i in range(count):
        hosts.append(
            make_host(
                f"h{i}",
                supported_instances=draw(supported_lists),
                hypervisor_version=draw(st.sampled_from([None, 0, 5001000, 6002000, 7000000])),
                cpu_info=draw(cpu_infos),
            )
        )
    return hosts


extra_specs = st.dictionaries(
    st.sampled_from(
        [
            "capabilities:hypervisor_type",
            "capabilities:cpu_info:arch",
            "capabilities:cpu_info:maxphysaddr:bits",
            "capabilities:vcpus_total",
            "hw:maxphysaddr_bits",
            "hypervisor_type",
            "num_instances",
            "trait:HW_CPU_X86_AVX",
            "capabilities:missing_thing",
        ]
    ),
    st.sampled_from(["QEMU", "s== QEMU", ">= 4", "<= 40", "x86_64", "<in> 86", "16", "required"]),
    max_size=3,
)


@st.composite
def capability_hosts(draw):
    hosts = []
    for i in range(draw(st.integers(0, 10))):
        hosts.append(
            make_host(
                f"h{i}",
                hypervisor_type=draw(st.sampled_from(["QEMU", "xen", None])),
                vcpus_total=draw(st.integers(0, 64)),
                cpu_info=draw(cpu_infos),
                stats=draw(st.dictionaries(st.sampled_from(["num_instances", "x"]), st.just("3"))),
            )
        )
    return hosts


UUIDS = [f"inst-{i}" for i in range(6)]


@st.composite
def group_case(draw):
    hosts = []
    for i in range(draw(st.integers(0, 8))):
        on_host = draw(st.lists(st.sampled_from(UUIDS), max_size=3, unique=True))
        hosts.append(make_host(f"h{i}", instances=dict.fromkeys(on_host)))
    group = draw(
        st.none()
        | st.builds(
            InstanceGroup,
            uuid=st.just("g1"),
            policy=st.sampled_from(["affinity", "anti-affinity", "soft-affinity", None]),
            rules=st.sampled_from(
                [
                    {},
                    {"max_server_per_host": 2},
                    {"max_server_per_host": "x"},
                    {"max_server_per_host": 0},
                ]
            ),
            members=st.lists(st.sampled_from(UUIDS), max_size=4, unique=True),
            hosts=st.lists(st.sampled_from([f"h{i}" for i in range(8)]), max_size=3),
        )
    )
    instance_uuid = draw(st.sampled_from([None, *UUIDS]))
    return hosts, make_spec(group=group, instance_uuid=instance_uuid)
