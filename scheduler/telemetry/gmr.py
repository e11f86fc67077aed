"""The Guru Meditation Report on SIGUSR2, as nova's services give it (oslo.reports).

``kill -USR2 <pid>`` prints the report of that process to its stderr (or, with
``[oslo_reports] log_dir``, writes ``novasched-scheduler-<pid>_gurumeditation_<time>``
there): package, every thread's stack, green threads, the configuration (secrets masked)
and a ``Scheduler`` section with the worker's state (requests in flight, hosts per cell,
the provider view). Sent to the supervisor of several workers, the signal reaches every
worker too. The process keeps serving.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable
from typing import Any

from oslo_config import cfg

LOG = logging.getLogger(__name__)

PROGRAM = "novasched-scheduler"

# what the Scheduler section shows: set by the service of this process
_status: Callable[[], dict[str, Any]] | None = None
_conf: cfg.ConfigOpts | None = None  # set by setup()


class _Version:
    """What oslo.reports prints in the report's Package section."""

    def vendor_string(self) -> str:
        return "novasched"

    def product_string(self) -> str:
        return PROGRAM

    def version_string_with_package(self) -> str:
        try:
            from importlib.metadata import version

            return version("novasched")
        except Exception:
            return "unknown"


def register_opts(conf: cfg.ConfigOpts) -> None:
    """``[oslo_reports] log_dir``, ``file_event_handler``, ``file_event_handler_interval``."""
    from oslo_reports import opts as gmr_opts

    gmr_opts.set_defaults(conf)


def set_status_source(source: Callable[[], dict[str, Any]] | None) -> None:
    global _status
    _status = source


def _scheduler_section() -> Any:
    from oslo_reports.models.base import ReportModel
    from oslo_reports.views.text.generic import KeyValueView

    data: dict[str, Any] = {"pid": os.getpid()}
    if _status is None:
        data["role"] = "supervisor (no scheduler in this process)"
    else:
        try:
            data.update(_status())
        except Exception as exc:  # a report must come out even if the state cannot be read
            data["error"] = f"could not read the scheduler's state: {exc}"
    return ReportModel(data=data, attached_view=KeyValueView())


def setup(conf: cfg.ConfigOpts) -> None:
    """Dump the report of this process on SIGUSR2 (call again in a forked worker, so
    that its report files carry its own pid)."""
    from oslo_reports import guru_meditation_report as gmr

    global _conf
    _conf = conf
    if not getattr(gmr.TextGuruMeditation, "_novasched_section", False):
        gmr.TextGuruMeditation.register_section("Scheduler", _scheduler_section)
        gmr.TextGuruMeditation._novasched_section = True  # type: ignore[attr-defined]
    gmr.TextGuruMeditation.setup_autorun(
        _Version(), service_name=f"{PROGRAM}-{os.getpid()}", conf=conf
    )
    LOG.debug("Guru Meditation Report on SIGUSR2 set up for pid %d", os.getpid())


def setup_in_child() -> None:
    """In a forked worker: the report again, under the worker's own pid (if set up)."""
    if _conf is not None:
        setup(_conf)


def forward_to(children: Callable[[], list[int]]) -> None:
    """Make SIGUSR2 also reach ``children()`` (the supervisor's workers) after this
    process's own report (if the report is set up)."""
    if _conf is None or not hasattr(signal, "SIGUSR2"):
        return
    own = signal.getsignal(signal.SIGUSR2)

    def _handler(signum: int, frame: Any) -> None:
        if callable(own):
            own(signum, frame)
        for pid in children():
            try:
                os.kill(pid, signal.SIGUSR2)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGUSR2, _handler)
