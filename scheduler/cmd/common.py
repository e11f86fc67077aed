"""What novasched-manage's commands share: the one-line error, the parser that raises it, and
the API database's engine and errors, each naming the database without its password."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from typing import Any, NoReturn

from scheduler.cmd import LazyModule, config_check
from scheduler.conf import CONF

# imported when a command needs them, not for --help
sa = LazyModule("sqlalchemy")
db = LazyModule("db")

PROG = "novasched-manage"


def make_url(url: str) -> Any:
    from sqlalchemy.engine import make_url as make

    return make(url)


class CommandError(Exception):
    """A bad input or an unusable environment; its message is shown as the one-line error."""


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line and raises instead of exiting."""

    def error(self, message: str) -> NoReturn:
        raise CommandError(f"{message} (see '{self.prog} --help')")


def safe_url(url: str | None) -> str:
    if not url:
        return ""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy can parse: show it as given
        return url


def check_url(url: str, what: str) -> str:
    try:
        make_url(url)
    except Exception:
        raise CommandError(f"{what} is not a valid SQLAlchemy URL: {url!r}")
    return url


def api_engine(*, create: bool = False) -> sa.Engine:
    """The API database's engine; it must exist unless the command ``create``s it (SQLite
    would create an empty file where the URL points)."""
    url = CONF.api_database.connection
    if not url:
        raise CommandError(
            "no API database: set [api_database] connection in the file given with --config-file"
        )
    check_url(url, "[api_database] connection")
    if not create:
        config_check.require_database(url, "the API database ([api_database] connection)")
    return db.get_engine(url)


@contextlib.contextmanager
def database_errors(what: str, url: str | None = None) -> Iterator[None]:
    """A database error inside the block becomes a one-line error naming the database
    (``what``, and its URL without the password)."""
    try:
        yield
    except sa.exc.SQLAlchemyError as exc:
        where = f"{what} ({safe_url(url)})" if url else what
        raise CommandError(f"{where}: {database_error(exc)}") from exc


def database_error(exc: sa.exc.SQLAlchemyError) -> str:
    orig = str(getattr(exc, "orig", None) or exc).splitlines()[0]
    if any(s in orig for s in ("no such table", "doesn't exist", "does not exist")):
        orig += " (run 'novasched-manage db sync' first)"
    return orig
