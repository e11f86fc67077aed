"""The request model: typed values the scheduler works on, decoded from nova's wire objects.

These mirror the nova objects the scheduler reads (RequestSpec 1.15 and what it holds,
Selection 1.1), with nova's field names so that filters written for nova read the same.
Nothing here knows about the wire format; ``scheduler/rpc/wire/`` converts at the edge.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scheduler.resources.shapes import InstanceTopology, PciRequest


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data: mappings with string keys, lists for tuples, sorted
    lists for sets, and the text of anything JSON has no type for."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted(jsonable(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return str(value)


@dataclass(slots=True)
class Flavor:
    memory_mb: int
    vcpus: int
    root_gb: int = 0
    ephemeral_gb: int = 0
    swap: int = 0  # MiB, as nova's
    name: str = ""
    flavorid: str = ""
    id: int | None = None
    extra_specs: dict[str, str] = field(default_factory=dict)
    rxtx_factor: float = 1.0
    vcpu_weight: int | None = 0
    disabled: bool = False
    is_public: bool = True
    description: str | None = None


@dataclass(slots=True)
class ImageMeta:
    """An image as the scheduler sees it. ``properties`` holds the ImageMetaProps fields
    that were set (``hw_architecture``, ``img_hv_type``, ``traits_required`` ...)."""

    id: str | None = None
    name: str | None = None
    status: str | None = None
    disk_format: str | None = None
    container_format: str | None = None
    size: int | None = None
    virtual_size: int | None = None
    min_disk: int | None = None
    min_ram: int | None = None
    owner: str | None = None
    properties: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class InstanceGroup:
    uuid: str
    policy: str | None = None
    name: str | None = None
    user_id: str | None = None
    project_id: str | None = None
    rules: dict[str, Any] = field(default_factory=dict)
    members: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)

    @property
    def policies(self) -> list[str]:
        """nova's deprecated list form of ``policy``."""
        return [self.policy] if self.policy else []

    @property
    def max_server_per_host(self) -> int:
        try:
            return int(self.rules.get("max_server_per_host", 1))
        except (TypeError, ValueError):
            return 1


@dataclass(slots=True)
class Destination:
    host: str | None = None
    node: str | None = None
    cell_uuid: str | None = None
    # each entry is "a,b" meaning a OR b; entries are ANDed (nova's format)
    aggregates: list[str] | None = None
    forbidden_aggregates: set[str] = field(default_factory=set)
    allow_cross_cell_move: bool = False

    def require_aggregates(self, aggregates: list[str]) -> None:
        """Add one OR-set of aggregate uuids the host must be in."""
        self.aggregates = list(self.aggregates or [])
        self.aggregates.append(",".join(aggregates))

    def append_forbidden_aggregates(self, aggregates: set[str]) -> None:
        self.forbidden_aggregates |= set(aggregates)


@dataclass(slots=True)
class SchedulerRetries:
    num_attempts: int = 0
    hosts: list[tuple[str, str]] = field(default_factory=list)  # (host, nodename)


