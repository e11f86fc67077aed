"""Neutron's API, for the request prefilters that need it: routed networks and remote-managed
ports. It reads what nova 34's scheduler reads, with the same calls:

* ``GET /v2.0/extensions``: is the ``segment`` extension (routed networks) enabled?
* ``GET /v2.0/subnets?network_id=N&fields=segment_id``: the segments of a network, one per
  subnet that has one (nova does not use ``GET /v2.0/segments``, which also lists the
  segments of a network that is not routed).
* ``GET /v2.0/subnets/{id}``: the segment of one subnet.
* ``GET /v2.0/ports/{id}``: a port's fixed IPs, network and ``binding:vnic_type``.

The client speaks through keystoneauth with the ``[neutron]`` options of nova.conf
(``auth_type`` and its plugin's options, ``endpoint_override``, ``region_name``,
``valid_interfaces``, ``timeout``, ``http_retries`` ...). An unset ``auth_type`` with an
``endpoint_override`` sends no token (a Neutron with ``auth_strategy = noauth``).

Every failure (connection refused, timeout, an error status, an answer that is not
Neutron's) raises :class:`NeutronError`, whose message names the call and what to check.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import loading as ks_loading

from scheduler.conf import CONF

LOG = logging.getLogger(__name__)

GROUP = "neutron"
SEGMENT_EXTENSION = "segment"
VNIC_TYPE_NORMAL = "normal"
VNIC_TYPE_REMOTE_MANAGED = "remote-managed"
# seconds, when [neutron] timeout is unset: keystoneauth would wait for ever
DEFAULT_TIMEOUT = 30.0


class NeutronError(Exception):
    """Neutron could not answer a question the scheduler asked."""


class NeutronNotConfigured(NeutronError):
    """``[neutron]`` says neither how to authenticate nor where Neutron is."""


class NeutronNotFound(NeutronError):
    """Neutron answered 404 for one resource (a port or subnet that does not exist)."""


def is_configured(conf=CONF) -> bool:
    """True when ``[neutron]`` names an auth plugin or an endpoint to talk to."""
    opts = conf[GROUP]
    return bool(opts.auth_type or opts.endpoint_override)


class NeutronClient:
    """The few reads of Neutron's API v2.0 that the prefilters make."""

    def __init__(self, adapter: ks_adapter.Adapter, extension_sync_interval: float = 600.0):
        self._adapter = adapter
        self._sync_interval = extension_sync_interval
        self._lock = threading.Lock()
        self._extensions: frozenset[str] = frozenset()
        self._extensions_read_at: float | None = None

    # -- what the prefilters ask ---------------------------------------------------------------
    def show_port(self, port_id: str, request_id: str | None = None) -> dict[str, Any]:
        """The port's record (``GET /v2.0/ports/{id}``)."""
        body = self._get(f"/v2.0/ports/{port_id}", request_id, f"port {port_id}")
        port = body.get("port")
        if not isinstance(port, dict):
            raise NeutronError(f"Neutron's answer for port {port_id} has no 'port' record")
        return port

    def is_remote_managed_port(self, port_id: str, request_id: str | None = None) -> bool:
        """True if the port's ``binding:vnic_type`` is ``remote-managed`` (a smart NIC DPU)."""
        port = self.show_port(port_id, request_id)
        return port.get("binding:vnic_type", VNIC_TYPE_NORMAL) == VNIC_TYPE_REMOTE_MANAGED

    def has_segment_extension(self, request_id: str | None = None) -> bool:
        """True if Neutron has its ``segment`` extension (the list is re-read every
        ``[neutron] extension_sync_interval`` seconds)."""
        with self._lock:
            read_at = self._extensions_read_at
            if read_at is None or time.monotonic() - read_at >= self._sync_interval:
                body = self._get("/v2.0/extensions", request_id, "the extension list")
                self._extensions = frozenset(
                    ext.get("alias") for ext in body.get("extensions") or [] if ext
                )
                self._extensions_read_at = time.monotonic()
            return SEGMENT_EXTENSION in self._extensions

    def segment_ids_for_network(self, network_id: str, request_id: str | None = None) -> list[str]:
        """The segments of the network's subnets, in Neutron's order; empty when the network
        is not routed or Neutron has no segment extension."""
        if not self.has_segment_extension(request_id):
            return []
        body = self._get(
            "/v2.0/subnets",
            request_id,
            f"the subnets of network {network_id}",
            params={"network_id": network_id, "fields": "segment_id"},
        )
        return [
            subnet["segment_id"]
            for subnet in body.get("subnets") or []
            if subnet.get("segment_id") is not None
        ]

    def segment_id_for_subnet(self, subnet_id: str, request_id: str | None = None) -> str | None:
        """The subnet's segment; None when it has none or Neutron has no segment extension."""
        if not self.has_segment_extension(request_id):
            return None
        body = self._get(f"/v2.0/subnets/{subnet_id}", request_id, f"subnet {subnet_id}")
        return (body.get("subnet") or {}).get("segment_id")

    # -- HTTP ----------------------------------------------------------------------------------
    def _get(
        self,
        path: str,
        request_id: str | None,
        what: str,
        params: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        try:
            answer = self._adapter.get(
                path,
                params=params,
                raise_exc=False,
                global_request_id=request_id,
                headers={"Accept": "application/json"},
            )
        except ks_exc.EndpointNotFound as exc:
            raise NeutronError(
                f"No Neutron endpoint found for {what}: check [neutron] region_name, "
                f"valid_interfaces or endpoint_override ({exc})"
            ) from exc
        except (ks_exc.MissingAuthPlugin, ks_exc.Unauthorized, ks_exc.AuthorizationFailure) as exc:
            raise NeutronError(
                f"Could not authenticate to ask Neutron for {what}: check the [neutron] "
                f"credentials ({exc})"
            ) from exc
        except ks_exc.ClientException as exc:  # refused, reset, timed out, TLS
            raise NeutronError(f"Neutron is unreachable asking for {what}: {exc}") from exc
        if answer.status_code in (401, 403):
            raise NeutronError(
                f"Neutron refused ({answer.status_code}) to give {what}: check the [neutron] "
                f"credentials ({_error_detail(answer)})"
            )
        if answer.status_code == 404:
            raise NeutronNotFound(f"Neutron has no {what} (404)")
        if answer.status_code != 200:
            raise NeutronError(
                f"Neutron answered {answer.status_code} asking for {what}: {_error_detail(answer)}"
            )
        try:
            body = answer.json()
        except ValueError as exc:
            raise NeutronError(f"Neutron's answer for {what} is not JSON") from exc
        if not isinstance(body, dict):
            raise NeutronError(f"Neutron's answer for {what} is not a JSON object")
        return body


def _error_detail(answer: Any) -> str:
    """The message of Neutron's error body (``{"NeutronError": {"message": ...}}``)."""
    try:
        error = answer.json().get("NeutronError")
    except (ValueError, AttributeError):
        error = None
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])
    return (answer.text or "").strip()[:200] or answer.reason or "no detail"


def client_from_conf(conf=CONF) -> NeutronClient:
    """A client from the ``[neutron]`` options (raises NeutronNotConfigured or NeutronError
    for options keystoneauth cannot use)."""
    opts = conf[GROUP]
    if not is_configured(conf):
        raise NeutronNotConfigured(
            "Neutron is not configured: set [neutron] auth_type and its credentials (as "
            "nova-scheduler's nova.conf has them), or endpoint_override for a Neutron "
            "without authentication"
        )
    retries = opts.connect_retries if opts.connect_retries is not None else opts.http_retries
    try:
        auth = ks_loading.load_auth_from_conf_options(conf, GROUP) if opts.auth_type else None
        session = ks_loading.load_session_from_conf_options(
            conf, GROUP, auth=auth, timeout=opts.timeout or DEFAULT_TIMEOUT
        )
        adapter = ks_loading.load_adapter_from_conf_options(
            conf, GROUP, session=session, auth=auth, connect_retries=retries
        )
    except Exception as exc:  # keystoneauth raises several unrelated types for bad options
        raise NeutronError(f"Invalid [neutron] options: {exc}") from exc
    return NeutronClient(adapter, extension_sync_interval=opts.extension_sync_interval)
