"""The filters of batch 1 as plugins: importable by their entry-point targets, named by their
class, documented, and usable by the FilterHandler."""

from __future__ import annotations

import importlib

import pytest

from filters import BaseHostFilter
from filters.handler import FilterHandler
from tests.unit.filters.fakes import make_aggregate, make_host, make_spec

# the lines of setup.cfg's [options.entry_points] novasched.filters for these filters
ENTRY_POINTS = """
DifferentHostFilter = filters.different_host_filter:DifferentHostFilter
SameHostFilter = filters.same_host_filter:SameHostFilter
SimpleCIDRAffinityFilter = filters.simple_cidr_affinity_filter:SimpleCIDRAffinityFilter
AggregateImagePropertiesIsolation = filters.aggregate_image_properties_isolation:AggregateImagePropertiesIsolation
AggregateInstanceExtraSpecsFilter = filters.aggregate_instance_extra_specs:AggregateInstanceExtraSpecsFilter
AggregateMultiTenancyIsolation = filters.aggregate_multitenancy_isolation:AggregateMultiTenancyIsolation
AggregateTypeAffinityFilter = filters.type_affinity:AggregateTypeAffinityFilter
IoOpsFilter = filters.io_ops_filter:IoOpsFilter
AggregateIoOpsFilter = filters.aggregate_io_ops_filter:AggregateIoOpsFilter
NumInstancesFilter = filters.num_instances_filter:NumInstancesFilter
AggregateNumInstancesFilter = filters.aggregate_num_instances_filter:AggregateNumInstancesFilter
IsolatedHostsFilter = filters.isolated_hosts_filter:IsolatedHostsFilter
JsonFilter = filters.json_filter:JsonFilter
MetricsFilter = filters.metrics_filter:MetricsFilter
"""  # noqa: E501

# nova 34's table: name -> (RUN_ON_REBUILD, run_filter_once_per_request)
NOVA_FLAGS = {
    "DifferentHostFilter": (False, True),
    "SameHostFilter": (False, True),
    "SimpleCIDRAffinityFilter": (False, True),
    "AggregateImagePropertiesIsolation": (True, True),
    "AggregateInstanceExtraSpecsFilter": (False, True),
    "AggregateMultiTenancyIsolation": (False, True),
    "AggregateTypeAffinityFilter": (False, True),
    "IoOpsFilter": (False, False),
    "AggregateIoOpsFilter": (False, False),
    "NumInstancesFilter": (False, False),
    "AggregateNumInstancesFilter": (False, False),
    "IsolatedHostsFilter": (True, True),
    "JsonFilter": (False, False),
    "MetricsFilter": (False, False),
}


def _classes() -> dict[str, type]:
    classes = {}
    for line in ENTRY_POINTS.strip().splitlines():
        name, target = (part.strip() for part in line.split("="))
        module, cls = target.split(":")
        classes[name] = getattr(importlib.import_module(module), cls)
    return classes


@pytest.mark.parametrize("name", sorted(NOVA_FLAGS))
def test_entry_point_targets_import_and_match_nova_s_flags(name):
    cls = _classes()[name]
    assert cls.__name__ == name
    assert issubclass(cls, BaseHostFilter)
    assert (cls.RUN_ON_REBUILD, cls.run_filter_once_per_request) == NOVA_FLAGS[name]
    assert cls.__doc__ and cls.__doc__.split()[0] == "Passes"
    # written as prepare/check, not as nova's host_passes
    assert cls.check is not BaseHostFilter.check
    assert "host_passes" not in vars(cls)


def test_all_of_them_run_in_one_handler_chain_with_reasons():
    filters = [cls() for cls in _classes().values()]
    good = make_host("good", host_ip="10.0.0.5", instances={"near": None})
    busy = make_host("busy", host_ip="10.0.0.6", instances={"near": None}, num_io_ops=8)
    far = make_host("far", host_ip="10.9.0.1", instances={"near": None})
    tenant = make_host(
        "tenant",
        host_ip="10.0.0.7",
        instances={"near": None},
        aggregates=[make_aggregate(1, filter_tenant_id="other")],
    )
    spec = make_spec(
        hints={
            "same_host": ["near"],
            "different_host": ["elsewhere"],
            "build_near_host_ip": ["10.0.0.1"],
            "query": ['[">=", "$free_ram_mb", 0]'],
        }
    )
    spec.project_id = "mine"
    report = FilterHandler(filters).run([good, busy, far, tenant], spec)
    assert [h.host for h in report.hosts] == ["good"]
    assert report.summary() == (
        "1/4 hosts available: 1 SimpleCIDRAffinityFilter (host IP outside the "
        "build_near_host_ip network), 1 AggregateMultiTenancyIsolation (project not allowed by "
        "aggregate), 1 IoOpsFilter (too many I/O operations)"
    )
