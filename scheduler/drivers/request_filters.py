"""Request prefilters: rewrite the Placement query before it is sent, as nova's do.

Each prefilter takes the request and a view of the aggregates and changes the request
(required/forbidden root traits, required or forbidden aggregates). It returns True when it
changed something, and raises RequestFilterFailed when the request can never be placed.
They run in nova's order (``ALL_REQUEST_FILTERS``, nova 34's ``request_filter``).

Names matched (nova's flavor extra specs / ImageMetaProps fields; nova 34):

* ``require_image_type_support``: ``image.disk_format`` → ``COMPUTE_IMAGE_TYPE_<FORMAT>``.
* ``isolate_aggregates``: aggregate metadata ``trait:<TRAIT>=required``.
* ``transform_image_metadata``: ``hw_cdrom_bus``, ``hw_disk_bus``, ``hw_video_model``,
  ``hw_vif_model``, ``hw_architecture``, ``hw_emulation_architecture``, ``hw_viommu_model``.
* ``accelerators_filter``: ``accel:device_profile``.
* ``packed_virtqueue_filter``: ``hw:virtio_packed_ring`` / ``hw_virtio_packed_ring``.
* ``routed_networks_filter``: the ``network_id`` / ``port_id`` of each NetworkRequest →
  ``member_of`` the aggregates of its Neutron segments' resource providers.
* ``remote_managed_ports_filter``: a requested port whose ``binding:vnic_type`` is
  ``remote-managed`` → ``COMPUTE_REMOTE_MANAGED_PORTS``.
* ``ephemeral_encryption_filter``: ``hw:ephemeral_encryption`` / ``hw_ephemeral_encryption``
  and ``hw:ephemeral_encryption_format`` / ``hw_ephemeral_encryption_format``
  (plain, luks, luksv2).
* ``virtio_sound_filter``: ``hw:sound_model`` / ``hw_sound_model``.
* ``tpm_secret_security_filter``: vTPM = ``hw:tpm_version`` / ``hw_tpm_version``; policy
  ``hw:tpm_secret_security`` (flavor only: nova has no image property for it), ``user`` when
  unset.

Where novasched departs from nova 34:

* A flavor/image conflict (``hw:X`` and ``hw_X`` both set and different) or an unknown
  ephemeral encryption format fails the request with NoValidHost and a reason that names both
  values; nova raises FlavorImageConflict / Invalid, which reach the conductor as an
  unexplained remote error (nova-api normally rejects such requests before they get here).
* ``transform_image_metadata`` leaves out only a value os-traits does not know (logged); nova
  then drops every trait of the request. ``hw_viommu_model`` maps to ``COMPUTE_VIOMMU_MODEL_*``,
  the traits the libvirt driver reports; nova 34 builds ``COMPUTE_VIOMMU_<MODEL>``, which no
  trait matches, so in nova an image with that property gets no trait from this prefilter.
* A sound model or TPM version that nova would reject as invalid is not checked here: only
  ``virtio`` matters to the sound prefilter, and any TPM version means a vTPM.
* A missing image or ``disk_format`` skips ``require_image_type_support`` (nova fails).

``routed_networks_filter`` and ``remote_managed_ports_filter`` ask Neutron (through the
``[neutron]`` options, ``placement_client/neutron.py``) and, for the first, Placement
(``GET /resource_providers/{segment}/aggregates``), with nova's calls. They depart from nova 34
in these ways:

* Every failure to get an answer (Neutron or Placement unreachable, timed out or answering
  an error, a port or subnet Neutron does not know, a segment in no aggregate) fails the
  request with NoValidHost and a reason naming the network, port or subnet and the cause,
  and a warning in the log. nova turns only some of them into NoValidHost (a failed subnet
  read, Placement unreachable, a segment in no aggregate); the others (Neutron failing while
  nova reads its extensions or a port, a segment Placement does not know) reach the
  conductor as an unexplained remote error. Both fail the boot.
* Neutron is asked with the ``[neutron]`` credentials for every call; nova reads the ports
  with the user's token (and the service catalog of the request). With ``[neutron]``
  unconfigured, ``remote_managed_ports_filter`` is skipped (one warning) and
  ``routed_networks_filter`` fails the requests that name a network or port.
* The list of Neutron's extensions is read once per ``[neutron] extension_sync_interval``
  by the process; nova reads it once per request.
* A requested network ``auto`` or ``none`` (nova's auto-allocated or no network) asks
  Neutron nothing: nova lists the subnets of a network of that id, and finds none. An entry
  with neither a network nor a port adds nothing (nova reuses the previous entry's
  aggregates, or fails on the first one). Each entry's aggregates are sorted and listed once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import os_traits
from oslo_utils import strutils

from placement_client import neutron
from placement_client.api.errors import PlacementError
from placement_client.from_conf import client_from_conf as placement_client_from_conf
from placement_client.query import build_queries
from scheduler.conf import CONF
from scheduler.exceptions import RequestFilterFailed
from scheduler.objects import Aggregate, Destination, RequestSpec

LOG = logging.getLogger(__name__)

TENANT_METADATA_KEY = "filter_tenant_id"
ISOLATION_METADATA_PREFIX = "trait:"

_KNOWN_TRAITS = frozenset(os_traits.get_traits())

# image property -> trait prefix; the value is upper-cased with '-' turned into '_'
IMAGE_PROPERTY_TRAIT_PREFIXES: tuple[tuple[str, str], ...] = (
    ("hw_cdrom_bus", "COMPUTE_STORAGE_BUS"),
    ("hw_disk_bus", "COMPUTE_STORAGE_BUS"),
    ("hw_video_model", "COMPUTE_GRAPHICS_MODEL"),
    ("hw_vif_model", "COMPUTE_NET_VIF_MODEL"),
    ("hw_architecture", "HW_ARCH"),
    ("hw_emulation_architecture", "COMPUTE_ARCH"),
    ("hw_viommu_model", "COMPUTE_VIOMMU_MODEL"),
)

EPHEMERAL_ENCRYPTION_FORMATS = ("plain", "luks", "luksv2")

TPM_SECRET_SECURITY_TRAITS = {
    "user": os_traits.COMPUTE_SECURITY_TPM_SECRET_SECURITY_USER,
    "host": os_traits.COMPUTE_SECURITY_TPM_SECRET_SECURITY_HOST,
    "deployment": os_traits.COMPUTE_SECURITY_TPM_SECRET_SECURITY_DEPLOYMENT,
}


class AggregateView(Protocol):
    def aggregates_by_metadata(
        self, key: str | None = None, value: str | None = None, key_prefix: str | None = None
    ) -> list[Aggregate]: ...


def _destination(spec: RequestSpec) -> Destination:
    if spec.requested_destination is None:
        spec.requested_destination = Destination()
    return spec.requested_destination


def _image_properties(spec: RequestSpec) -> dict[str, Any]:
    if spec.image is None:
        return {}
    return spec.image.properties or {}


def _flavor_and_image(spec: RequestSpec, key: str) -> tuple[Any, Any]:
    """The flavor's ``hw:<key>`` extra spec and the image's ``hw_<key>`` property."""
    flavor_value = (spec.flavor.extra_specs or {}).get(f"hw:{key}")
    image_value = _image_properties(spec).get(f"hw_{key}")
    return flavor_value, image_value


def _conflict(spec: RequestSpec, key: str, flavor_value: Any, image_value: Any) -> None:
    flavor = spec.flavor.name or spec.flavor.flavorid or "-"
    image = (spec.image.name or spec.image.id or "-") if spec.image is not None else "-"
    raise RequestFilterFailed(
        f"Flavor {flavor} sets hw:{key}={flavor_value} but image {image} sets "
        f"hw_{key}={image_value}; make them agree or drop one of them"
    )


def _unique_setting(spec: RequestSpec, key: str) -> Any:
    """The value of ``hw:<key>``/``hw_<key>``; both set and different fails the request."""
    flavor_value, image_value = _flavor_and_image(spec, key)
    if flavor_value and image_value and flavor_value != image_value:
        _conflict(spec, key, flavor_value, image_value)
    return flavor_value or image_value


def _boolean_setting(spec: RequestSpec, key: str) -> bool:
    """True if ``hw:<key>`` or ``hw_<key>`` says so; both set and different fails."""
    flavor_raw, image_raw = _flavor_and_image(spec, key)
    flavor_value = None if flavor_raw is None else strutils.bool_from_string(flavor_raw)
    image_value = None if image_raw is None else strutils.bool_from_string(image_raw)
    if flavor_value is not None and image_value is not None and flavor_value != image_value:
        _conflict(spec, key, flavor_raw, image_raw)
    return bool(flavor_value or image_value)


def _require_root_trait(spec: RequestSpec, prefilter: str, trait: str) -> None:
    spec.request_level_params.root_required.add(trait)
    LOG.debug("%s request filter added required trait %s", prefilter, trait)


def require_tenant_aggregate(spec: RequestSpec, aggregates: AggregateView, conf=CONF) -> bool:
    """Restrict a project to the aggregates whose ``filter_tenant_id*`` metadata names it."""
    if not conf.scheduler.limit_tenants_to_placement_aggregate:
        return False
    project = spec.project_id
    # one metadata item must both be a tenant key and name the project
    matching = (
        aggregates.aggregates_by_metadata(key_prefix=TENANT_METADATA_KEY, value=project)
        if project
        else []  # value=None would match every tenant's aggregates
    )
    if matching:
        _destination(spec).require_aggregates([agg.uuid for agg in matching])
        LOG.debug(
            "require_tenant_aggregate: project %s limited to %d aggregate(s)",
            project,
            len(matching),
        )
        return True
    if conf.scheduler.placement_aggregate_required_for_tenants:
        LOG.info("Tenant %s has no available aggregates", project)
        raise RequestFilterFailed(
            f"No hosts available for tenant {project}: it is in no aggregate with "
            f"{TENANT_METADATA_KEY}* metadata and placement_aggregate_required_for_tenants is set"
        )
    return False


def map_az_to_placement_aggregate(spec: RequestSpec, aggregates: AggregateView, conf=CONF) -> bool:
    """Send the requested availability zone to Placement as its aggregates."""
    az = spec.availability_zone
    if not az:
        return False
    matching = aggregates.aggregates_by_metadata(key="availability_zone", value=az)
    if not matching:
        # nova adds nothing then: the default AZ is made of hosts in no AZ aggregate
        return False
    _destination(spec).require_aggregates([agg.uuid for agg in matching])
    LOG.debug("map_az_to_placement_aggregate: %s -> %d aggregate(s)", az, len(matching))
    return True


def require_image_type_support(spec: RequestSpec, aggregates: AggregateView, conf=CONF) -> bool:
    """Send the request only to compute nodes that support the image's disk format."""
    if not conf.scheduler.query_placement_for_image_type_support:
        return False
    if spec.is_bfv:
        return False  # the root disk is a volume: the image's disk format does not matter
    disk_format = spec.image.disk_format if spec.image is not None else None
    if not disk_format:
        LOG.debug("require_image_type_support: the image has no disk_format; skipped")
        return False
    trait = f"COMPUTE_IMAGE_TYPE_{disk_format.upper()}"
    if trait not in _KNOWN_TRAITS:
        LOG.error("Computed trait name %r is not valid; is os-traits up to date?", trait)
        return False
    _require_root_trait(spec, "require_image_type_support", trait)
    return True


