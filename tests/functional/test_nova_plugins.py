"""A cloud's own filters and weighers, written against nova 34's real BaseHostFilter and
BaseHostWeigher (tests/data/nova_plugins/mycloud_scheduler), load unchanged by their class
paths in nova.conf and decide over novasched's HostStates.

novasched's own loader runs in nova's venv (nova is never a dependency of novasched, so
this is the one Python where both import), in a subprocess, from a nova.conf as the service
reads it.
"""

# ruff: noqa: F811 - the nova_python fixture is imported by name; tests take it by that name

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

from tests.functional.fixtures_nova import ROOT, nova_python  # noqa: F401 - a fixture

PLUGINS = ROOT / "tests" / "data" / "nova_plugins"

NOVA_CONF = """\
[filter_scheduler]
available_filters = nova.scheduler.filters.all_filters
available_filters = mycloud_scheduler.filters.LocalDiskFilter
available_filters = mycloud_scheduler.filters.DedicatedCloudFilter
available_filters = mycloud_scheduler.filters.VGPUFilter
enabled_filters = ImagePropertiesFilter, DedicatedCloudFilter, LocalDiskFilter, VGPUFilter
weight_classes = nova.scheduler.weights.ram.RAMWeigher,
                 mycloud_scheduler.weighers.FreeDiskPercentWeigher,
                 mycloud_scheduler.weighers.RackSpreadWeigher
ram_weight_multiplier = 3.0
"""

SCHEDULE = """
import json, sys

from scheduler.conf import CONF

CONF(["--config-file", sys.argv[1]], project="nova")

import nova.scheduler.filters
import nova.scheduler.weights

from filters.handler import FilterHandler, load_filters
from scheduler.hosts.state import HostState
from scheduler.objects import Aggregate, Flavor, RequestSpec
from scheduler.request import SchedulingRequest
from weighers.handler import WeightHandler, load_weighers

filters = load_filters(list(CONF.filter_scheduler.enabled_filters))
weighers = load_weighers(list(CONF.filter_scheduler.weight_classes))


def host(name, free_gb, total_gb, stats, aggregates=()):
    state = HostState(name, name)
    state.update(
        compute={
            "uuid": "rp-" + name, "hypervisor_hostname": name, "memory_mb": 4096,
            "free_ram_mb": 4096, "vcpus": 8, "local_gb": total_gb, "free_disk_gb": free_gb,
            "stats": json.dumps(stats),
        },
        aggregates=list(aggregates),
    )
    return state


hosts = [
    host("h0", 100, 100, {"vgpu_models": "a100"},
         [Aggregate(1, "agg-1", "dedicated", {"h0"}, {"dedicated_project": "other"})]),
    host("h1", 10, 100, {"vgpu_models": "a100"}),
    host("h2", 50, 100, {"vgpu_models": "a100", "rack": "r1"}),
    host("h3", 80, 200, {"vgpu_models": "a100,h100", "rack": "r2"},
         [Aggregate(2, "agg-2", "light", {"h3"}, {"ram_weight_multiplier": "1.0"})]),
    host("h4", 90, 100, {}),
]
spec = RequestSpec(
    flavor=Flavor(memory_mb=512, vcpus=1, root_gb=20, extra_specs={"local_disk": "true"}),
    project_id="p1",
    num_instances=2,
    scheduler_hints={"vgpu_model": ["a100"], "busy_racks": ["r1"]},
)
req = SchedulingRequest.of(spec)
first = FilterHandler(filters).run(hosts, req, index=0)
second = FilterHandler(filters).run(hosts, req, index=1)
ranked, weights = WeightHandler(weighers).rank(first.hosts, req)
print(json.dumps({
    "filters": [[f.name, type(f).__name__] for f in filters],
    "nova_filters": [
        isinstance(getattr(f, "plugin", None), nova.scheduler.filters.BaseHostFilter)
        for f in filters
    ],
    "weighers": [[w.name, type(w).__name__] for w in weighers],
    "nova_weighers": [
        isinstance(getattr(w, "plugin", None), nova.scheduler.weights.BaseHostWeigher)
        for w in weighers
    ],
    "first": [h.host for h in first.hosts],
    "removed": {name: dict(reasons) for name, reasons in first.removed_by.items()},
    "second": [h.host for h in second.hosts],
    "limits": {h.host: req.limits_for(h) for h in first.hosts},
    "ranked": [h.host for h in ranked],
    "weights": weights,
}))
"""

