"""explain: the Placement bisection, the dry-run document, its text, the request readers and
the RPC method — with a fake Placement that evaluates queries and a fake host manager."""

from __future__ import annotations

import copy
import json
import logging
import uuid
from dataclasses import dataclass, field
from types import SimpleNamespace

import oslo_messaging
import pytest

from placement_client import hint as bisection
from placement_client.api import (
    AllocationCandidates,
    AllocationCandidatesQuery,
    PlacementClientError,
    PlacementConnectionError,
)
from scheduler import explain
from scheduler.conf import CONF
from scheduler.drivers.filter_scheduler import FilterScheduler
from scheduler.exceptions import InvalidRequest, NoValidHost, NovaschedError
from scheduler.objects import Flavor, ImageMeta, InstanceGroup, RequestSpec
from scheduler.rpc import rpcapi, wire
from scheduler.rpc.context import RequestContext
from scheduler.rpc.manager import SchedulerManager
from tests.unit.scheduler.drivers.fakes import (
    FakeHostManager,
    FakePlacement,
    make_host,
    make_spec,
)

CONTEXT = SimpleNamespace(request_id="req-explain", project_id="p", user_id="u")


# -- a Placement that evaluates the unsuffixed group of a query -------------------------------
@dataclass
class Provider:
    uuid: str
    capacity: dict[str, int]
    traits: set[str] = field(default_factory=set)
    aggregates: set[str] = field(default_factory=set)


class QueryPlacement:
    """Answers GET /allocation_candidates by evaluating the query over single-provider trees:
    resources (capacity), required/forbidden traits, member_of, in_tree, root traits."""

    def __init__(self, providers: list[Provider]):
        self.providers = providers
        self.queries: list[AllocationCandidatesQuery] = []
        self.fail_after: int | None = None  # raise a connection error from this call on
        self.refuse: set[str] = set()  # resource classes whose absence Placement refuses

    def _fits(self, p: Provider, q: AllocationCandidatesQuery) -> bool:
        if q.root_required - p.traits or q.root_forbidden & p.traits:
            return False
        for g in q.effective_groups():
            if any(p.capacity.get(rc, 0) < n for rc, n in g.resources.items() if n):
                return False
            if g.required_traits - p.traits or g.forbidden_traits & p.traits:
                return False
            if any(not set(s) & p.aggregates for s in g.member_of):
                return False
            if g.forbidden_aggregates & p.aggregates:
                return False
            if g.in_tree and g.in_tree != p.uuid:
                return False
        return True

    def get_allocation_candidates(
        self, query, request_id=None, *, not_before=None
    ) -> AllocationCandidates:
        self.queries.append(query)
        if self.fail_after is not None and len(self.queries) > self.fail_after:
            raise PlacementConnectionError("placement went away")
        missing = self.refuse - set(query.total_resources())
        if missing and len(self.queries) > 1:
            raise PlacementClientError(f"bad query without {missing}", status=400)
        fit = [p for p in self.providers if self._fits(p, query)]
        if query.limit is not None:
            fit = fit[: query.limit]
        return AllocationCandidates(
            allocation_requests=[
                {"allocations": {p.uuid: {"resources": query.total_resources()}}} for p in fit
            ],
            provider_summaries={
                p.uuid: {"resources": {}, "traits": sorted(p.traits), "root_provider_uuid": p.uuid}
                for p in fit
            },
        )


def _providers() -> list[Provider]:
    big = {"VCPU": 64, "MEMORY_MB": 262144, "DISK_GB": 2000}
    small = {"VCPU": 8, "MEMORY_MB": 16384, "DISK_GB": 200}
    return [
        Provider("rp-1", dict(big), {"HW_ARCH_X86_64"}, {"agg-a"}),
        Provider("rp-2", dict(small), {"HW_ARCH_X86_64", "CUSTOM_SSD"}, {"agg-a"}),
        Provider("rp-3", dict(small), {"HW_ARCH_AARCH64"}, {"agg-b"}),
        Provider("rp-4", dict(small), {"HW_ARCH_X86_64", "COMPUTE_STATUS_DISABLED"}, {"agg-b"}),
    ]