def compute_status_filter(spec: RequestSpec, aggregates: AggregateView, conf=CONF) -> bool:
    """Leave out compute nodes whose service is disabled (root trait COMPUTE_STATUS_DISABLED)."""
    spec.request_level_params.root_forbidden.add(os_traits.COMPUTE_STATUS_DISABLED)
    return True


def isolate_aggregates(spec: RequestSpec, aggregates: AggregateView, conf=CONF) -> bool:
    """Keep the request out of aggregates reserved (``trait:X=required`` metadata) for traits
    it does not require."""
    if not conf.scheduler.enable_isolated_aggregate_filtering:
        return False
    required = _all_required_traits(spec, conf)
    prefix = ISOLATION_METADATA_PREFIX
    isolated = {
        agg.uuid
        for agg in aggregates.aggregates_by_metadata(key_prefix=prefix, value="required")
        if any(
            key.startswith(prefix) and value == "required" and key[len(prefix) :] not in required
            for key, value in agg.metadata.items()
        )
    }
    if not isolated:
        return False
    _destination(spec).append_forbidden_aggregates(isolated)
    LOG.debug("isolate_aggregates: %d aggregate(s) forbidden", len(isolated))
    return True


def _all_required_traits(spec: RequestSpec, conf) -> set[str]:
    """Every trait a request group of the Placement query requires (flavor ``trait*:``
    extra specs, image ``traits_required``, translated and requested groups), as nova's
    ``ResourceRequest.all_required_traits``; root traits added by prefilters do not count."""
    traits: set[str] = set()
    for group in build_queries(spec, conf)[0].groups:
        traits |= group.required_traits
    return traits


