"""--split-cpus: the benchmark's own process on one CPU, database servers and its children on
the others, and the servers' masks put back afterwards (real processes, real affinities)."""

import os
import subprocess
import time

import pytest

from benchmarks import cpus

ALLOWED = os.sched_getaffinity(0)
needs_two = pytest.mark.skipif(len(ALLOWED) < 2, reason="--split-cpus needs two CPUs")


def _pid_of(name: str, arg: str) -> int:
    for _ in range(50):
        out = subprocess.run(["pgrep", "-f", f"{name} {arg}"], capture_output=True, text=True)
        if out.stdout.strip():
            return int(out.stdout.split()[0])
        time.sleep(0.05)
    raise AssertionError(f"{name} {arg} did not start")


@needs_two
def test_split_pins_self_children_and_servers_then_restores():
    first, rest = min(ALLOWED), ALLOWED - {min(ALLOWED)}
    child = subprocess.Popen(["sleep", "30.11"])
    # a process that is not ours (reparented away): stands for the database server
    subprocess.run(["sh", "-c", "sleep 30.12 >/dev/null 2>&1 &"], check=True)
    server = _pid_of("sleep", "30.12")
    try:
        split = cpus.CpuSplit(servers=("sleep",))
        done = split.apply()
        assert os.sched_getaffinity(0) == {first}
        assert os.sched_getaffinity(child.pid) == rest
        assert os.sched_getaffinity(server) == rest
        assert done["scheduler_cpus"] == [first] and set(done["other_cpus"]) == rest
        assert done["servers"] == ["sleep"] and done["children"] >= 1
        split.restore()
        assert os.sched_getaffinity(0) == ALLOWED
        assert os.sched_getaffinity(server) == ALLOWED
    finally:
        child.kill()
        os.kill(server, 9)
        os.sched_setaffinity(0, ALLOWED)


def test_one_cpu_is_refused_with_the_reason(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    with pytest.raises(cpus.CpuSplitError, match="two CPUs"):
        cpus.CpuSplit()


@needs_two
def test_a_server_we_may_not_pin_is_named(monkeypatch):
    own = {int(t) for t in os.listdir(f"/proc/{os.getpid()}/task")}

    def refuse(tid, mask):
        if tid not in own:
            raise PermissionError(1, "Operation not permitted")

    subprocess.run(["sh", "-c", "sleep 30.13 >/dev/null 2>&1 &"], check=True)
    server = _pid_of("sleep", "30.13")
    try:
        split = cpus.CpuSplit(servers=("sleep",))
        monkeypatch.setattr(os, "sched_setaffinity", refuse)
        with pytest.raises(cpus.CpuSplitError, match=r"sleep \(pid \d+\).*root"):
            split.apply()
    finally:
        os.kill(server, 9)
