"""``novasched-manage decision show|list``: read back the decisions the scheduler recorded
(``scheduler/records``; docs/operations.md, "Decision records").

    novasched-manage --config-file nova.conf decision show <instance uuid | request id> [--json]
    novasched-manage --config-file nova.conf decision list [--host H] [--since T] [--until T]
        [--limit N] [--json]

The store is the scheduler's: ``[decision_records] connection``, else
``novasched-decisions.sqlite`` in ``[DEFAULT] state_path``, read whether or not recording is
enabled now. The commands never create it: a missing file or missing tables is an error
that says so. ``T`` is ISO 8601 (``2026-11-26T10:00``, UTC unless it carries an offset) or
a time ago (``90s``, ``30m``, ``2h``, ``7d``, ``1w``). ``show`` prints every decision that
names the instance (a reschedule adds one) or the request, newest first, with the driver's
document in words; ``list`` one line per decision, newest first. ``--json`` prints the
records as JSON for scripts. Exit status: 0 found, 2 nothing found, 1 an error.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from scheduler.cmd import positive_int, text_table
from scheduler.conf import CONF
from scheduler.records import DecisionRecord, DecisionStore, StoreError
from scheduler.records.record import utcnow
from scheduler.records.recorder import store_option, store_url
from scheduler.records.store import first_line, safe_url

PROG = "novasched-manage"
NOT_FOUND = 2
WIDTH = 100  # text output wraps at this column
LIST_LIMIT = 50

# the document's keys shown first, under these titles; any other key follows, as it is
SECTIONS = {
    "request": "Request",
    "placement": "Placement",
    "filters": "Filters",
    "weighed": "Weighed hosts",
    "selections": "Selections",
    "reason": "Reason",
}
# the document's keys left out of the words: the whole request as it arrived (nova's wire
# form, for novasched-manage replay; --json prints it)
HIDDEN = ("spec",)
# the key that names an item of a list of objects (a filter, a weighed host)
_TITLE_KEYS = ("host", "name", "filter", "weigher", "instance_uuid", "uuid")
_AGO = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*(?:ago)?\s*$", re.IGNORECASE)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class Failed(Exception):
    """The command's one-line error and its exit status."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


# ------------------------------------------------------------------------------ parsing


def parse_time(text: str, now: datetime | None = None) -> datetime:
    """``text`` as naive UTC: ISO 8601 (no offset: UTC) or a time ago (``30m``, ``2h``)."""
    match = _AGO.match(text)
    if match:
        seconds = float(match.group(1)) * _UNITS[match.group(2).lower()]
        return (now or utcnow()) - timedelta(seconds=seconds)
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a time: {text!r} (ISO 8601 such as 2026-11-26T10:00, in UTC, or a time "
            "ago such as 30m, 2h, 7d)"
        )
    if when.tzinfo is not None:
        when = when.astimezone(UTC).replace(tzinfo=None)
    return when


def add_parsers(subparsers: Any) -> None:
    """Add ``decision show`` and ``decision list`` to novasched-manage's commands."""
    p = subparsers.add_parser(
        "decision",
        help="the recorded decisions of select_destinations: why an instance landed where "
        "it did (exit status 2 when none matches)",
    )
    actions = p.add_subparsers(dest="action", metavar="{show,list}", parser_class=type(p))
    actions.required = True

    show = actions.add_parser(
        "show",
        help="every decision that names an instance (a reschedule adds one) or a request id, "
        "newest first, with what the scheduler saw",
    )
    show.add_argument("key", metavar="INSTANCE_UUID|REQUEST_ID")
    show.add_argument("--json", action="store_true", help="print the records as JSON")
    show.set_defaults(func=cmd_show)

    lst = actions.add_parser("list", help="one line per decision, newest first")
    lst.add_argument("--host", metavar="HOST", help="only decisions that chose this host")
    add_window(lst, "made", LIST_LIMIT)
    lst.add_argument("--json", action="store_true", help="print the records as JSON")
    lst.set_defaults(func=cmd_list)


