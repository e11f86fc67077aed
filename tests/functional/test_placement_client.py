"""PlacementClient against the real Placement 16 service (gunicorn on SQLite; MariaDB for
the concurrency test)."""

# ruff: noqa: F811 - the fixtures are imported by name, and test arguments reuse those names

from __future__ import annotations

import socket
import threading
import time
import uuid

import pytest

from placement_client.api import (
    AllocationCandidatesQuery,
    ClaimConflict,
    ConsumerGenerationConflict,
    PlacementClient,
    PlacementClientError,
    PlacementConnectionError,
    ProviderSpec,
    QueryGroup,
)
from tests.functional.fixtures_placement import (  # noqa: F401 - pytest fixtures
    make_mariadb_placement,
    placement_client,
    placement_service,
)

PROJECT = "p-" + uuid.uuid4().hex[:8]
USER = "u-" + uuid.uuid4().hex[:8]


def _u() -> str:
    return str(uuid.uuid4())


def _inv(vcpu: int = 8, ram: int = 8192, disk: int = 100) -> dict:
    return {
        "VCPU": {"total": vcpu, "max_unit": vcpu},
        "MEMORY_MB": {"total": ram, "max_unit": ram},
        "DISK_GB": {"total": disk, "max_unit": disk},
    }


def _base(**resources: int) -> QueryGroup:
    return QueryGroup(resources=resources or {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1})


def _fleet(client: PlacementClient, n: int = 4, **kw) -> tuple[str, list[str]]:
    """n providers in one fresh aggregate (so each test only sees its own hosts)."""
    agg = _u()
    rps = [_u() for _ in range(n)]
    specs = [
        ProviderSpec(rp, f"cn-{rp[:8]}", _inv(**kw), traits=[], aggregates=[agg]) for rp in rps
    ]
    gens = client.create_providers_bulk(specs, workers=4)
    assert all(g >= 2 for g in gens)  # POST, inventories, aggregates each bump it
    return agg, rps


def _run_together(targets) -> None:
    """Run each callable on a thread of its own and wait for them all."""
    threads = [threading.Thread(target=target) for target in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)


def _rps(answer) -> set[str]:
    return {rp for ar in answer.allocation_requests for rp in ar["allocations"]}


def test_version_and_ping(placement_client):
    assert placement_client.version() == "1.39"
    assert placement_client.ping() is True


def test_default_nova_query_skips_disabled_hosts(placement_client):
    agg = _u()
    up, disabled = _u(), _u()
    placement_client.create_provider(up, "up-" + up[:8], inventories=_inv(), aggregates=[agg])
    placement_client.create_provider(
        disabled,
        "dis-" + disabled[:8],
        inventories=_inv(),
        traits=["COMPUTE_STATUS_DISABLED"],
        aggregates=[agg],
    )
    query = AllocationCandidatesQuery(
        [_base(VCPU=1, MEMORY_MB=2048, DISK_GB=20)],
        limit=1000,
        root_forbidden={"COMPUTE_STATUS_DISABLED"},
    )
    answer = placement_client.get_allocation_candidates(query, request_id="req-" + _u())
    assert up in _rps(answer) and disabled not in _rps(answer)
    assert answer.provider_summaries[up]["resources"]["VCPU"]["capacity"] == 8
    assert answer.elapsed > 0
    ar = next(a for a in answer.allocation_requests if up in a["allocations"])
    assert ar["allocations"][up]["resources"] == {"VCPU": 1, "MEMORY_MB": 2048, "DISK_GB": 20}
    assert ar["mappings"] == {"": [up]}


def test_member_of_required_forbidden_and_limit(placement_client):
    agg, rps = _fleet(placement_client, 4)
    placement_client.set_traits(rps[0], ["CUSTOM_SSD", "HW_CPU_X86_AVX2"])
    placement_client.set_traits(rps[1], ["CUSTOM_SSD"])
    placement_client.set_traits(rps[2], ["HW_CPU_X86_AVX2"])

    def query(**kw):
        group = _base()
        group.member_of = [[agg]]
        for k, v in kw.items():
            setattr(group, k, v)
        return AllocationCandidatesQuery([group], limit=1000)

    assert _rps(placement_client.get_allocation_candidates(query())) == set(rps)
    answer = placement_client.get_allocation_candidates(query(required_traits={"CUSTOM_SSD"}))
    assert _rps(answer) == {rps[0], rps[1]}
    answer = placement_client.get_allocation_candidates(
        query(required_traits={"CUSTOM_SSD"}, forbidden_traits={"HW_CPU_X86_AVX2"})
    )
    assert _rps(answer) == {rps[1]}
    limited = query()
    limited.limit = 2
    assert len(placement_client.get_allocation_candidates(limited).allocation_requests) == 2
    # an OR-set with an unknown aggregate still matches; a forbidden aggregate excludes all
    other = query()
    other.groups[0].member_of = [[agg, _u()]]
    assert _rps(placement_client.get_allocation_candidates(other)) == set(rps)
    forbidden = query()
    forbidden.groups[0].forbidden_aggregates = {agg}
    assert _rps(placement_client.get_allocation_candidates(forbidden)) == set()


