"""Filters written for nova-scheduler, unchanged."""

import nova.conf
from nova.scheduler import filters
from oslo_log import log as logging

LOG = logging.getLogger(__name__)
CONF = nova.conf.CONF


class LocalDiskFilter(filters.BaseHostFilter):
    """Passes, for flavors with local_disk=true, the hosts with enough free disk for root,
    ephemeral and swap; records the disk limit as nova's old DiskFilter did."""

    RUN_ON_REBUILD = False

    def host_passes(self, host_state, spec_obj):
        if spec_obj.flavor.extra_specs.get("local_disk") != "true":
            return True
        needed = (
            1024 * (spec_obj.flavor.root_gb + spec_obj.flavor.ephemeral_gb) + spec_obj.flavor.swap
        )
        if host_state.free_disk_mb < needed:
            LOG.debug("%s has %d MiB free; %d needed", host_state, host_state.free_disk_mb, needed)
            return False
        host_state.limits["disk_gb"] = host_state.free_disk_mb // 1024
        return True


class DedicatedCloudFilter(filters.BaseHostFilter):
    """Passes hosts of an aggregate with dedicated_project metadata only for that project;
    other hosts for everyone. Its answer is the same for every instance of a request."""

    run_filter_once_per_request = True

    def host_passes(self, host_state, spec_obj):
        owners = {
            agg.metadata["dedicated_project"]
            for agg in host_state.aggregates
            if "dedicated_project" in agg.metadata
        }
        return not owners or spec_obj.project_id in owners


class VGPUFilter(filters.BaseHostFilter):
    """Passes, for a request with a vgpu_model hint, the hosts whose stats list that model."""

    def filter_all(self, filter_obj_list, spec_obj):
        model = spec_obj.get_scheduler_hint("vgpu_model")
        if model is None:
            return filter_obj_list
        return [h for h in filter_obj_list if host_has(h, model)]


def host_has(host_state, model):
    return model in host_state.stats.get("vgpu_models", "").split(",")


def mycloud_filters():
    """nova's all_filters style: the classes of this module."""
    return [LocalDiskFilter, DedicatedCloudFilter, VGPUFilter]
