"""The filter handler: runs the enabled filters over the candidate hosts, in order.

Semantics are nova's ``BaseFilterHandler.get_filtered_objects``: filters run one after the
other in configured order, each keeps the order of the hosts it is given, filters marked
``run_filter_once_per_request`` are skipped for the second and later instances of a
multi-create, filters with ``RUN_ON_REBUILD = False`` pass every host on a rebuild, and the
chain stops as soon as a filter leaves no host. The log lines are nova's.

On top of nova, the handler records *why* each host was removed (``FilterReport``), which is
what NoValidHost messages and ``explain`` are made of.

For speed, when every host comes from the host manager's table (``scheduler/hosts/table.py``)
and debug logging is off, a filter with ``filter_rows`` decides over the table's columns;
between two such filters the hosts travel as row numbers, and HostState lists (and the
per-host list of removed hosts) are only built when something asks for them.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from stevedore import ExtensionManager

from filters import PASS_ALL, BaseHostFilter, FilterOutcome, RowOutcome, rows_method
from filters.nova_adapter import NovaFilterAdapter
from scheduler.conf import CONF, NOVA_ALL_FILTERS
from scheduler.exceptions import ConfigurationError, NoValidHost, PluginNotFound
from scheduler.hosts.aggregates import per_aggregate_set
from scheduler.hosts.table import table_of
from scheduler.nova_plugins import (
    NOVA_FILTERS_PACKAGE,
    NovaPluginImportError,
    import_plugin,
    nova_installed,
    registered_path,
    short_name,
)

LOG = logging.getLogger(__name__)

FILTER_NAMESPACE = "novasched.filters"
# Below this many hosts, the per-host paths cost less than setting up the columns.
COLUMNS_MIN_HOSTS = 64

# Reason recorded for hosts a check removed with a plain False (and no default_reason).
_REJECTED = "rejected"


class FilterError(NoValidHost):
    """A filter raised an exception. The request fails with this error (a NoValidHost, so
    the caller rolls back and nova's conductor gets its usual exception) instead of the
    worker dying; the traceback is in the scheduler log."""

    def __init__(self, filter_name: str, error: BaseException):
        self.filter_name = filter_name
        self.error = error
        super().__init__(
            f"Filter {filter_name} failed: {type(error).__name__}: {error}. "
            "This is a bug in the filter or bad data on a host; see the scheduler log."
        )


class FilterStep:
    """What one filter did in one run of the chain: ``removed`` lists (host, reason) for
    every host it removed; ``skipped`` is None when the filter ran, "rebuild" when it passed
    everything because of a rebuild."""

    __slots__ = ("name", "hosts_in", "elapsed", "skipped", "_removed", "_rows", "_count")

    def __init__(
        self,
        name: str,
        hosts_in: int,
        removed: list[tuple[Any, str]] | None = None,
        elapsed: float = 0.0,
        skipped: str | None = None,
        *,
        rows: tuple[Any, Any, Any, list[str]] | None = None,
    ):
        self.name = name
        self.hosts_in = hosts_in
        self.elapsed = elapsed
        self.skipped = skipped
        # removed hosts as (table, rows, codes, reasons), turned into the list on first use
        self._rows = rows
        self._removed = None if rows is not None else list(removed or [])
        self._count = len(rows[1]) if rows is not None else len(self._removed)

    def resolve(self, limit: int) -> int:
        """Name the first ``limit`` removed hosts now and forget the others' rows (a decision
        record keeps at most so many, and the host table's rows may be reused before its
        writer thread runs); ``removed`` then lists those alone, ``hosts_out`` still counts
        every one. Returns how many ``removed`` lists."""
        if self._removed is None:
            table, rows, codes, reasons = self._rows
            rows = rows[: max(limit, 0)]
            hosts = table.hosts_at(rows) if len(rows) else []
            if codes is None:
                self._removed = [(h, reasons[0]) for h in hosts]
            else:
                picked = codes[: len(rows)].tolist()
                self._removed = list(zip(hosts, map(reasons.__getitem__, picked), strict=True))
            self._rows = None
        return len(self._removed)

    @property
    def removed(self) -> list[tuple[Any, str]]:
        """(host, reason) per host removed (after ``resolve``: the first ones alone)."""
        if self._removed is None:
            table, rows, codes, reasons = self._rows
            hosts = table.hosts_at(rows)
            if codes is None:
                self._removed = [(h, reasons[0]) for h in hosts]
            else:
                self._removed = list(
                    zip(hosts, map(reasons.__getitem__, codes.tolist()), strict=True)
                )
            self._rows = None
        return self._removed

    @property
    def hosts_out(self) -> int:
        return self.hosts_in - self._count

    def __repr__(self) -> str:
        return f"FilterStep({self.name!r}, {self.hosts_in} -> {self.hosts_out})"


class HostList(list):
    """The surviving hosts, with their rows in the host manager's table when the filters
    ran over columns (the weight handler then need not look the rows up again)."""

    __slots__ = ("table", "rows")


@dataclass(slots=True)
class FilterReport:
    """The surviving hosts and, per filter, which hosts it removed and why."""

    hosts: list[Any] = field(default_factory=list)
    steps: list[FilterStep] = field(default_factory=list)
    removed_by: dict[str, Counter[str]] = field(default_factory=dict)

    def summary(self, total: int | None = None) -> str:
        """``"0/120 hosts available: 64 ComputeFilter (service disabled), 40 ..."``: counts
        per filter and reason, highest first (ties in filter order)."""
        if total is None:
            total = self.steps[0].hosts_in if self.steps else len(self.hosts)
        head = f"{len(self.hosts)}/{total} hosts available"
        entries: list[tuple[int, int, str]] = []
        for order, (name, reasons) in enumerate(self.removed_by.items()):
            for reason, count in reasons.items():
                entries.append((count, order, f"{count} {name} ({reason})"))
        if not entries:
            return head
        entries.sort(key=lambda e: (-e[0], e[1]))
        return head + ": " + ", ".join(text for _, _, text in entries)


class FilterHandler:
    """Runs an ordered list of filter instances over hosts."""

    def __init__(self, filters: list[BaseHostFilter]):
        self.filters = list(filters)

    def run(
        self,
        hosts: list[Any],
        spec_obj: Any,
        index: int = 0,
        request_id: str | None = None,
    ) -> FilterReport:
        """Filter ``hosts`` for the ``index``-th instance of the request."""
        debug = LOG.isEnabledFor(logging.DEBUG)
        extra = {"request_id": request_id}
        current: list[Any] | None = list(hosts)
        report = FilterReport()
        # the hosts as rows of the host manager's table, when they all are in it (and debug
        # is off: the per-host debug lines need the hosts); ``current`` is then built only
        # when a filter without ``filter_rows`` asks for it
        table = rows = None
        if not debug and len(current) >= COLUMNS_MIN_HOSTS:
            located = table_of(current)
            if located is not None:
                table, rows = located
        is_rebuild = bool(getattr(spec_obj, "is_rebuild", False))
        if debug:
            LOG.debug("Starting with %d host(s)", len(current), extra=extra)
        # nova's INFO line lists "(start, end)" per filter; the full per-host history is only
        # built when debug is on, as nova does.
        part_results: list[str] = []
        full_results: list[tuple[str, list[tuple[str, str]] | None]] = []

        for filter_ in self.filters:
            if index > 0 and not _runs_for_index(filter_, index):
                continue
            name = getattr(filter_, "name", None) or type(filter_).__name__
            start_count = len(current) if current is not None else len(rows)
            if is_rebuild and not getattr(filter_, "RUN_ON_REBUILD", False):
                report.steps.append(FilterStep(name, start_count, skipped="rebuild"))
                part_results.append(f"{name}: (start: {start_count}, end: {start_count})")
                if debug:
                    full_results.append((name, _host_names(current)))
                    LOG.debug("Filter %s returned %d host(s)", name, start_count, extra=extra)
                if not start_count:
                    break
                continue

            started = time.perf_counter()
            filter_rows = rows_method(filter_) if table is not None else None
            try:
                by_rows: RowOutcome | None = None
                if filter_rows is not None:
                    if rows is None:
                        rows = table.rows_of(current)
                    if rows is not None:
                        by_rows = filter_rows(table, rows, spec_obj)
                if by_rows is None:
                    if current is None:
                        current = table.hosts_at(rows)
                    outcome = apply_filter(filter_, current, spec_obj)
            except Exception as exc:
                LOG.exception(
                    "Filter %s raised an error on %d host(s) for the request with instance ID '%s'",
                    name,
                    start_count,
                    getattr(spec_obj, "instance_uuid", None),
                    extra=extra,
                )
                raise FilterError(name, exc) from exc
            elapsed = time.perf_counter() - started

            if by_rows is not None:
                keep = by_rows.keep
                gone = ~keep
                removed_rows = rows[gone]
                codes = by_rows.codes[gone] if by_rows.codes is not None else None
                rows = rows[keep]
                current = None
                step = FilterStep(
                    name,
                    start_count,
                    elapsed=elapsed,
                    rows=(table, removed_rows, codes, by_rows.reasons),
                )
                report.steps.append(step)
                if len(removed_rows):
                    counter = report.removed_by.setdefault(name, Counter())
                    if codes is None:
                        counter[by_rows.reasons[0]] += len(removed_rows)
                    else:
                        counts = np.bincount(codes, minlength=len(by_rows.reasons)).tolist()
                        # in the order the reasons first occur, as the per-host path counts
                        # them (NoValidHost lists equal counts in that order)
                        present = [c for c, count in enumerate(counts) if count]
                        present.sort(key=lambda c: int(np.argmax(codes == c)))
                        for c in present:
                            counter[by_rows.reasons[c]] += counts[c]
                end_count = len(rows)
                part_results.append(f"{name}: (start: {start_count}, end: {end_count})")
                if not end_count:
                    LOG.info("Filter %s returned 0 hosts", name, extra=extra)
                    current = []
                    break
                continue

            current = outcome.passed
            rows = None
            report.steps.append(FilterStep(name, start_count, outcome.rejected, elapsed))
            if outcome.rejected:
                counter = report.removed_by.get(name)
                if counter is None:
                    counter = report.removed_by[name] = Counter()
                counter.update(reason for _, reason in outcome.rejected)
            end_count = len(current)
            part_results.append(f"{name}: (start: {start_count}, end: {end_count})")
            if not current:
                LOG.info("Filter %s returned 0 hosts", name, extra=extra)
                if debug:
                    full_results.append((name, None))
                break
            if debug:
                full_results.append((name, _host_names(current)))
                LOG.debug("Filter %s returned %d host(s)", name, end_count, extra=extra)

        if current is None:
            current = HostList(table.hosts_at(rows))
            current.table = table
            current.rows = rows
        if not current:
            inst_uuid = getattr(spec_obj, "instance_uuid", None)
            msg = (
                "Filtering removed all hosts for the request with instance ID '%s'. "
                "Filter results: %s"
            )
            if debug:
                LOG.debug(msg, inst_uuid, str(full_results), extra=extra)
            LOG.info(msg, inst_uuid, str(part_results), extra=extra)
        report.hosts = current
        return report


def _host_names(hosts: list[Any]) -> list[tuple[str, str]]:
    return [(getattr(h, "host", h), getattr(h, "nodename", "")) for h in hosts]


def apply_filter(filter_: Any, hosts: list[Any], spec_obj: Any) -> FilterOutcome:
    """Run one filter over ``hosts``: ``prepare`` once, then ``check`` per host (per set of
    aggregates for a ``per_aggregates`` filter). A filter written for nova goes through
    its adapter, which keeps nova's ``filter_all``."""
    if isinstance(filter_, NovaFilterAdapter):
        return filter_.filter_list(hosts, spec_obj)
    prepared = filter_.prepare(spec_obj)
    if prepared is PASS_ALL:
        return FilterOutcome(list(hosts))
    check = filter_.check

    def one(host: Any) -> Any:
        return check(host, prepared)

    if getattr(filter_, "per_aggregates", False):
        one = per_aggregate_set(one)
    return FilterOutcome.partition(
        hosts, one, getattr(filter_, "default_reason", None) or _REJECTED
    )


