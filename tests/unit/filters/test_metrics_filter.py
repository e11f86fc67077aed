"""MetricsFilter: every metric named in [metrics] weight_setting must be reported."""

from __future__ import annotations

import logging

from filters.metrics_filter import MetricsFilter, weight_setting_names
from tests.unit.filters.fakes import make_host, make_spec, override, run_filter


def metric(name, value=1.0):
    return {"name": name, "value": value, "source": "libvirt.LibvirtDriver", "timestamp": None}


def run(setting, hosts):
    with override("weight_setting", setting, group="metrics"):
        filt = MetricsFilter()
    spec = make_spec()
    per_host = [filt.host_passes(h, spec) for h in hosts]
    outcome = run_filter(filt, hosts, spec)
    assert outcome.passed == [h for h, r in zip(hosts, per_host, strict=True) if r]
    assert [r for _, r in outcome.rejected] == [r.reason for r in per_host if not r]
    return [True if r is True else r.reason for r in per_host]


def test_hosts_need_every_configured_metric():
    hosts = [
        make_host("a", metrics=[metric("cpu.frequency"), metric("cpu.percent", 0.5)]),
        make_host("b", metrics=[metric("cpu.frequency")]),
        make_host("c", metrics=[]),
    ]
    assert run(["cpu.frequency=1.0", "cpu.percent=-2"], hosts) == [
        True,
        "missing metrics named in weight_setting",
        "missing metrics named in weight_setting",
    ]
    assert run(["cpu.frequency=1"], hosts) == [
        True,
        True,
        "missing metrics named in weight_setting",
    ]


def test_without_weight_setting_every_host_passes():
    assert run([], [make_host(metrics=[])]) == [True]


def test_invalid_entries_are_ignored_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="filters.metrics_filter"):
        names = weight_setting_names(["a=1", "b", "=2", "c=x", " d = 0.5 ", "e="])
    assert names == {"a", "d"}
    assert "Ignoring the invalid elements" in caplog.text
    # only the valid entry is required
    assert run(["cpu.frequency=1", "bogus"], [make_host(metrics=[metric("cpu.frequency")])]) == [
        True
    ]


def test_metric_objects_with_a_name_attribute_are_understood():
    class Metric:
        def __init__(self, name):
            self.name = name
            self.value = 1.0

    host = make_host(metrics=[Metric("cpu.frequency")])
    assert run(["cpu.frequency=1"], [host]) == [True]


def test_run_flags_match_nova():
    assert MetricsFilter.RUN_ON_REBUILD is False
    assert MetricsFilter.run_filter_once_per_request is False
