"""The smallest local stand-ins for Glance's image API and Neutron that a real nova 34 needs.

Both are threaded HTTP servers on 127.0.0.1 in the test process. They keep a count of the
requests they answered, by method and path shape, for a failing test's message.

* Glance: ``GET /v2/schemas/image`` (the image schema glanceclient validates every image
  against), ``GET /v2/images/{id}``, and what shelve's snapshot does: create, patch, upload,
  delete.
* Neutron: networks (each with one subnet) and ports that a test adds, in memory, and the
  bridges the Open vSwitch agents report to Placement (``NeutronStandIn.report_ovs_agent``).
  What nova 34 asks of it (``nova/network/neutron.py``): ``GET /v2.0/extensions`` (nova
  caches it; ``port-resource-request-groups`` is listed), ``GET /v2.0/{networks,subnets,
  ports}`` filtered by the query (``id``, ``device_id``, ``tenant_id``, ``network_id``,
  ``device_owner``...: nova lists a server's ports on boot, delete and every move, even for
  servers booted with ``"networks": "none"``, which find none) and cut to its ``fields``;
  ``GET /v2.0/{collection}/{id}`` (a port's ``resource_request``, a network's physnet), 404 as
  Neutron words it when missing; ``PUT /v2.0/ports/{id}`` (nova binds a port with
  ``device_id``, ``binding:host_id`` and ``binding:profile.allocation`` on boot, and unbinds
  it on delete), ``DELETE /v2.0/ports/{id}``. Collections it does not hold (security groups,
  floating IPs...) are empty; other writes answer an empty body.
"""

from __future__ import annotations

import copy
import ipaddress
import json
import re
import threading
import uuid
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

# Glance v2's image schema, as glance serves it: glanceclient builds its image model from this
# and rejects an image that does not validate (additional properties must be strings).
_STR_OR_NULL = {"type": ["null", "string"]}
IMAGE_SCHEMA: dict[str, Any] = {
    "name": "image",
    "additionalProperties": {"type": "string"},
    "links": [
        {"href": "{self}", "rel": "self"},
        {"href": "{file}", "rel": "enclosure"},
        {"href": "{schema}", "rel": "describedby"},
    ],
    "properties": {
        "id": {
            "type": "string",
            "pattern": "^([0-9a-fA-F]){8}-([0-9a-fA-F]){4}-([0-9a-fA-F]){4}"
            "-([0-9a-fA-F]){4}-([0-9a-fA-F]){12}$",
        },
        "name": {"type": ["null", "string"], "maxLength": 255},
        "status": {
            "type": "string",
            "readOnly": True,
            "enum": [
                "queued",
                "saving",
                "active",
                "killed",
                "deleted",
                "uploading",
                "importing",
                "pending_delete",
                "deactivated",
            ],
        },
        "visibility": {"type": "string", "enum": ["community", "public", "private", "shared"]},
        "protected": {"type": "boolean"},
        "os_hidden": {"type": "boolean"},
        "checksum": {"type": ["null", "string"], "readOnly": True, "maxLength": 32},
        "os_hash_algo": {"type": ["null", "string"], "readOnly": True, "maxLength": 64},
        "os_hash_value": {"type": ["null", "string"], "readOnly": True, "maxLength": 128},
        "owner": {"type": ["null", "string"], "maxLength": 255},
        "size": {"type": ["null", "integer"], "readOnly": True},
        "virtual_size": {"type": ["null", "integer"], "readOnly": True},
        "container_format": {
            "type": ["null", "string"],
            "enum": [None, "ami", "ari", "aki", "bare", "ovf", "ova", "docker", "compressed"],
        },
        "disk_format": {
            "type": ["null", "string"],
            "enum": [
                None,
                "ami",
                "ari",
                "aki",
                "vhd",
                "vhdx",
                "vmdk",
                "raw",
                "qcow2",
                "vdi",
                "iso",
                "ploop",
            ],
        },
        "created_at": {"type": "string", "readOnly": True},
        "updated_at": {"type": "string", "readOnly": True},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 255}},
        "direct_url": {"type": "string", "readOnly": True},
        "min_ram": {"type": "integer"},
        "min_disk": {"type": "integer"},
        "self": {"type": "string", "readOnly": True},
        "file": {"type": "string", "readOnly": True},
        "schema": {"type": "string", "readOnly": True},
        "locations": {"type": "array", "items": {"type": "object"}},
        "stores": {"type": "string", "readOnly": True},
        "kernel_id": _STR_OR_NULL,
        "ramdisk_id": _STR_OR_NULL,
        "instance_uuid": {"type": "string"},
        "architecture": {"type": "string"},
        "os_distro": {"type": "string"},
        "os_version": {"type": "string"},
    },
}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Server:
    """A ThreadingHTTPServer in a daemon thread; ``url`` is its endpoint."""

    def __init__(self, name: str, handler: type[BaseHTTPRequestHandler]):
        self.requests: Counter[str] = Counter()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._httpd.stand_in = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name=name, daemon=True, kwargs={"poll_interval": 0.2}
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def start(self) -> str:
        self._thread.start()
        return self.url

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    @property
    def stand_in(self) -> Any:
        return self.server.stand_in  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
        pass

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            return self.rfile.read(length)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        return b""

    def _reply(self, status: int, body: Any = None, content_type: str = "application/json"):
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        if data:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _count(self, shape: str) -> None:
        with self.stand_in.lock:
            self.stand_in.requests[f"{self.command} {shape}"] += 1


