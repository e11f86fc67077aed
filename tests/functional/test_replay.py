"""``novasched-manage replay`` on a real cloud: the real Placement, MariaDB and SQLite cells,
the scheduler service on RabbitMQ recording its decisions into a store of this module's.

Boots go through the conductor-side client and are claimed in Placement; each placed
instance is then written into its cell as nova-compute would report it (an ``instances``
row on the host, the compute node's usage). The replay, run as a subprocess on a nova.conf
like the service's, must take them out of today's fleet, reproduce every decision with the
same configuration, and change them with the RAM weigher's multiplier flipped, saying how.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from oslo_utils import timeutils

import db
from db import models
from scheduler.conf import CONF
from scheduler.exceptions import NoValidHost
from scheduler.objects import Flavor, InstanceGroup, RequestSpec
from scheduler.resources import numa
from scheduler.rpc.context import RequestContext
from tests.functional.fixtures_cloud import (
    FILTERS_WITH_NUMA,
    NUMA_FLAVOR,
    PROJECT,
    USER,
    Cloud,
    build_cloud,
)

FLAVOR = Flavor(name="m1.medium", flavorid="3", vcpus=2, memory_mb=4096, root_gb=20)
BOOTS = 10


@contextlib.contextmanager
def _recording_cloud(tmp: Path, name: str, **options: Any) -> Iterator[tuple[Cloud, str]]:
    """A cloud whose service records into a store of its own (the SQLite URL yielded)."""
    store = f"sqlite:///{tmp / 'decisions.sqlite'}"
    CONF.set_override("connection", store, group="decision_records")
    try:
        with contextlib.ExitStack() as stack:
            cloud = build_cloud(
                stack,
                tmp,
                cell_kinds=("mariadb", "sqlite"),
                hosts=12,
                topic=f"scheduler-{name}-{uuidlib.uuid4().hex[:10]}",
                **options,
            )
            yield cloud, store
    finally:
        CONF.clear_override("connection", group="decision_records")


def _boot_and_report(cloud: Cloud, store: str, flavor: Flavor, count: int) -> list[tuple[str, str]]:
    """``count`` instances of ``flavor`` placed one after another through the conductor
    client, each reported by its compute; (instance uuid, host/node) of each, once the
    service has written their records."""
    placed = []
    for _ in range(count):
        uuid = str(uuidlib.uuid4())
        ctx = RequestContext(user_id=USER, project_id=PROJECT, request_id=f"req-{uuid}")
        spec = RequestSpec(flavor=flavor, num_instances=1, project_id=PROJECT, user_id=USER)
        (selection,) = cloud.client.select_destinations(ctx, spec, [uuid], return_objects=True)
        host, node = selection[0].service_host, selection[0].nodename
        _report_as_compute(cloud, host, node, uuid, spec)
        placed.append((uuid, f"{host}/{node}"))
    _wait_for_records(store, count)
    return placed


@pytest.fixture(scope="module")
def cloud(tmp_path_factory) -> Iterator[tuple[Cloud, str]]:
    with _recording_cloud(Path(tmp_path_factory.mktemp("replay")), "replay", seed=7) as made:
        yield made


def _report_as_compute(
    cloud: Cloud, host: str, node: str, instance: str, spec: RequestSpec
) -> None:
    """What nova-compute writes once the instance is built: its row on the host, the
    compute node's usage and, for an instance with a NUMA topology, the cells it got (in
    the compute node's topology and in the instance's ``instance_extra``). The report is
    written in the second after the claim's, as a compute's comes later: the database keeps
    whole seconds, and the scheduler takes no report stamped within the second of its own
    consumption (it may not count the instance yet) until the compute's next one."""
    time.sleep(1.01 - time.time() % 1)
    now = timeutils.utcnow()
    flavor = spec.flavor
    cn = models.compute_nodes
    with db.get_engine(cloud.cell_urls[cloud.host_cell(host)]).begin() as conn:
        conn.execute(
            models.instances.insert().values(
                uuid=instance,
                host=host,
                node=node,
                project_id=PROJECT,
                user_id=USER,
                memory_mb=flavor.memory_mb,
                vcpus=flavor.vcpus,
                root_gb=flavor.root_gb,
                vm_state="active",
                created_at=now,
                deleted=0,
                cleaned=0,
            )
        )
        values: dict[str, Any] = {}
        wanted = numa.requested_instance_topology(spec)
        if wanted is not None:
            row = conn.execute(
                sa.select(
                    cn.c.numa_topology, cn.c.cpu_allocation_ratio, cn.c.ram_allocation_ratio
                ).where(cn.c.hypervisor_hostname == node, cn.c.deleted == 0)
            ).one()
            raw = json.loads(row.numa_topology)
            fitted = numa.fit_instance_to_host(
                numa.host_topology_from_primitive(raw),
                wanted,
                numa.Limits(row.cpu_allocation_ratio or 4.0, row.ram_allocation_ratio or 1.0),
            ).cells
            values["numa_topology"] = json.dumps(numa.host_topology_with_usage(raw, fitted))
            conn.execute(
                models.instance_extra.insert().values(
                    instance_uuid=instance,
                    numa_topology=_stored(wanted, fitted),
                    created_at=now,
                    deleted=0,
                )
            )
        conn.execute(
            cn.update()
            .where(cn.c.hypervisor_hostname == node, cn.c.deleted == 0)
            .values(
                vcpus_used=cn.c.vcpus_used + flavor.vcpus,
                memory_mb_used=cn.c.memory_mb_used + flavor.memory_mb,
                free_ram_mb=cn.c.free_ram_mb - flavor.memory_mb,
                local_gb_used=cn.c.local_gb_used + flavor.root_gb,
                free_disk_gb=cn.c.free_disk_gb - flavor.root_gb,
                disk_available_least=cn.c.disk_available_least - flavor.root_gb,
                updated_at=now,
                **values,
            )
        )


