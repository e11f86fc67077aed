"""Re-run recorded requests with another configuration, and say what would have changed.

``replay(driver, fleet, recorded)`` takes the recorded calls oldest first and runs each
through ``driver`` (a FilterScheduler built on the configuration to try, whose host source
and Placement are ``fleet``'s private copies: see ``scheduler/replay/fleet.py``). Each
replayed instance is claimed in the private view and consumed on the private hosts, so the
next request sees it, as it saw the recorded one. Nothing reaches Placement or the cells.

The recorded decisions are laid on a second copy of the same fleet, so that both sides
start alike: the report compares, per call, the hosts chosen (and whether it fitted at
all), and the two fleets afterwards: the hosts the instances went to, instances per host,
RAM and vCPU use per host as percentiles, and the hosts left without an instance.

A replay with the configuration the decisions were made with reproduces them, when the
fleet is the one they were made on and the decisions did not depend on chance
(``[filter_scheduler] host_subset_size`` 1, ``shuffle_best_same_weighed_hosts`` off).
"""

from __future__ import annotations

import datetime
import heapq
import itertools
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from scheduler.exceptions import NoValidHost
from scheduler.hosts.state import HostState
from scheduler.objects import RequestSpec
from scheduler.records import ERROR, NO_VALID_HOST, SCHEDULED, DecisionRecord
from scheduler.replay.fleet import NotReplayable, ReplayFleet, leave

LOG = logging.getLogger(__name__)

PERCENTILES = (50, 90, 100)


@dataclass(slots=True)
class Recorded:
    """A recorded call, with the request decoded from its record (None: ``why_not``)."""

    record: DecisionRecord
    spec: RequestSpec | None
    why_not: str = ""

    @classmethod
    def of(
        cls, record: DecisionRecord, decode: Callable[[dict[str, Any]], RequestSpec]
    ) -> Recorded:
        """The record with its request decoded by ``decode`` from the form the record keeps
        it in (the service's: nova's wire form); a record without one, or one that cannot
        be decoded, is kept with why."""
        spec = (record.document or {}).get("spec")
        if not isinstance(spec, dict):
            return cls(
                record,
                None,
                "the record does not hold the request (recorded before novasched kept whole "
                "requests, or by a driver that does not keep them)",
            )
        try:
            return cls(record, decode(spec))
        except Exception as exc:  # a record this version cannot read: skipped, said why
            return cls(record, None, f"the recorded request cannot be read: {exc}")


@dataclass(slots=True)
class Builds:
    """How long each recorded instance was still building while the service decided the
    requests after it: nova counts a building instance as an I/O operation on its host
    (``num_io_ops``, read by the IoOpsFilter and IoOpsWeigher), and the service counted the
    instances it placed until their compute reported them. A replay that counted every
    instance as built by the next request would see other hosts than the service saw.

    ``rows``: per recorded instance its cell has a row of, ``(created_at, launched_at)``
    (``db.get_instance_builds``); ``max_age``: ``[scheduler] consumption_max_age``.
    ``Builds()`` (nothing known) counts each instance built by the next request."""

    rows: Mapping[str, tuple[datetime.datetime | None, datetime.datetime | None]] = field(
        default_factory=dict
    )
    max_age: float | None = None
    known: bool = False  # rows were read: an instance without one was never reported

    def until(self, uuid: str, placed_at: datetime.datetime) -> datetime.datetime | None:
        """When the instance placed at ``placed_at`` stopped building (None: it was still
        building when the window ended)."""
        if not self.known:
            return placed_at
        row = self.rows.get(uuid)
        if row is not None:
            created, launched = row
            if launched is not None:
                return max(launched, placed_at)  # nova-compute finished its build then
            if created is not None and created > placed_at:
                # a row written after the decision: the compute reported it built then
                return created
            return None  # not finished: its compute counts it as building
        if self.max_age:
            # no compute reported it: the service counted it until consumption_max_age
            return placed_at + datetime.timedelta(seconds=self.max_age)
        return None


