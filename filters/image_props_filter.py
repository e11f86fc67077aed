"""ImagePropertiesFilter: the image's architecture, hypervisor type and VM mode must be
among the host's supported instances."""

from __future__ import annotations

import json
import logging
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np

from filters import PASS_ALL, BaseHostFilter, Reject, RowOutcome, column_path
from scheduler.conf import CONF

LOG = logging.getLogger(__name__)

# nova's Architecture.canonicalize aliases; other values are lower-cased.
_ARCH_ALIASES = {
    "i386": "i686",
    "i486": "i686",
    "i586": "i686",
    "x86_32": "i686",
    "x86_32p": "i686",
    "amd64": "x86_64",
}
_HV_ALIASES = {"xapi": "xen"}
_VM_MODE_ALIASES = {"pv": "xen", "hv": "hvm", "baremetal": "hvm"}

NO_SUPPORTED_INSTANCES = Reject("host reports no supported instances")


def _canonical(value: Any, aliases: dict[str, str]) -> str | None:
    if value is None or value == "":
        return None
    name = str(value).lower()
    return aliases.get(name, name)


def canonicalize_arch(value: Any) -> str | None:
    return _canonical(value, _ARCH_ALIASES)


def canonicalize_hv_type(value: Any) -> str | None:
    return _canonical(value, _HV_ALIASES)


def canonicalize_vm_mode(value: Any) -> str | None:
    return _canonical(value, _VM_MODE_ALIASES)


def version_from_int(version: int) -> tuple[int, ...]:
    """nova's integer hypervisor version as a tuple: 6002000 -> (6, 2, 0)."""
    parts: list[int] = []
    version = int(version)
    while version:
        version, part = divmod(version, 1000)
        parts.insert(0, part)
    return tuple(parts)


_COMPARATORS: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
    ">": operator.gt,
    ">=": operator.ge,
    "!=": operator.ne,
}
_PREDICATE = re.compile(r"^\s*(<=|>=|==|!=|<|>)?\s*(\d+(?:\.\d+)*)\s*$")


def parse_version_predicate(text: str) -> list[tuple[Callable[[Any, Any], bool], tuple[int, ...]]]:
    """Parse ``img_hv_requested_version`` (``">=6.0"``, ``">=6.0,<7"``): comma-separated
    comparisons that must all hold. A bare version means ``==``. Raises ValueError."""
    clauses = []
    for clause in str(text).split(","):
        found = _PREDICATE.match(clause)
        if not found:
            raise ValueError(f"bad version predicate {text!r}")
        op, version = found.groups()
        clauses.append((_COMPARATORS[op or "=="], tuple(int(p) for p in version.split("."))))
    return clauses


def _pad(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)), b + (0,) * (width - len(b))


def _satisfies(
    hv_version: Any, predicate: list[tuple[Callable[[Any, Any], bool], tuple[int, ...]]]
) -> bool:
    if not predicate:
        return False  # the image's predicate could not be parsed
    try:
        have = version_from_int(hv_version)
    except (TypeError, ValueError):
        return False
    for compare, version in predicate:
        left, right = _pad(have, version)
        if not compare(left, right):
            return False
    return True


def _maxphysaddr_bits(cpu_info: Any) -> int | None:
    if isinstance(cpu_info, str):
        try:
            cpu_info = json.loads(cpu_info)
        except ValueError:
            return None
    if not isinstance(cpu_info, dict):
        return None
    maxphysaddr = cpu_info.get("maxphysaddr")
    bits = maxphysaddr.get("bits") if isinstance(maxphysaddr, dict) else None
    try:
        return int(bits) if bits is not None else None
    except (TypeError, ValueError):
        return None


@dataclass(slots=True)
class _ImageRequest:
    """What the image asks of a host, computed once per request."""

    wanted: frozenset[str]  # the set ones of (arch, hv_type, vm_mode), canonical
    single: str | None  # the one value of ``wanted`` when it holds one, else None
    predicate: list[tuple[Callable[[Any, Any], bool], tuple[int, ...]]] | None
    bits_required: int | None
    unsupported: Reject
    bad_version: Reject
    few_bits: Reject
    # hypervisor_version -> predicate satisfied, filled as hosts are checked
    version_ok: dict[Any, bool] = field(default_factory=dict)


