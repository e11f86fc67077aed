"""Weighers written for nova-scheduler, unchanged."""

import nova.conf
from nova.scheduler import utils, weights

CONF = nova.conf.CONF


class FreeDiskPercentWeigher(weights.BaseHostWeigher):
    """Prefers hosts with a larger share of their disk free, on nova's fixed 0-100 scale,
    as much as ram_weight_multiplier says (aggregates may override it)."""

    minval = 0
    maxval = 100

    def weight_multiplier(self, host_state):
        return utils.get_weight_multiplier(
            host_state, "ram_weight_multiplier", CONF.filter_scheduler.ram_weight_multiplier
        )

    def _weigh_object(self, host_state, weight_properties):
        total_mb = host_state.total_usable_disk_gb * 1024
        if not total_mb:
            return 0
        return 100.0 * host_state.free_disk_mb / total_mb


class RackSpreadWeigher(weights.BaseHostWeigher):
    """Prefers hosts in racks (the 'rack' stat) holding fewer of the request's hosts hint."""

    def _weigh_object(self, host_state, weight_properties):
        return self.weigh_objects([weights.WeighedHost(host_state, 0.0)], weight_properties)[0]

    def weigh_objects(self, weighed_obj_list, weight_properties):
        busy = set(weight_properties.scheduler_hints.get("busy_racks") or [])
        return [0.0 if w.obj.stats.get("rack") in busy else 1.0 for w in weighed_obj_list]
