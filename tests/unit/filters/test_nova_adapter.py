"""Filter classes written against nova's BaseHostFilter, loaded by class path and run by our
handler through NovaFilterAdapter. The nova base classes here are small stand-ins with
nova's code paths (nova itself is not installed in this venv); the real ones are proven in
tests/functional/test_nova_plugins.py."""

from __future__ import annotations

import sys
import textwrap

import pytest

from filters.handler import FilterHandler, FilterNotAvailable, load_filters
from filters.nova_adapter import NovaFilterAdapter
from scheduler.conf import CONF
from scheduler.exceptions import PluginNotFound
from scheduler.nova_plugins import NovaHostState, NovaPluginImportError, NovaRequestSpec
from scheduler.objects import Destination
from scheduler.resources import numa, pci
from tests.unit.filters.fakes import make_aggregate, make_host, make_spec, tabled


class BaseFilter:
    """nova.filters.BaseFilter, as nova 34 has it."""

    run_filter_once_per_request = False

    def _filter_one(self, obj, spec_obj):
        return True

    def filter_all(self, filter_obj_list, spec_obj):
        for obj in filter_obj_list:
            if self._filter_one(obj, spec_obj):
                yield obj

    def run_filter_for_index(self, index):
        return not (self.run_filter_once_per_request and index > 0)


class BaseHostFilter(BaseFilter):
    """nova.scheduler.filters.BaseHostFilter, as nova 34 has it."""

    RUN_ON_REBUILD = False

    def _filter_one(self, obj, spec):
        hints = spec.scheduler_hints if "scheduler_hints" in spec else {}
        if not self.RUN_ON_REBUILD and hints.get("_nova_check_type") == ["rebuild"]:
            return True
        return self.host_passes(obj, spec)

    def host_passes(self, host_state, filter_properties):
        raise NotImplementedError()


# the adapter calls host_passes directly when filter_all and _filter_one are nova's own
BaseFilter.__module__ = "nova.filters"
BaseHostFilter.__module__ = "nova.scheduler.filters"


class LocalDiskFilter(BaseHostFilter):
    """For local_disk flavors: hosts with enough free disk; records the disk limit."""

    def host_passes(self, host_state, spec_obj):
        if spec_obj.flavor.extra_specs.get("local_disk") != "true":
            return True
        if host_state.free_disk_mb < spec_obj.flavor.root_gb * 1024:
            return False
        host_state.limits["disk_gb"] = host_state.free_disk_mb // 1024
        return True


class DedicatedCloudFilter(BaseHostFilter):
    """Hosts of an aggregate dedicated to a project pass only for that project."""

    run_filter_once_per_request = True

    def host_passes(self, host_state, spec_obj):
        owners = {
            a.metadata["dedicated_project"]
            for a in host_state.aggregates
            if "dedicated_project" in a.metadata
        }
        return not owners or spec_obj.project_id in owners


class VGPUFilter(BaseHostFilter):
    """Its own filter_all: hosts whose stats list the hinted vGPU model, best stocked first."""

    RUN_ON_REBUILD = True

    def filter_all(self, filter_obj_list, spec_obj):
        model = spec_obj.get_scheduler_hint("vgpu_model")
        if model == "stop":
            return None
        hosts = [h for h in filter_obj_list if model in h.stats.get("vgpu", "").split(",")]
        return sorted(hosts, key=lambda h: -int(h.stats.get("vgpu_free", 0)))


class EverySecondInstanceFilter(BaseHostFilter):
    """Runs for instances 0, 2, 4... of a multi-create and removes every host."""

    def run_filter_for_index(self, index):
        return index % 2 == 0

    def host_passes(self, host_state, spec_obj):
        return False


class CandidateFilter(BaseHostFilter):
    """Keeps the allocation candidates with a 'good' marker, as CandidateFilterMixin does."""

    def host_passes(self, host_state, spec_obj):
        good = [c for c in host_state.allocation_candidates if c.get("good")]
        host_state.allocation_candidates = good
        return bool(good)


def names(hosts):
    return [h.host for h in hosts]


