"""The conductor-side client of the scheduler RPC API, as nova's ``SchedulerAPI`` sends it.

It negotiates the version downwards from 4.5 against ``[upgrade_levels] scheduler``,
encodes our RequestSpec as nova's RequestSpec 1.15 primitive, and turns the reply back
into Selection objects (or nova's legacy dicts, when the caller asked for those).
"""

from __future__ import annotations

import logging
import re
from typing import Any

import oslo_messaging
from oslo_config import cfg

from scheduler import exceptions, objects
from scheduler.conf import CONF
from scheduler.rpc import transport as sched_rpc
from scheduler.rpc import wire

LOG = logging.getLogger(__name__)

RPC_TOPIC = sched_rpc.RPC_TOPIC

# nova's release names for [upgrade_levels] scheduler
VERSION_ALIASES = {
    "grizzly": "2.6",
    "havana": "2.9",
    "icehouse": "3.0",
    "juno": "3.0",
    "kilo": "4.2",
    "liberty": "4.2",
    "mitaka": "4.3",
    "newton": "4.3",
    "ocata": "4.3",
    "pike": "4.4",
}

_NO_VALID_HOST_PREFIX = "No valid host was found."


class SelectionObjectsWithOldRPCVersionNotSupported(exceptions.NovaschedError):
    """The version cap forbids 4.5 but the caller asked for Selection objects/alternates."""

    def __init__(self, version_cap: str | None):
        self.version_cap = version_cap
        super().__init__(
            "Requests for Selection objects with alternates are not supported in "
            f"select_destinations() before RPC version 4.5; version_cap is {version_cap}. "
            "Raise [upgrade_levels] scheduler or ask for return_objects=False."
        )


def resolve_version_cap(value: str | None) -> str | None:
    """The numeric cap for an ``[upgrade_levels]`` value: a release alias, a version, or
    None/'auto' (no cap)."""
    if not value or value == "auto":
        return None
    return VERSION_ALIASES.get(value.lower(), value)