def _query(**resources: int) -> AllocationCandidatesQuery:
    q = AllocationCandidatesQuery(limit=1000)
    q.group("").resources.update(resources or {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 10})
    q.root_forbidden.add("COMPUTE_STATUS_DISABLED")
    return q


# -- query terms ---------------------------------------------------------------------------------
def test_terms_put_traits_and_aggregates_before_resources():
    q = _query()
    base = q.group("")
    base.required_traits.add("CUSTOM_GPU")
    base.forbidden_traits.add("CUSTOM_SLOW")
    base.member_of.append(["agg-b", "agg-a"])
    q.group("net").resources["NET_BW_EGR_KILOBIT_PER_SEC"] = 10
    labels = [t.label for t in bisection.query_terms(q)]
    assert labels == [
        "forbidden root trait COMPUTE_STATUS_DISABLED",
        "required trait CUSTOM_GPU",
        "forbidden trait CUSTOM_SLOW",
        "aggregate member_of=in:agg-a,agg-b",
        "VCPU:1",
        "MEMORY_MB:512",
        "DISK_GB:10",
        "NET_BW_EGR_KILOBIT_PER_SEC:10 (group net)",
    ]


def test_the_only_resource_is_never_a_term_placement_would_refuse_the_query():
    q = _query(MEMORY_MB=512)
    assert [t.kind for t in bisection.query_terms(q)] == ["root_forbidden"]


def test_leaving_a_term_out_copies_the_query():
    q = _query()
    q.group("").required_traits.add("CUSTOM_GPU")
    before = q.to_params()
    for term in bisection.query_terms(q):
        probe = bisection.without_term(q, term)
        assert len(probe.to_params()) <= len(before)
        assert probe.to_params() != before
    assert q.to_params() == before


# -- bisection -----------------------------------------------------------------------------------
def test_bisection_names_the_trait_that_emptied_the_answer():
    placement = QueryPlacement(_providers())
    q = _query()
    q.group("").required_traits.add("CUSTOM_GPU")
    hint = bisection.placement_hint(placement, q)
    # rp-1, rp-2, rp-3 are enabled; rp-4 carries COMPUTE_STATUS_DISABLED
    assert hint == "without required trait CUSTOM_GPU it would return 3 hosts"
    assert len(placement.queries) == len(bisection.query_terms(q))


def test_bisection_names_a_resource_amount_too_large_for_every_host():
    placement = QueryPlacement(_providers())
    q = _query(VCPU=1, MEMORY_MB=300000, DISK_GB=10)
    assert (
        bisection.placement_hint(placement, q) == "without MEMORY_MB:300000 it would return 3 hosts"
    )


def test_bisection_reports_every_single_culprit_and_a_lone_host():
    placement = QueryPlacement(_providers())
    q = _query()
    q.group("").required_traits.update({"CUSTOM_SSD", "HW_ARCH_AARCH64"})
    hint = bisection.placement_hint(placement, q)
    assert hint == (
        "without required trait CUSTOM_SSD it would return 1 host; "
        "without required trait HW_ARCH_AARCH64 it would return 1 host"
    )


def test_bisection_says_when_no_single_term_explains_it():
    placement = QueryPlacement(_providers())
    q = _query(VCPU=500, MEMORY_MB=10**7)
    hint = bisection.placement_hint(placement, q)
    assert hint.startswith("leaving out any one of its 3 terms alone still returns nothing")


def test_bisection_is_bounded():
    placement = QueryPlacement(_providers())
    q = _query()
    q.group("").required_traits.update({f"CUSTOM_T{i}" for i in range(20)})
    result = bisection.bisect_empty_query(placement, q, max_queries=5)
    assert len(placement.queries) == 5
    assert result.tried == 5 and result.total_terms == 24
    assert result.hint() == "leaving out any one of 5 of its 24 terms alone still returns nothing"
    # the default bound holds for a query with many terms
    placement.queries.clear()
    bisection.placement_hint(placement, q)
    assert len(placement.queries) == bisection.MAX_BISECTION_QUERIES


