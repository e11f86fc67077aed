"""Fresh as nova (issue 17): a request sees every change committed to Placement before it
arrived, although its candidates come from the provider view.

The driver runs with a real HostManager on a MariaDB cell and the real Placement on MariaDB.
The view's background refresh is made slow (a minute), so that only the per-request check
(database feed) or the claim confirmation (API feed) can see a change made just before a
request: without them these tests place instances where Placement, and nova, would not.
"""

# ruff: noqa: F811 - the fixtures are imported by name, and test arguments reuse those names

from __future__ import annotations

import contextlib
import time
import uuid as uuidlib
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
import requests

from placement_client import query
from placement_client.api import PlacementClient
from placement_client.from_conf import view_from_conf
from placement_client.view import DatabaseFeed, ProviderView, ViewRefresher
from scheduler.conf import CONF
from scheduler.drivers.filter_scheduler import FilterScheduler
from scheduler.exceptions import NoValidHost
from scheduler.objects import Destination, Flavor, RequestSpec
from scheduler.rpc.context import RequestContext
from tests.functional.fixtures_placement import placement_service  # noqa: F401 - a fixture
from tests.functional.fixtures_provider_view import claim, new_uuid
from tests.functional.fixtures_race import mariadb_race_cloud

HOSTS = 4
SLOW = 60.0  # the background refresh: never within a test
MARK = "CUSTOM_FRESH_MARK"  # set on one host just before a request
ONLY = "CUSTOM_FRESH_ONLY"  # set on one host before the view loads


@pytest.fixture(scope="module")
def cloud() -> Iterator[SimpleNamespace]:
    with contextlib.ExitStack() as stack:
        race = mariadb_race_cloud(stack, "fresh", hosts=HOSTS, seed=17, aarch64_fraction=0.0)
        race.placement.ensure_traits([MARK, ONLY])
        yield SimpleNamespace(
            api_url=race.api_url,
            service=race.placement_svc,
            placement=race.placement,
            providers={p["uuid"]: p for p in race.fleet.providers},
            placed=[],  # instances the tests placed (deleted after each test)
        )


def _driver(cloud: SimpleNamespace, feed: str, **placement_opts) -> FilterScheduler:
    overrides = {
        "auth_type": "noauth2",
        "endpoint_override": cloud.service.url,
        "claim_retry_backoff": 0.01,
        "view_feed": feed,
        "view_database_connection": cloud.service.db_url if feed == "database" else None,
        "view_refresh_interval": SLOW,
        "view_max_age": SLOW * 2,
        **placement_opts,
    }
    for name, value in overrides.items():
        CONF.set_override(name, value, group="placement")
    CONF.set_override("connection", cloud.api_url, group="api_database")
    driver = FilterScheduler()
    driver.prepare()
    if feed == "api":
        assert driver.view_refresher.loaded.wait(60), "the API feed did not load"
    driver.requests = []
    driver.placed = cloud.placed
    new_request = driver.new_request

    def capture(context, spec, **kw):
        req = new_request(context, spec, **kw)
        driver.requests.append(req)
        return req

    driver.new_request = capture
    return driver


@pytest.fixture
def drivers(cloud: SimpleNamespace) -> Iterator[list[FilterScheduler]]:
    """Drivers made by the test, stopped afterwards; the hosts' traits and aggregates are put
    back and every instance the test placed is deleted."""
    made: list[FilterScheduler] = []
    yield made
    for driver in made:
        driver.stop()
    for option in (
        "auth_type",
        "endpoint_override",
        "claim_retry_backoff",
        "view_feed",
        "view_database_connection",
        "view_refresh_interval",
        "view_max_age",
        "view_confirm_claims",
    ):
        CONF.clear_override(option, group="placement")
    CONF.clear_override("connection", group="api_database")
    for rp, provider in cloud.providers.items():
        cloud.placement.set_traits(rp, list(provider["traits"]))
        cloud.placement.set_aggregates(rp, list(provider["aggregates"]))
    while cloud.placed:
        cloud.placement.delete_allocation_for_instance(cloud.placed.pop())


