"""The cloud ``novasched-manage demo --state-dir DIR`` leaves in DIR, for the operator's tools.

DIR keeps the demo's SQLite databases (API, cells, Placement) and decision records, and
gets:

* ``nova.conf``, which every ``novasched-manage`` command takes as it is (absolute paths,
  the demo's settings, Placement's database for the provider view);
* ``try.conf``, a what-if for ``replay`` (pack by RAM instead of spreading);
* ``placement.conf``, Placement's own settings as the demo's Placement runs them, for
  ``check --placement-config-file``;
* a way to bring its Placement back: ``novasched-manage demo --state-dir DIR
  --serve-placement`` serves Placement's database on the address nova.conf names, until
  interrupted (``check`` asks it, and a "fits nowhere" of explain or capacity is Placement's
  to give; replay reads the recorded instances' allocations from Placement's database).

The demo's computes report while it runs and never again, so nova.conf's
``service_down_time`` is a year (``SERVICE_DOWN_TIME``), and the demo moves its down hosts'
last heartbeats back by as much: the hosts that were up stay up, the down ones down.
"""

from __future__ import annotations

import configparser
import shlex
import signal
import sys
import threading
import urllib.parse
from pathlib import Path
from typing import Any

from oslo_utils import timeutils

API_DB = "nova_api.sqlite"
PLACEMENT_DB = "placement.sqlite"
RECORDS_DB = "novasched-decisions.sqlite"
NOVA_CONF = "nova.conf"
TRY_CONF = "try.conf"
PLACEMENT_CONF = "placement.conf"
# the scheduler's main database ([database] connection: its own services row), as in a
# one-cell nova
MAIN_CELL = 1

# A year: the hosts the demo saw up are still up when its cloud is used later.
SERVICE_DOWN_TIME = 365 * 24 * 3600

# the [filter_scheduler] options nova.conf repeats, as the demo ran with them (the others
# are at their defaults: etc/novasched.conf.sample)
_FILTER_SCHEDULER = (
    "enabled_filters",
    "weight_classes",
    "host_subset_size",
    "shuffle_best_same_weighed_hosts",
    "ram_weight_multiplier",
    "cpu_weight_multiplier",
    "disk_weight_multiplier",
)


class DemoStateError(Exception):
    """DIR cannot be used as asked; the message says what to do."""


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


def _sqlite_path(url: str) -> Path | None:
    return Path(url[len("sqlite:///") :]) if url.startswith("sqlite:///") else None


def cell_db(state: Path, number: int) -> Path:
    return state / f"nova_cell{number}.sqlite"


def check_unused(state: Path) -> None:
    """Refuse a DIR that already holds a demo's cloud (its hosts and cells would clash), or
    whose nova.conf could not be given to the commands."""
    if "$" in str(state):
        raise DemoStateError(
            f"--state-dir {state}: oslo.config reads a $ in a --config-file path as a "
            "variable, so no command could read its nova.conf; choose a path without $"
        )
    used = [name for name in (API_DB, NOVA_CONF) if (state / name).exists()]
    if used:
        where = shlex.quote(str(state))
        raise DemoStateError(
            f"{state} already holds a demo's cloud ({', '.join(used)}): give another "
            f"--state-dir or remove it; to serve its Placement again: novasched-manage demo "
            f"--state-dir {where} --serve-placement"
        )


# ------------------------------------------------------------------------------ nova.conf


def configure(conf: Any, state: Path, placement_url: str) -> None:
    """Set in ``conf`` what the demo's scheduler runs with (``write_nova_conf`` writes it)."""
    conf.set_override("connection", sqlite_url(state / API_DB), group="api_database")
    conf.set_override("auth_type", "noauth2", group="placement")
    conf.set_override("endpoint_override", placement_url, group="placement")
    conf.set_override("host", "novasched-demo")
    conf.set_override("service_down_time", SERVICE_DOWN_TIME)
    # the demo's caller is its operator: show why a request found no host
    conf.set_override("novalidhost_detail", True, group="scheduler")
    # the scheduler's own database (its nova-scheduler services row), as in a one-cell nova
    conf.set_override("connection", sqlite_url(cell_db(state, MAIN_CELL)), group="database")
    # the decision records go beside the demo's databases (nova's /var/lib/nova is not a
    # demo's)
    conf.set_override("state_path", str(state))
    conf.set_override("connection", sqlite_url(state / RECORDS_DB), group="decision_records")


