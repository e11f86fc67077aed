"""HTTP client for the Placement API: allocation candidates, claims, provider administration.

It speaks to Placement the way nova's report client does (same microversions, same claim
body and retry rule) through one pooled ``requests.Session``, or through a keystoneauth1
Adapter when Placement sits behind Keystone. Every call takes the request id and sends it as
``X-Openstack-Request-Id`` so that Placement's log shows the scheduler's request.
"""

from __future__ import annotations

import copy
import json
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import os_resource_classes
import requests
from requests.adapters import HTTPAdapter

from placement_client.api.errors import (
    CONCURRENT_UPDATE,
    ClaimConflict,
    ClaimConnectionLost,
    ClaimServerError,
    ConsumerGenerationConflict,
    PlacementClientError,
    PlacementConnectionError,
    PlacementError,
    PlacementServerError,
    parse_error_body,
)
from placement_client.api.query import AllocationCandidatesQuery
from placement_client.api.shapes import AllocationRequest

try:  # a faster parser for large candidate lists (1000 candidates are about 500 KiB)
    import orjson

    _loads = orjson.loads
except ImportError:  # pragma: no cover - depends on the environment
    _loads = json.loads

LOG = logging.getLogger(__name__)
# a module-level name so tests can replace the back-off without touching time.sleep
_sleep = time.sleep

# The microversions nova uses for each call (nova/scheduler/client/report.py).
MV_CANDIDATES = "1.36"  # same_subtree
# allocation requests are claimed at the version they were returned at; a Selection names it
MV_CLAIM = MV_CANDIDATES
MV_ANY_TRAITS = "1.39"  # required=in:A,B
_ANY_TRAITS = re.compile(r"(?:^|&)required[^=&]*=in(?:%3A|:)")
MV_CONSUMER = "1.28"  # consumer generations
MV_PROVIDER_CREATE = "1.20"  # POST returns the provider body
MV_PROVIDER_GET = "1.14"
MV_INVENTORIES = "1.26"  # reserved may equal total
MV_TRAITS = "1.6"
MV_RESOURCE_CLASSES = "1.7"  # PUT /resource_classes/{name}
MV_AGGREGATES = "1.19"  # aggregates with provider generation
MV_USAGES = "1.9"

# what get_provider_part reads each part at (aggregates carry the generation from 1.19)
_PART_VERSIONS = {
    "inventories": MV_PROVIDER_GET,
    "allocations": MV_PROVIDER_GET,
    "traits": MV_TRAITS,
    "aggregates": MV_AGGREGATES,
}
_STANDARD_RESOURCE_CLASSES = frozenset(os_resource_classes.STANDARDS)
_PROVIDER_WRITE_RETRIES = 5


@dataclass(slots=True)
class AllocationCandidates:
    """The answer of GET /allocation_candidates, parsed once and not copied afterwards.

    ``allocation_requests``: ``[{"allocations": {rp: {"resources": {rc: n}}}, "mappings":
    {suffix: [rp]}}, ...]``; ``provider_summaries``: ``{rp: {"resources": {rc: {"capacity",
    "used"}}, "traits": [...], "parent_provider_uuid", "root_provider_uuid"}}`` (a dict from
    Placement, a read-only mapping made on first access from the provider view).
    """

    allocation_requests: list[AllocationRequest] = field(default_factory=list)
    provider_summaries: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    elapsed: float = 0.0  # seconds spent on the HTTP round trip and the parse

    @property
    def empty(self) -> bool:
        return not self.allocation_requests


@dataclass(slots=True)
class ProviderSpec:
    """What ``create_provider`` makes: a resource provider with its inventory, traits and
    aggregates. ``inventories`` maps a resource class to a total (int) or to a full
    Placement inventory record (``{"total": 64, "allocation_ratio": 4.0, ...}``)."""

    uuid: str
    name: str
    inventories: dict[str, Any] = field(default_factory=dict)
    traits: Sequence[str] = ()
    aggregates: Sequence[str] = ()
    parent_provider_uuid: str | None = None