def _image_request(spec_obj: Any) -> _ImageRequest | None:
    """None when the image sets none of arch / hv type / vm mode: every host passes."""
    image = getattr(spec_obj, "image", None)
    props = (getattr(image, "properties", None) or {}) if image is not None else {}
    default_arch = CONF.filter_scheduler.image_properties_default_architecture
    wanted = (
        canonicalize_arch(props.get("hw_architecture") or default_arch),
        canonicalize_hv_type(props.get("img_hv_type")),
        canonicalize_vm_mode(props.get("hw_vm_mode")),
    )
    if not any(wanted):
        return None
    version_required = props.get("img_hv_requested_version")
    predicate = None
    bad_version = Reject(f"hypervisor version does not satisfy {version_required}")
    if version_required:
        try:
            predicate = parse_version_predicate(version_required)
        except ValueError:
            bad_version = Reject(f"invalid img_hv_requested_version {version_required!r}")
            predicate = []  # an empty predicate list marks "cannot be satisfied"
    try:
        bits_required = int(props.get("hw_maxphysaddr_bits") or 0) or None
    except (TypeError, ValueError):
        bits_required = None
    labels = ("hw_architecture", "img_hv_type", "hw_vm_mode")
    asked = " ".join(
        f"{label}={value}" for label, value in zip(labels, wanted, strict=True) if value
    )
    wanted_set = frozenset(w for w in wanted if w)
    return _ImageRequest(
        wanted=wanted_set,
        single=next(iter(wanted_set)) if len(wanted_set) == 1 else None,
        predicate=predicate,
        bits_required=bits_required,
        unsupported=Reject(f"image {asked} not supported"),
        bad_version=bad_version,
        few_bits=Reject(f"fewer than {bits_required} maxphysaddr bits"),
    )


def _failure(host_state: Any, request: _ImageRequest) -> Reject | None:
    supported = host_state.supported_instances
    if not supported:
        return NO_SUPPORTED_INSTANCES
    # nova: some advertised (arch, hv_type, vm_mode) triple holds every value the image sets
    issubset = request.wanted.issubset
    single = request.single
    if single is not None:
        # the common request (one wanted value): ``in`` a list is issubset of one value
        # (a string is not a list), without a call per triple
        for triple in supported:
            if single in triple if type(triple) is list else issubset(triple):
                break
        else:
            return request.unsupported
    elif not any(issubset(triple) for triple in supported):
        return request.unsupported
    hv_version = host_state.hypervisor_version
    if request.predicate is not None and hv_version:
        satisfied = request.version_ok.get(hv_version)
        if satisfied is None:
            satisfied = request.version_ok[hv_version] = _satisfies(hv_version, request.predicate)
        if not satisfied:
            return request.bad_version
    if request.bits_required:
        bits = _maxphysaddr_bits(host_state.cpu_info)
        if bits is None or bits < request.bits_required:
            return request.few_bits
    return None


def _supported_instances(host_state: Any) -> Any:
    return host_state.supported_instances


def _supported_key(value: Any) -> Any:
    """What decides the filter's answer for a ``supported_instances`` value, hashable: hosts
    with equal keys get the same answer. Raises TypeError for a shape the hot path does not
    know (the table then leaves the host to the per-host path)."""
    if not value:
        return ()
    if type(value) is not list:
        raise TypeError("supported_instances is not a list")
    return tuple((type(triple), tuple(triple)) for triple in value)


@column_path
class ImagePropertiesFilter(BaseHostFilter):
    """Passes hosts that can run the image's architecture, hypervisor type and VM mode
    (and hypervisor version and address bits, when the image asks for them)."""

    depends_on_consumption = False

    # a rebuild may bring a new image, which the current host must still be able to run
    RUN_ON_REBUILD = True
    run_filter_once_per_request = True

    def prepare(self, spec_obj: Any) -> Any:
        """What the image asks of a host; PASS_ALL when it sets none of architecture,
        hypervisor type and VM mode."""
        request = _image_request(spec_obj)
        return PASS_ALL if request is None else request

    def check(self, host_state: Any, request: _ImageRequest) -> bool | Reject:
        result = _failure(host_state, request)
        if result is None:
            return True
        if LOG.isEnabledFor(logging.DEBUG):
            LOG.debug(
                "%(host_state)s does not support requested instance_properties: %(reason)s",
                {"host_state": host_state, "reason": result.reason},
            )
        return result

    def filter_rows(self, table: Any, rows: Any, spec_obj: Any) -> RowOutcome | None:
        """The common request (an architecture, hypervisor type or VM mode; no version or
        address bits) decided once per distinct ``supported_instances`` of the hosts."""
        request = _image_request(spec_obj)
        if request is None:
            return RowOutcome(np.ones(len(rows), dtype=bool), [""])
        if request.predicate is not None or request.bits_required:
            return None
        if LOG.isEnabledFor(logging.DEBUG):
            return None
        column = table.codes("supported_instances", _supported_instances, _supported_key)
        if column is None:
            return None
        by_row, values = column
        if len(values) > len(rows):
            return None  # as many distinct values as hosts: the per-host path is cheaper
        codes = by_row[rows]
        # -1: a value the columns cannot key; >= len(values): written since (a host updated
        # meanwhile): the per-host path decides
        if len(codes) and (codes.min() < 0 or codes.max() >= len(values)):
            return None
        reasons = ["", NO_SUPPORTED_INSTANCES.reason, request.unsupported.reason]
        verdicts = np.zeros(len(values), dtype=np.int8)
        for i, value in enumerate(values):
            only = SimpleNamespace(
                supported_instances=value, hypervisor_version=None, cpu_info=None
            )
            result = _failure(only, request)
            if result is not None:
                verdicts[i] = 1 if result is NO_SUPPORTED_INSTANCES else 2
        per_row = verdicts[codes]
        return RowOutcome(per_row == 0, reasons, per_row)
