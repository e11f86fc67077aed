"""CrossCellWeigher: +1 in the source cell, -1 elsewhere, only for cross-cell moves."""

from __future__ import annotations

import pytest

from scheduler.objects import Destination
from tests.unit.filters.fakes import make_aggregate, make_host, make_spec, override
from tests.unit.weighers.fakes import weigh_all
from weighers.cross_cell import CrossCellWeigher
from weighers.handler import WeightHandler
from weighers.ram import RAMWeigher


def cell_hosts():
    return [
        make_host("other1", cell_uuid="cell-b", free_ram_mb=9000),
        make_host("home", cell_uuid="cell-a", free_ram_mb=100),
        make_host("other2", cell_uuid="cell-c", free_ram_mb=5000),
    ]


def spec_with(dest):
    spec = make_spec()
    spec.requested_destination = dest
    return spec


def raw(spec):
    return weigh_all(CrossCellWeigher(), cell_hosts(), spec)


def test_cross_cell_move_prefers_source_cell():
    spec = spec_with(Destination(cell_uuid="cell-a", allow_cross_cell_move=True))
    assert raw(spec) == [-1, 1, -1]
    weighed = WeightHandler([CrossCellWeigher(), RAMWeigher()]).weigh(cell_hosts(), spec)
    # the 1e6 multiplier beats free RAM
    assert weighed[0].obj.host == "home"
    assert weighed[0].weight == 1000000.0 + 100 / 9000


@pytest.mark.parametrize(
    "dest",
    [
        None,
        Destination(),
        Destination(cell_uuid="cell-a"),  # same-cell move: cells are not mixed
        Destination(cell_uuid=None, allow_cross_cell_move=True),
        Destination(host="home", allow_cross_cell_move=True),
    ],
)
def test_not_a_cross_cell_move_weighs_zero(dest):
    spec = spec_with(dest)
    assert raw(spec) == [0, 0, 0]
    assert [CrossCellWeigher()._weigh_object(h, spec) for h in cell_hosts()] == [0, 0, 0]


def test_single_object_matches_batch():
    spec = spec_with(Destination(cell_uuid="cell-c", allow_cross_cell_move=True))
    weigher = CrossCellWeigher()
    assert [weigher._weigh_object(h, spec) for h in cell_hosts()] == [-1, -1, 1]


def test_multiplier_config_and_aggregate_override():
    spec = spec_with(Destination(cell_uuid="cell-a", allow_cross_cell_move=True))
    hosts = cell_hosts()
    with override("cross_cell_move_weight_multiplier", 2.0, group="filter_scheduler"):
        weighed = WeightHandler([CrossCellWeigher()]).weigh(hosts, spec)
        # normalised: -1 -> 0.0, +1 -> 1.0
        assert [(w.obj.host, w.weight) for w in weighed] == [
            ("home", 2.0),
            ("other1", 0.0),
            ("other2", 0.0),
        ]
        hosts[1].aggregates = [make_aggregate(1, cross_cell_move_weight_multiplier="-5")]
        weighed = WeightHandler([CrossCellWeigher()]).weigh(hosts, spec)
        assert [(w.obj.host, w.weight) for w in weighed] == [
            ("other1", 0.0),
            ("other2", 0.0),
            ("home", -5.0),
        ]
    assert CrossCellWeigher().configured_multiplier() == 1000000.0
