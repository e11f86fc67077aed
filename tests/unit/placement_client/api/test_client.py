from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import requests

from placement_client.api import (
    AllocationCandidatesQuery,
    ClaimConflict,
    ClaimConnectionLost,
    ClaimOutcomeUnknown,
    ClaimServerError,
    ConsumerGenerationConflict,
    PlacementClient,
    PlacementClientError,
    PlacementConnectionError,
    PlacementServerError,
    QueryGroup,
)
from placement_client.api import client as client_mod

RP1, RP2 = "rp-1", "rp-2"


class FakeResponse:
    def __init__(self, status: int, body: Any = None, headers: dict | None = None):
        self.status_code = status
        self.content = b"" if body is None else json.dumps(body).encode()
        self.headers = headers or {}


class FakeSession:
    """Answers scripted responses in order and records every request."""

    def __init__(self, *responses: FakeResponse | Exception):
        self.responses = list(responses)
        self.calls: list[dict[str, Any]] = []

    def request(self, method, url, headers=None, data=None, timeout=None):
        self.calls.append(
            {
                "method": method,
                "url": url,
                "headers": dict(headers or {}),
                "body": json.loads(data) if data else None,
            }
        )
        item = self.responses.pop(0)
        if isinstance(item, Exception):
            raise item
        return item


def _error(status: int, code: str, detail: str) -> FakeResponse:
    return FakeResponse(
        status,
        {"errors": [{"status": status, "code": code, "detail": detail, "request_id": "req-p"}]},
    )


def _client(*responses, **kw) -> tuple[PlacementClient, FakeSession]:
    session = FakeSession(*responses)
    kw.setdefault("retry_backoff", 0.0)
    return PlacementClient("http://placement:8778/", session=session, **kw), session


AR = {"allocations": {RP1: {"resources": {"VCPU": 1, "MEMORY_MB": 512}}}, "mappings": {"": [RP1]}}


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch):
    sleeps: list[float] = []
    monkeypatch.setattr(client_mod, "_sleep", sleeps.append)
    return sleeps


def test_allocation_candidates_request_headers_and_parse():
    body = {"allocation_requests": [AR], "provider_summaries": {RP1: {"traits": []}}}
    client, session = _client(FakeResponse(200, body))
    query = AllocationCandidatesQuery([QueryGroup(resources={"VCPU": 1})], limit=5)
    answer = client.get_allocation_candidates(query, request_id="req-abc")
    call = session.calls[0]
    assert call["method"] == "GET"
    assert call["url"] == "http://placement:8778/allocation_candidates?limit=5&resources=VCPU%3A1"
    assert call["headers"]["OpenStack-API-Version"] == "placement 1.36"
    assert call["headers"]["X-Openstack-Request-Id"] == "req-abc"
    assert call["headers"]["X-Auth-Token"] == "admin"
    assert call["headers"]["Accept"] == "application/json"
    assert answer.allocation_requests == [AR]
    assert answer.provider_summaries == {RP1: {"traits": []}}
    assert answer.elapsed >= 0


def test_new_consumer_claim_sends_nova_body_and_leaves_request_untouched():
    client, session = _client(FakeResponse(204))
    original = copy.deepcopy(AR)
    client.claim_resources("c-1", AR, "proj", "user", request_id="req-1")
    # a new consumer: one PUT, nothing read first (nova reads the consumer before every claim)
    (put,) = session.calls
    assert put["method"] == "PUT" and put["url"].endswith("/allocations/c-1")
    assert put["headers"]["OpenStack-API-Version"] == "placement 1.36"
    assert put["body"] == {
        "allocations": AR["allocations"],
        "mappings": AR["mappings"],
        "project_id": "proj",
        "user_id": "user",
        "consumer_generation": None,
    }
    assert AR == original


