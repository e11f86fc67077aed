"""The smallest local stand-ins for Glance's image API and Neutron that a real nova 34 needs.

Both are threaded HTTP servers on 127.0.0.1 in the test process. They keep a count of the
requests they answered, by method and path shape, for a failing test's message.

* Glance: ``GET /v2/schemas/image`` (the image schema glanceclient validates every image
  against), ``GET /v2/images/{id}``, and what shelve's snapshot does: create, patch, upload,
  delete.
* Neutron: every collection ``GET`` answers an empty list (nova lists ports on delete, on every
  move and in nova-compute's info-cache heal, even for servers booted with ``"networks":
  "none"``); a single resource is 404; writes answer an empty body.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import Counter
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

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


class NeutronStandIn(_Server):
    """Neutron's API v2.0 with nothing in it."""

    def __init__(self) -> None:
        super().__init__("neutron-stand-in", _NeutronHandler)
        self.lock = threading.Lock()


class _NeutronHandler(_Handler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        path = self.path.split("?", 1)[0].strip("/")
        if path.endswith(".json"):
            path = path[: -len(".json")]
        parts = path.split("/")
        if path in ("", "v2.0"):
            self._count("/" + path)
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
            return self._reply(200, {parts[1]: []})
        self._count("/v2.0/{collection}/{id}")
        return self._reply(
            404, {"NeutronError": {"type": "NotFound", "message": f"{path} not found"}}
        )

    def _base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def _write(self) -> None:
        self._count("(write)")
        self._body()
        return self._reply(200, {})

    do_POST = do_PUT = _write  # noqa: N815

    def do_DELETE(self) -> None:  # noqa: N802
        self._count("(delete)")
        return self._reply(204)
