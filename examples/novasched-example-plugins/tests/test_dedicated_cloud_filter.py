"""DedicatedCloudFilter: dedicated hosts take only their project; listed projects stay there."""

from __future__ import annotations

import pytest
from example_builders import make_aggregate, make_host, make_spec
from novasched_example_plugins.dedicated_cloud_filter import DedicatedCloudFilter

from filters import Reject
from filters.handler import apply_filter
from scheduler.conf import CONF


@pytest.fixture
def hosts():
    dedicated_a = make_aggregate(["a1", "a2"], dedicated_cloud="proj-a")
    shared_ab = make_aggregate(["ab1"], dedicated_cloud="proj-a, proj-b")
    az = make_aggregate(["a1", "s1"], availability_zone="az1")
    return {
        "a1": make_host("a1", aggregates=[dedicated_a, az]),
        "a2": make_host("a2", aggregates=[dedicated_a]),
        "ab1": make_host("ab1", aggregates=[shared_ab]),
        "s1": make_host("s1", aggregates=[az]),
        "s2": make_host("s2"),
    }


def passing(hosts, spec) -> list[str]:
    filt = DedicatedCloudFilter()
    return [name for name, host in hosts.items() if filt.host_passes(host, spec)]


def test_dedicated_hosts_take_only_their_project(hosts):
    assert passing(hosts, make_spec("proj-a")) == ["a1", "a2", "ab1", "s1", "s2"]
    assert passing(hosts, make_spec("proj-b")) == ["ab1", "s1", "s2"]
    assert passing(hosts, make_spec("proj-c")) == ["s1", "s2"]


def test_the_reason_names_the_rule(hosts):
    result = DedicatedCloudFilter().host_passes(hosts["a1"], make_spec("proj-c"))
    assert isinstance(result, Reject)
    assert result.reason == "dedicated to another project"


def test_a_listed_project_lands_only_on_its_dedicated_hosts(hosts):
    CONF.set_override("dedicated_projects", ["proj-a"], group="example_plugins")
    assert passing(hosts, make_spec("proj-a")) == ["a1", "a2", "ab1"]
    result = DedicatedCloudFilter().host_passes(hosts["s1"], make_spec("proj-a"))
    assert result.reason == "project must use its dedicated hosts"
    # other projects are not affected by the list
    assert passing(hosts, make_spec("proj-c")) == ["s1", "s2"]


def test_a_listed_project_without_dedicated_hosts_gets_nothing(hosts):
    CONF.set_override("dedicated_projects", ["proj-z"], group="example_plugins")
    assert passing(hosts, make_spec("proj-z")) == []


def test_a_request_without_project_only_gets_shared_hosts(hosts):
    assert passing(hosts, make_spec(None)) == ["s1", "s2"]


def test_a_list_of_hosts_gets_the_same_answer_as_host_passes(hosts):
    # as the handler runs it: prepare once, then check per host
    CONF.set_override("dedicated_projects", ["proj-b"], group="example_plugins")
    filt = DedicatedCloudFilter()
    for project in ("proj-a", "proj-b", "proj-c", None):
        spec = make_spec(project)
        outcome = apply_filter(filt, list(hosts.values()), spec)
        assert [h.host for h in outcome.passed] == passing(hosts, spec)
        for host, reason in outcome.rejected:
            assert reason == filt.host_passes(host, spec).reason


def test_runs_once_per_request_and_not_on_rebuild():
    assert DedicatedCloudFilter.run_filter_once_per_request is True
    assert DedicatedCloudFilter.RUN_ON_REBUILD is False