def test_move_claim_doubles_up_with_the_generation_read():
    current = {
        "allocations": {RP2: {"resources": {"VCPU": 4}, "generation": 9}},
        "consumer_generation": 3,
    }
    exists = _error(
        409, "placement.concurrent_update", "consumer generation conflict - expected 3 but got None"
    )
    client, session = _client(exists, FakeResponse(200, current), FakeResponse(204))
    client.claim_resources("c-1", AR, "p", "u")
    assert [c["method"] for c in session.calls] == ["PUT", "GET", "PUT"]
    assert session.calls[1]["headers"]["OpenStack-API-Version"] == "placement 1.28"
    body = session.calls[2]["body"]
    assert body["consumer_generation"] == 3
    assert body["allocations"] == {
        RP2: {"resources": {"VCPU": 4}},
        RP1: {"resources": {"VCPU": 1, "MEMORY_MB": 512}},
    }


def test_same_host_resize_sums_amounts():
    current = {
        "allocations": {RP1: {"resources": {"VCPU": 2, "MEMORY_MB": 1024}, "generation": 1}},
        "consumer_generation": 1,
    }
    exists = _error(
        409, "placement.concurrent_update", "consumer generation conflict - expected 1 but got None"
    )
    client, session = _client(exists, FakeResponse(200, current), FakeResponse(204))
    client.claim_resources("c-1", AR, "p", "u")
    assert session.calls[2]["body"]["allocations"] == {
        RP1: {"resources": {"VCPU": 3, "MEMORY_MB": 1536}}
    }


def test_provider_generation_race_resends_same_put(no_sleep):
    race = _error(409, "placement.concurrent_update", "resource provider generation conflict")
    client, session = _client(race, race, FakeResponse(204), retry_backoff=0.5)
    client.claim_resources("c-1", AR, "p", "u")
    puts = [c for c in session.calls if c["method"] == "PUT"]
    assert len(puts) == 3 and puts[0]["body"] == puts[2]["body"]
    assert len(no_sleep) == 2
    assert 0 <= no_sleep[0] <= 1.0 and 0 <= no_sleep[1] <= 2.0


def test_provider_generation_race_gives_up_after_claim_retries():
    race = _error(409, "placement.concurrent_update", "Inventory and/or allocations changed")
    client, session = _client(race, race, race, claim_retries=3)
    with pytest.raises(ClaimConflict) as err:
        client.claim_resources("c-1", AR, "p", "u")
    assert len([c for c in session.calls if c["method"] == "PUT"]) == 3
    assert "3 attempts" in str(err.value)


def test_capacity_conflict_is_not_retried():
    full = _error(409, "placement.undefined_code", "... would exceed the capacity.")
    client, session = _client(full)
    with pytest.raises(ClaimConflict) as err:
        client.claim_resources("c-1", AR, "p", "u")
    assert len(session.calls) == 1
    assert err.value.status == 409 and err.value.code == "placement.undefined_code"
    assert err.value.request_id == "req-p"
    assert "try another" in str(err.value)


def test_consumer_generation_conflict_is_raised_without_retry():
    conflict = _error(
        409, "placement.concurrent_update", "consumer generation conflict - expected 2 but got 1"
    )
    exists = _error(
        409, "placement.concurrent_update", "consumer generation conflict - expected 1 but got None"
    )
    current = {"allocations": {RP2: {"resources": {"VCPU": 1}}}, "consumer_generation": 1}
    # the move's doubled-up PUT loses to another writer of the consumer: not retried
    client, session = _client(exists, FakeResponse(200, current), conflict)
    with pytest.raises(ConsumerGenerationConflict):
        client.claim_resources("c-1", AR, "p", "u")
    assert [c["method"] for c in session.calls] == ["PUT", "GET", "PUT"]


def test_orphan_consumer_is_claimed_with_generation_zero():
    orphan = _error(
        409, "placement.concurrent_update", "consumer generation conflict - expected 0 but got None"
    )
    client, session = _client(orphan, FakeResponse(204))
    client.claim_resources("c-1", AR, "p", "u")
    puts = [c["body"]["consumer_generation"] for c in session.calls if c["method"] == "PUT"]
    assert puts == [None, 0]


def test_other_4xx_is_a_client_error():
    client, _ = _client(_error(400, "placement.undefined_code", "Allocation for resource provider"))
    with pytest.raises(PlacementClientError) as err:
        client.claim_resources("c-1", AR, "p", "u")
    assert err.value.status == 400


