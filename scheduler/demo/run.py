"""The embedded demo: the whole scheduling path in one process, on a fresh machine.

SQLite API and cell databases, a synthetic fleet loaded into them and into the real Placement
service (openstack-placement on an ephemeral 127.0.0.1 port), the scheduler service on
oslo.messaging's in-process ``fake://`` transport, and a conductor-side client that sends it a
stream of boots. Every decision and every NoValidHost reason is printed, then a summary that
checks the claims against Placement's usages.

With ``--state-dir DIR`` the demo's cloud stays in DIR for the operator's tools: its
databases, decision records and flavors, and a nova.conf every ``novasched-manage`` command
takes; the demo ends with the commands to try on it, and ``--state-dir DIR
--serve-placement`` brings its Placement back.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import shutil
import statistics
import sys
import tempfile
import time
import uuid as uuidlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LOG = logging.getLogger(__name__)


@dataclass(slots=True)
class Outcome:
    name: str
    request_id: str = ""
    placed: list[list[Any]] = field(default_factory=list)  # Selection lists
    error: str | None = None
    seconds: float = 0.0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="novasched-manage demo", description=__doc__)
    p.add_argument(
        "--hosts", type=int, default=240, help="compute nodes in the fleet (default 240)"
    )
    p.add_argument("--cells", type=int, default=2, help="cell databases (default 2)")
    p.add_argument(
        "--seed", type=int, default=7, help="the seed of the fleet and of the boots (default 7)"
    )
    p.add_argument(
        "--boots", type=int, default=40, help="random boots after the scenarios (default 40)"
    )
    p.add_argument(
        "--state-dir",
        metavar="DIR",
        help="keep the demo's cloud in DIR (a new or empty directory): its databases, decision "
        "records and flavors, and a nova.conf every novasched-manage command takes "
        "(default: a temporary directory, removed at the end)",
    )
    p.add_argument(
        "--serve-placement",
        action="store_true",
        help="do not run the demo: serve the Placement of the demo kept in --state-dir again, "
        "on the address its nova.conf names, until interrupted",
    )
    p.add_argument("--verbose", action="store_true", help="show the scheduler's own log")
    return p


def main(argv: Any = None) -> int:
    if isinstance(argv, argparse.Namespace):
        args = argv
        defaults = _parser().parse_args([])
        for key, value in vars(defaults).items():
            if not hasattr(args, key):
                setattr(args, key, value)
    else:
        args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    if not args.verbose:
        # the fleet's down/disabled hosts are expected here; keep the demo output readable
        logging.getLogger("filters").setLevel(logging.ERROR)
        # Placement's own "Over capacity ..." warnings are expected when claims race
        logging.getLogger("placement").setLevel(logging.ERROR)
    from scheduler.demo import state as kept

    try:
        if args.serve_placement:
            if not args.state_dir:
                raise kept.DemoStateError("--serve-placement needs the --state-dir of a demo")
            return kept.serve_placement(Path(args.state_dir).expanduser().resolve())
        if not args.state_dir:
            state = Path(tempfile.mkdtemp(prefix="novasched-"))
            try:
                status = _run(args, state)
            finally:
                shutil.rmtree(state, ignore_errors=True)
            print(kept.how_to_keep(_manage_command(), _changed_options(args)))
            return status
        # absolute: the cell mappings and nova.conf name the files by it
        state = Path(args.state_dir).expanduser().resolve()
        kept.check_unused(state)
        try:
            state.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise kept.DemoStateError(f"--state-dir {state}: {exc.strerror or exc}") from None
        return _run(args, state)
    except kept.DemoStateError as exc:
        print(f"novasched-manage demo: error: {exc}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace, state: Path) -> int:
    import db
    from placement_client.api import PlacementClient
    from scheduler.conf import CONF
    from scheduler.demo import flavors
    from scheduler.demo import fleet as fleet_mod
    from scheduler.demo import state as kept
    from scheduler.demo.embedded_placement import EmbeddedPlacement
    from scheduler.rpc import transport as rpc
    from scheduler.rpc.context import RequestContext
    from scheduler.rpc.rpcapi import SchedulerAPI
    from scheduler.rpc.service import SchedulerService

    t_setup = time.perf_counter()
    api_url = kept.sqlite_url(state / kept.API_DB)
    api = db.get_engine(api_url)
    db.create_schema(api, "api")
    db.ensure_cell0(api, kept.sqlite_url(kept.cell_db(state, 0)))
    # what nova-api holds: the flavors of the fleet's instances and of the demo's boots
    flavors.write_flavors(api)
    cell_engines: dict[str, Any] = {}
    for i in range(1, args.cells + 1):
        url = kept.sqlite_url(kept.cell_db(state, i))
        mapping = db.create_cell_mapping(api, name=f"cell{i}", database_connection=url)
        db.create_schema(url, "cell")
        cell_engines[mapping["uuid"]] = db.get_engine(url)
    print(f"Databases: API + {args.cells} cell(s) (SQLite) in {state}")

    placement_svc = EmbeddedPlacement(kept.sqlite_url(state / kept.PLACEMENT_DB), mode="thread")
    url = placement_svc.start()
    print(f"Placement 16 (openstack-placement) serving on {url}")
    placement = PlacementClient(url, token="admin")
    try:
        spec = fleet_mod.FleetSpec(
            hosts=args.hosts,
            cells=list(cell_engines),
            seed=args.seed,
            max_instances_per_host=1,
        )
        fleet = fleet_mod.build_fleet(spec)
        fleet_mod.load_fleet(fleet, api, cell_engines, placement)
        print(
            f"Fleet: {len(fleet.hosts)} compute nodes in {args.cells} cells, "
            f"{len(fleet.disabled_hosts)} disabled, {len(fleet.down_hosts)} down, "
            f"aggregates: {', '.join(a.name for a in fleet.aggregates)} "
            f"(setup {time.perf_counter() - t_setup:.1f} s)"
        )

        # the fleet's "up" services last reported at load time: report again now, as
        # nova-compute does every report_interval
        for engine in cell_engines.values():
            db.touch_services(engine)
        # the demo's service_down_time is a year (its cloud is used after it ends): its down
        # hosts last reported longer ago than that
        _age_heartbeats(cell_engines, fleet.down_hosts, kept.SERVICE_DOWN_TIME)

        # what the demo runs with, written to nova.conf for the commands run on its cloud
        kept.configure(CONF, state, url)
        kept.write_nova_conf(state, CONF)
        kept.write_try_conf(state)
        kept.write_placement_conf(state, placement_svc.conflict_retries)
        # oslo.messaging's in-process driver: the real RPC stack and wire encoding, no broker
        transport = rpc.get_transport(CONF, url="fake:/")
        service = SchedulerService(CONF, transport=transport)
        service.start()
        client = SchedulerAPI(transport)
        try:
            outcomes = _scenarios(client, RequestContext, fleet, args)
        finally:
            service.stop()
        status = _summary(outcomes, placement, fleet)
    finally:
        placement_svc.stop()
        db.dispose_engines()
    if args.state_dir:
        # a multi-create's record shows the filters, the weighers and the alternates
        shown = next((o for o in outcomes if len(o.placed) > 1), outcomes[0])
        print(kept.next_steps(state, _manage_command(), shown.request_id))
    return status


def _age_heartbeats(cell_engines: dict[str, Any], hosts: set[str], seconds: int) -> None:
    """Move the last heartbeats of ``hosts``' nova-compute services ``seconds`` back."""
    import datetime

    import sqlalchemy as sa

    from db import models

    t = models.services
    back = datetime.timedelta(seconds=seconds)
    for engine in cell_engines.values():
        with engine.begin() as conn:
            rows = conn.execute(
                sa.select(t.c.id, t.c.last_seen_up, t.c.updated_at).where(
                    t.c.host.in_(sorted(hosts)), t.c.binary == "nova-compute"
                )
            ).all()
            for row in rows:
                conn.execute(
                    t.update()
                    .where(t.c.id == row.id)
                    .values(
                        last_seen_up=row.last_seen_up and row.last_seen_up - back,
                        updated_at=row.updated_at and row.updated_at - back,
                    )
                )


