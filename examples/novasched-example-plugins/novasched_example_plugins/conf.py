"""The plugins' own options, in their own group ``[example_plugins]`` of nova.conf.

A plugin registers its options on novasched's global ``CONF`` when it is imported (which
happens when novasched loads it), in a group of its own so that nothing it adds can clash
with nova's names. ``list_opts`` feeds ``oslo-config-generator``.
"""

from __future__ import annotations

from oslo_config import cfg

from scheduler.conf import CONF

GROUP = "example_plugins"

OPTS = [
    cfg.ListOpt(
        "dedicated_projects",
        default=[],
        help="Projects that must land only on the hosts of their dedicated cloud (aggregates "
        "with metadata dedicated_cloud=<project>). When those hosts are full, such a project "
        "gets NoValidHost rather than a shared host. Used by DedicatedCloudFilter.",
    ),
    cfg.FloatOpt(
        "rack_spread_weight_multiplier",
        default=1.0,
        help="Multiplier of RackSpreadWeigher. Positive spreads a server group's instances "
        "across racks; 0 turns it off. An aggregate's metadata key of the same name "
        "overrides it for its hosts.",
    ),
]

CONF.register_opts(OPTS, group=GROUP)


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    return [(GROUP, OPTS)]