def _runs_for_index(filter_: Any, index: int) -> bool:
    """Whether a filter runs for the ``index``-th instance of a multi-create: a nova filter
    class answers with its ``run_filter_for_index``; ours by ``run_filter_once_per_request``."""
    run_for_index = getattr(filter_, "run_filter_for_index", None)
    if run_for_index is not None:
        return bool(run_for_index(index))
    return not getattr(filter_, "run_filter_once_per_request", False)


class FilterNotAvailable(PluginNotFound):
    """An enabled filter that ``[filter_scheduler] available_filters`` does not provide (nova
    raises SchedulerHostFilterNotFound here): the service does not start."""

    def __init__(self, names: list[str], available: list[str]):
        super().__init__("filter", names, available)
        self.args = (
            f"Filter(s) {', '.join(names)} not available: [filter_scheduler] enabled_filters "
            "names filters by class name, and each must be among the classes of "
            f"[filter_scheduler] available_filters ({NOVA_ALL_FILTERS}: every registered "
            "novasched filter; add a filter class of your own by its path, e.g. "
            f"mycloud.filters.LocalDiskFilter). Available: {', '.join(self.available)}",
        )

    def __str__(self) -> str:
        return self.args[0]


def _registered(namespace: str) -> dict[str, Any]:
    """Every entry point of ``namespace``, by name (loaded)."""

    def _on_failure(_manager: Any, entrypoint: Any, exc: Exception) -> None:
        LOG.error("Could not load plugin %s from %s: %s", entrypoint.name, namespace, exc)

    manager = ExtensionManager(
        namespace, invoke_on_load=False, on_load_failure_callback=_on_failure
    )
    return {ext.name: ext for ext in manager}


