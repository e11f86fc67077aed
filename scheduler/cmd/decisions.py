"""``novasched-manage decision show|list``: read back the decisions the scheduler recorded
(``scheduler/records``; docs/operations.md, "Decision records").

    novasched-manage --config-file nova.conf decision show <instance uuid | request id>
        [--host H] [--json]
    novasched-manage --config-file nova.conf decision list [--host H] [--outcome O]
        [--project P] [--flavor F] [--since T] [--until T] [--limit N] [--json]

The store is the scheduler's: ``[decision_records] connection``, else
``novasched-decisions.sqlite`` in ``[DEFAULT] state_path``, read whether or not recording is
enabled now. The commands never create it: a missing file or missing tables is an error
that says so. ``T`` is ISO 8601 (``2026-11-26T10:00``, UTC unless it carries an offset) or
a time ago (``90s``, ``30m``, ``2h``, ``7d``, ``1w``). ``show`` prints every decision that
names the instance (a reschedule adds one) or the request (upper-case uuids are found too),
newest first, with the driver's document in words: of the weighed hosts, the margin between
the first two and what made it, and only the weighers that differ between them. ``show
--host H`` says instead why H was or was not chosen (``scheduler/records/why_not.py``).
``list`` prints one line per decision, newest first. ``--json`` prints the records as JSON
for scripts. Exit status: 0 found, 2 nothing found, 1 an error.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from scheduler.cmd import (
    LazyModule,
    add_document_format,
    add_list_format,
    emit_document,
    emit_list,
    list_format,
    positive_int,
    text_table,
)
from scheduler.cmd.common import PROG
from scheduler.conf import CONF
from scheduler.records import words
from scheduler.records.record import OUTCOMES, DecisionRecord, utcnow
from scheduler.records.why_not import HostAnswer, why_not

if TYPE_CHECKING:
    from scheduler.records.store import DecisionStore

# imported when a command runs, not for --help
sa = LazyModule("sqlalchemy")
_recorder = LazyModule("scheduler.records.recorder")
_store = LazyModule("scheduler.records.store")

NOT_FOUND = 2
WIDTH = 100  # text output wraps at this column
LIST_LIMIT = 50

# the document's keys shown first, under these titles; any other key follows, as it is
SECTIONS = {
    "request": "Request",
    "placement": "Placement",
    "filters": "Filters",
    "weighed": "Weighed hosts",
    "per_host": "Per host",
    "selections": "Selections",
    "reason": "Reason",
}
# the document's keys left out of the words: the whole request as it arrived (nova's wire
# form, for novasched-manage replay; --json prints it)
HIDDEN = ("spec",)
# the values a document's request holds that list filters on, by dotted path
PROJECT_PATH = "request.project_id"
FLAVOR_PATH = "request.flavor.name"
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
    show.add_argument(
        "--host",
        metavar="HOST",
        help="why HOST was or was not chosen: narrowed out before the filters, removed by "
        "a filter (and why), or its rank and weight and how far behind the chosen host it "
        "was, by weigher; or that it was not a candidate",
    )
    add_document_format(show)
    show.set_defaults(func=cmd_show)

    lst = actions.add_parser("list", help="one line per decision, newest first")
    lst.add_argument("--host", metavar="HOST", help="only decisions that chose this host")
    lst.add_argument("--outcome", choices=OUTCOMES, help="only decisions that ended so")
    lst.add_argument(
        "--project",
        metavar="ID",
        help="only the requests of this project. Read from each decision's document, which "
        "no index covers: the store reads the documents of the --since/--until window, "
        "newest first, until --limit match; narrow the window on a large store",
    )
    lst.add_argument(
        "--flavor",
        metavar="NAME",
        help="only the requests of this flavor (read as --project is)",
    )
    add_window(lst, "made", LIST_LIMIT)
    lst.add_argument(
        "--json", action="store_true", help="print the whole records as JSON (documents too)"
    )
    add_list_format(lst, json_flag=False)
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
    document = {
        path: value
        for path, value in (
            (PROJECT_PATH, getattr(args, "project", None)),
            (FLAVOR_PATH, getattr(args, "flavor", None)),
        )
        if value is not None
    }
    return store.list(
        host=getattr(args, "host", None),
        outcome=getattr(args, "outcome", None),
        since=args.since,
        until=args.until,
        limit=args.limit,
        document=document or None,
    )


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
    url = _recorder.store_url(CONF)
    try:
        try:
            store = _store.DecisionStore(url, create=False)
        except _store.StoreError as exc:
            raise Failed(
                f"cannot read the decision records at {_store.safe_url(url)}: {exc}. Check "
                f"{_recorder.store_option(CONF)}"
            )
        try:
            return command(store)
        finally:
            store.close()
    except Failed as exc:
        if exc.code == NOT_FOUND and list_format(args) == "json":
            print("[]")
        label = "" if exc.code == NOT_FOUND else "error: "
        print(f"{PROG}: {label}{exc}", file=sys.stderr)
        return exc.code
    except sa.exc.SQLAlchemyError as exc:
        print(
            f"{PROG}: error: cannot read the decision records at {_store.safe_url(url)}: "
            f"{_store.first_line(exc)}",
            file=sys.stderr,
        )
        return 1


def _show(store: DecisionStore, args: argparse.Namespace) -> int:
    records = store.find(args.key.strip())
    if not records:
        raise Failed(f"no decision recorded for instance or request {args.key}", NOT_FOUND)
    host = (args.host or "").strip()
    if host:
        answers = [(r, why_not(r, host)) for r in records]
        doc: list[dict[str, Any]] = [_answer_json(r, a) for r, a in answers]

        def text() -> str:
            return "\n\n".join(render_answer(r, a) for r, a in answers)

        print(emit_document(args, doc, text))
    else:
        doc = [r.as_dict() for r in records]
        print(emit_document(args, doc, lambda: "\n\n".join(render_record(r) for r in records)))
    return 0


def _list(store: DecisionStore, args: argparse.Namespace) -> int:
    records = window(store, args)
    if not records:
        raise Failed(f"no decision recorded{_described(args)}", NOT_FOUND)
    if args.json:
        print(json.dumps([r.as_dict() for r in records], indent=2))
        return 0
    if list_format(args) != "table" or args.column:
        rows = [
            [_when(r.created_at), r.request_id, r.outcome, list(r.instance_uuids), list(r.hosts)]
            for r in records
        ]
        try:
            print(emit_list(args, LIST_COLUMNS, rows))
        except ValueError as exc:
            raise Failed(str(exc))
        return 0
    print(render_list(records))
    more = "; there may be more: raise --limit" if len(records) == args.limit else ""
    print(f"{len(records)} decision(s){more}")
    return 0


def _described(args: argparse.Namespace) -> str:
    said: list[str] = []
    if args.outcome:
        said.append(f"with outcome {args.outcome}")
    if args.project:
        said.append(f"of project {args.project}")
    if args.flavor:
        said.append(f"of flavor {args.flavor}")
    if args.host:
        said.append(f"on host {args.host}")
    if args.since:
        said.append(f"since {_when(args.since)}")
    if args.until:
        said.append(f"until {_when(args.until)}")
    return (" " + " ".join(said)) if said else ""


# ------------------------------------------------------------------------------ text


# decision list's columns
LIST_COLUMNS = ["time (UTC)", "request id", "outcome", "instances", "hosts"]


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
    return text_table(LIST_COLUMNS, rows)


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
        if key == "per_host":  # a line on how much there is: show --host reads it
            lines += _wrapped(f"  {title}: {_per_host_summary(doc[key])}", 2)
            continue
        weighed = render_weighed(title, doc[key], rec.hosts, 2) if key == "weighed" else None
        lines += weighed if weighed is not None else render_value(title, doc[key], 2)
    return "\n".join(lines)


def _per_host_summary(per_host: Any) -> str:
    if not isinstance(per_host, dict):
        return "- (the filters never ran)"
    if "unrecorded" in per_host:
        return f"not kept ({words.fmt(per_host['unrecorded'])})"
    removed = sum(
        len(g.get("hosts") or ()) for g in per_host.get("removed") or () if isinstance(g, dict)
    )
    passed = len(per_host.get("passed") or ())
    text = (
        f"{words.fmt(per_host.get('hosts_in'))} hosts given to the filters: {removed} removed, "
        f"{passed} passed"
    )
    capped = per_host.get("capped")
    if isinstance(capped, dict):
        text += (
            f", {words.fmt(capped.get('left_out'))} more not named (the record names "
            f"{words.fmt(capped.get('limit'))} at most)"
        )
    return text + "; show --host HOST says why HOST was or was not chosen"


# ------------------------------------------------------------------------------ weighed


def render_weighed(label: str, weighed: Any, chosen: list[Any], indent: int) -> list[str] | None:
    """The weighed hosts, per instance: the margin between the first two hosts and the
    weighers that made most of it, the weighers whose share is the same for every host shown
    in one line, then each host with only the weighers whose share differs. ``chosen``: the
    host chosen for each instance. None when ``weighed`` is not the driver's shape (a list
    per instance of weighed hosts, or one such list)."""
    if not isinstance(weighed, list) or not weighed:
        return None
    if all(isinstance(h, dict) for h in weighed):
        instances, numbered = [weighed], False
    elif all(isinstance(i, list) and all(isinstance(h, dict) for h in i) for i in weighed):
        instances, numbered = weighed, True
    else:
        return None
    pad = " " * indent
    lines = [f"{pad}{label}:"]
    for number, hosts in enumerate(instances, 1):
        inner = indent + 2
        if numbered:
            lines.append(f"{pad}  #{number}:")
            inner += 2
        picked = chosen[number - 1] if number - 1 < len(chosen) else None
        lines += _weighed_instance(hosts, picked, inner)
    return lines


def _weighed_instance(hosts: list[dict[str, Any]], chosen: Any, indent: int) -> list[str]:
    pad = " " * indent
    if not hosts:
        return [f"{pad}-"]
    names = list(dict.fromkeys(n for h in hosts for n in words.weighers_of(h)))
    differ, same = [], []
    for name in names:
        keys = {_share_key(words.weighers_of(h).get(name)) for h in hosts}
        if len(hosts) > 1:
            (differ if len(keys) > 1 else same).append(name)
        else:  # one host: what counted for it, and what did not
            (differ if keys != {0.0} else same).append(name)
    lines: list[str] = []
    if len(hosts) > 1:
        lines += _margin_lines(hosts, differ, indent)
    first = hosts[0].get("host")
    if chosen is not None and first is not None and chosen != first:
        place = next((i for i, h in enumerate(hosts, 1) if h.get("host") == chosen), None)
        where = f"weighed #{place}" if place else f"not among the {len(hosts)} shown"
        lines += _wrapped(
            f"{pad}chosen: {chosen}, {where} (a random pick among the best "
            "[filter_scheduler] host_subset_size, or the claim on a better host was refused)",
            indent,
        )
    if same:
        label = "same for every host shown" if len(hosts) > 1 else "no share"
        lines += _wrapped(f"{pad}{label}: {', '.join(same)}", indent)
    for host in hosts:
        head = f"{pad}- {words.fmt(host.get('host'))}"
        node = host.get("node")
        if node is not None and node != host.get("host"):
            head += f" (node {words.fmt(node)})"
        lines.append(f"{head}: weight {words.fmt(host.get('weight'))}")
        parts = words.weighers_of(host)
        for name in differ:
            lines += _wrapped(f"{pad}    {name}: {_weigher_words(parts.get(name))}", indent + 4)
    return lines


def _share_key(part: Any) -> Any:
    """What a weigher's part is compared by: its share (0 for -0), else the whole part."""
    share = words.share(part)
    if share is not None:
        return share
    if isinstance(part, dict):
        return tuple(sorted((str(k), words.fmt(v)) for k, v in part.items()))
    return words.fmt(part)


