"""The bases the built-in filters share: CapacityFilter (Ram, Disk, Core and their Aggregate
variants) and InstanceHintFilter (SameHost, DifferentHost), used by a filter of one's own."""

from __future__ import annotations

import logging

import pytest

from filters import Reject
from filters.capacity import CapacityFilter
from filters.different_host_filter import InstanceHintFilter
from filters.handler import FilterHandler
from filters.ram_filter import RamFilter
from filters.same_host_filter import SameHostFilter
from scheduler.objects import Flavor
from tests.unit.filters.fakes import make_aggregate, make_host, make_spec, run_filter

SWAP_LOG = logging.getLogger("tests.swap")


class SwapFilter(CapacityFilter):
    """Passes hosts whose free disk, with the disk ratio's overcommit, holds the flavor's swap."""

    total_attr, unit, free_attr, flavor_attr = "total_usable_disk_gb", 1024, "free_disk_mb", "swap"
    ratio, limit_name, aggregate_ratio = "disk_allocation_ratio", "swap_gb", True
    larger_than_host, not_enough, log = Reject("swap too big"), Reject("no room for swap"), SWAP_LOG
    larger_debug = "%s: %s MB of swap, only %s MB of disk"


def spec_for(swap=0, memory_mb=512):
    spec = make_spec()
    spec.flavor = Flavor(memory_mb=memory_mb, vcpus=1, root_gb=0, swap=swap)
    return spec


def limits(spec, h):
    return spec.scratch.host_limits.get((h.host, h.nodename), {})


def test_a_capacity_filter_of_one_s_own_converts_units_and_records_its_limit():
    # 4 GiB of disk, 3 GiB used, an aggregate ratio of 1.5: 6144 MiB limit, 3072 MiB usable
    agg = make_aggregate(1, disk_allocation_ratio="1.5")
    h = make_host(total_usable_disk_gb=4, free_disk_mb=1024, disk_allocation_ratio=1.0)
    h.aggregates = [agg]
    spec = spec_for(swap=3072)
    assert SwapFilter().host_passes(h, spec) is True
    assert limits(spec, h) == {"swap_gb": 6.0}
    assert SwapFilter().host_passes(h, spec_for(swap=3073)).reason == "no room for swap"


def test_its_reasons_and_debug_lines_are_its_own(caplog):
    h = make_host(total_usable_disk_gb=1, free_disk_mb=1024)
    with caplog.at_level(logging.DEBUG, logger="tests.swap"):
        assert SwapFilter().host_passes(h, spec_for(swap=1025)).reason == "swap too big"
    assert [(r.name, r.getMessage()) for r in caplog.records] == [
        ("tests.swap", f"{h}: 1025 MB of swap, only 1024 MB of disk")
    ]


def test_the_limit_keeps_the_type_of_total_times_ratio():
    # no unit conversion for RAM: an integer ratio gives an integer limit, as before the fold
    h = make_host(total_usable_ram_mb=1024, free_ram_mb=1024, ram_allocation_ratio=2)
    spec = spec_for(memory_mb=512)
    assert RamFilter().host_passes(h, spec) is True
    assert type(limits(spec, h)["memory_mb"]) is int


class OnlyFirstHost(SameHostFilter):
    """A plugin that extends a built-in filter: its own check must decide."""

    def check(self, host_state, prepared):
        return host_state.host == "h0"


def test_a_subclass_that_overrides_host_passes_under_check_is_refused():
    with pytest.raises(TypeError, match="overrides host_passes.*override check"):

        class Late(SameHostFilter):
            def host_passes(self, host_state, spec_obj):
                return True


def test_a_subclass_that_changes_check_is_asked_through_it():
    hosts = [make_host(f"h{i}", instances={"a": None}) for i in range(3)]
    spec = make_spec(hints={"same_host": ["a"]})
    assert [h.host for h in FilterHandler([OnlyFirstHost()]).run(hosts, spec).hosts] == ["h0"]
    assert len(FilterHandler([SameHostFilter()]).run(hosts, spec).hosts) == 3


class NotNextToHint(InstanceHintFilter):
    """Passes hosts that run none of the instances of the ``not_next_to`` hint."""

    hint, runs_hinted, reject = "not_next_to", False, Reject("runs a not_next_to instance")


def test_an_instance_hint_filter_of_one_s_own_agrees_over_a_list_and_per_host():
    hosts = [make_host("h0", instances={"a": None}), make_host("h1", instances={"b": None})]
    spec = make_spec(hints={"not_next_to": "a"})
    outcome = run_filter(NotNextToHint(), hosts, spec)
    assert outcome.passed == [hosts[1]]
    assert outcome.rejected == [(hosts[0], "runs a not_next_to instance")]
    assert [bool(NotNextToHint().host_passes(h, spec)) for h in hosts] == [False, True]