def transform_image_metadata(spec: RequestSpec, aggregates: AggregateView, conf=CONF) -> bool:
    """Send the request only to compute nodes that report the disk and CD-ROM buses, video
    and NIC models, architectures and vIOMMU model the image asks for."""
    if not conf.scheduler.image_metadata_prefilter:
        return False
    properties = _image_properties(spec)
    changed = False
    for prop, prefix in IMAGE_PROPERTY_TRAIT_PREFIXES:
        value = properties.get(prop)
        if value is None or value == "":
            continue
        trait = f"{prefix}_{str(value).replace('-', '_').upper()}"
        if trait not in _KNOWN_TRAITS:
            LOG.error(
                "Image property %s=%s gives trait %r, which os-traits does not know; "
                "it is not required (is os-traits up to date?)",
                prop,
                value,
                trait,
            )
            continue
        _require_root_trait(spec, "transform_image_metadata", trait)
        changed = True
    return changed


def accelerators_filter(spec: RequestSpec, aggregates: AggregateView, conf=CONF) -> bool:
    """Send requests for accelerators (``accel:device_profile``) only to compute nodes that
    can attach them."""
    if not (spec.flavor.extra_specs or {}).get("accel:device_profile"):
        return False
    _require_root_trait(spec, "accelerators_filter", os_traits.COMPUTE_ACCELERATORS)
    return True


