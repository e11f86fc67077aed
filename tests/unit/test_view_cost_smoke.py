"""The view benchmark section's pure parts: the writer's plan, staleness, CPU deltas, the
table (no Placement, no database)."""

from __future__ import annotations

import json

from benchmarks import view_cost
from placement_client.view import ProviderRecord, ProviderView

UUIDS = [f"00000000-0000-4000-8000-{i:012d}" for i in range(50)]


def test_plan_claims_at_the_rate_and_deletes_some_later():
    plan = view_cost.make_plan(UUIDS, rate=20, seconds=5, seed=1)
    claims = [s for s in plan if s[1] == "claim"]
    deletes = [s for s in plan if s[1] == "delete"]
    assert len(claims) == 100
    assert [s[0] for s in plan] == sorted(s[0] for s in plan)
    assert len({s[2] for s in claims}) == 100  # new consumers
    assert all(s[3] in UUIDS for s in plan)
    by_consumer = {s[2]: s for s in claims}
    assert deletes and len(deletes) < len(claims) // 5
    for offset, _, consumer, rp in deletes:
        claim = by_consumer[consumer]
        assert rp == claim[3]
        assert offset == claim[0] + view_cost.DELETE_AFTER_S < 5
    # the same seed makes the same plan, another seed another one
    assert view_cost.make_plan(UUIDS, 20, 5, 1) == plan
    assert view_cost.make_plan(UUIDS, 20, 5, 2) != plan


def _record(uuid: str, consumers: set[str], generation: int) -> ProviderRecord:
    return ProviderRecord(uuid=uuid, generation=generation, consumers=frozenset(consumers))


def test_staleness_runs_from_the_204_to_the_poll_that_shows_it():
    rp = UUIDS[0]
    plan = [(0.0, "claim", "c1", rp), (0.5, "claim", "c2", rp), (3.0, "delete", "c1", rp)]
    view = ProviderView()
    view.replace_all([_record(rp, set(), 1)], 0.0)
    t0 = 100.0
    tracker = view_cost.Tracker(view, plan, t0)
    tracker.after_poll(t0 + 0.2)  # c1 due, not shown yet
    view.apply([_record(rp, {"c1"}, 2)], [], 0.0)
    tracker.after_poll(t0 + 0.9)  # shows c1
    view.apply([_record(rp, {"c1", "c2"}, 3)], [], 0.0)
    tracker.after_poll(t0 + 2.2)  # shows c2
    view.apply([_record(rp, {"c2"}, 3)], [], 0.0)
    tracker.after_poll(t0 + 3.5)  # c1 deleted
    # (lateness, seconds, done, status) as the writer reports them
    results = [
        (0.0, 0.02, t0 + 0.02, "ok"),
        (0.0, 0.02, t0 + 0.52, "ok"),
        (0.0, 0.01, t0 + 3.01, "ok"),
    ]
    out = view_cost.Tracker.staleness(tracker, plan, results, last_poll_start=t0 + 3.4)
    claim, delete = out["claim"], out["delete"]
    assert (claim["eligible"], claim["seen"], claim["unseen"]) == (2, 2, 0)
    assert claim["lag_ms"]["max"] == 1680.0  # c2: 204 at 0.52, shown after the poll at 2.2
    assert claim["within_1_interval"] == 0.5 and claim["within_2_intervals"] == 1.0
    assert (delete["eligible"], delete["seen"]) == (1, 1)
    assert delete["lag_ms"]["p50"] == 490.0
    json.dumps(out)


def test_a_claim_after_the_last_poll_started_is_not_counted_as_unseen():
    rp = UUIDS[1]
    plan = [(0.0, "claim", "c1", rp)]
    view = ProviderView()
    view.replace_all([_record(rp, set(), 1)], 0.0)
    tracker = view_cost.Tracker(view, plan, 0.0)
    tracker.after_poll(1.0)
    late = tracker.staleness(plan, [(0.0, 0.1, 2.0, "ok")], last_poll_start=1.5)
    assert late["claim"]["eligible"] == 0
    missed = tracker.staleness(plan, [(0.0, 0.1, 0.1, "ok")], last_poll_start=0.9)
    assert missed["claim"]["unseen"] == 1


def test_cpu_delta_counts_this_databases_threads_and_the_rest_as_others():
    a = {
        "cpu": {"placement": 10.0, "mariadb": 50.0, "client": 1.0, "writer": 0.5},
        "tids": {7},
        "threads": {7: 2.0, 8: 3.0},
        "busy": 100.0,
    }
    b = {
        "cpu": {"placement": 12.0, "mariadb": 53.0, "client": 1.5, "writer": 1.0},
        "tids": {7, 9},
        "threads": {7: 2.5, 8: 4.0, 9: 0.25},
        "busy": 106.0,
    }
    d = view_cost.Meter.delta(a, b)
    assert d["placement"] == 2.0
    assert d["mariadb_conns"] == 0.75  # threads 7 and 9, not 8 (another database)
    assert d["mariadb_server"] == 3.0
    assert d["others"] == 6.0 - (2.0 + 0.75 + 0.5 + 0.5)