class _Flight:
    """One GET /allocation_candidates in progress, that identical queries wait for."""

    __slots__ = ("done", "result", "error", "waiters", "started")

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.done = threading.Event()
        self.result: AllocationCandidates | None = None
        self.error: BaseException | None = None
        self.waiters = 0


@dataclass(slots=True)
class _Answer:
    status: int
    body: Any
    headers: Any


class PlacementClient:
    """A client of one Placement endpoint (thread-safe; share one per process)."""

    def __init__(
        self,
        endpoint: str,
        *,
        token: str | None = "admin",
        session: requests.Session | None = None,
        ks_adapter: Any = None,
        timeout: float = 30.0,
        claim_retries: int = 4,
        retry_backoff: float = 1.0,
        coalesce_candidates: bool = False,
    ):
        self.endpoint = (endpoint or "").rstrip("/")
        self.timeout = timeout
        self.claim_retries = max(1, int(claim_retries))
        self.retry_backoff = max(0.0, float(retry_backoff))
        self._ks = ks_adapter
        if session is None:
            session = requests.Session()
            # Enough pooled connections for create_providers_bulk and concurrent claims.
            adapter = HTTPAdapter(pool_connections=4, pool_maxsize=32)
            session.mount("http://", adapter)
            session.mount("https://", adapter)
        self._session = session
        self._base_headers = {"Accept": "application/json"}
        if token and ks_adapter is None:
            self._base_headers["X-Auth-Token"] = token
        self._known_traits: set[str] = set()
        self._known_classes: set[str] = set()
        self._known_lock = threading.Lock()
        # identical allocation-candidate queries asked while one is in flight share its
        # answer (see get_allocation_candidates)
        self.coalesce_candidates = coalesce_candidates
        self._flights: dict[str, _Flight] = {}
        self._flights_lock = threading.Lock()
        self.coalesced = 0  # queries answered by another one's flight (for logs and tests)
        # time.time() of the last answer below 500 (health checks read it)
        self.last_answer_at = 0.0
        # called once per claim retried after a provider-generation conflict (metrics)
        self.on_claim_retry: Callable[[], None] | None = None

    # -- transport ---------------------------------------------------------------------------
    def _request(
        self,
        method: str,
        path: str,
        microversion: str,
        *,
        body: Any = None,
        request_id: str | None = None,
        timeout: float | None = None,
    ) -> _Answer:
        """Send one request; return the status and parsed JSON body. Raises only for
        connection failures and 5xx; the caller interprets every other status. ``timeout``:
        this request's, instead of the client's."""
        timeout = timeout or self.timeout
        headers = dict(self._base_headers)
        headers["OpenStack-API-Version"] = f"placement {microversion}"
        if request_id:
            headers["X-Openstack-Request-Id"] = request_id
        data = None
        if body is not None:
            headers["Content-Type"] = "application/json"
            data = json.dumps(body, separators=(",", ":"))
        try:
            if self._ks is not None:
                resp = self._ks_request(method, path, headers, data, timeout)
            else:
                resp = self._session.request(
                    method, self.endpoint + path, headers=headers, data=data, timeout=timeout
                )
        except requests.RequestException as exc:
            error = PlacementConnectionError(
                f"Cannot reach Placement at {self.endpoint or '(keystone catalog)'} for "
                f"{method} {path.split('?', 1)[0]}: {_connection_problem(exc)}. Check that "
                "Placement is running and that the [placement] endpoint settings point at it.",
                method=method,
                path=path,
                request_id=request_id,
            )
            error.may_have_landed = not _never_sent(exc)
            raise error from exc
        content = resp.content
        parsed: Any = None
        if content:
            try:
                parsed = _loads(content)
            except ValueError:
                parsed = content
        answer = _Answer(resp.status_code, parsed, resp.headers)
        if answer.status >= 500:
            raise self._error(PlacementServerError, method, path, answer, request_id)
        self.last_answer_at = time.time()
        return answer

    def _ks_request(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        data: Any,
        timeout: float | None = None,
    ) -> Any:
        from keystoneauth1 import exceptions as ks_exc

        try:
            return self._ks.request(
                path,
                method,
                headers=headers,
                data=data,
                raise_exc=False,
                timeout=timeout or self.timeout,
            )
        except ks_exc.ConnectTimeout as exc:
            # keystoneauth turns every requests Timeout (read timeouts too) into this one
            raise requests.Timeout(str(exc)) from exc
        except (ks_exc.EndpointNotFound, ks_exc.DiscoveryFailure) as exc:
            # no endpoint to send to: certainly never sent
            raise requests.ConnectionError(f"Failed to establish a new connection: {exc}") from exc
        except ks_exc.ConnectionError as exc:
            raise requests.ConnectionError(str(exc)) from exc
        except ks_exc.ClientException as exc:
            raise PlacementError(
                f"Keystone refused the Placement {method} {path}: {exc}. Check the [placement] "
                "auth settings (auth_type, auth_url, username, password, project).",
                method=method,
                path=path,
            ) from exc

    def _error(
        self,
        cls: type[PlacementError],
        method: str,
        path: str,
        answer: _Answer,
        request_id: str | None,
        hint: str = "",
    ) -> PlacementError:
        code, detail, placement_rid = parse_error_body(answer.body)
        rid = placement_rid or _header(answer.headers, "openstack-request-id") or request_id
        if not hint:
            hint = _hint_for(answer.status, detail)
        message = f"Placement {method} {path} answered {answer.status}"
        if code:
            message += f" {code}"
        if detail:
            message += f": {detail}"
        if rid:
            message += f" (request {rid})"
        if hint:
            message += f". {hint}"
        return cls(
            message,
            status=answer.status,
            code=code,
            detail=detail,
            request_id=rid,
            method=method,
            path=path,
        )

    # -- service -----------------------------------------------------------------------------
    def version(self, request_id: str | None = None, timeout: float | None = None) -> str:
        """The highest microversion Placement supports (e.g. "1.39")."""
        answer = self._request("GET", "/", "1.0", request_id=request_id, timeout=timeout)
        if answer.status != 200 or not isinstance(answer.body, dict):
            raise self._error(PlacementClientError, "GET", "/", answer, request_id)
        versions = answer.body.get("versions") or [{}]
        return str(versions[0].get("max_version", ""))

    def ping(self, request_id: str | None = None, timeout: float | None = None) -> bool:
        """True if Placement answers GET / (within ``timeout`` seconds, if given)."""
        try:
            self.version(request_id, timeout)
        except PlacementError:
            return False
        return True

    # -- allocation candidates ---------------------------------------------------------------
    def get_allocation_candidates(
        self,
        query: AllocationCandidatesQuery | str,
        request_id: str | None = None,
        *,
        coalesce: bool = True,
        not_before: float | None = None,
    ) -> AllocationCandidates:
        """GET /allocation_candidates at microversion 1.36.

        With ``coalesce_candidates``, a query identical to one already in flight (same query
        string) that was sent at or after ``not_before`` (``time.monotonic()``: the caller's
        request's arrival, so that the answer holds every change committed before it; None:
        any in flight) does not go to Placement: it waits for that one and gets the same
        answer, which no caller may modify. ``coalesce=False``: this query is sent whatever
        is in flight."""
        qs = query if isinstance(query, str) else query.to_querystring()
        if not (self.coalesce_candidates and coalesce):
            return self._get_allocation_candidates(qs, request_id)
        with self._flights_lock:
            flight = self._flights.get(qs)
            leader = flight is None or (not_before is not None and flight.started < not_before)
            if leader:
                # (a flight sent before the caller arrived is left to its own waiters)
                flight = self._flights[qs] = _Flight()
            else:
                flight.waiters += 1
        if leader:
            try:
                flight.result = self._get_allocation_candidates(qs, request_id)
                return flight.result
            except BaseException as exc:
                flight.error = exc
                raise
            finally:
                with self._flights_lock:
                    if self._flights.get(qs) is flight:
                        del self._flights[qs]
                flight.done.set()
        # the leader's request is bounded by the HTTP timeout (and its retries)
        if not flight.done.wait(self.timeout * 4 + 5.0):
            raise PlacementClientError(
                f"GET /allocation_candidates?{qs}: no answer from the identical query in "
                "flight in time",
                status=None,
            )
        if flight.error is not None:
            # the leader's error, as a copy of its own (one exception object must not be
            # raised in several threads at once)
            raise copy.copy(flight.error) from None
        with self._flights_lock:
            self.coalesced += 1
        LOG.debug("[%s] allocation candidates shared with an identical query in flight", request_id)
        return flight.result

    def _get_allocation_candidates(self, qs: str, request_id: str | None) -> AllocationCandidates:
        path = "/allocation_candidates?" + qs
        start = time.perf_counter()
        # nova's 1.36, unless the query has 1.39's any-of traits (``required=in:A,B``)
        version = MV_ANY_TRAITS if _ANY_TRAITS.search(qs) else MV_CANDIDATES
        answer = self._request("GET", path, version, request_id=request_id)
        if answer.status != 200 or not isinstance(answer.body, dict):
            raise self._error(PlacementClientError, "GET", path, answer, request_id)
        elapsed = time.perf_counter() - start
        body = answer.body
        result = AllocationCandidates(
            body.get("allocation_requests") or [], body.get("provider_summaries") or {}, elapsed
        )
        LOG.debug(
            "[%s] %d allocation candidates in %.1f ms for %s",
            request_id,
            len(result.allocation_requests),
            elapsed * 1000.0,
            qs,
        )
        return result

    # -- allocations -------------------------------------------------------------------------
    def get_allocations_for_consumer(
        self, consumer_uuid: str, request_id: str | None = None
    ) -> dict[str, Any]:
        """The consumer's allocations record at 1.28: ``{"allocations": {rp: {"resources":
        {...}, "generation": g}}, "consumer_generation": n, "project_id", "user_id"}``;
        ``{"allocations": {}}`` for an unknown consumer."""
        path = f"/allocations/{consumer_uuid}"
        answer = self._request("GET", path, MV_CONSUMER, request_id=request_id)
        if answer.status != 200 or not isinstance(answer.body, dict):
            raise self._error(PlacementClientError, "GET", path, answer, request_id)
        return answer.body

    def claim_resources(
        self,
        consumer_uuid: str,
        alloc_request: dict[str, Any],
        project_id: str,
        user_id: str,
        *,
        consumer_generation: int | None = None,
        request_id: str | None = None,
    ) -> None:
        """Claim ``alloc_request`` (one of the allocation requests of a candidate) for the
        consumer, as nova's scheduler does. Returns on success.

        Raises ``ClaimConflict`` when the host cannot take it (capacity, inventory
        constraints, or provider-generation races that outlast ``claim_retries`` attempts),
        ``ConsumerGenerationConflict`` when the consumer changed under us,
        ``PlacementClientError`` for another refusal: in these cases nothing was written.
        ``ClaimOutcomeUnknown`` (``ClaimConnectionLost`` or ``ClaimServerError``) when the
        PUT was sent and its answer lost or a 5xx: it may have landed, and the caller must
        find out (``get_allocations_for_consumer``). A plain ``PlacementConnectionError``
        means that Placement was not reached: nothing was written. ``alloc_request`` is not
        modified.
        """
        path = f"/allocations/{consumer_uuid}"
        allocations = alloc_request["allocations"]
        current_allocs: dict[str, Any] = {}
        payload: dict[str, Any] = {"allocations": allocations}
        if "mappings" in alloc_request:
            payload["mappings"] = alloc_request["mappings"]
        payload["project_id"] = project_id
        payload["user_id"] = user_id
        payload["consumer_generation"] = consumer_generation

        attempt = 0
        orphan_retried = False
        moved = False  # the consumer's current allocations were read (a move)
        while True:
            attempt += 1
            try:
                answer = self._request("PUT", path, MV_CLAIM, body=payload, request_id=request_id)
            except PlacementConnectionError as exc:
                if not exc.may_have_landed:
                    raise
                raise ClaimConnectionLost.wrap(exc, allocations, current_allocs) from exc
            except PlacementServerError as exc:
                raise ClaimServerError.wrap(exc, allocations, current_allocs) from exc
            if answer.status == 204:
                LOG.debug("[%s] claimed for consumer %s", request_id, consumer_uuid)
                return
            code, detail, _ = parse_error_body(answer.body)
            if answer.status == 409 and code == CONCURRENT_UPDATE:
                if (
                    "consumer generation" in detail
                    and payload["consumer_generation"] is None
                    and not moved
                    and "expected 0 but got None" not in detail
                ):
                    # The consumer already holds allocations: it is being moved. Claim source
                    # and destination together ("doubled-up") at the generation read now.
                    # nova reads the consumer before every claim; a new instance (nearly
                    # every claim) has nothing to read, so we read only when Placement says so.
                    moved = True
                    current = self.get_allocations_for_consumer(consumer_uuid, request_id)
                    current_allocs = current.get("allocations") or {}
                    if current_allocs:
                        payload["allocations"] = allocations = _doubled_up(
                            current_allocs, alloc_request["allocations"]
                        )
                        payload["consumer_generation"] = current.get("consumer_generation")
                        attempt -= 1
                        continue
                if "consumer generation" in detail:
                    # Placement leaves an empty consumer at generation 0 behind a 400
                    # (provider vanished); a new claim must then say 0, not null.
                    if (
                        payload["consumer_generation"] is None
                        and not current_allocs
                        and not orphan_retried
                        and "expected 0 but got None" in detail
                    ):
                        orphan_retried = True
                        payload["consumer_generation"] = 0
                        attempt -= 1
                        continue
                    raise self._error(
                        ConsumerGenerationConflict,
                        "PUT",
                        path,
                        answer,
                        request_id,
                        "The consumer's allocations were changed by another request; "
                        "re-read them and retry, or fail the operation",
                    )
                if attempt >= self.claim_retries:
                    raise self._error(
                        ClaimConflict,
                        "PUT",
                        path,
                        answer,
                        request_id,
                        f"Provider generation conflicts persisted over {attempt} attempts; "
                        "try another host",
                    )
                delay = random.uniform(0, self.retry_backoff * attempt * 2)
                if self.on_claim_retry is not None:
                    self.on_claim_retry()
                LOG.debug(
                    "[%s] provider generation conflict claiming %s (attempt %d), retrying in %.2fs",
                    request_id,
                    consumer_uuid,
                    attempt,
                    delay,
                )
                if delay:
                    _sleep(delay)
                continue
            if answer.status == 409:
                raise self._error(
                    ClaimConflict, "PUT", path, answer, request_id, "The host is full; try another"
                )
            raise self._error(PlacementClientError, "PUT", path, answer, request_id)

    def delete_allocation_for_instance(
        self, consumer_uuid: str, request_id: str | None = None
    ) -> bool:
        """DELETE /allocations/{consumer}: True if allocations were removed, False if the
        consumer had none."""
        path = f"/allocations/{consumer_uuid}"
        answer = self._request("DELETE", path, MV_CONSUMER, request_id=request_id)
        if answer.status == 204:
            return True
        if answer.status == 404:
            return False
        raise self._error(PlacementClientError, "DELETE", path, answer, request_id)

    # -- provider administration (fleet loading, tests) ---------------------------------------
    def ensure_traits(self, names: Iterable[str], request_id: str | None = None) -> None:
        """Create the custom traits among ``names`` that we have not seen yet (standard
        traits exist already: Placement syncs os-traits at start)."""
        for name in names:
            if not name.startswith("CUSTOM_") or name in self._known_traits:
                continue
            path = f"/traits/{name}"
            answer = self._request("PUT", path, MV_TRAITS, request_id=request_id)
            if answer.status not in (201, 204):
                raise self._error(PlacementClientError, "PUT", path, answer, request_id)
            with self._known_lock:
                self._known_traits.add(name)

    def ensure_resource_classes(self, names: Iterable[str], request_id: str | None = None) -> None:
        """Create the custom resource classes among ``names`` not seen yet."""
        for name in names:
            if name in _STANDARD_RESOURCE_CLASSES or name in self._known_classes:
                continue
            path = f"/resource_classes/{name}"
            answer = self._request("PUT", path, MV_RESOURCE_CLASSES, request_id=request_id)
            if answer.status not in (201, 204):
                raise self._error(PlacementClientError, "PUT", path, answer, request_id)
            with self._known_lock:
                self._known_classes.add(name)

    def create_provider(
        self,
        uuid: str,
        name: str,
        *,
        inventories: dict[str, Any] | None = None,
        traits: Sequence[str] = (),
        aggregates: Sequence[str] = (),
        parent_provider_uuid: str | None = None,
        request_id: str | None = None,
    ) -> int:
        """Create a provider with its inventory, traits and aggregates (custom traits and
        resource classes are created as needed). Returns the provider's final generation."""
        inventories = inventories or {}
        self.ensure_traits(traits, request_id)
        self.ensure_resource_classes(inventories, request_id)
        body: dict[str, Any] = {"uuid": uuid, "name": name}
        if parent_provider_uuid:
            body["parent_provider_uuid"] = parent_provider_uuid
        answer = self._request(
            "POST", "/resource_providers", MV_PROVIDER_CREATE, body=body, request_id=request_id
        )
        if answer.status != 200:
            raise self._error(
                PlacementClientError, "POST", "/resource_providers", answer, request_id
            )
        generation = int(answer.body["generation"])
        if inventories:
            generation = self._put_inventories(uuid, generation, inventories, request_id)
        if traits:
            generation = self._put_traits(uuid, generation, traits, request_id)
        if aggregates:
            generation = self._put_aggregates(uuid, generation, aggregates, request_id)
        return generation

    def create_providers_bulk(
        self,
        specs: Sequence[ProviderSpec | dict[str, Any]],
        workers: int = 8,
        request_id: str | None = None,
    ) -> list[int]:
        """Create many providers from a thread pool; returns their generations in order.
        Custom traits and resource classes are created once, up front."""
        specs = [s if isinstance(s, ProviderSpec) else ProviderSpec(**s) for s in specs]
        traits = {t for s in specs for t in s.traits}
        classes = {rc for s in specs for rc in s.inventories}
        self.ensure_traits(sorted(traits), request_id)
        self.ensure_resource_classes(sorted(classes), request_id)

        def create(spec: ProviderSpec) -> int:
            return self.create_provider(
                spec.uuid,
                spec.name,
                inventories=spec.inventories,
                traits=spec.traits,
                aggregates=spec.aggregates,
                parent_provider_uuid=spec.parent_provider_uuid,
                request_id=request_id,
            )

        # Parents must exist before their children: create roots first, then the rest.
        roots = [s for s in specs if not s.parent_provider_uuid]
        children = [s for s in specs if s.parent_provider_uuid]
        results: dict[str, int] = {}
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            for batch in (roots, children):
                for spec, generation in zip(batch, pool.map(create, batch), strict=True):
                    results[spec.uuid] = generation
        return [results[s.uuid] for s in specs]

    def get_provider(self, uuid: str, request_id: str | None = None) -> dict[str, Any] | None:
        """The provider record (with ``generation``), or None if it does not exist."""
        path = f"/resource_providers/{uuid}"
        answer = self._request("GET", path, MV_PROVIDER_GET, request_id=request_id)
        if answer.status == 404:
            return None
        if answer.status != 200:
            raise self._error(PlacementClientError, "GET", path, answer, request_id)
        return answer.body

    def get_inventories(self, uuid: str, request_id: str | None = None) -> dict[str, Any]:
        """The provider's inventories by resource class (``{}`` if it has none)."""
        path = f"/resource_providers/{uuid}/inventories"
        answer = self._request("GET", path, MV_PROVIDER_GET, request_id=request_id)
        if answer.status != 200:
            raise self._error(PlacementClientError, "GET", path, answer, request_id)
        return (answer.body or {}).get("inventories", {})

    def set_inventories(
        self, uuid: str, inventories: dict[str, Any], request_id: str | None = None
    ) -> int:
        """Replace the provider's inventories; returns the new generation."""
        self.ensure_resource_classes(inventories, request_id)
        return self._write_with_fresh_generation(
            uuid, self._put_inventories, inventories, request_id
        )

    def set_traits(self, uuid: str, traits: Sequence[str], request_id: str | None = None) -> int:
        """Replace the provider's traits; returns the new generation."""
        self.ensure_traits(traits, request_id)
        return self._write_with_fresh_generation(uuid, self._put_traits, traits, request_id)

    def get_aggregates(self, uuid: str, request_id: str | None = None) -> list[str]:
        """The uuids of the aggregates the provider is in."""
        path = f"/resource_providers/{uuid}/aggregates"
        answer = self._request("GET", path, MV_AGGREGATES, request_id=request_id)
        if answer.status != 200:
            raise self._error(PlacementClientError, "GET", path, answer, request_id)
        return list((answer.body or {}).get("aggregates", []))

    def set_aggregates(
        self, uuid: str, aggregates: Sequence[str], request_id: str | None = None
    ) -> int:
        """Replace the provider's aggregates; returns the new generation."""
        return self._write_with_fresh_generation(uuid, self._put_aggregates, aggregates, request_id)

    def delete_provider(self, uuid: str, request_id: str | None = None) -> bool:
        """Delete a provider: True if deleted, False if it did not exist."""
        path = f"/resource_providers/{uuid}"
        answer = self._request("DELETE", path, MV_PROVIDER_GET, request_id=request_id)
        if answer.status == 204:
            return True
        if answer.status == 404:
            return False
        raise self._error(PlacementClientError, "DELETE", path, answer, request_id)

    def get_usages(self, uuid: str, request_id: str | None = None) -> dict[str, int]:
        """``{resource class: amount used}`` on one provider."""
        path = f"/resource_providers/{uuid}/usages"
        answer = self._request("GET", path, MV_USAGES, request_id=request_id)
        if answer.status != 200:
            raise self._error(PlacementClientError, "GET", path, answer, request_id)
        return answer.body.get("usages", {})

    def get_provider_part(
        self, uuid: str, part: str, request_id: str | None = None
    ) -> tuple[int, Any] | None:
        """One part of a provider with the generation it was read at: ``inventories``
        (``{rc: record}``), ``allocations`` (``{consumer: {"resources": {rc: n}}}``),
        ``traits`` or ``aggregates`` (lists). None if the provider does not exist."""
        microversion = _PART_VERSIONS[part]
        path = f"/resource_providers/{uuid}/{part}"
        answer = self._request("GET", path, microversion, request_id=request_id)
        if answer.status == 404:
            return None
        if answer.status != 200:
            raise self._error(PlacementClientError, "GET", path, answer, request_id)
        body = answer.body or {}
        return int(body["resource_provider_generation"]), body.get(part) or {}

    def list_providers(self, request_id: str | None = None) -> list[dict[str, Any]]:
        """Every resource provider record."""
        answer = self._request("GET", "/resource_providers", MV_PROVIDER_GET, request_id=request_id)
        if answer.status != 200:
            raise self._error(
                PlacementClientError, "GET", "/resource_providers", answer, request_id
            )
        return answer.body.get("resource_providers", [])

    # -- provider writes with generations ----------------------------------------------------
    def _write_with_fresh_generation(
        self, uuid: str, write: Any, value: Any, request_id: str | None
    ) -> int:
        last: PlacementError | None = None
        for _ in range(_PROVIDER_WRITE_RETRIES):
            provider = self.get_provider(uuid, request_id)
            if provider is None:
                raise PlacementClientError(
                    f"Resource provider {uuid} does not exist in Placement",
                    status=404,
                    path=f"/resource_providers/{uuid}",
                )
            try:
                return write(uuid, int(provider["generation"]), value, request_id)
            except PlacementClientError as exc:
                # someone else wrote the provider between our GET and PUT: re-read it
                if exc.status != 409 or exc.code != CONCURRENT_UPDATE:
                    raise
                last = exc
        assert last is not None
        raise last

    def _put_provider_part(
        self, uuid: str, part: str, mv: str, body: dict[str, Any], request_id: str | None
    ) -> int:
        path = f"/resource_providers/{uuid}/{part}"
        answer = self._request("PUT", path, mv, body=body, request_id=request_id)
        if answer.status != 200:
            raise self._error(PlacementClientError, "PUT", path, answer, request_id)
        return int(answer.body["resource_provider_generation"])

    def _put_inventories(
        self, uuid: str, generation: int, inventories: dict[str, Any], request_id: str | None
    ) -> int:
        records = {
            rc: (dict(inv) if isinstance(inv, dict) else {"total": int(inv)})
            for rc, inv in inventories.items()
        }
        body = {"resource_provider_generation": generation, "inventories": records}
        return self._put_provider_part(uuid, "inventories", MV_INVENTORIES, body, request_id)

    def _put_traits(
        self, uuid: str, generation: int, traits: Sequence[str], request_id: str | None
    ) -> int:
        body = {"resource_provider_generation": generation, "traits": sorted(set(traits))}
        return self._put_provider_part(uuid, "traits", MV_TRAITS, body, request_id)

    def _put_aggregates(
        self, uuid: str, generation: int, aggregates: Sequence[str], request_id: str | None
    ) -> int:
        body = {"resource_provider_generation": generation, "aggregates": sorted(set(aggregates))}
        return self._put_provider_part(uuid, "aggregates", MV_AGGREGATES, body, request_id)


