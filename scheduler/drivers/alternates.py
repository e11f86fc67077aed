"""A request's reply: per instance its Selection, then its alternates.

nova's ``_get_alternate_hosts``: after the chosen hosts, up to ``[scheduler] max_attempts - 1``
other hosts of the same cell per instance, from the last sorted list (sorted again after the
last consumption of a multi-create). With claims, an alternate needs an allocation candidate
and carries it, unclaimed: the conductor claims it only if the build on the chosen host fails.
"""

from __future__ import annotations

from typing import Any

from scheduler.drivers import outcome
from scheduler.drivers.claims import Claimer
from scheduler.framework import Framework, Placed
from scheduler.hosts.state import HostState
from scheduler.objects import Selection
from scheduler.request import SchedulingRequest


def with_alternates(
    req: SchedulingRequest,
    chosen: list[Placed],
    hosts: list[HostState],
    index: int,
    *,
    return_alternates: bool,
    claimed: bool,
    framework: Framework,
    claimer: Claimer,
    conf: Any,
) -> list[list[Selection]]:
    """The Selections of ``chosen`` (host, allocation request) with their alternates from
    ``hosts`` (the cycle's list; ``index``: the instances it counted). ``claimed``: the
    chosen hosts were claimed in Placement, and alternates carry allocation requests."""
    num_alts = conf.scheduler.max_attempts - 1 if return_alternates else 0
    if index > 0 and num_alts > 0:
        # the chosen hosts have consumed: filter and weigh again for accurate alternates
        hosts = framework.sorted(req, hosts, index)
    default_az = conf.default_availability_zone
    chosen_keys = {(h.host, h.nodename) for h, _ in chosen}
    confirm = claimed and num_alts > 0 and claimer.confirms(req)
    out: list[list[Selection]] = []
    for host, alloc_req in chosen:
        selections = [outcome.selection(req, host, alloc_req, default_az)]
        for alt in hosts:
            if len(selections) > num_alts:
                break
            if alt.cell_uuid != host.cell_uuid or (alt.host, alt.nodename) in chosen_keys:
                continue
            if not claimed:
                selections.append(outcome.selection(req, alt, None, default_az))
                continue
            cands = req.candidates_for(alt)
            if not cands:
                continue
            # the conductor claims an alternate as it is: from a view that may have missed
            # a change, Placement confirms it first (as the chosen host's claim)
            if confirm and not claimer.confirm(req, alt, cands[0]):
                continue
            selections.append(outcome.selection(req, alt, cands[0], default_az))
        out.append(selections)
    return out
