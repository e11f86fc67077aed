"""``novasched-manage replay``: what the recorded decisions would have been with another
configuration (``scheduler/replay``; docs/operations.md, "What-if replay").

    novasched-manage --config-file nova.conf replay [--what-if NEW.conf]
        [--since T] [--until T] [--limit N] [--show N] [--json]

``--what-if`` (also ``--config-file`` after ``replay``, its older name) is read after the
others, so that it overrides them: a whole copy of nova.conf, or only the options to try
(``[filter_scheduler] ram_weight_multiplier = -1.0``). The replay runs on today's fleet, read
once through the host manager (the cells) and the provider view's feed (Placement's
database, else its API), from which the recorded instances are taken out first; it claims
nothing and writes nothing.
Exit status: 0 replayed, 2 no record to replay, 1 an error.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from scheduler.cmd import (
    LazyModule,
    add_document_format,
    emit_document,
    positive_int,
    text_table,
)
from scheduler.cmd.config_check import UnreadableDatabase, require_databases
from scheduler.cmd.decisions import NOT_FOUND, Failed, add_window, run_with_store, window
from scheduler.conf import CONF
from scheduler.exceptions import ConfigurationError
from scheduler.records.record import SCHEDULED

if TYPE_CHECKING:
    from scheduler.records.store import DecisionStore

# imported when the command runs, not for --help
sa = LazyModule("sqlalchemy")
_store = LazyModule("scheduler.records.store")

# recorded calls read at most (the newest ones)
LIMIT = 10_000
# changed decisions listed in words
SHOW = 20


def add_parsers(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "replay",
        help="re-run recorded requests on today's fleet with another configuration, claiming "
        "nothing, and say which decisions would change",
    )
    p.add_argument(
        "--what-if",
        "--config-file",
        dest="replay_config_files",
        action="append",
        metavar="NEW.conf",
        help="the configuration to try: read after nova.conf, so its options win "
        "(repeatable; --config-file is its older name). Without it the records are replayed "
        "with nova.conf alone: how well a replay reproduces them",
    )
    p.add_argument(
        "--from-records",
        action="store_true",
        default=True,
        help="replay the decision records ([decision_records]) of the scheduler (the only "
        "source, and the default)",
    )
    add_window(p, "recorded", LIMIT)
    p.add_argument(
        "--show",
        type=positive_int,
        default=SHOW,
        metavar="N",
        help=f"list at most N changed decisions (default {SHOW})",
    )
    add_document_format(p)
    p.set_defaults(func=cmd_replay)


def cmd_replay(args: argparse.Namespace) -> int:
    """Replay the recorded decisions with the configuration given."""
    return run_with_store(args, lambda store: _replay(store, args))


def _replay(store: DecisionStore, args: argparse.Namespace) -> int:
    from scheduler.replay import Recorded, against_baseline

    records = window(store, args)
    if not records:
        raise Failed("no decision recorded to replay", NOT_FOUND)
    from scheduler.rpc.wire import request_spec_from_primitive

    recorded = [Recorded.of(rec, request_spec_from_primitive) for rec in records]
    # the store has been read: a database error from here on is another database's
    what_if = args.replay_config_files or []
    baseline = None
    if what_if:
        _loadable()  # the configuration tried, before any replay
        # first the configuration in use (nova.conf without the files to try): how well a
        # replay reproduces the recorded decisions, which the what-if is set against
        args.reparse(with_replay_files=False)
        try:
            baseline, _, _ = _replay_once(recorded)
        finally:
            args.reparse(with_replay_files=True)
    report, taken, unread = _replay_once(recorded)
    if baseline is not None:
        against_baseline(report, baseline)
    report.taken_out = taken
    for cell in unread:
        report.notes.append(f"cell {cell} could not be read: its hosts are not in the replay")
    if len(records) == args.limit:
        report.notes.append(
            f"only the newest {args.limit:,} records were replayed: there may be older ones "
            "(raise --limit or narrow --since)"
        )
    print(emit_document(args, report.as_dict(), lambda: render(report, show=args.show)))
    return 0


def _loadable() -> None:
    """The filters and weighers the configuration names can be loaded (else Failed)."""
    from scheduler.framework import Framework

    try:
        Framework.from_conf(CONF)
    except ConfigurationError as exc:  # (an unknown plugin is one too)
        raise Failed(f"the configuration to replay with is not usable: {exc}")


def _replay_once(recorded: list[Any]) -> tuple[Any, Any, list[str]]:
    """The records replayed on today's fleet, read afresh, with the configuration CONF holds
    now; what was taken out of the fleet; the cells that could not be read."""
    from scheduler.replay import replay

    try:
        with _fleet(recorded) as (fleet, taken, unread):
            driver = _driver(fleet)
            try:
                return replay(driver, fleet, recorded), taken, unread
            finally:
                driver.stop()
    except sa.exc.SQLAlchemyError as exc:
        raise Failed(
            f"cannot read today's fleet from the API and cell databases: {_store.first_line(exc)}"
        )


@contextmanager
def _fleet(recorded: list[Any]) -> Iterator[tuple[Any, Any, list[str]]]:
    """Today's fleet, read once, with the recorded instances taken out; what was taken; the
    cells that could not be read (their hosts are not in it)."""
    from placement_client.from_conf import client_from_conf, search_options, view_from_conf
    from placement_client.view import ApiFeed, ProviderView, ViewRefresher
    from scheduler.hosts.manager import HostManager
    from scheduler.replay import ReplayFleet

    api_url = CONF.api_database.connection
    try:
        # before anything opens them: a read must not create an SQLite file
        require_databases(CONF)
        placement = client_from_conf(CONF)
        refresher = view_from_conf(CONF, placement)
        manager = HostManager(CONF)
    except (ConfigurationError, UnreadableDatabase) as exc:
        raise Failed(str(exc))
    except sa.exc.SQLAlchemyError as exc:
        where = _store.safe_url(api_url)
        raise Failed(f"cannot read the API database ({where}): {_store.first_line(exc)}")
    if refresher is None:
        refresher = ViewRefresher(ProviderView(search=search_options(CONF)), ApiFeed(placement))
    try:
        # every host with its instances: the recorded ones are found on them
        manager.instance_details = True
        try:
            manager.warm_up()
            hosts = manager.get_host_states_by_uuids(None)
        except sa.exc.SQLAlchemyError as exc:
            raise Failed(f"cannot read the cells: {_store.first_line(exc)}")
        unread = [c["name"] or c["uuid"] for c in manager.status() if c["failing"]]
        if not refresher.load():
            raise Failed(
                f"cannot read Placement's resource providers through the {refresher.feed.name} "
                f"feed: {refresher.last_error}"
            )
        fleet = ReplayFleet(hosts, manager, refresher.view)
        specs, allocations = _recorded_instances(recorded, refresher.view, refresher.feed)
        taken = fleet.take_out(specs, allocations, _numa_topologies(manager, hosts, specs))
        # instances still building count as building, as the service saw them
        fleet.builds = _builds(manager, specs)
        yield fleet, taken, unread
    finally:
        refresher.stop()
        refresher.feed.close()
        manager.stop()


def _recorded_instances(recorded: list[Any], view: Any, feed: Any) -> tuple[dict, dict]:
    """Per recorded instance placed: the request that placed it, and its allocations as
    Placement holds them today, read through the view's feed (its database, or one ``GET
    /allocations`` per consumer), only for the consumers the view shows."""
    specs: dict[str, Any] = {}
    for item in recorded:
        if item.spec is None or item.record.outcome != SCHEDULED:
            continue
        for uuid in item.record.instance_uuids:
            specs[uuid] = item.spec
    consumers: set[str] = set()
    for rp in view.uuids():
        rec = view.record(rp)
        if rec is not None:
            consumers |= rec.consumers & specs.keys()
    try:
        allocations = feed.allocations_of(consumers)
    except Exception as exc:
        raise Failed(
            f"cannot read the recorded instances' allocations through the {feed.name} feed: "
            f"{_store.first_line(exc)}"
        )
    return specs, allocations


def _numa_topologies(manager: Any, hosts: list[Any], specs: dict[str, Any]) -> dict[str, str]:
    """The NUMA topologies nova-compute stored for the recorded instances listed on a NUMA
    host (``instance_extra``), read from their cells."""
    import db

    wanted: dict[str, list[str]] = {}
    for hs in hosts:
        if hs.numa_topology is None:
            continue
        here = [u for u in (hs.instances or ()) if u in specs]
        if here:
            wanted.setdefault(hs.cell_uuid, []).extend(here)
    out: dict[str, str] = {}
    for cell_uuid, uuids in wanted.items():
        cell = manager.enabled_cells.get(cell_uuid)
        if cell is None:
            continue
        try:
            out.update(
                db.get_instance_numa_topologies(db.get_engine(cell.database_connection), uuids)
            )
        except sa.exc.SQLAlchemyError as exc:
            raise Failed(f"cannot read the instances of cell {cell.name}: {_store.first_line(exc)}")
    return out


def _builds(manager: Any, specs: dict[str, Any]) -> Any:
    """How long each recorded instance was building (``scheduler.replay.Builds``): its row's
    ``created_at`` and ``launched_at`` in whichever cell has it."""
    import db
    from scheduler.replay import Builds

    rows: dict[str, Any] = {}
    for cell in manager.enabled_cells.values():
        try:
            engine = db.get_engine(cell.database_connection)
            rows.update(db.get_instance_builds(engine, list(specs)))
        except sa.exc.SQLAlchemyError as exc:
            raise Failed(f"cannot read the instances of cell {cell.name}: {_store.first_line(exc)}")
    return Builds(rows=rows, max_age=CONF.scheduler.consumption_max_age or None, known=True)


def _driver(fleet: Any) -> Any:
    from scheduler.drivers.filter_scheduler import FilterScheduler

    try:
        return FilterScheduler(placement=fleet.placement, host_manager=fleet, view=False, conf=CONF)
    except ConfigurationError as exc:
        raise Failed(f"the configuration to replay with is not usable: {exc}")


# ------------------------------------------------------------------------------ words


def render(report: Any, show: int = SHOW) -> str:
    """The replay report in words: the counts, the two fleets side by side, the changed
    decisions (the first ``show``), the skipped ones and the notes."""
    counts = report.counts()
    lines = []
    if report.baseline is not None:
        done, same = counts["baseline_replayed"], counts["baseline_reproduced"]
        rate = f" ({100.0 * same / done:.0f} %)" if done else ""
        lines += [
            f"With the configuration in use, the replay reproduces {same} of {done} recorded "
            f"decision(s){rate}; the configuration tried is compared with that replay, so "
            f"that the {done - same} it does not reproduce are not counted as its changes",
        ]
    against = "the configuration in use" if report.baseline is not None else "the record"
    lines += [
        f"Replayed {counts['replayed']} of {counts['records']} recorded decision(s) in "
        f"{report.elapsed:.1f} s ({counts['skipped']} skipped): {counts['unchanged']} "
        f"unchanged, {counts['changed']} changed (against {against})",
        f"  instances on another host: {counts['instances_moved']}; fit now but did not: "
        f"{counts['now_fit']}; fitted but would not: {counts['no_longer_fit']}",
    ]
    taken = report.taken_out
    if taken is not None:
        lines.append(
            f"  taken out of today's fleet first: {taken.instances} recorded instance(s) from "
            f"their hosts, {taken.allocations} from Placement"
        )
        if taken.numa:
            lines.append(
                f"  {taken.numa} of them given back their NUMA cells, pinned CPUs and pages"
            )
        if taken.held_numa_pci:
            lines.append(
                f"  {taken.held_numa_pci} of them hold PCI devices (or NUMA cells not found in "
                "the cell) their hosts keep counting"
            )
    before, after = report.before, report.after
    lines += ["", _spread_table(before, after)]
    changed = report.changed
    if changed:
        lines += ["", f"Changed decisions ({min(show, len(changed))} of {len(changed)}):"]
        for call in changed[:show]:
            lines += _changed_lines(call)
    skipped = [c for c in report.calls if c.skipped]
    if skipped:
        reasons: dict[str, int] = {}
        for call in skipped:
            reasons[call.skipped] = reasons.get(call.skipped, 0) + 1
        lines += ["", "Skipped:"]
        lines += [f"  {n} x {why}" for why, n in sorted(reasons.items(), key=lambda i: -i[1])]
    if report.notes:
        lines += ["", "Notes:"] + [f"  {note}" for note in report.notes]
    return "\n".join(lines)


def _spread_table(before: Any, after: Any) -> str:
    def pct(values: dict[int, float]) -> str:
        return " / ".join(f"{values[p]:.1f}" for p in sorted(values)) if values else "-"

    rows = [
        ["instances placed", before.placed, after.placed],
        ["hosts used", before.hosts_used, after.hosts_used],
        [
            "instances per host used (mean, max)",
            f"{before.mean_per_host:.2f}, {before.max_per_host}",
            f"{after.mean_per_host:.2f}, {after.max_per_host}",
        ],
        [
            f"hosts without an instance (of {after.hosts})",
            before.empty_hosts,
            after.empty_hosts,
        ],
        ["RAM used % (p50 / p90 / max)", pct(before.ram_used_pct), pct(after.ram_used_pct)],
        ["vCPU used % (p50 / p90 / max)", pct(before.vcpu_used_pct), pct(after.vcpu_used_pct)],
    ]
    return text_table(["", "recorded", "replayed"], rows)


def _changed_lines(call: Any) -> list[str]:
    head = f"  {call.created_at} {call.request_id or '-'}"
    outcome, hosts = call.compared
    if call.outcome != outcome:
        after = call.outcome + (f" ({call.reason})" if call.reason else "")
        return [f"{head}: {outcome} -> {after}"]
    lines = [head + ":"]
    for uuid, old, new in zip(call.instance_uuids, hosts, call.replayed, strict=False):
        if old != new:
            lines.append(f"    {uuid}: {old or '-'} -> {new or '-'}")
    return lines