def test_per_host_filter_reads_nova_names_and_reports_by_its_class_name():
    hosts = [make_host("a", free_disk_mb=10 * 1024), make_host("b", free_disk_mb=1024)]
    spec = make_spec(extra_specs={"local_disk": "true"})
    spec.flavor.root_gb = 5
    adapter = NovaFilterAdapter(LocalDiskFilter(), "x.LocalDiskFilter")
    report = FilterHandler([adapter]).run(hosts, spec)
    assert names(report.hosts) == ["a"]
    assert dict(report.removed_by) == {"LocalDiskFilter": {"rejected": 1}}
    assert adapter._per_host


def test_limits_written_by_a_nova_filter_belong_to_the_request_only():
    host = make_host("a", free_disk_mb=10 * 1024)
    spec = make_spec(extra_specs={"local_disk": "true"})
    other = make_spec(extra_specs={"local_disk": "true"})
    FilterHandler([NovaFilterAdapter(LocalDiskFilter(), "p")]).run([host], spec)
    assert spec.limits_for(host) == {"disk_gb": 10}
    assert other.limits_for(host) == {}
    assert dict(host.limits) == {}


def test_aggregates_and_project_reach_the_plugin():
    dedicated = make_host("a", aggregates=[make_aggregate(1, dedicated_project="p1")])
    shared = make_host("b")
    spec = make_spec()
    spec.project_id = "p2"
    report = FilterHandler([NovaFilterAdapter(DedicatedCloudFilter(), "p")]).run(
        [dedicated, shared], spec
    )
    assert names(report.hosts) == ["b"]


def test_own_filter_all_keeps_its_order_and_none_stops_filtering():
    hosts = [
        make_host("a", stats={"vgpu": "a100", "vgpu_free": "1"}),
        make_host("b", stats={"vgpu": "h100"}),
        make_host("c", stats={"vgpu": "a100,h100", "vgpu_free": "4"}),
    ]
    adapter = NovaFilterAdapter(VGPUFilter(), "p")
    assert not adapter._per_host
    report = FilterHandler([adapter]).run(hosts, make_spec(hints={"vgpu_model": ["a100"]}))
    assert names(report.hosts) == ["c", "a"]
    assert [h.host for h, _ in report.steps[0].removed] == ["b"]
    stopped = FilterHandler([adapter]).run(hosts, make_spec(hints={"vgpu_model": ["stop"]}))
    assert stopped.hosts == []
    assert dict(stopped.removed_by) == {"VGPUFilter": {"filter asked to stop filtering": 3}}


def test_rebuild_runs_only_filters_marked_run_on_rebuild():
    hosts = [make_host("a", stats={"vgpu": "a100"}), make_host("b", free_disk_mb=0)]
    spec = make_spec(
        extra_specs={"local_disk": "true"},
        hints={"_nova_check_type": ["rebuild"], "vgpu_model": ["a100"]},
    )
    handler = FilterHandler(
        [NovaFilterAdapter(LocalDiskFilter(), "p"), NovaFilterAdapter(VGPUFilter(), "q")]
    )
    report = handler.run(hosts, spec)
    assert [s.skipped for s in report.steps] == ["rebuild", None]
    assert names(report.hosts) == ["a"]


def test_run_filter_for_index_decides_per_instance():
    hosts = [make_host("a")]
    handler = FilterHandler([NovaFilterAdapter(EverySecondInstanceFilter(), "p")])
    assert [len(handler.run(hosts, make_spec(), index=i).hosts) for i in range(4)] == [0, 1, 0, 1]
    once = FilterHandler([NovaFilterAdapter(DedicatedCloudFilter(), "p")])
    spec = make_spec()
    spec.project_id = "p2"
    dedicated = [make_host("a", aggregates=[make_aggregate(1, dedicated_project="p1")])]
    assert once.run(dedicated, spec, index=0).hosts == []
    assert names(once.run(dedicated, spec, index=1).hosts) == ["a"]


def test_narrowed_allocation_candidates_go_back_to_the_request():
    host = make_host("a")
    host.uuid = "rp-a"
    spec = make_spec()
    spec.scratch.allocation_candidates = {"rp-a": [{"n": 1}, {"n": 2, "good": True}]}
    report = FilterHandler([NovaFilterAdapter(CandidateFilter(), "p")]).run([host], spec)
    assert names(report.hosts) == ["a"]
    assert spec.candidates_for(host) == [{"n": 2, "good": True}]


