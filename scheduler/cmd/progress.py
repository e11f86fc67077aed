"""Progress bars for the long ``novasched-manage`` commands, drawn on a terminal only.

A long loop takes an optional progress callback ``progress(stage, done, total)`` (see
``scheduler.demo.fleet.ProgressCallback``): ``stage`` names what is being done, ``done`` how
many of ``total`` items are finished so far. ``terminal_progress()`` gives such a callback
that draws one tqdm bar per stage when standard output is a terminal, and None otherwise, so
that output redirected to a file or a pipe gets no bar and no carriage returns.
"""

from __future__ import annotations

import shutil
import sys
from typing import Any, TextIO

from tqdm import tqdm


class TerminalProgress:
    """A progress callback that draws one tqdm bar per stage on ``stream``.

    A bar is cleared when its stage is done (``done >= total``) or another stage starts, so
    the command's own output follows on a clean line. Use it as a context manager, or call
    ``close()``, to clear a bar left unfinished by an error.
    """

    def __init__(self, stream: TextIO, *, unit: str = "item"):
        self._stream = stream
        self._unit = unit
        self._stage: str | None = None
        self._bar: Any = None

    def __call__(self, stage: str, done: int, total: int) -> None:
        if self._bar is None or stage != self._stage:
            self.close()
            self._stage = stage
            # a terminal that reports no size (a bare pty: 0 x 0) would get no bar at all:
            # tqdm hides bars below the last row
            size = shutil.get_terminal_size((80, 24))
            self._bar = tqdm(
                total=total,
                desc=stage,
                unit=self._unit,
                file=self._stream,
                leave=False,
                ncols=size.columns,
                nrows=size.lines,
                disable=False,  # the caller decided: this stream is a terminal
            )
        bar = self._bar
        if bar.total != total:
            bar.total = total
        if done > bar.n:
            bar.update(done - bar.n)
        if done >= total:
            self.close()

    def close(self) -> None:
        """Clear the bar in progress, if any."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
            self._stage = None

    def __enter__(self) -> TerminalProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def is_terminal(stream: Any) -> bool:
    """Whether ``stream`` is an open terminal (a closed or odd stream is not)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def terminal_progress(
    stream: TextIO | None = None, *, unit: str = "item"
) -> TerminalProgress | None:
    """A progress callback drawing on ``stream`` (default: ``sys.stdout``) when it is a
    terminal; None when it is not (a file, a pipe), so that nothing is drawn."""
    stream = sys.stdout if stream is None else stream
    return TerminalProgress(stream, unit=unit) if is_terminal(stream) else None