class GlanceStandIn(_Server):
    """Glance's image API v2, images kept in memory."""

    def __init__(self) -> None:
        super().__init__("glance-stand-in", _GlanceHandler)
        self.lock = threading.Lock()
        self.images: dict[str, dict[str, Any]] = {}

    def add_image(self, name: str, **properties: Any) -> str:
        image_id = str(uuid.uuid4())
        image = self._new_image(image_id, name)
        image.update(status="active", size=1024 * 1024, checksum="0" * 32, **properties)
        with self.lock:
            self.images[image_id] = image
        return image_id

    def _new_image(self, image_id: str, name: str | None) -> dict[str, Any]:
        now = _now()
        return {
            "id": image_id,
            "name": name,
            "status": "queued",
            "visibility": "public",
            "protected": False,
            "os_hidden": False,
            "checksum": None,
            "os_hash_algo": None,
            "os_hash_value": None,
            "owner": None,
            "size": None,
            "virtual_size": None,
            "container_format": "bare",
            "disk_format": "raw",
            "created_at": now,
            "updated_at": now,
            "tags": [],
            "min_ram": 0,
            "min_disk": 0,
            "self": f"/v2/images/{image_id}",
            "file": f"/v2/images/{image_id}/file",
            "schema": "/v2/schemas/image",
        }


