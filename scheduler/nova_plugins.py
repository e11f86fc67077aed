"""nova's own filter and weigher classes, named by class path in nova.conf, run unchanged.

A cloud that carries filters or weighers of its own, written against nova's
``nova.scheduler.filters.BaseHostFilter`` or ``nova.scheduler.weights.BaseHostWeigher`` and
named by class path in ``[filter_scheduler] available_filters`` / ``weight_classes``, keeps
them: ``import_plugin`` imports the class in novasched's Python (nova must be installed there
when the class subclasses nova's), and the adapters (``filters/nova_adapter.py``,
``weighers/nova_adapter.py``) hand it our hosts and request under nova's names:
``NovaHostState`` and ``NovaRequestSpec``, thin views built for the call, never stored.

What a nova plugin reads, and where it differs from nova 34:

HostState (``NovaHostState``): every attribute of nova's HostState, by its name, from ours:
``host``, ``nodename``, ``uuid``, ``cell_uuid``, ``total_usable_ram_mb``, ``free_ram_mb``,
``total_usable_disk_gb``, ``disk_mb_used``, ``free_disk_mb``, ``vcpus_total``,
``vcpus_used``, ``num_instances``, ``num_io_ops``, ``failed_builds``, the three
``*_allocation_ratio``, ``host_ip``, ``hypervisor_type``, ``hypervisor_version``,
``hypervisor_hostname``, ``cpu_info``, ``supported_instances``, ``stats``, ``updated``,
``service`` (a dict of the Service's fields), ``aggregates`` (``id``, ``uuid``, ``name``,
``hosts``, ``metadata``, ``availability_zone``). Besides:

- ``limits``: this request's limits for the host. A write (``limits["memory_mb"] = ...``)
  records the limit for the host's Selection of this request, as nova's did.
- ``allocation_candidates``: this request's Placement candidates for the host; assigning a
  shorter list narrows them, as nova's ``CandidateFilterMixin`` does.
- ``metrics``: objects with ``name``, ``value``, ``timestamp``, ``source``, and ``to_list()``.
- ``instances``: ``{uuid: None}`` - the uuids of the host's instances, not nova Instance
  objects (nova reads them from the cell database on each request; we do not).
- ``numa_topology``: the decoded ``compute_nodes.numa_topology`` (nova's object primitive, a
  dict), not a ``nova.objects.NUMATopology``.
- ``pci_stats``: the decoded ``compute_nodes.pci_stats`` (a dict), not a ``PciDeviceStats``.
- No method of nova's HostState (``consume_from_request``, ``update``): a filter or weigher
  never changes a host. Assigning any other attribute sets it on this call's view only.
- Anything else raises AttributeError naming the attribute.

RequestSpec (``NovaRequestSpec``): ``flavor`` (nova's Flavor fields, ``extra_specs``),
``image`` (``id``, ``name``, ``min_ram``, ... and ``properties``: ``.get(name)``, attribute
access, ``in``, ``obj_attr_is_set``, ``to_dict()``), ``project_id``, ``user_id``,
``availability_zone``, ``num_instances``, ``instance_uuid``, ``instance_group`` (``uuid``,
``name``, ``policy``, ``policies``, ``rules``, ``members``, ``hosts``), ``scheduler_hints`` and
``get_scheduler_hint()``, ``ignore_hosts``, ``force_hosts``, ``force_nodes``,
``requested_destination`` (``host``, ``node``, ``aggregates``, ``forbidden_aggregates``,
``allow_cross_cell_move``), ``retry``, ``limits``, ``is_bfv``, ``requested_resources``,
``request_level_params``, ``root_required``, ``root_forbidden``, ``vcpus``, ``memory_mb``,
``root_gb``, ``ephemeral_gb``, ``swap``, ``id``; ``name in spec_obj`` and
``obj_attr_is_set(name)`` (true when the field has a value). Differs:

- ``numa_topology``, ``pci_requests``, ``requested_networks``: nova's primitives (a dict,
  lists of dicts), not InstanceNUMATopology / InstancePCIRequests / NetworkRequestList.
- ``retry.hosts``: ``(host, nodename)`` pairs, not a ComputeNodeList.
- ``requested_destination.cell`` is not there (``cell_uuid`` is).
- ``network_metadata``: a dict (``physnets``, ``tunneled``), not a NetworkMetadata object.
- ``security_groups``: AttributeError (the scheduler is not sent what it needs);
  ``_context`` is None (a plugin gets no database or RPC access through us).
- An image property that is not set raises AttributeError (nova: NotImplementedError);
  ``properties.get(name)`` gives None as in nova.

A plugin that imports ``nova.conf`` registers nova's options on the configuration novasched
has already read: an option both define keeps novasched's definition (same name, same
value from the same nova.conf), so nova code reads the operator's settings.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import logging
import sys
import threading
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import Any

from oslo_config import cfg

from scheduler.exceptions import ConfigurationError

LOG = logging.getLogger(__name__)

# where nova keeps its own filters and weighers: a path there to a class we implement loads ours
NOVA_FILTERS_PACKAGE = "nova.scheduler.filters"
NOVA_WEIGHERS_PACKAGE = "nova.scheduler.weights"
REPACKAGING_GUIDE = 'docs/plugins.md, "Repackaging a nova filter or weigher as a novasched plugin"'

_IMPORT_LOCK = threading.Lock()
_nova_prepared = False


class NovaPluginImportError(ConfigurationError):
    """A filter or weigher class named by its path cannot be imported: the service does not
    start. The message names the module, the import error and the way out."""

    def __init__(self, kind: str, path: str, module: str, error: BaseException | str):
        self.kind = kind
        self.path = path
        self.module = module
        self.error = error
        detail = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        super().__init__(
            f"Cannot load the {kind} {path}: module {module!r}: {detail}. novasched imports "
            f"a {kind} named by class path in its own Python ({sys.executable}): install the "
            f"package that provides it there (with nova, when the class is written against "
            f"nova's base classes), or repackage it as a novasched plugin registered under an "
            f"entry point; see {REPACKAGING_GUIDE}."
        )


def short_name(path: str) -> str:
    """``nova.scheduler.filters.compute_filter.ComputeFilter`` -> ``ComputeFilter``."""
    return path.strip().rsplit(".", 1)[-1]


def registered_path(path: str, targets: Mapping[str, str], nova_package: str) -> str | None:
    """The registered plugin name a dotted class path stands for, or None when the path must
    be imported: nova's path to a built-in we implement
    (``nova.scheduler.filters.compute_filter.ComputeFilter``), or the very class an entry
    point names. ``targets`` maps each entry point name to its ``module.attr`` path."""
    name = short_name(path)
    target = targets.get(name)
    if target is None:
        return None
    if path.startswith(nova_package + ".") or path == target:
        return name
    return None


def nova_installed() -> bool:
    """Whether nova can be imported in this Python (without importing it)."""
    try:
        return importlib.util.find_spec("nova") is not None
    except (ImportError, ValueError):
        return False


def import_plugin(path: str, kind: str) -> list[type]:
    """The classes ``path`` names: a class, or a function returning classes (nova's
    ``all_filters`` style). Raises NovaPluginImportError with the module and the error."""
    module_name, _, attr = path.strip().rpartition(".")
    if not module_name:
        raise NovaPluginImportError(kind, path, path, "not a dotted class path")
    with _IMPORT_LOCK, _nova_options_shared():
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:  # an ImportError, or the module failing as it loads
            raise NovaPluginImportError(kind, path, module_name, exc) from exc
        if "nova" in sys.modules:
            _prepare_nova(kind, path)
    found = getattr(module, attr, None)
    if inspect.isclass(found):
        return [found]
    if inspect.isfunction(found):
        with _IMPORT_LOCK, _nova_options_shared():
            classes = list(found())
        return [c for c in classes if inspect.isclass(c)]
    if found is None:
        raise NovaPluginImportError(kind, path, module_name, f"it has no attribute {attr!r}")
    raise NovaPluginImportError(
        kind, path, module_name, f"{attr!r} is a {type(found).__name__}, not a class"
    )


def _prepare_nova(kind: str, path: str) -> None:
    """Import what nova's base classes import lazily on their first call (its configuration,
    ``nova.scheduler.utils``) while nova's options can still share ours, and register nova's
    objects as nova-scheduler does at start-up."""
    global _nova_prepared
    if _nova_prepared:
        return
    for module in ("nova.conf", "nova.scheduler.utils", "nova.objects"):
        try:
            importlib.import_module(module)
        except Exception as exc:
            raise NovaPluginImportError(kind, path, module, exc) from exc
    sys.modules["nova.objects"].register_all()
    _nova_prepared = True


@contextmanager
def _nova_options_shared() -> Iterator[None]:
    """While nova's modules import, an option nova registers under a name novasched already
    registered in the same group keeps novasched's definition, instead of oslo.config's
    DuplicateOptError (the two differ in help texts only, or in what novasched does not
    implement). Both read the same nova.conf."""
    original = cfg._is_opt_registered

    def keep_ours(opts: dict[str, Any], opt: cfg.Opt) -> bool:
        try:
            return original(opts, opt)
        except cfg.DuplicateOptError:
            return True

    cfg._is_opt_registered = keep_ours
    try:
        yield
    finally:
        cfg._is_opt_registered = original


# -- the views ------------------------------------------------------------------------------


class _RequestLimits(MutableMapping):
    """``host_state.limits`` for a nova plugin: this request's limits for the host, written
    through to the request (``set_host_limit``) so that they reach the host's Selection."""

    __slots__ = ("_request", "_host", "_own")

    def __init__(self, request: Any, host: Any):
        self._request = request if hasattr(request, "set_host_limit") else None
        self._host = host
        self._own: dict[str, Any] = {}

    def _values(self) -> Mapping[str, Any]:
        if self._request is None:
            return self._own
        return self._request.limits_for(self._host)

    def __getitem__(self, key: str) -> Any:
        return self._values()[key]

    def __setitem__(self, key: str, value: Any) -> None:
        if self._request is None:
            self._own[key] = value
        else:
            self._request.set_host_limit(self._host, key, value)

    def __delitem__(self, key: str) -> None:
        values = self._values()
        if key not in values:
            raise KeyError(key)
        del values[key]  # the request's own dict for this host

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._values()))

    def __len__(self) -> int:
        return len(self._values())

    def __repr__(self) -> str:
        return repr(dict(self._values()))


