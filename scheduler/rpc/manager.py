"""The RPC endpoints of the scheduler service: nova's ``SchedulerManager`` (4.5) and
``BaseRPCAPI`` (namespace ``baseapi``, 1.1).

This module only speaks RPC: it decodes nova primitives into the request model
(``scheduler/rpc/wire.py``), hands them to the driver, and encodes the answer the way the
caller's RPC version expects. It never decides anything itself.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import oslo_messaging

from scheduler import exceptions
from scheduler.conf import CONF
from scheduler.objects import RequestSpec
from scheduler.rpc import transport as sched_rpc
from scheduler.rpc import wire
from scheduler.telemetry import metrics

LOG = logging.getLogger(__name__)

_SENTINEL = object()

NOVA_NO_VALID_HOST_MESSAGE = "No valid host was found. %(reason)s"


class NovaNoValidHost(Exception):
    """``nova.exception.NoValidHost`` as it looks on the wire.

    oslo.messaging names a remote failure by the class's ``__module__`` and ``__name__``,
    so a nova conductor (which allows ``nova.exception``) rebuilds this as its own
    NoValidHost: ``NoValidHost("No valid host was found. <reason>", reason=<reason>)``.
    No ``nova`` package is imported or faked for that.
    """

    def __init__(self, reason: str = ""):
        self.reason = reason
        # nova's NovaException exposes its format kwargs; oslo.messaging sends them
        self.kwargs = {"reason": reason}
        super().__init__(NOVA_NO_VALID_HOST_MESSAGE % {"reason": reason})


NovaNoValidHost.__module__ = "nova.exception"
NovaNoValidHost.__name__ = "NoValidHost"
NovaNoValidHost.__qualname__ = "NoValidHost"


class Driver:
    """What the manager needs from a scheduler driver (documentation only; any object with
    these methods will do)."""

    def select_destinations(
        self,
        context: Any,
        spec_obj: Any,
        instance_uuids: list[str] | None,
        return_alternates: bool,
    ) -> list[list[Any]]:  # pragma: no cover - interface
        raise NotImplementedError

    def reset(self) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def stop(self) -> None:  # pragma: no cover - interface
        raise NotImplementedError


def _request_id(ctxt: Any) -> str | None:
    if isinstance(ctxt, dict):
        return ctxt.get("request_id")
    return getattr(ctxt, "request_id", None)


def _log_id(ctxt: Any) -> str:
    """The request id for a log line: the caller's, bounded."""
    request_id = _request_id(ctxt)
    if not request_id:
        return "-"
    if isinstance(request_id, str) and len(request_id) <= 100:
        return request_id
    return wire.excerpt(request_id, 100)


# the longest InvalidRequest message quoted in a log line; a message names the field path and
# quotes values through wire.excerpt, so this only bounds what a decoder forgot to bound
_MAX_LOGGED_MESSAGE = 2000


def _bounded(text: str) -> str:
    if len(text) <= _MAX_LOGGED_MESSAGE:
        return text
    return f"{text[:_MAX_LOGGED_MESSAGE]}... ({len(text)} chars)"


class InFlightCounter:
    """Counts calls being served, so a graceful stop can wait for them to finish."""

    def __init__(self) -> None:
        self._count = 0
        self._cond = threading.Condition()

    @property
    def count(self) -> int:
        return self._count

    @contextlib.contextmanager
    def track(self) -> Iterator[None]:
        with self._cond:
            self._count += 1
        try:
            yield
        finally:
            with self._cond:
                self._count -= 1
                if self._count == 0:
                    self._cond.notify_all()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until no call is in flight; False if ``timeout`` seconds passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._count:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True