@dataclass(slots=True)
class Replayed:
    """One call, as recorded and as replayed. Hosts are ``host/node`` per instance (None:
    not placed)."""

    request_id: str | None
    created_at: str
    instance_uuids: list[str]
    recorded_outcome: str
    recorded: list[str | None]
    outcome: str = ""  # scheduled, no_valid_host, error; "" when not replayed
    replayed: list[str | None] = field(default_factory=list)
    reason: str = ""  # the replay's NoValidHost or error
    skipped: str = ""  # why it was not replayed
    # the same call replayed with the configuration in use (``against_baseline``); a what-if
    # is compared with it, not with the record ("" / None: no baseline)
    baseline_outcome: str = ""
    baseline: list[str | None] | None = None

    @property
    def changed(self) -> bool:
        """Whether the replay decided otherwise: than the baseline when there is one (what
        the configuration tried changed), else than the record."""
        if self.skipped:
            return False
        outcome, hosts = self.compared
        return self.outcome != outcome or self.replayed != hosts

    @property
    def compared(self) -> tuple[str, list[str | None]]:
        """The outcome and hosts the replay is compared with: the baseline's, else the
        record's."""
        if self.baseline is not None:
            return self.baseline_outcome, self.baseline
        return self.recorded_outcome, self.recorded

    @property
    def reproduced(self) -> bool:
        """Whether the replay decided as the record says."""
        return not self.skipped and (
            self.outcome == self.recorded_outcome and self.replayed == self.recorded
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "created_at": self.created_at,
            "instance_uuids": self.instance_uuids,
            "recorded": {"outcome": self.recorded_outcome, "hosts": self.recorded},
            "replayed": None
            if self.skipped
            else {"outcome": self.outcome, "hosts": self.replayed, "reason": self.reason or None},
            "baseline": None
            if self.baseline is None
            else {"outcome": self.baseline_outcome, "hosts": self.baseline},
            "changed": self.changed,
            "skipped": self.skipped or None,
        }


@dataclass(slots=True)
class Spread:
    """How the placed instances sit on a fleet."""

    placed: int = 0  # instances placed
    hosts_used: int = 0  # hosts that took at least one of them
    max_per_host: int = 0
    mean_per_host: float = 0.0
    empty_hosts: int = 0  # hosts without any instance afterwards
    hosts: int = 0
    ram_used_pct: dict[int, float] = field(default_factory=dict)  # percentile -> % used
    vcpu_used_pct: dict[int, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "placed": self.placed,
            "hosts_used": self.hosts_used,
            "max_per_host": self.max_per_host,
            "mean_per_host": round(self.mean_per_host, 2),
            "empty_hosts": self.empty_hosts,
            "hosts": self.hosts,
            "ram_used_pct": {f"p{p}": v for p, v in self.ram_used_pct.items()},
            "vcpu_used_pct": {f"p{p}": v for p, v in self.vcpu_used_pct.items()},
        }