def test_5xx_is_a_server_error():
    client, _ = _client(FakeResponse(500, {"errors": [{"detail": "boom"}]}))
    with pytest.raises(PlacementServerError) as err:
        client.get_allocation_candidates("resources=VCPU:1")
    assert err.value.status == 500 and "boom" in str(err.value)


def test_connection_failure_is_a_connection_error():
    client, _ = _client(requests.ConnectTimeout("timed out"))
    with pytest.raises(PlacementConnectionError) as err:
        client.delete_allocation_for_instance("c-1")
    assert "http://placement:8778" in str(err.value)


def test_delete_allocation_true_then_false():
    client, session = _client(FakeResponse(204), _error(404, "placement.undefined_code", "no"))
    assert client.delete_allocation_for_instance("c-1") is True
    assert client.delete_allocation_for_instance("c-1") is False
    assert session.calls[0]["method"] == "DELETE"


def test_create_provider_chains_generations():
    client, session = _client(
        FakeResponse(201),  # PUT /traits/CUSTOM_SSD
        FakeResponse(200, {"uuid": RP1, "generation": 0}),
        FakeResponse(200, {"resource_provider_generation": 1}),
        FakeResponse(200, {"resource_provider_generation": 2}),
        FakeResponse(200, {"resource_provider_generation": 3}),
    )
    gen = client.create_provider(
        RP1, "cn1", inventories={"VCPU": 8}, traits=["CUSTOM_SSD", "HW_X"], aggregates=["a"]
    )
    assert gen == 3
    paths = [(c["method"], c["url"].split(":8778")[1]) for c in session.calls]
    assert paths == [
        ("PUT", "/traits/CUSTOM_SSD"),
        ("POST", "/resource_providers"),
        ("PUT", f"/resource_providers/{RP1}/inventories"),
        ("PUT", f"/resource_providers/{RP1}/traits"),
        ("PUT", f"/resource_providers/{RP1}/aggregates"),
    ]
    assert session.calls[2]["body"] == {
        "resource_provider_generation": 0,
        "inventories": {"VCPU": {"total": 8}},
    }
    assert session.calls[3]["body"]["resource_provider_generation"] == 1
    assert session.calls[4]["body"]["resource_provider_generation"] == 2
    versions = [c["headers"]["OpenStack-API-Version"] for c in session.calls]
    assert versions == [
        "placement 1.6",
        "placement 1.20",
        "placement 1.26",
        "placement 1.6",
        "placement 1.19",
    ]


def test_version_reads_max_microversion():
    client, _ = _client(FakeResponse(200, {"versions": [{"max_version": "1.39"}]}))
    assert client.version() == "1.39"


class FakeAdapter:
    def __init__(self, outcome):
        self.outcome = outcome
        self.calls = []

    def request(self, path, method, headers=None, data=None, raise_exc=True, timeout=None):
        self.calls.append((path, method, dict(headers), raise_exc))
        self.timeout = timeout
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


def test_keystone_adapter_is_used_without_raising_and_without_our_token():
    adapter = FakeAdapter(FakeResponse(204))
    client = PlacementClient("", ks_adapter=adapter)
    assert client.delete_allocation_for_instance("c-1", request_id="req-9") is True
    path, method, headers, raise_exc = adapter.calls[0]
    assert (path, method, raise_exc) == ("/allocations/c-1", "DELETE", False)
    assert "X-Auth-Token" not in headers
    assert headers["X-Openstack-Request-Id"] == "req-9"


def test_keystone_connection_failure_is_a_connection_error():
    from keystoneauth1 import exceptions as ks_exc

    client = PlacementClient("", ks_adapter=FakeAdapter(ks_exc.ConnectFailure("refused")))
    with pytest.raises(PlacementConnectionError):
        client.get_allocations_for_consumer("c-1")
    client = PlacementClient("", ks_adapter=FakeAdapter(ks_exc.EndpointNotFound("no")))
    with pytest.raises(PlacementConnectionError):
        client.get_allocations_for_consumer("c-1")


# -- claims: a clear refusal, nothing sent, or an unknown outcome ------------------------------
CLAIM = {"allocations": {RP1: {"resources": {"VCPU": 1}}}, "mappings": {"": [RP1]}}