def _spec(traits: dict[str, str] | None = None, aggregates: list[str] | None = None):
    flavor = Flavor(
        name="fresh",
        flavorid="fresh",
        vcpus=1,
        memory_mb=256,
        root_gb=1,
        extra_specs={f"trait:{t}": v for t, v in (traits or {}).items()},
    )
    spec = RequestSpec(flavor=flavor, project_id="p-fresh", user_id="u-fresh", num_instances=1)
    if aggregates:
        spec.requested_destination = Destination(aggregates=[",".join(aggregates)])
    return spec


def _select(driver: FilterScheduler, spec: RequestSpec) -> tuple[str, object]:
    """Schedule one instance; the chosen provider and the request."""
    ctx = RequestContext(user_id="u-fresh", project_id="p-fresh", request_id="req-fresh")
    instance = str(uuidlib.uuid4())
    driver.placed.append(instance)
    [[selection, *_]] = driver.select_destinations(ctx, spec, [instance], False)
    return selection.compute_node_uuid, driver.requests[-1]


def _hosts(cloud: SimpleNamespace) -> list[str]:
    return sorted(cloud.providers)


def _add_trait(cloud: SimpleNamespace, rp: str, trait: str) -> None:
    current = cloud.placement.get_provider_part(rp, "traits")[1]
    cloud.placement.set_traits(rp, sorted({*current, trait}))


# -------------------------------------------------------------- the database feed, per request


def test_a_trait_set_just_before_a_request_is_seen_by_the_view(cloud, drivers):
    driver = _driver(cloud, "database")
    drivers.append(driver)
    marked = _hosts(cloud)[0]
    _add_trait(cloud, marked, MARK)

    # required: that provider alone, answered by the view
    chosen, req = _select(driver, _spec({MARK: "required"}))
    assert req.trace.candidate_source == "view", req.trace.view_declined
    assert chosen == marked
    assert set(req.scratch.allocation_candidates) == {marked}

    # forbidden: every provider but that one, answered by the view
    _, req = _select(driver, _spec({MARK: "forbidden"}))
    assert req.trace.candidate_source == "view", req.trace.view_declined
    assert req.scratch.allocation_candidates and marked not in req.scratch.allocation_candidates


def test_a_forbidden_trait_set_just_before_a_boot_keeps_it_off_that_host(cloud, drivers):
    only = _hosts(cloud)[1]
    _add_trait(cloud, only, ONLY)
    driver = _driver(cloud, "database")
    drivers.append(driver)
    _add_trait(cloud, only, MARK)  # after the view loaded
    # the one host with ONLY now has MARK: Placement (and nova) find nothing
    with pytest.raises(NoValidHost):
        _select(driver, _spec({ONLY: "required", MARK: "forbidden"}))
    assert driver.requests[-1].trace.candidate_source == "placement"
    assert "no candidate" in driver.requests[-1].trace.view_declined


def test_an_aggregate_change_just_before_a_request_is_seen_by_the_view(cloud, drivers):
    driver = _driver(cloud, "database")
    drivers.append(driver)
    first, second = _hosts(cloud)[:2]
    agg = str(uuidlib.uuid4())
    cloud.placement.set_aggregates(first, [*cloud.placement.get_aggregates(first), agg])
    chosen, req = _select(driver, _spec(aggregates=[agg]))
    assert req.trace.candidate_source == "view", req.trace.view_declined
    assert (chosen, set(req.scratch.allocation_candidates)) == (first, {first})

    # moved to another host: member_of follows at once
    cloud.placement.set_aggregates(first, list(cloud.providers[first]["aggregates"]))
    cloud.placement.set_aggregates(second, [*cloud.placement.get_aggregates(second), agg])
    chosen, req = _select(driver, _spec(aggregates=[agg]))
    assert req.trace.candidate_source == "view", req.trace.view_declined
    assert (chosen, set(req.scratch.allocation_candidates)) == (second, {second})