def _doubled_up(
    current: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """The allocations of a move: the consumer's current ones plus the destination's.

    As nova does: providers only in the new request are added; when the new request adds no
    provider (a resize on the same host) the amounts are summed per resource class; a
    provider in both when the destination is elsewhere (a shared provider) keeps the
    current amounts.
    """
    merged = {rp: {"resources": dict(a.get("resources", {}))} for rp, a in current.items()}
    new_rps = [rp for rp in new if rp not in current]
    for rp, alloc in new.items():
        resources = alloc.get("resources", {})
        if rp not in current:
            merged[rp] = {"resources": dict(resources)}
        elif not new_rps:
            target = merged[rp]["resources"]
            for rc, amount in resources.items():
                target[rc] = target.get(rc, 0) + amount
    return merged


def _connection_problem(exc: requests.RequestException) -> str:
    """A short phrase for a connection failure (urllib3's text repeats the whole URL)."""
    if isinstance(exc, requests.Timeout):
        return "timed out"
    text = str(exc)
    for marker in (
        "Connection refused",
        "Name or service not known",
        "No route to host",
        "Connection reset",
        "Remote end closed connection",
    ):
        if marker in text:
            return marker.lower()
    return type(exc).__name__


# what a failure says when the request never left this process (nothing was written)
_NEVER_SENT_MARKERS = (
    "Connection refused",
    "Failed to establish a new connection",
    "NewConnectionError",
    "Name or service not known",
    "nodename nor servname",
    "Temporary failure in name resolution",
    "No route to host",
    "Network is unreachable",
)


def _never_sent(exc: requests.RequestException) -> bool:
    """True when the request certainly did not reach Placement: the connection was never
    made (refused, name not resolved, connect timeout). A read timeout, a reset or a
    closed connection may come after Placement got the request, so they are False."""
    if isinstance(exc, requests.ConnectTimeout):
        return True
    if isinstance(exc, requests.Timeout):
        return False
    text = str(exc)
    return isinstance(exc, requests.ConnectionError) and any(
        marker in text for marker in _NEVER_SENT_MARKERS
    )


def _header(headers: Any, name: str) -> str | None:
    try:
        return headers.get(name)
    except AttributeError:
        return None


def _hint_for(status: int, detail: str) -> str:
    if status in (401, 403):
        return (
            "Check the [placement] credentials: with noauth2 the token must be an admin user "
            "(noauth2_user = admin)"
        )
    if status == 406:
        return "Placement does not support the microversion we need (1.36); upgrade Placement"
    if status >= 500:
        return "Placement failed; see its log for this request id"
    lowered = detail.lower()
    if "no such trait" in lowered or "no such resource class" in lowered:
        return "Create the custom trait or resource class in Placement before using it"
    if status == 404:
        return "The resource does not exist in Placement (or the endpoint is not Placement)"
    return ""
