"""RackSpreadWeigher: spreads a server group's instances across racks.

A host's rack is the ``rack`` metadata of its aggregates (one aggregate per rack is the usual
way: its hosts are the rack's hosts), else the ``rack`` key of its compute node's stats. For a
request whose server group has the ``anti-affinity`` or ``soft-anti-affinity`` policy, each
host weighs minus the number of the group's hosts in its rack, so racks without members come
first. A host with no rack counts as a rack of its own. Other requests weigh 0 everywhere.

It is a preference, not a rule: the multiplier (``[example_plugins]
rack_spread_weight_multiplier``, 1.0; overridable per aggregate) sets how much it counts
against the other weighers.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from novasched_example_plugins import conf as plugin_conf
from weighers import BaseHostWeigher, Same

RACK_KEY = "rack"
SPREAD_POLICIES = frozenset({"anti-affinity", "soft-anti-affinity"})


def rack_of(host_state: Any) -> str | None:
    """The host's rack: its aggregates' ``rack`` metadata (the first by aggregate id), else
    its stats' ``rack``."""
    for agg in sorted(host_state.aggregates, key=lambda a: a.id):
        value = agg.metadata.get(RACK_KEY)
        if value:
            return value
    return (host_state.stats or {}).get(RACK_KEY) or None


class RackSpreadWeigher(BaseHostWeigher):
    """Prefers hosts in racks holding fewer hosts of the request's anti-affinity server
    group (``rack_spread_weight_multiplier``)."""

    multiplier_option = "rack_spread_weight_multiplier"
    multiplier_group = plugin_conf.GROUP

    def prepare(self, weight_properties: Any, hosts: list[Any]) -> dict[str, float] | Same:
        """Once per request, over the hosts being weighed: each host's raw weight, by name;
        Same(0.0) when the request asks no spreading."""
        group = getattr(weight_properties, "instance_group", None)
        if group is None or group.policy not in SPREAD_POLICIES or not group.hosts:
            return Same(0.0)
        # which rack each host name is in: the rack aggregates list all their hosts, also
        # those not among the candidates; a rack known from stats only covers these hosts
        rack_by_host: dict[str, str] = {}
        for host in hosts:
            rack = rack_of(host)
            if rack is not None:
                rack_by_host.setdefault(host.host, rack)
            for agg in host.aggregates:
                agg_rack = agg.metadata.get(RACK_KEY)
                if agg_rack:
                    for name in agg.hosts:
                        rack_by_host.setdefault(name, agg_rack)
        members = Counter(rack_by_host.get(name, f"host:{name}") for name in set(group.hosts))
        return {h.host: -float(members[rack_by_host.get(h.host, f"host:{h.host}")]) for h in hosts}

    def weigh(self, host_state: Any, weights: dict[str, float]) -> float:
        """Minus the number of the group's hosts in this host's rack."""
        return weights[host_state.host]
