"""The configuration of a ``novasched-manage`` command, checked before it does anything.

The service stops at the first option it cannot read; a one-shot command used to carry on
and fail later in the middle of its work (a traceback, every host "down", every request
"no valid host"). So every command checks up front, in the parsed configuration:

- **values**: every option registered in the groups novasched reads is read once, as
  oslo.config converts it; a value of the wrong type, out of range or not among the
  choices is a problem;
- **names**: in the groups novasched reads in full (``CHECKED_GROUPS``: ``[scheduler]``,
  ``[filter_scheduler]``, ``[placement]``, ``[metrics]`` and our own), an option the config
  files set that is registered under no name (its own, a deprecated one, an option of the
  configured Keystone auth plugin) and looks like a known one (a misspelling, an option of
  another group) is a problem: it would be silently ignored. One like no known name (an
  out-of-tree plugin's own option) is warned about. The other groups of nova.conf
  (``[DEFAULT]``, ``[libvirt]``, ``[neutron]``...) belong to every nova service and may
  hold anything.

Each problem names the file, the section, the option and its value, and says why.

A command that reads the cloud also checks that its databases are there before it opens
them (``require_databases``): SQLite creates an empty file wherever a URL points, so a
misspelt path would leave a database behind and every read would then fail with "no such
table" or "unable to open database file", naming no database.
"""

from __future__ import annotations

import configparser
import difflib
import glob
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from oslo_config import cfg

from scheduler import conf as sched_conf

# the groups whose every option is novasched's or nova's scheduler's: an unknown name there
# is a mistake (the service warns about the same groups at its start)
CHECKED_GROUPS = sched_conf.CHECKED_GROUPS