# what _Catalog holds for a filter registered under our entry points
_OURS = "<registered>"


class _Catalog:
    """The filters ``available_filters`` makes available, by class name: a registered one
    (``_OURS``, its entry point name) or a class path to import."""

    def __init__(self, available: list[str], extensions: dict[str, Any]):
        self.extensions = extensions
        self.targets = {n: e.entry_point.value.replace(":", ".") for n, e in extensions.items()}
        self.by_name: dict[str, str] = {}
        # paths whose classes are only known once imported (a function returning classes)
        self.unread: list[str] = []
        for entry in (a.strip() for a in available if a and a.strip()):
            if entry in (NOVA_ALL_FILTERS, "all_filters"):
                self.by_name.update(dict.fromkeys(extensions, _OURS))
            elif registered_path(entry, self.targets, NOVA_FILTERS_PACKAGE):
                self.by_name[short_name(entry)] = _OURS
            elif "." not in entry:
                if entry in extensions:
                    self.by_name[entry] = _OURS
                else:
                    LOG.warning("[filter_scheduler] available_filters: no filter %r", entry)
            elif entry.startswith(NOVA_FILTERS_PACKAGE + ".") and not nova_installed():
                # one of nova's filters that novasched does not implement, without nova
                LOG.warning(
                    "[filter_scheduler] available_filters: %s is not implemented by "
                    "novasched and nova is not installed here",
                    entry,
                )
            else:
                # nova's classes are named by their path; later entries win, as in nova
                self.by_name[short_name(entry)] = entry
                self.unread.append(entry)
        self.loaded: dict[str, type] = {}

    def find(self, name: str) -> str | None:
        """The registered name or the class path of an enabled filter, or None."""
        if "." not in name:
            return self.by_name.get(name)
        short = short_name(name)
        found = self.by_name.get(short)
        ours = registered_path(name, self.targets, NOVA_FILTERS_PACKAGE)
        if ours is not None and found == _OURS:
            return _OURS
        if found == name:
            return found
        return None

    def read_functions(self, enabled: list[str]) -> None:
        """Import the paths that no enabled name matches: a path to a function returning
        classes (nova's ``all_filters`` style) makes each of them available."""
        wanted = {short_name(n) for n in enabled}
        for path in self.unread:
            short = short_name(path)
            if short in wanted or self.by_name.get(short) != path:
                continue
            try:
                classes = import_plugin(path, "filter")
            except NovaPluginImportError as exc:
                LOG.warning("[filter_scheduler] available_filters: %s", exc)
                continue
            if len(classes) == 1 and classes[0].__name__ == short:
                self.loaded[path] = classes[0]
                continue
            del self.by_name[short]
            for cls in classes:
                key = f"{cls.__module__}.{cls.__qualname__}"
                self.by_name[cls.__name__] = key
                self.loaded[key] = cls
        self.unread = []

    def make(self, name: str, found: str) -> BaseHostFilter:
        if found == _OURS:
            return self.extensions[short_name(name)].plugin()
        cls = self.loaded.get(found)
        if cls is None:
            classes = import_plugin(found, "filter")
            wanted = short_name(found)
            cls = next((c for c in classes if c.__name__ == wanted), None)
            if cls is None:
                raise FilterNotAvailable([name], list(self.by_name))
        if isinstance(cls, type) and issubclass(cls, BaseHostFilter):
            return cls()  # a novasched filter named by its path: no adapter
        if not (hasattr(cls, "host_passes") or hasattr(cls, "filter_all")):
            raise ConfigurationError(
                f"{found} is not a filter class: it has neither host_passes nor filter_all"
            )
        return NovaFilterAdapter(cls(), found)