def packed_virtqueue_filter(spec: RequestSpec, aggregates: AggregateView, conf=CONF) -> bool:
    """Send requests for packed virtqueues only to compute nodes that support them."""
    if not _boolean_setting(spec, "virtio_packed_ring"):
        return False
    _require_root_trait(spec, "packed_virtqueue_filter", os_traits.COMPUTE_NET_VIRTIO_PACKED)
    return True


def ephemeral_encryption_filter(spec: RequestSpec, aggregates: AggregateView, conf=CONF) -> bool:
    """Send requests for encrypted ephemeral storage only to compute nodes that can encrypt
    it (in the requested format, if one is given)."""
    if not _boolean_setting(spec, "ephemeral_encryption"):
        return False
    _require_root_trait(spec, "ephemeral_encryption_filter", os_traits.COMPUTE_EPHEMERAL_ENCRYPTION)
    eph_format = _unique_setting(spec, "ephemeral_encryption_format")
    if eph_format:
        if eph_format not in EPHEMERAL_ENCRYPTION_FORMATS:
            raise RequestFilterFailed(
                f"Invalid ephemeral encryption format {eph_format}. "
                f"Allowed values: {', '.join(EPHEMERAL_ENCRYPTION_FORMATS)}"
            )
        _require_root_trait(
            spec,
            "ephemeral_encryption_filter",
            f"COMPUTE_EPHEMERAL_ENCRYPTION_{eph_format.upper()}",
        )
    return True