def _weigher_words(part: Any) -> str:
    if not isinstance(part, dict):
        return words.fmt(part)
    if "error" in part:
        return f"error: {words.fmt(part['error'])}"
    rest = ", ".join(f"{k} {words.fmt(v)}" for k, v in part.items() if k != "share" and _scalar(v))
    if "share" not in part:
        return rest or "-"
    return f"share {words.fmt(part['share'])}" + (f" ({rest})" if rest else "")


def _margin_lines(hosts: list[dict[str, Any]], differ: list[str], indent: int) -> list[str]:
    """The first host's lead over the second, and the weighers that made most of it."""
    a, b = hosts[0], hosts[1]
    wa, wb = words.number(a.get("weight")), words.number(b.get("weight"))
    if wa is None or wb is None:
        return []
    pad = " " * indent
    first, second = words.fmt(a.get("host")), words.fmt(b.get("host"))
    margin = words.diff(wa, wb)
    if not margin:
        return [f"{pad}margin: none: {first} and {second} weigh the same"]
    text = f"{pad}margin: {first} over {second} by {words.fmt(margin)}"
    made = words.share_gaps(a, b, differ)
    if made:
        text += ": " + words.gap_words(made)
    return _wrapped(text, indent)


def render_answer(rec: DecisionRecord, answer: HostAnswer) -> str:
    """One decision's answer for a host: the decision in one line, then the answer."""
    chosen = f" on {', '.join(str(h) for h in rec.hosts)}" if rec.hosts else ""
    lines = [
        f"Decision {rec.id} at {_when(rec.created_at)} UTC: request {rec.request_id or '-'}, "
        f"{rec.outcome}{chosen}",
        f"  {answer.host}:",
    ]
    for line in answer.lines:
        lines += _wrapped(f"    {line}", 4)
    return "\n".join(lines)


