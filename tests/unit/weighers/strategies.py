"""Hypothesis strategies of hosts, aggregates, requests and configuration shared by the
weighers' equivalence tests (list against per host, batch against a reference, rows against
batch), with every built-in weigher and a context that applies a drawn configuration."""

from __future__ import annotations

import contextlib

from hypothesis import strategies as st

from scheduler.objects import Destination, InstanceGroup
from tests.unit.filters.fakes import make_aggregate, make_host, make_spec, override
from weighers.affinity import ServerGroupSoftAffinityWeigher, ServerGroupSoftAntiAffinityWeigher
from weighers.build_failure import BuildFailureWeigher
from weighers.cpu import CPUWeigher
from weighers.cross_cell import CrossCellWeigher
from weighers.disk import DiskWeigher
from weighers.hypervisor_version import HypervisorVersionWeigher
from weighers.image_props import ImagePropertiesWeigher
from weighers.io_ops import IoOpsWeigher
from weighers.metrics import MetricsWeigher
from weighers.num_instances import NumInstancesWeigher
from weighers.pci import PCIWeigher
from weighers.ram import RAMWeigher

ALL_WEIGHERS = [
    BuildFailureWeigher,
    CPUWeigher,
    CrossCellWeigher,
    DiskWeigher,
    HypervisorVersionWeigher,
    ImagePropertiesWeigher,
    IoOpsWeigher,
    MetricsWeigher,
    NumInstancesWeigher,
    PCIWeigher,
    RAMWeigher,
    ServerGroupSoftAffinityWeigher,
    ServerGroupSoftAntiAffinityWeigher,
]


MULTIPLIER_KEYS = [
    "ram_weight_multiplier",
    "cpu_weight_multiplier",
    "build_failure_weight_multiplier",
    "metrics_weight_multiplier",
    "weight_multiplier",  # the [metrics] option name: not the aggregate key, must be ignored
    "pci_weight_multiplier",
]


UUIDS = [f"inst-{i}" for i in range(6)]


METRICS = ["cpu.percent", "mem.free", "io"]


aggregate_pool = st.lists(
    st.dictionaries(
        st.sampled_from(MULTIPLIER_KEYS),
        st.sampled_from(["2.0", "-1", "0", "0.5", "lots", "10"]),
        max_size=2,
    ),
    min_size=1,
    max_size=4,
).map(lambda metas: [make_aggregate(i, **meta) for i, meta in enumerate(metas)])


pci_stats = st.one_of(
    st.none(),
    st.just([]),
    st.lists(st.fixed_dictionaries({"count": st.integers(0, 80)}), max_size=3),
    st.integers(0, 150).map(lambda n: {"nova_object.data": {"objects": [{"count": n}]}}),
)


metrics = st.lists(
    st.fixed_dictionaries(
        {"name": st.sampled_from(METRICS), "value": st.integers(-50, 200) | st.just("n/a")}
    ),
    max_size=3,
)


instances = st.dictionaries(
    st.sampled_from(UUIDS),
    st.one_of(
        st.none(),
        st.fixed_dictionaries(
            {
                "image_properties": st.dictionaries(
                    st.sampled_from(["os_distro", "hw_machine_type"]),
                    st.sampled_from(["ubuntu", "rhel", "q35"]),
                )
            }
        ),
    ),
    max_size=4,
)