class _GlanceHandler(_Handler):
    def _image_path(self) -> tuple[str | None, str]:
        parts = self.path.split("?", 1)[0].strip("/").split("/")
        # v2 images {id} [file]
        if len(parts) >= 3 and parts[:2] == ["v2", "images"]:
            return parts[2], "/".join(parts[3:])
        return None, ""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/v2/schemas/image":
            self._count("/v2/schemas/image")
            return self._reply(200, IMAGE_SCHEMA)
        image_id, rest = self._image_path()
        self._count("/v2/images/{id}" if image_id else path)
        if image_id and not rest:
            with self.stand_in.lock:
                image = self.stand_in.images.get(image_id)
            if image is None:
                return self._reply(404, {"message": f"No image found with ID {image_id}"})
            return self._reply(200, image)
        if path == "/v2/images":
            with self.stand_in.lock:
                return self._reply(200, {"images": list(self.stand_in.images.values())})
        return self._reply(404, {"message": f"not served: GET {path}"})

    def do_POST(self) -> None:  # noqa: N802
        self._count("/v2/images")
        if self.path.split("?", 1)[0].rstrip("/") != "/v2/images":
            return self._reply(404, {"message": "not served"})
        body = json.loads(self._body() or b"{}")
        image_id = body.pop("id", None) or str(uuid.uuid4())
        image = self.stand_in._new_image(image_id, body.pop("name", None))
        image.update(body)
        with self.stand_in.lock:
            self.stand_in.images[image_id] = image
        return self._reply(201, image)

    def do_PATCH(self) -> None:  # noqa: N802
        self._count("/v2/images/{id}")
        image_id, _ = self._image_path()
        ops = json.loads(self._body() or b"[]")
        with self.stand_in.lock:
            image = self.stand_in.images.get(image_id or "")
            if image is None:
                return self._reply(404, {"message": f"No image found with ID {image_id}"})
            for op in ops:
                name = op["path"].lstrip("/")
                if op["op"] == "remove":
                    image.pop(name, None)
                else:
                    image[name] = op["value"]
            image["updated_at"] = _now()
            snapshot = dict(image)
        return self._reply(200, snapshot)

    def do_PUT(self) -> None:  # noqa: N802
        self._count("/v2/images/{id}/file")
        image_id, rest = self._image_path()
        data = self._body()
        with self.stand_in.lock:
            image = self.stand_in.images.get(image_id or "")
            if image is None or rest != "file":
                return self._reply(404, {"message": "not served"})
            image.update(status="active", size=len(data), updated_at=_now())
        return self._reply(204)

    def do_DELETE(self) -> None:  # noqa: N802
        self._count("/v2/images/{id}")
        image_id, _ = self._image_path()
        with self.stand_in.lock:
            gone = self.stand_in.images.pop(image_id or "", None)
        return self._reply(204 if gone else 404)


# -- Neutron ----------------------------------------------------------------------------------

# The extensions listed: those of a Neutron with QoS minimum-bandwidth rules. nova 34 asks about
# ``port-resource-request-groups`` (ports' resource_request in the extended format); none of
# the ones that change what nova does with every server (``binding-extended``,
# ``multi-provider``, ``dns-integration``, ``segment``, ``ip-substring-filtering``...) is listed.
NEUTRON_EXTENSIONS = (
    ("binding", "Port Binding"),
    ("provider", "Provider Network"),
    ("qos", "Quality of Service"),
    ("qos-bw-minimum-ingress", "Ingress minimum bandwidth rule"),
    ("port-resource-request", "Port Resource Request"),
    ("port-resource-request-groups", "Port Resource Request Groups"),
)
OVS_AGENT = "Open vSwitch agent"
VNIC_TYPE_NORMAL = "CUSTOM_VNIC_TYPE_NORMAL"
BANDWIDTH_CLASSES = ("NET_BW_EGR_KILOBIT_PER_SEC", "NET_BW_IGR_KILOBIT_PER_SEC")
# what a bound port's binding says with the Open vSwitch mechanism driver
OVS_VIF_DETAILS = {
    "connectivity": "l2",
    "port_filter": True,
    "ovs_hybrid_plug": False,
    "datapath_type": "system",
    "bridge_name": "br-int",
}
_RESOURCES = {"networks": "network", "subnets": "subnet", "ports": "port"}
# what a collection GET's query may hold that filters nothing
_NOT_FILTERS = frozenset({"fields", "limit", "marker", "page_reverse", "sort_dir", "sort_key"})


def physnet_trait(physnet: str) -> str:
    """The trait Neutron gives a physical network's providers (neutron-lib's
    ``placement.utils.physnet_trait``)."""
    return "CUSTOM_PHYSNET_" + re.sub(r"[^A-Z0-9_]+", "_", physnet.upper())


