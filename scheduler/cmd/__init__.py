"""The console entry points: ``novasched-scheduler`` and ``novasched-manage``."""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Callable
from typing import Any


class LazyModule:
    """A module imported when first used: ``novasched-manage --help`` builds the parser of
    every command, and should not pay for SQLAlchemy, NumPy or the plugins' imports that
    only running a command needs (an ``except`` naming one of its classes imports it only
    when an exception reaches that clause)."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        import importlib

        return getattr(importlib.import_module(self._name), attr)


def hide_eventlet_deprecation() -> None:
    """Keep eventlet's own deprecation notice out of the output of a process that runs on
    native threads.

    eventlet is installed for ``[DEFAULT] concurrency_backend = eventlet``. futurist and
    oslo.service import it whenever they are imported, whether the process uses it or not,
    and eventlet then prints a warning that says nothing about the operator's set-up. A
    process that patches eventlet in keeps the warning.
    """
    warnings.filterwarnings("ignore", message=r"\s*Eventlet is deprecated")


def select_service_backend(eventlet: bool) -> None:
    """Tell oslo.service which backend this process runs on, before oslo.messaging is
    imported.

    oslo.messaging's server module imports oslo.service, which otherwise loads its
    default backend (eventlet) and logs "Loading backend: eventlet" in a process that
    then serves on native threads. An operator must be able to trust that line.
    """
    from oslo_service import backend
    from oslo_service.backend import exceptions

    wanted = backend.BackendType.EVENTLET if eventlet else backend.BackendType.THREADING
    try:
        backend.init_backend(wanted)
    except exceptions.BackendAlreadySelected:
        pass  # this process imported oslo.messaging's server before (a test, an embedding)


def text_table(headers: list[str], rows: list[list[Any]]) -> str:
    """A plain-text table: the headers, a rule, the rows; columns padded to their widest."""
    cells = [headers] + [["" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text}")
    return value


# the output formats of a listing, as openstack's commands name them (``-f``)
FORMATS = ("table", "json", "yaml", "csv", "value")


def add_list_format(parser: Any, *, json_flag: bool = True) -> None:
    """``-f/--format table|json|yaml|csv|value`` and ``-c/--column NAME`` (repeatable), as
    openstack's commands have them; ``json_flag``: ``--json`` too, as ``-f json``."""
    parser.add_argument(
        "-f",
        "--format",
        choices=FORMATS,
        default=None,
        help="output format (default table): json, yaml, csv, or value (the columns' values "
        "only, one row per line)",
    )
    parser.add_argument(
        "-c",
        "--column",
        action="append",
        metavar="COLUMN",
        help="show only this column (repeatable); the columns are the table's headers",
    )
    if json_flag:
        parser.add_argument("--json", action="store_true", help="the same as -f json")


# the output formats of a command that prints one document (explain, a record, a report):
# the table is the command's own text; "text" is the older name of "table"
DOCUMENT_FORMATS = ("table", "json", "yaml")


def add_document_format(parser: Any, *, json_flag: bool = True, text_alias: bool = False) -> None:
    """``-f/--format table|json|yaml`` for a command that prints one document rather than
    rows; ``json_flag``: ``--json`` too; ``text_alias``: ``text`` accepted as ``table``."""
    parser.add_argument(
        "-f",
        "--format",
        choices=DOCUMENT_FORMATS + (("text",) if text_alias else ()),
        default=None,
        help="output format: table (default, the text an operator reads), json or yaml (the "
        "whole document)" + ("; text is the same as table" if text_alias else ""),
    )
    if json_flag:
        parser.add_argument("--json", action="store_true", help="the same as -f json")


def list_format(args: Any) -> str:
    """The format a command asked for: ``-f``, else ``--json``, else a table."""
    fmt = getattr(args, "format", None) or ("json" if getattr(args, "json", False) else "table")
    return "table" if fmt == "text" else fmt


def emit_document(
    args: Any,
    document: Any,
    table: Callable[[], str],
    headers: list[str] | None = None,
    rows: list[list[Any]] | None = None,
) -> str:
    """What a command that prints a document prints, in the format ``args`` asks for: json
    or yaml, the whole ``document``; table, the command's own text (``table()``); csv and
    value, and a table cut to ``-c`` columns, the ``rows`` under ``headers`` (emit_list).
    Raises ValueError for a column that is not one."""
    fmt = list_format(args)
    if fmt == "json":
        import json

        return json.dumps(document, indent=2, default=str)
    if fmt == "yaml":
        import yaml

        return yaml.safe_dump(document, sort_keys=False, default_flow_style=False).rstrip("\n")
    cut = fmt != "table" or getattr(args, "column", None)
    if headers is not None and rows is not None and cut:
        return emit_list(args, headers, rows)
    return table()


def emit_list(args: Any, headers: list[str], rows: list[list[Any]]) -> str:
    """``rows`` under ``headers`` in the format ``args`` asks for, cut to its ``-c``
    columns. json and yaml give one object per row keyed by header, csv a header line then
    the rows, value the values alone. Raises ValueError for a column that is not one."""
    wanted = getattr(args, "column", None)
    if wanted:
        check_columns(args, headers)
        index = [headers.index(c) for c in wanted]
        headers = list(wanted)
        rows = [[row[i] for i in index] for row in rows]
    fmt = list_format(args)
    if fmt == "table":
        return text_table(headers, rows)
    if fmt == "value":
        return "\n".join(" ".join(_cell(v) for v in row) for row in rows)
    if fmt == "csv":
        import csv
        import io

        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(headers)
        writer.writerows([_cell(v) for v in row] for row in rows)
        return out.getvalue().rstrip("\n")
    objects = [dict(zip(headers, row, strict=True)) for row in rows]
    if fmt == "yaml":
        import yaml

        return yaml.safe_dump(objects, sort_keys=False, default_flow_style=False).rstrip("\n")
    import json

    return json.dumps(objects, indent=2, default=str)


def check_columns(args: Any, headers: list[str]) -> None:
    """Raise ValueError naming the ``-c`` columns of ``args`` that are not among
    ``headers`` (a command checks before it does the work)."""
    unknown = [c for c in getattr(args, "column", None) or () if c not in headers]
    if unknown:
        raise ValueError(
            f"no column {', '.join(repr(c) for c in unknown)}; the columns are {', '.join(headers)}"
        )


def _cell(value: Any) -> str:
    """A value as one field of csv or value output (a list's items joined by spaces)."""
    if value is None:
        return ""
    if isinstance(value, list | tuple):
        return " ".join(str(v) for v in value)
    return str(value)