def _answer_json(rec: DecisionRecord, answer: HostAnswer) -> dict[str, Any]:
    out = rec.as_dict()
    del out["document"]
    out.update(answer.as_dict())
    return out


def render_value(label: str, value: Any, indent: int) -> list[str]:
    """``label: value`` at ``indent``: a scalar or a short object on one line, a list of
    scalars joined, anything else one entry per line below the label."""
    pad = " " * indent
    if _scalar(value):
        return _wrapped(f"{pad}{label}: {words.fmt(value)}", indent)
    if not value:
        return [f"{pad}{label}: -"]
    if isinstance(value, dict):
        inline = _inline(value)
        if inline is not None and len(pad) + len(label) + 2 + len(inline) <= WIDTH:
            return [f"{pad}{label}: {inline}"]
        lines = [f"{pad}{label}:"]
        for key, item in value.items():
            if item is None or (not _scalar(item) and not item) or item == "":
                continue  # what the request or the answer did not have: nothing to read
            lines += render_value(str(key), item, indent + 2)
        return lines
    if isinstance(value, list | tuple):
        if all(_scalar(v) for v in value):
            return _wrapped(f"{pad}{label}: {', '.join(words.fmt(v) for v in value)}", indent)
        lines = [f"{pad}{label}:"]
        for number, item in enumerate(value, 1):
            if isinstance(item, list | tuple):  # a list per instance: numbered
                lines += render_value(f"#{number}", item, indent + 2)
            else:
                lines += _list_item(item, indent + 2)
        return lines
    return _wrapped(f"{pad}{label}: {words.fmt(value)}", indent)


