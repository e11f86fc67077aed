"""wide_tree: Placement bug 2070257's shape, answered by the provider view and by Placement.

Every compute node of the benchmark fleet has ``WIDE_DEVICES`` (8) PCI devices as children
(one ``CUSTOM_PCI_8086_1572`` each, as nova's PCI in Placement makes them), seeded by SQL into
Placement 16 on MariaDB. The query is what nova 34 sends for a flavor with a PCI alias of six
devices in Placement: the flavor's classes unsuffixed and six groups of one device each
(``resources_PCI<n>`` with ``COMPUTE_MANAGED_PCI_DEVICE``), ``group_policy=none`` and
``limit=1000`` (``max_placement_results``). Each tree has 8^6 = 262,144 products of one device
per group; 20,160 of them are candidates (six distinct devices, each has room for one).

With ``max_allocation_candidates`` at nova-next's 100,000, for each generation strategy: the
view's candidates (``ProviderView.candidates``, loaded by the database feed) and Placement's
``GET /allocation_candidates`` (a Placement process per strategy on the same database, with and
without ``[workarounds] optimize_for_wide_provider_trees``), each asked ``repeats`` times; a
Placement request that takes longer than ``PLACEMENT_TIMEOUT_S`` is reported as such. With the
default (no cap) the trees hold 20 million candidates: the view declines (it examines at most
``search.MAX_EXAMINED`` combinations) and Placement is asked once, with the same timeout.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from typing import Any

import requests

from benchmarks import placement_seed
from placement_client.api import AllocationCandidatesQuery, QueryGroup
from placement_client.api.client import MV_CANDIDATES
from placement_client.view import DatabaseFeed, ProviderView
from placement_client.view.search import SearchOptions
from scheduler.demo.embedded_placement import EmbeddedPlacement

DEVICES_ASKED = 6
CAP = 100_000  # nova-next's [placement] max_allocation_candidates
LIMIT = 1000  # nova's [scheduler] max_placement_results
PLACEMENT_TIMEOUT_S = 120.0
STRATEGIES = ("depth-first", "breadth-first")


def query() -> AllocationCandidatesQuery:
    groups = [QueryGroup(resources={"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1})]
    for d in range(DEVICES_ASKED):
        groups.append(
            QueryGroup(
                suffix=f"_PCI{d}",
                resources={placement_seed.PCI_CLASS: 1},
                required_traits={"COMPUTE_MANAGED_PCI_DEVICE"},
            )
        )
    return AllocationCandidatesQuery(groups, group_policy="none", limit=LIMIT)


def _placement(cloud: placement_seed.BenchCloud, cap: int, strategy: str, optimize: bool):
    conf = (
        f"[placement]\nmax_allocation_candidates = {cap}\n"
        f"allocation_candidates_generation_strategy = {strategy}\n"
        f"[workarounds]\noptimize_for_wide_provider_trees = {optimize}\n"
    )
    return EmbeddedPlacement(cloud.placement_db_url, mode="process", extra_conf=conf)


def _ask_placement(url: str, qs: str) -> tuple[float | None, int, str]:
    """(seconds, candidates, note) of one ``GET /allocation_candidates``."""
    started = time.perf_counter()
    try:
        resp = requests.get(
            f"{url}/allocation_candidates?{qs}",
            headers={
                "OpenStack-API-Version": f"placement {MV_CANDIDATES}",
                "X-Auth-Token": "admin",
            },
            timeout=PLACEMENT_TIMEOUT_S,
        )
    except requests.Timeout:
        return None, 0, f"no answer within {PLACEMENT_TIMEOUT_S:.0f} s"
    except requests.ConnectionError as exc:
        return None, 0, f"connection failed ({type(exc).__name__}: gunicorn killed the worker?)"
    seconds = time.perf_counter() - started
    if resp.status_code != 200:
        return seconds, 0, f"HTTP {resp.status_code}"
    return seconds, len(resp.json()["allocation_requests"]), ""


def _ask_view(view: ProviderView, q: AllocationCandidatesQuery) -> tuple[float, int, str]:
    started = time.perf_counter()
    answer = view.candidates(q)
    seconds = time.perf_counter() - started
    if answer.candidates is None:
        return seconds, 0, f"declined: {answer.reason}"
    return seconds, len(answer.candidates.allocation_requests), f"{answer.matched:,} matched"


def _row(
    size: int, who: str, cap: int, strategy: str, runs: list[tuple[float | None, int, str]]
) -> dict[str, Any]:
    times = [t * 1000.0 for t, _, _ in runs if t is not None]
    return {
        "hosts": size,
        "answered by": who,
        "max_allocation_candidates": cap,
        "strategy": strategy,
        "p50_ms": round(statistics.median(times), 1) if times else None,
        "candidates": runs[-1][1],
        "note": runs[-1][2],
    }


def run(
    sizes: list[int],
    repeats: int,
    out: dict,
    *,
    progress: Callable[[str], None] | None = None,
) -> dict:
    from benchmarks.e2e import quiet_logging

    say = progress or (lambda message: None)
    rows: list[dict[str, Any]] = []
    qs = query().to_querystring()
    out.update({"section": "wide_tree", "rows": rows, "query": qs})
    for size in sizes:
        with contextlib.ExitStack() as stack, quiet_logging():
            say(f"wide_tree: seeding {size} hosts with {placement_seed.WIDE_DEVICES} devices each")
            cloud = placement_seed.bench_cloud(size, stack, children=placement_seed.wide_children)
            feed = DatabaseFeed(cloud.placement_db_url)
            stack.callback(feed.close)
            views = {}
            for strategy in STRATEGIES:
                for cap in (CAP, -1):
                    view = ProviderView(
                        max_age=3600.0,
                        search=SearchOptions(
                            max_allocation_candidates=cap,
                            allocation_candidates_generation_strategy=strategy,
                        ),
                    )
                    feed.load(view)
                    views[strategy, cap] = view
            for (strategy, cap), view in views.items():
                if cap < 0 and strategy != STRATEGIES[0]:
                    continue  # without a cap the strategy changes nothing
                say(f"wide_tree: the view, {strategy}, cap {cap}")
                runs = [_ask_view(view, query()) for _ in range(repeats)]
                rows.append(_row(size, "view", cap, strategy, runs))
            for strategy in STRATEGIES:
                for optimize in (False, True):
                    placement = _placement(cloud, CAP, strategy, optimize)
                    stack.callback(placement.stop)
                    url = placement.start()
                    say(f"wide_tree: Placement, {strategy}, optimize {optimize}")
                    runs = [_ask_placement(url, qs)]
                    if runs[0][0] is not None:
                        runs += [_ask_placement(url, qs) for _ in range(repeats - 1)]
                    who = "Placement" + (" (optimize_for_wide_provider_trees)" * optimize)
                    rows.append(_row(size, who, CAP, strategy, runs))
                    placement.stop()
            say("wide_tree: Placement without a cap")
            rows.append(
                _row(
                    size, "Placement", -1, "depth-first", [_ask_placement(cloud.placement_url, qs)]
                )
            )
    return out