def virtio_sound_filter(spec: RequestSpec, aggregates: AggregateView, conf=CONF) -> bool:
    """Send requests for a virtio sound device only to compute nodes that support it."""
    if _unique_setting(spec, "sound_model") != "virtio":
        return False
    _require_root_trait(spec, "virtio_sound_filter", os_traits.COMPUTE_SOUND_MODEL_VIRTIO)
    return True


def tpm_secret_security_filter(spec: RequestSpec, aggregates: AggregateView, conf=CONF) -> bool:
    """Send requests for a vTPM only to compute nodes that keep its secret as the flavor's
    ``hw:tpm_secret_security`` asks (``user`` when unset)."""
    if _unique_setting(spec, "tpm_version") is None:
        return False
    security = (spec.flavor.extra_specs or {}).get("hw:tpm_secret_security") or "user"
    trait = TPM_SECRET_SECURITY_TRAITS.get(security)
    if trait is None:
        LOG.warning("TPM secret security %r is not supported", security)
        raise RequestFilterFailed(
            f"TPM secret security '{security}' is not supported "
            f"(hw:tpm_secret_security must be one of {', '.join(TPM_SECRET_SECURITY_TRAITS)})"
        )
    _require_root_trait(spec, "tpm_secret_security_filter", trait)
    return True


# nova's NetworkRequest ids that name no network: auto-allocate one, or none at all
_NO_NETWORK_IDS = ("auto", "none")


