"""The RPC endpoints of the scheduler service: nova's ``SchedulerManager`` (4.5) and
``BaseRPCAPI`` (namespace ``baseapi``, 1.1).

This module only speaks RPC: it decodes nova primitives into the request model
(``scheduler/rpc/wire/``), hands them to the driver, and encodes the answer the way the
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
from scheduler.drivers.base import as_scheduler_driver
from scheduler.objects import RequestSpec
from scheduler.primitives import DATA
from scheduler.rpc import notifications, wire
from scheduler.telemetry import metrics

LOG = logging.getLogger(__name__)

_SENTINEL = object()

NOVA_NO_VALID_HOST_MESSAGE = "No valid host was found. %(reason)s"
# nova's scheduler's reason: it logs the details and keeps them out of the instance fault
NOVA_NOT_ENOUGH_HOSTS = "There are not enough hosts available."
NOVA_ALLOCATION_UPDATE_FAILED_MESSAGE = (
    "Failed to update allocations for consumer %(consumer_uuid)s. Error: %(error)s"
)
# what the conductor gets for a failure we did not expect: no detail, the request id
INTERNAL_ERROR_MESSAGE = "Scheduling failed on an unexpected error; the scheduler's log has it"
# the code every nova exception carries in its kwargs (NovaException.code)
_NOVA_CODE = 500


class _NovaException(Exception):
    """A ``nova.exception`` class as it looks on the wire.

    oslo.messaging names a remote failure by the class's ``__module__`` and ``__name__`` and
    sends its ``args`` and ``kwargs``; a nova conductor (which allows ``nova.exception``)
    rebuilds it as nova's own class with those, so its ``format_message()`` is our message.
    No ``nova`` package is imported or faked for that."""

    msg_fmt = "An unknown exception occurred."

    def __init__(self, **kwargs: Any):
        # nova's NovaException exposes its format kwargs (code included); they travel
        self.kwargs = {**kwargs, "code": _NOVA_CODE}
        super().__init__(self.msg_fmt % kwargs)


def _nova_class(cls: type, name: str) -> type:
    cls.__module__ = "nova.exception"
    cls.__name__ = name
    cls.__qualname__ = name
    return cls


class NovaNoValidHost(_NovaException):
    """``nova.exception.NoValidHost``: ``NoValidHost(reason=<reason>)``."""

    msg_fmt = NOVA_NO_VALID_HOST_MESSAGE

    def __init__(self, reason: str = ""):
        self.reason = reason
        super().__init__(reason=reason)


class NovaAllocationUpdateFailed(_NovaException):
    """``nova.exception.AllocationUpdateFailed``, which nova's conductor catches by class
    (evacuate, rebuild): a claim met a consumer generation conflict."""

    msg_fmt = NOVA_ALLOCATION_UPDATE_FAILED_MESSAGE

    def __init__(self, consumer_uuid: str, error: str):
        super().__init__(consumer_uuid=consumer_uuid, error=error)


_nova_class(NovaNoValidHost, "NoValidHost")
_nova_class(NovaAllocationUpdateFailed, "AllocationUpdateFailed")

# a module nova's conductor cannot import: an unexpected failure reaches it as
# oslo_messaging.RemoteError, as nova's scheduler's own unexpected failures mostly do
_INTERNAL_MODULE = "novasched.internal"
_internal_classes: dict[str, type] = {}


def internal_error(exc: BaseException, request_id: str | None) -> Exception:
    """What travels for an unexpected failure: an error named after ``exc``'s class
    (RemoteError's ``exc_type`` on nova's side) whose message gives the request id and no
    detail (the traceback is in our log)."""
    name = type(exc).__name__
    cls = _internal_classes.get(name)
    if cls is None:
        cls = type(name, (Exception,), {"__module__": _INTERNAL_MODULE, "__qualname__": name})
        _internal_classes[name] = cls
    suffix = f" (request {request_id})" if request_id else ""
    return cls(f"{INTERNAL_ERROR_MESSAGE}{suffix}")


def _travelling(exc: BaseException) -> oslo_messaging.ExpectedException:
    """``exc`` as the failure oslo.messaging sends back, without a traceback: nova's
    conductor keeps the text, and our frames and chained errors are for our log only."""
    exc.__cause__ = None
    exc.__suppress_context__ = True
    expected = oslo_messaging.ExpectedException()
    expected.exc_info = (type(exc), exc, None)
    return expected


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
        self.host = host
        self.conf = conf if conf is not None else CONF
        if notifier is not None and not isinstance(
            notifier, notifications.SelectDestinationsNotifier
        ):
            # a plain oslo.messaging Notifier: the legacy format's, when it is asked for
            fmt = getattr(getattr(self.conf, "notifications", None), "notification_format", None)
            notifier = notifications.for_format(fmt or "unversioned", notifier, None)
        self.notifier: notifications.SelectDestinationsNotifier | None = notifier
        self.in_flight = InFlightCounter()

    @property
    def driver(self) -> Any:
        """The driver as it was given."""
        return self._given

    @driver.setter
    def driver(self, driver: Any) -> None:
        # what this endpoint calls: the driver, or a plugin driver with what it lacks given
        # once here (scheduler/drivers/base.py), never asked per request
        self._given = driver
        self._driver = as_scheduler_driver(driver)

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
            with self._serving(
                "select_destinations", ctxt, (NovaNoValidHost, NovaAllocationUpdateFailed)
            ):
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
        raw = None  # the RequestSpec primitive's data, for the versioned notifications
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
            raw = spec_obj.get(DATA) if isinstance(spec_obj, dict) else None
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
        notice = self._notice(ctxt, raw)
        try:
            # nova's start notification goes once the candidates are known (a driver that
            # does not say when has it sent before it runs)
            selections = self._driver.select_destinations(
                ctxt,
                spec,
                instance_uuids,
                want_alternates,
                on_candidates=notice.start if notice is not None else None,
            )
        except exceptions.NoValidHost as exc:
            LOG.info("No valid host for request %s: %s", _log_id(ctxt), exc.reason)
            outcome[0] = "no_valid_host"
            m.no_valid_host.labels(cause=exc.cause, filter=exc.filter_name).inc()
            raise NovaNoValidHost(self._conductor_reason(ctxt, exc)) from None
        except exceptions.AllocationUpdateFailed as exc:
            LOG.warning("Claim failed for request %s: %s", _log_id(ctxt), exc)
            raise NovaAllocationUpdateFailed(exc.consumer_uuid, exc.error) from None
        outcome[0] = "scheduled"
        m.instances_scheduled.inc(len(selections))
        m.alternates.inc(sum(len(s) - 1 for s in selections))
        if notice is not None:
            notice.end(spec)

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
            except (*expected, exceptions.InvalidRequest) as exc:
                raise _travelling(exc) from None
            except Exception as exc:
                LOG.exception("%s failed for request %s", method, _log_id(ctxt))
                # already logged with the request id; spare oslo.messaging a second traceback,
                # and the caller (a tenant's instance fault, through nova) the detail
                request_id = _log_id(ctxt)
                raise _travelling(
                    internal_error(exc, None if request_id == "-" else request_id)
                ) from None

    def _conductor_reason(self, ctxt: Any, exc: exceptions.NoValidHost) -> str:
        """The NoValidHost reason nova's conductor gets: nova's own words and the request
        id (the explanation is in our log under that id), or the explanation itself with
        ``[scheduler] novalidhost_detail``."""
        if getattr(self.conf.scheduler, "novalidhost_detail", False):
            return exc.reason
        request_id = _log_id(ctxt)
        if request_id == "-":
            return NOVA_NOT_ENOUGH_HOSTS
        return f"{NOVA_NOT_ENOUGH_HOSTS} (request {request_id})"

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
                wire.instances_limit(limits.max_instances_per_request, limits.max_request_bytes),
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

    def _notice(self, ctxt: Any, raw: Any) -> _Notice | None:
        """The request's start/end notifications, or None when nothing would be sent."""
        notifier = self.notifier
        if notifier is None or not notifier.is_enabled():
            return None
        return _Notice(notifier, ctxt, raw if isinstance(raw, dict) else None)

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
        own = self._driver.explain_destinations(ctxt, spec, all_hosts=all_hosts)
        if own is not None:
            return own
        steps = self._driver.steps()
        if steps is None:
            raise NotImplementedError(
                f"explain needs the filter scheduler's steps; the driver "
                f"{type(self.driver).__name__} has none and explains nothing itself"
            )
        return explain.explain_request(steps, ctxt, spec, all_hosts=all_hosts)

    # -- cache-update casts: applied to the driver's caches at once ---------------------------
    def update_aggregates(self, ctxt: Any, aggregates: Any) -> None:
        """Fanout cast from nova-api when aggregates change: apply them to the cache now
        instead of at the next periodic re-read."""
        self._apply_cast("update_aggregates", ctxt, aggregates)

    def delete_aggregate(self, ctxt: Any, aggregate: Any) -> None:
        """Fanout cast from nova-api when an aggregate is deleted."""
        self._apply_cast("delete_aggregate", ctxt, aggregate)

    def _apply_cast(self, method: str, ctxt: Any, prim: Any) -> None:
        if method not in self._driver.applies_casts:
            LOG.debug("Driver has no %s; ignoring the cast", method)
            return
        target = getattr(self._driver, method)
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
        if method not in self._driver.applies_casts:
            LOG.debug(
                "Driver has no %s; ignoring the cast from %s", method, wire.excerpt(host_name)
            )
            return
        target = getattr(self._driver, method)
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
        self._driver.reset()


class _Notice:
    """One request's ``select_destinations.start`` (sent once, however often the driver
    says its candidates are known) and ``.end`` (of the request as the driver last saw
    it: after the prefilters, as nova's)."""

    def __init__(self, notifier: notifications.SelectDestinationsNotifier, ctxt: Any, raw: Any):
        self.notifier = notifier
        self.ctxt = ctxt
        self.raw = raw
        self.spec: Any = None

    def start(self, spec: Any) -> None:
        first = self.spec is None
        self.spec = spec
        if first:
            self.notifier.notify(self.ctxt, "start", spec, self.raw)

    def end(self, spec: Any) -> None:
        if self.spec is None:  # a driver that never said: nova sends both all the same
            self.start(spec)
        self.notifier.notify(self.ctxt, "end", self.spec, self.raw)


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