def test_host_view_names_what_it_does_not_have():
    view = NovaHostState(make_host("a", free_ram_mb=2048), make_spec())
    assert view.free_ram_mb == 2048
    assert view.host == "a"
    with pytest.raises(AttributeError, match="'no_such_thing'"):
        view.no_such_thing  # noqa: B018
    view.cached_by_plugin = 3  # stays on the view
    assert view.cached_by_plugin == 3
    assert not hasattr(make_host("a"), "cached_by_plugin")


def test_host_view_metrics_as_nova_objects():
    host = make_host("a", metrics=[{"name": "cpu.percent", "value": 37, "source": "libvirt"}])
    metrics = NovaHostState(host).metrics
    assert [(m.name, m.value) for m in metrics] == [("cpu.percent", 37)]
    assert metrics.to_list() == [{"name": "cpu.percent", "value": 37, "source": "libvirt"}]


def test_request_view_behaves_like_nova_request_spec():
    spec = make_spec(image_props={"hw_architecture": "x86_64"}, hints={"group": ["g1"]})
    spec.requested_destination = Destination(host="h1")
    view = NovaRequestSpec(spec)
    assert view.get_scheduler_hint("group") == "g1"
    assert "requested_destination" in view
    assert "instance_group" not in view  # None, as an unset nova field
    assert view.image.properties.get("hw_architecture") == "x86_64"
    assert view.image.properties.hw_architecture == "x86_64"
    assert "hw_architecture" in view.image.properties
    assert view.image.properties.get("hw_machine_type") is None
    with pytest.raises(AttributeError, match="not set"):
        view.image.properties.hw_machine_type  # noqa: B018
    with pytest.raises(AttributeError, match="security_groups"):
        view.security_groups  # noqa: B018
    assert view._context is None
    assert view.flavor.extra_specs is spec.flavor.extra_specs


def test_request_view_gives_nova_plugins_novas_numa_and_pci_data():
    # ours are decoded at the RPC edge; a plugin written for nova reads nova's data
    numa_data = {"cells": [{"id": 0, "cpuset": [0, 1], "memory": 1024}], "instance_uuid": "i"}
    pci_data = {"count": 2, "spec": [{"vendor_id": "10de"}], "alias_name": "gpu"}
    spec = make_spec()
    spec.numa_topology = numa.instance_topology_from_primitive(numa_data)
    spec.pci_requests = pci.requests_from_primitive([pci_data])
    view = NovaRequestSpec(spec)
    assert view.numa_topology == numa_data
    assert view.pci_requests == [pci_data]
    assert "numa_topology" in view and "pci_requests" in view
    bare = NovaRequestSpec(make_spec())
    assert bare.numa_topology is None and bare.pci_requests == []


# -- loading by class path -------------------------------------------------------------------


@pytest.fixture
def plugin_module(tmp_path, monkeypatch):
    """Write a module of plugins into an importable folder; forget it afterwards."""
    written: list[str] = []

    def write(name: str, source: str) -> str:
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        written.append(name)
        return name

    monkeypatch.syspath_prepend(str(tmp_path))
    yield write
    for name in written:
        sys.modules.pop(name, None)


MODULE = f"{__name__}"


def test_enabled_filter_must_be_among_available_filters():
    with pytest.raises(FilterNotAvailable) as err:
        load_filters(["ComputeFilter", "LocalDiskFilter"], available=["ComputeFilter"])
    assert err.value.names == ["LocalDiskFilter"]
    assert isinstance(err.value, PluginNotFound)
    assert "available_filters" in str(err.value)
    with pytest.raises(FilterNotAvailable):
        load_filters(["ComputeFilter", "ImagePropertiesFilter"], available=["ComputeFilter"])


def test_available_class_path_loads_the_class_through_the_adapter():
    loaded = load_filters(
        ["ComputeFilter", "LocalDiskFilter", f"{MODULE}.VGPUFilter"],
        available=[
            "nova.scheduler.filters.all_filters",
            f"{MODULE}.LocalDiskFilter",
            f"{MODULE}.VGPUFilter",
        ],
    )
    assert type(loaded[0]).__module__ == "filters.compute_filter"
    assert [type(f) for f in loaded[1:]] == [NovaFilterAdapter, NovaFilterAdapter]
    assert [type(f.plugin) for f in loaded[1:]] == [LocalDiskFilter, VGPUFilter]
    assert [f.name for f in loaded] == ["ComputeFilter", "LocalDiskFilter", "VGPUFilter"]


