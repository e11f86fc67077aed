"""The capacity novasched-manage reports is the number of boots that then succeed.

A real cloud (the real Placement, a MariaDB API database and cells on MariaDB and SQLite,
the scheduler service on RabbitMQ) holds a fleet with availability zones, aggregates,
disabled and down hosts, and NUMA hosts. For each case, ``novasched-manage capacity --json``
runs as a subprocess against the same databases and Placement; then the conductor-side
client boots the flavor, one instance after another, until the first NoValidHost. The
number of boots that succeeded must be what the command reported, in total and per AZ.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import uuid as uuidlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import db
from db import models
from scheduler.conf import CONF
from scheduler.exceptions import NoValidHost
from scheduler.objects import Flavor, RequestSpec
from scheduler.rpc.context import RequestContext
from tests.functional.fixtures_cloud import (
    FILTERS_WITH_NUMA,
    NUMA_FLAVOR,
    PROJECT,
    USER,
    Cloud,
    build_cloud,
)

# 64 GiB: one to eight per host of the fleet (64-512 GiB of RAM), a few dozen boots in all
BIG = Flavor(name="t.big", flavorid="t-big", vcpus=8, memory_mb=65536, root_gb=100)


@pytest.fixture(scope="module")
def cloud(tmp_path_factory) -> Iterator[Cloud]:
    CONF.set_override("enabled_filters", FILTERS_WITH_NUMA, group="filter_scheduler")
    try:
        with contextlib.ExitStack() as stack:
            cloud = build_cloud(
                stack,
                Path(tmp_path_factory.mktemp("capacity")),
                cell_kinds=("mariadb", "sqlite"),
                hosts=16,
                seed=5,
                topic=f"scheduler-capacity-{uuidlib.uuid4().hex[:10]}",
                fleet_options={"numa_fraction": 0.5, "azs": ["az-east", "az-west"]},
            )
            _add_flavors(cloud.api_url, [BIG, NUMA_FLAVOR])
            yield cloud
    finally:
        CONF.clear_override("enabled_filters", group="filter_scheduler")


def _add_flavors(api_url: str, flavors: list[Flavor]) -> None:
    with db.get_engine(api_url).begin() as conn:
        for f in flavors:
            fid = conn.execute(
                models.flavors.insert().values(
                    name=f.name,
                    flavorid=f.flavorid,
                    vcpus=f.vcpus,
                    memory_mb=f.memory_mb,
                    root_gb=f.root_gb,
                    ephemeral_gb=0,
                    swap=0,
                    is_public=True,
                    disabled=False,
                )
            ).inserted_primary_key[0]
            for key, value in f.extra_specs.items():
                conn.execute(
                    models.flavor_extra_specs.insert().values(flavor_id=fid, key=key, value=value)
                )


def _capacity(cloud: Cloud, tmp_path: Path, *args: str) -> dict[str, Any]:
    (figures,) = json.loads(_capacity_output(cloud, tmp_path, "--json", *args))
    return figures


def _capacity_output(cloud: Cloud, tmp_path: Path, *args: str) -> str:
    conf = tmp_path / "nova.conf"
    conf.write_text(
        "[api_database]\n"
        f"connection = {cloud.api_url}\n"
        "[placement]\n"
        "auth_type = noauth2\n"
        f"endpoint_override = {cloud.placement.endpoint}\n"
        "[filter_scheduler]\n"
        f"enabled_filters = {','.join(FILTERS_WITH_NUMA)}\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "scheduler.cmd.manage", "--config-file", str(conf)]
        + ["capacity", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def _boot_until_no_valid_host(cloud: Cloud, flavor: Flavor, az: str | None = None) -> Counter:
    """Boot one instance after another; the AZ of each host taken."""
    taken: Counter[str] = Counter()
    for _ in range(500):
        spec = RequestSpec(
            flavor=flavor,
            num_instances=1,
            project_id=PROJECT,
            user_id=USER,
            availability_zone=az,
        )
        ctx = RequestContext(user_id=USER, project_id=PROJECT, request_id=f"req-{uuidlib.uuid4()}")
        try:
            (selections,) = cloud.client.select_destinations(
                ctx, spec, [str(uuidlib.uuid4())], return_objects=True, return_alternates=False
            )
        except NoValidHost:
            return taken
        taken[selections[0].availability_zone] += 1
    raise AssertionError("more than 500 boots fit")


# in this order: the NUMA flavor first (the big one then fills what the NUMA hosts have left),
# then one AZ, then the rest
def test_a_numa_flavor_fits_as_the_numa_cells_allow(cloud, tmp_path):
    figures = _capacity(cloud, tmp_path, "--flavor", NUMA_FLAVOR.name)
    assert figures["total"] > 0
    assert {h.split("/")[0] for h in figures["by_host"]} <= cloud.fleet.numa_hosts
    taken = _boot_until_no_valid_host(cloud, NUMA_FLAVOR)
    assert sum(taken.values()) == figures["total"]


def test_the_capacity_of_an_az_is_the_boots_that_fit_there(cloud, tmp_path):
    figures = _capacity(cloud, tmp_path, "--flavor", BIG.name, "--az", "az-east")
    assert figures["total"] > 0 and set(figures["by_az"]) == {"az-east"}
    # the same figures as rows, openstack's -f csv with -c
    rows = (
        _capacity_output(
            cloud, tmp_path, "--flavor", BIG.name, "--az", "az-east", "-f", "csv"
        ).splitlines()
        + _capacity_output(
            cloud, tmp_path, "--flavor", BIG.name, "--az", "az-east", "-f", "value", "-c", "total"
        ).splitlines()
    )
    assert rows[0].split(",")[:3] == ["flavor", "total", "az-east"]
    assert rows[1].split(",")[:3] == [BIG.name, str(figures["total"]), str(figures["total"])]
    assert rows[2:] == [str(figures["total"])]
    taken = _boot_until_no_valid_host(cloud, BIG, az="az-east")
    assert dict(taken) == figures["by_az"]


def test_the_capacity_of_a_flavor_is_the_boots_that_fit_and_where(cloud, tmp_path):
    figures = _capacity(cloud, tmp_path, "--flavor", BIG.name)
    assert figures["total"] > 0
    assert sum(figures["by_az"].values()) == figures["total"]
    # disabled and down hosts take nothing
    assert not any(h.split("/")[0] in cloud.unusable for h in figures["by_host"])
    taken = _boot_until_no_valid_host(cloud, BIG)
    assert sum(taken.values()) == figures["total"]
    assert dict(taken) == figures["by_az"]
    # nothing more fits now, and the command says so
    after = _capacity(cloud, tmp_path, "--flavor", BIG.name)
    assert after["total"] == 0 and after["reason"]