@dataclass(slots=True)
class SchedulerLimits:
    numa_topology: Any = None
    vcpu: float | None = None
    disk_gb: float | None = None
    memory_mb: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in ("numa_topology", "vcpu", "disk_gb", "memory_mb"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out


@dataclass(slots=True)
class RequestGroup:
    """One request group of a Placement query (nova's RequestGroup 1.3)."""

    requester_id: str | None = None
    use_same_provider: bool = True
    resources: dict[str, int] = field(default_factory=dict)
    required_traits: set[str] = field(default_factory=set)
    forbidden_traits: set[str] = field(default_factory=set)
    aggregates: list[list[str]] = field(default_factory=list)
    forbidden_aggregates: set[str] = field(default_factory=set)
    in_tree: str | None = None
    provider_uuids: list[str] = field(default_factory=list)


@dataclass(slots=True)
class RequestLevelParams:
    root_required: set[str] = field(default_factory=set)
    root_forbidden: set[str] = field(default_factory=set)
    same_subtree: list[list[str]] = field(default_factory=list)


@dataclass(slots=True)
class RequestSpec:
    """What to schedule: nova's RequestSpec 1.15, the fields the scheduler reads."""

    flavor: Flavor
    num_instances: int = 1
    project_id: str | None = None
    user_id: str | None = None
    availability_zone: str | None = None
    image: ImageMeta | None = None
    instance_uuid: str | None = None
    instance_group: InstanceGroup | None = None
    scheduler_hints: dict[str, list[Any]] = field(default_factory=dict)
    ignore_hosts: list[str] | None = None
    force_hosts: list[str] | None = None
    force_nodes: list[str] | None = None
    requested_destination: Destination | None = None
    retry: SchedulerRetries | None = None
    limits: SchedulerLimits | None = None
    requested_resources: list[RequestGroup] = field(default_factory=list)
    request_level_params: RequestLevelParams = field(default_factory=RequestLevelParams)
    is_bfv: bool = False
    # the guest's NUMA nodes and its PCI devices, decoded at the RPC edge (each keeps nova's
    # data as its ``primitive``, for the wire, the notifications and nova's plugins)
    numa_topology: InstanceTopology | None = None
    pci_requests: tuple[PciRequest, ...] = ()
    # a nova primitive the scheduler passes through (nova's plugins may read it)
    requested_networks: list[dict[str, Any]] = field(default_factory=list)
    # the physnets and tunnel of the request's ports ({"physnets": [...], "tunneled": bool}),
    # which NUMA affinity reads; nova-api sets it on a boot, the conductor sends it
    network_metadata: dict[str, Any] | None = None
    id: int | None = None

    # -- convenience properties, as nova's RequestSpec has them -----------------------------
    @property
    def vcpus(self) -> int:
        return self.flavor.vcpus

    @property
    def memory_mb(self) -> int:
        return self.flavor.memory_mb

    @property
    def root_gb(self) -> int:
        return self.flavor.root_gb

    @property
    def ephemeral_gb(self) -> int:
        return self.flavor.ephemeral_gb

    @property
    def swap(self) -> int:
        return self.flavor.swap

    @property
    def root_required(self) -> set[str]:
        return self.request_level_params.root_required

    @property
    def root_forbidden(self) -> set[str]:
        return self.request_level_params.root_forbidden

    def get_scheduler_hint(self, name: str, default: Any = None) -> Any:
        """A hint's value: one-element lists are unwrapped, as nova does."""
        value = (self.scheduler_hints or {}).get(name)
        if value is None:
            return default
        if isinstance(value, list) and len(value) == 1:
            return value[0]
        return value

    @property
    def is_rebuild(self) -> bool:
        return self.get_scheduler_hint("_nova_check_type") == "rebuild"


@dataclass(slots=True)
class Aggregate:
    id: int
    uuid: str
    name: str
    hosts: set[str] = field(default_factory=set)
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def availability_zone(self) -> str | None:
        return self.metadata.get("availability_zone")


@dataclass(slots=True)
class Selection:
    """One destination (chosen or alternate) for one instance: nova's Selection 1.1."""

    compute_node_uuid: str
    service_host: str
    nodename: str
    cell_uuid: str
    allocation_request: dict[str, Any] | None
    allocation_request_version: str | None
    limits: SchedulerLimits | None = None
    availability_zone: str | None = None

    def to_legacy_dict(self) -> dict[str, Any]:
        """The ``{host, nodename, limits}`` dict of RPC < 4.4 and return_objects=False."""
        limits = self.limits.to_dict() if self.limits else {}
        return {"host": self.service_host, "nodename": self.nodename, "limits": limits}


def request_summary(spec: RequestSpec) -> dict[str, Any]:
    """What was asked, as the document's ``request`` section."""
    f = spec.flavor
    dest = spec.requested_destination
    group = spec.instance_group
    return {
        "flavor": {
            "name": f.name,
            "vcpus": f.vcpus,
            "memory_mb": f.memory_mb,
            "root_gb": f.root_gb,
            "ephemeral_gb": f.ephemeral_gb,
            "swap": f.swap,
            "extra_specs": jsonable(dict(f.extra_specs or {})),
        },
        "image": None
        if spec.image is None
        else {
            "id": spec.image.id,
            "name": spec.image.name,
            "properties": jsonable(dict(spec.image.properties or {})),
        },
        "num_instances": spec.num_instances,
        "availability_zone": spec.availability_zone,
        "project_id": spec.project_id,
        "user_id": spec.user_id,
        "scheduler_hints": jsonable(dict(spec.scheduler_hints or {})),
        "instance_group": None
        if group is None
        else {"uuid": group.uuid, "policy": group.policy, "hosts": list(group.hosts)},
        "force_hosts": list(spec.force_hosts or []),
        "force_nodes": list(spec.force_nodes or []),
        "ignore_hosts": list(spec.ignore_hosts or []),
        "requested_destination": None
        if dest is None
        else {"host": dest.host, "node": dest.node, "cell_uuid": dest.cell_uuid},
        "is_bfv": spec.is_bfv,
        "is_rebuild": spec.is_rebuild,
    }
