"""Third-party plugins, end to end: the example package installed with pip into this venv.

The package (``examples/novasched-example-plugins``) is installed editable if it is not there
yet, and uninstalled again afterwards if this test installed it: its weigher would otherwise
join ``weight_classes = all_weighers`` for every later run. What runs after the install runs
in fresh interpreters, as the scheduler service would start: stevedore remembers a
namespace's entry points for the life of a process, and an editable install's import hook
is only read at start-up.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "novasched-example-plugins"
DIST = "novasched-example-plugins"
FILTERS = ["DedicatedCloudFilter", "LocalDiskFilter"]
WEIGHERS = ["RackSpreadWeigher"]


def _installed() -> bool:
    try:
        importlib.metadata.distribution(DIST)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _pip(*args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"pip {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"


@pytest.fixture(scope="module")
def example_package():
    installed_here = not _installed()
    if installed_here:
        _pip("install", "-q", "-e", str(EXAMPLE))
    try:
        yield EXAMPLE
    finally:
        if installed_here:
            _pip("uninstall", "-y", "-q", DIST)


def _run(script: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, f"script failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_stevedore_finds_the_plugins_by_name(example_package):
    out = _run(
        """
        import json
        from stevedore import ExtensionManager
        found = {}
        for namespace in ("novasched.filters", "novasched.weighers"):
            found[namespace] = {
                ext.name: f"{ext.plugin.__module__}:{ext.plugin.__name__}"
                for ext in ExtensionManager(namespace)
            }
        print(json.dumps(found))
        """
    )
    found = json.loads(out)
    assert found["novasched.filters"]["DedicatedCloudFilter"] == (
        "novasched_example_plugins.dedicated_cloud_filter:DedicatedCloudFilter"
    )
    assert found["novasched.filters"]["LocalDiskFilter"] == (
        "novasched_example_plugins.local_disk_filter:LocalDiskFilter"
    )
    assert found["novasched.weighers"]["RackSpreadWeigher"] == (
        "novasched_example_plugins.rack_spread_weigher:RackSpreadWeigher"
    )
    # the built-in ones are still there
    assert "ComputeFilter" in found["novasched.filters"]
    assert "RAMWeigher" in found["novasched.weighers"]


def test_load_filters_and_weighers_by_name(example_package):
    out = _run(
        """
        import json, sys
        from filters.handler import load_filters
        from weighers.handler import load_weighers
        filters = load_filters(["ComputeFilter", *json.loads(sys.argv[1])])
        weighers = load_weighers(json.loads(sys.argv[2]))
        print(json.dumps({
            "filters": [f.name for f in filters],
            "flags": {f.name: [f.RUN_ON_REBUILD, f.run_filter_once_per_request] for f in filters},
            "weighers": [w.name for w in weighers],
        }))
        """,
        json.dumps(FILTERS),
        json.dumps(WEIGHERS),
    )
    loaded = json.loads(out)
    assert loaded["filters"] == ["ComputeFilter", *FILTERS]
    assert loaded["flags"]["DedicatedCloudFilter"] == [False, True]
    assert loaded["flags"]["LocalDiskFilter"] == [False, False]
    assert loaded["weighers"] == WEIGHERS


NOVA_CONF = """\
[filter_scheduler]
enabled_filters = ComputeFilter, DedicatedCloudFilter, LocalDiskFilter
weight_classes = RAMWeigher, RackSpreadWeigher

[example_plugins]
dedicated_projects = proj-dedicated
"""


def test_enabled_in_nova_conf_they_explain_no_valid_host(example_package, tmp_path):
    """The filter scheduler built from a nova.conf that names the plugins: the plugins'
    reasons reach NoValidHost, and their own option group is read."""
    conf_file = tmp_path / "nova.conf"
    conf_file.write_text(NOVA_CONF)
    out = _run(
        """
        import json, sys
        from types import SimpleNamespace
        from scheduler.conf import CONF
        from scheduler.drivers.filter_scheduler import FilterScheduler
        from scheduler.exceptions import NoValidHost
        from scheduler.objects import Aggregate
        from tests.unit.scheduler.drivers.fakes import (
            FakeHostManager, FakePlacement, make_host, make_spec,
        )

        CONF(["--config-file", sys.argv[1]], project="nova")
        dedicated = Aggregate(
            id=1, uuid="agg-1", name="dc", hosts={"d1"},
            metadata={"dedicated_cloud": "proj-dedicated"},
        )
        hosts = [make_host("d1", aggregates=[dedicated]), make_host("s1", disk_gb=5)]
        driver = FilterScheduler(
            placement=FakePlacement(hosts), host_manager=FakeHostManager(hosts)
        )
        ctx = SimpleNamespace(request_id="req-1", project_id=None, user_id=None)
        result = {"filters": [f.name for f in driver.filter_handler.filters]}
        sel = driver.select_destinations(ctx, make_spec(project_id="proj-dedicated"), ["i-1"])
        result["dedicated"] = sel[0][0].service_host
        spec = make_spec(project_id="proj-other", root_gb=10)
        spec.flavor.extra_specs["local_disk"] = "true"
        try:
            driver.select_destinations(ctx, spec, ["i-2"])
        except NoValidHost as exc:
            result["other"] = str(exc)
        print(json.dumps(result))
        """,
        str(conf_file),
    )
    result = json.loads(out)
    assert result["filters"] == ["ComputeFilter", "DedicatedCloudFilter", "LocalDiskFilter"]
    assert result["dedicated"] == "d1"
    assert result["other"].endswith(
        "0/2 hosts available: 1 DedicatedCloudFilter (dedicated to another project), "
        "1 LocalDiskFilter (not enough local disk)"
    )


def test_the_example_package_own_tests_pass(example_package):
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=example_package,
        check=False,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert " passed" in done.stdout
