"""The scheduler service records each decision, and novasched-manage reads it back.

A real cloud (the real Placement, MariaDB and SQLite cells, the service on RabbitMQ) whose
service records into a SQLite store under [DEFAULT] state_path; the conductor-side client
boots; ``novasched-manage decision show/list`` run as subprocesses on the same nova.conf.
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

import pytest

from scheduler.conf import CONF
from scheduler.exceptions import NoValidHost
from scheduler.objects import Flavor, RequestSpec
from scheduler.rpc.context import RequestContext
from tests.functional.fixtures_cloud import PROJECT, USER, Cloud, build_cloud

SMALL = Flavor(name="m1.small", flavorid="2", vcpus=2, memory_mb=2048, root_gb=20)


@pytest.fixture(scope="module")
def cloud(tmp_path_factory) -> Iterator[Cloud]:
    with contextlib.ExitStack() as stack:
        yield build_cloud(
            stack,
            Path(tmp_path_factory.mktemp("decisions")),
            cell_kinds=("mariadb", "sqlite"),
            hosts=12,
            topic=f"scheduler-decisions-{uuidlib.uuid4().hex[:10]}",
        )


def _manage(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    conf = tmp_path / "nova.conf"
    conf.write_text(f"[DEFAULT]\nstate_path = {CONF.state_path}\n")
    return subprocess.run(
        [sys.executable, "-m", "scheduler.cmd.manage", "--config-file", str(conf), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _show(tmp_path: Path, key: str) -> list[dict]:
    """The records of ``key``, once the service's writer has written them."""
    deadline = time.monotonic() + 10
    while True:
        out = _manage(tmp_path, "decision", "show", key, "--json")
        if out.returncode == 0:
            return json.loads(out.stdout)
        assert out.returncode == 2, out.stderr  # nothing yet: the writer is behind
        assert time.monotonic() < deadline, "the decision was never written"
        time.sleep(0.2)


def _ctx() -> RequestContext:
    return RequestContext(user_id=USER, project_id=PROJECT, request_id=f"req-{uuidlib.uuid4()}")


def test_a_boot_is_recorded_with_why_it_landed_there(cloud, tmp_path):
    uuids = [str(uuidlib.uuid4()), str(uuidlib.uuid4())]
    ctx = _ctx()
    spec = RequestSpec(flavor=SMALL, num_instances=2, project_id=PROJECT, user_id=USER)
    result = cloud.client.select_destinations(
        ctx, spec, uuids, return_objects=True, return_alternates=True
    )
    (rec,) = _show(tmp_path, uuids[1])
    assert rec["request_id"] == ctx.request_id and rec["outcome"] == "scheduled"
    assert rec["instance_uuids"] == uuids
    assert rec["hosts"] == [r[0].service_host for r in result]
    doc = rec["document"]
    assert doc["request"]["flavor"]["name"] == "m1.small"
    assert doc["placement"]["source"] == "placement"
    compute = next(f for f in doc["filters"] if f["name"] == "ComputeFilter")
    assert compute["hosts_in"] == doc["hosts"] and compute["hosts_passed"] < compute["hosts_in"]
    best = doc["weighed"][0]
    assert best and "RAMWeigher" in best[0]["weighers"]
    assert [s[0]["host"] for s in doc["selections"]] == rec["hosts"]
    # the same decision by request id, and in the host's list
    assert [r["id"] for r in _show(tmp_path, ctx.request_id)] == [rec["id"]]
    listed = _manage(tmp_path, "decision", "list", "--host", rec["hosts"][0], "--json")
    assert listed.returncode == 0, listed.stderr
    assert rec["id"] in [r["id"] for r in json.loads(listed.stdout)]
    # the text form names the chosen host
    text = _manage(tmp_path, "decision", "show", uuids[0])
    assert text.returncode == 0 and rec["hosts"][0] in text.stdout


def _refused_boot(cloud, flavor_name: str) -> str:
    """Boot one instance of a flavor no host has the RAM for (64 TB): NoValidHost. Returns
    the instance's uuid."""
    uuid = str(uuidlib.uuid4())
    huge = Flavor(
        name=flavor_name, flavorid=flavor_name, vcpus=1, memory_mb=64 * 1024 * 1024, root_gb=1
    )
    spec = RequestSpec(flavor=huge, num_instances=1, project_id=PROJECT, user_id=USER)
    with pytest.raises(NoValidHost):
        cloud.client.select_destinations(_ctx(), spec, [uuid], return_objects=True)
    return uuid


def test_a_no_valid_host_is_recorded_with_its_reason(cloud, tmp_path):
    uuid = _refused_boot(cloud, "huge")
    (rec,) = _show(tmp_path, uuid)
    assert rec["outcome"] == "no_valid_host" and rec["hosts"] == []
    assert "MEMORY_MB" in rec["document"]["reason"]


def test_why_not_a_host_and_the_decisions_that_found_no_host(cloud, tmp_path):
    """``show --host`` on a real record: a host the ComputeFilter removed (its service is
    down), a host Placement never offered (disabled: the request forbids its trait) and the
    chosen one; ``list --outcome no_valid_host`` lists the refusals only."""
    down = sorted(cloud.fleet.down_hosts - cloud.fleet.disabled_hosts)
    disabled = sorted(cloud.fleet.disabled_hosts)
    assert down and disabled  # the fleet's seed gives both
    uuid = str(uuidlib.uuid4())
    spec = RequestSpec(flavor=SMALL, num_instances=1, project_id=PROJECT, user_id=USER)
    result = cloud.client.select_destinations(_ctx(), spec, [uuid], return_objects=True)
    chosen = result[0][0].service_host
    (rec,) = _show(tmp_path, uuid)
    assert rec["document"]["version"] == 4

    def why(host: str) -> tuple[str, dict]:
        # upper-case, as an operator may paste it
        text = _manage(tmp_path, "decision", "show", uuid.upper(), "--host", host)
        assert text.returncode == 0, text.stderr
        answers = _manage(tmp_path, "decision", "show", uuid, "--host", host, "--json")
        assert answers.returncode == 0, answers.stderr
        (answer,) = json.loads(answers.stdout)
        return " ".join(text.stdout.split()), answer

    text, answer = why(down[0])
    assert answer["verdict"] == "removed"
    assert (answer["filter"], answer["reason"]) == ("ComputeFilter", "service down")
    assert f"{down[0]}: removed by ComputeFilter: service down (filter 1 of " in text
    text, answer = why(disabled[0])
    assert answer["verdict"] == "not_candidate"
    assert "not a candidate: Placement did not return it, or it is in another cell" in text
    text, answer = why(chosen)
    assert answer["verdict"] == "chosen" and answer["rank"] >= 1
    assert f"{chosen}: chosen for instance 1 passed every filter: weighed #" in text

    refused_uuid = _refused_boot(cloud, "huge-why")
    (nvh,) = _show(tmp_path, refused_uuid)
    listed = _manage(tmp_path, "decision", "list", "--outcome", "no_valid_host", "--json")
    assert listed.returncode == 0, listed.stderr
    records = json.loads(listed.stdout)
    assert nvh["id"] in [r["id"] for r in records]
    assert rec["id"] not in [r["id"] for r in records]
    assert {r["outcome"] for r in records} == {"no_valid_host"}
    flavored = _manage(tmp_path, "decision", "list", "--flavor", "huge-why", "--json")
    assert [r["id"] for r in json.loads(flavored.stdout)] == [nvh["id"]]