def add_window(parser: Any, verb: str, limit: int) -> None:
    """``--since``, ``--until`` and ``--limit`` (the newest N records) on ``parser``; ``verb``
    says what the times are of ("made", "recorded")."""
    parser.add_argument(
        "--since", type=parse_time, metavar="T", help=f"{verb} at or after T (ISO 8601 UTC, or 2h)"
    )
    parser.add_argument("--until", type=parse_time, metavar="T", help=f"{verb} at or before T")
    parser.add_argument(
        "--limit",
        type=positive_int,
        default=limit,
        metavar="N",
        help=f"at most the newest N decisions (default {limit:,})",
    )


def window(store: DecisionStore, args: argparse.Namespace) -> list[DecisionRecord]:
    """The records of ``args``' window (``add_window``), newest first, at most ``--limit``."""
    if args.since and args.until and args.since > args.until:
        raise Failed("--since is after --until")
    host = getattr(args, "host", None)
    return store.list(host=host, since=args.since, until=args.until, limit=args.limit)


# ------------------------------------------------------------------------------ commands


def cmd_show(args: argparse.Namespace) -> int:
    """Print the decisions of an instance or a request."""
    return run_with_store(args, lambda store: _show(store, args))


def cmd_list(args: argparse.Namespace) -> int:
    """Print one line per decision."""
    return run_with_store(args, lambda store: _list(store, args))


def run_with_store(args: argparse.Namespace, command: Callable[[DecisionStore], int]) -> int:
    """Run ``command`` on the scheduler's store (never created here); a ``Failed`` it
    raises is its one-line message and exit status."""
    url = store_url(CONF)
    try:
        try:
            store = DecisionStore(url, create=False)
        except StoreError as exc:
            raise Failed(
                f"cannot read the decision records at {safe_url(url)}: {exc}. Check "
                f"{store_option(CONF)}"
            )
        try:
            return command(store)
        finally:
            store.close()
    except Failed as exc:
        if exc.code == NOT_FOUND and args.json:
            print("[]")
        label = "" if exc.code == NOT_FOUND else "error: "
        print(f"{PROG}: {label}{exc}", file=sys.stderr)
        return exc.code
    except sa.exc.SQLAlchemyError as exc:
        print(
            f"{PROG}: error: cannot read the decision records at {safe_url(url)}: "
            f"{first_line(exc)}",
            file=sys.stderr,
        )
        return 1


def _show(store: DecisionStore, args: argparse.Namespace) -> int:
    records = store.find(args.key.strip())
    if not records:
        raise Failed(f"no decision recorded for instance or request {args.key}", NOT_FOUND)
    if args.json:
        print(json.dumps([r.as_dict() for r in records], indent=2))
    else:
        print("\n\n".join(render_record(r) for r in records))
    return 0


def _list(store: DecisionStore, args: argparse.Namespace) -> int:
    records = window(store, args)
    if not records:
        raise Failed(f"no decision recorded{_described(args)}", NOT_FOUND)
    if args.json:
        print(json.dumps([r.as_dict() for r in records], indent=2))
        return 0
    print(render_list(records))
    more = "; there may be more: raise --limit" if len(records) == args.limit else ""
    print(f"{len(records)} decision(s){more}")
    return 0


def _described(args: argparse.Namespace) -> str:
    words = []
    if args.host:
        words.append(f"on host {args.host}")
    if args.since:
        words.append(f"since {_when(args.since)}")
    if args.until:
        words.append(f"until {_when(args.until)}")
    return (" " + " ".join(words)) if words else ""


# ------------------------------------------------------------------------------ text


def render_list(records: list[DecisionRecord]) -> str:
    """A table: time, request id, outcome, instances, hosts; one row per decision."""
    rows = [
        [
            _when(r.created_at),
            r.request_id or "-",
            r.outcome,
            _few(r.instance_uuids, 1),
            _few(r.hosts, 3),
        ]
        for r in records
    ]
    return text_table(["time (UTC)", "request id", "outcome", "instances", "hosts"], rows)