class SchedulerManager:
    """nova's scheduler RPC endpoint, version 4.5, over a pluggable driver."""

    target = oslo_messaging.Target(version="4.5")

    def __init__(
        self,
        driver: Any,
        *,
        notifier: Any = None,
        host: str | None = None,
        conf: Any = None,
    ):
        self.driver = driver
        self.notifier = notifier
        self.host = host
        self.conf = conf if conf is not None else CONF
        self.in_flight = InFlightCounter()

    # -- select_destinations ---------------------------------------------------------------
    def select_destinations(
        self,
        ctxt: Any,
        request_spec: dict | None = None,
        filter_properties: dict | None = None,
        spec_obj: Any = _SENTINEL,
        instance_uuids: list[str] | None = None,
        return_objects: bool = False,
        return_alternates: bool = False,
    ) -> list:
        """Pick a destination (and, with 4.5 objects, alternates) for each instance.

        Returns Selection primitives (``[[chosen, alternate, ...], ...]``) when
        ``return_objects``, else nova's legacy ``[{host, nodename, limits}, ...]``.
        NoValidHost travels as ``nova.exception.NoValidHost``.
        """
        m = metrics.M
        outcome = ["error"]
        started = time.perf_counter()
        m.in_flight.inc()
        try:
            with self._serving("select_destinations", ctxt, (NovaNoValidHost,)):
                return self._select_destinations(
                    ctxt,
                    request_spec,
                    filter_properties,
                    spec_obj,
                    instance_uuids,
                    return_objects,
                    return_alternates,
                    outcome,
                )
        finally:
            m.in_flight.dec()
            m.select_destinations.labels(result=outcome[0]).observe(time.perf_counter() - started)
            m.requests.labels(result=outcome[0]).inc()

    def _select_destinations(
        self,
        ctxt: Any,
        request_spec: dict | None,
        filter_properties: dict | None,
        spec_obj: Any,
        instance_uuids: list[str] | None,
        return_objects: bool,
        return_alternates: bool,
        outcome: list[str],
    ) -> list:
        """``outcome[0]`` is set to the result the metrics count: scheduled or
        no_valid_host (it stays error otherwise)."""
        args: dict[str, Any] = {"instance_uuids": instance_uuids}
        if spec_obj is _SENTINEL or spec_obj is None:
            # RPC < 4.3: nova's conductor sent the legacy dicts
            args.update(request_spec=request_spec, filter_properties=filter_properties)
            spec, instance_uuids = self._decode(
                "select_destinations",
                ctxt,
                args,
                lambda: wire.request_spec_from_legacy(request_spec or {}, filter_properties or {}),
                instance_uuids,
            )
        else:
            args["spec_obj"] = spec_obj
            spec, instance_uuids = self._decode(
                "select_destinations",
                ctxt,
                args,
                lambda: wire.request_spec_from_primitive(spec_obj),
                instance_uuids,
            )

        # alternates are only wanted by callers that can receive Selection objects
        want_alternates = bool(return_objects and return_alternates)
        m = metrics.M
        m.instances_requested.inc(len(instance_uuids) if instance_uuids else spec.num_instances)
        notify = self.notifier is not None and sched_rpc.notifications_enabled(self.notifier)
        if notify:
            self._notify(ctxt, "scheduler.select_destinations.start", spec)
        try:
            selections = self.driver.select_destinations(
                ctxt, spec, instance_uuids, want_alternates
            )
        except exceptions.NoValidHost as exc:
            LOG.info("No valid host for request %s: %s", _log_id(ctxt), exc.reason)
            outcome[0] = "no_valid_host"
            m.no_valid_host.labels(cause=exc.cause, filter=exc.filter_name).inc()
            raise NovaNoValidHost(exc.reason) from None
        outcome[0] = "scheduled"
        m.instances_scheduled.inc(len(selections))
        m.alternates.inc(sum(len(s) - 1 for s in selections))
        if notify:
            self._notify(ctxt, "scheduler.select_destinations.end", spec)

        if return_objects:
            return wire.selections_to_primitive(selections)
        return wire.selections_to_legacy(selections)

    @contextlib.contextmanager
    def _serving(
        self, method: str, ctxt: Any, expected: tuple[type[BaseException], ...]
    ) -> Iterator[None]:
        """Count the call as in flight; an expected failure (NoValidHost, a malformed
        request) goes back to the caller without a traceback in the log, anything else is
        logged once with the request id and goes back too. The worker keeps serving."""
        with self.in_flight.track():
            try:
                yield
            except (*expected, exceptions.InvalidRequest):
                raise oslo_messaging.ExpectedException()
            except Exception:
                LOG.exception("%s failed for request %s", method, _log_id(ctxt))
                # already logged with the request id; spare oslo.messaging a second traceback
                raise oslo_messaging.ExpectedException()

    def _decode(
        self,
        method: str,
        ctxt: Any,
        args: dict[str, Any],
        decode: Callable[[], RequestSpec],
        instance_uuids: Any = None,
    ) -> tuple[RequestSpec, list[str] | None]:
        """The request's RequestSpec and instance uuids, within the input limits, before any
        work: the size and depth of the arguments (``[scheduler] max_request_bytes``), then
        the decoding (strings, counts, flavor numbers), then the instances
        (``[scheduler] max_instances_per_request``, distinct uuids). A payload past them is
        the caller's fault: InvalidRequest, logged once with the request id and a bounded
        message."""
        limits = self.conf.scheduler
        try:
            wire.check_request_size(args, limits.max_request_bytes)
            spec = decode()
            uuids = wire.check_instances(
                spec,
                instance_uuids,
                limits.max_instances_per_request,
            )
            return spec, uuids
        except exceptions.InvalidRequest as exc:
            LOG.warning(
                "Rejected malformed %s request %s: %s", method, _log_id(ctxt), _bounded(str(exc))
            )
            raise
        except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as exc:
            # a decoder that let a raw error escape: still the caller's payload at fault
            message = f"malformed request spec: {_bounded(wire.excerpt(exc, 500))}"
            LOG.warning("Rejected malformed %s request %s: %s", method, _log_id(ctxt), message)
            raise exceptions.InvalidRequest(message) from exc

    def _notify(self, ctxt: Any, event_type: str, spec: Any) -> None:
        try:
            payload = {"request_spec": wire.legacy_request_spec_dict(spec)}
            self.notifier.info(ctxt, event_type, payload)
        except Exception:
            # a notification must never fail the scheduling it reports on
            LOG.warning("Could not emit %s notification", event_type, exc_info=True)

    # -- explain_destinations (novasched's own, RPC 4.5) -----------------------------------
    def explain_destinations(
        self, ctxt: Any, spec_obj: dict[str, Any], all_hosts: bool = False
    ) -> dict[str, Any]:
        """A dry run of ``select_destinations`` for a RequestSpec primitive: the explain
        document (docs/explain.md) of what every filter removed and why, each weigher's part
        and the host that would be chosen. Nothing is claimed or consumed. A request that
        no host fits is not an error here: the document carries the NoValidHost reason."""
        with self._serving("explain_destinations", ctxt, ()):
            return self._explain_destinations(ctxt, spec_obj, bool(all_hosts))

    def _explain_destinations(self, ctxt: Any, spec_obj: Any, all_hosts: bool) -> dict[str, Any]:
        from scheduler import explain

        spec, _ = self._decode(
            "explain_destinations",
            ctxt,
            {"spec_obj": spec_obj},
            lambda: wire.request_spec_from_primitive(spec_obj),
        )
        custom = getattr(self.driver, "explain_destinations", None)
        if custom is not None:
            return custom(ctxt, spec, all_hosts=all_hosts)
        return explain.explain_request(self.driver, ctxt, spec, all_hosts=all_hosts)

    # -- cache-update casts: applied to the driver's caches at once ---------------------------
    def update_aggregates(self, ctxt: Any, aggregates: Any) -> None:
        """Fanout cast from nova-api when aggregates change: apply them to the cache now
        instead of at the next periodic re-read."""
        self._apply_cast("update_aggregates", ctxt, aggregates)

    def delete_aggregate(self, ctxt: Any, aggregate: Any) -> None:
        """Fanout cast from nova-api when an aggregate is deleted."""
        self._apply_cast("delete_aggregate", ctxt, aggregate)

    def _apply_cast(self, method: str, ctxt: Any, prim: Any) -> None:
        target = getattr(self.driver, method, None)
        if target is None:
            LOG.debug("Driver has no %s; ignoring the cast", method)
            return
        try:
            aggregates = wire.aggregates_from_primitive(prim)
            if method == "update_aggregates":
                target(aggregates)
            else:
                for agg in aggregates:
                    target(agg)
        except Exception:  # a cast has nobody to answer: log it, keep serving
            LOG.exception("Could not apply %s (request %s)", method, _log_id(ctxt))
            metrics.M.casts.labels(method=method, result="failed").inc()
        else:
            LOG.debug("Applied %s: %d aggregate(s)", method, len(aggregates))
            metrics.M.casts.labels(method=method, result="applied").inc()

    def update_instance_info(self, ctxt: Any, host_name: str, instance_info: Any) -> None:
        """Fanout cast from nova-compute with instances of a host (all of them at start-up)."""
        self._apply_instance_cast(
            "update_instance_info",
            ctxt,
            host_name,
            lambda: wire.instance_uuids_from_instance_list(instance_info),
        )

    def delete_instance_info(self, ctxt: Any, host_name: str, instance_uuid: str) -> None:
        """Fanout cast from nova-compute when an instance leaves a host."""
        self._apply_instance_cast("delete_instance_info", ctxt, host_name, lambda: instance_uuid)

    def sync_instance_info(self, ctxt: Any, host_name: str, instance_uuids: list[str]) -> None:
        """Periodic fanout cast from nova-compute with the uuids of its instances."""
        self._apply_instance_cast(
            "sync_instance_info", ctxt, host_name, lambda: [str(u) for u in instance_uuids]
        )

    def _apply_instance_cast(
        self, method: str, ctxt: Any, host_name: str, decode: Callable[[], Any]
    ) -> None:
        target = getattr(self.driver, method, None)
        if target is None:
            LOG.debug(
                "Driver has no %s; ignoring the cast from %s", method, wire.excerpt(host_name)
            )
            return
        try:
            target(host_name, decode())
        except Exception:  # a cast has nobody to answer: log it, keep serving
            LOG.exception(
                "Could not apply %s from %s (request %s)",
                method,
                wire.excerpt(host_name),
                _log_id(ctxt),
            )
            metrics.M.casts.labels(method=method, result="failed").inc()
        else:
            metrics.M.casts.labels(method=method, result="applied").inc()

    # -- not RPC ---------------------------------------------------------------------------
    def reset(self) -> None:
        """SIGHUP hook: let the driver reload what it caches (cell mappings)."""
        self.driver.reset()


class BaseAPI:
    """nova's ``BaseRPCAPI`` endpoint (namespace ``baseapi``): ``ping`` and
    ``get_backdoor_port``."""

    target = oslo_messaging.Target(namespace="baseapi", version="1.1")

    def __init__(self, service_name: str = "scheduler", backdoor_port: int | None = None):
        self.service_name = service_name
        self.backdoor_port = backdoor_port

    def ping(self, ctxt: Any, arg: Any) -> dict[str, Any]:
        return {"service": self.service_name, "arg": arg}

    def get_backdoor_port(self, ctxt: Any) -> int | None:
        return self.backdoor_port