class SchedulerAPI:
    """Client side of the scheduler RPC API (nova's ``nova.scheduler.rpcapi.SchedulerAPI``)."""

    def __init__(
        self,
        transport: oslo_messaging.Transport | None = None,
        *,
        version_cap: str | None = None,
        topic: str = RPC_TOPIC,
        conf: cfg.ConfigOpts = CONF,
    ):
        if transport is None:
            transport = sched_rpc.get_transport(conf)
        self.conf = conf
        self.transport = transport
        if version_cap is None:
            version_cap = conf.upgrade_levels.scheduler
        self.version_cap = resolve_version_cap(version_cap)
        target = oslo_messaging.Target(topic=topic, version="4.0")
        self.client = oslo_messaging.get_rpc_client(
            transport,
            target,
            version_cap=self.version_cap,
            serializer=sched_rpc.get_serializer(),
        )

    # -- select_destinations ---------------------------------------------------------------
    def select_destinations(
        self,
        ctxt: Any,
        spec_obj: objects.RequestSpec | dict,
        instance_uuids: list[str] | None,
        return_objects: bool = False,
        return_alternates: bool = False,
    ) -> list:
        """Ask a scheduler for destinations, as nova's conductor does.

        Returns ``[[Selection, alternate...], ...]`` when ``return_objects``, else nova's
        legacy ``[{host, nodename, limits}, ...]``. Raises
        :class:`scheduler.exceptions.NoValidHost` when no host fits (its reason is nova's
        "There are not enough hosts available." and the request id, unless the scheduler has
        ``[scheduler] novalidhost_detail``), and
        :class:`scheduler.exceptions.AllocationUpdateFailed` when a claim met a consumer
        generation conflict.
        """
        version = "4.5"
        msg_args: dict[str, Any] = {
            "instance_uuids": instance_uuids,
            "spec_obj": spec_obj,
            "return_objects": return_objects,
            "return_alternates": return_alternates,
        }
        if not self.client.can_send_version(version):
            if return_objects or return_alternates:
                raise SelectionObjectsWithOldRPCVersionNotSupported(self.version_cap)
            del msg_args["return_objects"]
            del msg_args["return_alternates"]
            version = "4.4"
        if not self.client.can_send_version(version):
            del msg_args["instance_uuids"]
            version = "4.3"
        if not self.client.can_send_version(version):
            spec = _as_request_spec(spec_obj)
            del msg_args["spec_obj"]
            msg_args["request_spec"] = wire.legacy_request_spec_dict(spec)
            msg_args["filter_properties"] = wire.legacy_filter_properties_dict(spec)
            version = "4.0"
        elif isinstance(spec_obj, objects.RequestSpec):
            msg_args["spec_obj"] = wire.request_spec_to_primitive(spec_obj)

        cctxt = self.client.prepare(
            version=version,
            call_monitor_timeout=self.transport.conf.rpc_response_timeout,
            timeout=self.conf.long_rpc_timeout,
        )
        try:
            reply = cctxt.call(ctxt, "select_destinations", **msg_args)
        except Exception as exc:
            ours = no_valid_host_from_remote(exc) or allocation_update_failed_from_remote(exc)
            if ours is not None:
                raise ours from None
            raise
        if return_objects:
            return wire.selections_from_primitive(reply)
        return reply

    # -- explain_destinations (novasched's own) -------------------------------------------
    def explain_destinations(
        self,
        ctxt: Any,
        spec_obj: objects.RequestSpec | dict,
        all_hosts: bool = False,
        *,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Ask a running scheduler for a dry run of ``spec_obj``: the explain document
        (docs/explain.md). Needs a novasched scheduler (nova's has no such method) and RPC
        4.5. ``all_hosts`` skips Placement and considers every compute node."""
        if not self.client.can_send_version("4.5"):
            raise exceptions.NovaschedError(
                f"explain_destinations needs RPC version 4.5; version_cap is {self.version_cap}"
            )
        if isinstance(spec_obj, objects.RequestSpec):
            spec_obj = wire.request_spec_to_primitive(spec_obj)
        cctxt = self.client.prepare(
            version="4.5",
            call_monitor_timeout=self.transport.conf.rpc_response_timeout,
            timeout=timeout or self.conf.long_rpc_timeout,
        )
        return cctxt.call(ctxt, "explain_destinations", spec_obj=spec_obj, all_hosts=all_hosts)

    # -- fanout casts ----------------------------------------------------------------------
    def update_aggregates(self, ctxt: Any, aggregates: Any) -> None:
        self.client.prepare(fanout=True, version="4.1").cast(
            ctxt, "update_aggregates", aggregates=aggregates
        )

    def delete_aggregate(self, ctxt: Any, aggregate: Any) -> None:
        self.client.prepare(fanout=True, version="4.1").cast(
            ctxt, "delete_aggregate", aggregate=aggregate
        )

    def update_instance_info(self, ctxt: Any, host_name: str, instance_info: Any) -> None:
        self.client.prepare(fanout=True, version="4.2").cast(
            ctxt, "update_instance_info", host_name=host_name, instance_info=instance_info
        )

    def delete_instance_info(self, ctxt: Any, host_name: str, instance_uuid: str) -> None:
        self.client.prepare(fanout=True, version="4.2").cast(
            ctxt, "delete_instance_info", host_name=host_name, instance_uuid=instance_uuid
        )

    def sync_instance_info(self, ctxt: Any, host_name: str, instance_uuids: list[str]) -> None:
        self.client.prepare(fanout=True, version="4.2").cast(
            ctxt, "sync_instance_info", host_name=host_name, instance_uuids=instance_uuids
        )

    # -- baseapi ---------------------------------------------------------------------------
    def ping(self, ctxt: Any, arg: Any, *, timeout: float | None = None) -> dict[str, Any]:
        """nova's BaseAPI ping: ``{'service': 'scheduler', 'arg': arg}`` from one server."""
        target = oslo_messaging.Target(namespace="baseapi", version="1.1")
        cctxt = self.client.prepare(
            namespace=target.namespace, version=target.version, timeout=timeout
        )
        return cctxt.call(ctxt, "ping", arg=arg)


def no_valid_host_from_remote(exc: BaseException) -> exceptions.NoValidHost | None:
    """Our NoValidHost for a remote ``nova.exception.NoValidHost`` failure, else None.

    Without nova installed the failure arrives as a RemoteError with exc_type
    'NoValidHost'; in a process that can import nova.exception it arrives as a rebuilt
    ``NoValidHost_Remote`` carrying ``kwargs['reason']``.
    """
    if isinstance(exc, exceptions.NoValidHost):
        return exc
    if isinstance(exc, oslo_messaging.RemoteError):
        if exc.exc_type != "NoValidHost":
            return None
        return exceptions.NoValidHost(_reason_from_message(exc.value or ""))
    if type(exc).__name__ in ("NoValidHost", "NoValidHost_Remote"):
        kwargs = getattr(exc, "kwargs", None) or {}
        if "reason" in kwargs:
            return exceptions.NoValidHost(str(kwargs["reason"]))
        first_line = str(exc).split("\n", 1)[0]
        return exceptions.NoValidHost(_reason_from_message(first_line))
    return None


_ALLOCATION_UPDATE_FAILED = re.compile(
    r"Failed to update allocations for consumer (?P<consumer>\S+)\. Error: (?P<error>.*)", re.S
)


def allocation_update_failed_from_remote(
    exc: BaseException,
) -> exceptions.AllocationUpdateFailed | None:
    """Our AllocationUpdateFailed for a remote ``nova.exception.AllocationUpdateFailed``
    (a RemoteError without nova installed, a rebuilt ``..._Remote`` with it), else None."""
    if isinstance(exc, exceptions.AllocationUpdateFailed):
        return exc
    if isinstance(exc, oslo_messaging.RemoteError):
        if exc.exc_type != "AllocationUpdateFailed":
            return None
        message = (exc.value or "").strip()
    elif type(exc).__name__ in ("AllocationUpdateFailed", "AllocationUpdateFailed_Remote"):
        kwargs = getattr(exc, "kwargs", None) or {}
        if "consumer_uuid" in kwargs and "error" in kwargs:
            return exceptions.AllocationUpdateFailed(
                str(kwargs["consumer_uuid"]), str(kwargs["error"])
            )
        message = str(exc).split("\n", 1)[0]
    else:
        return None
    match = _ALLOCATION_UPDATE_FAILED.match(message)
    if match is None:
        return exceptions.AllocationUpdateFailed("", message)
    return exceptions.AllocationUpdateFailed(match["consumer"], match["error"].strip())


def _reason_from_message(message: str) -> str:
    message = message.strip()
    if message.startswith(_NO_VALID_HOST_PREFIX):
        message = message[len(_NO_VALID_HOST_PREFIX) :].strip()
    return message


def _as_request_spec(spec_obj: objects.RequestSpec | dict) -> objects.RequestSpec:
    if isinstance(spec_obj, objects.RequestSpec):
        return spec_obj
    return wire.request_spec_from_primitive(spec_obj)
