"""``novasched-manage explain`` and ``capacity``: the scheduler's own steps on one request, or
on one instance of each flavor, over a filter scheduler built for the command; nothing is
claimed or consumed.

    novasched-manage --config-file nova.conf explain
        --flavor NAME|NAME:VCPUS:RAM_MB:DISK_GB[:k=v,...]
        [--image-props k=v,...] [--hints k=v,...] [--az AZ] [--num-instances N]
        [--request FILE] [--all-hosts] [-f table|json|yaml]
    novasched-manage --config-file nova.conf capacity [--flavor NAME ...] [--az AZ]
        [--aggregate NAME] [--project-id ID] [--by-aggregate] [-f FORMAT] [-c COLUMN]
        [--plot FILE.png] [--allow-partial]

explain exits 2 when no host fits; capacity exits 3 after printing figures some cells are
missing from, unless ``--allow-partial``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import uuid as uuidlib
from collections.abc import Iterator
from typing import Any

from scheduler.cmd import (
    add_document_format,
    add_list_format,
    config_check,
    emit_document,
    positive_int,
)
from scheduler.cmd.common import PROG, CommandError, api_engine, database_errors
from scheduler.conf import CONF

# capacity's figures were printed, but some cells could not be read (no --allow-partial)
EXIT_PARTIAL = 3


class _NoPlacement:
    """The Placement client of ``explain --all-hosts``: never asked."""

    def __getattr__(self, name: str) -> Any:
        raise CommandError("Placement is not used with --all-hosts")


def _explain_spec(args: argparse.Namespace) -> Any:
    from scheduler import explain
    from scheduler.exceptions import InvalidRequest
    from scheduler.objects import RequestSpec

    if args.request is None and args.flavor is None:
        raise CommandError("give --flavor NAME:VCPUS:RAM_MB:DISK_GB[:key=val,...] or --request")
    try:
        if args.request is not None:
            try:
                with open(args.request, encoding="utf-8") as fh:
                    data = json.load(fh)
            except OSError as exc:
                raise CommandError(f"cannot read --request {args.request}: {exc.strerror}")
            except ValueError as exc:
                raise CommandError(f"--request {args.request} is not JSON: {exc}")
            spec = explain.spec_from_json(data)
        else:
            spec = RequestSpec(flavor=_explain_flavor(args.flavor))
        return explain.apply_overrides(
            spec,
            flavor=_explain_flavor(args.flavor) if args.flavor and args.request else None,
            image_props=explain.split_pairs(args.image_props) if args.image_props else None,
            hints=explain.split_pairs(args.hints, multi=True) if args.hints else None,
            az=args.az,
            num_instances=args.num_instances,
        )
    except explain.ExplainInputError as exc:
        raise CommandError(str(exc))
    except InvalidRequest as exc:  # from the nova primitive decoder
        raise CommandError(f"--request {args.request}: {exc}")


def _explain_flavor(text: str) -> Any:
    """``--flavor``: NAME:VCPUS:RAM_MB:DISK_GB[:key=val,...], or a flavor of the API database
    by name or id (``m1.small``), extra specs included."""
    from scheduler import capacity, explain
    from scheduler.exceptions import ConfigurationError

    if ":" in text:
        return explain.parse_flavor(text)
    api_engine()  # there, before the flavor is read from it
    try:
        with database_errors("the API database", CONF.api_database.connection):
            return capacity.load_flavors(CONF, [text])[0]
    except (ConfigurationError, capacity.UnknownFlavors) as exc:
        raise CommandError(str(exc))


def _explain_view(placement: Any) -> Any:
    """The provider view for a one-shot explain: read from Placement's database when the
    view is fed from it (a fraction of a second); through the API the load takes four GETs
    per provider, so the CLI asks Placement instead (False: no view)."""
    from placement_client.from_conf import view_from_conf

    opts = CONF.placement
    feed = opts.view_feed
    if feed == "auto":
        feed = "database" if opts.view_database_connection else "api"
    if feed != "database":
        return False
    refresher = view_from_conf(CONF, placement)
    refresher.load()
    return refresher


@contextlib.contextmanager
def _one_shot_driver(all_hosts: bool) -> Iterator[Any]:
    """The filter scheduler of a one-shot command (explain, capacity): the host manager,
    the Placement client from [placement] (none with ``all_hosts``) and the provider view
    when it can be loaded quickly; stopped on the way out."""
    from scheduler.drivers.filter_scheduler import FilterScheduler
    from scheduler.exceptions import ConfigurationError
    from scheduler.hosts.manager import HostManager

    view: Any = False
    # before anything opens them: a read must not create an SQLite file
    config_check.require_databases(CONF)
    try:
        with database_errors("the API database", CONF.api_database.connection):
            host_manager = HostManager(CONF)
    except ConfigurationError as exc:
        raise CommandError(str(exc))
    try:
        if all_hosts:
            placement: Any = _NoPlacement()
        else:
            from placement_client.from_conf import client_from_conf

            try:
                placement = client_from_conf(CONF)
            except ConfigurationError as exc:
                raise CommandError(f"{exc} (or use --all-hosts to leave Placement out)")
        try:
            view = _explain_view(placement) if not all_hosts else False
            driver = FilterScheduler(
                placement=placement, host_manager=host_manager, view=view, conf=CONF
            )
        except ConfigurationError as exc:
            raise CommandError(str(exc))
        yield driver
    finally:
        host_manager.stop()
        if view:
            view.stop()


def cmd_explain(args: argparse.Namespace) -> int:
    """A dry run of the scheduler for one request: nothing is claimed or consumed."""
    import types

    from scheduler import explain
    from scheduler.capacity import scope
    from scheduler.exceptions import InvalidRequest

    spec = _explain_spec(args)
    if args.project_id:
        spec.project_id = args.project_id
    with _one_shot_driver(args.all_hosts) as driver:
        _check_scope(driver, availability_zone=spec.availability_zone)
        context = types.SimpleNamespace(
            request_id=f"req-explain-{uuidlib.uuid4()}",
            project_id=spec.project_id,
            user_id=spec.user_id,
        )
        try:
            doc = explain.explain_request(driver, context, spec, all_hosts=args.all_hosts)
        except InvalidRequest as exc:
            raise CommandError(f"invalid request: {exc}")
        # the hosts of a cell that could not be read were not considered
        doc["missing_cells"] = scope.missing_cells(driver.host_manager)
    print(emit_document(args, doc, lambda: explain.render_text(doc, limit=args.show)))
    return 0 if doc["no_valid_host"] is None else 2


def cmd_capacity(args: argparse.Namespace) -> int:
    """How many more instances of each flavor fit, per AZ and aggregate, and the capacity
    stranded per resource class; nothing is claimed or consumed."""
    from scheduler import capacity
    from scheduler.capacity import render
    from scheduler.exceptions import ConfigurationError

    api_engine()  # there, before the flavors are read from it
    try:
        with database_errors("the API database", CONF.api_database.connection):
            flavors = capacity.load_flavors(CONF, args.flavor)
    except (ConfigurationError, capacity.UnknownFlavors) as exc:
        raise CommandError(str(exc))
    if not flavors:
        raise CommandError("no public, enabled flavor in the API database (use --flavor)")
    with _one_shot_driver(False) as driver:
        _check_scope(driver, availability_zone=args.az, aggregate=args.aggregate)
        calculator = capacity.CapacityCalculator(
            driver,
            availability_zone=args.az,
            aggregate=args.aggregate,
            project_id=args.project_id or CONF.capacity.project_id,
        )
        figures = calculator.flavors(flavors)
    if args.plot:
        try:
            render.plot(figures, args.plot)
        except render.PlotUnavailable as exc:
            raise CommandError(str(exc))
    headers, rows = render.table_rows(figures, by_aggregate=args.by_aggregate)
    try:
        print(
            emit_document(
                args,
                [f.as_dict() for f in figures],
                lambda: render.text(figures, by_aggregate=args.by_aggregate),
                headers,
                rows,
            )
        )
    except ValueError as exc:  # a -c column the figures have not
        raise CommandError(str(exc))
    missing = render.missing_cells(figures)
    if missing and not args.allow_partial:
        print(
            f"{PROG}: error: the figures are partial: cell(s) {', '.join(missing)} could not "
            "be read (--allow-partial accepts them)",
            file=sys.stderr,
        )
        return EXIT_PARTIAL
    return 0


def _check_scope(
    driver: Any, *, availability_zone: str | None = None, aggregate: str | None = None
) -> None:
    """Refuse an availability zone or an aggregate the cloud does not know."""
    from scheduler.capacity import scope

    try:
        scope.check_scope(driver, availability_zone=availability_zone, aggregate=aggregate)
    except scope.UnknownName as exc:
        raise CommandError(str(exc))


def add_parsers(sub: Any) -> None:
    """Add ``explain`` and ``capacity`` to novasched-manage's commands."""
    ex = sub.add_parser(
        "explain",
        help="dry-run the scheduler for a request: what each filter removed and why, the "
        "weighed order and the host it would choose (nothing is claimed); exit status 2 "
        "when no host fits",
    )
    ex.add_argument(
        "--flavor",
        metavar="NAME|NAME:VCPUS:RAM_MB:DISK_GB[:key=val,...]",
        help="a flavor of the API database by name or id, or one given whole, with extra "
        "specs after the fourth colon",
    )
    ex.add_argument("--image-props", metavar="k=v,...", help="image properties (hw_architecture)")
    ex.add_argument("--hints", metavar="k=v,...", help="scheduler hints (a key may repeat)")
    ex.add_argument("--az", metavar="AZ", help="availability zone")
    ex.add_argument(
        "--num-instances", type=positive_int, metavar="N", help="instances asked (default 1)"
    )
    ex.add_argument("--project-id", metavar="ID", help="the project asking")
    ex.add_argument(
        "--request",
        metavar="FILE",
        help="a RequestSpec: nova's object primitive or the JSON form of docs/explain.md "
        "(the other options are applied on top)",
    )
    ex.add_argument(
        "--all-hosts",
        action="store_true",
        help="do not ask Placement: consider every compute node of the cell databases",
    )
    add_document_format(ex, text_alias=True)
    ex.add_argument(
        "--show", type=positive_int, default=10, metavar="N", help="text: host names per list"
    )
    ex.set_defaults(func=cmd_explain)

    cap = sub.add_parser(
        "capacity",
        help="how many more instances of each flavor fit, per availability zone and "
        "aggregate, by the scheduler's own filters and Placement (nothing is claimed), and "
        "the capacity stranded per resource class",
    )
    cap.add_argument(
        "--flavor",
        action="append",
        metavar="NAME",
        help="a flavor by name or id (repeatable; default: every public, enabled flavor)",
    )
    cap.add_argument("--az", metavar="AZ", help="only this availability zone")
    cap.add_argument("--aggregate", metavar="NAME", help="only the hosts of this aggregate")
    cap.add_argument(
        "--project-id",
        metavar="ID",
        help="the project asking (default: [capacity] project_id; unset: one no "
        "tenant-isolated aggregate admits)",
    )
    cap.add_argument(
        "--by-aggregate", action="store_true", help="text: a column per aggregate, not per AZ"
    )
    add_list_format(cap)
    cap.add_argument(
        "--allow-partial",
        action="store_true",
        help="exit 0 even when some cells could not be read (the figures say which are "
        "missing; without this option the exit status is 3)",
    )
    cap.add_argument(
        "--plot",
        metavar="FILE.png",
        help="also draw the capacity per flavor and AZ into FILE.png (needs matplotlib: pip "
        "install 'novasched[plot]')",
    )
    cap.set_defaults(func=cmd_capacity)
