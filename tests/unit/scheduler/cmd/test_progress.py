"""Progress bars: drawn when standard output is a terminal, nothing at all otherwise.

A terminal is faked with a StringIO whose ``isatty()`` is True, so tqdm's output can be
read back; pytest's captured stdout is not a terminal.
"""

from __future__ import annotations

import io
import sys

import pytest

import db
from scheduler.cmd import manage
from scheduler.cmd.progress import TerminalProgress, is_terminal, terminal_progress
from scheduler.demo import fleet as fleet_mod


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


class RecordingPlacement:
    """Counts what load_fleet asks of Placement (no HTTP: a unit test of the loop)."""

    def __init__(self) -> None:
        self.bulk_calls: list[int] = []
        self.claims = 0

    def ensure_traits(self, names):
        pass

    def create_providers_bulk(self, specs, workers=8):
        self.bulk_calls.append(len(specs))
        return [1] * len(specs)

    def claim_resources(self, consumer_uuid, body, project_id, user_id):
        self.claims += 1


def test_terminal_gets_a_bar_and_other_streams_get_none():
    tty = FakeTTY()
    progress = terminal_progress(tty)
    assert isinstance(progress, TerminalProgress)
    progress("copying things", 0, 5)
    progress("copying things", 3, 5)
    progress("copying things", 5, 5)  # done: the bar is closed and cleared
    drawn = tty.getvalue()
    assert "copying things" in drawn and "0/5" in drawn and "\r" in drawn

    assert terminal_progress(io.StringIO()) is None
    closed = io.StringIO()
    closed.close()
    assert not is_terminal(closed) and not is_terminal(object())


def test_default_stream_is_stdout(monkeypatch):
    monkeypatch.setattr(sys, "stdout", FakeTTY())
    assert terminal_progress() is not None
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    assert terminal_progress() is None


def test_a_new_stage_starts_a_new_bar_and_close_is_idempotent():
    tty = FakeTTY()
    progress = TerminalProgress(tty)
    progress("first", 1, 4)
    progress("second", 2, 2)
    progress.close()
    progress.close()
    out = tty.getvalue()
    assert "first" in out and "second" in out


@pytest.fixture
def sqlite_cells(tmp_path):
    api = db.get_engine(f"sqlite:///{tmp_path}/api.db")
    db.create_schema(api, "api")
    cells = {}
    for name in ("c1", "c2"):
        engine = db.get_engine(f"sqlite:///{tmp_path}/{name}.db")
        db.create_schema(engine, "cell")
        mapping = db.create_cell_mapping(api, name=name, database_connection=str(engine.url))
        cells[mapping["uuid"]] = engine
    yield api, cells
    db.dispose_engines()


def test_load_fleet_reports_every_stage_to_its_total(sqlite_cells):
    api, cells = sqlite_cells
    fleet = fleet_mod.build_fleet(fleet_mod.FleetSpec(hosts=70, cells=list(cells), seed=3))
    calls: list[tuple[str, int, int]] = []
    placement = RecordingPlacement()
    fleet_mod.load_fleet(
        fleet, api, cells, placement, workers=1, progress=lambda *a: calls.append(a)
    )
    stages = list(dict.fromkeys(stage for stage, _, _ in calls))
    assert stages == [
        fleet_mod.STAGE_CELLS,
        fleet_mod.STAGE_PROVIDERS,
        fleet_mod.STAGE_ALLOCATIONS,
    ]
    for stage in stages:
        done = [d for s, d, _ in calls if s == stage]
        totals = {t for s, _, t in calls if s == stage}
        assert done == sorted(done) and len(totals) == 1 and done[-1] == totals.pop()
    assert [c for c in calls if c[0] == fleet_mod.STAGE_CELLS] == [
        (fleet_mod.STAGE_CELLS, 0, 70),
        (fleet_mod.STAGE_CELLS, 35, 70),
        (fleet_mod.STAGE_CELLS, 70, 70),
    ]
    # providers were written in chunks (workers=1: 8 per call), every one of them
    assert sum(placement.bulk_calls) == 70 and len(placement.bulk_calls) == 9
    assert placement.claims == len(fleet.allocations)


def test_load_fleet_without_progress_writes_providers_in_one_call(sqlite_cells):
    api, cells = sqlite_cells
    fleet = fleet_mod.build_fleet(fleet_mod.FleetSpec(hosts=30, cells=list(cells), seed=4))
    placement = RecordingPlacement()
    fleet_mod.load_fleet(fleet, api, cells, placement, workers=1)
    assert placement.bulk_calls == [30]


@pytest.fixture
def nova_conf(tmp_path):
    path = tmp_path / "nova.conf"
    path.write_text(
        "[DEFAULT]\ntransport_url = fake://\n"
        f"[api_database]\nconnection = sqlite:///{tmp_path}/api.db\n"
        f"[database]\nconnection = sqlite:///{tmp_path}/cell1.db\n"
    )
    cfg = ["--config-file", str(path)]
    assert manage.main([*cfg, "db", "sync"]) == 0
    assert manage.main([*cfg, "cell", "create", "--name", "cell1"]) == 0
    yield cfg
    db.dispose_engines()


def test_fleet_load_draws_a_bar_on_a_terminal(nova_conf, monkeypatch, capsys):
    capsys.readouterr()
    tty = FakeTTY()
    monkeypatch.setattr(sys, "stdout", tty)
    assert manage.main([*nova_conf, "fleet", "load", "--hosts", "6", "--no-placement"]) == 0
    out = tty.getvalue()
    assert fleet_mod.STAGE_CELLS in out and "0/6" in out and "\r" in out
    assert out.rstrip().splitlines()[-1].startswith("loaded 6 hosts")


def test_fleet_load_draws_nothing_when_redirected(nova_conf, capsys):
    capsys.readouterr()
    assert manage.main([*nova_conf, "fleet", "load", "--hosts", "6", "--no-placement"]) == 0
    out, err = capsys.readouterr()
    assert "\r" not in out + err and fleet_mod.STAGE_CELLS not in out + err
    assert out.startswith("loaded 6 hosts")


def test_check_draws_a_bar_on_a_terminal_only(nova_conf, monkeypatch, capsys):
    capsys.readouterr()
    tty = FakeTTY()
    monkeypatch.setattr(sys, "stdout", tty)
    # Placement is not configured (a failure) and the broker is fake: only the cells are read
    assert manage.main([*nova_conf, "check"]) == 2
    assert "checking cell databases" in tty.getvalue() and "\r" in tty.getvalue()
    monkeypatch.undo()
    assert manage.main([*nova_conf, "check"]) == 2
    out, err = capsys.readouterr()
    assert "\r" not in out + err and "checking cell databases" not in out
    assert out.startswith("Check ")
