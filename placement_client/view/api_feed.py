"""Feeding the provider view through Placement's HTTP API alone.

A refresh lists every provider (``GET /resource_providers``: uuid, generation, tree) and reads
again only those whose generation is not what the view expects: the generation read plus one
per own claim made since (a claim bumps it once). Reading a provider takes four GETs
(inventories, allocations, traits, aggregates), each with the generation it was read at; the
four must agree, or they are read again.

``DELETE /allocations`` (nova's ordinary instance delete) frees usage without changing the
generation. The view learns of it from the providers marked dirty (the scheduler's own
rollbacks, refused claims, and nova's ``delete_instance_info`` casts) and from a slow sweep
that reads every provider's allocations once per ``sweep_period``. Until then the view
counts the freed usage as used: it may leave a host out, never put one in that is full, and a
view that finds no candidate hands the request to Placement.

A request cannot cheaply prove this view current (a listing costs 70 µs of Placement CPU per
provider): it may miss a change made by someone else since the last refresh, so the scheduler
confirms every claim on its candidates with Placement first (``fresh_per_request = False``).

Cost (measured in docs/benchmarks.md, "view_cost"): one listing per refresh, about 0.8 KB and
70 µs of Placement CPU per provider, so it fits a few thousand providers at 1 s; the cold load is
four GETs per provider.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from placement_client.api import PlacementClient, PlacementError
from placement_client.view.model import Inventory, ProviderRecord, usage_of_allocations
from placement_client.view.view import ProviderView

LOG = logging.getLogger(__name__)

_PARTS = ("inventories", "allocations", "traits", "aggregates")
# the most providers one refresh sweeps: a refresh that took long must not make the next one
# longer still (at 100k providers an uncapped share grew each poll: 11 s, then 29 s)
_SWEEP_CAP = 32
_CONSISTENT_READ_TRIES = 4
# the cold load logs how far it got this often (seconds)
_LOAD_REPORT_SECONDS = 10.0


class ProviderGone(Exception):
    """The provider was deleted while it was being read."""


class ApiFeed:
    """Reads providers through the Placement API (``PlacementClient``)."""

    name = "api"
    # a request's view may miss changes of the last refresh interval (claims are confirmed)
    fresh_per_request = False

    def __init__(
        self,
        client: PlacementClient,
        *,
        threads: int = 8,
        sweep_period: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.client = client
        self.threads = max(1, threads)
        self.sweep_period = sweep_period
        self._clock = clock
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="view-api")
        self._sweep_cursor = 0
        self._last_poll: float | None = None
        # providers marked dirty and not read yet (kept across a failed refresh)
        self._pending: set[str] = set()
        self.reads = 0  # providers read (for tests and the benchmark)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def allocations_of(self, consumers: Iterable[str]) -> dict[str, dict[str, Any]]:
        """What Placement holds for each of ``consumers``: one ``GET /allocations/{uuid}``
        each, on the feed's threads (``Feed.allocations_of``)."""
        wanted = sorted(set(consumers))
        held = self._pool.map(self.client.get_allocations_for_consumer, wanted)
        out = {}
        for uuid, body in zip(wanted, held, strict=True):
            allocations = body.get("allocations") or {}
            if allocations:
                out[uuid] = {
                    rp: {"resources": dict(part.get("resources") or {})}
                    for rp, part in allocations.items()
                }
        return out

    # -- the two entry points ------------------------------------------------------------------
    def load(self, view: ProviderView) -> None:
        """Read every provider into the view (the cold load)."""
        started = self._clock()
        listing = self.client.list_providers()
        records, _ = self._read_many(listing, report_every=_LOAD_REPORT_SECONDS)
        view.replace_all(records, started)
        # the sweep starts now: a long load must not make the first poll sweep its share
        self._last_poll = self._clock()

    def poll(self, view: ProviderView) -> int:
        """Bring the view up to date; returns how many providers were read again."""
        started = self._clock()
        listing = self.client.list_providers()
        seen: set[str] = set()
        wanted: dict[str, dict[str, Any]] = {}
        for p in listing:
            uuid = p["uuid"]
            seen.add(uuid)
            known = view.known(uuid)
            if known is None or p["generation"] != known[1]:
                wanted[uuid] = p
                continue
            # re-parenting (1.37) moves a tree without changing the descendants' generations
            rec = view.record(uuid)
            if rec is not None and (
                rec.parent_uuid != p.get("parent_provider_uuid")
                or rec.root_uuid != (p.get("root_provider_uuid") or uuid)
            ):
                wanted[uuid] = p
        self._pending |= view.take_dirty()
        by_uuid = None
        for uuid in list(self._pending) + self._sweep(listing, started):
            if uuid in seen and uuid not in wanted:
                if by_uuid is None:
                    by_uuid = {p["uuid"]: p for p in listing}
                wanted[uuid] = by_uuid[uuid]
        removed = set(view.uuids()) - seen
        records, gone = self._read_many(wanted.values())
        view.apply(records, removed | gone, started)
        view.mark_refreshed(started)
        self._pending.clear()
        self._last_poll = started
        return len(records)

    # -- reading -----------------------------------------------------------------------------------
    def _sweep(self, listing: list[dict[str, Any]], now: float) -> list[str]:
        """The next providers of the rolling allocation sweep (every provider once per
        ``sweep_period``, at most ``_SWEEP_CAP`` per refresh: above about 20,000 providers a
        sweep takes longer than the period)."""
        if not self.sweep_period or not listing or self._last_poll is None:
            return []
        share = (now - self._last_poll) / self.sweep_period
        count = min(len(listing), math.ceil(len(listing) * share), _SWEEP_CAP)
        start = self._sweep_cursor % len(listing)
        picked = [listing[(start + i) % len(listing)]["uuid"] for i in range(count)]
        self._sweep_cursor = start + count
        return picked

    def _read_many(
        self, listing: Iterable[dict[str, Any]], report_every: float | None = None
    ) -> tuple[list[ProviderRecord], set[str]]:
        """Read these providers in parallel; ``report_every`` seconds, log how far it got
        (the cold load of a large cloud takes minutes)."""
        items = list(listing)
        if not items:
            return [], set()
        records: list[ProviderRecord] = []
        gone: set[str] = set()
        started = last_report = self._clock()
        futures = [(p, self._pool.submit(self.read_provider, p)) for p in items]
        for done, (p, future) in enumerate(futures, start=1):
            try:
                records.append(future.result())
            except ProviderGone:
                gone.add(p["uuid"])
            if report_every is not None and self._clock() - last_report >= report_every:
                last_report = self._clock()
                LOG.info(
                    "Loading the provider view: %d of %d provider(s) read in %.0f s",
                    done,
                    len(items),
                    last_report - started,
                )
        self.reads += len(records)
        return records, gone

    def read_provider(self, listed: dict[str, Any]) -> ProviderRecord:
        """One provider, its four parts read at one generation. Raises ProviderGone, or
        PlacementError when Placement fails (the refresh fails and is tried again)."""
        uuid = listed["uuid"]
        for _ in range(_CONSISTENT_READ_TRIES):
            parts: dict[str, Any] = {}
            generations = set()
            for part in _PARTS:
                got = self.client.get_provider_part(uuid, part)
                if got is None:
                    raise ProviderGone(uuid)
                generations.add(got[0])
                parts[part] = got[1]
            if len(generations) == 1:
                return _record(listed, generations.pop(), parts)
        raise PlacementError(
            f"Resource provider {uuid} kept changing while it was read "
            f"({_CONSISTENT_READ_TRIES} tries)"
        )


def _record(listed: dict[str, Any], generation: int, parts: dict[str, Any]) -> ProviderRecord:
    allocations = {c: body.get("resources", {}) for c, body in parts["allocations"].items()}
    used, consumers, rows = usage_of_allocations(allocations)
    return ProviderRecord(
        uuid=listed["uuid"],
        generation=generation,
        name=listed.get("name") or "",
        parent_uuid=listed.get("parent_provider_uuid"),
        root_uuid=listed.get("root_provider_uuid") or listed["uuid"],
        inventories={rc: Inventory.from_api(inv) for rc, inv in parts["inventories"].items()},
        used=used,
        consumers=consumers,
        alloc_rows=rows,
        traits=frozenset(parts["traits"]),
        aggregates=frozenset(parts["aggregates"]),
    )
