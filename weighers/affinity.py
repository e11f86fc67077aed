"""Soft (anti-)affinity weighers for server groups with the soft-affinity and
soft-anti-affinity policies: the best-effort counterparts of the affinity filters."""

from __future__ import annotations

from typing import Any

from weighers import BaseHostWeigher, Same


def _group_members(spec_obj: Any, policy: str) -> frozenset[str] | None:
    """The request's group members when the group has ``policy``, else None."""
    group = getattr(spec_obj, "instance_group", None)
    if not group or group.policy != policy:
        return None
    return frozenset(group.members or ())


def _members_on_host(host_state: Any, members: frozenset[str]) -> int:
    instances = host_state.instances
    if not instances or not members:
        return 0
    if len(members) < len(instances):
        return sum(1 for uuid in members if uuid in instances)
    return sum(1 for uuid in instances if uuid in members)


class _SoftAffinityWeigherBase(BaseHostWeigher):
    """Counts the members of the request's server group already on each host, for groups
    with ``policy``; 0 for every host otherwise."""

    policy: str = ""
    sign: int = 1
    returns_numbers = True

    def prepare(self, weight_properties: Any, hosts: list[Any]) -> frozenset[str] | Same:
        # without members of a group with this policy, every host counts 0
        return _group_members(weight_properties, self.policy) or Same(0)

    def weigh(self, host_state: Any, members: frozenset[str]) -> float:
        return self.sign * _members_on_host(host_state, members)


class ServerGroupSoftAffinityWeigher(_SoftAffinityWeigherBase):
    """Prefers hosts that already run more members of the request's soft-affinity server
    group (``soft_affinity_weight_multiplier``)."""

    policy = "soft-affinity"
    multiplier_option = "soft_affinity_weight_multiplier"


class ServerGroupSoftAntiAffinityWeigher(_SoftAffinityWeigherBase):
    """Prefers hosts that run fewer members of the request's soft-anti-affinity server
    group (``soft_anti_affinity_weight_multiplier``); the raw value is minus the count."""

    policy = "soft-anti-affinity"
    sign = -1
    multiplier_option = "soft_anti_affinity_weight_multiplier"
