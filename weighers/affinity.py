"""Soft (anti-)affinity weighers for server groups with the soft-affinity and
soft-anti-affinity policies: the best-effort counterparts of the affinity filters."""

from __future__ import annotations

from typing import Any

from weighers import BaseHostWeigher


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

    def uniform_weight(self, weight_properties: Any) -> float | None:
        # without members of a group with this policy, every host counts 0
        return None if _group_members(weight_properties, self.policy) else 0

    def _weigh_object(self, host_state: Any, weight_properties: Any) -> float:
        members = _group_members(weight_properties, self.policy)
        if members is None:
            return 0
        return self.sign * _members_on_host(host_state, members)

    def weigh_objects(self, host_states: list[Any], weight_properties: Any) -> list[float]:
        members = _group_members(weight_properties, self.policy)
        if members is None:
            return [0] * len(host_states)
        sign = self.sign
        return [sign * _members_on_host(h, members) for h in host_states]


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
