"""Server group filters: hard affinity and hard anti-affinity."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import numpy as np

from filters import BaseHostFilter, FilterOutcome, Reject, RowOutcome

LOG = logging.getLogger(__name__)

GROUP_MEMBERS_ON_HOST = Reject("anti-affinity: server group members already on host")
NOT_GROUP_HOST = Reject("affinity: host not used by the server group")


def _max_server_per_host(group: Any) -> int:
    value = getattr(group, "max_server_per_host", None)
    if value is None:
        value = (getattr(group, "rules", None) or {}).get("max_server_per_host", 1)
    try:
        return int(value)
    except (TypeError, ValueError):
        return 1


class ServerGroupAntiAffinityFilter(BaseHostFilter):
    """Passes hosts that hold fewer members of the request's anti-affinity server group
    than the group's ``max_server_per_host`` rule allows (default 1)."""

    RUN_ON_REBUILD = False
    # earlier instances of the same request land on hosts: check again for every instance
    run_filter_once_per_request = False
    policy_name = "anti-affinity"

    def host_passes(self, host_state: Any, spec_obj: Any) -> bool | Reject:
        outcome = self.filter_hosts([host_state], spec_obj)
        return True if outcome.passed else GROUP_MEMBERS_ON_HOST

    def filter_rows(self, table: Any, rows: Any, spec_obj: Any) -> RowOutcome | None:
        group = getattr(spec_obj, "instance_group", None)
        if group is None or getattr(group, "policy", None) != self.policy_name:
            return RowOutcome(np.ones(len(rows), dtype=bool), [""])
        return None  # the hosts' instances decide: per host

    def filter_hosts(self, host_states: Iterable[Any], spec_obj: Any) -> FilterOutcome:
        group = getattr(spec_obj, "instance_group", None)
        if group is None or getattr(group, "policy", None) != self.policy_name:
            return FilterOutcome(passed=list(host_states))
        instance_uuid = getattr(spec_obj, "instance_uuid", None)
        members = set(getattr(group, "members", None) or ())
        limit = _max_server_per_host(group)
        debug = LOG.isEnabledFor(logging.DEBUG)
        outcome = FilterOutcome()
        disjoint = members.isdisjoint
        for host in host_states:
            instances = host.instances or {}
            # a move may check the host the instance is on already: it must stay eligible
            if instance_uuid is not None and instance_uuid in instances:
                outcome.passed.append(host)
                continue
            # most hosts hold no member: no intersection set built for them
            on_host = 0 if disjoint(instances) else len(members.intersection(instances))
            if debug:
                LOG.debug(
                    "Group anti-affinity: check if the number of servers from group %(uuid)s "
                    "on host %(host)s is less than %(max)s.",
                    {"uuid": getattr(group, "uuid", "n/a"), "host": host.host, "max": limit},
                )
            if on_host < limit:
                outcome.passed.append(host)
            else:
                outcome.rejected.append((host, GROUP_MEMBERS_ON_HOST.reason))
        return outcome


class ServerGroupAffinityFilter(BaseHostFilter):
    """Passes, for an affinity server group that already has hosts, only those hosts."""

    RUN_ON_REBUILD = False
    # the group's hosts grow as instances of the same request are placed
    run_filter_once_per_request = False
    policy_name = "affinity"

    def host_passes(self, host_state: Any, spec_obj: Any) -> bool | Reject:
        outcome = self.filter_hosts([host_state], spec_obj)
        return True if outcome.passed else NOT_GROUP_HOST

    def filter_rows(self, table: Any, rows: Any, spec_obj: Any) -> RowOutcome | None:
        group = getattr(spec_obj, "instance_group", None)
        policies = (getattr(group, "policies", None) or []) if group is not None else []
        group_hosts = (getattr(group, "hosts", None) or []) if group is not None else []
        if self.policy_name not in policies or not group_hosts:
            return RowOutcome(np.ones(len(rows), dtype=bool), [""])
        return None  # few hosts to keep: per host

    def filter_hosts(self, host_states: Iterable[Any], spec_obj: Any) -> FilterOutcome:
        group = getattr(spec_obj, "instance_group", None)
        policies = (getattr(group, "policies", None) or []) if group is not None else []
        group_hosts = (getattr(group, "hosts", None) or []) if group is not None else []
        if self.policy_name not in policies or not group_hosts:
            return FilterOutcome(passed=list(host_states))
        allowed = set(group_hosts)
        if LOG.isEnabledFor(logging.DEBUG):
            LOG.debug(
                "Group affinity: check if hosts are in group %(uuid)s hosts %(hosts)s",
                {"uuid": getattr(group, "uuid", "n/a"), "hosts": sorted(allowed)},
            )
        outcome = FilterOutcome()
        for host in host_states:
            if host.host in allowed:
                outcome.passed.append(host)
            else:
                outcome.rejected.append((host, NOT_GROUP_HOST.reason))
        return outcome
