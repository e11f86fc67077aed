"""What a claim confirmation asks: the request's query confined to one tree, sent on its
own even when an identical query is in flight."""

from __future__ import annotations

import json
import threading
from urllib.parse import parse_qs, urlsplit

from placement_client.api import AllocationCandidatesQuery, PlacementClient

ROOT = "7d2c86b4-6a52-4c1c-9b55-3a8c2f1e0a01"
OTHER = "7d2c86b4-6a52-4c1c-9b55-3a8c2f1e0a02"


def _query() -> AllocationCandidatesQuery:
    query = AllocationCandidatesQuery(limit=1000)
    base = query.group("")
    base.resources.update({"VCPU": 1, "MEMORY_MB": 512})
    base.forbidden_traits.add("CUSTOM_OLD")
    base.member_of.append(["agg-1", "agg-2"])
    base.in_tree = OTHER
    query.root_forbidden.add("COMPUTE_STATUS_DISABLED")
    return query


def test_a_query_confined_to_a_tree_keeps_every_term_and_drops_the_limit():
    query = _query()
    confined = query.confined_to(ROOT)
    params = parse_qs(confined.to_querystring())
    assert params["in_tree"] == [ROOT]
    assert "limit" not in params
    assert params["resources"] == ["MEMORY_MB:512,VCPU:1"]
    assert params["required"] == ["!CUSTOM_OLD"]
    assert params["member_of"] == ["in:agg-1,agg-2"]
    assert params["root_required"] == ["!COMPUTE_STATUS_DISABLED"]
    # the request's own query is left as it was
    assert query.limit == 1000 and query.group("").in_tree == OTHER
    confined.group("").member_of[0].append("agg-3")
    assert query.group("").member_of == [["agg-1", "agg-2"]]


class _SlowSession:
    """Holds the first GET until released; answers every GET with no candidates."""

    def __init__(self):
        self.urls: list[str] = []
        self.first = threading.Event()
        self.release = threading.Event()

    def request(self, method, url, headers=None, data=None, timeout=None):
        self.urls.append(url)
        if len(self.urls) == 1:
            self.first.set()
            assert self.release.wait(5)

        class Answer:
            status_code = 200
            content = json.dumps({"allocation_requests": [], "provider_summaries": {}}).encode()
            headers: dict = {}

        return Answer()


def test_a_confirmation_is_not_answered_by_an_identical_query_in_flight():
    session = _SlowSession()
    client = PlacementClient("http://placement", session=session, coalesce_candidates=True)
    query = _query().confined_to(ROOT)
    leader = threading.Thread(target=client.get_allocation_candidates, args=(query,))
    leader.start()
    assert session.first.wait(5)
    # sent while the identical query waits for its answer: a request of its own
    client.get_allocation_candidates(query, coalesce=False)
    session.release.set()
    leader.join(5)
    assert len(session.urls) == 2
    assert client.coalesced == 0
    assert urlsplit(session.urls[1]).path == "/allocation_candidates"
