"""How long our consumption lives on a HostState: exactly as long as the instance is pending.

A host reads "its last applied compute-node report + exactly the consumptions still pending":
a newer report releases what it counts (consumptions made before it) and keeps the later ones
on top of it; a release by key (a delete, a move, a rollback), an expiry or a sync takes the
report again and consumes the remaining ones on it, NUMA cells and PCI pools included.
"""

from __future__ import annotations

import copy
import datetime
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from oslo_utils import timeutils

from db.queries import ComputeNodeRow
from scheduler.drivers.held_claims import HeldClaims
from scheduler.hosts.state import HostState
from scheduler.hosts.table import HostTable
from scheduler.objects import Flavor, RequestSpec
from scheduler.resources import numa, pci
from scheduler.telemetry import metrics
from tests.db_rows import compute_node_row
from tests.unit.scheduler.hosts.env import assert_table_mirrors
from tests.unit.scheduler.resources.builders import (
    alias_request,
    host_cell,
    host_topology,
    instance_cell,
    pool,
    pool_list,
)
from tests.unit.scheduler.resources.builders import instance_topology as numa_request

T0 = datetime.datetime(2026, 11, 1, 12, 0, 0)
GPU = ("10de", "1eb8")
# two NUMA cells of 8 pinnable and 8 shared CPUs; 4 GPUs, 2 on each cell
NUMA = json.dumps(
    host_topology(
        host_cell(0, [0, 1, 2, 3, 4, 5, 6, 7], [8, 9, 10, 11, 12, 13, 14, 15], 32768),
        host_cell(1, [16, 17, 18, 19, 20, 21, 22, 23], [24, 25, 26, 27, 28, 29, 30, 31], 32768),
    )
)
PCI = json.dumps(pool_list(pool(*GPU, 2, 0), pool(*GPU, 2, 1)))


class Clock:
    """``timeutils.utcnow`` while a test runs: T0, moved on by the test."""

    now = T0

    def set(self, when: datetime.datetime) -> datetime.datetime:
        Clock.now = when
        return when

    def __call__(self, with_timezone: bool = False) -> datetime.datetime:
        return Clock.now


CLOCK = Clock()


@pytest.fixture(autouse=True)
def _clock(monkeypatch):
    CLOCK.set(T0)
    monkeypatch.setattr(timeutils, "utcnow", CLOCK)


def _row(updated_at: datetime.datetime, **over: Any) -> ComputeNodeRow:
    values: dict[str, Any] = dict(
        uuid="node-1",
        memory_mb=65536,
        free_ram_mb=60000,
        free_disk_gb=900,
        local_gb=1000,
        local_gb_used=100,
        vcpus=32,
        vcpus_used=4,
        numa_topology=NUMA,
        pci_stats=PCI,
        stats='{"num_instances": "3", "io_workload": "1"}',
        cpu_allocation_ratio=4.0,
        ram_allocation_ratio=1.0,
        updated_at=updated_at,
        created_at=T0 - datetime.timedelta(days=1),
    )
    values.update(over)
    host = values.pop("host", "h")
    values.setdefault("hypervisor_hostname", "h")
    return compute_node_row(host, **values)


def _plain(ram: int = 1024, vcpus: int = 2) -> RequestSpec:
    return RequestSpec(flavor=Flavor(memory_mb=ram, vcpus=vcpus, root_gb=10, ephemeral_gb=5))


def _pinned() -> RequestSpec:
    spec = _plain(2048, 2)
    spec.numa_topology = numa.instance_topology_from_primitive(
        numa_request(instance_cell(0, [0, 1], 2048, "dedicated"))
    )
    return spec


def _gpu() -> RequestSpec:
    spec = _plain(4096, 4)
    spec.pci_requests = pci.requests_from_primitive(
        [alias_request("gpu", vendor_id=GPU[0], product_id=GPU[1])]
    )
    return spec


SPECS = {"plain": _plain, "pinned": _pinned, "gpu": _gpu}


def _usage(hs: HostState) -> tuple:
    return (
        hs.free_ram_mb,
        hs.free_disk_mb,
        hs.vcpus_used,
        hs.num_instances,
        hs.num_io_ops,
        json.dumps(hs.numa_topology, sort_keys=True, default=str),
        json.dumps(hs.pci_stats, sort_keys=True, default=str),
    )


def _pinned_and_gpus(hs: HostState) -> tuple[int, int]:
    """(pinned CPUs, free GPUs) the host's NUMA topology and PCI pools say."""
    cells = numa.host_topology_from_primitive(hs.numa_topology).cells
    return (
        sum(len(c.pinned_cpus) for c in cells),
        sum(p["count"] for p in pci.pools_from_stats(hs.pci_stats)),
    )


