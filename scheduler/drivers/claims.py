"""Claims in Placement: the claimer a driver hands a chosen host to.

``Claimer.claim`` claims a host's first allocation request for an instance (one ``PUT
/allocations`` under the host's claim lock), settles a claim whose answer was lost, confirms
with Placement first what a provider view that may have missed a change offered
(``[placement] view_confirm_claims``), and counts what Placement took in the provider view.
``Claimer.delete`` deletes a request's claims, handing those Placement did not take to
``DeferredDeletes``; ``Claimer.rollback`` does so and stops counting what the request
consumed. Everything the claims did is recorded on the request (``claimed``, ``claims_made``,
``claim_failures``, ``placement_errors``, ...), which the driver, explain and NoValidHost
read.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from placement_client import query
from placement_client.api import (
    AllocationRequest,
    ClaimConflict,
    ClaimOutcomeUnknown,
    ConsumerGenerationConflict,
    Placement,
    PlacementClientError,
    PlacementConnectionError,
    PlacementError,
)
from scheduler.conf import CONF
from scheduler.exceptions import AllocationUpdateFailed, NoValidHost
from scheduler.hosts.state import HostState
from scheduler.request import SchedulingRequest
from scheduler.telemetry import metrics

LOG = logging.getLogger(__name__)


class DeferredDeletes:
    """Allocations a rollback could not delete because Placement did not answer.

    They are retried every ``interval`` seconds on a thread of their own until Placement takes
    them, so that a failed request leaves no claim behind once Placement is back. A new claim
    for the same instance takes it off the list first (its allocation is no longer ours to
    delete)."""

    def __init__(self, placement: Placement, interval: float = 1.0):
        self._placement = placement
        self.interval = interval
        self._pending: dict[str, str | None] = {}  # instance uuid -> request id
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def add(self, instance_uuid: str, request_id: str | None) -> None:
        with self._lock:
            self._pending[instance_uuid] = request_id
            if self._thread is None and not self._stopped:
                self._thread = threading.Thread(
                    target=self._run, name="novasched-deferred-deletes", daemon=True
                )
                self._thread.start()

    def discard(self, instance_uuid: str) -> None:
        if self._pending:  # the common case: nothing pending, no lock
            with self._lock:
                self._pending.pop(instance_uuid, None)

    def pending(self) -> list[str]:
        with self._lock:
            return list(self._pending)

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stopped:
            self._wake.wait(self.interval)
            with self._lock:
                items = list(self._pending.items())
                if not items:
                    self._thread = None
                    return
            for instance_uuid, request_id in items:
                try:
                    self._placement.delete_allocation_for_instance(
                        instance_uuid, request_id=request_id
                    )
                except Exception as exc:  # Placement still away: the next round tries again
                    LOG.debug("Deferred delete of %s failed again: %s", instance_uuid, exc)
                    break
                with self._lock:
                    self._pending.pop(instance_uuid, None)
                LOG.info(
                    "Deleted the allocation of instance %s left by rolled-back request %s",
                    instance_uuid,
                    request_id or "-",
                )


class ClaimLocks:
    """Claims this process sends for the same compute node go one after the other.

    Two ``PUT /allocations`` on one provider at the same time make Placement answer one of
    them 409 ``placement.concurrent_update`` (the provider's generation moved under it; with
    ``allocation_conflict_retry_count = 1`` Placement does not retry it itself), and the
    client sends it again after a jittered back-off. Concurrent requests of one process pick
    the same best host often (they weigh the same hosts), so they wait for each other's
    claim instead: the second PUT then lands, or is refused for capacity, without the 409
    and the back-off. Which host a request claims is unchanged. A fixed set of locks, by a
    hash of the host: two hosts sharing a lock only wait for each other's claims."""

    STRIPES = 256

    def __init__(self) -> None:
        self._locks = [threading.Lock() for _ in range(self.STRIPES)]
        self.waited = 0  # claims that waited for another (for tests)

    @contextlib.contextmanager
    def holding(self, key: str, timeout: float) -> Iterator[bool]:
        """Hold the host's lock around a claim; after ``timeout`` seconds of waiting, go on
        without it (as before: Placement still decides)."""
        lock = self._locks[hash(key) % self.STRIPES]
        got = lock.acquire(blocking=False)
        if not got:
            self.waited += 1
            got = lock.acquire(timeout=max(0.0, timeout))
        try:
            yield got
        finally:
            if got:
                lock.release()