def test_a_refused_probe_is_skipped_and_an_error_stops_the_search_without_a_hint():
    placement = QueryPlacement(_providers())
    placement.refuse = {"VCPU"}
    q = _query(VCPU=1, MEMORY_MB=300000, DISK_GB=10)
    placement.queries.append(q)  # the original query, as the driver asked it
    assert bisection.placement_hint(placement, q) == (
        "without MEMORY_MB:300000 it would return 3 hosts"
    )
    broken = QueryPlacement(_providers())
    broken.fail_after = 0
    q.group("").required_traits.add("CUSTOM_GPU")
    assert bisection.placement_hint(broken, q) == ""
    assert len(broken.queries) == 1  # stopped at the first error


def test_placement_hint_never_raises():
    class Exploding:
        def get_allocation_candidates(self, query, request_id=None, *, not_before=None):
            raise RuntimeError("boom")

    assert bisection.placement_hint(Exploding(), _query()) == ""
    assert bisection.placement_hint(None, _query()) == ""


# -- the driver's NoValidHost --------------------------------------------------------------------
def _driver(placement, hosts):
    return FilterScheduler(placement=placement, host_manager=FakeHostManager(hosts))


def test_no_candidates_reason_names_the_emptying_term():
    placement = QueryPlacement(_providers())
    driver = _driver(placement, [])
    spec = make_spec()
    spec.flavor.extra_specs["trait:CUSTOM_GPU"] = "required"
    with pytest.raises(NoValidHost) as err:
        driver.select_destinations(CONTEXT, spec, ["i-1"])
    reason = err.value.reason
    assert reason.startswith("Placement returned no allocation candidates for resources=")
    assert reason.endswith("; without required trait CUSTOM_GPU it would return 3 hosts")
    assert 1 < len(placement.queries) <= 1 + bisection.MAX_BISECTION_QUERIES


def test_bisection_errors_leave_the_reason_as_it_was():
    placement = QueryPlacement(_providers())
    placement.fail_after = 1
    spec = make_spec()
    spec.flavor.extra_specs["trait:CUSTOM_GPU"] = "required"
    with pytest.raises(NoValidHost) as err:
        _driver(placement, []).select_destinations(CONTEXT, spec, ["i-1"])
    assert type(err.value) is NoValidHost
    assert err.value.reason.startswith("Placement returned no allocation candidates for ")
    assert err.value.reason.endswith("limit=1000")  # the query, and no hint after it


# -- the dry run -----------------------------------------------------------------------------------
class CountingPlacement(FakePlacement):
    def claim_resources(self, *args, **kwargs):  # pragma: no cover - must not be reached
        raise AssertionError("explain must not claim")


@pytest.fixture
def fleet():
    hosts = [
        make_host("host-a", ram_mb=4096),
        make_host("host-b", ram_mb=16384),
        make_host("host-c", ram_mb=8192),
        make_host("host-d", ram_mb=32768, disabled=True),
        make_host("host-e", ram_mb=65536, down=True),
        make_host("host-f", ram_mb=12288, supported_instances=[["aarch64", "qemu", "hvm"]]),
    ]
    placement = CountingPlacement(hosts)
    hm = FakeHostManager(hosts)
    driver = FilterScheduler(placement=placement, host_manager=hm)
    return SimpleNamespace(hosts={h.host: h for h in hosts}, placement=placement, driver=driver)


def _snapshot(hosts):
    return {
        name: (h.free_ram_mb, h.vcpus_used, h.num_instances, h.updated, dict(h.instances))
        for name, h in hosts.items()
    }