def load_filters(names: list[str], available: list[str] | None = None) -> list[BaseHostFilter]:
    """Instantiate the enabled filters, in the given order.

    As nova does, each enabled name must be one of the classes of ``available`` (default:
    ``[filter_scheduler] available_filters``), else FilterNotAvailable (nova's
    SchedulerHostFilterNotFound). ``nova.scheduler.filters.all_filters`` there makes every
    registered ``novasched.filters`` plugin available; nova's path to a built-in we
    implement loads ours; any other class path is imported (``scheduler/nova_plugins.py``)
    and, unless it is a novasched filter, run through ``NovaFilterAdapter``. An enabled name
    may also be given as a class path (nova wants the class name)."""
    if available is None:
        available = list(CONF.filter_scheduler.available_filters)
    catalog = _Catalog(available, _registered(FILTER_NAMESPACE))
    given = [n.strip() for n in names if n and n.strip()]
    found = [catalog.find(n) for n in given]
    if None in found and catalog.unread:
        catalog.read_functions(given)
        found = [catalog.find(n) for n in given]
    missing = [n for n, f in zip(given, found, strict=True) if f is None]
    if missing:
        raise FilterNotAvailable(missing, list(catalog.by_name))
    return [catalog.make(n, f) for n, f in zip(given, found, strict=True)]