class _Metric:
    """One monitor metric as nova's MonitorMetric shows it."""

    __slots__ = ("name", "value", "timestamp", "source", "numa_membw_values", "_raw")

    def __init__(self, raw: Mapping[str, Any]):
        self._raw = raw
        self.name = raw.get("name")
        self.value = raw.get("value")
        self.timestamp = raw.get("timestamp")
        self.source = raw.get("source")
        self.numa_membw_values = raw.get("numa_membw_values")

    def to_dict(self) -> dict[str, Any]:
        return dict(self._raw)

    def __repr__(self) -> str:
        return f"MonitorMetric({self.name}={self.value})"


class _Metrics(list):
    """``host_state.metrics`` as nova's MonitorMetricList: iterable metrics, ``to_list()``."""

    def to_list(self) -> list[dict[str, Any]]:
        return [m.to_dict() for m in self]


_HOST_SLOTS = ("_host", "_request", "_limits", "_extra")


class NovaHostState:
    """One of our HostStates as a nova plugin reads nova's HostState (see the module
    docstring for what differs). Made per call; what a plugin assigns stays on it."""

    __slots__ = _HOST_SLOTS

    def __init__(self, host: Any, request: Any = None):
        object.__setattr__(self, "_host", host)
        object.__setattr__(self, "_request", request)
        object.__setattr__(self, "_limits", None)
        object.__setattr__(self, "_extra", None)

    @property
    def limits(self) -> _RequestLimits:
        limits = self._limits
        if limits is None:
            limits = _RequestLimits(self._request, self._host)
            object.__setattr__(self, "_limits", limits)
        return limits

    @property
    def allocation_candidates(self) -> list[dict[str, Any]]:
        candidates_for = getattr(self._request, "candidates_for", None)
        return list(candidates_for(self._host)) if candidates_for is not None else []

    @property
    def metrics(self) -> _Metrics:
        return _Metrics(_Metric(m) for m in (self._host.metrics or ()) if isinstance(m, Mapping))

    def __getattr__(self, name: str) -> Any:
        # only reached for what the class and its slots do not have
        extra = object.__getattribute__(self, "_extra")
        if extra is not None and name in extra:
            return extra[name]
        try:
            return getattr(object.__getattribute__(self, "_host"), name)
        except AttributeError:
            raise AttributeError(
                f"HostState has no attribute {name!r} in novasched: a nova filter or weigher "
                "can read the attributes listed in scheduler/nova_plugins.py"
            ) from None

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "allocation_candidates":
            keep = getattr(self._request, "keep_candidates", None)
            if keep is not None:
                keep(self._host, list(value))
        elif name == "limits":
            for key, item in dict(value).items():
                self.limits[key] = item
        else:
            extra = self._extra
            if extra is None:
                extra = {}
                object.__setattr__(self, "_extra", extra)
            extra[name] = value

    def __repr__(self) -> str:
        return repr(self._host)


