"""What ``novasched-manage`` refuses, and how it says a result is partial (issue 32).

A real cloud: the API database and cell1 on the real MariaDB, cell2 on the real PostgreSQL,
a fleet in two availability zones written into them and into the real Placement service,
a flavor in the API database and a decision store holding one record. Each test runs the
command as an operator does (a subprocess, with a nova.conf of its own) and asserts its exit
status and its one-line error, or, for a cloud missing a cell, what the figures say:

- a name the cloud does not know (AZ, aggregate, flavor) is refused with the known ones,
  the name that differs only in case suggested;
- figures counted without a cell name it, in the table and in ``--json``, and exit 3 unless
  ``--allow-partial``;
- a value of the wrong type, and an option novasched does not know in a group it reads
  (nova.conf, or replay's own ``--config-file``), are refused before anything runs, naming
  the file, the option and its value; another group's unknown option is not;
- an SQLite path that is not there is refused, naming the database, and nothing is
  created; replay says which database failed rather than blame the decision store.

Each of these passed silently, or failed without naming the option or the database, before.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import uuid as uuidlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

import db
from db import models
from scheduler.records import DecisionRecord, DecisionStore
from tests.functional.fixtures_cloud import load_fleet_and_placement
from tests.functional.fixtures_db import make_database

AZS = ["az-east", "az-west"]
FLAVOR = "t.small"
PROG = "novasched-manage: error: "


@dataclass
class World:
    tmp: Path
    api_url: str
    cell_urls: dict[str, str]  # name -> url
    placement_url: str
    store_url: str
    fleet_hosts: dict[str, str]  # host -> cell name

    def conf_text(self, *, api_url: str | None = None, extra: str = "") -> str:
        return (
            "[api_database]\n"
            f"connection = {api_url or self.api_url}\n"
            "[placement]\n"
            "auth_type = noauth2\n"
            f"endpoint_override = {self.placement_url}\n"
            "[decision_records]\n"
            f"connection = {self.store_url}\n" + extra
        )


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Iterator[World]:
    tmp = Path(tmp_path_factory.mktemp("refusals"))
    with contextlib.ExitStack() as stack:
        api_url = stack.enter_context(make_database("mariadb", "novasched_refusals_api"))
        api = db.get_engine(api_url)
        db.create_schema(api, "api")
        urls: dict[str, str] = {}
        names: dict[str, str] = {}
        for name, kind in (("cell1", "mariadb"), ("cell2", "postgresql")):
            url = stack.enter_context(make_database(kind, f"novasched_refusals_{name}"))
            mapping = db.create_cell_mapping(api, name=name, database_connection=url)
            db.create_schema(url, "cell")
            urls[mapping["uuid"]] = url
            names[mapping["uuid"]] = name
        placement_url, _client, fleet = load_fleet_and_placement(
            stack,
            tmp,
            api,
            urls,
            hosts=8,
            seed=3,
            unusable_fraction=0.0,
            fleet_options={"azs": AZS},
        )
        with api.begin() as conn:
            conn.execute(
                models.flavors.insert().values(
                    name=FLAVOR,
                    flavorid="t-small",
                    vcpus=1,
                    memory_mb=1024,
                    root_gb=10,
                    ephemeral_gb=0,
                    swap=0,
                    is_public=True,
                    disabled=False,
                )
            )
        store_url = f"sqlite:///{tmp / 'decisions.sqlite'}"
        store = DecisionStore(store_url)
        store.add(
            [
                DecisionRecord(
                    request_id=f"req-{uuidlib.uuid4()}",
                    instance_uuids=[str(uuidlib.uuid4())],
                    outcome="no_valid_host",
                )
            ]
        )
        store.close()
        yield World(
            tmp,
            api_url,
            {names[u]: url for u, url in urls.items()},
            placement_url,
            store_url,
            {h: names[c] for h, c in fleet.host_cells.items()},
        )


def _manage(world: World, tmp_path: Path, *argv: str, conf: str | None = None) -> tuple:
    """Run the command with a nova.conf of ``conf`` (default: the world's); (exit status,
    stdout, stderr's lines)."""
    path = tmp_path / "nova.conf"
    path.write_text(conf if conf is not None else world.conf_text())
    out = subprocess.run(
        [sys.executable, "-m", "scheduler.cmd.manage", "--config-file", str(path), *argv],
        capture_output=True,
        text=True,
        timeout=180,
    )
    return out.returncode, out.stdout, out.stderr.splitlines()


def _error(lines: list[str]) -> str:
    """The command's one-line error (warnings logged before it are not part of it)."""
    errors = [line for line in lines if line.startswith(PROG)]
    assert len(errors) == 1, lines
    return errors[0][len(PROG) :]


# -- names the cloud does not know ---------------------------------------------------------------


def test_capacity_refuses_an_availability_zone_nova_does_not_know(world, tmp_path):
    rc, out, err = _manage(world, tmp_path, "capacity", "--flavor", FLAVOR, "--az", "nosuch")
    assert rc == 1 and out == ""
    assert _error(err) == "no availability zone 'nosuch'; known: az-east, az-west"


def test_capacity_suggests_the_zone_spelt_in_another_case(world, tmp_path):
    rc, out, err = _manage(world, tmp_path, "capacity", "--flavor", FLAVOR, "--az", "AZ-East")
    assert rc == 1 and out == ""
    assert _error(err) == (
        "no availability zone 'AZ-East' (did you mean 'az-east'?); known: az-east, az-west"
    )
    # the zone itself is counted, and only its hosts
    rc, out, err = _manage(
        world, tmp_path, "capacity", "--json", "--flavor", FLAVOR, "--az", AZS[0]
    )
    assert rc == 0, err
    (figures,) = json.loads(out)
    assert figures["total"] > 0 and set(figures["by_az"]) == {AZS[0]}


def test_capacity_refuses_an_aggregate_that_does_not_exist(world, tmp_path):
    rc, out, err = _manage(world, tmp_path, "capacity", "--aggregate", "nosuch")
    assert rc == 1 and out == ""
    error = _error(err)
    assert error.startswith("no aggregate 'nosuch'; known: ")
    assert set(AZS) <= set(error.split("known: ")[1].split(", "))


def test_capacity_refuses_a_flavor_with_the_known_ones(world, tmp_path):
    rc, out, err = _manage(world, tmp_path, "capacity", "--flavor", FLAVOR.upper())
    assert rc == 1 and out == ""
    assert (
        _error(err) == f"no flavor {FLAVOR.upper()!r} (did you mean {FLAVOR!r}?); known: {FLAVOR}"
    )


def test_explain_refuses_an_availability_zone_nova_does_not_know(world, tmp_path):
    rc, out, err = _manage(world, tmp_path, "explain", "--flavor", "f:1:512:1", "--az", "nosuch")
    assert rc == 1 and out == ""
    assert _error(err) == "no availability zone 'nosuch'; known: az-east, az-west"


# -- a cell that cannot be read -------------------------------------------------------------------


@contextlib.contextmanager
def _cell_unreadable(world: World, name: str) -> Iterator[None]:
    """The cell's mapping points at a database that does not exist on its server, then back."""
    url = world.cell_urls[name]
    gone = make_url(url)
    gone = gone.set(database=f"{gone.database}_gone").render_as_string(hide_password=False)
    table = models.cell_mappings
    with db.get_engine(world.api_url).begin() as conn:
        conn.execute(sa.update(table).where(table.c.name == name).values(database_connection=gone))
    try:
        yield
    finally:
        with db.get_engine(world.api_url).begin() as conn:
            conn.execute(
                sa.update(table).where(table.c.name == name).values(database_connection=url)
            )


def test_capacity_without_a_cell_says_so_and_fails_unless_allowed(world, tmp_path):
    cell1_hosts = {h for h, cell in world.fleet_hosts.items() if cell == "cell1"}
    assert cell1_hosts and cell1_hosts != set(world.fleet_hosts)
    with _cell_unreadable(world, "cell2"):
        rc, out, err = _manage(world, tmp_path, "capacity", "--json", "--flavor", FLAVOR)
        assert rc == 3
        (figures,) = json.loads(out)
        assert figures["partial"] is True and figures["missing_cells"] == ["cell2"]
        assert figures["total"] > 0
        assert {h.split("/")[0] for h in figures["by_host"]} <= cell1_hosts
        assert "cell2" in _error(err) and "--allow-partial" in _error(err)

        rc, out, err = _manage(world, tmp_path, "capacity", "--flavor", FLAVOR)
        assert rc == 3
        first = out.splitlines()[0]
        assert first.startswith("PARTIAL: cell(s) cell2 could not be read")

        rc, out, err = _manage(
            world, tmp_path, "capacity", "--json", "--allow-partial", "--flavor", FLAVOR
        )
        assert rc == 0, err
        (allowed,) = json.loads(out)
        assert allowed["missing_cells"] == ["cell2"]

        # explain says which hosts it could not consider
        rc, out, err = _manage(world, tmp_path, "explain", "--flavor", "f:1:512:1")
        assert rc == 0, err
        assert out.splitlines()[0] == (
            "PARTIAL: cell(s) cell2 could not be read: their hosts were not considered"
        )
        rc, out, err = _manage(
            world, tmp_path, "explain", "--format", "json", "--flavor", "f:1:512:1"
        )
        assert json.loads(out)["missing_cells"] == ["cell2"]
    # every cell read: whole figures
    rc, out, err = _manage(world, tmp_path, "capacity", "--json", "--flavor", FLAVOR)
    assert rc == 0, err
    (whole,) = json.loads(out)
    assert whole["partial"] is False and whole["missing_cells"] == []
    assert whole["total"] > figures["total"]


# -- configuration values and names --------------------------------------------------------------

BAD_TYPE = "[DEFAULT]\nservice_down_time = abc\n"


@pytest.mark.parametrize(
    "argv",
    [
        ("capacity", "--flavor", FLAVOR),
        ("explain", "--flavor", "f:1:512:1"),
        ("replay", "--from-records"),
    ],
    ids=["capacity", "explain", "replay"],
)
def test_a_value_of_the_wrong_type_is_refused_up_front(world, tmp_path, argv):
    conf = world.conf_text(extra=BAD_TYPE)
    rc, out, err = _manage(world, tmp_path, *argv, conf=conf)
    assert rc == 1 and out == ""
    assert _error(err) == (
        f"bad configuration: {tmp_path / 'nova.conf'}: [DEFAULT] service_down_time = abc: "
        "not an integer"
    )


def test_a_misspelt_option_in_replays_configuration_is_refused(world, tmp_path):
    tried = tmp_path / "try.conf"
    tried.write_text("[filter_scheduler]\nram_weight_multipler = -1.0\n")
    rc, out, err = _manage(world, tmp_path, "replay", "--config-file", str(tried), "--from-records")
    assert rc == 1 and out == ""
    assert _error(err) == (
        f"bad configuration: {tried}: [filter_scheduler] ram_weight_multipler = -1.0: no such "
        "option in [filter_scheduler] (did you mean ram_weight_multiplier?)"
    )


def test_a_bad_value_in_replays_configuration_is_refused(world, tmp_path):
    tried = tmp_path / "try.conf"
    tried.write_text("[filter_scheduler]\nram_weight_multiplier = lots\n")
    rc, out, err = _manage(world, tmp_path, "replay", "--config-file", str(tried), "--from-records")
    assert rc == 1 and out == ""
    assert _error(err) == (
        f"bad configuration: {tried}: [filter_scheduler] ram_weight_multiplier = lots: not a number"
    )


def test_a_misspelt_option_in_nova_conf_is_refused_and_other_groups_are_nova_s(world, tmp_path):
    conf = world.conf_text(extra="[scheduler]\nmax_atempts = 5\n")
    rc, out, err = _manage(world, tmp_path, "capacity", "--flavor", FLAVOR, conf=conf)
    assert rc == 1 and out == ""
    assert _error(err) == (
        f"bad configuration: {tmp_path / 'nova.conf'}: [scheduler] max_atempts = 5: no such "
        "option in [scheduler] (did you mean max_attempts?)"
    )
    # nova.conf is shared: the groups of the other services may hold anything
    shared = world.conf_text(
        extra="[DEFAULT]\nmy_ip = 10.0.0.1\n[libvirt]\nvirt_type = kvm\n"
        "[neutron]\novs_bridge = br-int\n"
    )
    rc, out, err = _manage(world, tmp_path, "capacity", "--json", "--flavor", FLAVOR, conf=shared)
    assert rc == 0, err
    assert json.loads(out)[0]["total"] > 0


# -- databases that are not there ----------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ("capacity", "--flavor", FLAVOR),
        ("explain", "--flavor", "f:1:512:1"),
        ("replay", "--from-records"),
        ("host", "list"),
        ("cell", "list"),
    ],
    ids=["capacity", "explain", "replay", "host-list", "cell-list"],
)
def test_a_wrong_api_database_path_is_refused_and_nothing_is_created(world, tmp_path, argv):
    typo = tmp_path / "typo.db"
    conf = world.conf_text(api_url=f"sqlite:///{typo}")
    rc, out, err = _manage(world, tmp_path, *argv, conf=conf)
    assert rc == 1 and out == ""
    assert _error(err) == (
        f"the API database ([api_database] connection) does not exist: {typo}: no such file "
        "(fix the URL, or create it with 'novasched-manage db sync')"
    )
    assert not typo.exists()

    missing_dir = tmp_path / "nonexistent" / "typo.db"
    conf = world.conf_text(api_url=f"sqlite:///{missing_dir}")
    rc, out, err = _manage(world, tmp_path, *argv, conf=conf)
    assert rc == 1 and "unable to open database file" not in "\n".join(err)
    assert _error(err).startswith(
        "the API database ([api_database] connection) does not exist: "
        f"{missing_dir}: no such directory {missing_dir.parent}"
    )