def _expected(row: ComputeNodeRow, live: list[str], kinds: dict[str, str]) -> tuple:
    """The usage of a fresh host given ``row`` and then exactly ``live``, in order."""
    fresh = HostState("h", "h")
    fresh.update_from_row(row)
    for key in live:
        fresh.consume_from_request(SPECS[kinds[key]](), key)
    return _usage(fresh)


def _advance(seconds: float) -> datetime.datetime:
    return CLOCK.set(CLOCK.now + datetime.timedelta(seconds=seconds))


# -- a newer report ------------------------------------------------------------------------------
def test_a_newer_report_releases_what_it_counts_and_keeps_later_consumptions_on_top():
    hs = HostState("h", "h")
    first = _row(T0)
    hs.update_from_row(first)
    _advance(1)
    hs.consume_from_request(_plain(), "i-1")
    written = _advance(1)  # the compute's report, which counts i-1
    _advance(1)
    hs.consume_from_request(_plain(), "i-2")
    assert hs.free_ram_mb == 60000 - 2048
    report = _row(written, free_ram_mb=59000, stats='{"num_instances": "4", "io_workload": "2"}')
    hs.update_from_row(report)
    # i-1 is in the report; i-2 was placed after it was written and stays counted on top
    assert hs.consumptions() == {"i-2": T0 + datetime.timedelta(seconds=3)}
    assert _usage(hs) == _expected(report, ["i-2"], {"i-2": "plain"})
    assert (hs.free_ram_mb, hs.num_instances) == (59000 - 1024, 5)


def test_a_report_stamped_in_the_claims_second_counts_the_instance_once():
    """MariaDB keeps whole seconds: the compute's report written 0.4 s after our consumption
    is stamped before it. It counts the instance; taken with the consumption kept on top, the
    instance would count twice. As nova, the report is not taken until the next one."""
    hs = HostState("h", "h")
    hs.update_from_row(_row(T0))
    CLOCK.set(T0 + datetime.timedelta(seconds=5, microseconds=300_000))
    hs.consume_from_request(_plain(), "i-1")
    before = _usage(hs)
    stamped = T0 + datetime.timedelta(seconds=5)  # written at 5.7 s, kept as 5 s
    hs.update_from_row(_row(stamped, free_ram_mb=60000 - 1024))
    assert _usage(hs) == before and hs.free_ram_mb == 60000 - 1024
    assert list(hs.consumptions()) == ["i-1"]
    # the next report, a second later, is taken and releases it
    later = _row(T0 + datetime.timedelta(seconds=6), free_ram_mb=60000 - 1024)
    hs.update_from_row(later)
    assert hs.consumptions() == {} and _usage(hs) == _expected(later, [], {})
    # a stamp with a fraction (PostgreSQL, SQLite) is exact: taken at once
    hs.consume_from_request(_plain(), "i-2")
    exact = T0 + datetime.timedelta(seconds=7, microseconds=1)
    CLOCK.set(exact - datetime.timedelta(microseconds=500))
    hs.consume_from_request(_plain(), "i-3")
    hs.update_from_row(_row(exact, free_ram_mb=50000))
    assert hs.consumptions() == {} and hs.free_ram_mb == 50000


def test_an_older_report_changes_nothing_and_the_same_report_again_changes_nothing():
    hs = HostState("h", "h")
    hs.update_from_row(_row(T0))
    _advance(5)
    hs.consume_from_request(_pinned(), "i-1")
    before = _usage(hs)
    hs.update_from_row(_row(T0 - datetime.timedelta(seconds=1), free_ram_mb=1))
    hs.update_from_row(_row(T0))
    assert _usage(hs) == before
    assert list(hs.consumptions()) == ["i-1"]


# -- releases by key ------------------------------------------------------------------------
def test_a_release_takes_the_report_again_and_consumes_the_rest_numa_and_pci_included():
    hs = HostState("h", "h")
    row = _row(T0)
    hs.update_from_row(row)
    kinds = {"i-1": "pinned", "i-2": "gpu", "i-3": "pinned", "i-4": "gpu"}
    for key, kind in kinds.items():
        _advance(1)
        hs.consume_from_request(SPECS[kind](), key)
    assert _usage(hs) == _expected(row, list(kinds), kinds)
    assert _pinned_and_gpus(hs) == (4, 2)
    assert hs.release_consumption(["i-1", "i-4"], "deleted") == 2
    assert list(hs.consumptions()) == ["i-2", "i-3"]
    assert _usage(hs) == _expected(row, ["i-2", "i-3"], kinds)
    assert _pinned_and_gpus(hs) == (2, 3)
    assert hs.release_consumption("i-1", "deleted") == 0  # already gone
    assert hs.release_consumption(None, "rollback") == 2
    assert _usage(hs) == _expected(row, [], kinds)
    assert _pinned_and_gpus(hs) == (0, 4)
    assert hs.updated == T0  # the report's time again


