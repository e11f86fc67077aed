"""FilterHandler: order, once-per-request, rebuild, stop at zero, reasons, summary, loading."""

from __future__ import annotations

import logging

import pytest

from filters import PASS_ALL, BaseHostFilter, Reject
from filters.all_hosts_filter import AllHostsFilter
from filters.compute_filter import ComputeFilter
from filters.handler import FilterError, FilterHandler, FilterReport, FilterStep, load_filters
from filters.image_props_filter import ImagePropertiesFilter
from filters.nova_adapter import NovaFilterAdapter
from scheduler.exceptions import NoValidHost, PluginNotFound
from tests.unit.filters.fakes import make_aggregate, make_host, make_service, make_spec


class RecordingFilter(BaseHostFilter):
    """Rejects hosts whose name is in ``reject``; records each call."""

    def __init__(self, reject=(), reason="nope", once=False, on_rebuild=False):
        self.reject = set(reject)
        self.reason = reason
        self.calls: list[list[str]] = []
        self.run_filter_once_per_request = once
        self.RUN_ON_REBUILD = on_rebuild

    def prepare(self, spec_obj):
        self.calls.append([])
        return spec_obj

    def check(self, host_state, spec_obj):
        self.calls[-1].append(host_state.host)
        return Reject(self.reason) if host_state.host in self.reject else True


class FirstFilter(RecordingFilter):
    pass


class SecondFilter(RecordingFilter):
    pass


def hosts(*names):
    return [make_host(n) for n in names]


def names(report_hosts):
    return [h.host for h in report_hosts]


def test_filters_run_in_order_and_keep_host_order():
    first = FirstFilter(reject={"b"})
    second = SecondFilter(reject={"d"})
    report = FilterHandler([first, second]).run(hosts("e", "b", "a", "d", "c"), make_spec())
    assert names(report.hosts) == ["e", "a", "c"]
    assert first.calls == [["e", "b", "a", "d", "c"]]
    assert second.calls == [["e", "a", "d", "c"]]
    assert [s.name for s in report.steps] == ["FirstFilter", "SecondFilter"]
    assert [(s.hosts_in, s.hosts_out) for s in report.steps] == [(5, 4), (4, 3)]


def test_once_per_request_filters_are_skipped_after_the_first_instance():
    once = FirstFilter(reject={"a"}, once=True)
    every = SecondFilter(reject={"b"})
    handler = FilterHandler([once, every])
    assert names(handler.run(hosts("a", "b", "c"), make_spec(), index=0).hosts) == ["c"]
    report = handler.run(hosts("a", "b", "c"), make_spec(), index=1)
    assert names(report.hosts) == ["a", "c"]
    assert len(once.calls) == 1
    assert len(every.calls) == 2
    assert [s.name for s in report.steps] == ["SecondFilter"]


def test_rebuild_passes_everything_through_filters_not_run_on_rebuild():
    skipped = FirstFilter(reject={"a"}, on_rebuild=False)
    runs = SecondFilter(reject={"b"}, on_rebuild=True)
    spec = make_spec(hints={"_nova_check_type": ["rebuild"]})
    report = FilterHandler([skipped, runs]).run(hosts("a", "b", "c"), spec)
    assert names(report.hosts) == ["a", "c"]
    assert skipped.calls == []
    assert report.steps[0].skipped == "rebuild"
    assert report.steps[0].removed == []


def test_rebuild_runs_image_properties_filter_but_not_compute_filter():
    down = make_host("down", service=make_service(disabled=True))
    arm = make_host("arm", supported_instances=[["aarch64", "kvm", "hvm"]])
    spec = make_spec(
        image_props={"hw_architecture": "x86_64"}, hints={"_nova_check_type": ["rebuild"]}
    )
    report = FilterHandler([ComputeFilter(), ImagePropertiesFilter()]).run([down, arm], spec)
    assert report.hosts == []
    assert set(report.removed_by) == {"ImagePropertiesFilter"}


def test_chain_stops_at_zero_hosts():
    first = FirstFilter(reject={"a", "b"})
    second = SecondFilter()
    report = FilterHandler([first, second]).run(hosts("a", "b"), make_spec())
    assert report.hosts == []
    assert second.calls == []
    assert len(report.steps) == 1