class Claimer:
    """Claims hosts for a driver's requests in Placement (see the module docstring).

    ``view_refresher``: the driver's provider view, or None; ``clock``: the clock of the
    requests' deadlines (a claim waits for another claim of its host at most until then)."""

    def __init__(
        self,
        placement: Placement,
        view_refresher: Any = None,
        conf: Any = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.placement = placement
        self.view_refresher = view_refresher
        self.view = view_refresher.view if view_refresher is not None else None
        self.conf = conf if conf is not None else CONF
        # one Placement call's timeout ([placement] timeout, as the client is built with):
        # the longest a claim waits for another claim of its host
        self._call_timeout = float(self.conf.placement.timeout or 30.0)
        self._clock = clock
        self.deferred_deletes = DeferredDeletes(placement)
        self.locks = ClaimLocks()

    def stop(self) -> None:
        self.deferred_deletes.stop()

    def claim(
        self, req: SchedulingRequest, host: HostState, instance_uuid: str
    ) -> AllocationRequest | None:
        """Claim the host's first allocation request for the instance; None when the host
        has no candidate or the claim was not made (the caller tries the next host, unless
        ``req.trace.placement_unreachable`` is set).

        A claim whose outcome is unknown (answer lost, 5xx) is settled before returning:
        used if it landed as asked, deleted if the consumer holds something else, and left
        in ``req.trace.possibly_claimed`` for the rollback if Placement cannot tell."""
        cands = req.candidates_for(host)
        if not cands:
            LOG.debug("Host %s has no allocation candidate left; skipping it", host.host)
            return None
        alloc_req = cands[0]
        if self.confirms(req) and not self.confirm(req, host, alloc_req):
            return None
        # a rollback that could not reach Placement must not delete this new claim later
        self.deferred_deletes.discard(instance_uuid)
        LOG.debug(
            "Attempting to claim resources in the placement API for instance %s on %s",
            instance_uuid,
            host.host,
        )
        with req.trace.timed("claim"):
            try:
                with self.locks.holding(host.uuid or host.host, self._wait(req)):
                    self.placement.claim_resources(
                        instance_uuid,
                        alloc_req,
                        req.consumer_project_id,
                        req.consumer_user_id,
                        request_id=req.request_id,
                    )
            except ConsumerGenerationConflict as exc:
                LOG.warning("The claim of %s on %s met: %s", instance_uuid, host.host, exc)
                # nova's words; Placement's own text stays in the log
                raise AllocationUpdateFailed(
                    instance_uuid,
                    f"another process changed the consumer {instance_uuid} after the "
                    "scheduler read the consumer state during the claim",
                ) from exc
            except ClaimOutcomeUnknown as exc:
                LOG.warning(
                    "The claim of %s on %s may or may not have been made: %s; asking Placement",
                    instance_uuid,
                    host.host,
                    exc,
                )
                if self._settle_unknown(req, instance_uuid, exc):
                    LOG.info("The claim of %s on %s was made after all", instance_uuid, host.host)
                    req.trace.claims_made += 1
                    self.assume(instance_uuid, alloc_req)
                    return alloc_req
                if not req.trace.placement_unreachable and isinstance(
                    exc, PlacementConnectionError
                ):
                    req.trace.placement_unreachable = str(exc)
                req.trace.claim_errors += 1
                req.trace.placement_errors.append(str(exc))
                return None
            except (ClaimConflict, PlacementClientError) as exc:
                LOG.info(
                    "Unable to claim resources on %s for instance %s: %s",
                    host.host,
                    instance_uuid,
                    exc,
                )
                req.trace.claim_failures += 1
                if not isinstance(exc, ClaimConflict):
                    req.trace.placement_errors.append(str(exc))
                if self.view is not None:
                    # the view thought it fitted: read those providers again at once
                    self.view.mark_dirty(alloc_req.get("allocations") or ())
                return None
            except PlacementConnectionError as exc:
                # never reached Placement: nothing was written, and no other host will do better
                LOG.error(
                    "Placement unreachable claiming %s on %s: %s", instance_uuid, host.host, exc
                )
                req.trace.placement_unreachable = str(exc)
                req.trace.claims_unsent += 1
                return None
            except PlacementError as exc:
                LOG.warning("Placement error claiming %s on %s: %s", instance_uuid, host.host, exc)
                req.trace.claim_errors += 1
                req.trace.placement_errors.append(str(exc))
                return None
            req.trace.claims_made += 1
            self.assume(instance_uuid, alloc_req)
            return alloc_req

    def claim_first(
        self, req: SchedulingRequest, hosts: list[HostState], instance_uuid: str | None
    ) -> tuple[HostState, AllocationRequest] | None:
        """The first host of ``hosts`` Placement takes the instance's claim on, with the
        allocation request claimed (None: no host could be claimed, or Placement cannot be
        reached). Past the request's deadline no claim is made: NoValidHost."""
        assert instance_uuid is not None
        for host in hosts:
            self._check_deadline(req)
            alloc_req = self.claim(req, host, instance_uuid)
            if alloc_req is not None:
                req.trace.claimed.append(instance_uuid)
                return host, alloc_req
            if req.trace.placement_unreachable:
                break  # no other host can be claimed without Placement
        LOG.debug("Unable to successfully claim against any host.")
        return None

    def _check_deadline(self, req: SchedulingRequest) -> None:
        """Past the request's deadline no claim is made: NoValidHost (the caller rolls
        back every claim of the request)."""
        if self._clock() >= req.deadline:
            raise NoValidHost(
                f"The request ran past its deadline of {req.deadline_seconds:g} s "
                "([scheduler] request_deadline, [DEFAULT] long_rpc_timeout) after placing "
                f"{len(req.trace.claimed)} instance(s); every claim of the request was deleted",
                "deadline",
            )

    def confirms(self, req: SchedulingRequest) -> bool:
        """Whether the host's allocation request is confirmed with Placement before its
        claim: candidates from a view that may have missed a change (the API feed), or
        every view-sourced claim with ``[placement] view_confirm_claims = always``."""
        if req.trace.candidate_source != "view" or self.view_refresher is None:
            return False
        if self.conf.placement.view_confirm_claims == "always":
            return True
        return self.view_refresher.may_miss_changes

    def confirm(
        self, req: SchedulingRequest, host: HostState, alloc_req: AllocationRequest
    ) -> bool:
        """Whether Placement still offers ``alloc_req`` for this request: the request's own
        queries confined to the host's provider tree (a claim checks capacity, not traits,
        aggregates or trees). When it does not, the host is not claimed: its providers are
        read again and the caller tries the next host, as after a refused claim. When
        Placement cannot answer, the host is not claimed either (unreachable: the request
        stops, as for a claim)."""
        providers = alloc_req.get("allocations") or {}
        wanted = _resources_by_provider(providers)
        first = next(iter(providers), None)
        rec = self.view.record(first) if self.view is not None and first else None
        tree = rec.root_uuid if rec is not None else first
        if not tree:
            return True
        with req.trace.timed("claim_confirm"):
            try:
                offered = False
                # the request's queries as its candidates were asked (build_queries is a
                # function of the request), each confined to the host's tree
                for q in query.build_queries(req, conf=self.conf, unlimited=True):
                    answer = self.placement.get_allocation_candidates(
                        q.confined_to(tree), request_id=req.request_id, coalesce=False
                    )
                    if any(
                        _resources_by_provider(a.get("allocations")) == wanted
                        for a in answer.allocation_requests
                    ):
                        offered = True
                        break
            except PlacementConnectionError as exc:
                LOG.error(
                    "Placement unreachable confirming %s for %s: %s",
                    host.host,
                    req.instance_uuid,
                    exc,
                )
                metrics.M.claim_confirmations.labels(result="error").inc()
                req.trace.placement_unreachable = str(exc)
                req.trace.claims_unsent += 1
                return False
            except PlacementError as exc:
                LOG.warning("Placement error confirming %s: %s", host.host, exc)
                metrics.M.claim_confirmations.labels(result="error").inc()
                req.trace.claim_errors += 1
                req.trace.placement_errors.append(str(exc))
                return False
        if offered:
            metrics.M.claim_confirmations.labels(result="confirmed").inc()
            return True
        LOG.info(
            "Placement no longer offers host %s for this request (the provider view had not "
            "seen a change); not claiming it",
            host.host,
        )
        metrics.M.claim_confirmations.labels(result="refused").inc()
        req.trace.claim_failures += 1
        req.trace.placement_errors.append(
            f"host {host.host} is no longer a candidate for {req.trace.query_text} (a change the "
            "provider view had not seen yet)"
        )
        if self.view is not None:
            self.view.mark_dirty(providers)
        return False

    def _wait(self, req: SchedulingRequest) -> float:
        """How long a claim may wait for another claim of the same host: at most one
        Placement call's timeout, and never past the request's deadline."""
        return max(0.0, min(self._call_timeout, req.deadline - self._clock()))

    def assume(self, instance_uuid: str, alloc_req: AllocationRequest) -> None:
        """Count a claim Placement took in the provider view at once."""
        if self.view is not None:
            self.view.assume(instance_uuid, alloc_req.get("allocations") or {})

    def _settle_unknown(
        self, req: SchedulingRequest, instance_uuid: str, exc: ClaimOutcomeUnknown
    ) -> bool:
        """Find out with ``GET /allocations/{consumer}`` whether a claim whose answer was
        lost landed. True: the consumer holds exactly what the claim wrote (the host is
        claimed). False: it does not, and anything else it holds that this claim may have
        written has been deleted. When Placement cannot answer, the consumer goes to
        ``req.trace.possibly_claimed`` (the rollback deletes it) and the request is marked
        unreachable."""
        wrote = _resources_by_provider(getattr(exc, "allocations", None))
        before = _resources_by_provider(getattr(exc, "previous", None))
        try:
            record = self.placement.get_allocations_for_consumer(
                instance_uuid, request_id=req.request_id
            )
            held = _resources_by_provider((record or {}).get("allocations"))
            if wrote and held == wrote:
                return True
            if not held or held == before:
                LOG.info("The claim of %s was not made", instance_uuid)
            else:
                LOG.warning(
                    "Instance %s holds allocations that are not this claim's; deleting them",
                    instance_uuid,
                )
                self.placement.delete_allocation_for_instance(
                    instance_uuid, request_id=req.request_id
                )
        except Exception as check_exc:  # any failure: we cannot account for the claim
            LOG.error(
                "Could not find out whether the claim of %s was made: %s; it will be deleted "
                "when the request is rolled back",
                instance_uuid,
                check_exc,
            )
            if instance_uuid not in req.trace.possibly_claimed:
                req.trace.possibly_claimed.append(instance_uuid)
            if not req.trace.placement_unreachable:
                req.trace.placement_unreachable = (
                    f"{exc} (and whether the claim was made could not be checked: {check_exc})"
                )
            return False
        if (
            isinstance(exc, PlacementConnectionError)
            and instance_uuid not in req.trace.possibly_claimed
        ):
            # a PUT still on its way inside Placement may land after our GET: the rollback
            # deletes it once more
            req.trace.possibly_claimed.append(instance_uuid)
        return False

    def delete(self, req: SchedulingRequest) -> list[str]:
        """Delete every claim the request may have made (its claims, and those whose outcome
        could not be settled: DELETE is idempotent); a delete Placement does not take is
        retried later. Returns the consumers deleted (or left to retry)."""
        consumers = list(dict.fromkeys(req.trace.claimed + req.trace.possibly_claimed))
        for instance_uuid in consumers:
            try:
                self.placement.delete_allocation_for_instance(
                    instance_uuid, request_id=req.request_id
                )
            except Exception as exc:  # the original error must reach the caller now
                LOG.error(
                    "Could not delete the allocation of instance %s while rolling back: %s; "
                    "retrying every %.0f s until Placement takes it",
                    instance_uuid,
                    exc,
                    self.deferred_deletes.interval,
                )
                self.deferred_deletes.add(instance_uuid, req.request_id)
        if consumers:
            LOG.info("Rolled back the claims of %d instance(s)", len(consumers))
            if self.view is not None:
                for instance_uuid in consumers:
                    self.view.forget(instance_uuid)
        req.trace.claimed.clear()
        req.trace.possibly_claimed.clear()
        return consumers

    def rollback(
        self,
        req: SchedulingRequest,
        hosts: Iterable[HostState],
        keys: Iterable[str] | None = None,
    ) -> None:
        """Delete the request's claims and stop counting what it consumed on ``hosts``
        (under ``keys``; by default its claimed instances' uuids)."""
        consumers = self.delete(req)
        # our consumption is void (nova rebuilds its HostStates on the next request; ours
        # are cached): each host counts its last report and the consumptions of others
        release_on(hosts, consumers if keys is None else keys, "rollback")


def release_on(hosts: Iterable[HostState], keys: Iterable[str], reason: str) -> None:
    """Stop counting ``keys`` on ``hosts`` (the consumptions of one request)."""
    wanted = set(keys)
    for host in {id(h): h for h in hosts}.values():
        try:
            host.release_consumption(wanted, reason)
        except Exception:
            LOG.exception("Could not release the consumption on host %s", host.host)


def _resources_by_provider(allocations: Any) -> dict[str, dict[str, int]]:
    """``{rp: {rc: amount}}`` of an allocations record (generations and zeros left out),
    so that what a claim wrote and what Placement holds can be compared."""
    out: dict[str, dict[str, int]] = {}
    for rp, alloc in (allocations or {}).items():
        resources = {rc: int(n) for rc, n in ((alloc or {}).get("resources") or {}).items() if n}
        if resources:
            out[rp] = resources
    return out
