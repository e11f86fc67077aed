"""The cloud ``novasched-manage demo --state-dir DIR`` leaves: an hour later, from another
directory, the operator's commands run on it with DIR/nova.conf as it is, each as its own
process, replay included without the demo's Placement (it reads Placement's database),
and the demo's Placement comes back where nova.conf says."""

from __future__ import annotations

import datetime
import json
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import sqlalchemy as sa

import db
from db import models

MANAGE = Path(sys.executable).with_name("novasched-manage")
HOSTS = 40


def _manage(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MANAGE), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd
    )


def _an_hour_later(state: Path) -> None:
    """Move every heartbeat and report of the demo's computes an hour back."""
    hour = datetime.timedelta(hours=1)
    t = models.services
    for cell in sorted(state.glob("nova_cell[1-9]*.sqlite")):
        engine = db.get_engine(f"sqlite:///{cell}")
        with engine.begin() as conn:
            for row in conn.execute(sa.select(t.c.id, t.c.last_seen_up, t.c.updated_at)).all():
                conn.execute(
                    t.update()
                    .where(t.c.id == row.id)
                    .values(
                        last_seen_up=row.last_seen_up and row.last_seen_up - hour,
                        updated_at=row.updated_at and row.updated_at - hour,
                    )
                )
    db.dispose_engines()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    base = tmp_path_factory.mktemp("demo-state")
    # a relative --state-dir: nova.conf must name absolute paths all the same
    done = _manage(
        "demo", "--hosts", str(HOSTS), "--boots", "4", "--state-dir", "cloud", cwd=base, timeout=300
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stderr == ""
    state = base / "cloud"
    fleet = re.search(
        r"Fleet: (\d+) compute nodes in \d+ cells, (\d+) disabled, (\d+) down", done.stdout
    )
    requests = re.search(r"requests: (\d+), instances placed: (\d+)", done.stdout)
    assert fleet and requests, done.stdout
    _an_hour_later(state)
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    return SimpleNamespace(
        state=state,
        conf=str(state / "nova.conf"),
        stdout=done.stdout,
        hosts=int(fleet[1]),
        disabled=int(fleet[2]),
        down=int(fleet[3]),
        requests=int(requests[1]),
        cwd=elsewhere,
    )


def test_the_demo_ends_with_the_commands_to_try_on_its_directory(demo):
    conf = demo.conf
    for line in [
        f"--config-file {conf} capacity",
        f"--config-file {conf} explain --flavor m1.small",
        f"--config-file {conf} decision list",
        f"demo --state-dir {demo.state} --serve-placement",
        f"--config-file {conf} replay --what-if {demo.state / 'try.conf'}",
    ]:
        assert line in demo.stdout
    assert (demo.state / "try.conf").read_text().count("ram_weight_multiplier = -1.0") == 1
    assert f"sqlite:///{demo.state}/nova_api.sqlite" in Path(conf).read_text()


def test_capacity_counts_every_up_enabled_host_an_hour_later(demo):
    done = _manage("--config-file", demo.conf, "capacity", "--json", cwd=demo.cwd)
    assert done.returncode == 0, done.stderr[-4000:]
    figures = {f["flavor"]: f for f in json.loads(done.stdout)}
    assert set(figures) == {
        "m1.tiny",
        "m1.small",
        "ssd.small",
        "m1.medium",
        "m1.large",
        "m1.xlarge",
    }
    assert all(f["total"] > 0 and not f["partial"] for f in figures.values())
    # the demo's up hosts are still up, its down and disabled ones are not counted
    assert len(figures["m1.tiny"]["by_host"]) == demo.hosts - demo.disabled - demo.down


def test_explain_finds_m1_small_by_name_and_sees_only_the_demo_down_hosts_down(demo):
    done = _manage(
        "--config-file",
        demo.conf,
        "explain",
        "--flavor",
        "m1.small",
        "--format",
        "json",
        cwd=demo.cwd,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    doc = json.loads(done.stdout)
    assert doc["no_valid_host"] is None
    assert doc["request"]["flavor"]["memory_mb"] == 2048
    assert doc["pick"]["host"].startswith("compute-")
    (compute_filter,) = [f for f in doc["filters"] if f["name"] == "ComputeFilter"]
    assert compute_filter["hosts_in"] - compute_filter["hosts_passed"] == demo.down


def test_the_decisions_the_demo_made_are_listed_and_shown(demo):
    done = _manage("--config-file", demo.conf, "decision", "list", "--json", cwd=demo.cwd)
    assert done.returncode == 0, done.stderr[-4000:]
    records = json.loads(done.stdout)
    assert len(records) == demo.requests
    shown = re.search(r"decision show (req-[0-9a-f-]+)", demo.stdout)[1]
    assert shown in {r["request_id"] for r in records}
    done = _manage("--config-file", demo.conf, "decision", "show", shown, cwd=demo.cwd)
    assert done.returncode == 0, done.stderr[-4000:]
    assert shown in done.stdout


def test_replay_reproduces_the_demo_without_its_placement_served(demo):
    """The demo's nova.conf reads Placement's database (view_feed = database): replay takes
    the recorded instances' allocations from it, so no Placement API has to run."""
    endpoint = re.search(r"endpoint_override = (\S+)", Path(demo.conf).read_text())[1]
    host, port = endpoint.rsplit("/", 1)[-1].rsplit(":", 1)
    with socket.socket() as probe:
        assert probe.connect_ex((host, int(port))) != 0, "the demo's Placement is served"
    done = _manage(
        "--config-file",
        demo.conf,
        "replay",
        "--what-if",
        str(demo.state / "try.conf"),
        "-f",
        "json",
        cwd=demo.cwd,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout)
    counts = report["counts"]
    assert counts["records"] == demo.requests and counts["skipped"] == 0
    # the recorded instances were taken out of today's fleet first, from Placement's database
    assert report["taken_out"]["allocations"] > 0
    # the configuration the demo ran with reproduces what it decided
    assert counts["baseline_reproduced"] >= 0.95 * counts["baseline_replayed"] > 0
    assert counts["unchanged"] + counts["changed"] == counts["replayed"]


def test_the_demos_cloud_passes_check_with_its_placement_served_again(demo):
    served = subprocess.Popen(
        [str(MANAGE), "demo", "--state-dir", str(demo.state), "--serve-placement"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=demo.cwd,
    )
    try:
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(x) for x in served.stdout], daemon=True).start()
        first = lines.get(timeout=60)
        endpoint = re.search(r"endpoint_override = (\S+)", Path(demo.conf).read_text())[1]
        assert f"on {endpoint}," in first
        done = _manage(
            "--config-file",
            demo.conf,
            "check",
            "--placement-config-file",
            str(demo.state / "placement.conf"),
            "-f",
            "json",
            cwd=demo.cwd,
            timeout=180,
        )
        # with Placement's own settings, the demo's cloud passes every check
        checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
        assert {n: c["details"] for n, c in checks.items() if c["status"] != "OK"} == {}
        assert done.returncode == 0
    finally:
        served.send_signal(signal.SIGINT)  # Ctrl-C, as the demo says
        code = served.wait(timeout=30)
    assert code == 0, served.stderr.read()[-4000:]


def test_the_demo_is_not_run_again_into_the_directory_of_a_kept_one(demo):
    done = _manage("demo", "--state-dir", str(demo.state), cwd=demo.cwd)
    assert done.returncode == 1
    assert done.stdout == ""
    assert "already holds a demo's cloud" in done.stderr
