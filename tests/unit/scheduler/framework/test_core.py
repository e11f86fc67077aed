"""The framework: one instance's narrow → filter → weigh → arrange step, which every path that
filters or weighs runs (the service, explain, capacity, the smallest change)."""

from __future__ import annotations

from filters.handler import FilterHandler, load_filters
from scheduler.conf import CONF
from scheduler.framework import Framework, narrow
from scheduler.framework.pickers import NovaPick
from scheduler.objects import Destination, ImageMeta
from scheduler.request import SchedulingRequest
from tests.unit.scheduler.drivers.fakes import make_host, make_spec
from weighers.handler import WeightHandler, load_weighers


def _framework(filters=("ComputeFilter", "ImagePropertiesFilter")) -> Framework:
    return Framework(
        FilterHandler(load_filters(list(filters))),
        WeightHandler(load_weighers(["nova.scheduler.weights.ram.RAMWeigher"])),
        NovaPick(CONF),
        CONF,
    )


def _hosts():
    return [
        make_host("small", ram_mb=4096),
        make_host("big", ram_mb=32768),
        make_host("mid", ram_mb=16384),
        make_host("off", ram_mb=65536, disabled=True),
    ]


def _req(**spec_fields) -> SchedulingRequest:
    spec = make_spec()
    for name, value in spec_fields.items():
        setattr(spec, name, value)
    return SchedulingRequest.of(spec, request_id="req-framework")


def test_a_step_narrows_filters_and_weighs_best_first():
    req = _req(ignore_hosts=["BIG"])
    step = _framework().step(req, _hosts(), 0)
    assert step.narrowed == [(1, "in ignore_hosts")]
    assert [h.host for h in step.hosts] == ["mid", "small"]  # the disabled one filtered
    assert step.weights == sorted(step.weights, reverse=True)
    assert req.trace.filter_removed == {"ComputeFilter": 1}
    assert req.trace.total_hosts == 4


def test_forced_hosts_skip_the_filters_but_not_for_a_rebuild_check():
    hosts = _hosts()
    image = ImageMeta(properties={"hw_architecture": "aarch64"})
    req = _req(force_hosts=["off"], image=image)
    assert [h.host for h in _framework().step(req, hosts, 0).hosts] == ["off"]
    # a rebuild check runs the filters that run on rebuild (ImagePropertiesFilter does)
    req = _req(force_hosts=["off"], image=image, scheduler_hints={"_nova_check_type": ["rebuild"]})
    step = _framework().step(req, hosts, 0)
    assert not step.forced and step.hosts == []


def test_a_requested_destination_narrows_to_its_host_and_node():
    hosts = _hosts()
    kept, forced = narrow(_req(requested_destination=Destination(host="mid")), hosts)
    assert [h.host for h in kept] == ["mid"] and not forced


def test_without_leaves_one_filter_out_through_the_same_steps():
    image = ImageMeta(properties={"hw_architecture": "aarch64"})
    framework = _framework()
    assert framework.best(_req(image=image), _hosts(), 5) == []
    best = framework.best(
        _req(image=image, ignore_hosts=["mid"]), _hosts(), 5, without="ImagePropertiesFilter"
    )
    assert [h.host for h in best] == ["big", "small"]  # never the ignored nor the disabled
    # the enabled filters themselves are not changed by it
    assert [f.name for f in framework.filters] == ["ComputeFilter", "ImagePropertiesFilter"]


def test_filtered_is_the_narrowing_and_the_filters_without_weighing():
    report = _framework().filtered(_req(ignore_hosts=["small"]), _hosts())
    assert sorted(h.host for h in report.hosts) == ["big", "mid"]
    assert report.removed_by["ComputeFilter"]