class NeutronStandIn(_Server):
    """Neutron's API v2.0 with the networks (each with one subnet) and ports a test adds, kept
    in memory, and the bridges the Open vSwitch agents reported to Placement
    (``report_ovs_agent``)."""

    def __init__(self) -> None:
        super().__init__("neutron-stand-in", _NeutronHandler)
        self.lock = threading.Lock()
        self.networks: dict[str, dict[str, Any]] = {}
        self.subnets: dict[str, dict[str, Any]] = {}
        self.ports: dict[str, dict[str, Any]] = {}
        # bridge provider uuid -> (host, bridge, physnet), as the agents reported them
        self.bridges: dict[str, tuple[str, str, str]] = {}
        self._next_address: dict[str, int] = {}
        self._next_vlan = 100

    # -- what the tests add -------------------------------------------------------------------
    def add_network(
        self, name: str, physnet: str, project_id: str, cidr: str = "10.20.0.0/24"
    ) -> str:
        """A VLAN network on ``physnet`` owned by ``project_id``, with one IPv4 subnet."""
        network_id, subnet_id, now = str(uuid.uuid4()), str(uuid.uuid4()), _now()
        gateway = str(next(ipaddress.ip_network(cidr).hosts()))
        with self.lock:
            self._next_vlan += 1
            self.networks[network_id] = {
                "id": network_id,
                "name": name,
                "tenant_id": project_id,
                "project_id": project_id,
                "admin_state_up": True,
                "status": "ACTIVE",
                "subnets": [subnet_id],
                "shared": False,
                "router:external": False,
                "port_security_enabled": True,
                "mtu": 1500,
                "provider:network_type": "vlan",
                "provider:physical_network": physnet,
                "provider:segmentation_id": self._next_vlan,
                "availability_zones": [],
                "qos_policy_id": None,
                "description": "",
                "tags": [],
                "revision_number": 1,
                "created_at": now,
                "updated_at": now,
            }
            self.subnets[subnet_id] = {
                "id": subnet_id,
                "name": f"{name}-subnet",
                "network_id": network_id,
                "tenant_id": project_id,
                "project_id": project_id,
                "ip_version": 4,
                "cidr": cidr,
                "gateway_ip": gateway,
                "enable_dhcp": True,
                "allocation_pools": [],
                "dns_nameservers": [],
                "host_routes": [],
                "ipv6_address_mode": None,
                "ipv6_ra_mode": None,
                "segment_id": None,
                "description": "",
                "tags": [],
                "revision_number": 0,
                "created_at": now,
                "updated_at": now,
            }
            self._next_address[subnet_id] = 10
        return network_id

    def add_port(
        self, network_id: str, project_id: str, *, minimum_kbps: tuple[int, int] | None = None
    ) -> str:
        """An unbound port on ``network_id`` with one address of its subnet. ``minimum_kbps``
        (egress, ingress): a QoS policy's minimum-bandwidth rules, which Neutron shows in the
        port's ``resource_request`` (extended format, ``port-resource-request-groups``): one
        group asking for both bandwidth classes with the network's physnet trait and
        ``CUSTOM_VNIC_TYPE_NORMAL``, and that group as the ``same_subtree``."""
        port_id, now = str(uuid.uuid4()), _now()
        mac = "fa:16:3e:" + ":".join(f"{b:02x}" for b in uuid.uuid4().bytes[:3])
        with self.lock:
            network = self.networks[network_id]
            (subnet_id,) = network["subnets"]
            subnet = self.subnets[subnet_id]
            index = self._next_address[subnet_id]
            self._next_address[subnet_id] = index + 1
            address = str(ipaddress.ip_network(subnet["cidr"])[index])
            physnet = network["provider:physical_network"]
        resource_request = None
        if minimum_kbps is not None:
            # Neutron names the group after the port and the kind of rules it holds
            group = str(uuid.uuid5(uuid.UUID(port_id), "minimum_bandwidth"))
            resource_request = {
                "request_groups": [
                    {
                        "id": group,
                        "required": [physnet_trait(physnet), VNIC_TYPE_NORMAL],
                        "resources": dict(zip(BANDWIDTH_CLASSES, minimum_kbps, strict=True)),
                    }
                ],
                "same_subtree": [group],
            }
        port = {
            "id": port_id,
            "name": "",
            "network_id": network_id,
            "tenant_id": project_id,
            "project_id": project_id,
            "mac_address": mac,
            "admin_state_up": True,
            "status": "DOWN",
            "device_id": "",
            "device_owner": "",
            "fixed_ips": [{"subnet_id": subnet_id, "ip_address": address}],
            "allowed_address_pairs": [],
            "extra_dhcp_opts": [],
            "security_groups": [],
            "port_security_enabled": True,
            "qos_policy_id": str(uuid.uuid4()) if minimum_kbps is not None else None,
            "qos_network_policy_id": None,
            "resource_request": resource_request,
            "binding:host_id": "",
            "binding:profile": {},
            "binding:vif_type": "unbound",
            "binding:vif_details": {},
            "binding:vnic_type": "normal",
            "description": "",
            "tags": [],
            "revision_number": 1,
            "created_at": now,
            "updated_at": now,
        }
        with self.lock:
            self.ports[port_id] = port
        return port_id

    def port(self, port_id: str) -> dict[str, Any]:
        """The port as Neutron shows it to an admin."""
        with self.lock:
            return copy.deepcopy(self.ports[port_id])

    # -- what the Open vSwitch agents report to Placement ------------------------------------
    def report_ovs_agent(
        self, placement: Any, host: str, bridges: Iterable[tuple[str, str, int]]
    ) -> dict[str, str]:
        """What neutron-openvswitch-agent on ``host`` makes in Placement (``placement``: a
        client of its API with ``get``, ``post`` and ``put``) when its
        ``resource_provider_bandwidths`` are set: under the compute node's provider, the
        agent's provider ``<host>:Open vSwitch agent`` with ``CUSTOM_VNIC_TYPE_NORMAL``, and
        under it, per ``(bridge, physnet, kbps)``, ``<host>:Open vSwitch agent:<bridge>`` with
        ``kbps`` of egress and of ingress bandwidth, the physnet's trait and
        ``CUSTOM_VNIC_TYPE_NORMAL``. Idempotent; returns the bridges' provider uuids."""
        root = _provider_named(placement, host)
        if root is None:
            raise AssertionError(f"no resource provider {host!r} in Placement")
        agent = _child_provider(placement, f"{host}:{OVS_AGENT}", root["uuid"])
        _set_traits(placement, agent, [VNIC_TYPE_NORMAL])
        made = {}
        for bridge, physnet, kbps in bridges:
            provider = _child_provider(placement, f"{host}:{OVS_AGENT}:{bridge}", agent)
            inventory = {
                "total": kbps,
                "reserved": 0,
                "min_unit": 1,
                "max_unit": kbps,
                "step_size": 1,
                "allocation_ratio": 1.0,
            }
            _set_inventories(placement, provider, dict.fromkeys(BANDWIDTH_CLASSES, inventory))
            _set_traits(placement, provider, [physnet_trait(physnet), VNIC_TYPE_NORMAL])
            with self.lock:
                self.bridges[provider] = (host, bridge, physnet)
            made[bridge] = provider
        return made

    # -- what the handler serves -------------------------------------------------------------
    def _items(self, collection: str) -> dict[str, dict[str, Any]] | None:
        return {"networks": self.networks, "subnets": self.subnets, "ports": self.ports}.get(
            collection
        )

    def list_items(self, collection: str, query: dict[str, list[str]]) -> list[dict[str, Any]]:
        """The items of ``collection`` that every filter of ``query`` matches (a collection
        the stand-in does not hold is empty), cut to its ``fields``."""
        with self.lock:
            items = self._items(collection) or {}
            found = [copy.deepcopy(i) for i in items.values() if _matches(i, query)]
        return [_only(item, query.get("fields")) for item in found]

    def show_item(
        self, collection: str, item_id: str, fields: list[str] | None
    ) -> dict[str, Any] | None:
        with self.lock:
            item = (self._items(collection) or {}).get(item_id)
            item = copy.deepcopy(item) if item is not None else None
        return None if item is None else _only(item, fields)

    def update_port(self, port_id: str, changes: dict[str, Any]) -> dict[str, Any] | None:
        """Neutron's ``PUT /v2.0/ports/{id}``: the attributes given replace the port's
        (``binding:profile`` whole); a change of ``binding:host_id`` or ``binding:profile``
        binds the port again (``_bind``). None: no such port."""
        with self.lock:
            port = self.ports.get(port_id)
            if port is None:
                return None
            for key, value in changes.items():
                if value is None and key in ("binding:host_id", "binding:profile"):
                    value = {} if key == "binding:profile" else ""
                port[key] = copy.deepcopy(value)
            if "binding:host_id" in changes or "binding:profile" in changes:
                self._bind(port)
            port["revision_number"] += 1
            port["updated_at"] = _now()
            return copy.deepcopy(port)

    def delete_port(self, port_id: str) -> bool:
        with self.lock:
            return self.ports.pop(port_id, None) is not None

    def _bind(self, port: dict[str, Any]) -> None:
        """Bind ``port`` (lock held) as ML2 with the Open vSwitch mechanism driver does: no
        host, unbound; a port with a resource request binds only where the providers its
        ``binding:profile.allocation`` names (one per request group) are bridges of that
        host's agent, else ``binding_failed`` (nova then fails the build). The agent reports
        the port up at once (the fake virt driver plugs nothing)."""
        host = port["binding:host_id"]
        if not host:
            port.update(
                {"binding:vif_type": "unbound", "binding:vif_details": {}, "status": "DOWN"}
            )
            return
        groups = (port.get("resource_request") or {}).get("request_groups") or []
        allocation = port["binding:profile"].get("allocation")
        if groups and not (
            isinstance(allocation, dict)
            and set(allocation) == {g["id"] for g in groups}
            and all(self.bridges.get(rp, ("",))[0] == host for rp in allocation.values())
        ):
            port.update(
                {"binding:vif_type": "binding_failed", "binding:vif_details": {}, "status": "DOWN"}
            )
            return
        port.update(
            {
                "binding:vif_type": "ovs",
                "binding:vif_details": dict(OVS_VIF_DETAILS),
                "status": "ACTIVE",
            }
        )