class _ConfiguredClients:
    """The Neutron and Placement clients of the prefilters, built from the configuration on
    first use and again when their option group changes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clients: dict[str, tuple[Any, Any]] = {}

    def get(self, group: str, conf, build: Callable[[Any], Any]) -> Any:
        key = (id(conf), _options_signature(conf, group))
        with self._lock:
            known = self._clients.get(group)
            if known is not None and known[0] == key:
                return known[1]
            client = build(conf)
            self._clients[group] = (key, client)
            return client


def _options_signature(conf, group: str) -> tuple[tuple[str, str], ...]:
    opts = conf[group]
    return tuple(sorted((name, repr(opts[name])) for name in opts))


_CLIENTS = _ConfiguredClients()
_NEUTRON_UNCONFIGURED_WARNED = threading.Event()


def _neutron_client(conf) -> neutron.NeutronClient:
    """The Neutron client of ``[neutron]``; RequestFilterFailed if it cannot be built."""
    try:
        return _CLIENTS.get(neutron.GROUP, conf, neutron.client_from_conf)
    except neutron.NeutronError as exc:
        LOG.warning("Cannot ask Neutron: %s", exc)
        raise RequestFilterFailed(str(exc)) from exc


def _placement_client(conf) -> Any:
    """The Placement client of ``[placement]`` (nova's report client singleton)."""
    return _CLIENTS.get("placement", conf, placement_client_from_conf)


def _request_id(spec: RequestSpec) -> str | None:
    return getattr(spec, "request_id", None)


def _names_network_or_port(requested: dict[str, Any]) -> bool:
    network_id = requested.get("network_id")
    return bool(requested.get("port_id")) or bool(network_id and network_id not in _NO_NETWORK_IDS)


def _refuse(spec: RequestSpec, reason: str, exc: Exception) -> RequestFilterFailed:
    LOG.warning("[%s] %s: %s", _request_id(spec) or "-", reason, exc)
    return RequestFilterFailed(f"{reason}: {exc}")


def routed_networks_filter(spec: RequestSpec, aggregates: AggregateView, conf=CONF) -> bool:
    """Send a request that names networks or ports only to hosts in the aggregates of their
    routed network segments."""
    if not conf.scheduler.query_placement_for_routed_network_aggregates:
        return False
    requested = [r for r in spec.requested_networks or [] if _names_network_or_port(r)]
    if not requested:
        # nothing named yet: nova-compute allocates the network after scheduling
        return False
    client = _neutron_client(conf)
    placement = _placement_client(conf)
    changed = False
    for requested_network in requested:
        network_id, aggs = _routed_aggregates(spec, requested_network, client, placement)
        if aggs:
            # ANDed with every other requested aggregate, like another NIC's
            _destination(spec).require_aggregates(aggs)
            LOG.debug(
                "routed_networks_filter request filter added the following aggregates for "
                "network ID %s: %s",
                network_id,
                ", ".join(aggs),
            )
            changed = True
    return changed


def _routed_aggregates(
    spec: RequestSpec,
    requested_network: dict[str, Any],
    client: neutron.NeutronClient,
    placement: Any,
) -> tuple[str | None, list[str]]:
    """The network id and the aggregates one requested network or port must be in: the
    segment of the subnet of a port that has an IP address, else the segments of the
    (port's) network."""
    request_id = _request_id(spec)
    port_id = requested_network.get("port_id")
    if port_id:
        try:
            port = client.show_port(port_id, request_id)
        except neutron.NeutronError as exc:
            raise _refuse(spec, f"Aggregates not found for the port {port_id}", exc) from exc
        fixed_ips = port.get("fixed_ips") or []
        if fixed_ips:
            # the port already has an address: stay on its (first) subnet's segment
            subnet_id = fixed_ips[0].get("subnet_id")
            what = f"the subnet {subnet_id}"
            try:
                segment = client.segment_id_for_subnet(subnet_id, request_id)
            except neutron.NeutronError as exc:
                raise _refuse(spec, f"Aggregates not found for {what}", exc) from exc
            segments = [segment] if segment else []
            return None, _segment_aggregates(spec, segments, placement, what)
        network_id = port.get("network_id")
    else:
        network_id = requested_network.get("network_id")
    if not network_id:
        return None, []
    what = f"the network {network_id}"
    try:
        segments = client.segment_ids_for_network(network_id, request_id)
    except neutron.NeutronError as exc:
        raise _refuse(spec, f"Aggregates not found for {what}", exc) from exc
    # a network that is not routed has no segment: any host will do
    return network_id, _segment_aggregates(spec, segments, placement, what)


def _segment_aggregates(
    spec: RequestSpec, segments: list[str], placement: Any, what: str
) -> list[str]:
    """The Placement aggregates of the segments' resource providers (Neutron's segments
    plugin puts each segment's provider, and its hosts, in one aggregate)."""
    out: list[str] = []
    for segment in segments:
        try:
            found = placement.get_aggregates(segment, request_id=_request_id(spec))
        except PlacementError as exc:
            raise _refuse(
                spec,
                f"Aggregates not found for {what}: Placement could not give the aggregates "
                f"of segment {segment}",
                exc,
            ) from exc
        if not found:
            reason = (
                f"Aggregates not found for {what}: the resource provider of segment "
                f"{segment} is in no aggregate in Placement"
            )
            LOG.warning("[%s] %s", _request_id(spec) or "-", reason)
            raise RequestFilterFailed(
                f"{reason} (Neutron's segments plugin should have put it in one; check "
                "its [placement] options)"
            )
        for agg in sorted(found):
            if agg not in out:
                out.append(agg)
    return out


def remote_managed_ports_filter(spec: RequestSpec, aggregates: AggregateView, conf=CONF) -> bool:
    """Send a request with remote-managed ports (smart NIC DPUs) only to compute nodes that
    can bind them."""
    port_ids = [r.get("port_id") for r in spec.requested_networks or [] if r.get("port_id")]
    if not port_ids:
        return False
    if not neutron.is_configured(conf):
        if not _NEUTRON_UNCONFIGURED_WARNED.is_set():
            _NEUTRON_UNCONFIGURED_WARNED.set()
            LOG.warning(
                "[neutron] is not configured: remote_managed_ports_filter is skipped and "
                "requests with remote-managed ports are scheduled without %s; set [neutron] "
                "auth_type and its credentials as nova-scheduler's nova.conf has them",
                os_traits.COMPUTE_REMOTE_MANAGED_PORTS,
            )
        return False
    client = _neutron_client(conf)
    changed = False
    for port_id in port_ids:  # every port, as nova: any one of them may fail the request
        try:
            remote = client.is_remote_managed_port(port_id, _request_id(spec))
        except neutron.NeutronError as exc:
            raise _refuse(spec, f"Cannot tell the vnic_type of port {port_id}", exc) from exc
        if remote:
            _require_root_trait(
                spec, "remote_managed_ports_filter", os_traits.COMPUTE_REMOTE_MANAGED_PORTS
            )
            changed = True
    return changed


RequestFilter = Callable[[RequestSpec, AggregateView], bool]

# nova-compute reports OWNER_NOVA on its root providers from service version 73 on
OWNER_NOVA_MIN_COMPUTE_VERSION = 73


def owner_nova_filter(spec: RequestSpec, aggregates: AggregateView, conf=CONF) -> bool:
    """Ask only for providers that nova-compute owns (root trait OWNER_NOVA), once every
    nova-compute of the enabled cells runs a version that reports it, as nova does."""
    minimum = getattr(aggregates, "minimum_compute_version", None)
    version = minimum() if callable(minimum) else None
    if version is None or version < OWNER_NOVA_MIN_COMPUTE_VERSION:
        return False
    spec.request_level_params.root_required.add(os_traits.OWNER_NOVA)
    return True


ALL_REQUEST_FILTERS: list[tuple[str, Callable[..., bool]]] = [
    ("require_tenant_aggregate", require_tenant_aggregate),
    ("map_az_to_placement_aggregate", map_az_to_placement_aggregate),
    ("require_image_type_support", require_image_type_support),
    ("compute_status_filter", compute_status_filter),
    ("isolate_aggregates", isolate_aggregates),
    ("transform_image_metadata", transform_image_metadata),
    ("accelerators_filter", accelerators_filter),
    ("packed_virtqueue_filter", packed_virtqueue_filter),
    ("routed_networks_filter", routed_networks_filter),
    ("remote_managed_ports_filter", remote_managed_ports_filter),
    ("ephemeral_encryption_filter", ephemeral_encryption_filter),
    ("virtio_sound_filter", virtio_sound_filter),
    ("tpm_secret_security_filter", tpm_secret_security_filter),
    ("owner_nova_filter", owner_nova_filter),
]


def process_reqspec(spec: RequestSpec, aggregates: AggregateView, conf=CONF) -> list[str]:
    """Run every prefilter in order; return the names of those that changed the request."""
    applied = []
    for name, fn in ALL_REQUEST_FILTERS:
        start = time.perf_counter()
        if fn(spec, aggregates, conf):
            applied.append(name)
            if LOG.isEnabledFor(logging.DEBUG):
                LOG.debug(
                    "Request filter %r took %.1f ms", name, (time.perf_counter() - start) * 1000
                )
    return applied


def warn_unimplemented_toggles(conf=CONF) -> list[str]:
    """Log one warning per enabled toggle of a prefilter that cannot run as configured;
    return the options' names."""
    names = []
    if conf.scheduler.query_placement_for_routed_network_aggregates and not neutron.is_configured(
        conf
    ):
        names.append("query_placement_for_routed_network_aggregates")
        LOG.warning(
            "[scheduler] query_placement_for_routed_network_aggregates is set but the "
            "routed_networks_filter prefilter needs Neutron and [neutron] is not configured: "
            "requests that name a network or port fail with NoValidHost until [neutron] "
            "auth_type (and its credentials) or endpoint_override is set"
        )
    return names
