"""oslo.messaging plumbing shared by the scheduler service and the conductor-side client.

Transports use nova's control exchange (``nova``) so that a nova conductor and novasched talk
over the same broker objects. Contexts travel as nova's ``_context_*`` keys through the
serializer from ``scheduler/rpc/context.py``; object payloads travel as plain nova primitives
(the manager decodes them with ``scheduler/rpc/wire/``), so the object layer of the serializer
is a no-op.
"""

from __future__ import annotations

import logging
from typing import Any

import oslo_messaging
from oslo_config import cfg

LOG = logging.getLogger(__name__)

CONTROL_EXCHANGE = "nova"
RPC_TOPIC = "scheduler"

# Remote exceptions our client may rebuild as real classes. nova.exception is deliberately
# absent: it is not importable here, and oslo.messaging then gives a RemoteError with
# exc_type 'NoValidHost', which the client turns into scheduler.exceptions.NoValidHost.
ALLOWED_EXMODS = ["scheduler.exceptions"]

_defaults_set = False


def set_defaults() -> None:
    """Make ``nova`` the default control exchange (once; an operator's value still wins)."""
    global _defaults_set
    if not _defaults_set:
        oslo_messaging.set_transport_defaults(CONTROL_EXCHANGE)
        _defaults_set = True


def get_transport(conf: cfg.ConfigOpts, url: str | None = None) -> oslo_messaging.Transport:
    """The RPC transport for ``[DEFAULT] transport_url`` (or ``url``)."""
    set_defaults()
    return oslo_messaging.get_rpc_transport(conf, url=url, allowed_remote_exmods=ALLOWED_EXMODS)


def get_notification_transport(conf: cfg.ConfigOpts) -> oslo_messaging.Transport:
    """The notification transport (``[oslo_messaging_notifications] transport_url``, else the
    RPC one)."""
    set_defaults()
    return oslo_messaging.get_notification_transport(conf, allowed_remote_exmods=ALLOWED_EXMODS)


def get_serializer() -> oslo_messaging.Serializer:
    """nova's context serializer over a no-op object serializer (payloads are primitives)."""
    from scheduler.rpc.context import RequestContextSerializer

    return RequestContextSerializer(oslo_messaging.NoOpSerializer())


def get_notifier(
    conf: cfg.ConfigOpts,
    transport: oslo_messaging.Transport | None = None,
    *,
    service: str = "scheduler",
    host: str | None = None,
) -> Any:
    """The scheduler's notifier, as nova's ``rpc.init`` sets it up for
    ``[notifications] notification_format``: legacy notifications from publisher
    ``<service>.<host>`` to ``[oslo_messaging_notifications] topics``, versioned ones from
    ``nova-<service>:<host>`` to ``[notifications] versioned_notifications_topics``. With no
    ``[oslo_messaging_notifications] driver`` it sends nothing."""
    from scheduler.rpc import notifications

    if transport is None:
        transport = get_notification_transport(conf)
    host = host or conf.host
    serializer = get_serializer()
    # no driver sends nothing; say so, so that no payload is built for nobody
    try:
        driver = None if conf.oslo_messaging_notifications.driver else "noop"
    except (cfg.NoSuchOptError, cfg.NoSuchGroupError):  # a transport made elsewhere
        driver = None
    legacy = oslo_messaging.Notifier(
        transport, publisher_id=f"{service}.{host}", serializer=serializer, driver=driver
    )
    versioned = oslo_messaging.Notifier(
        transport,
        publisher_id=f"nova-{service}:{host}",
        serializer=serializer,
        driver=driver,
        topics=list(conf.notifications.versioned_notifications_topics),
    )
    return notifications.for_format(conf.notifications.notification_format, legacy, versioned)


def notifications_enabled(notifier: Any) -> bool:
    """Whether ``notifier`` will send anything (so payloads need not be built otherwise)."""
    is_enabled = getattr(notifier, "is_enabled", None)
    return bool(is_enabled()) if callable(is_enabled) else True