_NO_SECTION = "\0none"  # configparser's DEFAULT must not leak into the other sections
# the values never printed: passwords, tokens, URLs with credentials
_SECRET = re.compile(r"pass|secret|token|key|credential|connection|url", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One option that cannot be used: where it is set, its value, and why."""

    group: str
    name: str
    value: str | None
    why: str
    path: str | None = None
    # the known name it most looks like (a misspelling, or an option of another group):
    # refused; an unknown name like none of them (a plugin's own?) is only warned about
    likely: str = ""

    def __str__(self) -> str:
        where = f"{self.path}: " if self.path else ""
        value = "" if self.value is None else f" = {self.value}"
        return f"{where}[{self.group}] {self.name}{value}: {self.why}"


class UnreadableDatabase(ValueError):
    """A database a command reads is not there or cannot be read (the message names it)."""


class BadConfiguration(ValueError):
    """The configuration has problems; the message is the first one (and how many more)."""

    def __init__(self, problems: list[ConfigProblem]):
        self.problems = problems
        more = len(problems) - 1
        tail = f" (and {more} more problem(s) in the configuration)" if more else ""
        super().__init__(f"{problems[0]}{tail}")


def validate(conf: cfg.ConfigOpts) -> list[ConfigProblem]:
    """Raise BadConfiguration if ``conf`` (parsed) has a bad value or an unknown option that
    looks like a known one (a misspelling, an option of another group). Returns the unknown
    options like no known one, to be warned about: an out-of-tree filter or weigher of
    nova's registers options of its own in ``[filter_scheduler]`` that novasched cannot
    know of, and nova.conf is shared by every nova service."""
    unknown = unknown_options(conf)
    problems = bad_values(conf) + [p for p in unknown if p.likely]
    if problems:
        raise BadConfiguration(problems)
    return [p for p in unknown if not p.likely]


def config_files(conf: cfg.ConfigOpts) -> list[str]:
    """The files ``conf`` was parsed from, in the order oslo.config reads them (the last
    one that sets an option wins)."""
    files = [str(f) for f in (_opt(conf, "config_file") or [])]
    dirs = _opt(conf, "config_dir") or []
    for d in [dirs] if isinstance(dirs, str) else dirs:
        files.extend(sorted(glob.glob(os.path.join(d, "*.conf"))))
    return files


# ------------------------------------------------------------------------------ values


def bad_values(conf: cfg.ConfigOpts) -> list[ConfigProblem]:
    """Every registered option of the groups novasched reads whose value oslo.config
    refuses, as the service would refuse it when it reads the option."""
    parsed = _parsed(config_files(conf))
    declared = _declared_opts()
    problems: list[ConfigProblem] = []
    for group in _read_groups():
        for name in _registered(conf, group):
            try:
                _read(conf, group, name)
            except (ValueError, cfg.Error) as exc:
                opt = declared.get((group, name))
                problems.append(_value_problem(parsed, group, name, opt, exc))
    return problems


def _read_groups() -> list[str]:
    return [group for group, _ in sched_conf.list_opts()]


def _declared_opts() -> dict[tuple[str, str], cfg.Opt]:
    return {(group, opt.dest): opt for group, opts in sched_conf.list_opts() for opt in opts}


def _registered(conf: cfg.ConfigOpts, group: str) -> list[str]:
    """The options registered in ``group`` (for DEFAULT, novasched's own: the libraries'
    options there belong to them)."""
    if group == "DEFAULT":
        return [opt.dest for g, opts in sched_conf.list_opts() if g == group for opt in opts]
    try:
        return sorted(conf[group].keys())
    except (cfg.NoSuchOptError, cfg.NoSuchGroupError):
        return []


def _read(conf: cfg.ConfigOpts, group: str, name: str) -> Any:
    if group == "DEFAULT":
        return conf[name]
    return conf[group][name]


def _value_problem(
    parsed: list[tuple[str, configparser.RawConfigParser]],
    group: str,
    name: str,
    opt: cfg.Opt | None,
    exc: Exception,
) -> ConfigProblem:
    """Where the bad value is set (the last file that sets the option under one of its
    names), and why it is refused, in the words of its type."""
    names = [(group, name)]
    if opt is not None:
        names += [(d.group or group, d.name) for d in opt.deprecated_opts]
    for path, parser in reversed(parsed):
        for section, key in names:
            section = "DEFAULT" if section.upper() == "DEFAULT" else section
            if parser.has_option(section, key):
                value = parser.get(section, key)
                why = _why(opt, value, exc)
                shown = "***" if opt is not None and opt.secret else value
                return ConfigProblem(section, key, shown, why, path)
    return ConfigProblem(group, name, None, _why(opt, None, exc))


_ORACLE_REASON = re.compile(r"^.*? is not valid: ", re.DOTALL)
_WORDS = (
    (re.compile(r"^invalid literal for int\(\)"), "not an integer"),
    (re.compile(r"^could not convert string to float"), "not a number"),
    (re.compile(r"^Unexpected boolean value"), "not a boolean (true or false)"),
)


def _why(opt: cfg.Opt | None, value: str | None, exc: Exception) -> str:
    """Why the value is refused: the type's own reason for ``value`` (oslo.config's message
    names a location object), in plain words for the common conversions."""
    reason = ""
    if opt is not None and value is not None:
        try:
            opt.type(value)
        except (ValueError, TypeError) as own:
            reason = str(own)
    if not reason:
        reason = _ORACLE_REASON.sub("", str(exc).splitlines()[0] if str(exc) else repr(exc))
    for pattern, words in _WORDS:
        if pattern.match(reason):
            return words
    if reason[:1].isupper() and reason[1:2].islower():  # "Should be ...", not "UUID ..."
        reason = reason[:1].lower() + reason[1:]
    return reason


# ------------------------------------------------------------------------------- names


def unknown_options(conf: cfg.ConfigOpts) -> list[ConfigProblem]:
    """The options the config files set in ``CHECKED_GROUPS`` that novasched knows under no
    name, each with the known name it most looks like."""
    known = {group: _known_names(conf, group) for group in CHECKED_GROUPS}
    plugin_added = False
    problems: list[ConfigProblem] = []
    seen: set[tuple[str, str]] = set()
    for path, parser in _parsed(config_files(conf)):
        for group in parser.sections():
            if group not in known:
                continue
            for key in parser.options(group):
                if group == "placement" and not plugin_added and key not in known[group]:
                    # loading the plugin's options takes a while: only for a name in doubt
                    known[group] |= sched_conf.auth_plugin_options(conf, group)
                    plugin_added = True
                if key.replace("-", "_") in known[group] or (group, key) in seen:
                    continue
                seen.add((group, key))
                why, likely = _unknown_why(group, key.replace("-", "_"), known)
                value = parser.get(group, key)
                if _SECRET.search(key) or _SECRET.search(likely):
                    value = "***"
                problems.append(ConfigProblem(group, key, value, why, path, likely))
    return problems


def _unknown_why(group: str, name: str, known: dict[str, set[str]]) -> tuple[str, str]:
    """Why ``name`` is refused in ``group``, with the known name it most looks like (the
    same name in another group, else a close one in this group; "" if none)."""
    why = f"no such option in [{group}]"
    elsewhere = [g for g, names in known.items() if name in names]
    if elsewhere:
        return f"{why} (it belongs in [{elsewhere[0]}])", name
    close = difflib.get_close_matches(name, sorted(known[group]), n=1)
    if close:
        return f"{why} (did you mean {close[0]}?)", close[0]
    return why, ""


def _known_names(conf: cfg.ConfigOpts, group: str) -> set[str]:
    """Every name an option of ``group`` may be set under: the registered options (ours,
    the libraries', a plugin's) and their deprecated names in this group. (The options of
    ``[placement] auth_type``'s Keystone plugin are registered only when it is loaded:
    ``scheduler.conf.auth_plugin_options``.)"""
    names = set(_registered(conf, group))
    for declared_group, opts in sched_conf.list_opts():
        for opt in opts:
            if declared_group == group:
                names.update((opt.dest, opt.name))
            names.update(
                d.name.replace("-", "_")
                for d in opt.deprecated_opts
                if (d.group or declared_group) == group and d.name
            )
    return names


# --------------------------------------------------------------------------- databases


# what to do about a nova database that is not there
SYNC = "fix the URL, or create it with 'novasched-manage db sync'"


def require_database(url: str | None, what: str, remedy: str = SYNC) -> None:
    """Raise UnreadableDatabase when ``url`` is an SQLite file that is not there or cannot be
    read (``what`` names the database and its option, ``remedy`` what to do, as the message
    shows them). Other databases refuse a connection to a database that does not exist by
    themselves."""
    from sqlalchemy.engine import make_url

    if not url:
        return
    try:
        parsed = make_url(url)
    except Exception:
        raise UnreadableDatabase(f"{what} is not a valid SQLAlchemy URL: {url!r}") from None
    path = parsed.database
    if parsed.get_backend_name() != "sqlite" or not path or path == ":memory:":
        return
    if parsed.query.get("uri") or path.startswith("file:"):
        return  # an SQLite URI (mode=ro...): SQLite reads it as the URI says
    if not os.path.exists(path):
        folder = os.path.dirname(os.path.abspath(path))
        why = "no such file" if os.path.isdir(folder) else f"no such directory {folder}"
        raise UnreadableDatabase(f"{what} does not exist: {path}: {why} ({remedy})")
    if not os.path.isfile(path) or not os.access(path, os.R_OK):
        raise UnreadableDatabase(f"{what} cannot be read: {path}: not a readable file")


def require_databases(conf: cfg.ConfigOpts) -> None:
    """The databases a command that reads the cloud opens must be there: the API database,
    every enabled cell's (as the API database maps it) and Placement's when the provider
    view reads it. Raises UnreadableDatabase naming the first one that is not."""
    import db
    from scheduler.records.store import first_line, safe_url

    api_url = conf.api_database.connection
    require_database(api_url, "the API database ([api_database] connection)")
    view_url = _opt_of(conf, "placement", "view_database_connection")
    require_database(
        view_url,
        "Placement's database ([placement] view_database_connection)",
        "fix the URL: it is Placement's own [placement_database] connection",
    )
    if not api_url:
        return
    try:
        cells = db.get_cell_mappings(db.get_engine(api_url), sched_conf.database_connection(conf))
    except Exception as exc:  # a server that refuses, tables missing: said once, here
        raise UnreadableDatabase(
            f"cannot read the API database ({safe_url(api_url)}): {first_line(exc)}"
        ) from None
    for cell in cells:
        if cell["uuid"] == db.CELL0_UUID or cell["disabled"] or cell.get("template_error"):
            continue  # not read (a template that cannot be filled is logged when it is not)
        name = cell["name"] or cell["uuid"]
        require_database(
            cell["database_connection"], f"the database of cell {name} (its cell mapping)"
        )


# ----------------------------------------------------------------------------- helpers


def _opt_of(conf: cfg.ConfigOpts, group: str, name: str) -> Any:
    try:
        return conf[group][name]
    except (cfg.NoSuchOptError, cfg.NoSuchGroupError):
        return None


def _parsed(paths: Iterable[str]) -> list[tuple[str, configparser.RawConfigParser]]:
    """Each readable config file, parsed; oslo.config has already refused a file it cannot
    parse."""
    out = []
    for path in paths:
        parser = configparser.RawConfigParser(
            strict=False, default_section=_NO_SECTION, interpolation=None
        )
        try:
            parser.read(path)
        except (configparser.Error, UnicodeDecodeError):
            continue
        out.append((path, parser))
    return out


def _opt(conf: cfg.ConfigOpts, name: str) -> Any:
    try:
        return conf[name]
    except (cfg.NoSuchOptError, cfg.Error):
        return None