def _stored(wanted: Any, fitted: list[Any]) -> str:
    """The InstanceNUMATopology nova-compute stores for an instance fitted so."""
    cells = []
    for fc in fitted:
        guest = wanted.cells[fc.guest_id]
        data = {
            "id": fc.host_cell_id,
            "cpuset": sorted(guest.cpuset),
            "pcpuset": sorted(guest.pcpuset),
            "memory": guest.memory,
            "pagesize": fc.pagesize,
            "cpu_policy": guest.cpu_policy,
            "cpu_thread_policy": guest.cpu_thread_policy,
            "cpu_pinning_raw": {str(g): h for g, h in fc.pinning} or None,
            "cpuset_reserved": sorted(fc.reserved) or None,
        }
        cells.append({"nova_object.name": "InstanceNUMACell", "nova_object.data": data})
    return json.dumps(
        {"nova_object.name": "InstanceNUMATopology", "nova_object.data": {"cells": cells}}
    )


def _nova_conf(cloud: Cloud, store: str, tmp_path: Path) -> Path:
    """A nova.conf like the service's, for novasched-manage."""
    conf = tmp_path / "nova.conf"
    filters = ",".join(CONF.filter_scheduler.enabled_filters)
    conf.write_text(
        "[api_database]\n"
        f"connection = {cloud.api_url}\n"
        "[placement]\n"
        "auth_type = noauth2\n"
        f"endpoint_override = {cloud.placement.endpoint}\n"
        "[decision_records]\n"
        f"connection = {store}\n"
        "[filter_scheduler]\n"
        f"enabled_filters = {filters}\n"
    )
    return conf


