"""LocalDiskFilter: local-disk flavors need local storage with room for root+ephemeral+swap."""

from __future__ import annotations

from example_builders import make_aggregate, make_host, make_spec
from novasched_example_plugins.local_disk_filter import LocalDiskFilter, local_disk_mb

LOCAL = {"local_disk": "true"}


def test_other_flavors_pass_everywhere():
    host = make_host("h", free_disk_gb=0, stats={"local_storage": "false"})
    assert LocalDiskFilter().host_passes(host, make_spec(root_gb=10)) is True
    spec = make_spec(root_gb=10, extra_specs={"local_disk": "false"})
    assert LocalDiskFilter().host_passes(host, spec) is True


def test_needs_root_ephemeral_and_swap():
    spec = make_spec(root_gb=10, ephemeral_gb=5, swap=512, extra_specs=LOCAL)
    assert local_disk_mb(spec) == 15 * 1024 + 512
    filt = LocalDiskFilter()
    assert filt.host_passes(make_host("big", free_disk_gb=16), spec) is True
    result = filt.host_passes(make_host("small", free_disk_gb=15), spec)
    assert result.reason == "not enough local disk"


def test_exact_fit_passes():
    spec = make_spec(root_gb=10, ephemeral_gb=6, extra_specs=LOCAL)
    host = make_host("h", free_disk_gb=16)
    assert LocalDiskFilter().host_passes(host, spec) is True


def test_boot_from_volume_needs_no_root_disk():
    spec = make_spec(root_gb=100, ephemeral_gb=1, extra_specs=LOCAL)
    spec.is_bfv = True
    assert local_disk_mb(spec) == 1024
    assert LocalDiskFilter().host_passes(make_host("h", free_disk_gb=2), spec) is True


def test_hosts_declared_shared_never_pass():
    spec = make_spec(root_gb=1, extra_specs=LOCAL)
    by_stats = make_host("ceph1", free_disk_gb=1000, stats={"local_storage": "False"})
    by_agg = make_host("ceph2", aggregates=[make_aggregate(local_storage="false")])
    for host in (by_stats, by_agg):
        assert LocalDiskFilter().host_passes(host, spec).reason == "no local storage"


def test_the_aggregate_overrides_the_stats_and_any_false_wins():
    spec = make_spec(root_gb=1, extra_specs=LOCAL)
    local_agg = make_aggregate(local_storage="true")
    host = make_host("h", aggregates=[local_agg], stats={"local_storage": "false"})
    assert LocalDiskFilter().host_passes(host, spec) is True
    host.aggregates = [local_agg, make_aggregate(local_storage="no")]
    assert LocalDiskFilter().host_passes(host, spec).reason == "no local storage"


def test_declared_local_still_needs_room():
    spec = make_spec(root_gb=50, extra_specs=LOCAL)
    host = make_host("h", free_disk_gb=10, stats={"local_storage": "true"})
    assert LocalDiskFilter().host_passes(host, spec).reason == "not enough local disk"


def test_scoped_extra_spec_spelling():
    spec = make_spec(root_gb=50, extra_specs={"example_plugins:local_disk": "True"})
    assert not LocalDiskFilter().host_passes(make_host("h", free_disk_gb=10), spec)


def test_runs_for_every_instance_and_not_on_rebuild():
    assert LocalDiskFilter.run_filter_once_per_request is False
    assert LocalDiskFilter.RUN_ON_REBUILD is False