def test_document_lists_removed_hosts_with_reasons_weights_and_the_pick(fleet):
    before = _snapshot(fleet.hosts)
    spec = make_spec(image=ImageMeta(properties={"hw_architecture": "x86_64"}))
    untouched = copy.deepcopy(spec)
    doc = explain.explain_request(fleet.driver, CONTEXT, spec)
    assert doc["version"] == explain.DOCUMENT_VERSION and doc["mode"] == "placement"
    assert doc["no_valid_host"] is None
    assert doc["placement"]["candidates"] == 6
    assert "MEMORY_MB:1024" in doc["placement"]["query"]
    assert doc["hosts"] == 6
    steps = {f["name"]: f for f in doc["filters"]}
    out = {name: {(h["host"], h["reason"]) for h in f["hosts_out"]} for name, f in steps.items()}
    compute = steps["ComputeFilter"]
    assert compute["hosts_in"] == 6 and compute["hosts_passed"] == 4
    assert {h for h, _ in out["ComputeFilter"]} == {"host-d", "host-e"}
    assert {h for h, _ in out["ImagePropertiesFilter"]} == {"host-f"}
    assert all(r for _, r in out["ImagePropertiesFilter"])
    assert all(isinstance(f["elapsed_ms"], float) for f in doc["filters"])
    # weighed best first, with each weigher's part adding up to the weight
    order = [w["host"] for w in doc["weighed"]]
    assert order == ["host-b", "host-c", "host-a"]
    for w in doc["weighed"]:
        parts = w["weighers"]
        assert "RAMWeigher" in parts
        total = sum(c["multiplier"] * c["normalized"] for c in parts.values())
        assert total == pytest.approx(w["weight"])
        assert w["allocation_candidates"] == 1
    assert doc["weighed"][0]["weighers"]["RAMWeigher"]["raw"] == 16384 - 0
    assert doc["pick"]["host"] == "host-b"
    assert doc["pick"]["allocation_request"]["allocations"] == {
        "rp-host-b": {"resources": {"VCPU": 1, "MEMORY_MB": 1024}}
    }
    assert doc["picks"] == [{"host": "host-b", "node": "host-b"}]
    # nothing claimed, nothing consumed, the caller's spec untouched
    assert fleet.placement.claims == {} and fleet.placement.claim_attempts == []
    assert _snapshot(fleet.hosts) == before
    assert spec == untouched
    json.dumps(doc)  # plain JSON all the way down


def test_multi_create_dry_run_consumes_only_private_copies(fleet):
    before = _snapshot(fleet.hosts)
    group = InstanceGroup(uuid="g-1", policy="anti-affinity")
    spec = make_spec(num_instances=3, group=group, hints={"group": ["g-1"]})
    doc = explain.explain_request(fleet.driver, CONTEXT, spec)
    assert doc["no_valid_host"] is None
    assert [p["host"] for p in doc["picks"]] == ["host-b", "host-f", "host-c"]
    assert len(doc["more_instances"]) == 2
    second = doc["more_instances"][0]
    assert second["index"] == 1 and second["pick"]["host"] == "host-f"
    anti = {f["name"]: f for f in second["filters"]}["ServerGroupAntiAffinityFilter"]
    assert [h["host"] for h in anti["hosts_out"]] == ["host-b"]
    # once-per-request filters do not run again for the second instance
    assert "ComputeFilter" not in {f["name"] for f in second["filters"]}
    assert _snapshot(fleet.hosts) == before
    assert group.hosts == [] and group.members == []  # the caller's request is untouched


def test_multi_create_that_runs_out_of_hosts_reports_nova_reason(fleet):
    group = InstanceGroup(uuid="g-2", policy="anti-affinity")
    spec = make_spec(num_instances=5, group=group, hints={"group": ["g-2"]})
    doc = explain.explain_request(fleet.driver, CONTEXT, spec)
    assert len(doc["picks"]) == 4
    assert doc["more_instances"][-1]["pick"] is None
    assert doc["no_valid_host"].startswith("Found hosts for 4 of 5 instances.")
    assert "ServerGroupAntiAffinityFilter" in doc["no_valid_host"]


def test_every_host_filtered_out_gives_the_no_valid_host_summary(fleet):
    spec = make_spec(image=ImageMeta(properties={"hw_architecture": "ppc64le"}))
    doc = explain.explain_request(fleet.driver, CONTEXT, spec)
    assert doc["pick"] is None and doc["picks"] == [] and doc["weighed"] == []
    assert doc["no_valid_host"].startswith("0/6 hosts available: 4 ImagePropertiesFilter")
    assert "1 ComputeFilter (service disabled)" in doc["no_valid_host"]
    assert "1 ComputeFilter (service down)" in doc["no_valid_host"]
    # the single change that would fit, and where the request would then go
    change = doc["smallest_change"]
    assert change["complete"]
    assert [c["change"] for c in change["found"]] == ["without image property hw_architecture"]
    assert change["found"][0]["hosts"][0]["host"] == "host-b"
    opened = change["found"][0]["hosts_opened"]
    assert opened >= 1
    text = explain.render_text(doc)
    assert (
        "It would fit with one change:\n  without image property hw_architecture: "
        f"{opened} host(s), best host-b"
    ) in text