def write_nova_conf(state: Path, conf: Any) -> Path:
    """Write DIR/nova.conf: the settings the demo runs with (read from ``conf``: see
    ``configure``), and Placement's database for the commands' provider view."""
    quoted = shlex.quote(str(state))
    path = state / NOVA_CONF
    fs = conf.filter_scheduler
    lines = [
        f"# The cloud 'novasched-manage demo' left in {state}",
        f"# ({timeutils.utcnow():%Y-%m-%d %H:%M} UTC). Every novasched-manage command takes it:",
        f"#   novasched-manage --config-file {shlex.quote(str(path))} capacity",
        "# Its paths are absolute: the commands may run from any directory.",
        "",
        "[DEFAULT]",
        "# the scheduler's name in its services row, as the demo ran",
        f"host = {_value(conf.host)}",
        f"# the decision records' directory ({RECORDS_DB})",
        f"state_path = {_value(conf.state_path)}",
        "# The demo's computes reported while it ran and never since: with nova's 60 s every",
        "# host would be down a minute after it ended. A year keeps up the hosts that were up;",
        "# the demo's down hosts last reported longer ago than that, so they stay down.",
        f"service_down_time = {_value(conf.service_down_time)}",
        "",
        "[api_database]",
        f"connection = {_value(conf.api_database.connection)}",
        "",
        "[database]",
        "# nova's main database (the scheduler's own services row): cell1's",
        f"connection = {_value(conf.database.connection)}",
        "",
        "[scheduler]",
        "# the demo's caller is its operator: NoValidHost says why",
        f"novalidhost_detail = {_value(conf.scheduler.novalidhost_detail)}",
        "",
        "[filter_scheduler]",
        "# as the demo ran (nova's defaults); try other values with replay and try.conf",
        *(f"{name} = {_value(fs[name])}" for name in _FILTER_SCHEDULER),
        "",
        "[placement]",
        "# The commands read Placement's database (explain, capacity, replay's fleet and the",
        "# recorded instances' allocations), so they need no Placement service; the demo's",
        "# scheduler asked Placement's API instead, with the same answers.",
        "view_feed = database",
        f"view_database_connection = {_value(sqlite_url(state / PLACEMENT_DB))}",
        "# Placement's API, for what only it answers (check asks it; a NoValidHost of the view",
        "# is asked of it again). The demo's Placement stopped with it; serve it again with",
        f"#   novasched-manage demo --state-dir {quoted} --serve-placement",
        f"auth_type = {_value(conf.placement.auth_type)}",
        f"endpoint_override = {_value(conf.placement.endpoint_override)}",
        "",
        "[decision_records]",
        f"connection = {_value(conf.decision_records.connection)}",
        "",
    ]
    path.write_text("\n".join(lines))
    return path


def write_try_conf(state: Path) -> Path:
    """Write DIR/try.conf: a what-if for replay, read after nova.conf."""
    path = state / TRY_CONF
    nova_conf = shlex.quote(str(state / NOVA_CONF))
    lines = [
        "# A what-if for replay: read after nova.conf, its options win.",
        f"#   novasched-manage --config-file {nova_conf} replay \\",
        f"#       --what-if {shlex.quote(str(path))}",
        "[filter_scheduler]",
        "# pack by RAM (the fullest host that fits first) instead of spreading (1.0)",
        "ram_weight_multiplier = -1.0",
        "",
    ]
    path.write_text("\n".join(lines))
    return path


def write_placement_conf(state: Path, conflict_retries: int) -> Path:
    """Write DIR/placement.conf: Placement's own settings as the demo's Placement runs them
    (also when served again), for ``check --placement-config-file``."""
    path = state / PLACEMENT_CONF
    nova_conf = shlex.quote(str(state / NOVA_CONF))
    lines = [
        "# Placement's configuration, as the demo's Placement runs (and --serve-placement).",
        f"#   novasched-manage --config-file {nova_conf} check \\",
        f"#       --placement-config-file {shlex.quote(str(path))}",
        "[api]",
        "auth_strategy = noauth2",
        "[placement_database]",
        f"connection = {_value(sqlite_url(state / PLACEMENT_DB))}",
        "[placement]",
        f"allocation_conflict_retry_count = {int(conflict_retries)}",
        "",
    ]
    path.write_text("\n".join(lines))
    return path