def _matches(item: dict[str, Any], query: dict[str, list[str]]) -> bool:
    """Whether ``item`` passes every filter of a collection GET's ``query`` (a filter's
    values are alternatives; ``fixed_ips=ip_address=...``: one of the port's addresses has
    them)."""
    for key, wanted in query.items():
        if key in _NOT_FILTERS:
            continue
        if key == "fixed_ips":
            pairs = [w.split("=", 1) for w in wanted if "=" in w]
            if not any(all(ip.get(k) == v for k, v in pairs) for ip in item.get("fixed_ips", [])):
                return False
            continue
        value = item.get(key)
        if isinstance(value, bool):
            if str(value).lower() not in {w.lower() for w in wanted}:
                return False
        elif ("" if value is None else str(value)) not in wanted:
            return False
    return True


def _only(item: dict[str, Any], fields: list[str] | None) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k in fields} if fields else item


def _provider_named(placement: Any, name: str) -> dict[str, Any] | None:
    found = placement.get(f"/resource_providers?name={quote(name)}")["resource_providers"]
    return found[0] if found else None


def _child_provider(placement: Any, name: str, parent: str) -> str:
    """The uuid of provider ``name`` under ``parent``, made if missing (its uuid derived from
    the parent's and its name, as Neutron derives its providers' uuids)."""
    found = _provider_named(placement, name)
    if found is None:
        found = placement.post(
            "/resource_providers",
            {
                "name": name,
                "uuid": str(uuid.uuid5(uuid.UUID(parent), name)),
                "parent_provider_uuid": parent,
            },
        )
    return found["uuid"]