def test_a_missing_sqlite_cell_database_is_named_and_not_created(world, tmp_path):
    path = tmp_path / "cell3.sqlite"
    api = db.get_engine(world.api_url)
    mapping = db.create_cell_mapping(api, name="cell3", database_connection=f"sqlite:///{path}")
    try:
        rc, out, err = _manage(world, tmp_path, "capacity", "--flavor", FLAVOR)
    finally:
        table = models.cell_mappings
        with api.begin() as conn:
            conn.execute(sa.delete(table).where(table.c.uuid == mapping["uuid"]))
    assert rc == 1 and out == ""
    assert _error(err).startswith(
        f"the database of cell cell3 (its cell mapping) does not exist: {path}: no such file"
    )
    assert not path.exists()


def test_replay_names_the_api_database_rather_than_the_decision_store(world, tmp_path):
    gone = make_url(world.api_url)
    gone = gone.set(database=f"{gone.database}_gone")
    conf = world.conf_text(api_url=gone.render_as_string(hide_password=False))
    rc, out, err = _manage(world, tmp_path, "replay", "--from-records", conf=conf)
    assert rc == 1 and out == ""
    error = _error(err)
    assert error.startswith(
        f"cannot read the API database ({gone.render_as_string(hide_password=True)}): "
    )
    assert "decision" not in error
