"""The thread that loads the provider view and keeps it current, and the per-request check
that makes a request see every change committed before it arrived (``ensure_fresh``)."""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Iterable
from typing import Any, Protocol

from placement_client.view.view import ProviderView

LOG = logging.getLogger(__name__)

# a refresh asked for by mark_dirty (a refused claim, a rollback) waits at least this long
# after the previous one, so that a burst of refusals costs one refresh
_MIN_GAP = 0.05
# the longest a request waits for a check another request has in flight before it asks
# Placement instead
_FRESH_WAIT = 5.0


class Feed(Protocol):
    name: str
    # True: ``catch_up(view)`` brings the view up to every change committed before the call
    fresh_per_request: bool

    def load(self, view: ProviderView) -> None: ...

    def poll(self, view: ProviderView) -> int: ...

    def allocations_of(self, consumers: Iterable[str]) -> dict[str, dict[str, Any]]:
        """What Placement holds for each of ``consumers`` now, as ``GET
        /allocations/{consumer}``'s ``allocations`` without the generations: provider uuid
        -> ``{"resources": {class: amount}}``; a consumer holding nothing is left out."""
        ...

    def close(self) -> None: ...


class ViewRefresher:
    """Loads the view, then refreshes it every ``interval`` seconds (sooner when a
    provider is marked dirty). Failures are logged and retried; the view then ages, and
    past its ``max_age`` the scheduler asks Placement instead."""

    def __init__(self, view: ProviderView, feed: Feed, interval: float = 1.0):
        self.view = view
        self.feed = feed
        self.interval = max(0.05, float(interval))
        view.source = feed.name
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.loaded = threading.Event()
        self.polls = 0
        self.failures = 0
        self.last_error: str | None = None
        self.last_poll_seconds = 0.0
        # the per-request check in flight: when it began (the view's clock), or None
        self._checking: float | None = None
        self._check_done = threading.Condition()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None  # start_check's
        self.fresh_checks = 0  # checks made for requests (others shared them)
        self.fresh_shared = 0  # requests answered by a check another request made

    @property
    def fresh_per_request(self) -> bool:
        """Whether ``ensure_fresh`` proves the view current for each request (the
        database feed); the API feed cannot, cheaply."""
        return bool(getattr(self.feed, "fresh_per_request", False))

    @property
    def may_miss_changes(self) -> bool:
        """Whether the view a request decides on may miss a change committed before the
        request arrived (the API feed): claims on its candidates are then confirmed with
        Placement first. A feed that says nothing (a test's stand-in) is taken at its word."""
        return getattr(self.feed, "fresh_per_request", True) is False

    def start(self, load_now: bool | None = None) -> None:
        """Start refreshing. ``load_now`` (default: unless the feed is the API, whose cold
        load takes four GETs per provider) loads on the caller's thread first, like the
        host cache's warm-up; otherwise the thread loads it and requests ask Placement
        until it is loaded."""
        if load_now is None:
            load_now = self.feed.name != "api"
        if load_now and not self.loaded.is_set():
            self.load()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="provider-view", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self.view.changed.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        self.feed.close()

    def load(self) -> bool:
        """The cold load, on the caller's thread; False (logged) if it failed."""
        started = time.monotonic()
        LOG.info("Loading the provider view through the %s feed", self.feed.name)
        try:
            self.feed.load(self.view)
            age = self.view.age()
            if age is not None and age > self.view.max_age / 2:
                # a load that took long (four GETs per provider through the API) is as old
                # as its start: bring it up to date before anyone uses it
                self.feed.poll(self.view)
        except Exception as exc:  # any failure: logged, retried by the thread
            self._failed("load", exc)
            return False
        LOG.info(
            "Provider view loaded: %d provider(s) through the %s feed in %.2f s",
            len(self.view),
            self.feed.name,
            time.monotonic() - started,
        )
        self.loaded.set()
        return True

    def start_check(self, since: float) -> None:
        """Start ``ensure_fresh(since)`` on a thread of its own, not waiting for it: the
        check runs in Placement's database while the request does other work, and the
        request's own ``ensure_fresh`` later shares it (it began after ``since``)."""
        if not self.fresh_per_request or not self.view.loaded:
            return
        with self._check_done:
            if self._checking is not None and self._checking >= since:
                return  # one that the request may share is in flight already
        send = getattr(self.feed, "send_check", None)
        if send is not None and send(self.view):
            return  # its statement runs in the database; ensure_fresh receives it
        pool = self._pool
        if pool is None:
            with self._check_done:
                pool = self._pool
                if pool is None:
                    pool = self._pool = concurrent.futures.ThreadPoolExecutor(
                        max_workers=1, thread_name_prefix="view-check"
                    )
        pool.submit(self.ensure_fresh, since)

    def ensure_fresh(self, since: float, wait: float = _FRESH_WAIT) -> str | None:
        """Make sure the view holds every change committed before ``since`` (the view's
        clock): a check that began at or after it has finished. Concurrent requests share
        one check: a request that finds one in flight that began after ``since`` waits for
        it, else it waits for that one to end and the next check is made. Returns None when
        the view is fresh, else why not (the caller asks Placement)."""
        view = self.view
        if not view.loaded:
            return "the provider view is not loaded yet"
        clock = view.now
        deadline = clock() + wait
        with self._check_done:
            while True:
                done = view.refreshed_at
                if done is not None and done >= since:
                    self.fresh_shared += 1
                    return None
                if self._checking is None:
                    break
                left = deadline - clock()
                if left <= 0:
                    return "the provider view's freshness check took too long"
                self._check_done.wait(left)
            if self.failures:
                return f"the provider view's refreshes are failing ({self.last_error})"
            self._checking = clock()
        try:
            self.feed.catch_up(view, since)  # type: ignore[attr-defined]
            self.fresh_checks += 1
        except Exception as exc:  # any failure: this request asks Placement
            LOG.warning(
                "The provider view could not be checked through the %s feed: %s",
                self.feed.name,
                exc,
            )
            return f"the provider view could not be checked: {exc}"
        finally:
            with self._check_done:
                self._checking = None
                self._check_done.notify_all()
        done = view.refreshed_at
        # (as of its statement's start: sent ahead at or after ``since``, or run now)
        if done is None or done < since:
            return "the provider view could not be checked"
        return None

    def poll_once(self) -> None:
        started = time.monotonic()
        read = self.feed.poll(self.view)
        self.polls += 1
        self.last_poll_seconds = time.monotonic() - started
        if self.failures:
            LOG.info("Provider view refreshed again after %d failure(s)", self.failures)
            self.failures = 0
            self.last_error = None
        if read and LOG.isEnabledFor(logging.DEBUG):
            LOG.debug(
                "Provider view: read %d changed provider(s) in %.1f ms",
                read,
                self.last_poll_seconds * 1000,
            )

    def _run(self) -> None:
        while not self._stop.is_set() and not self.loaded.is_set():
            if not self.load():
                self._stop.wait(min(30.0, self.interval * (2 ** min(self.failures, 5))))
        last = time.monotonic()
        while not self._stop.is_set():
            woken = self.view.changed.wait(max(0.0, last + self.interval - time.monotonic()))
            if self._stop.is_set():
                break
            if woken:
                self._stop.wait(max(0.0, last + _MIN_GAP - time.monotonic()))
            last = time.monotonic()
            try:
                self.poll_once()
            except Exception as exc:  # any failure: logged, tried again next interval
                self._failed("refresh", exc)

    def _failed(self, what: str, exc: Exception) -> None:
        self.failures += 1
        self.last_error = str(exc)
        log = LOG.warning if self.failures in (1, 10) or self.failures % 60 == 0 else LOG.debug
        log(
            "Provider view %s through the %s feed failed (%d in a row): %s",
            what,
            self.feed.name,
            self.failures,
            exc,
        )

    def status(self) -> dict[str, Any]:
        return {
            "source": self.feed.name,
            "loaded": self.loaded.is_set(),
            "providers": len(self.view),
            "age": self.view.age(),
            "failures": self.failures,
            "last_error": self.last_error,
        }