def render_record(rec: DecisionRecord) -> str:
    """One decision in words: its fields, then the document, the known sections first."""
    lines = [
        f"Decision {rec.id} at {_when(rec.created_at)} UTC",
        f"  request id: {rec.request_id or '-'}",
        f"  outcome:    {rec.outcome}",
        f"  instances:  {', '.join(rec.instance_uuids) or '-'}",
        f"  hosts:      {', '.join(str(h) for h in rec.hosts) or '-'}",
    ]
    doc = rec.document
    keys = [k for k in SECTIONS if k in doc] + [
        k for k in doc if k not in SECTIONS and k not in HIDDEN
    ]
    for key in keys:
        title = SECTIONS.get(key) or str(key).replace("_", " ").capitalize()
        lines += render_value(title, doc[key], 2)
    return "\n".join(lines)


def render_value(label: str, value: Any, indent: int) -> list[str]:
    """``label: value`` at ``indent``: a scalar or a short object on one line, a list of
    scalars joined, anything else one entry per line below the label."""
    pad = " " * indent
    if _scalar(value):
        return _wrapped(f"{pad}{label}: {_fmt(value)}", indent)
    if not value:
        return [f"{pad}{label}: -"]
    if isinstance(value, dict):
        inline = _inline(value)
        if inline is not None and len(pad) + len(label) + 2 + len(inline) <= WIDTH:
            return [f"{pad}{label}: {inline}"]
        lines = [f"{pad}{label}:"]
        for key, item in value.items():
            lines += render_value(str(key), item, indent + 2)
        return lines
    if isinstance(value, list | tuple):
        if all(_scalar(v) for v in value):
            return _wrapped(f"{pad}{label}: {', '.join(_fmt(v) for v in value)}", indent)
        lines = [f"{pad}{label}:"]
        for number, item in enumerate(value, 1):
            if isinstance(item, list | tuple):  # a list per instance: numbered
                lines += render_value(f"#{number}", item, indent + 2)
            else:
                lines += _list_item(item, indent + 2)
        return lines
    return _wrapped(f"{pad}{label}: {_fmt(value)}", indent)


def _list_item(item: Any, indent: int) -> list[str]:
    """``- title: key value, ...`` for an object (its nested values below), ``- value``
    otherwise."""
    pad = " " * indent
    if not isinstance(item, dict):
        return _wrapped(f"{pad}- {_fmt(item) if _scalar(item) else '-'}", indent + 2)
    title_key = next((k for k in _TITLE_KEYS if item.get(k) is not None and _scalar(item[k])), None)
    scalars = [f"{k} {_fmt(v)}" for k, v in item.items() if _scalar(v) and k != title_key]
    nested = [(k, v) for k, v in item.items() if not _scalar(v)]
    if not title_key and not scalars:  # only nested values: the first on the dash's line
        lines = [line for k, v in nested for line in render_value(str(k), v, indent + 2)]
        return [f"{pad}- {lines[0][indent + 2 :]}"] + lines[1:] if lines else [f"{pad}- -"]
    head = f"{pad}- {_fmt(item[title_key])}" if title_key else f"{pad}-"
    if scalars:
        head += (": " if title_key else " ") + ", ".join(scalars)
    lines = _wrapped(head, indent + 4)
    for key, value in nested:
        lines += render_value(str(key), value, indent + 4)
    return lines


def _inline(value: dict[str, Any]) -> str | None:
    if all(_scalar(v) for v in value.values()):
        return ", ".join(f"{k} {_fmt(v)}" for k, v in value.items())
    return None


def _wrapped(line: str, indent: int) -> list[str]:
    if len(line) <= WIDTH:
        return [line]
    return textwrap.wrap(
        line, WIDTH, subsequent_indent=" " * (indent + 2), break_on_hyphens=False
    ) or [line]


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _few(items: list[Any], shown: int) -> str:
    if not items:
        return "-"
    head = ", ".join(str(i) for i in items[:shown])
    return head if len(items) <= shown else f"{head} (+{len(items) - shown})"


def _when(when: datetime) -> str:
    return when.isoformat(sep=" ", timespec="milliseconds")