def test_a_request_that_fits_has_no_smallest_change(fleet):
    assert explain.explain_request(fleet.driver, CONTEXT, make_spec())["smallest_change"] is None


def test_all_hosts_does_not_ask_placement(fleet):
    fleet.placement.no_candidates = set(fleet.hosts)  # Placement would say no to everyone
    doc = explain.explain_request(fleet.driver, CONTEXT, make_spec(), all_hosts=True)
    assert fleet.placement.queries == []
    assert doc["mode"] == "all_hosts" and doc["placement"] is None and doc["prefilters"] == []
    assert doc["hosts"] == 6
    assert doc["pick"]["host"] == "host-b" and doc["pick"]["allocation_request"] is None
    assert doc["weighed"][0]["allocation_candidates"] is None


def test_the_pick_skips_hosts_without_a_candidate(fleet):
    fleet.placement.no_candidates = {"host-b"}
    doc = explain.explain_request(fleet.driver, CONTEXT, make_spec())
    assert doc["weighed"][0]["host"] == "host-b"
    assert doc["weighed"][0]["allocation_candidates"] == 0
    assert doc["pick"]["host"] == "host-f"  # the next best (12288 MB free)


def test_empty_placement_answer_is_in_the_document_with_its_hint():
    placement = QueryPlacement(_providers())
    spec = make_spec()
    spec.flavor.extra_specs["trait:CUSTOM_GPU"] = "required"
    doc = explain.explain_request(_driver(placement, []), CONTEXT, spec)
    assert doc["placement"]["candidates"] == 0
    assert doc["placement"]["hint"] == "without required trait CUSTOM_GPU it would return 3 hosts"
    assert "compute_status" in " ".join(doc["prefilters"]) or doc["prefilters"] == []
    assert doc["no_valid_host"].endswith(doc["placement"]["hint"])
    assert doc["filters"] == [] and doc["pick"] is None


def test_explains_weigher_shares_are_never_negative_zero(fleet):
    """BuildFailureWeigher's multiplier is negative: times a normalised 0 it is -0.0; explain's
    JSON writes 0.0, as the decision record does."""
    doc = explain.explain_request(fleet.driver, CONTEXT, make_spec())
    parts = [p for h in doc["weighed"] for p in h["weighers"].values()]
    assert any(p.get("multiplier", 0) < 0 and p.get("share") == 0 for p in parts)
    assert "-0.0" not in json.dumps(doc["weighed"])


def test_placement_error_is_reported_not_raised(fleet, caplog):
    """Explain's document says Placement could not be asked; the service's ERROR line is
    the service's own requests' (an operator running explain read it twice)."""
    fleet.placement.candidates_error = PlacementConnectionError("down")
    with caplog.at_level(logging.DEBUG, logger="scheduler.drivers.candidates"):
        doc = explain.explain_request(fleet.driver, CONTEXT, make_spec())
    assert "Placement could not be asked" in doc["no_valid_host"]
    assert doc["placement"]["query"] is None
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    # a request of the service still logs it
    with caplog.at_level(logging.ERROR, logger="scheduler.drivers.candidates"):
        with pytest.raises(NoValidHost):
            fleet.driver.select_destinations(CONTEXT, make_spec(), ["i-0"])
    assert "Failed to get allocation candidates from Placement" in caplog.text


def test_forced_host_skips_the_filters(fleet):
    doc = explain.explain_request(fleet.driver, CONTEXT, make_spec(force_hosts=["host-d"]))
    assert doc["forced"] is True and doc["filters"] == []
    assert doc["pick"]["host"] == "host-d"  # disabled, but forced: nova does not filter
    assert doc["narrowed"] == [{"count": 5, "reason": "not in force_hosts"}]