def _value(value: Any) -> str:
    """An option's value as nova.conf writes it ($ escaped: oslo.config substitutes $name)."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, list | tuple):
        text = ",".join(str(v) for v in value)
    else:
        text = str(value)
    return text.replace("$", "$$")


# ---------------------------------------------------------------------------- next steps


def next_steps(state: Path, manage: str, request_id: str | None = None) -> str:
    """The commands to try on the demo's cloud, DIR filled in."""
    conf = f"{manage} --config-file {shlex.quote(str(state / NOVA_CONF))}"
    try_conf = shlex.quote(str(state / TRY_CONF))
    placement_conf = shlex.quote(str(state / PLACEMENT_CONF))
    show = request_id or "REQUEST_ID"
    return "\n".join(
        [
            "",
            "== Try the operator's commands on the demo's cloud ==",
            f"Kept in {state}: its databases, its decision records, the flavors it booted",
            "and nova.conf, which every novasched-manage command takes. Its hosts stay up as",
            "the demo left them (nova.conf's service_down_time says why).",
            "",
            "  # how many more instances of each flavor fit, per availability zone",
            f"  {conf} capacity",
            "  # a dry run of one boot: each filter's verdict, the weighed hosts, the pick",
            f"  {conf} explain --flavor m1.small",
            "  # the decisions the demo's scheduler recorded, and one of them in full",
            f"  {conf} decision list",
            f"  {conf} decision show {show}",
            "  # the demo's boots again, packed by RAM (try.conf: ram_weight_multiplier = -1.0)",
            f"  {conf} replay --what-if {try_conf}",
            "",
            "check asks Placement's API, and a flavor that fits nowhere is Placement's to say:",
            "serve the demo's Placement for those, in another terminal (Ctrl-C stops it):",
            f"  {manage} demo --state-dir {shlex.quote(str(state))} --serve-placement",
            f"  {conf} check --placement-config-file {placement_conf}",
        ]
    )


def how_to_keep(manage: str, demo_args: list[str]) -> str:
    """What to run to keep the cloud of a demo that ran in a temporary directory."""
    again = " ".join([manage, "demo", *map(shlex.quote, demo_args), "--state-dir", "demo-cloud"])
    return "\n".join(
        [
            "",
            "The demo's cloud was in a temporary directory, now removed. To keep it and try",
            "capacity, explain, decision and replay on it (its nova.conf is written there):",
            f"  {again}",
        ]
    )


# ------------------------------------------------------------------------------ Placement


def serve_placement(state: Path, *, out: Any = None) -> int:
    """Serve the Placement of the demo kept in ``state`` on the address its nova.conf names
    (``[placement] endpoint_override``), until interrupted (SIGINT or SIGTERM)."""
    from scheduler.demo.embedded_placement import EmbeddedPlacement

    out = out or sys.stdout
    db_url, host, port = _placement_of(state)
    placement = EmbeddedPlacement(db_url, mode="thread", port=port)
    try:
        url = placement.start()
    except OSError as exc:
        raise DemoStateError(
            f"cannot serve Placement on {host}:{port}, the [placement] endpoint_override of "
            f"{state / NOVA_CONF}: {exc.strerror or exc} (is it served already? Stop that "
            "one, or give endpoint_override another port)"
        ) from None
    stop = threading.Event()
    # Ctrl-C or a kill stops it, even when started in the background by a shell script
    # (which starts it with SIGINT ignored)
    previous = {
        signum: signal.signal(signum, lambda *_: stop.set())
        for signum in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        print(
            f"Placement of the demo in {state} serving {state / PLACEMENT_DB} on {url}, "
            f"as {NOVA_CONF} says; Ctrl-C stops it",
            file=out,
            flush=True,
        )
        while not stop.wait(0.5):
            pass
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        placement.stop()
    return 0


def _placement_of(state: Path) -> tuple[str, str, int]:
    """Placement's database URL, and the host and port of its API, as DIR/nova.conf says."""
    path = state / NOVA_CONF
    if not path.is_file():
        raise DemoStateError(
            f"{state} holds no demo's cloud (no {NOVA_CONF}): run novasched-manage demo "
            f"--state-dir {shlex.quote(str(state))} first"
        )
    parser = configparser.RawConfigParser(strict=False, interpolation=None)
    try:
        parser.read(path)
        endpoint = parser.get("placement", "endpoint_override").replace("$$", "$")
        db_url = parser.get("placement", "view_database_connection").replace("$$", "$")
    except (configparser.Error, UnicodeDecodeError) as exc:
        raise DemoStateError(f"{path}: {str(exc).splitlines()[0]}") from None
    parts = urllib.parse.urlsplit(endpoint)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "http" or parts.hostname not in ("127.0.0.1", "localhost") or not port:
        raise DemoStateError(
            f"{path}: [placement] endpoint_override = {endpoint}: the demo serves Placement "
            "on http://127.0.0.1:PORT"
        )
    db_path = _sqlite_path(db_url)
    if db_path is not None and not db_path.is_file():
        # Placement would start on an empty database of its own making
        raise DemoStateError(
            f"{path}: [placement] view_database_connection: no such file {db_path}"
        )
    return db_url, "127.0.0.1", port
