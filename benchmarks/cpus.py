"""``--split-cpus``: the scheduler on a CPU of its own, the databases and Placement on the
others, as in a deployment where they run on other hardware.

On a small machine everything shares the same few CPUs. There, the database's share of a
request (the per-request freshness checks scan Placement's providers, about 1.7 ms at
10,000) runs on a CPU the scheduler needs, and the benchmark measures that contention as
well as the scheduler's own work. The split keeps the two apart: this process (the
scheduler and the conductor-side client) on the first CPU allowed, and every thread of the
database servers and of this process's children (Placement's gunicorn) on the rest. The
previous masks of the database servers are put back by ``restore``.
"""

from __future__ import annotations

import os
from typing import Any

from benchmarks.report import proc_table

# the database servers' process names (/proc/<pid>/stat)
SERVERS = ("mariadbd", "mysqld", "postgres")


class CpuSplitError(RuntimeError):
    pass


def _threads(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:  # the process has ended
        return []


class CpuSplit:
    def __init__(self, servers: tuple[str, ...] = SERVERS):
        if not hasattr(os, "sched_setaffinity"):
            raise CpuSplitError("--split-cpus needs Linux (sched_setaffinity)")
        allowed = sorted(os.sched_getaffinity(0))
        if len(allowed) < 2:
            raise CpuSplitError(f"--split-cpus needs two CPUs or more; this process has {allowed}")
        self.mine = {allowed[0]}
        self.others = set(allowed[1:])
        self.servers = servers
        self._saved: dict[int, set[int]] = {}  # the servers' threads' masks before

    def apply(self) -> dict[str, Any]:
        """Pin now (again: threads and children started since are pinned too). Returns what
        was pinned."""
        me = os.getpid()
        procs = proc_table()
        children: dict[int, list[int]] = {}
        for pid, (ppid, _, _) in procs.items():
            children.setdefault(ppid, []).append(pid)
        descendants, todo = [], list(children.get(me, []))
        while todo:
            pid = todo.pop()
            descendants.append(pid)
            todo.extend(children.get(pid, []))
        servers = [pid for pid, (_, comm, _) in procs.items() if comm in self.servers]
        for tid in _threads(me):
            self._pin(tid, self.mine, save=False)
        for pid in servers:
            for tid in _threads(pid):
                self._pin(tid, self.others, save=True, owner=(pid, procs[pid][1]))
        for pid in descendants:
            for tid in _threads(pid):
                self._pin(tid, self.others, save=False)
        return {
            "scheduler_cpus": sorted(self.mine),
            "other_cpus": sorted(self.others),
            "servers": sorted({procs[p][1] for p in servers}),
            "children": len(descendants),
        }

    def _pin(
        self, tid: int, cpus: set[int], *, save: bool, owner: tuple[int, str] | None = None
    ) -> None:
        try:
            if save and tid not in self._saved:
                self._saved[tid] = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, cpus)
        except ProcessLookupError:  # the thread has ended
            self._saved.pop(tid, None)
        except PermissionError as exc:
            who = f"{owner[1]} (pid {owner[0]})" if owner else f"thread {tid}"
            raise CpuSplitError(
                f"--split-cpus may not set the CPU affinity of {who}: run the benchmark as "
                "root or as the database's owner, or leave --split-cpus out"
            ) from exc

    def restore(self) -> None:
        """Give the database servers' threads their masks back, and this process all of its
        CPUs."""
        for tid, cpus in self._saved.items():
            try:
                os.sched_setaffinity(tid, cpus)
            except OSError:  # ended, or no longer ours to set
                pass
        self._saved.clear()
        for tid in _threads(os.getpid()):
            try:
                os.sched_setaffinity(tid, self.mine | self.others)
            except OSError:
                pass


# set by ``python -m benchmarks --split-cpus`` for the sections that use it (e2e)
ACTIVE: CpuSplit | None = None


def apply_active() -> dict[str, Any] | None:
    """Pin again if ``--split-cpus`` is on (a section calls it before timing)."""
    return ACTIVE.apply() if ACTIVE is not None else None