def test_granular_groups_with_group_policy(placement_client):
    agg, (rp,) = _fleet(placement_client, 1)
    placement_client.set_traits(rp, ["CUSTOM_SSD"])
    base = QueryGroup(resources={"VCPU": 1, "MEMORY_MB": 512}, member_of=[[agg]])
    disk = QueryGroup(suffix="1", resources={"DISK_GB": 1}, required_traits={"CUSTOM_SSD"})
    ssd2 = QueryGroup(suffix="_X", resources={"DISK_GB": 2}, required_traits={"CUSTOM_SSD"})
    answer = placement_client.get_allocation_candidates(
        AllocationCandidatesQuery([base, disk, ssd2], limit=10, group_policy="none")
    )
    ar = next(a for a in answer.allocation_requests if rp in a["allocations"])
    assert ar["allocations"][rp]["resources"] == {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 3}
    assert ar["mappings"] == {"": [rp], "1": [rp], "_X": [rp]}
    # isolate needs the two numbered groups on different providers: only one here
    isolated = placement_client.get_allocation_candidates(
        AllocationCandidatesQuery([base, disk, ssd2], limit=10, group_policy="isolate")
    )
    assert rp not in _rps(isolated)


def test_claim_is_visible_in_usages_and_full_host_conflicts(placement_client):
    agg, (rp,) = _fleet(placement_client, 1, vcpu=2)
    query = AllocationCandidatesQuery(
        [QueryGroup(resources={"VCPU": 2, "MEMORY_MB": 512}, member_of=[[agg]])]
    )
    ar = placement_client.get_allocation_candidates(query).allocation_requests[0]
    first = _u()
    placement_client.claim_resources(first, ar, PROJECT, USER)
    assert placement_client.get_usages(rp) == {"VCPU": 2, "MEMORY_MB": 512, "DISK_GB": 0}
    record = placement_client.get_allocations_for_consumer(first)
    assert record["allocations"][rp]["resources"] == {"VCPU": 2, "MEMORY_MB": 512}
    assert record["project_id"] == PROJECT and record["consumer_generation"] == 1
    # the candidate went stale: the host is now full
    with pytest.raises(ClaimConflict) as err:
        placement_client.claim_resources(_u(), ar, PROJECT, USER)
    assert err.value.status == 409 and err.value.code == "placement.undefined_code"
    assert "capacity" in err.value.detail
    assert placement_client.delete_allocation_for_instance(first) is True
    assert placement_client.delete_allocation_for_instance(first) is False
    assert placement_client.get_usages(rp)["VCPU"] == 0


def test_consumer_generation_conflict(placement_client):
    agg, (rp,) = _fleet(placement_client, 1)
    ar = {"allocations": {rp: {"resources": {"VCPU": 1}}}}
    consumer = _u()
    placement_client.claim_resources(consumer, ar, PROJECT, USER)
    with pytest.raises(ConsumerGenerationConflict) as err:
        placement_client.claim_resources(consumer, ar, PROJECT, USER, consumer_generation=7)
    assert err.value.code == "placement.concurrent_update"
    assert "consumer generation" in err.value.detail
    assert "re-read" in str(err.value)


def test_move_claim_doubles_up_allocations(placement_client):
    agg, (src, dst) = _fleet(placement_client, 2)
    consumer = _u()
    placement_client.claim_resources(
        consumer, {"allocations": {src: {"resources": {"VCPU": 2}}}}, PROJECT, USER
    )
    placement_client.claim_resources(
        consumer, {"allocations": {dst: {"resources": {"VCPU": 2}}}}, PROJECT, USER
    )
    allocs = placement_client.get_allocations_for_consumer(consumer)["allocations"]
    assert {rp: a["resources"] for rp, a in allocs.items()} == {
        src: {"VCPU": 2},
        dst: {"VCPU": 2},
    }