def test_a_provider_moved_to_another_tree_just_before_a_request_is_seen_by_in_tree(cloud, drivers):
    driver = _driver(cloud, "database")
    drivers.append(driver)
    first, second = _hosts(cloud)[:2]
    # a child without inventory the request asks for: it names its tree in in_tree
    child = str(uuidlib.uuid4())
    cloud.placement.create_provider(child, f"fresh-child-{child[:8]}", parent_provider_uuid=first)
    try:
        _, req = _select(driver, _spec())  # the view reads the new child (a new provider)
        assert driver.view.record(child).root_uuid == first
        _reparent(cloud.service.url, child, second, f"fresh-child-{child[:8]}")
        req = driver.new_request(RequestContext(request_id="req-fresh-tree"), _spec())
        queries = query.build_queries(req, conf=CONF, in_tree=child)
        candidates = driver.candidates.from_view(req, queries)
        assert req.trace.candidate_source == "view", req.trace.view_declined
        assert [list(a["allocations"]) for a in candidates.allocation_requests] == [[second]]
    finally:
        cloud.placement.delete_provider(child)


def test_a_request_that_changes_nothing_reads_nothing(cloud, drivers):
    driver = _driver(cloud, "database")
    drivers.append(driver)
    feed = driver.view_refresher.feed
    _select(driver, _spec())  # reads what the fixture's clean-up changed
    reads, catch_ups = feed.reads, feed.catch_ups
    for _ in range(3):  # each claim is the scheduler's own: counted, not read
        _, req = _select(driver, _spec())
        assert req.trace.candidate_source == "view", req.trace.view_declined
    assert (feed.reads, feed.catch_ups) == (reads, catch_ups)
    assert feed.checks >= 4


def test_a_claim_placement_lost_just_before_a_request_is_not_counted_by_it(cloud, drivers):
    """Issue 30 (1): a DELETE /allocations changes no generation, so the providers' sums
    cannot see it; the claims the scheduler counts are looked up by consumer in the same
    check, and the request neither counts the instance on its host nor the usage in the
    view (the background refresh is a minute away)."""
    driver = _driver(cloud, "database")
    drivers.append(driver)
    feed = driver.view_refresher.feed
    chosen, _ = _select(driver, _spec())
    instance = driver.placed[-1]
    assert driver.host_manager.counted_claims().get(instance) == {chosen}

    def view_used() -> int:  # what the view decides on: its read plus its own claims
        return driver.view.entry(chosen).used.get("MEMORY_MB", 0)

    used_before = view_used()

    cloud.placement.delete_allocation_for_instance(instance)  # no report, no cast
    checks = feed.claim_checks
    _, req = _select(driver, _spec())
    assert req.trace.candidate_source == "view", req.trace.view_declined
    assert feed.claim_checks > checks
    assert instance not in driver.host_manager.counted_claims()
    (hs,) = driver.host_manager.get_host_states_by_uuids([chosen])
    assert instance not in hs.consumptions()
    # the view's usage of that host is Placement's again: without the 256 MB it no longer
    # holds (the second instance may have landed there too, counted by both)
    assert view_used() == cloud.placement.get_usages(chosen).get("MEMORY_MB", 0)
    assert used_before >= 256


# -------------------------------------------------------------- the API feed: claims confirmed


def test_the_api_feed_confirms_a_claim_and_refuses_a_host_placement_no_longer_offers(
    cloud, drivers
):
    only = _hosts(cloud)[2]
    _add_trait(cloud, only, ONLY)
    driver = _driver(cloud, "api")
    drivers.append(driver)
    _add_trait(cloud, only, MARK)  # after the view loaded: it does not know
    with pytest.raises(NoValidHost):
        _select(driver, _spec({ONLY: "required", MARK: "forbidden"}))
    view_req, placement_req = driver.requests[-2:]
    # the stale view offered the host; Placement did not confirm it, nothing was claimed
    assert view_req.trace.candidate_source == "view"
    assert set(view_req.scratch.allocation_candidates) == {only}
    assert view_req.trace.claims_made == 0 and view_req.trace.claim_failures == 1
    assert "no longer a candidate" in view_req.trace.placement_errors[-1]
    assert placement_req.trace.candidate_source == "placement"
    assert not driver.view_refresher.fresh_per_request
    # and the view reads that provider again at once (not a minute later)
    deadline = time.monotonic() + 10
    while MARK not in driver.view.record(only).traits:
        assert time.monotonic() < deadline, "the refused provider was not read again"
        time.sleep(0.05)


def test_the_api_feed_claims_a_host_placement_confirms(cloud, drivers):
    driver = _driver(cloud, "api")
    drivers.append(driver)
    chosen, req = _select(driver, _spec())
    assert req.trace.candidate_source == "view"
    assert req.trace.claims_made == 1 and req.trace.claim_failures == 0
    assert "claim_confirm" in req.trace.timings
    allocations = cloud.placement.get_allocations_for_consumer(req.instance_uuid)
    assert list(allocations["allocations"]) == [chosen]


