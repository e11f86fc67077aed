"""Per-request freshness (``ViewRefresher.ensure_fresh``), the view's count of own claims
that the database feed's check expects, and the ``on_consumer_gone`` hook."""

from __future__ import annotations

import threading
import time

from placement_client.view import Inventory, ProviderRecord, ProviderView, ViewRefresher
from placement_client.view.api_feed import ApiFeed
from placement_client.view.db_feed import DatabaseFeed


class Clock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def _rec(uuid: str, generation: int = 1, consumers=(), used=None) -> ProviderRecord:
    return ProviderRecord(
        uuid,
        generation,
        inventories={"VCPU": Inventory(8)},
        used=dict(used or {}),
        consumers=frozenset(consumers),
    )


class CheckingFeed:
    """A feed whose ``catch_up`` the test holds open (``release``) and counts."""

    name = "checking"
    fresh_per_request = True

    def __init__(self, clock: Clock, *, hold: bool = False, fail: Exception | None = None):
        self.clock = clock
        self.calls = 0
        self.started = threading.Event()
        self.release = threading.Event()
        if not hold:
            self.release.set()
        self.fail = fail

    def load(self, view):
        view.replace_all([_rec("a")], self.clock.now)

    def poll(self, view):
        return 0

    def catch_up(self, view, since=None):
        began = self.clock.now
        self.calls += 1
        self.started.set()
        assert self.release.wait(5)
        if self.fail is not None:
            raise self.fail
        view.mark_refreshed(began)
        return 0

    def close(self):
        pass


def _loaded(feed: CheckingFeed, clock: Clock) -> tuple[ProviderView, ViewRefresher]:
    view = ProviderView(clock=clock)
    refresher = ViewRefresher(view, feed)
    assert refresher.load()
    return view, refresher


# -------------------------------------------------------------- ensure_fresh


def test_a_view_refreshed_before_the_request_arrived_is_checked_again():
    clock = Clock()
    feed = CheckingFeed(clock)
    view, refresher = _loaded(feed, clock)
    clock.now += 0.5
    assert refresher.ensure_fresh(clock.now) is None
    assert feed.calls == 1
    assert view.refreshed_at == clock.now


def test_a_check_that_began_after_the_request_arrived_is_shared():
    clock = Clock()
    feed = CheckingFeed(clock)
    view, refresher = _loaded(feed, clock)
    arrived = clock.now
    clock.now += 0.001
    assert refresher.ensure_fresh(clock.now) is None  # the leader's check, after `arrived`
    assert refresher.ensure_fresh(arrived) is None  # answered by it: no second check
    assert feed.calls == 1
    assert refresher.fresh_shared == 1


def test_concurrent_requests_wait_for_the_check_in_flight_when_it_began_after_them():
    clock = Clock()
    feed = CheckingFeed(clock, hold=True)
    view, refresher = _loaded(feed, clock)
    clock.now += 1.0
    arrived = clock.now
    results = []
    leader = threading.Thread(target=lambda: results.append(refresher.ensure_fresh(arrived)))
    leader.start()
    assert feed.started.wait(5)
    # a request that arrived at the same moment waits for the leader's check
    follower = threading.Thread(target=lambda: results.append(refresher.ensure_fresh(arrived)))
    follower.start()
    time.sleep(0.05)
    assert feed.calls == 1
    feed.release.set()
    leader.join(5)
    follower.join(5)
    assert results == [None, None]
    assert feed.calls == 1


def test_a_request_that_arrived_after_the_check_in_flight_began_makes_its_own():
    clock = Clock()
    feed = CheckingFeed(clock, hold=True)
    view, refresher = _loaded(feed, clock)
    clock.now += 1.0
    results = []
    first = threading.Thread(target=lambda: results.append(refresher.ensure_fresh(clock.now)))
    first.start()
    assert feed.started.wait(5)
    clock.now += 1.0  # arrives while that check runs: it may not have seen this one's changes
    late = threading.Thread(target=lambda: results.append(refresher.ensure_fresh(clock.now)))
    late.start()
    time.sleep(0.05)
    assert feed.calls == 1  # it waits: one check at a time
    feed.release.set()
    first.join(5)
    late.join(5)
    assert results == [None, None]
    assert feed.calls == 2


def test_a_check_that_fails_sends_the_request_to_placement():
    clock = Clock()
    feed = CheckingFeed(clock, fail=OSError("database gone"))
    view, refresher = _loaded(feed, clock)
    clock.now += 1.0
    reason = refresher.ensure_fresh(clock.now)
    assert reason is not None and "database gone" in reason