def _manage_command() -> str:
    """How to run novasched-manage from here: its name when the shell finds this one, else
    the path it was started by (``make demo``: .venv/bin/novasched-manage)."""
    invoked = sys.argv[0] if sys.argv else ""
    if Path(invoked).name != "novasched-manage":
        return "novasched-manage"
    found = shutil.which("novasched-manage")
    if found and Path(found).resolve() == Path(invoked).resolve():
        return "novasched-manage"
    return shlex.quote(invoked)


def _changed_options(args: argparse.Namespace) -> list[str]:
    """The demo's options that ``args`` sets to other than their defaults, as typed."""
    defaults = _parser().parse_args([])
    out: list[str] = []
    for name in ("hosts", "cells", "seed", "boots"):
        value = getattr(args, name)
        if value != getattr(defaults, name):
            out += [f"--{name}", str(value)]
    return out


def _boot(client, ctx_cls, name: str, flavor, count: int = 1, **spec_fields) -> Outcome:
    from scheduler.exceptions import NoValidHost
    from scheduler.objects import RequestSpec

    ctx = ctx_cls(
        user_id="75736572-0000-4000-8000-000000000001",
        project_id="6f70656e-7374-6163-6b00-70726f6a6563",
        request_id=f"req-{uuidlib.uuid4()}",
    )
    uuids = [str(uuidlib.uuid4()) for _ in range(count)]
    spec = RequestSpec(
        flavor=flavor,
        num_instances=count,
        project_id=ctx.project_id,
        user_id=ctx.user_id,
        instance_uuid=uuids[0],
        **spec_fields,
    )
    out = Outcome(name=name, request_id=ctx.request_id)
    t0 = time.perf_counter()
    try:
        out.placed = client.select_destinations(
            ctx, spec, uuids, return_objects=True, return_alternates=True
        )
    except NoValidHost as exc:
        out.error = str(exc)
    except Exception as exc:  # the demo reports every failure and goes on
        out.error = f"{type(exc).__name__}: {exc}"
    out.seconds = time.perf_counter() - t0
    return out