def test_orphan_consumer_after_400_can_still_claim(placement_client):
    agg, (rp,) = _fleet(placement_client, 1)
    consumer = _u()
    with pytest.raises(PlacementClientError) as err:
        placement_client.claim_resources(
            consumer, {"allocations": {_u(): {"resources": {"VCPU": 1}}}}, PROJECT, USER
        )
    assert err.value.status == 400
    placement_client.claim_resources(
        consumer, {"allocations": {rp: {"resources": {"VCPU": 1}}}}, PROJECT, USER
    )
    assert placement_client.get_usages(rp)["VCPU"] == 1


def test_unknown_trait_is_a_client_error_with_hint(placement_client):
    query = AllocationCandidatesQuery(
        [QueryGroup(resources={"VCPU": 1}, required_traits={"CUSTOM_NOPE_" + _u()[:4].upper()})]
    )
    with pytest.raises(PlacementClientError) as err:
        placement_client.get_allocation_candidates(query)
    assert err.value.status == 400
    assert "No such trait" in err.value.detail
    assert "Create the custom trait" in str(err.value)


def test_request_id_reaches_placement_log(placement_client, placement_service):
    request_id = "req-" + _u()
    placement_client.get_allocation_candidates(
        AllocationCandidatesQuery([_base()], limit=1), request_id=request_id
    )
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if request_id in placement_service.log_path.read_text(errors="replace"):
            return
        time.sleep(0.1)
    pytest.fail(f"{request_id} not in placement.log:\n{placement_service.log_tail(10)}")


def test_provider_admin_round_trip(placement_client):
    rp = _u()
    agg = _u()
    placement_client.create_provider(
        rp, "adm-" + rp[:8], inventories={"VCPU": 4, "CUSTOM_WIDGET": 3}
    )
    assert placement_client.set_aggregates(rp, [agg]) >= 2
    assert placement_client.set_traits(rp, ["CUSTOM_ADMIN_T"]) >= 3
    assert any(p["uuid"] == rp for p in placement_client.list_providers())
    assert placement_client.get_usages(rp) == {"VCPU": 0, "CUSTOM_WIDGET": 0}
    assert placement_client.delete_provider(rp) is True
    assert placement_client.delete_provider(rp) is False
    assert placement_client.get_provider(rp) is None


def test_closed_port_is_a_connection_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = PlacementClient(f"http://127.0.0.1:{port}", timeout=2)
    with pytest.raises(PlacementConnectionError) as err:
        client.get_allocation_candidates(AllocationCandidatesQuery([_base()]))
    assert f"127.0.0.1:{port}" in str(err.value)
    assert client.ping() is False


def test_concurrent_claims_never_overcommit_on_mariadb():
    service = make_mariadb_placement(workers=2, conflict_retries=1)
    with service:
        client = PlacementClient(service.url, claim_retries=10, retry_backoff=0.01)
        rp = _u()
        client.create_provider(rp, "race-" + rp[:8], inventories={"VCPU": {"total": 4}})
        ar = {"allocations": {rp: {"resources": {"VCPU": 1}}}}
        barrier = threading.Barrier(8)
        results: list[str] = []
        lock = threading.Lock()

        def claim() -> None:
            barrier.wait()
            try:
                client.claim_resources(_u(), ar, PROJECT, USER)
                outcome = "ok"
            except ClaimConflict:
                outcome = "full"
            except Exception as exc:  # recorded so the assertion shows it
                outcome = repr(exc)
            with lock:
                results.append(outcome)

        _run_together([claim] * 8)
        assert sorted(results) == ["full"] * 4 + ["ok"] * 4, results
        assert client.get_usages(rp) == {"VCPU": 4}


_THREAD_MODE_SCRIPT = r"""
import sys, uuid
from placement_client.api import PlacementClient, ProviderSpec
from scheduler.demo.embedded_placement import EmbeddedPlacement

with EmbeddedPlacement("sqlite:///" + sys.argv[1], mode="thread") as service:
    client = PlacementClient(service.url, retry_backoff=0.01)
    specs = [ProviderSpec(str(uuid.uuid4()), f"t{i}", {"VCPU": 2}, traits=["CUSTOM_T"])
             for i in range(12)]
    client.create_providers_bulk(specs, workers=8)  # concurrent writes, serialized on SQLite
    rp = specs[0].uuid
    client.claim_resources(str(uuid.uuid4()), {"allocations": {rp: {"resources": {"VCPU": 2}}}},
                           "p", "u")
    print(len(client.list_providers()), client.get_usages(rp)["VCPU"])
"""


