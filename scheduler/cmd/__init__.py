"""The console entry points: ``novasched-scheduler`` and ``novasched-manage``."""

from __future__ import annotations

import warnings


def hide_eventlet_deprecation() -> None:
    """Keep eventlet's own deprecation notice out of the output of a process that runs on
    native threads.

    eventlet is installed for ``[DEFAULT] concurrency_backend = eventlet``. futurist and
    oslo.service import it whenever they are imported, whether the process uses it or not,
    and eventlet then prints a warning that says nothing about the operator's set-up. A
    process that patches eventlet in keeps the warning.
    """
    warnings.filterwarnings("ignore", message=r"\s*Eventlet is deprecated")
