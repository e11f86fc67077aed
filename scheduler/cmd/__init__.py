"""The console entry points: ``novasched-scheduler`` and ``novasched-manage``."""

from __future__ import annotations

import argparse
import warnings
from typing import Any


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