@st.composite
def hosts_and_aggregates(draw):
    pool = draw(aggregate_pool)
    aggregate_sets = st.lists(st.sampled_from(pool), max_size=3, unique_by=id)
    if draw(st.booleans()):
        # hosts in the same aggregates share one list object, as the host manager may hand
        # them out
        aggregate_sets = st.sampled_from(draw(st.lists(aggregate_sets, min_size=1, max_size=3)))
    hosts = []
    for i in range(draw(st.integers(0, 10))):
        hosts.append(
            make_host(
                f"h{i}",
                free_ram_mb=draw(st.integers(-2048, 10**6)),
                free_disk_mb=draw(st.integers(-2048, 10**7)),
                vcpus_total=draw(st.integers(0, 128)),
                vcpus_used=draw(st.integers(0, 600)),
                cpu_allocation_ratio=draw(st.sampled_from([None, 0.0, 1.0, 4.0, 16.0])),
                num_io_ops=draw(st.integers(0, 12)),
                num_instances=draw(st.integers(0, 60)),
                failed_builds=draw(st.integers(0, 3)),
                hypervisor_version=draw(st.sampled_from([None, 0, 6002000, 9000000])),
                cell_uuid=draw(st.sampled_from(["c1", "c2", None])),
                pci_stats=draw(pci_stats),
                metrics=draw(metrics),
                instances=draw(instances),
                aggregates=draw(aggregate_sets),
            )
        )
    return hosts


@st.composite
def requests(draw):
    group = draw(
        st.none()
        | st.builds(
            InstanceGroup,
            uuid=st.just("g1"),
            policy=st.sampled_from(["soft-affinity", "soft-anti-affinity", "affinity", None]),
            members=st.lists(st.sampled_from(UUIDS), max_size=4, unique=True),
        )
    )
    props = draw(
        st.none()
        | st.dictionaries(
            st.sampled_from(["os_distro", "hw_machine_type"]),
            st.sampled_from(["ubuntu", "rhel", "q35"]),
        )
    )
    spec = make_spec(group=group, image_props=props)
    spec.requested_destination = draw(
        st.none()
        | st.builds(
            Destination,
            cell_uuid=st.sampled_from(["c1", "c2", None]),
            allow_cross_cell_move=st.booleans(),
        )
    )
    return spec


conf = st.fixed_dictionaries(
    {
        ("ram_weight_multiplier", "filter_scheduler"): st.sampled_from([1.0, -1.0, 0.0, 3.5]),
        ("build_failure_weight_multiplier", "filter_scheduler"): st.sampled_from([1e6, 0.0, 2]),
        ("image_props_weight_multiplier", "filter_scheduler"): st.sampled_from([0.0, 1.0]),
        ("image_props_weight_setting", "filter_scheduler"): st.sampled_from(
            [[], ["os_distro=2", "hw_machine_type=0.5"], ["os_distro=0"]]
        ),
        ("weight_multiplier", "metrics"): st.sampled_from([1.0, -2.0, 0.0]),
        ("weight_setting", "metrics"): st.sampled_from(
            [[], ["cpu.percent=1.0"], ["cpu.percent=-1", "mem.free=0.5"], ["io=0"]]
        ),
        ("required", "metrics"): st.booleans(),
        ("weight_of_unavailable", "metrics"): st.sampled_from([-10000.0, 5.0]),
    }
)


@contextlib.contextmanager
def configured(values):
    with contextlib.ExitStack() as stack:
        for (name, group), value in values.items():
            stack.enter_context(override(name, value, group))
        yield


multipliers = st.fixed_dictionaries(
    {
        ("cpu_weight_multiplier", "filter_scheduler"): st.sampled_from([1.0, -1.0, 0.25]),
        ("disk_weight_multiplier", "filter_scheduler"): st.sampled_from([1.0, 0.0, -3.0]),
        ("io_ops_weight_multiplier", "filter_scheduler"): st.sampled_from([-1.0, 2.0]),
        ("num_instances_weight_multiplier", "filter_scheduler"): st.sampled_from([0.0, 1.0]),
        ("pci_weight_multiplier", "filter_scheduler"): st.sampled_from([1.0, 0.0, 5.0]),
        ("hypervisor_version_weight_multiplier", "filter_scheduler"): st.sampled_from([1.0, -1.0]),
        ("cross_cell_move_weight_multiplier", "filter_scheduler"): st.sampled_from([1e6, 1.0]),
        ("soft_affinity_weight_multiplier", "filter_scheduler"): st.sampled_from([1.0, 2.0]),
        ("soft_anti_affinity_weight_multiplier", "filter_scheduler"): st.sampled_from([1.0, 0.5]),
    }
)