def test_the_api_feed_returns_no_alternate_placement_no_longer_offers(cloud, drivers):
    CONF.set_override("max_attempts", HOSTS, group="scheduler")  # every host, if offered
    driver = _driver(cloud, "api")
    drivers.append(driver)
    marked = _hosts(cloud)[3]
    _add_trait(cloud, marked, MARK)  # after the view loaded: it does not know
    ctx = RequestContext(user_id="u-fresh", project_id="p-fresh", request_id="req-fresh")
    instance = str(uuidlib.uuid4())
    driver.placed.append(instance)
    [selections] = driver.select_destinations(ctx, _spec({MARK: "forbidden"}), [instance], True)
    req = driver.requests[-1]
    assert req.trace.candidate_source == "view"
    # the conductor would claim an alternate as it is: none may be the marked host
    assert len(selections) == HOSTS - 1
    assert marked not in {s.compute_node_uuid for s in selections}


def test_database_feed_confirms_only_when_asked(cloud, drivers):
    driver = _driver(cloud, "database")
    drivers.append(driver)
    _, req = _select(driver, _spec())
    assert req.trace.candidate_source == "view" and "claim_confirm" not in req.trace.timings
    driver.stop()
    drivers.remove(driver)
    driver = _driver(cloud, "database", view_confirm_claims="always")
    drivers.append(driver)
    _, req = _select(driver, _spec())
    assert req.trace.candidate_source == "view" and "claim_confirm" in req.trace.timings


def test_auto_without_a_database_connection_asks_placement_every_time(cloud, drivers):
    CONF.set_override("auth_type", "noauth2", group="placement")
    CONF.set_override("endpoint_override", cloud.service.url, group="placement")
    CONF.set_override("view_feed", "auto", group="placement")
    CONF.set_override("view_database_connection", None, group="placement")
    assert view_from_conf(CONF, PlacementClient(cloud.service.url)) is None


def test_providers_created_and_deleted_just_before_a_request_are_seen(cloud):
    view = ProviderView()
    refresher = ViewRefresher(view, DatabaseFeed(cloud.service.db_url, full_scan_every=1e9))
    try:
        assert refresher.load()
        rp = str(uuidlib.uuid4())
        cloud.placement.create_provider(
            rp, f"fresh-new-{rp[:8]}", inventories={"VCPU": 4}, traits=[MARK]
        )
        assert refresher.ensure_fresh(view.now()) is None
        assert view.record(rp) is not None and MARK in view.record(rp).traits
        cloud.placement.delete_provider(rp)
        assert refresher.ensure_fresh(view.now()) is None
        assert view.record(rp) is None
        checks = refresher.feed.catch_ups
        assert refresher.ensure_fresh(view.now()) is None  # nothing changed since
        assert refresher.feed.catch_ups == checks
    finally:
        refresher.stop()


# -------------------------------------------------------------- catch_up on every backend


def _reparent(url: str, child: str, parent: str, name: str) -> None:
    """Move ``child`` under ``parent`` (Placement 1.37 at ``url``): no generation changes."""
    resp = requests.put(
        f"{url}/resource_providers/{child}",
        json={"name": name, "parent_provider_uuid": parent},
        headers={"X-Auth-Token": "admin", "OpenStack-API-Version": "placement 1.37"},
        timeout=30,
    )
    assert resp.status_code == 200, resp.text