def test_reasons_are_counted_per_filter_and_summarised_highest_first():
    class ReasonFilter(BaseHostFilter):
        def host_passes(self, host_state, spec_obj):
            if host_state.host.startswith("x"):
                return Reject("too x")
            if host_state.host.startswith("y"):
                return False  # a nova-style plain bool gets the default reason
            return True

    disabled = [make_host(f"d{i}", service=make_service(disabled=True)) for i in range(3)]
    others = hosts("x1", "x2", "x3", "x4", "y1", "ok")
    report = FilterHandler([ComputeFilter(), ReasonFilter()]).run(disabled + others, make_spec())
    assert names(report.hosts) == ["ok"]
    assert report.removed_by["ComputeFilter"] == {"service disabled": 3}
    assert report.removed_by["ReasonFilter"] == {"too x": 4, "rejected": 1}
    assert report.summary(9) == (
        "1/9 hosts available: 4 ReasonFilter (too x), 3 ComputeFilter (service disabled), "
        "1 ReasonFilter (rejected)"
    )


def test_summary_defaults_total_to_the_hosts_given():
    report = FilterHandler([FirstFilter(reject={"a"})]).run(hosts("a", "b"), make_spec())
    assert report.summary() == "1/2 hosts available: 1 FirstFilter (nope)"
    assert FilterReport().summary(0) == "0/0 hosts available"


def test_filter_step_counts_elapsed_time():
    report = FilterHandler([AllHostsFilter()]).run(hosts("a"), make_spec())
    step = report.steps[0]
    assert isinstance(step, FilterStep)
    assert step.elapsed >= 0.0
    assert step.hosts_out == 1


def test_a_failing_filter_fails_the_request_with_its_name(caplog):
    class BrokenFilter(BaseHostFilter):
        def host_passes(self, host_state, spec_obj):
            raise KeyError("cpu_info")

    with caplog.at_level(logging.ERROR, logger="filters.handler"):
        with pytest.raises(FilterError) as err:
            FilterHandler([BrokenFilter()]).run(hosts("a"), make_spec())
    assert isinstance(err.value, NoValidHost)
    assert "BrokenFilter" in str(err.value)
    assert "KeyError" in str(err.value)
    assert any("BrokenFilter" in r.getMessage() for r in caplog.records)


def test_nova_style_filter_all_is_used_and_dropped_hosts_get_a_reason():
    class NovaStyle:  # a class written for nova: run through the adapter
        def filter_all(self, filter_obj_list, spec_obj):
            return (h for h in filter_obj_list if h.host != "b")

    report = FilterHandler([NovaFilterAdapter(NovaStyle(), "mycloud.NovaStyle")]).run(
        hosts("a", "b", "c"), make_spec()
    )
    assert names(report.hosts) == ["a", "c"]
    assert report.removed_by == {"NovaStyle": {"rejected": 1}}


def test_info_line_lists_start_and_end_counts_when_all_hosts_are_removed(caplog):
    first = FirstFilter(reject={"a"})
    second = SecondFilter(reject={"b"})
    with caplog.at_level(logging.INFO, logger="filters.handler"):
        FilterHandler([first, second]).run(hosts("a", "b"), make_spec(instance_uuid="u-1"))
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert "Filter SecondFilter returned 0 hosts" in messages
    assert (
        "Filtering removed all hosts for the request with instance ID 'u-1'. Filter results: "
        "['FirstFilter: (start: 2, end: 1)', 'SecondFilter: (start: 1, end: 0)']"
    ) in messages


def test_debug_lines_only_when_debug_is_enabled(caplog):
    handler = FilterHandler([FirstFilter(reject={"a"})])
    with caplog.at_level(logging.INFO, logger="filters.handler"):
        handler.run(hosts("a", "b"), make_spec())
    assert not [r for r in caplog.records if r.levelno == logging.DEBUG]
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="filters.handler"):
        handler.run(hosts("a", "b"), make_spec())
    messages = [r.getMessage() for r in caplog.records]
    assert "Starting with 2 host(s)" in messages
    assert "Filter FirstFilter returned 1 host(s)" in messages


def test_load_filters_in_configured_order_accepting_nova_paths():
    loaded = load_filters(
        ["ServerGroupAffinityFilter", "nova.scheduler.filters.compute_filter.ComputeFilter"]
    )
    assert [type(f).__name__ for f in loaded] == ["ServerGroupAffinityFilter", "ComputeFilter"]