def test_the_same_instance_consumed_again_is_counted_once():
    hs = HostState("h", "h")
    row = _row(T0)
    hs.update_from_row(row)
    _advance(1)
    hs.consume_from_request(_plain(), "i-1")
    hs.consume_from_request(_plain(), "i-1")
    assert _usage(hs) == _expected(row, ["i-1"], {"i-1": "plain"})


def test_consumption_without_an_instance_uuid_gets_a_key_of_its_own():
    hs = HostState("h", "h")
    hs.update_from_row(_row(T0))
    _advance(1)
    first = hs.consume_from_request(_plain())
    second = hs.consume_from_request(_plain())
    assert first != second and set(hs.consumptions()) == {first, second}
    # nova's instance list cannot name them: a sync leaves them counted
    assert hs.release_unlisted([], _advance(600)) == 0
    assert hs.num_instances == 5


def test_expiry_releases_what_its_compute_never_reported():
    hs = HostState("h", "h")
    row = _row(T0)
    hs.update_from_row(row)
    _advance(1)
    hs.consume_from_request(_plain(), "i-old")
    _advance(100)
    hs.consume_from_request(_gpu(), "i-new")
    assert hs.expire_consumption(120.0) == 0
    _advance(30)
    assert hs.expire_consumption(120.0) == 1
    assert list(hs.consumptions()) == ["i-new"]
    assert _usage(hs) == _expected(row, ["i-new"], {"i-new": "gpu"})
    # a consumption checks the others' age too
    _advance(200)
    hs.consume_from_request(_plain(), "i-3", max_age=120.0)
    assert list(hs.consumptions()) == ["i-3"]


def test_a_sync_releases_unlisted_instances_consumed_before_the_cut_only():
    hs = HostState("h", "h")
    hs.update_from_row(_row(T0))
    _advance(1)
    hs.consume_from_request(_plain(), "i-listed")
    hs.consume_from_request(_plain(), "i-gone")
    cut = _advance(10)
    hs.consume_from_request(_plain(), "i-recent")
    assert hs.release_unlisted(["i-listed", "other"], cut) == 1
    assert list(hs.consumptions()) == ["i-listed", "i-recent"]


def test_a_private_copy_consumes_and_releases_without_touching_the_host():
    hs = HostState("h", "h")
    hs.update_from_row(_row(T0))
    _advance(1)
    hs.consume_from_request(_plain(), "i-1")
    before = (_usage(hs), hs.consumptions())
    twin = copy.copy(hs)  # what explain does for a multi-create
    twin.consume_from_request(_gpu(), "i-2")
    twin.release_consumption("i-1", "rollback")
    assert list(twin.consumptions()) == ["i-2"]
    assert (_usage(hs), hs.consumptions()) == before


def test_the_table_mirrors_every_release():
    table = HostTable()
    hosts = []
    for n in range(3):
        hs = HostState(f"h{n}", f"h{n}")
        hs._update_from_row(_row(T0, uuid=f"node-{n}", host=f"h{n}", hypervisor_hostname=f"h{n}"))
        table.add(hs)
        hosts.append(hs)
    table.numeric("free_ram", lambda h: h.free_ram_mb)
    table.numeric("vcpus_used", lambda h: h.vcpus_used)
    _advance(1)
    hosts[1].consume_from_request(_plain(), "i-1")
    hosts[1].consume_from_request(_plain(), "i-2")
    assert_table_mirrors(table, hosts)
    hosts[1].release_consumption("i-1", "deleted")
    assert_table_mirrors(table, hosts)
    hosts[1].expire_consumption(0.5, _advance(1))
    assert_table_mirrors(table, hosts)
    assert hosts[1].free_ram_mb == 60000


def test_releases_are_counted_by_reason():
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    metrics.enable(registry=registry)
    try:
        hs = HostState("h", "h")
        hs.update_from_row(_row(T0))
        _advance(1)
        for key in ("i-1", "i-2", "i-3"):
            hs.consume_from_request(_plain(), key)
        hs.release_consumption("i-1", "deleted")
        _advance(1)
        hs.update_from_row(_row(timeutils.utcnow()))

        def count(reason: str) -> float | None:
            return registry.get_sample_value(
                "novasched_consumption_released_total", {"reason": reason}
            )

        assert (count("deleted"), count("report")) == (1.0, 2.0)
    finally:
        metrics.disable()