@dataclass(slots=True)
class ReplayReport:
    calls: list[Replayed] = field(default_factory=list)
    before: Spread = field(default_factory=Spread)  # the recorded decisions
    after: Spread = field(default_factory=Spread)  # the replay's
    taken_out: Any = None  # fleet.TakenOut
    elapsed: float = 0.0
    notes: list[str] = field(default_factory=list)
    # the same records replayed with the configuration in use (``against_baseline``)
    baseline: ReplayReport | None = None

    @property
    def replayed(self) -> list[Replayed]:
        return [c for c in self.calls if not c.skipped]

    @property
    def changed(self) -> list[Replayed]:
        return [c for c in self.calls if c.changed]

    def counts(self) -> dict[str, int]:
        replayed = self.replayed
        base = self.baseline
        reproducing = (
            {}
            if base is None
            else {
                # of the baseline's calls, those decided as recorded: how well a replay
                # reproduces what the service did, which every what-if figure is set against
                "baseline_replayed": len(base.replayed),
                "baseline_reproduced": sum(1 for c in base.replayed if c.reproduced),
            }
        )
        return {
            **reproducing,
            "records": len(self.calls),
            "replayed": len(replayed),
            "skipped": len(self.calls) - len(replayed),
            "unchanged": sum(1 for c in replayed if not c.changed),
            "changed": len(self.changed),
            "now_fit": sum(
                1 for c in replayed if c.compared[0] != SCHEDULED and c.outcome == SCHEDULED
            ),
            "no_longer_fit": sum(
                1 for c in replayed if c.compared[0] == SCHEDULED and c.outcome != SCHEDULED
            ),
            "instances_moved": sum(
                1
                for c in replayed
                for old, new in zip(c.compared[1], c.replayed, strict=False)
                if old and new and old != new
            ),
        }

    def as_dict(self) -> dict[str, Any]:
        taken = self.taken_out
        return {
            "counts": self.counts(),
            "before": self.before.as_dict(),
            "after": self.after.as_dict(),
            "taken_out": None
            if taken is None
            else {
                "instances": taken.instances,
                "allocations": taken.allocations,
                "numa": taken.numa,
                "held_numa_pci": taken.held_numa_pci,
            },
            "notes": list(self.notes),
            "elapsed_ms": round(self.elapsed * 1000, 3),
            "calls": [c.as_dict() for c in self.calls],
        }


def replay(
    driver: Any, fleet: ReplayFleet, recorded: Sequence[Recorded], builds: Builds | None = None
) -> ReplayReport:
    """Replay ``recorded`` (any order: they run oldest first) on ``fleet`` through
    ``driver``; nothing is claimed outside the fleet. The recorded instances must already be
    taken out of the fleet (``ReplayFleet.take_out``). ``builds``: how long each instance
    was building, as the service saw it (default: the fleet's ``builds``, else built by
    the next request)."""
    started = time.perf_counter()
    builds = builds or fleet.builds or Builds()
    # (when its build finished, order, instance uuid, host copy) of the instances still
    # counted as building, on the replayed fleet and on the recorded decisions' copy
    building: list[tuple[datetime.datetime, int, str, HostState]] = []
    order = itertools.count()
    ordered = sorted(recorded, key=lambda r: (r.record.created_at, r.record.id or 0))
    report = ReplayReport(notes=_chance_notes(driver.conf))
    before = fleet.copy_hosts()
    by_node = _by_node(before.values())
    recorded_at: dict[str, str] = {}  # instance uuid -> its recorded host
    replayed_at: dict[str, str] = {}  # instance uuid -> its replayed host
    laid: dict[str, HostState] = {}  # instance uuid -> where the recorded decision put it
    for item in ordered:
        call = _call(item.record)
        report.calls.append(call)
        for uuid, where in zip(call.instance_uuids, call.recorded, strict=False):
            if where:
                recorded_at[uuid] = where.split("/", 1)[0]
        if item.record.outcome == ERROR:
            call.skipped = "the call failed: it decided nothing"
        elif item.spec is None:
            call.skipped = item.why_not or "the record holds no request"
        if call.skipped:
            continue
        spec = item.spec
        at = item.record.created_at
        # the builds that had finished when this request arrived
        while building and building[0][0] <= at:
            _, _, uuid, hs = heapq.heappop(building)
            hs.finish_builds([uuid])
        # a move or a reschedule places an instance again: once it has a new host, it
        # leaves the one it was on (which counted while the new one was chosen, as in nova)
        was_laid = {u: laid[u] for u in call.instance_uuids if u in laid}
        was_replayed = {u: fleet.placed_on(u) for u in call.instance_uuids}
        placed = _lay(spec, call, by_node, laid)
        _regroup(spec, recorded_at, replayed_at)
        _run(driver, spec, call)
        for uuid, where in zip(call.instance_uuids, call.replayed, strict=False):
            hs = fleet.placed_on(uuid) if where else None
            if hs is not None:
                placed.append((uuid, hs))
        for uuid, hs in placed:
            until = builds.until(uuid, at)
            if until is not None:
                heapq.heappush(building, (until, next(order), uuid, hs))
        for uuid, hs in was_laid.items():
            if laid[uuid] is not hs:
                leave(hs, uuid)
        for uuid, hs in was_replayed.items():
            if hs is not None and fleet.placed_on(uuid) is not hs:
                leave(hs, uuid)
        for uuid, where in zip(call.instance_uuids, call.replayed, strict=False):
            if where:
                replayed_at[uuid] = where.split("/", 1)[0]
    after = _by_node(fleet.hosts)
    # where each instance ended (a move's last placement)
    final = dict(_placed(report.replayed))
    placed_after = [(uuid, after[where]) for uuid, where in final.items() if where in after]
    report.before = spread(before.values(), list(laid.items()))
    report.after = spread(after.values(), placed_after)
    report.elapsed = time.perf_counter() - started
    return report


