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
from scheduler.objects import Flavor, RequestSpec
from scheduler.rpc.context import RequestContext
from tests.functional.fixtures_cloud import PROJECT, USER, Cloud, build_cloud

FLAVOR = Flavor(name="m1.medium", flavorid="3", vcpus=2, memory_mb=4096, root_gb=20)
BOOTS = 10


@pytest.fixture(scope="module")
def cloud(tmp_path_factory) -> Iterator[tuple[Cloud, str]]:
    tmp = Path(tmp_path_factory.mktemp("replay"))
    store = f"sqlite:///{tmp / 'decisions.sqlite'}"
    CONF.set_override("connection", store, group="decision_records")
    try:
        with contextlib.ExitStack() as stack:
            yield (
                build_cloud(
                    stack,
                    tmp,
                    cell_kinds=("mariadb", "sqlite"),
                    hosts=12,
                    seed=7,
                    topic=f"scheduler-replay-{uuidlib.uuid4().hex[:10]}",
                ),
                store,
            )
    finally:
        CONF.clear_override("connection", group="decision_records")


def _report_as_compute(cloud: Cloud, host: str, node: str, instance: str) -> None:
    """What nova-compute writes once the instance is built: its row on the host, and the
    compute node's usage."""
    now = timeutils.utcnow()
    cn = models.compute_nodes
    with db.get_engine(cloud.cell_urls[cloud.host_cell(host)]).begin() as conn:
        conn.execute(
            models.instances.insert().values(
                uuid=instance,
                host=host,
                node=node,
                project_id=PROJECT,
                user_id=USER,
                memory_mb=FLAVOR.memory_mb,
                vcpus=FLAVOR.vcpus,
                root_gb=FLAVOR.root_gb,
                vm_state="active",
                created_at=now,
                deleted=0,
                cleaned=0,
            )
        )
        conn.execute(
            cn.update()
            .where(cn.c.hypervisor_hostname == node, cn.c.deleted == 0)
            .values(
                vcpus_used=cn.c.vcpus_used + FLAVOR.vcpus,
                memory_mb_used=cn.c.memory_mb_used + FLAVOR.memory_mb,
                free_ram_mb=cn.c.free_ram_mb - FLAVOR.memory_mb,
                local_gb_used=cn.c.local_gb_used + FLAVOR.root_gb,
                free_disk_gb=cn.c.free_disk_gb - FLAVOR.root_gb,
                updated_at=now,
            )
        )


def _nova_conf(cloud: Cloud, store: str, tmp_path: Path) -> Path:
    """A nova.conf like the service's, for novasched-manage."""
    conf = tmp_path / "nova.conf"
    conf.write_text(
        "[api_database]\n"
        f"connection = {cloud.api_url}\n"
        "[placement]\n"
        "auth_type = noauth2\n"
        f"endpoint_override = {cloud.placement.endpoint}\n"
        "[decision_records]\n"
        f"connection = {store}\n"
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
    cloud, store = cloud
    placed = []
    for _ in range(BOOTS):
        uuid = str(uuidlib.uuid4())
        ctx = RequestContext(user_id=USER, project_id=PROJECT, request_id=f"req-{uuid}")
        spec = RequestSpec(flavor=FLAVOR, num_instances=1, project_id=PROJECT, user_id=USER)
        (selection,) = cloud.client.select_destinations(ctx, spec, [uuid], return_objects=True)
        host, node = selection[0].service_host, selection[0].nodename
        _report_as_compute(cloud, host, node, uuid)
        placed.append((uuid, f"{host}/{node}"))
    # the service's writer thread writes the records a moment later
    engine = sa.create_engine(store)
    deadline = time.monotonic() + 10
    while True:
        with engine.connect() as conn:
            n = conn.execute(sa.text("SELECT count(*) FROM novasched_decisions")).scalar()
        if n >= BOOTS or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    engine.dispose()
    return placed


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
    assert f"Replayed {BOOTS} of {BOOTS} recorded decision(s)" in text
    assert "hosts used" in text and "RAM used %" in text
    assert "Changed decisions (3 of" in text
    assert " -> " in text