def _set_traits(placement: Any, provider: str, traits: list[str]) -> None:
    for trait in traits:
        placement.put(f"/traits/{trait}", ok=(201, 204))
    generation = placement.get(f"/resource_providers/{provider}")["generation"]
    placement.put(
        f"/resource_providers/{provider}/traits",
        {"traits": sorted(traits), "resource_provider_generation": generation},
    )


def _set_inventories(placement: Any, provider: str, inventories: dict[str, Any]) -> None:
    generation = placement.get(f"/resource_providers/{provider}")["generation"]
    placement.put(
        f"/resource_providers/{provider}/inventories",
        {"inventories": inventories, "resource_provider_generation": generation},
    )


class _NeutronHandler(_Handler):
    def _route(self) -> tuple[list[str], dict[str, list[str]]]:
        """The path's parts (``.json`` dropped, as neutronclient may add it) and its query."""
        split = urlsplit(self.path)
        path = split.path.strip("/")
        if path.endswith(".json"):
            path = path[: -len(".json")]
        return (path.split("/") if path else []), parse_qs(split.query, keep_blank_values=True)

    def _not_found(self, collection: str, item_id: str) -> None:
        resource = _RESOURCES.get(collection, "")
        kind = resource.capitalize() + "NotFound"  # neutronclient raises e.g. PortNotFoundClient
        message = f"{resource.capitalize() or 'Resource'} {item_id} could not be found."
        return self._reply(404, {"NeutronError": {"type": kind, "message": message, "detail": ""}})

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        parts, query = self._route()
        if parts in ([], ["v2.0"]):
            self._count("/" + "/".join(parts))
            return self._reply(
                200,
                {
                    "versions": [
                        {
                            "id": "v2.0",
                            "status": "CURRENT",
                            "links": [{"rel": "self", "href": f"{self._base()}/v2.0/"}],
                        }
                    ]
                },
            )
        if len(parts) == 2 and parts[0] == "v2.0":
            self._count(f"/v2.0/{parts[1]}")
            if parts[1] == "extensions":
                extensions = [
                    {
                        "alias": alias,
                        "name": name,
                        "description": name,
                        "updated": "2021-01-01T00:00:00-00:00",
                        "links": [],
                    }
                    for alias, name in NEUTRON_EXTENSIONS
                ]
                return self._reply(200, {"extensions": extensions})
            # (the body's key of /v2.0/security-groups is security_groups)
            key = parts[1].replace("-", "_")
            return self._reply(200, {key: self.stand_in.list_items(parts[1], query)})
        if len(parts) == 3 and parts[0] == "v2.0":
            self._count(f"/v2.0/{parts[1]}/{{id}}")
            item = self.stand_in.show_item(parts[1], parts[2], query.get("fields"))
            if item is None:
                return self._not_found(parts[1], parts[2])
            return self._reply(200, {_RESOURCES[parts[1]]: item})
        self._count("(other GET)")
        return self._not_found("", "/".join(parts))

    def _base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def do_PUT(self) -> None:  # noqa: N802
        parts, _ = self._route()
        body = json.loads(self._body() or b"{}")
        if len(parts) == 3 and parts[:2] == ["v2.0", "ports"]:
            self._count("/v2.0/ports/{id}")
            port = self.stand_in.update_port(parts[2], body.get("port") or {})
            if port is None:
                return self._not_found("ports", parts[2])
            return self._reply(200, {"port": port})
        self._count("(write)")
        return self._reply(200, {})

    def do_POST(self) -> None:  # noqa: N802
        self._count("(write)")
        self._body()
        return self._reply(200, {})

    def do_DELETE(self) -> None:  # noqa: N802
        parts, _ = self._route()
        if len(parts) == 3 and parts[:2] == ["v2.0", "ports"]:
            self._count("/v2.0/ports/{id}")
            if not self.stand_in.delete_port(parts[2]):
                return self._not_found("ports", parts[2])
            return self._reply(204)
        self._count("(delete)")
        return self._reply(204)