def _replay(cloud: Cloud, store: str, tmp_path: Path, *extra: str, **opts: Any) -> dict:
    conf = _nova_conf(cloud, store, tmp_path)
    args = [sys.executable, "-m", "scheduler.cmd.manage", "--config-file", str(conf), "replay"]
    if opts:
        new = tmp_path / "new.conf"
        new.write_text("[filter_scheduler]\n" + "".join(f"{k} = {v}\n" for k, v in opts.items()))
        args += ["--config-file", str(new)]
    out = subprocess.run(
        [*args, "--from-records", "--json", *extra], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def booted(cloud) -> list[tuple[str, str]]:
    """``BOOTS`` instances placed one after another, and reported by their computes."""
    return _boot_and_report(*cloud, FLAVOR, BOOTS)


def _wait_for_records(store: str, count: int) -> None:
    """The service's writer thread writes the records a moment after the replies."""
    engine = sa.create_engine(store)
    deadline = time.monotonic() + 10
    try:
        while True:
            with engine.connect() as conn:
                n = conn.execute(sa.text("SELECT count(*) FROM novasched_decisions")).scalar()
            if n >= count or time.monotonic() > deadline:
                return
            time.sleep(0.2)
    finally:
        engine.dispose()


def test_an_unchanged_configuration_reproduces_every_recorded_decision(cloud, booted, tmp_path):
    report = _replay(*cloud, tmp_path)
    counts = report["counts"]
    assert (counts["records"], counts["replayed"], counts["changed"]) == (BOOTS, BOOTS, 0), [
        c for c in report["calls"] if c["changed"]
    ]
    # the recorded instances were taken out of the hosts and of Placement first
    assert report["taken_out"]["instances"] == BOOTS
    assert report["taken_out"]["allocations"] == BOOTS
    by_instance = {c["instance_uuids"][0]: c["replayed"]["hosts"][0] for c in report["calls"]}
    assert by_instance == dict(booted)
    assert report["before"] == report["after"]
    # and nothing was claimed: Placement still holds exactly the boots' allocations
    for uuid, _ in booted:
        held = cloud[0].placement.get_allocations_for_consumer(uuid)["allocations"]
        assert len(held) == 1


def test_a_flipped_ram_multiplier_changes_the_decisions_and_says_how(cloud, booted, tmp_path):
    placement = cloud[0].placement
    held = {u: placement.get_allocations_for_consumer(u)["allocations"] for u, _ in booted}
    report = _replay(*cloud, tmp_path, ram_weight_multiplier=-1.0)
    counts = report["counts"]
    # the configuration in use was replayed first: it reproduces every decision, and the
    # what-if is compared with it
    assert (counts["baseline_replayed"], counts["baseline_reproduced"]) == (BOOTS, BOOTS)
    assert all(c["baseline"]["hosts"] == c["recorded"]["hosts"] for c in report["calls"])
    # spread by free RAM, every boot went to the host with the most; packed, each goes to
    # the host with the least that still fits
    assert (counts["replayed"], counts["changed"], counts["instances_moved"]) == (BOOTS,) * 3
    recorded = {c["recorded"]["hosts"][0] for c in report["calls"]}
    replayed = {c["replayed"]["hosts"][0] for c in report["calls"]}
    assert recorded.isdisjoint(replayed)
    before, after = report["before"], report["after"]
    assert before["placed"] == after["placed"] == BOOTS
    # the host that took them is a smaller one: its RAM is used to a higher percentage
    assert after["ram_used_pct"]["p100"] > before["ram_used_pct"]["p100"]
    # nothing was claimed: every instance's allocation is where its boot put it
    assert {u: placement.get_allocations_for_consumer(u)["allocations"] for u in held} == held


def test_a_configuration_that_cannot_be_loaded_is_one_line(cloud, booted, tmp_path):
    conf = _nova_conf(*cloud, tmp_path)
    new = tmp_path / "new.conf"
    new.write_text("[filter_scheduler]\nenabled_filters = ComputeFilter,NoSuchFilter\n")
    out = subprocess.run(
        [sys.executable, "-m", "scheduler.cmd.manage", "--config-file", str(conf), "replay"]
        + ["--config-file", str(new), "--from-records"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1
    (line,) = out.stderr.strip().splitlines()
    assert "NoSuchFilter" in line and "Traceback" not in out.stderr


def test_the_report_in_words(cloud, booted, tmp_path):
    conf = _nova_conf(*cloud, tmp_path)
    new = tmp_path / "new.conf"
    new.write_text("[filter_scheduler]\nram_weight_multiplier = -1.0\n")
    out = subprocess.run(
        [sys.executable, "-m", "scheduler.cmd.manage", "--config-file", str(conf), "replay"]
        + ["--config-file", str(new), "--from-records", "--show", "3"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert (
        f"With the configuration in use, the replay reproduces {BOOTS} of {BOOTS} recorded "
        "decision(s) (100 %)"
    ) in text
    assert f"Replayed {BOOTS} of {BOOTS} recorded decision(s)" in text
    assert "hosts used" in text and "RAM used %" in text
    assert "Changed decisions (3 of" in text
    assert " -> " in text


# -- instances no compute reported yet ---------------------------------------------------


@pytest.fixture(scope="module")
def building_cloud(tmp_path_factory) -> Iterator[tuple[Cloud, str]]:
    """A cloud whose boots no compute reports (builds that had not finished, or the demo's
    fleet, which has no computes): the service counted every one as building on its host
    while it decided the next."""
    with _recording_cloud(Path(tmp_path_factory.mktemp("replay-building")), "building") as made:
        cloud, store = made
        for _ in range(BOOTS):
            uuid = str(uuidlib.uuid4())
            ctx = RequestContext(user_id=USER, project_id=PROJECT, request_id=f"req-{uuid}")
            spec = RequestSpec(flavor=FLAVOR, num_instances=1, project_id=PROJECT, user_id=USER)
            cloud.client.select_destinations(ctx, spec, [uuid], return_objects=True)
        _wait_for_records(store, BOOTS)
        yield made


def test_instances_still_building_count_as_building_in_the_replay(building_cloud, tmp_path):
    report = _replay(*building_cloud, tmp_path)
    counts = report["counts"]
    assert (counts["replayed"], counts["changed"]) == (BOOTS, 0), [
        c for c in report["calls"] if c["changed"]
    ]


# -- a request Placement refused part of ------------------------------------------------


@pytest.fixture(scope="module")
def full_cloud(tmp_path_factory) -> Iterator[tuple[Cloud, str]]:
    with _recording_cloud(Path(tmp_path_factory.mktemp("replay-full")), "replay-full") as made:
        yield made


def _room_mb(placement: Any) -> int:
    """The most RAM any compute node's provider can still take, as Placement counts it."""
    room = 0
    for rp in placement.list_providers():
        inv = placement.get_inventories(rp["uuid"]).get("MEMORY_MB")
        if inv is None:
            continue
        used = placement.get_usages(rp["uuid"]).get("MEMORY_MB", 0)
        limit = (inv["total"] - inv.get("reserved", 0)) * inv.get("allocation_ratio", 1.0)
        room = max(room, int(limit) - used)
    return room


def test_a_replay_never_places_beyond_what_placement_accepts(full_cloud, tmp_path):
    """An affinity group of four, each a third of the roomiest host and a little more: the
    first instances are claimed on one host, Placement refuses the next, and nova's answer is
    NoValidHost. The replay's Placement must refuse it as the real one did, with the
    configuration unchanged and with another."""
    cloud, store = full_cloud
    big = Flavor(
        name="m1.third", flavorid="t3", vcpus=1, memory_mb=_room_mb(cloud.placement) // 3 + 1
    )
    uuids = [str(uuidlib.uuid4()) for _ in range(4)]
    group = InstanceGroup(uuid=str(uuidlib.uuid4()), policy="affinity", members=list(uuids))
    spec = RequestSpec(
        flavor=big,
        num_instances=4,
        instance_group=group,
        scheduler_hints={"group": [group.uuid]},
        project_id=PROJECT,
        user_id=USER,
    )
    ctx = RequestContext(user_id=USER, project_id=PROJECT, request_id=f"req-{uuids[0]}")
    with pytest.raises(NoValidHost):
        cloud.client.select_destinations(ctx, spec, uuids, return_objects=True)
    _wait_for_records(store, 1)
    for what_if in ({}, {"ram_weight_multiplier": -1.0}):
        report = _replay(cloud, store, tmp_path, **what_if)
        (call,) = report["calls"]
        assert call["recorded"]["outcome"] == "no_valid_host"
        assert call["replayed"]["outcome"] == "no_valid_host", call
        assert report["after"]["placed"] == 0
    # Placement holds nothing of the request: the live run rolled its claims back, the
    # replays claimed nothing
    for uuid in uuids:
        assert cloud.placement.get_allocations_for_consumer(uuid)["allocations"] == {}


# -- a fleet with NUMA hosts ---------------------------------------------------------------

NUMA_BOOTS = 8


@pytest.fixture(scope="module")
def numa_cloud(tmp_path_factory) -> Iterator[tuple[Cloud, str]]:
    CONF.set_override("enabled_filters", FILTERS_WITH_NUMA, group="filter_scheduler")
    try:
        with _recording_cloud(
            Path(tmp_path_factory.mktemp("replay-numa")),
            "replay-numa",
            seed=5,
            fleet_options={"numa_fraction": 0.5},
        ) as made:
            _boot_and_report(*made, NUMA_FLAVOR, NUMA_BOOTS)
            yield made
    finally:
        CONF.clear_override("enabled_filters", group="filter_scheduler")


def test_numa_instances_give_their_cells_back_and_are_placed_again(numa_cloud, tmp_path):
    report = _replay(*numa_cloud, tmp_path)
    counts = report["counts"]
    assert (counts["replayed"], counts["changed"]) == (NUMA_BOOTS, 0), [
        c for c in report["calls"] if c["changed"]
    ]
    taken = report["taken_out"]
    assert (taken["instances"], taken["numa"], taken["held_numa_pci"]) == (NUMA_BOOTS,) * 2 + (0,)
