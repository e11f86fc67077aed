"""A filter list written the way nova.conf writes it changes real decisions.

Against the real Placement service and real SQLite API/cell databases: the same requests,
scheduled once with nova's default filters and once with an operator's nova.conf that enables
AggregateInstanceExtraSpecsFilter and NumInstancesFilter, land on different sets of hosts, and
the claims exist in Placement. Expected sets are computed from the fleet, not hard-coded.
"""

from __future__ import annotations

import contextlib
import json
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path

import pytest

import db
from db import models
from scheduler.conf import CONF
from scheduler.drivers.filter_scheduler import FilterScheduler
from scheduler.exceptions import NoValidHost
from scheduler.explain import explain_request
from scheduler.objects import Flavor, RequestSpec
from scheduler.rpc.context import RequestContext
from tests.functional.fixtures_cloud import PROJECT, USER, Cloud, build_cloud

SSD_FLAVOR = Flavor(
    name="ssd.small",
    flavorid="ssd",
    vcpus=1,
    memory_mb=512,
    root_gb=1,
    extra_specs={"aggregate_instance_extra_specs:ssd": "true"},
)


@pytest.fixture(scope="module")
def cloud(tmp_path_factory) -> Iterator[Cloud]:
    with contextlib.ExitStack() as stack:
        yield build_cloud(
            stack,
            Path(tmp_path_factory.mktemp("filter-config")),
            api_kind="sqlite",
            cell_kinds=("sqlite",),
            hosts=16,
            topic=f"scheduler-fc-{uuidlib.uuid4().hex[:8]}",
        )


def _usable_hosts(cloud: Cloud) -> list[str]:
    return [h for h in cloud.fleet.hosts if h not in cloud.unusable]


def _stats(cloud: Cloud, host: str) -> dict:
    for rows in cloud.fleet.compute_nodes.values():
        for row in rows:
            if row["host"] == host:
                return json.loads(row["stats"])
    raise AssertionError(host)


def _add_ssd_aggregate(cloud: Cloud, hosts: list[str]) -> None:
    api = db.get_engine(cloud.api_url)
    with api.begin() as conn:
        agg_id = conn.execute(
            models.aggregates.insert().values(uuid=str(uuidlib.uuid4()), name="ssd-hosts")
        ).inserted_primary_key[0]
        for h in hosts:
            conn.execute(models.aggregate_hosts.insert().values(aggregate_id=agg_id, host=h))
        conn.execute(
            models.aggregate_metadata.insert().values(aggregate_id=agg_id, key="ssd", value="true")
        )


def _spec() -> RequestSpec:
    return RequestSpec(flavor=SSD_FLAVOR, num_instances=1, project_id=PROJECT, user_id=USER)


def _ctx() -> RequestContext:
    return RequestContext(user_id=USER, project_id=PROJECT, request_id=f"req-{uuidlib.uuid4()}")


def _passing(driver: FilterScheduler) -> set[str]:
    doc = explain_request(driver, _ctx(), _spec())
    return {w["host"] for w in doc["weighed"]}


def test_nova_conf_filter_list_changes_the_decisions(cloud, tmp_path):
    usable = _usable_hosts(cloud)
    ssd_hosts = usable[:4]
    _add_ssd_aggregate(cloud, ssd_hosts)
    # one SSD host already runs as many instances as the operator allows
    busiest = max(ssd_hosts, key=lambda h: int(_stats(cloud, h).get("num_instances", 0)))
    limit = int(_stats(cloud, busiest).get("num_instances", 0))
    expected = {h for h in ssd_hosts if int(_stats(cloud, h).get("num_instances", 0)) < limit}
    if limit == 0 or not expected:
        pytest.fail("the fleet must give the SSD hosts different instance counts")

    default_driver = FilterScheduler()
    try:
        default_pass = _passing(default_driver)
    finally:
        default_driver.stop()
    # nova's default filters ignore the aggregate extra spec: hosts outside it pass too
    assert default_pass - set(ssd_hosts)

    conf_file = tmp_path / "nova.conf"
    conf_file.write_text(
        "[filter_scheduler]\n"
        "available_filters = nova.scheduler.filters.all_filters\n"
        "enabled_filters = ComputeFilter, AggregateInstanceExtraSpecsFilter,\n"
        "    nova.scheduler.filters.num_instances_filter.NumInstancesFilter\n"
        f"max_instances_per_host = {limit}\n"
    )
    CONF(["--config-file", str(conf_file)], project="nova", default_config_files=[])
    assert CONF.filter_scheduler.max_instances_per_host == limit
    driver = FilterScheduler()
    try:
        assert _passing(driver) == expected
        # each boot consumes one instance slot of its host, until the operator's limit
        room = sum(limit - int(_stats(cloud, h).get("num_instances", 0)) for h in expected)
        chosen = set()
        for _ in range(room):
            instance = str(uuidlib.uuid4())
            [[selection, *_]] = driver.select_destinations(_ctx(), _spec(), [instance], True)
            chosen.add(selection.service_host)
            allocs = cloud.placement.get_allocations_for_consumer(instance)["allocations"]
            assert list(allocs) == [selection.compute_node_uuid]
        assert chosen == expected
        with pytest.raises(NoValidHost) as info:
            driver.select_destinations(_ctx(), _spec(), [str(uuidlib.uuid4())], True)
        assert f"{len(ssd_hosts)} NumInstancesFilter (too many instances)" in str(info.value)
    finally:
        driver.stop()
