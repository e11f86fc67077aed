"""The dry run: the driver's own steps for a request (prefilters, Placement, host states, and
per instance the narrowing, filters and weighers), claiming nothing in Placement and
consuming nothing on the shared HostStates. It returns the JSON document described in
docs/explain.md.

It runs through the driver's public per-request steps (``new_request``, ``placement_hosts``,
``all_hosts``, then its framework's ``cycle``, the per-instance cycle ``select_destinations``
runs, with a placer that claims nothing and the driver's ``consume``, and
``not_enough_reason``), on a request of its own and, for a
multi-create, on private copies of the hosts.
"""

from __future__ import annotations

import time
import uuid as uuidlib
from typing import Any

from filters.handler import FilterReport
from scheduler.exceptions import NoValidHost
from scheduler.framework import document
from scheduler.hosts.state import HostState
from scheduler.objects import RequestSpec, jsonable, request_summary

DOCUMENT_VERSION = 1


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


def _host_entry(host: HostState) -> dict[str, Any]:
    return {"host": host.host, "node": host.nodename, "cell_uuid": host.cell_uuid}


def _instance_entry(
    index: int,
    narrowed: list[tuple[int, str]],
    forced: bool,
    report: FilterReport,
    weighed: list[Any],
    pick: Any,
    spec: RequestSpec,
    placement_mode: bool,
    default_az: str | None,
) -> dict[str, Any]:
    weighed_out = [
        document.weighed_host(
            w.obj,
            w.weight,
            {
                name: document.weigher_part(c.raw, c.normalized, c.multiplier)
                for name, c in (w.contributions or {}).items()
            },
            detail={
                "allocation_candidates": len(spec.candidates_for(w.obj)) if placement_mode else None
            },
        )
        for w in weighed
    ]
    pick_out = None
    if pick is not None:
        pick_out = _host_entry(pick.obj)
        pick_out["weight"] = pick.weight
        pick_out["availability_zone"] = pick.obj.availability_zone or default_az
        cands = spec.candidates_for(pick.obj) if placement_mode else []
        pick_out["allocation_request"] = jsonable(cands[0]) if cands else None
    return {
        "index": index,
        "narrowed": document.narrowed_section(narrowed),
        "forced": forced,
        "filters": document.filters_section(report, detail=True),
        "weighed": weighed_out,
        "pick": pick_out,
    }


def explain_request(
    driver: Any, context: Any, spec: RequestSpec, *, all_hosts: bool = False
) -> dict[str, Any]:
    """Run ``driver``'s steps for ``spec`` without claiming or consuming anything and
    return the explain document (docs/explain.md). NoValidHost (from the prefilters,
    Placement, the filters, a failing plugin) is reported in the document, not raised;
    InvalidRequest (a malformed request) is raised. ``spec`` is not changed."""
    started = time.perf_counter()
    summary = request_summary(spec)
    # a Placement failure is the document's to report
    req = driver.new_request(context, spec, purpose="explain")
    if spec.is_rebuild:
        mode = "rebuild"
    elif all_hosts:
        mode = "all_hosts"
    else:
        mode = "placement"
    conf = driver.conf
    doc: dict[str, Any] = {
        "version": DOCUMENT_VERSION,
        "mode": mode,
        "request": summary,
        "prefilters": [],
        "placement": None,
        "hosts": 0,
        "narrowed": [],
        "forced": False,
        "filters": [],
        "weighed": [],
        "pick": None,
        "more_instances": [],
        "picks": [],
        "host_subset_size": conf.filter_scheduler.host_subset_size,
        "no_valid_host": None,
        "smallest_change": None,
        "elapsed_ms": 0.0,
    }
    try:
        if mode == "placement":
            try:
                hosts = driver.placement_hosts(req)
            finally:
                doc["prefilters"] = list(req.trace.prefilters)
                doc["placement"] = document.placement_section(req.trace, detail=True)
        else:
            hosts = driver.all_hosts(req)
        doc["hosts"] = len(hosts)
        _dry_run(driver, req, hosts, doc, placement_mode=mode == "placement")
    except NoValidHost as exc:
        doc["no_valid_host"] = exc.reason
        filters = doc["filters"]
        if (filters and filters[-1]["hosts_passed"] == 0) or exc.cause == "no_candidates":
            # the filters emptied the candidates, or Placement had none: what single change
            # would fit
            search = driver.relaxations(context, spec, all_hosts=mode != "placement")
            doc["smallest_change"] = search.as_dict()
    doc["elapsed_ms"] = _ms(time.perf_counter() - started)
    return doc


def _dry_run(
    driver: Any,
    req: Any,
    hosts: list[HostState],
    doc: dict[str, Any],
    *,
    placement_mode: bool,
) -> None:
    num = max(1, req.num_instances or 1)
    if num > 1:
        # later instances see the earlier ones' consumption, on private copies only
        hosts = [h.detached_copy() for h in hosts]
    default_az = driver.conf.default_availability_zone
    instance_uuids = [str(uuidlib.uuid4()) for _ in range(num)]
    if req.instance_group is not None:
        # nova's API makes the new instances members of their server group before scheduling
        req.instance_group.members = list(req.instance_group.members) + instance_uuids

    def place(req: Any, ordered: list[HostState], instance_uuid: str | None) -> Any:
        # the first host Placement could claim on (every host when Placement is not asked)
        host = next((h for h in ordered if not placement_mode or req.candidates_for(h)), None)
        return None if host is None else (host, None)

    def record(index: int, step: Any, placed: Any) -> None:
        weighed = step.weighed or []
        pick = None if placed is None else next(w for w in weighed if w.obj is placed[0])
        entry = _instance_entry(
            index,
            step.narrowed,
            step.forced,
            step.report,
            weighed,
            pick,
            req,
            placement_mode,
            default_az,
        )
        if index == 0:
            for key in ("narrowed", "forced", "filters", "weighed", "pick"):
                doc[key] = entry[key]
        else:
            doc["more_instances"].append(entry)
        if pick is not None:
            doc["picks"].append({"host": pick.obj.host, "node": pick.obj.nodename})

    # the driver's own per-instance cycle, claiming nothing; later instances see the earlier
    # ones' consumption, on the private copies
    done = driver.framework.cycle(
        req,
        hosts,
        instance_uuids,
        place,
        count=driver.consume if num > 1 else None,
        explain=True,
        on_step=record,
    )
    if len(done.chosen) < num:
        raise NoValidHost(driver.not_enough_reason(req, len(done.chosen), num))
