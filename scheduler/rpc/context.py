"""The request context, in the shape nova's services exchange it over RPC.

nova flattens its ``nova.context.RequestContext`` into a dict (``to_dict``) and the transport
sends each key as ``_context_<key>``. :class:`RequestContext` reads that dict and writes the
same keys back, so a context made here is accepted by nova's own services and vice versa.
Creating a context makes it the thread's current one, which is how oslo.log puts
``%(request_id)s`` into log lines.
"""

from __future__ import annotations

import copy
import datetime
import logging
from collections.abc import Mapping
from typing import Any

import oslo_messaging
from oslo_context import context as oslo_context
from oslo_utils import timeutils

LOG = logging.getLogger(__name__)

# nova's utils.strtime / timeutils.parse_strtime format.
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%f"
_READ_DELETED = ("no", "yes", "only")
# The transport (oslo.messaging amqp driver) prefixes context keys with this; a caller that
# hands us the raw message dict still gets a context.
_WIRE_PREFIX = "_context_"


def _parse_timestamp(value: Any) -> datetime.datetime:
    if not value:
        return timeutils.utcnow()
    if isinstance(value, datetime.datetime):
        return value
    if isinstance(value, str):
        try:
            return datetime.datetime.strptime(value, _TIME_FORMAT)
        except ValueError:
            pass
        try:
            parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            LOG.warning("Ignoring unparsable context timestamp %r", value)
            return timeutils.utcnow()
        if parsed.tzinfo is not None:
            parsed = parsed.astimezone(datetime.UTC).replace(tzinfo=None)
        return parsed
    LOG.warning("Ignoring context timestamp of type %s", type(value).__name__)
    return timeutils.utcnow()


class RequestContext(oslo_context.RequestContext):
    """Security and request information of one RPC call, as nova's context carries it."""

    def __init__(
        self,
        user_id: str | None = None,
        project_id: str | None = None,
        is_admin: bool | None = None,
        read_deleted: str = "no",
        remote_address: str | None = None,
        timestamp: datetime.datetime | str | None = None,
        quota_class: str | None = None,
        service_catalog: list[dict[str, Any]] | None = None,
        **kwargs: Any,
    ) -> None:
        # oslo.context's default is overwrite=True: the new context becomes the thread's
        # current one, so oslo.log finds its request id.
        super().__init__(user_id=user_id, project_id=project_id, is_admin=is_admin, **kwargs)
        if read_deleted not in _READ_DELETED:
            raise ValueError(
                f"read_deleted can only be one of {', '.join(_READ_DELETED)}, not {read_deleted!r}"
            )
        self.read_deleted = read_deleted
        self.remote_address = remote_address
        self.timestamp = _parse_timestamp(timestamp)
        self.quota_class = quota_class
        self.service_catalog = list(service_catalog or [])
        if self._is_admin is None:
            # nova asks policy ("context_is_admin" = role:admin); we apply that default rule.
            self._is_admin = "admin" in [role.lower() for role in self.roles]

    # -- nova's dict form -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The dict nova's ``RequestContext.to_dict`` produces (JSON-serialisable)."""
        values = super().to_dict()
        values.update(
            {
                "user_id": self.user_id,
                "project_id": self.project_id,
                "is_admin": self.is_admin,
                "read_deleted": self.read_deleted,
                "remote_address": self.remote_address,
                "timestamp": self.timestamp.strftime(_TIME_FORMAT) if self.timestamp else None,
                "request_id": self.request_id,
                "quota_class": self.quota_class,
                "user_name": self.user_name,
                "service_catalog": self.service_catalog,
                "project_name": self.project_name,
                "is_admin_project": self.is_admin_project,
            }
        )
        return values

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], **kwargs: Any) -> RequestContext:
        """A context from nova's dict form; ``_context_``-prefixed keys are accepted too."""
        if any(key.startswith(_WIRE_PREFIX) for key in values):
            values = {
                key[len(_WIRE_PREFIX) :]: value
                for key, value in values.items()
                if key.startswith(_WIRE_PREFIX)
            }
        kwargs.setdefault("user_id", values.get("user_id", values.get("user")))
        kwargs.setdefault("project_id", values.get("project_id", values.get("project")))
        kwargs.setdefault("is_admin", values.get("is_admin"))
        kwargs.setdefault("read_deleted", values.get("read_deleted") or "no")
        kwargs.setdefault("remote_address", values.get("remote_address"))
        kwargs.setdefault("timestamp", values.get("timestamp"))
        kwargs.setdefault("quota_class", values.get("quota_class"))
        kwargs.setdefault("service_catalog", values.get("service_catalog"))
        kwargs.setdefault("request_id", values.get("request_id"))
        kwargs.setdefault("global_request_id", values.get("global_request_id"))
        kwargs.setdefault("user_name", values.get("user_name"))
        kwargs.setdefault("project_name", values.get("project_name"))
        return super().from_dict(dict(values), **kwargs)

    # -- helpers nova code paths expect -----------------------------------------------------
    def elevated(self, read_deleted: str | None = None) -> RequestContext:
        """A copy of this context with admin rights (same request id)."""
        context = copy.copy(self)
        context.roles = list(self.roles)
        context.is_admin = True
        if "admin" not in context.roles:
            context.roles.append("admin")
        if read_deleted is not None:
            context.read_deleted = read_deleted
        return context

    def __repr__(self) -> str:
        return f"<RequestContext {self.request_id} user={self.user_id} project={self.project_id}>"


def context_from_dict(d: Mapping[str, Any]) -> RequestContext:
    """A :class:`RequestContext` from nova's context dict (``to_dict`` form)."""
    return RequestContext.from_dict(d)


def get_admin_context(read_deleted: str = "no") -> RequestContext:
    """An administrator context for the service's own work (not bound to the thread)."""
    return RequestContext(
        user_id=None,
        project_id=None,
        is_admin=True,
        read_deleted=read_deleted,
        overwrite=False,
    )


class RequestContextSerializer(oslo_messaging.Serializer):
    """Sends contexts as nova's dict and rebuilds them as :class:`RequestContext`; entities
    go through the wrapped serializer untouched."""

    def __init__(self, base: oslo_messaging.Serializer | None = None) -> None:
        self._base = base

    def serialize_entity(self, ctxt: Any, entity: Any) -> Any:
        if self._base is None:
            return entity
        return self._base.serialize_entity(ctxt, entity)

    def deserialize_entity(self, ctxt: Any, entity: Any) -> Any:
        if self._base is None:
            return entity
        return self._base.deserialize_entity(ctxt, entity)

    def serialize_context(self, ctxt: Any) -> dict[str, Any]:
        if isinstance(ctxt, dict):
            return ctxt
        return ctxt.to_dict()

    def deserialize_context(self, ctxt: Mapping[str, Any]) -> RequestContext:
        return RequestContext.from_dict(ctxt)