def against_baseline(report: ReplayReport, baseline: ReplayReport) -> None:
    """Set every call of ``report`` (a what-if) against the same call in ``baseline`` (the
    same records replayed with the configuration in use): a replay does not reproduce every
    recorded decision (a fleet that changed since, chance, what the cells no longer say), and
    a what-if's change is only what differs from what the replay would have decided
    anyway."""
    report.baseline = baseline
    base = {(c.request_id, c.created_at, tuple(c.instance_uuids)): c for c in baseline.calls}
    for call in report.calls:
        found = base.get((call.request_id, call.created_at, tuple(call.instance_uuids)))
        if found is not None and not found.skipped:
            call.baseline_outcome = found.outcome
            call.baseline = list(found.replayed)


def _call(rec: DecisionRecord) -> Replayed:
    selections = (rec.document or {}).get("selections") or []
    recorded: list[str | None] = []
    for index, _ in enumerate(rec.instance_uuids or [None]):
        first = selections[index][0] if index < len(selections) and selections[index] else None
        recorded.append(f"{first['host']}/{first['node']}" if first else None)
    if rec.outcome != SCHEDULED:
        recorded = [None] * len(recorded)
    return Replayed(
        request_id=rec.request_id,
        created_at=rec.created_at.isoformat(timespec="seconds") + "Z",
        instance_uuids=list(rec.instance_uuids),
        recorded_outcome=rec.outcome,
        recorded=recorded,
    )


def _lay(
    spec: RequestSpec, call: Replayed, by_node: dict[str, HostState], laid: dict[str, HostState]
) -> list[tuple[str, HostState]]:
    """The recorded decision, consumed on the copy the replay is compared with; the
    instances laid and their hosts (building, as the replay's own)."""
    placed = []
    for uuid, where in zip(call.instance_uuids, call.recorded, strict=False):
        hs = by_node.get(where or "")
        if hs is None:
            continue
        hs.consume_from_request(spec, uuid)
        if hs.instances is None:
            hs.instances = {}
        hs.instances.setdefault(uuid, None)
        laid[uuid] = hs
        placed.append((uuid, hs))
    return placed


def _regroup(spec: RequestSpec, recorded_at: dict[str, str], replayed_at: dict[str, str]) -> None:
    """A server group's hosts as the replay placed its members: nova's conductor gives the
    scheduler the hosts the members are on, which the replay has moved."""
    group = spec.instance_group
    if group is None or not group.members:
        return
    moved = [m for m in group.members if m in replayed_at]
    if not moved:
        return
    old = {recorded_at[m] for m in moved if m in recorded_at}
    hosts = [h for h in (group.hosts or []) if h not in old]
    for m in moved:
        if replayed_at[m] not in hosts:
            hosts.append(replayed_at[m])
    group.hosts = hosts