def test_thread_mode_serves_placement_in_process(tmp_path):
    # a child process: thread mode keeps Placement's DB context in process globals
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", _THREAD_MODE_SCRIPT, str(tmp_path / "p.sqlite")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["12", "2"]


def test_embedded_placement_fails_loudly_on_a_missing_database():
    from scheduler.demo.embedded_placement import EmbeddedPlacement, EmbeddedPlacementError

    service = EmbeddedPlacement(
        "mysql+pymysql://root@127.0.0.1:3306/novasched_missing_" + uuid.uuid4().hex[:8],
        mode="process",
    )
    with pytest.raises(EmbeddedPlacementError) as err:
        service.start()
    assert "db sync failed" in str(err.value) and "Unknown database" in str(err.value)
    assert service.run_dir is None  # cleaned up


def _slowed(client: PlacementClient, seconds: float) -> list[str]:
    """Make every GET of ``client`` take ``seconds`` longer (so that concurrent queries
    overlap for sure); returns the list of the paths it sent."""
    sent: list[str] = []
    real = client._request

    def slow(method, path, *args, **kwargs):
        if method == "GET" and path.startswith("/allocation_candidates"):
            sent.append(path)
            time.sleep(seconds)
        return real(method, path, *args, **kwargs)

    client._request = slow
    return sent


def test_identical_candidate_queries_in_flight_share_one_placement_call(placement_service):
    agg, rps = _fleet(PlacementClient(placement_service.url), n=3)

    def in_agg(group: QueryGroup) -> AllocationCandidatesQuery:
        group.member_of = [[agg]]
        return AllocationCandidatesQuery([group], limit=1000)

    query = in_agg(_base())
    other = in_agg(_base(VCPU=2, MEMORY_MB=512, DISK_GB=1))
    client = PlacementClient(placement_service.url, coalesce_candidates=True)
    sent = _slowed(client, 0.5)
    start = threading.Barrier(7)
    answers: list = [None] * 7

    def ask(i: int) -> None:
        start.wait()
        answers[i] = client.get_allocation_candidates(other if i == 6 else query)

    _run_together([lambda i=i: ask(i) for i in range(7)])
    # the six identical queries went to Placement once; the other one on its own
    assert len(sent) == 2 and client.coalesced == 5
    assert all(a is answers[0] for a in answers[:6])
    expected = PlacementClient(placement_service.url).get_allocation_candidates(query)
    assert answers[0].allocation_requests == expected.allocation_requests
    assert _rps(answers[0]) == _rps(answers[6]) == set(rps)
    # nothing in flight any more: the next query asks Placement again
    client.get_allocation_candidates(query)
    assert len(sent) == 3


def test_a_query_that_arrived_after_an_identical_one_was_sent_asks_placement_itself(
    placement_service,
):
    """Fresh as nova: an answer shared must have been asked after the caller arrived, so
    that it holds every change committed before (a trait set just before the boot)."""
    agg, _ = _fleet(PlacementClient(placement_service.url), n=2)
    group = _base()
    group.member_of = [[agg]]
    query = AllocationCandidatesQuery([group], limit=1000)
    client = PlacementClient(placement_service.url, coalesce_candidates=True)
    sent = _slowed(client, 0.5)
    first_sent = threading.Event()
    answers: list = [None] * 3

    def early() -> None:
        first_sent.set()
        answers[0] = client.get_allocation_candidates(query, not_before=time.monotonic())

    def late(i: int) -> None:
        assert first_sent.wait(5)
        time.sleep(0.1)  # the first query is in flight: this caller arrived after it left
        answers[i] = client.get_allocation_candidates(query, not_before=time.monotonic() - 0.05)

    _run_together([early, lambda: late(1), lambda: late(2)])
    # the two late callers shared one call of their own; none took the early one's answer
    assert len(sent) == 2 and client.coalesced == 1
    assert answers[1] is answers[2] and answers[1] is not answers[0]


def test_a_failed_query_in_flight_fails_every_query_waiting_for_it(placement_service):
    client = PlacementClient(placement_service.url, coalesce_candidates=True)
    _slowed(client, 0.5)
    start = threading.Barrier(4)
    errors: list = []

    def ask() -> None:
        start.wait()
        try:
            client.get_allocation_candidates("resources=NOT_A_CLASS:1&limit=10")
        except PlacementClientError as exc:
            errors.append(exc)

    _run_together([ask] * 4)
    assert len(errors) == 4 and len({id(e) for e in errors}) == 4
    assert all(e.status == 400 and "NOT_A_CLASS" in str(e) for e in errors)


