"""ComputeCapabilitiesFilter: flavor extra specs against what the host reports."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from filters import (
    PASS_ALL,
    BaseHostFilter,
    Reject,
    RowOutcome,
    column_path,
    extra_specs_ops,
)

LOG = logging.getLogger(__name__)

_MAXPHYSADDR_KEY = "hw:maxphysaddr_bits"
_MAXPHYSADDR_SCOPE = ("cpu_info", "maxphysaddr", "bits")


@dataclass(slots=True, frozen=True)
class _Check:
    """One flavor extra spec to verify, parsed once per request."""

    key: str  # the flavor's key, for messages
    scope: tuple[str, ...]  # the path through the HostState
    req: str
    unscoped: bool  # only checked when the host has this attribute or stats key
    missing: Reject
    mismatch: Reject


def _checks(spec_obj: Any) -> list[_Check]:
    flavor = getattr(spec_obj, "flavor", None)
    extra_specs = getattr(flavor, "extra_specs", None) or {}
    checks = []
    for key, req in extra_specs.items():
        if key == _MAXPHYSADDR_KEY:
            scope: tuple[str, ...] = _MAXPHYSADDR_SCOPE
            req = f">= {req}"
            unscoped = False
        else:
            parts = key.split(":")
            if len(parts) == 1:
                scope, unscoped = (key,), True
            elif parts[0] == "capabilities":
                scope, unscoped = tuple(parts[1:]), False
            else:
                continue  # another namespace (hw:, trait:, resources: ...): not ours
        checks.append(
            _Check(
                key=key,
                scope=scope,
                req=req,
                unscoped=unscoped,
                missing=Reject(f"host does not report {key}"),
                mismatch=Reject(f"{key} does not match {req}"),
            )
        )
    return checks


def _decode(text: str, decoded: dict[str, Any]) -> Any:
    """json.loads, memoised for one request: hosts of a fleet mostly share their cpu_info."""
    try:
        return decoded[text]
    except KeyError:
        pass
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    decoded[text] = value
    return value


def _resolve(host_state: Any, scope: tuple[str, ...], decoded: dict[str, Any]) -> Any:
    """Walk ``scope`` through the host: attributes, else the host's stats; JSON strings are
    decoded at each step. None when any step is missing."""
    cap: Any = host_state
    for name in scope:
        if isinstance(cap, str):
            cap = _decode(cap, decoded)
            if cap is None:
                return None
        if isinstance(cap, dict):
            cap = cap.get(name)
        else:
            cap = getattr(cap, name, None)
            if cap is None:
                cap = (getattr(host_state, "stats", None) or {}).get(name)
        if cap is None:
            return None
    return cap


def _failure(host_state: Any, checks: list[_Check], decoded: dict[str, Any]) -> Reject | None:
    for check in checks:
        if check.unscoped:
            stats = getattr(host_state, "stats", None) or {}
            if not hasattr(host_state, check.key) and check.key not in stats:
                continue
        cap = _resolve(host_state, check.scope, decoded)
        if cap is None:
            return check.missing
        if not extra_specs_ops.match(str(cap), check.req):
            return check.mismatch
    return None


# a stats key the host does not report (distinct from a reported None)
_ABSENT = object()


def _stat_reader(name: str) -> Any:
    def read(host_state: Any) -> Any:
        return (getattr(host_state, "stats", None) or {}).get(name, _ABSENT)

    return read


def _stat_key(value: Any) -> Any:
    # equal values of different types (1 and "1", 1 and True) may match differently
    return value if value is _ABSENT else (type(value), value)


def _stat_verdict(value: Any, check: _Check) -> int:
    """0: the check passes, 1: the value is missing, 2: it does not match."""
    if value is _ABSENT:
        return 0 if check.unscoped else 1
    if value is None:
        return 1
    return 0 if extra_specs_ops.match(str(value), check.req) else 2


@column_path
class ComputeCapabilitiesFilter(BaseHostFilter):
    """Passes hosts whose reported capabilities satisfy the flavor's ``capabilities:``
    extra specs (and unscoped keys naming a host attribute or stat)."""

    RUN_ON_REBUILD = False
    # capabilities do not change within a request
    run_filter_once_per_request = True

    def prepare(self, spec_obj: Any) -> Any:
        """The flavor's checks, parsed once, and a memo of the JSON decoded on the way
        (shared by the hosts of the request); PASS_ALL when no extra spec is ours."""
        checks = _checks(spec_obj)
        if not checks:
            return PASS_ALL
        decoded: dict[str, Any] = {}
        return checks, decoded

    def check(
        self, host_state: Any, prepared: tuple[list[_Check], dict[str, Any]]
    ) -> bool | Reject:
        checks, decoded = prepared
        result = _failure(host_state, checks, decoded)
        if result is None:
            return True
        if LOG.isEnabledFor(logging.DEBUG):
            LOG.debug(
                "%(host_state)s fails instance_type extra_specs requirements: %(reason)s",
                {"host_state": host_state, "reason": result.reason},
            )
        return result

    def filter_rows(self, table: Any, rows: Any, spec_obj: Any) -> RowOutcome | None:
        """Checks of one ``stats`` key each (``capabilities:storage``, an unscoped stats
        key), decided once per distinct value of the key. None (ask the hosts) for a check
        that names a host attribute or a nested path, or with debug logging on."""
        checks = _checks(spec_obj)
        if not checks:
            return RowOutcome(np.ones(len(rows), dtype=bool), [""])
        if LOG.isEnabledFor(logging.DEBUG) or not len(rows):
            return None
        sample = table.hosts_at(rows[:1])[0]
        columns = []
        for check in checks:
            (name,) = check.scope if len(check.scope) == 1 else (None,)
            if name is None or hasattr(sample, name):
                return None
            column = table.codes(f"stats:{name}", _stat_reader(name), _stat_key)
            if column is None:
                return None
            by_row, values = column
            if len(values) > len(rows):
                return None
            codes = by_row[rows]
            if codes.min() < 0 or codes.max() >= len(values):
                return None  # a value the columns cannot key, or one written since
            columns.append((codes, values))
        reasons: list[str] = []
        for check in checks:
            reasons += [check.missing.reason, check.mismatch.reason]
        keep = np.ones(len(rows), dtype=bool)
        per_row = np.zeros(len(rows), dtype=np.int16)
        # the last check first, so that the first failing check's reason is the one kept
        for i in range(len(checks) - 1, -1, -1):
            codes, values = columns[i]
            verdicts = np.fromiter(
                (_stat_verdict(v, checks[i]) for v in values), dtype=np.int16, count=len(values)
            )
            verdict = verdicts[codes]
            failed = verdict != 0
            per_row = np.where(failed, 2 * i + verdict - 1, per_row)
            keep &= ~failed
        return RowOutcome(keep, reasons, per_row)