def test_text_rendering_names_filters_reasons_weighers_and_the_choice(fleet):
    spec = make_spec(image=ImageMeta(properties={"hw_architecture": "x86_64"}))
    text = explain.render_text(explain.explain_request(fleet.driver, CONTEXT, spec), limit=1)
    assert "Placement query: resources=VCPU:1,MEMORY_MB:1024" in text
    assert "ComputeFilter" in text and "ImagePropertiesFilter" in text
    assert "host-d" in text or "host-e" in text
    assert "RAMWeigher" in text
    assert "... and 2 more" in text  # three weighed hosts, one shown
    assert text.splitlines()[-1].startswith("Would choose: host-b")
    nvh = explain.render_text(
        explain.explain_request(fleet.driver, CONTEXT, make_spec(ram_mb=1, force_hosts=["x"]))
    )
    assert nvh.splitlines()[-1].startswith("No valid host: ")


# -- request readers -------------------------------------------------------------------------------
def test_flavor_flag_with_extra_specs_holding_colons_and_commas():
    f = explain.parse_flavor(
        "m1.pin:4:8192:40:hw:cpu_policy=mixed,hw:cpu_dedicated_mask=0,1,trait:CUSTOM_SSD=required"
    )
    assert (f.name, f.vcpus, f.memory_mb, f.root_gb) == ("m1.pin", 4, 8192, 40)
    assert f.extra_specs == {
        "hw:cpu_policy": "mixed",
        "hw:cpu_dedicated_mask": "0,1",
        "trait:CUSTOM_SSD": "required",
    }
    assert explain.parse_flavor("tiny:1:64:0").extra_specs == {}
    for bad in ("tiny:1:64", "tiny:x:64:1", "tiny:1:-5:1", "tiny:1:64:1:novalue"):
        with pytest.raises(explain.ExplainInputError):
            explain.parse_flavor(bad)


def test_hints_flag_collects_values_per_key():
    assert explain.split_pairs("different_host=a,b,same_host=c", multi=True) == {
        "different_host": ["a", "b"],
        "same_host": ["c"],
    }


def test_request_file_short_form():
    spec = explain.spec_from_json(
        {
            "flavor": {"name": "m1", "vcpus": 2, "memory_mb": 2048, "root_gb": 20},
            "image_props": {"hw_architecture": "x86_64"},
            "hints": {"different_host": "abc"},
            "az": "az1",
            "num_instances": 2,
            "project_id": "p1",
            "force_hosts": "h1,h2",
        }
    )
    assert spec.flavor == Flavor(name="m1", vcpus=2, memory_mb=2048, root_gb=20)
    assert spec.image.properties == {"hw_architecture": "x86_64"}
    assert spec.scheduler_hints == {"different_host": ["abc"]}
    assert spec.availability_zone == "az1" and spec.num_instances == 2
    assert spec.project_id == "p1" and spec.force_hosts == ["h1", "h2"]
    assert explain.spec_from_json({"flavor": "m1:1:512:1", "hints": "a=1"}).scheduler_hints == {
        "a": ["1"]
    }
    with pytest.raises(explain.ExplainInputError, match="unknown request field"):
        explain.spec_from_json({"flavor": "m1:1:512:1", "flavour": "x"})
    with pytest.raises(explain.ExplainInputError, match="flavor"):
        explain.spec_from_json({"az": "az1"})


def test_request_file_nova_primitive_and_rpc_message():
    spec = RequestSpec(
        flavor=Flavor(name="m1", vcpus=1, memory_mb=512, root_gb=1),
        availability_zone="az2",
        project_id="p2",
    )
    prim = wire.request_spec_to_primitive(spec)
    assert explain.spec_from_json(copy.deepcopy(prim)).availability_zone == "az2"
    assert explain.spec_from_json({"spec_obj": prim}).project_id == "p2"
    with pytest.raises(InvalidRequest):
        explain.spec_from_json({"nova_object.name": "RequestSpec", "nova_object.data": {}})