# -- random lifecycles ------------------------------------------------------------------------
MAX_AGE = 120.0


@dataclass
class Lifecycle:
    """One random sequence of what happens to a host, and what nova holds at each step: the
    last report applied and the consumptions still pending (by key, in order)."""

    seed: int
    ops: list[tuple[Any, ...]] = field(default_factory=list)
    kinds: dict[str, str] = field(default_factory=dict)


def lifecycle(seed: int, steps: int = 25) -> Lifecycle:
    """Random consume / report (newer, older, the same again, written between two
    consumptions) / delete before the report / rollback / sync / expiry / an allocation
    Placement loses with no report and no cast (``unheld``) / a request that reads
    Placement's answer and places nothing here (``request``) / another consumer's allocation
    on the host made or deleted (``foreign``). Times are seconds after T0;
    ``("report", at, free_ram_mb)`` writes a row at ``at``."""
    rng = random.Random(seed)
    life = Lifecycle(seed)
    now = 0.0
    last_report = 0.0
    keys: list[str] = []
    lost = False  # a claim lost and no request since: no foreign claim then (see below)
    for _ in range(steps):
        now += rng.choice((0.2, 1.0, 5.0, 30.0, 90.0))
        op = rng.choices(
            (
                "consume",
                "report",
                "old",
                "same",
                "delete",
                "rollback",
                "sync",
                "expire",
                "unheld",
                "request",
                "foreign",
            ),
            weights=(8, 3, 1, 1, 2, 1, 1, 1, 2, 2, 1),
        )[0]
        if op == "unheld" and keys:
            life.ops.append(("unheld", now, rng.choice(keys)))
            lost = True
            continue
        if op == "foreign":
            made = not lost and rng.random() < 0.5
            life.ops.append(("foreign", now, rng.randrange(256, 4096, 256) * (1 if made else -1)))
            if made:
                # seen by a request before a claim of ours is lost: a claim made by another
                # writer between two answers can hide a loss as large (held_claims.py says
                # so), and that consumption then waits for the report or the expiry
                life.ops.append(("request", now))
            continue
        if op in ("consume", "request"):
            lost = False
        if op == "consume":
            key = f"i-{len(life.kinds)}"
            life.kinds[key] = rng.choice(list(SPECS))
            keys.append(key)
            life.ops.append(("consume", now, key))
        elif op == "report":
            at = rng.uniform(last_report, now)
            last_report = at
            life.ops.append(("report", at, rng.randrange(50000, 60000, 512)))
        elif op == "old":
            life.ops.append(("report", max(0.0, last_report - rng.uniform(1, 60)), 1))
        elif op == "same":
            life.ops.append(("same", now))
        elif op in ("delete", "rollback") and keys:
            life.ops.append((op, now, rng.choice(keys)))
        elif op == "sync":
            listed = [k for k in keys if rng.random() < 0.5]
            life.ops.append(("sync", now, listed, now - 30.0))
        elif op == "request":
            life.ops.append(("request", now))
        else:
            life.ops.append(("expire", now))
    return life


class _Placement:
    """What Placement holds on the host's provider: our claims and other consumers'."""

    def __init__(self) -> None:
        self.held: dict[str, int] = {}  # consumer -> MEMORY_MB
        self.foreign = 8192

    def summaries(self) -> dict[str, Any]:
        used = self.foreign + sum(self.held.values())
        return {
            "node-1": {
                "resources": {"MEMORY_MB": {"capacity": 65536, "used": used}},
                "root_provider_uuid": "node-1",
            }
        }

    def get_allocations_for_consumer(self, consumer: str, request_id: str | None = None):
        if consumer not in self.held:
            return {"allocations": {}}
        return {"allocations": {"node-1": {"resources": {"MEMORY_MB": self.held[consumer]}}}}