class NovaImageMetaProps:
    """``spec_obj.image.properties`` as nova's ImageMetaProps: ``get``, attributes, ``in``."""

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, Any] | None):
        self._values = dict(values or {})

    def get(self, name: str, defvalue: Any = None) -> Any:
        return self._values.get(name, defvalue)

    def obj_attr_is_set(self, name: str) -> bool:
        return name in self._values

    __contains__ = obj_attr_is_set

    def to_dict(self) -> dict[str, Any]:
        return dict(self._values)

    def __getattr__(self, name: str) -> Any:
        values = object.__getattribute__(self, "_values")
        if name in values:
            return values[name]
        raise AttributeError(
            f"image property {name!r} is not set (nova raises NotImplementedError here); "
            "use properties.get(name) or 'name' in properties"
        )

    def __repr__(self) -> str:
        return f"ImageMetaProps({self._values!r})"


class NovaImageMeta:
    """``spec_obj.image`` as nova's ImageMeta."""

    __slots__ = ("_image", "properties")

    def __init__(self, image: Any):
        self._image = image
        self.properties = NovaImageMetaProps(getattr(image, "properties", None))

    def obj_attr_is_set(self, name: str) -> bool:
        if name == "properties":
            return True
        return getattr(self._image, name, None) is not None

    __contains__ = obj_attr_is_set

    def __getattr__(self, name: str) -> Any:
        try:
            return getattr(object.__getattribute__(self, "_image"), name)
        except AttributeError:
            raise AttributeError(f"ImageMeta has no attribute {name!r} in novasched") from None


