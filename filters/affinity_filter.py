"""Server group filters: hard affinity and hard anti-affinity."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from filters import PASS_ALL, BaseHostFilter, Reject, RowOutcome, column_path

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


@column_path
class ServerGroupAntiAffinityFilter(BaseHostFilter):
    """Passes hosts that hold fewer members of the request's anti-affinity server group
    than the group's ``max_server_per_host`` rule allows (default 1)."""

    RUN_ON_REBUILD = False
    # earlier instances of the same request land on hosts: check again for every instance
    run_filter_once_per_request = False
    policy_name = "anti-affinity"

    def filter_rows(self, table: Any, rows: Any, spec_obj: Any) -> RowOutcome | None:
        group = getattr(spec_obj, "instance_group", None)
        if group is None or getattr(group, "policy", None) != self.policy_name:
            return RowOutcome(np.ones(len(rows), dtype=bool), [""])
        return None  # the hosts' instances decide: per host

    def prepare(self, spec_obj: Any) -> Any:
        group = getattr(spec_obj, "instance_group", None)
        if group is None or getattr(group, "policy", None) != self.policy_name:
            return PASS_ALL
        return (
            getattr(spec_obj, "instance_uuid", None),
            set(getattr(group, "members", None) or ()),
            _max_server_per_host(group),
            getattr(group, "uuid", "n/a"),
        )

    def check(self, host_state: Any, prepared: Any) -> bool | Reject:
        instance_uuid, members, limit, group_uuid = prepared
        instances = host_state.instances or {}
        # a move may check the host the instance is on already: it must stay eligible
        if instance_uuid is not None and instance_uuid in instances:
            return True
        # most hosts hold no member: no intersection set built for them
        on_host = 0 if members.isdisjoint(instances) else len(members.intersection(instances))
        if LOG.isEnabledFor(logging.DEBUG):
            LOG.debug(
                "Group anti-affinity: check if the number of servers from group %(uuid)s "
                "on host %(host)s is less than %(max)s.",
                {"uuid": group_uuid, "host": host_state.host, "max": limit},
            )
        return True if on_host < limit else GROUP_MEMBERS_ON_HOST


@column_path
class ServerGroupAffinityFilter(BaseHostFilter):
    """Passes, for an affinity server group that already has hosts, only those hosts."""

    RUN_ON_REBUILD = False
    # the group's hosts grow as instances of the same request are placed
    run_filter_once_per_request = False
    policy_name = "affinity"

    def filter_rows(self, table: Any, rows: Any, spec_obj: Any) -> RowOutcome | None:
        group = getattr(spec_obj, "instance_group", None)
        policies = (getattr(group, "policies", None) or []) if group is not None else []
        group_hosts = (getattr(group, "hosts", None) or []) if group is not None else []
        if self.policy_name not in policies or not group_hosts:
            return RowOutcome(np.ones(len(rows), dtype=bool), [""])
        return None  # few hosts to keep: per host

    def prepare(self, spec_obj: Any) -> Any:
        group = getattr(spec_obj, "instance_group", None)
        policies = (getattr(group, "policies", None) or []) if group is not None else []
        group_hosts = (getattr(group, "hosts", None) or []) if group is not None else []
        if self.policy_name not in policies or not group_hosts:
            return PASS_ALL
        allowed = set(group_hosts)
        # one line per request (nova logs one per host)
        if LOG.isEnabledFor(logging.DEBUG):
            LOG.debug(
                "Group affinity: check if hosts are in group %(uuid)s hosts %(hosts)s",
                {"uuid": getattr(group, "uuid", "n/a"), "hosts": sorted(allowed)},
            )
        return allowed

    def check(self, host_state: Any, allowed: Any) -> bool | Reject:
        return True if host_state.host in allowed else NOT_GROUP_HOST