def test_load_filters_rejects_unknown_names():
    with pytest.raises(PluginNotFound) as err:
        load_filters(["ComputeFilter", "RamFiltr"])
    assert err.value.names == ["RamFiltr"]
    assert "ComputeFilter" in err.value.available
    assert "RamFilter" in err.value.available
    assert "RamFiltr" in str(err.value)


def test_all_hosts_filter_passes_everything():
    report = FilterHandler([AllHostsFilter()]).run(hosts("a", "b"), make_spec())
    assert names(report.hosts) == ["a", "b"]
    assert AllHostsFilter().host_passes(make_host("a"), make_spec()) is True
    assert AllHostsFilter.run_filter_once_per_request is True
    assert AllHostsFilter.RUN_ON_REBUILD is False


def test_filter_all_returning_none_stops_filtering():
    class Stopper:
        def filter_all(self, filter_obj_list, spec_obj):
            return None

    second = SecondFilter()
    report = FilterHandler([NovaFilterAdapter(Stopper(), "mycloud.Stopper"), second]).run(
        hosts("a", "b"), make_spec()
    )
    assert report.hosts == []
    assert second.calls == []
    assert report.removed_by == {"Stopper": {"filter asked to stop filtering": 2}}


@pytest.mark.parametrize("old", ["filter_hosts", "filter_all"])
def test_a_filter_of_ours_with_the_old_batch_methods_is_refused_with_the_way_out(old):
    with pytest.raises(TypeError, match=rf"defines {old}\(\).*prepare\(spec_obj\).*check\("):
        type("OldStyle", (BaseHostFilter,), {old: lambda self, hosts, spec: hosts})


def test_prepare_runs_once_per_run_and_check_once_per_host():
    filt = FirstFilter(reject={"b"})
    FilterHandler([filt]).run(hosts("a", "b", "c"), make_spec())
    FilterHandler([filt]).run(hosts("c"), make_spec())
    assert filt.calls == [["a", "b", "c"], ["c"]]


def test_pass_all_from_prepare_passes_every_host_unchecked():
    class NothingAsked(BaseHostFilter):
        checked = 0

        def prepare(self, spec_obj):
            return PASS_ALL if not spec_obj.availability_zone else spec_obj.availability_zone

        def check(self, host_state, zone):
            NothingAsked.checked += 1
            return Reject("elsewhere")

    report = FilterHandler([NothingAsked()]).run(hosts("a", "b"), make_spec())
    assert names(report.hosts) == ["a", "b"] and NothingAsked.checked == 0
    assert NothingAsked().host_passes(make_host("a"), make_spec()) is True
    spec = make_spec()
    spec.availability_zone = "az1"
    report = FilterHandler([NothingAsked()]).run(hosts("a", "b"), spec)
    assert report.hosts == [] and NothingAsked.checked == 2
    assert report.removed_by == {"NothingAsked": {"elsewhere": 2}}


def test_per_aggregates_checks_one_host_per_aggregate_set():
    agg1, agg2 = make_aggregate(1, color="red"), make_aggregate(2, color="blue")
    seen = []

    class RedOnly(BaseHostFilter):
        per_aggregates = True

        def check(self, host_state, spec_obj):
            seen.append(host_state.host)
            red = any(a.metadata.get("color") == "red" for a in host_state.aggregates)
            return True if red else Reject("not red")

    many = hosts("r1", "r2", "b1", "n1", "r3", "b2", "n2")
    for h in many:
        h.aggregates = {"r": [agg1], "b": [agg2], "n": []}[h.host[0]]
    report = FilterHandler([RedOnly()]).run(many, make_spec())
    assert names(report.hosts) == ["r1", "r2", "r3"]
    assert report.removed_by == {"RedOnly": {"not red": 4}}
    assert seen == ["r1", "b1", "n1"]  # one check per distinct set, in host order


def test_host_passes_is_check_after_prepare_and_a_filter_needs_one_of_them():
    class Halves(BaseHostFilter):
        def prepare(self, spec_obj):
            return spec_obj.flavor.memory_mb // 2

        def check(self, host_state, half):
            return host_state.free_ram_mb >= half or Reject("short")

    spec = make_spec()
    spec.flavor.memory_mb = 1024
    assert Halves().host_passes(make_host("a", free_ram_mb=512), spec) is True
    assert Halves().host_passes(make_host("a", free_ram_mb=511), spec).reason == "short"

    class Empty(BaseHostFilter):
        pass

    with pytest.raises(NotImplementedError, match="Empty must define check"):
        Empty().host_passes(make_host("a"), spec)