def _at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def replay(life: Lifecycle) -> Iterator[tuple[HostState, tuple, list[str]]]:
    """Apply ``life`` to a HostState; after each step, the host, the usage nova's view has
    (the last report + exactly the pending consumptions) and the pending keys."""
    hs = HostState("h", "h")
    row = _row(T0)
    hs.update_from_row(row)
    live: dict[str, datetime.datetime] = {}
    placement = _Placement()
    held = HeldClaims(placement)

    def request() -> dict[str, Any]:
        # what the driver does with each answer of Placement: what it no longer holds is
        # not counted by this request (nova counts none of it)
        nonlocal live
        summaries = placement.summaries()
        held.observe(summaries, [hs], request_id=None)
        live = {k: t for k, t in live.items() if k in placement.held}
        return summaries

    for op in life.ops:
        when = CLOCK.set(_at(op[1]))
        kind = op[0]
        if kind == "consume":
            summaries = request()
            spec = SPECS[life.kinds[op[2]]]()
            placement.held[op[2]] = spec.flavor.memory_mb
            held.claimed(
                summaries,
                hs,
                {"allocations": {"node-1": {"resources": {"MEMORY_MB": spec.flavor.memory_mb}}}},
            )
            hs.consume_from_request(spec, op[2], max_age=MAX_AGE, claimed=True)
            live = {k: t for k, t in live.items() if t > when - datetime.timedelta(seconds=120)}
            live[op[2]] = when
        elif kind == "request":
            request()
        elif kind == "unheld":
            placement.held.pop(op[2], None)
        elif kind == "foreign":
            placement.foreign = max(0, placement.foreign + op[2])
        elif kind == "report":
            new = _row(when, free_ram_mb=op[2])
            hs.update_from_row(new)
            if when >= row.updated_at and not _ambiguous(when, live):
                row = new
                live = {k: t for k, t in live.items() if t > when}
        elif kind == "same":
            hs.update_from_row(row)
        elif kind in ("delete", "rollback"):
            # nova deletes the allocation, then casts (a rollback deletes its claim)
            placement.held.pop(op[2], None)
            hs.release_consumption(op[2], "deleted" if kind == "delete" else "rollback")
            live.pop(op[2], None)
        elif kind == "sync":
            cut = _at(op[3])
            hs.release_unlisted(op[2], cut)
            live = {k: t for k, t in live.items() if k in op[2] or t >= cut}
        else:
            hs.expire_consumption(MAX_AGE)
            live = {k: t for k, t in live.items() if t > when - datetime.timedelta(seconds=120)}
        yield hs, _expected(row, list(live), life.kinds), list(live)


def _ambiguous(stamp: datetime.datetime, live: dict[str, datetime.datetime]) -> bool:
    """A whole-second stamp with a consumption in its second: the report is not taken."""
    end = stamp + datetime.timedelta(seconds=1)
    return stamp.microsecond == 0 and any(stamp < t < end for t in live.values())


@pytest.mark.parametrize("seed", range(300))
def test_a_random_lifecycle_leaves_exactly_the_report_and_the_pending_consumptions(seed):
    for step, (hs, expected, live) in enumerate(replay(lifecycle(seed))):
        assert list(hs.consumptions()) == live, f"step {step}"
        assert _usage(hs) == expected, f"step {step}"


def test_a_caller_that_never_releases_keeps_a_bounded_record(monkeypatch):
    from scheduler.hosts import state

    monkeypatch.setattr(state, "_MAX_PENDING", 8)
    hs = HostState("h", "h")
    row = _row(T0)
    hs.update_from_row(row)
    kinds = {}
    for n in range(20):
        _advance(1)
        kinds[f"i-{n}"] = "pinned" if n % 3 else "plain"
        hs.consume_from_request(SPECS[kinds[f"i-{n}"]](), f"i-{n}")
    assert len(hs.consumptions()) <= 8
    assert _usage(hs) == _expected(row, list(kinds), kinds)
    # the folded ones stay counted until the next report; the others can still be released
    last = list(hs.consumptions())
    hs.release_consumption(last, "deleted")
    assert hs.num_instances == 3 + 20 - len(last)
    hs.update_from_row(_row(_advance(1)))
    assert (hs.num_instances, hs.consumptions()) == (3, {})


def test_consumption_keeps_the_ports_physnet_numa_affinity():
    # physnet0 is NUMA-affine to cell 1 only: nova's refit (the limits carry the request's
    # network metadata) pins the guest there, not on the first cell that fits
    from tests.unit.scheduler.resources.builders import smt_host

    topology = smt_host()
    for cell in topology["nova_object.data"]["cells"]:
        data = cell["nova_object.data"]
        physnets = ["physnet0"] if data["id"] == 1 else []
        data["network_metadata"]["nova_object.data"] = {"physnets": physnets, "tunneled": False}
    spec = _pinned()
    spec.network_metadata = {"physnets": ["physnet0"], "tunneled": False}
    hs = HostState("h", "h")
    hs.update_from_row(_row(T0, numa_topology=json.dumps(topology), pci_stats=None))

    hs.consume_from_request(spec, "inst-1")

    pinned = {
        c.id: c.pinned_cpus for c in numa.host_topology_from_primitive(hs.numa_topology).cells
    }
    assert not pinned[0] and len(pinned[1]) == 2
