"""A local Neutron stand-in for the routed networks and remote-managed ports prefilters.

A threaded HTTP server on 127.0.0.1 (ephemeral port) serving the reads nova's scheduler makes,
with the response shapes of Neutron's API reference (networking API v2.0):

* ``GET /v2.0/extensions``: ``{"extensions": [{"alias", "name", "description", "updated",
  "links"}]}``, with the ``segment`` extension unless ``segment_extension`` is False;
* ``GET /v2.0/subnets?network_id=...&fields=segment_id``: ``{"subnets": [...]}``, each subnet
  cut down to the ``fields`` asked for;
* ``GET /v2.0/subnets/{id}`` and ``GET /v2.0/ports/{id}``: ``{"subnet": {...}}`` /
  ``{"port": {...}}``, or 404 with ``{"NeutronError": {"type", "message", "detail"}}``.

``fail_status`` makes every answer that status (Neutron's error body), ``delay`` holds every
answer that many seconds, ``token`` demands that ``X-Auth-Token``. ``requests`` records what
was asked: ``(path, query, headers)``, the header names in lower case.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

SEGMENT_EXTENSION = {
    "alias": "segment",
    "name": "Segment",
    "description": "Segments extension.",
    "updated": "2016-02-24T17:00:00-00:00",
    "links": [],
}
BINDING_EXTENSION = {
    "alias": "binding",
    "name": "Port Binding",
    "description": "Expose port bindings of a virtual port to external application",
    "updated": "2014-02-03T10:00:00-00:00",
    "links": [],
}


class NeutronStandIn:
    """Neutron's API v2.0 with the networks, subnets and ports a test puts in it."""

    def __init__(self, *, segment_extension: bool = True, token: str | None = None):
        self.segment_extension = segment_extension
        self.token = token
        self.subnets: dict[str, dict[str, Any]] = {}
        self.ports: dict[str, dict[str, Any]] = {}
        self.fail_status: int | None = None
        self.delay = 0.0
        self.requests: list[tuple[str, dict[str, list[str]], dict[str, str]]] = []
        self.lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- content ---------------------------------------------------------------------------------
    def add_subnet(self, network_id: str, segment_id: str | None, cidr: str) -> str:
        subnet_id = str(uuid.uuid4())
        self.subnets[subnet_id] = {
            "id": subnet_id,
            "name": f"subnet-{cidr}",
            "network_id": network_id,
            "segment_id": segment_id,
            "cidr": cidr,
            "ip_version": 4,
            "enable_dhcp": True,
            "gateway_ip": cidr.rsplit(".", 1)[0] + ".1",
            "allocation_pools": [],
            "dns_nameservers": [],
            "host_routes": [],
            "tenant_id": "6f70656e-7374-6163-6b00-70726f6a6563",
            "project_id": "6f70656e-7374-6163-6b00-70726f6a6563",
            "revision_number": 0,
        }
        return subnet_id

    def add_port(
        self,
        network_id: str,
        subnet_id: str | None = None,
        vnic_type: str = "normal",
    ) -> str:
        port_id = str(uuid.uuid4())
        fixed_ips = []
        if subnet_id is not None:
            base = self.subnets[subnet_id]["cidr"].rsplit(".", 1)[0]
            fixed_ips.append({"subnet_id": subnet_id, "ip_address": f"{base}.10"})
        self.ports[port_id] = {
            "id": port_id,
            "name": "",
            "network_id": network_id,
            "admin_state_up": True,
            "status": "DOWN",
            "mac_address": "fa:16:3e:00:00:01",
            "fixed_ips": fixed_ips,
            "device_id": "",
            "device_owner": "",
            "binding:vnic_type": vnic_type,
            "binding:host_id": "",
            "binding:profile": {},
            "binding:vif_type": "unbound",
            "binding:vif_details": {},
            "tenant_id": "6f70656e-7374-6163-6b00-70726f6a6563",
            "project_id": "6f70656e-7374-6163-6b00-70726f6a6563",
            "revision_number": 1,
        }
        return port_id

    def paths(self) -> list[str]:
        with self.lock:
            return [path for path, _, _ in self.requests]

    # -- serving -------------------------------------------------------------------------------
    def start(self) -> str:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._server.stand_in = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            name="neutron-stand-in",
            daemon=True,
            # shutdown() waits for the loop to notice, up to one poll interval
            kwargs={"poll_interval": 0.02},
        )
        self._thread.start()
        return self.url

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> NeutronStandIn:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Handler(BaseHTTPRequestHandler):
    server: ThreadingHTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        stand_in: NeutronStandIn = self.server.stand_in  # type: ignore[attr-defined]
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        with stand_in.lock:
            headers = {k.lower(): v for k, v in self.headers.items()}
            stand_in.requests.append((parts.path, query, headers))
        if stand_in.delay:
            time.sleep(stand_in.delay)
        if stand_in.token is not None and self.headers.get("x-auth-token") != stand_in.token:
            return self._error(401, "NotAuthorized", "Authentication required")
        if stand_in.fail_status is not None:
            return self._error(stand_in.fail_status, "HTTPInternalServerError", "Broken")
        path = parts.path.rstrip("/")
        if path == "/v2.0/extensions":
            extensions = [BINDING_EXTENSION]
            if stand_in.segment_extension:
                extensions.append(SEGMENT_EXTENSION)
            return self._reply(200, {"extensions": extensions})
        if path == "/v2.0/subnets":
            subnets = [
                s
                for s in stand_in.subnets.values()
                if not query.get("network_id") or s["network_id"] in query["network_id"]
            ]
            fields = query.get("fields")
            if fields:
                subnets = [{k: v for k, v in s.items() if k in fields} for s in subnets]
            return self._reply(200, {"subnets": subnets})
        collection, _, item = path.removeprefix("/v2.0/").partition("/")
        records = {"subnets": stand_in.subnets, "ports": stand_in.ports}.get(collection)
        if records is None or not item:
            return self._error(404, "HTTPNotFound", "The resource could not be found.")
        record = records.get(item)
        if record is None:
            kind = collection[:-1].capitalize()
            return self._error(404, f"{kind}NotFound", f"{kind} {item} could not be found.")
        return self._reply(200, {collection[:-1]: record})

    def _error(self, status: int, kind: str, message: str) -> None:
        self._reply(status, {"NeutronError": {"type": kind, "message": message, "detail": ""}})

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