def _print(out: Outcome) -> None:
    print(f"\n* {out.name}  ({out.seconds * 1000:.0f} ms)")
    if out.error:
        print(f"  NoValidHost -> {out.error}")
        return
    for i, selections in enumerate(out.placed):
        chosen, alts = selections[0], selections[1:]
        alt_txt = ", ".join(a.service_host for a in alts) or "none"
        print(
            f"  instance {i + 1}: {chosen.service_host} "
            f"(az {chosen.availability_zone}, cell {chosen.cell_uuid[:8]})  alternates: {alt_txt}"
        )


def _scenarios(client, ctx_cls, fleet, args) -> list[Outcome]:
    import random

    from scheduler.demo.flavors import flavor
    from scheduler.objects import ImageMeta, InstanceGroup

    small = flavor("m1.small")
    medium = flavor("m1.medium")
    outcomes: list[Outcome] = []

    def run(name, flavor, count=1, **fields):
        out = _boot(client, ctx_cls, name, flavor, count, **fields)
        _print(out)
        outcomes.append(out)
        return out

    print("\n== Scenarios ==")
    run("single boot, m1.small", small)
    run("multi-create of 3, m1.medium", medium, 3)
    group = InstanceGroup(uuid=str(uuidlib.uuid4()), name="web", policy="anti-affinity")
    run(
        "anti-affinity group of 4 (multi-create)",
        small,
        4,
        instance_group=group,
        scheduler_hints={"group": [group.uuid]},
    )
    group = InstanceGroup(uuid=str(uuidlib.uuid4()), name="db", policy="affinity")
    run(
        "affinity group of 3 (multi-create)",
        small,
        3,
        instance_group=group,
        scheduler_hints={"group": [group.uuid]},
    )
    az = fleet.spec.azs[1] if len(fleet.spec.azs) > 1 else None
    if az:
        run(f"boot into availability zone {az}", small, 2, availability_zone=az)
    arm = ImageMeta(name="ubuntu-arm64", properties={"hw_architecture": "aarch64"})
    run("aarch64 image (ImagePropertiesFilter)", small, image=arm)
    run(
        "SSD hosts only (trait:CUSTOM_SSD=required)",
        flavor("ssd.small"),
    )
    run("a flavor that cannot fit anywhere (4 TiB RAM)", flavor("huge"))
    ppc = ImageMeta(name="ppc-image", properties={"hw_architecture": "ppc64le"})
    run("a ppc64le image: no host supports it", small, image=ppc)
    group = InstanceGroup(uuid=str(uuidlib.uuid4()), name="tight", policy="affinity")
    run(
        "affinity group of 24 x m1.xlarge (768 GiB): no host takes them all, claims rolled back",
        flavor("m1.xlarge"),
        24,
        instance_group=group,
        scheduler_hints={"group": [group.uuid]},
    )

    print("\n== explain: a dry run asked of the running scheduler over RPC ==")
    from scheduler.explain import render_text

    ctx = ctx_cls(
        user_id="75736572-0000-4000-8000-000000000001",
        project_id="6f70656e-7374-6163-6b00-70726f6a6563",
        request_id=f"req-{uuidlib.uuid4()}",
    )
    from scheduler.objects import RequestSpec

    spec = RequestSpec(
        flavor=flavor("m1.small"),
        project_id=ctx.project_id,
        user_id=ctx.user_id,
        image=ImageMeta(name="ubuntu-arm64", properties={"hw_architecture": "aarch64"}),
        availability_zone=az,
    )
    doc = client.explain_destinations(ctx, spec)
    print(render_text(doc, limit=6))

    print(f"\n== A stream of {args.boots} random boots ==")
    rng = random.Random(args.seed)
    stream = [small, medium, flavor("m1.large")]
    for i in range(args.boots):
        chosen = rng.choice(stream)
        count = rng.choice([1, 1, 1, 2, 3])
        out = _boot(client, ctx_cls, f"boot {i + 1}: {count} x {chosen.name}", chosen, count)
        outcomes.append(out)
        status = (
            "NoValidHost" if out.error else ", ".join(sel[0].service_host for sel in out.placed)
        )
        print(f"  {out.name:<28} -> {status}  ({out.seconds * 1000:.0f} ms)")
    return outcomes


def _summary(outcomes: list[Outcome], placement, fleet) -> int:
    placed = sum(len(o.placed) for o in outcomes)
    failed = [o for o in outcomes if o.error]
    times = sorted(o.seconds * 1000 for o in outcomes)
    p50 = statistics.median(times)
    p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
    used_hosts = {sel[0].service_host for o in outcomes for sel in o.placed}
    bad = used_hosts & (fleet.disabled_hosts | fleet.down_hosts)

    # every placed instance must hold exactly one claim in Placement
    missing = 0
    for o in outcomes:
        for sel in o.placed:
            rp = sel[0].compute_node_uuid
            usage = placement.get_usages(rp)
            if not usage:
                missing += 1
    print("\n== Summary ==")
    print(f"requests: {len(outcomes)}, instances placed: {placed}, NoValidHost: {len(failed)}")
    print(f"claims made in Placement: {placed} (checked below against its allocations)")
    print(f"latency per request (ms): p50 {p50:.0f}, p99 {p99:.0f}, max {times[-1]:.0f}")
    print(f"distinct hosts used: {len(used_hosts)}; on disabled/down hosts: {len(bad)}")
    print(f"placed instances without a claim in Placement: {missing}")
    return 0 if not bad and not missing and placed > 0 else 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