def _run(driver: Any, spec: RequestSpec, call: Replayed) -> None:
    context = SimpleNamespace(
        request_id=f"req-replay-{call.request_id or 'unknown'}",
        project_id=spec.project_id,
        user_id=spec.user_id,
    )
    uuids = call.instance_uuids or None
    try:
        selections = driver.select_destinations(context, spec, uuids, False)
    except NoValidHost as exc:
        if isinstance(exc.__cause__, NotReplayable):
            call.skipped = exc.__cause__.reason
            return
        call.outcome = NO_VALID_HOST
        call.reason = exc.reason
        call.replayed = [None] * len(call.recorded)
        return
    except Exception as exc:  # a request today's code refuses: reported, never the replay's end
        LOG.warning("Replaying request %s failed: %s", call.request_id, exc)
        call.outcome = ERROR
        call.reason = f"{type(exc).__name__}: {exc}"
        call.replayed = [None] * len(call.recorded)
        return
    call.outcome = SCHEDULED
    call.replayed = [f"{s[0].service_host}/{s[0].nodename}" if s else None for s in selections]


def _placed(calls: Iterable[Replayed]) -> Iterable[tuple[str, str]]:
    for call in calls:
        for uuid, where in zip(call.instance_uuids, call.replayed, strict=False):
            if where:
                yield uuid, where


def _by_node(hosts: Iterable[HostState]) -> dict[str, HostState]:
    return {f"{hs.host}/{hs.nodename}": hs for hs in hosts}


def spread(hosts: Iterable[HostState], placed: Sequence[tuple[str, HostState]]) -> Spread:
    """How ``placed`` (instance uuid, its host) sit on ``hosts``, which they were consumed
    on."""
    hosts = list(hosts)
    per_host: dict[int, int] = {}
    for _, hs in placed:
        per_host[id(hs)] = per_host.get(id(hs), 0) + 1
    out = Spread(placed=len(placed), hosts=len(hosts), hosts_used=len(per_host))
    if per_host:
        out.max_per_host = max(per_host.values())
        out.mean_per_host = len(placed) / len(per_host)
    out.empty_hosts = sum(1 for hs in hosts if not hs.num_instances)
    ram = [_used(hs.total_usable_ram_mb - hs.free_ram_mb, hs.total_usable_ram_mb) for hs in hosts]
    vcpu = [_used(hs.vcpus_used, hs.vcpus_total) for hs in hosts]
    out.ram_used_pct = percentiles(ram)
    out.vcpu_used_pct = percentiles(vcpu)
    return out


def _used(used: Any, total: Any) -> float:
    try:
        return 100.0 * float(used or 0) / float(total) if total else 0.0
    except (TypeError, ValueError):
        return 0.0


def percentiles(values: Sequence[float], points: Sequence[int] = PERCENTILES) -> dict[int, float]:
    """Nearest-rank percentiles of ``values`` (rounded to 0.1)."""
    if not values:
        return {}
    ordered = sorted(values)
    out = {}
    for p in points:
        rank = max(1, -(-p * len(ordered) // 100))  # ceil(p/100 * n), at least the first
        out[p] = round(ordered[min(rank, len(ordered)) - 1], 1)
    return out


def _chance_notes(conf: Any) -> list[str]:
    fs = conf.filter_scheduler
    notes = []
    if fs.host_subset_size and fs.host_subset_size > 1:
        notes.append(
            f"[filter_scheduler] host_subset_size = {fs.host_subset_size}: each instance "
            "goes to one of the best hosts at random, so a replay differs by chance"
        )
    if getattr(fs, "shuffle_best_same_weighed_hosts", False):
        notes.append(
            "[filter_scheduler] shuffle_best_same_weighed_hosts is on: hosts of equal weight "
            "are taken in a random order, so a replay differs by chance"
        )
    return notes