def _window(placement: float, **extra) -> dict:
    return {
        "seconds": 10.0,
        "cpu_s": {"placement": placement, "mariadb_conns": 0.1, "mariadb_server": 0.2},
        "cpu_ms_per_s": {
            "placement": placement * 100,
            "mariadb_conns": 10.0,
            "mariadb_server": 20.0,
            "client": 5.0,
            "others": 50.0,
        },
        "load_avg": [1.0, 1.0, 1.0],
        "client_rss_mb": 90.0,
        "client_peak_rss_mb": 95.0,
        "placement_rss_mb": 200.0,
        **extra,
    }


def test_table_shows_what_the_view_adds_under_load():
    alone = _window(
        3.0,
        writer={"claims_per_s": 20.0, "claim_ms": {"p50": 20, "p99": 40}},
        placement_requests={"PUT": 200, "DELETE": 20},
    )
    loaded = _window(
        3.5,
        placement_requests={"PUT": 200, "DELETE": 20, "GET": 123},
        polls=10,
        poll_ms={"p50": 5.0, "p99": 9.0, "max": 9.0},
        read_per_poll=12.0,
        writer={"claims_per_s": 20.0, "claim_ms": {"p50": 21, "p99": 45}},
        staleness={
            "claim": {
                "eligible": 190,
                "seen": 190,
                "unseen": 0,
                "lag_ms": {"p50": 500.0, "p99": 990.0, "max": 999.0},
                "within_1_interval": 1.0,
            },
            "delete": {"eligible": 17, "seen": 17, "lag_ms": {"p50": 510.0, "p99": 980.0}},
        },
    )
    added = view_cost.view_added(alone, loaded)
    assert added["placement"] == 50.0 and added["client"] == 5.0
    assert added["placement_gets_per_s"] == 12.3
    row = {
        "hosts": 1000,
        "feed": "database",
        "providers_in_view": 1000,
        "load": {
            "wall_s": 0.1,
            "cpu_s": {"placement": 0.0, "client": 0.08},
            "client_rss_mb": 100.0,
            "load_avg": [1.0, 1.0, 1.0],
        },
        "idle": _window(0.0, polls=10, poll_ms={"p50": 2.0, "p99": 3.0, "max": 3.0}),
        "under_load": {
            "20": {"rate": 20, "alone": alone, "with_view": loaded, "view_added_ms_per_s": added}
        },
    }
    result = {"rows": [row], "clouds": [{"hosts": 1000, "setup_s": 5.0}]}
    result["summary"] = view_cost.summarize(result["rows"])
    assert result["summary"] == {
        "database": {
            "1000": {
                "idle": {"placement": 0.0, "mariadb": 10.0},
                "20/s": {"placement": 50.0, "mariadb": 0.0},
            }
        }
    }
    text = view_cost.format_table(result)
    assert "cold load" in text and "20/s" in text and "500 / 990" in text and "12.3" in text
    assert "1,000: idle 0 + 10, 20/s 50 + 0" in text
    json.dumps(result)


def test_a_claim_deleted_before_the_view_showed_it_is_not_unseen():
    rp = UUIDS[2]
    plan = [(0.0, "claim", "c1", rp), (0.1, "claim", "c2", rp), (3.0, "delete", "c1", rp)]
    view = ProviderView()
    view.replace_all([_record(rp, set(), 1)], 0.0)
    tracker = view_cost.Tracker(view, plan, 0.0)
    view.apply([_record(rp, {"c2"}, 3)], [], 0.0)  # the first read after c1 was deleted
    tracker.after_poll(5.0)
    results = [(0.0, 0.02, 0.02, "ok"), (0.0, 0.02, 0.12, "ok"), (0.0, 0.01, 3.01, "ok")]
    claim = tracker.staleness(plan, results, last_poll_start=4.0)["claim"]
    assert (claim["eligible"], claim["unseen"], claim["deleted_first"]) == (1, 0, 1)


def test_writer_summary_tells_full_hosts_from_errors_and_lateness():
    plan = [
        (0.0, "claim", "c1", UUIDS[0]),
        (0.5, "claim", "c2", UUIDS[1]),
        (1.0, "claim", "c3", UUIDS[2]),
        (3.0, "delete", "c1", UUIDS[0]),
    ]
    results = [
        (0.0, 0.02, 10.02, "ok"),
        (0.1, 0.03, 10.63, "ClaimConflict: Placement PUT /allocations/c2 answered 409"),
        (2.5, 0.05, 13.55, "PlacementServerError: 500"),
        (0.0, 0.01, 13.01, "ok"),
    ]
    out = view_cost.writer_summary(plan, results, t0=10.0)
    assert out["claims"] == 3 and out["claims_ok"] == 1 and out["claims_refused_full"] == 1
    assert out["errors"] == 1 and out["first_errors"] == ["PlacementServerError: 500"]
    assert out["deletes_ok"] == 1
    assert out["span_s"] == 3.55 and out["claims_per_s"] == round(1 / 3.55, 1)
    assert out["late_max_ms"] == 2500.0 and out["kept_up"] is False
