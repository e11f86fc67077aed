"""What novasched-manage capacity prints and draws."""

from __future__ import annotations

import pytest

from scheduler.capacity import FlavorCapacity, render

FIGURES = [
    FlavorCapacity(
        flavor="m1.small",
        total=1200,
        by_az={"az-a": 1000, "az-b": 200},
        by_aggregate={"ssd": 300},
        stranded={"VCPU": 12.0, "MEMORY_MB": 0.0, "DISK_GB": 300.0},
        source="view",
    ),
    FlavorCapacity(
        flavor="m1.huge",
        total=0,
        stranded={"VCPU": 640.0, "MEMORY_MB": 1_048_576.0, "DISK_GB": 9000.0},
        reason="0/40 hosts available: 40 NUMATopologyFilter (does not fit)",
        source="view",
    ),
]


def test_the_table_has_a_row_per_flavor_and_a_column_per_az():
    out = render.text(FIGURES).splitlines()
    assert out[0].split() == [
        "flavor", "total", "az-a", "az-b", "stranded", "VCPU", "stranded", "MEMORY_MB",
        "stranded", "DISK_GB",
    ]  # fmt: skip
    assert out[2].split() == ["m1.small", "1,200", "1,000", "200", "12", "0", "300"]
    assert out[3].split() == ["m1.huge", "0", "0", "0", "640", "1,048,576", "9,000"]
    # why the flavor fits nowhere, and where the candidates came from
    assert "  m1.huge: 0/40 hosts available: 40 NUMATopologyFilter (does not fit)" in out
    assert out[-1] == "Candidates from: view"


def test_the_stranded_columns_are_the_classes_the_figures_have():
    pinned = FlavorCapacity(
        flavor="pinned.4",
        total=3,
        by_az={"az-a": 3},
        stranded={"PCPU": 6.0, "MEMORY_MB": 2048.0, "CUSTOM_X": 2.0},
    )
    out = render.text([FIGURES[0], pinned]).splitlines()
    # the compute node's three first, in their order, then the others by name
    assert [cell for cell in out[0].split() if cell != "stranded"][-5:] == [
        "VCPU", "MEMORY_MB", "DISK_GB", "CUSTOM_X", "PCPU",
    ]  # fmt: skip
    assert out[2].split()[-5:] == ["12", "0", "300", "-", "-"]
    assert out[3].split()[-5:] == ["-", "2,048", "-", "2", "6"]
    # a flavor alone shows its own classes only
    head = render.text([pinned]).splitlines()[0]
    assert "stranded PCPU" in head and "stranded VCPU" not in head


def test_the_table_can_have_a_column_per_aggregate():
    head = render.text(FIGURES, by_aggregate=True).splitlines()[0].split()
    assert head[:3] == ["flavor", "total", "ssd"]


def test_an_unbounded_flavor_says_so():
    out = render.text([FlavorCapacity(flavor="free", total=None)])
    assert "unbounded" in out.splitlines()[2]


def test_the_plot_is_a_png(tmp_path):
    path = tmp_path / "capacity.png"
    render.plot(FIGURES, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_plot_that_cannot_be_written_is_a_clear_error(tmp_path):
    with pytest.raises(render.PlotUnavailable, match="cannot write"):
        render.plot(FIGURES, str(tmp_path / "missing" / "capacity.png"))


def test_partial_figures_say_which_cells_are_missing_first():
    partial = [
        FlavorCapacity(flavor="m1.small", total=5, by_az={"az-a": 5}, missing_cells=["cell2"]),
        FlavorCapacity(flavor="m1.big", total=1, by_az={"az-a": 1}, missing_cells=["cell3"]),
    ]
    out = render.text(partial).splitlines()
    assert out[0] == (
        "PARTIAL: cell(s) cell2, cell3 could not be read: their hosts are not counted in "
        "these figures"
    )
    assert render.missing_cells(partial) == ["cell2", "cell3"]
    assert not any(line.startswith("PARTIAL") for line in render.text(FIGURES).splitlines())