def test_catch_up_sees_what_changed_on_each_backend(placement, fleet, client):
    feed = DatabaseFeed(placement.db_url, full_scan_every=1e9)
    view = ProviderView()
    try:
        feed.load(view)
        assert feed.catch_up(view) == 0  # nothing changed: one statement, nothing read
        root, other = fleet.roots[:2]
        client.ensure_traits([MARK])
        client.set_traits(root, [*view.record(root).traits, MARK])
        assert feed.catch_up(view) >= 1
        assert MARK in view.record(root).traits
        # moved to another tree: no generation changes, the root ids do
        _reparent(placement.service.url, fleet.child, other, f"dbfeed-gpu-{fleet.child[:8]}")
        assert feed.catch_up(view) >= 1
        assert view.record(fleet.child).root_uuid == other
        # moved within that tree, under a new child: no generation and no root id changes,
        # the parent ids do (same_subtree answers change)
        mid = str(uuidlib.uuid4())
        fleet.providers.insert(fleet.providers.index(fleet.child), mid)  # removed after it
        client.create_provider(mid, f"dbfeed-mid-{mid[:8]}", parent_provider_uuid=other)
        assert feed.catch_up(view) >= 1
        _reparent(placement.service.url, fleet.child, mid, f"dbfeed-gpu-{fleet.child[:8]}")
        assert feed.catch_up(view) >= 1
        assert view.record(fleet.child).parent_uuid == mid
        assert view.record(fleet.child).root_uuid == other
        checks = feed.catch_ups
        assert feed.catch_up(view) == 0 and feed.catch_ups == checks
    finally:
        feed.close()


def test_catch_up_finds_a_counted_claim_placement_lost_on_each_backend(placement, fleet, client):
    """The claims the scheduler counts are looked up in the check's own statement: one that
    Placement no longer holds (a DELETE /allocations, no generation change) is told to
    ``on_consumer_gone`` and its tree is read again; one held elsewhere (a move) is told
    too; held ones cost no read."""
    root, other = fleet.roots[:2]
    kept, lost = new_uuid(), new_uuid()
    for consumer in (kept, lost):
        claim(client, consumer, {root: {"VCPU": 1}})
    feed = DatabaseFeed(placement.db_url, full_scan_every=1e9)
    view = ProviderView()
    counted = {kept: {root}, lost: {root}}
    told: list[tuple[str, str]] = []
    view.counted_claims = lambda: counted
    view.on_consumer_gone = lambda consumer, rp: told.append((consumer, rp))
    try:
        feed.load(view)
        assert feed.catch_up(view) == 0 and told == []
        used = view.record(root).used["VCPU"]
        client.delete_allocation_for_instance(lost)
        assert feed.catch_up(view) >= 1
        assert (lost, root) in told and (kept, root) not in told
        assert view.record(root).used["VCPU"] == used - 1
        assert lost not in view.record(root).consumers
        counted.pop(lost)
        counted[kept] = {other}  # counted where Placement does not hold it
        told.clear()
        feed.catch_up(view)
        assert told == [(kept, other)]
        counted.clear()
        checks = feed.claim_checks
        assert feed.catch_up(view) == 0 and feed.claim_checks == checks
    finally:
        client.delete_allocation_for_instance(kept)
        feed.close()


def test_a_check_sent_ahead_is_as_fresh_as_its_sending(placement, fleet, client):
    """``send_check`` (PyMySQL; elsewhere it declines and catch_up runs the statement): the
    view is current as of the moment the check was sent, so a change committed after it is
    left to the next check, and a check sent before a request arrived is not used for it."""
    clock = [1000.0]
    feed = DatabaseFeed(placement.db_url, full_scan_every=1e9, clock=lambda: clock[0])
    view = ProviderView(clock=lambda: clock[0])
    try:
        feed.load(view)
        root, other = fleet.roots[:2]
        client.ensure_traits([MARK])
        clock[0] += 1
        sent = feed.send_check(view)
        assert sent == (placement.kind == "mariadb")
        client.set_traits(root, [*view.record(root).traits, MARK])
        if sent:
            # the statement's snapshot began before the trait was set: nothing to read
            assert feed.catch_up(view, since=clock[0]) == 0
            assert MARK not in view.record(root).traits
            assert view.refreshed_at == clock[0]
            clock[0] += 1  # a request that arrived after the trait was set
        assert feed.catch_up(view, since=clock[0]) >= 1
        assert MARK in view.record(root).traits
        # a check sent before the request arrived is received, then run again
        assert feed.send_check(view) == sent
        clock[0] += 1
        client.set_traits(other, [*view.record(other).traits, MARK])
        assert feed.catch_up(view, since=clock[0]) >= 1
        assert MARK in view.record(other).traits
        assert view.refreshed_at == clock[0]
        for rp in (root, other):
            client.set_traits(rp, [t for t in view.record(rp).traits if t != MARK])
        assert feed.catch_up(view) >= 1
    finally:
        feed.close()