# RequestSpec fields of nova 34 that the scheduler is never given what to fill with
_NOT_PROVIDED = frozenset({"security_groups"})


class NovaRequestSpec:
    """The request being scheduled as a nova plugin reads nova's RequestSpec (see the module
    docstring for what differs)."""

    __slots__ = ("_spec", "_image")

    # nova's objects carry the request context; a plugin gets no database or RPC through us
    _context = None

    def __init__(self, spec: Any):
        self._spec = spec
        self._image: Any = None

    @property
    def image(self) -> NovaImageMeta | None:
        if self._image is None:
            image = getattr(self._spec, "image", None)
            if image is None:
                return None
            self._image = NovaImageMeta(image)
        return self._image

    def obj_attr_is_set(self, name: str) -> bool:
        if name == "image":
            return getattr(self._spec, "image", None) is not None
        return name not in _NOT_PROVIDED and getattr(self._spec, name, None) is not None

    __contains__ = obj_attr_is_set

    @property
    def numa_topology(self) -> Any:
        """nova's InstanceNUMATopology data, as the request carried it (ours is decoded)."""
        topology = self._spec.numa_topology
        return dict(topology.as_data()) if topology is not None else None

    @property
    def pci_requests(self) -> list[dict[str, Any]]:
        """nova's InstancePCIRequest data, one dict per request, as the request carried it."""
        return [dict(r.as_data()) for r in self._spec.pci_requests]

    def __getattr__(self, name: str) -> Any:
        if name in _NOT_PROVIDED:
            raise AttributeError(
                f"RequestSpec.{name} is not provided by novasched to nova filters and weighers"
            )
        try:
            return getattr(object.__getattribute__(self, "_spec"), name)
        except AttributeError:
            raise AttributeError(
                f"RequestSpec has no attribute {name!r} in novasched: a nova filter or weigher "
                "can read the fields listed in scheduler/nova_plugins.py"
            ) from None

    def __repr__(self) -> str:
        return f"RequestSpec(instance_uuid={getattr(self._spec, 'instance_uuid', None)!r})"


def request_view(spec: Any) -> NovaRequestSpec | None:
    """``spec`` as a nova plugin reads a RequestSpec (None stays None)."""
    if spec is None or isinstance(spec, NovaRequestSpec):
        return spec
    return NovaRequestSpec(spec)