def test_default_available_filters_come_from_the_configuration():
    CONF.set_override(
        "available_filters",
        ["nova.scheduler.filters.all_filters", f"{MODULE}.DedicatedCloudFilter"],
        "filter_scheduler",
    )
    try:
        loaded = load_filters(["DedicatedCloudFilter", "RamFilter"])
    finally:
        CONF.clear_override("available_filters", "filter_scheduler")
    assert isinstance(loaded[0], NovaFilterAdapter)
    assert type(loaded[1]).__module__ == "filters.ram_filter"
    with pytest.raises(FilterNotAvailable):
        load_filters(["DedicatedCloudFilter"])


def test_nova_path_to_a_builtin_we_implement_loads_ours():
    (loaded,) = load_filters(
        ["ComputeFilter"], available=["nova.scheduler.filters.compute_filter.ComputeFilter"]
    )
    assert type(loaded).__module__ == "filters.compute_filter"


def test_unimportable_path_stops_start_up_naming_the_module(plugin_module):
    plugin_module("mycloud_broken", "import mycloud_dependency_not_installed\n")
    with pytest.raises(NovaPluginImportError) as err:
        load_filters(["BrokenFilter"], available=["mycloud_broken.BrokenFilter"])
    message = str(err.value)
    assert "'mycloud_broken'" in message
    assert "No module named 'mycloud_dependency_not_installed'" in message
    assert "Repackaging a nova filter" in message
    with pytest.raises(NovaPluginImportError, match="has no attribute 'Missing'"):
        load_filters(["Missing"], available=[f"{MODULE}.Missing"])


def test_function_returning_classes_makes_each_available(plugin_module):
    plugin_module(
        "mycloud_all",
        f"""
        from {MODULE} import DedicatedCloudFilter, VGPUFilter

        def mycloud_filters():
            return [DedicatedCloudFilter, VGPUFilter]
        """,
    )
    loaded = load_filters(["VGPUFilter"], available=["mycloud_all.mycloud_filters"])
    assert [type(f.plugin) for f in loaded] == [VGPUFilter]


def test_a_novasched_filter_named_by_path_needs_no_adapter(plugin_module):
    plugin_module(
        "mycloud_native",
        """
        from filters import BaseHostFilter

        class NativeFilter(BaseHostFilter):
            def host_passes(self, host_state, spec_obj):
                return True
        """,
    )
    (loaded,) = load_filters(["NativeFilter"], available=["mycloud_native.NativeFilter"])
    assert type(loaded).__name__ == "NativeFilter"
    assert not isinstance(loaded, NovaFilterAdapter)


def test_nova_options_imported_by_a_plugin_keep_ours(plugin_module):
    plugin_module(
        "mycloud_conf",
        f"""
        from oslo_config import cfg

        from {MODULE} import BaseHostFilter

        # nova.conf registers its own definition of options novasched registered too
        cfg.CONF.register_opts(
            [cfg.IntOpt("max_instances_per_host", default=50, help="nova's text")],
            group="filter_scheduler",
        )
        cfg.CONF.register_opts([cfg.StrOpt("vgpu_models", default="a100")], group="mycloud")

        class ConfFilter(BaseHostFilter):
            def host_passes(self, host_state, spec_obj):
                return cfg.CONF.mycloud.vgpu_models == "a100"
        """,
    )
    (loaded,) = load_filters(["ConfFilter"], available=["mycloud_conf.ConfFilter"])
    assert loaded.host_passes(make_host("a"), make_spec())
    assert CONF.filter_scheduler.max_instances_per_host == 50
    opt = CONF._get_opt_info("max_instances_per_host", "filter_scheduler")["opt"]
    assert opt.help != "nova's text"


def test_hosts_in_the_host_table_go_through_the_plugin():
    hosts = [make_host(f"h{i:03d}", stats={"vgpu": "a100" if i % 4 else "h100"}) for i in range(80)]
    table, _ = tabled(hosts)
    report = FilterHandler([NovaFilterAdapter(VGPUFilter(), "p")]).run(
        hosts, make_spec(hints={"vgpu_model": ["h100"]})
    )
    assert names(report.hosts) == [f"h{i:03d}" for i in range(0, 80, 4)]
    assert dict(report.removed_by) == {"VGPUFilter": {"rejected": 60}}
    del table
