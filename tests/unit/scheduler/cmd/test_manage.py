"""novasched-manage run in-process on temporary SQLite databases."""

from __future__ import annotations

import sys
import types

import pytest

import db
from scheduler.cmd import manage
from tests.unit.scheduler.cmd.builders import run_manage


@pytest.fixture
def conf(tmp_path):
    path = tmp_path / "nova.conf"
    path.write_text(
        "[api_database]\n"
        f"connection = sqlite:///{tmp_path}/api.db\n"
        "[database]\n"
        f"connection = sqlite:///{tmp_path}/cell1.db\n"
    )
    yield tmp_path, ["--config-file", str(path)]
    db.dispose_engines()


def test_db_sync_then_cells_then_fleet_then_host_list(conf, capsys):
    tmp, cfg = conf
    assert run_manage(capsys, *cfg, "db", "sync")[0] == 0
    rc, out, _ = run_manage(capsys, *cfg, "cell", "create", "--name", "cell1")
    assert rc == 0
    cell1_uuid = out.strip().splitlines()[-1]
    rc, out, _ = run_manage(
        capsys,
        *cfg,
        "cell",
        "create",
        "--name",
        "cell2",
        "--database-connection",
        f"sqlite:///{tmp}/cell2.db",
        "--disabled",
    )
    assert rc == 0
    api = db.get_engine(f"sqlite:///{tmp}/api.db")
    cells = {c["name"]: c for c in db.get_cell_mappings(api)}
    # cell0 is mapped like nova-manage cell_v2 map_cell0, next to the cell database
    assert cells["cell0"]["uuid"] == db.CELL0_UUID
    assert cells["cell0"]["database_connection"] == f"sqlite:///{tmp}/cell1_cell0.db"
    assert cells["cell1"]["uuid"] == cell1_uuid and cells["cell2"]["disabled"] is True
    rc, out, _ = run_manage(capsys, *cfg, "cell", "list")
    assert rc == 0 and "cell2" in out and cell1_uuid in out

    # db sync is idempotent and reaches every cell
    rc, out, _ = run_manage(capsys, *cfg, "db", "sync")
    assert rc == 0 and "cell2.db" in out and "cell1_cell0.db" in out

    rc, out, err = run_manage(
        capsys,
        *cfg,
        "fleet",
        "load",
        "--hosts",
        "12",
        "--no-placement",
        "--disabled-fraction",
        "0.25",
        "--azs",
        "east,west",
    )
    assert rc == 0, err
    assert "loaded 12 hosts into cell1" in out and "3 disabled" in out
    # the disabled cell2 gets nothing unless named
    cell1 = db.get_engine(f"sqlite:///{tmp}/cell1.db")
    assert len(db.get_compute_nodes(cell1)) == 12
    assert {a["name"] for a in db.get_aggregates(api)} >= {"east", "west"}

    rc, out, _ = run_manage(capsys, *cfg, "host", "list", "--cell", "cell1")
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["host", "node", "cell"]
    assert out.count("disabled") == 3 and "12 hosts" in out
    assert "east" in out and "west" in out

    rc, out, _ = run_manage(capsys, *cfg, "fleet", "heartbeat")
    assert rc == 0 and "nova-compute services" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["bogus"], "invalid choice"),
        (["fleet", "load"], "--hosts"),
        (["fleet", "load", "--hosts", "0", "--no-placement"], "at least 1"),
        (["fleet", "load", "--hosts", "3", "--down-fraction", "2", "--no-placement"], "between 0"),
        (["cell", "create", "--name", "x", "--database-connection", "::nope"], "not a valid"),
        (["cell", "create", "--name", "x", "--uuid", "123"], "not a UUID"),
        (["host", "list", "--cell", "nope"], "unknown cell"),
        (["fleet", "load", "--hosts", "3"], "--placement-url"),
    ],
)
def test_bad_input_is_one_line_error_and_nonzero(conf, capsys, argv, message):
    _tmp, cfg = conf
    assert run_manage(capsys, *cfg, "db", "sync")[0] == 0
    assert run_manage(capsys, *cfg, "cell", "create", "--name", "cell1")[0] == 0
    rc, _out, err = run_manage(capsys, *cfg, *argv)
    assert rc != 0
    assert len(err.strip().splitlines()) == 1 and message in err
    assert "Traceback" not in err


def test_fleet_load_without_cells_says_what_to_do(conf, capsys):
    _tmp, cfg = conf
    rc, _out, err = run_manage(capsys, *cfg, "fleet", "load", "--hosts", "2", "--no-placement")
    assert rc != 0 and "db sync" in err
    run_manage(capsys, *cfg, "db", "sync")
    rc, _out, err = run_manage(capsys, *cfg, "fleet", "load", "--hosts", "2", "--no-placement")
    assert rc != 0 and "cell create" in err


def test_missing_config_file_and_missing_api_database(tmp_path, capsys):
    rc, _out, err = run_manage(capsys, "--config-file", str(tmp_path / "none.conf"), "cell", "list")
    assert rc != 0 and "not found" in err
    empty = tmp_path / "empty.conf"
    empty.write_text("[DEFAULT]\n")
    rc, _out, err = run_manage(capsys, "--config-file", str(empty), "db", "sync")
    assert rc != 0 and "[api_database] connection" in err


def test_unreachable_database_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.conf"
    bad.write_text(f"[api_database]\nconnection = sqlite:///{tmp_path}/no/such/dir/api.db\n")
    rc, _out, err = run_manage(capsys, "--config-file", str(bad), "db", "sync")
    assert rc != 0 and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_duplicate_fleet_is_refused(conf, capsys):
    _tmp, cfg = conf
    run_manage(capsys, *cfg, "db", "sync")
    run_manage(capsys, *cfg, "cell", "create", "--name", "cell1")
    assert run_manage(capsys, *cfg, "fleet", "load", "--hosts", "2", "--no-placement")[0] == 0
    rc, _out, err = run_manage(capsys, *cfg, "fleet", "load", "--hosts", "2", "--no-placement")
    assert rc != 0 and "already exist" in err


def test_demo_hands_every_argument_to_scheduler_demo(monkeypatch, capsys):
    seen = {}
    fake = types.ModuleType("scheduler.demo.run")

    def fake_main(argv):
        seen["argv"] = argv
        return 3

    fake.main = fake_main
    monkeypatch.setitem(sys.modules, "scheduler.demo.run", fake)
    import scheduler

    monkeypatch.setattr(scheduler, "demo", fake, raising=False)
    rc = manage.main(["--config-file", "x.conf", "demo", "--hosts", "5", "--help"])
    assert rc == 3
    assert seen["argv"] == ["--config-file=x.conf", "--hosts", "5", "--help"]


def test_help_exits_zero(capsys):
    assert manage.main(["--help"]) == 0
    assert "fleet" in capsys.readouterr().out