def _list_item(item: Any, indent: int) -> list[str]:
    """``- title: key value, ...`` for an object (its nested values below), ``- value``
    otherwise."""
    pad = " " * indent
    if not isinstance(item, dict):
        return _wrapped(f"{pad}- {words.fmt(item) if _scalar(item) else '-'}", indent + 2)
    title_key = next((k for k in _TITLE_KEYS if item.get(k) is not None and _scalar(item[k])), None)
    scalars = [f"{k} {words.fmt(v)}" for k, v in item.items() if _scalar(v) and k != title_key]
    nested = [(k, v) for k, v in item.items() if not _scalar(v)]
    if not title_key and not scalars:  # only nested values: the first on the dash's line
        lines = [line for k, v in nested for line in render_value(str(k), v, indent + 2)]
        return [f"{pad}- {lines[0][indent + 2 :]}"] + lines[1:] if lines else [f"{pad}- -"]
    head = f"{pad}- {words.fmt(item[title_key])}" if title_key else f"{pad}-"
    if scalars:
        head += (": " if title_key else " ") + ", ".join(scalars)
    lines = _wrapped(head, indent + 4)
    for key, value in nested:
        lines += render_value(str(key), value, indent + 4)
    return lines


def _inline(value: dict[str, Any]) -> str | None:
    if all(_scalar(v) for v in value.values()):
        return ", ".join(f"{k} {words.fmt(v)}" for k, v in value.items())
    return None


def _wrapped(line: str, indent: int) -> list[str]:
    if len(line) <= WIDTH:
        return [line]
    return textwrap.wrap(
        line, WIDTH, subsequent_indent=" " * (indent + 2), break_on_hyphens=False
    ) or [line]


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _few(items: list[Any], shown: int) -> str:
    if not items:
        return "-"
    head = ", ".join(str(i) for i in items[:shown])
    return head if len(items) <= shown else f"{head} (+{len(items) - shown})"


def _when(when: datetime) -> str:
    return when.isoformat(sep=" ", timespec="milliseconds")