def _claim_client(*responses) -> tuple[PlacementClient, FakeSession]:
    # the PUT's outcome (a new consumer: nothing is read before it)
    session = FakeSession(*responses)
    return PlacementClient("http://placement", session=session), session


def test_claim_409_capacity_is_a_clear_refusal():
    client, _ = _claim_client(_error(409, "placement.undefined_code", "Unable to allocate"))
    with pytest.raises(ClaimConflict) as err:
        client.claim_resources("c-1", CLAIM, "p", "u")
    assert not isinstance(err.value, ClaimOutcomeUnknown)


def test_claim_other_4xx_is_a_clear_refusal():
    client, _ = _claim_client(_error(400, "placement.undefined_code", "bad"))
    with pytest.raises(PlacementClientError) as err:
        client.claim_resources("c-1", CLAIM, "p", "u")
    assert not isinstance(err.value, ClaimOutcomeUnknown)


@pytest.mark.parametrize(
    "failure",
    [
        requests.ReadTimeout("read timed out"),
        requests.ConnectionError("('Connection aborted.', RemoteDisconnected('Remote end closed"),
        requests.ConnectionError("Connection reset by peer"),
    ],
)
def test_claim_whose_answer_is_lost_has_an_unknown_outcome(failure):
    client, session = _claim_client(failure)
    with pytest.raises(ClaimConnectionLost) as err:
        client.claim_resources("c-1", CLAIM, "p", "u")
    assert isinstance(err.value, PlacementConnectionError)  # and Placement is not answering
    assert err.value.may_have_landed is True
    assert err.value.allocations == CLAIM["allocations"]
    assert err.value.previous == {}
    assert [c["method"] for c in session.calls] == ["PUT"]


def test_claim_5xx_has_an_unknown_outcome():
    client, _ = _claim_client(FakeResponse(503, {"errors": [{"detail": "proxy"}]}))
    with pytest.raises(ClaimServerError) as err:
        client.claim_resources("c-1", CLAIM, "p", "u")
    assert isinstance(err.value, ClaimOutcomeUnknown)
    assert isinstance(err.value, PlacementServerError)
    assert err.value.status == 503
    assert err.value.allocations == CLAIM["allocations"]


@pytest.mark.parametrize(
    "failure",
    [
        requests.ConnectionError(
            "HTTPConnectionPool(host='x', port=8778): Max retries exceeded (Caused by "
            "NewConnectionError('Failed to establish a new connection: [Errno 111] Connection "
            "refused'))"
        ),
        requests.ConnectTimeout("connect timed out"),
    ],
)
def test_claim_never_sent_is_a_plain_connection_error(failure):
    client, _ = _claim_client(failure)
    with pytest.raises(PlacementConnectionError) as err:
        client.claim_resources("c-1", CLAIM, "p", "u")
    assert not isinstance(err.value, ClaimOutcomeUnknown)
    assert err.value.may_have_landed is False


def test_failure_reading_a_moved_consumer_before_the_put_is_not_unknown():
    exists = _error(
        409, "placement.concurrent_update", "consumer generation conflict - expected 2 but got None"
    )
    session = FakeSession(exists, requests.ReadTimeout("read timed out"))
    client = PlacementClient("http://placement", session=session)
    with pytest.raises(PlacementConnectionError) as err:
        client.claim_resources("c-1", CLAIM, "p", "u")
    assert not isinstance(err.value, ClaimOutcomeUnknown)
    assert [c["method"] for c in session.calls] == ["PUT", "GET"]


def test_keystone_timeout_is_an_unknown_claim_outcome_and_the_timeout_is_passed():
    from keystoneauth1 import exceptions as ks_exc

    class Scripted(FakeAdapter):
        def __init__(self):
            super().__init__(None)
            self.outcomes = [ks_exc.ConnectTimeout("t")]

        def request(self, *args, **kwargs):
            self.outcome = self.outcomes.pop(0)
            return super().request(*args, **kwargs)

    adapter = Scripted()
    client = PlacementClient("", ks_adapter=adapter, timeout=7.0)
    with pytest.raises(ClaimConnectionLost):
        client.claim_resources("c-1", CLAIM, "p", "u")
    assert adapter.timeout == 7.0