def test_overrides_replace_or_merge():
    spec = RequestSpec(
        flavor=Flavor(vcpus=1, memory_mb=512),
        image=ImageMeta(properties={"a": "1"}),
        scheduler_hints={"x": ["1"]},
    )
    explain.apply_overrides(
        spec, image_props={"b": "2"}, hints={"y": ["2"]}, az="az3", num_instances=4
    )
    assert spec.image.properties == {"a": "1", "b": "2"}
    assert spec.scheduler_hints == {"x": ["1"], "y": ["2"]}
    assert (spec.availability_zone, spec.num_instances) == ("az3", 4)


# -- RPC -------------------------------------------------------------------------------------------
def test_manager_explain_destinations_returns_the_document(fleet):
    manager = SchedulerManager(fleet.driver)
    prim = wire.request_spec_to_primitive(make_spec())
    doc = manager.explain_destinations({"request_id": "r"}, prim)
    assert doc["pick"]["host"] == "host-b" and doc["mode"] == "placement"
    assert manager.explain_destinations({}, prim, all_hosts=True)["mode"] == "all_hosts"
    assert fleet.placement.claims == {}
    with pytest.raises(oslo_messaging.ExpectedException):
        manager.explain_destinations({}, {"nova_object.name": "RequestSpec"})
    assert manager.in_flight.count == 0


def test_client_sends_4_5_and_refuses_an_older_cap():
    transport = oslo_messaging.get_rpc_transport(CONF, url="fake:/")
    try:
        capped = rpcapi.SchedulerAPI(transport, version_cap="4.4")
        with pytest.raises(NovaschedError, match="4.5"):
            capped.explain_destinations({}, make_spec())
    finally:
        transport.cleanup()


def test_round_trip_over_the_in_memory_transport(fleet):
    transport = oslo_messaging.get_rpc_transport(CONF, url="fake:/")
    topic = f"scheduler-{uuid.uuid4().hex}"
    from scheduler.rpc import transport as sched_rpc

    server = oslo_messaging.get_rpc_server(
        transport,
        oslo_messaging.Target(topic=topic, server="explain-host"),
        [SchedulerManager(fleet.driver)],
        serializer=sched_rpc.get_serializer(),
    )
    server.start()
    try:
        api = rpcapi.SchedulerAPI(transport, topic=topic)
        spec = make_spec(image=ImageMeta(properties={"hw_architecture": "x86_64"}))
        doc = api.explain_destinations(RequestContext(request_id="req-x"), spec, timeout=10)
        assert doc["pick"]["host"] == "host-b"
        assert {f["name"] for f in doc["filters"]} >= {"ComputeFilter", "ImagePropertiesFilter"}
        assert fleet.placement.claims == {}
    finally:
        server.stop()
        server.wait()
        transport.cleanup()


def test_malformed_extra_spec_is_an_invalid_request_not_a_document(fleet):
    spec = make_spec()
    spec.flavor.extra_specs["resources:VCPU"] = "many"
    with pytest.raises(InvalidRequest, match="whole number"):
        explain.explain_request(fleet.driver, CONTEXT, spec)


# -- command line input errors (before any database is opened) -------------------------------------
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["explain"], "give --flavor"),
        (["explain", "--flavor", "m1:1:512"], "expected NAME:VCPUS:RAM_MB:DISK_GB"),
        (["explain", "--flavor", "m1:1:512:1", "--hints", "novalue"], "expected key=value"),
        (["explain", "--flavor", "m1:1:512:1", "--format", "xml"], "invalid choice"),
    ],
)
def test_cli_input_errors_are_one_line(capsys, argv, message):
    from scheduler.cmd import manage

    assert manage.main(argv) == 1
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_rebuild_asks_no_placement_and_marks_skipped_filters(fleet):
    spec = make_spec(hints={"_nova_check_type": ["rebuild"]})
    doc = explain.explain_request(fleet.driver, CONTEXT, spec)
    assert doc["mode"] == "rebuild" and doc["placement"] is None
    assert fleet.placement.queries == []
    skipped = {f["name"] for f in doc["filters"] if f["skipped"] == "rebuild"}
    assert "ComputeFilter" in skipped  # RUN_ON_REBUILD = False: passes every host
    assert doc["hosts"] == 6 and len(doc["weighed"]) == 6