# -- claims whose answer is lost (issue 10) ----------------------------------------------------
def _driver_on(client: PlacementClient, n: int = 2):
    """The real filter scheduler on ``client``, with HostStates for n fresh providers."""
    from scheduler.drivers.filter_scheduler import FilterScheduler
    from tests.unit.scheduler.drivers.fakes import FakeHostManager, make_host

    _, rps = _fleet(client, n)
    hosts = []
    for i, rp in enumerate(rps):
        host = make_host(f"lost-{rp[:8]}-{i}")
        host.uuid = rp
        hosts.append(host)
    return FilterScheduler(placement=client, host_manager=FakeHostManager(hosts)), hosts


def _lose_answers(client: PlacementClient, plan: list[str]) -> list[str]:
    """Wrap the client's HTTP session: the n-th PUT /allocations follows plan[n]:
    "landed" (Placement answers, the answer is dropped: a read timeout), "dropped" (never
    sent: a read timeout too), "ok"; after a "landed-unreachable" PUT every later GET of
    /allocations fails as well, until Placement is "back" (``del session.send``). Returns the
    log of what was done."""
    import requests

    session = client._session
    real_send = session.send
    log: list[str] = []
    state = {"down": False}

    def send(request, **kwargs):
        is_claim = request.method == "PUT" and "/allocations/" in request.url
        if state["down"] and request.method == "GET" and "/allocations/" in request.url:
            log.append("GET failed")
            raise requests.ConnectionError("Connection reset by peer")
        if not is_claim or not plan:
            return real_send(request, **kwargs)
        step = plan.pop(0)
        log.append(step)
        if step == "ok":
            return real_send(request, **kwargs)
        if step in ("landed", "landed-unreachable"):
            answer = real_send(request, **kwargs)
            assert answer.status_code == 204, answer.text
            state["down"] = step == "landed-unreachable"
        raise requests.ReadTimeout("Read timed out. (read timeout=0.01)")

    session.send = send
    return log


def test_claim_whose_answer_is_lost_but_landed_is_used(placement_service):
    from scheduler.objects import Flavor, RequestSpec

    client = PlacementClient(placement_service.url, timeout=5.0)
    driver, _ = _driver_on(client)
    log = _lose_answers(client, ["landed"])
    instance = _u()
    spec = RequestSpec(
        flavor=Flavor(memory_mb=512, vcpus=1, root_gb=1, name="m1"),
        num_instances=1,
        project_id=PROJECT,
        user_id=USER,
    )
    result = driver.select_destinations(None, spec, [instance])
    assert log == ["landed"]
    chosen = result[0][0]
    allocations = client.get_allocations_for_consumer(instance)["allocations"]
    assert list(allocations) == [chosen.compute_node_uuid]
    assert allocations[chosen.compute_node_uuid]["resources"] == {
        "VCPU": 1,
        "MEMORY_MB": 512,
        "DISK_GB": 1,
    }
    client.delete_allocation_for_instance(instance)


@pytest.mark.parametrize(
    "plan",
    [
        ["ok", "landed-unreachable"],  # landed, and Placement cannot say so: rollback deletes
        ["ok", "dropped"],  # never reached Placement: nothing to delete but instance 1's
        ["landed", "landed-unreachable"],
    ],
)
def test_request_failing_after_a_lost_answer_leaves_no_orphan(placement_service, plan):
    from scheduler.exceptions import NoValidHost
    from scheduler.objects import Flavor, RequestSpec

    client = PlacementClient(placement_service.url, timeout=5.0)
    driver, _ = _driver_on(client, n=3)
    log = _lose_answers(client, list(plan))
    instances = [_u(), _u(), _u()]
    spec = RequestSpec(
        flavor=Flavor(memory_mb=512, vcpus=1, root_gb=1, name="m1"),
        num_instances=3,
        project_id=PROJECT,
        user_id=USER,
    )
    with pytest.raises(NoValidHost) as err:
        driver.select_destinations(None, spec, instances)
    del client._session.send  # Placement is back: look at what it holds
    assert "Placement unreachable" in err.value.reason
    assert log[: len(plan)] == plan
    # no further claim after Placement stopped answering
    assert log.count("ok") + log.count("landed") + log.count("dropped") <= 2
    for instance in instances:
        assert client.get_allocations_for_consumer(instance)["allocations"] == {}