def test_failing_refreshes_send_requests_to_placement_without_a_check():
    clock = Clock()
    feed = CheckingFeed(clock)
    view, refresher = _loaded(feed, clock)
    refresher.failures, refresher.last_error = 2, "connection refused"
    clock.now += 1.0
    reason = refresher.ensure_fresh(clock.now)
    assert reason is not None and "connection refused" in reason
    assert feed.calls == 0


def test_only_the_database_feed_is_fresh_per_request_and_only_the_api_feed_is_confirmed():
    assert DatabaseFeed.fresh_per_request is True
    assert ApiFeed.fresh_per_request is False
    clock = Clock()
    view = ProviderView(clock=clock)
    api = ViewRefresher(view, ApiFeed.__new__(ApiFeed))
    assert (api.fresh_per_request, api.may_miss_changes) == (False, True)
    checked = ViewRefresher(view, CheckingFeed(clock))
    assert (checked.fresh_per_request, checked.may_miss_changes) == (True, False)


# -------------------------------------------------------------- own claims the check expects


def test_own_claims_are_counted_until_a_read_includes_them_or_they_are_forgotten():
    clock = Clock()
    view = ProviderView(clock=clock)
    view.replace_all([_rec("a"), _rec("b")], clock.now)
    clock.now += 1
    view.assume("c1", {"a": {"resources": {"VCPU": 1}}})
    view.assume("c2", {"a": {"resources": {"VCPU": 1}}, "b": {"resources": {"VCPU": 1}}})
    assert view.claims_pending == 3
    view.forget("c2")
    assert view.claims_pending == 1
    # a read that includes c1 takes it over
    view.apply([_rec("a", 2, consumers={"c1"}, used={"VCPU": 1})], (), clock.now)
    assert view.claims_pending == 0


def test_a_read_that_began_before_a_claim_keeps_counting_it():
    clock = Clock()
    view = ProviderView(clock=clock)
    view.replace_all([_rec("a")], clock.now)
    read_began = clock.now
    clock.now += 1
    view.assume("c1", {"a": {"resources": {"VCPU": 1}}})
    view.apply([_rec("a")], (), read_began)
    assert view.claims_pending == 1
    view.apply([], {"a"}, clock.now)  # the provider is gone, and its claims with it
    assert view.claims_pending == 0


# -------------------------------------------------------------- on_consumer_gone


def test_a_read_after_an_own_claim_that_does_not_hold_it_says_the_consumer_is_gone():
    clock = Clock()
    view = ProviderView(clock=clock)
    view.replace_all([_rec("a")], clock.now)
    gone = []
    view.on_consumer_gone = lambda consumer, rp: gone.append((consumer, rp))
    clock.now += 1
    view.assume("mine", {"a": {"resources": {"VCPU": 1}}})
    view.apply([_rec("a", 2)], (), clock.now - 0.5)  # began before the claim: no news
    assert gone == []
    clock.now += 1
    view.apply([_rec("a", 3)], (), clock.now)  # began after it, and it is not there
    assert gone == [("mine", "a")]


def test_a_consumer_a_previous_read_showed_and_a_newer_does_not_is_gone():
    clock = Clock()
    view = ProviderView(clock=clock)
    view.replace_all([_rec("a", consumers={"x", "y"}), _rec("b", consumers={"z"})], clock.now)
    gone = []
    view.on_consumer_gone = lambda consumer, rp: gone.append((consumer, rp))
    clock.now += 1
    view.apply([_rec("a", 2, consumers={"y"})], (), clock.now)
    assert gone == [("x", "a")]
    view.replace_all([_rec("a", 2, consumers={"y"}), _rec("b", 2)], clock.now)
    assert gone == [("x", "a"), ("z", "b")]


def test_the_hook_runs_outside_the_views_lock_and_its_failures_are_swallowed():
    clock = Clock()
    view = ProviderView(clock=clock)
    view.replace_all([_rec("a", consumers={"x"}), _rec("b", consumers={"y"})], clock.now)
    seen = []

    def hook(consumer, rp):
        seen.append((consumer, rp, len(view.uuids())))  # takes the view's lock
        raise RuntimeError("the host cache is broken")

    view.on_consumer_gone = hook
    done = threading.Event()

    def read():
        view.apply([_rec("a", 2), _rec("b", 2)], (), clock.now)
        done.set()

    threading.Thread(target=read, daemon=True).start()
    assert done.wait(5), "the hook was called under the view's lock"
    assert sorted(seen) == [("x", "a", 2), ("y", "b", 2)]
    assert view.record("b").generation == 2