START = """
import sys

from scheduler.conf import CONF

CONF(["--config-file", sys.argv[1]], project="nova")

from scheduler.drivers.filter_scheduler import FilterScheduler

try:
    FilterScheduler(placement=object(), host_manager=object())
except Exception as exc:
    print(type(exc).__name__)
    print(exc)
    sys.exit(3)
print("started")
"""


def _run(python: Path, script: str, conf_text: str, tmp_path: Path) -> subprocess.CompletedProcess:
    conf = tmp_path / "nova.conf"
    conf.write_text(conf_text)
    return subprocess.run(
        [str(python), "-W", "ignore", "-c", textwrap.dedent(script), str(conf)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
        env={
            "PYTHONPATH": f"{ROOT}:{PLUGINS}",
            "PATH": "/usr/bin:/bin",
            "PYTHONDONTWRITEBYTECODE": "1",
        },
    )


def test_nova_plugins_filter_and_weigh_our_hosts(nova_python, tmp_path):
    done = _run(nova_python, SCHEDULE, NOVA_CONF, tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["filters"] == [
        ["ImagePropertiesFilter", "ImagePropertiesFilter"],
        ["DedicatedCloudFilter", "NovaFilterAdapter"],
        ["LocalDiskFilter", "NovaFilterAdapter"],
        ["VGPUFilter", "NovaFilterAdapter"],
    ]
    assert out["nova_filters"] == [False, True, True, True]
    # nova's path to RAMWeigher is ours; the others are nova's classes, adapted
    assert out["weighers"] == [
        ["RAMWeigher", "RAMWeigher"],
        ["FreeDiskPercentWeigher", "NovaWeigherAdapter"],
        ["RackSpreadWeigher", "NovaWeigherAdapter"],
    ]
    assert out["nova_weighers"] == [False, True, True]
    # h0: dedicated to another project; h1: 10 GB free < 20; h4: no a100
    assert out["first"] == ["h2", "h3"]
    assert out["removed"] == {
        "DedicatedCloudFilter": {"rejected": 1},
        "LocalDiskFilter": {"rejected": 1},
        "VGPUFilter": {"rejected": 1},
    }
    # DedicatedCloudFilter runs once per request (run_filter_once_per_request)
    assert out["second"] == ["h0", "h2", "h3"]
    # what LocalDiskFilter wrote into host_state.limits is this request's
    assert out["limits"] == {"h2": {"disk_gb": 50}, "h3": {"disk_gb": 80}}
    # ram_weight_multiplier is 3.0 in nova.conf, 1.0 on h3 by its aggregate; our RAMWeigher
    # and nova's get_weight_multiplier (through nova.conf.CONF) in the plugin read the same.
    # RAMWeigher: same free RAM, minval 0 -> 1.0 each; FreeDiskPercentWeigher: 50 % for h2,
    # 40 % for h3 (0-100 scale); RackSpreadWeigher: h2's rack is busy (0), h3's is not (1).
    # h2: 3 * 1 + 3 * 0.5 + 0 = 4.5; h3: 1 * 1 + 1 * 0.4 + 1 = 2.4
    assert out["ranked"] == ["h2", "h3"]
    assert out["weights"] == [4.5, 2.4]


def test_unimportable_class_stops_start_up_naming_the_module(nova_python, tmp_path):
    conf = NOVA_CONF.replace(
        "available_filters = mycloud_scheduler.filters.VGPUFilter",
        "available_filters = mycloud_retired.filters.VGPUFilter",
    )
    done = _run(nova_python, START, conf, tmp_path)
    assert done.returncode == 3, done.stdout + done.stderr[-4000:]
    kind, message = done.stdout.strip().splitlines()[-2:]
    assert kind == "ConfigurationError"
    assert "mycloud_retired.filters.VGPUFilter" in message
    assert "module 'mycloud_retired.filters'" in message
    assert "No module named 'mycloud_retired'" in message
    assert "Repackaging a nova filter or weigher as a novasched plugin" in message


def test_enabled_filter_not_in_available_filters_stops_start_up(nova_python, tmp_path):
    conf = NOVA_CONF.replace("available_filters = mycloud_scheduler.filters.VGPUFilter\n", "")
    done = _run(nova_python, START, conf, tmp_path)
    assert done.returncode == 3, done.stdout + done.stderr[-4000:]
    kind, message = done.stdout.strip().splitlines()[-2:]
    assert kind == "FilterNotAvailable"
    assert message.startswith("Filter(s) VGPUFilter not available")
