"""What ``demo --state-dir DIR`` leaves in DIR: a nova.conf that reads back as the demo ran,
passes every command's configuration check, and names where to serve Placement again."""

from __future__ import annotations

import shlex

import pytest
from oslo_config import cfg

from scheduler import conf as novasched_conf
from scheduler.cmd import config_check
from scheduler.demo import state as kept

PLACEMENT_URL = "http://127.0.0.1:41234"


def _conf(args: list[str] | None = None) -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    novasched_conf.register_opts(conf)
    conf(args or [], project="nova", default_config_files=[])
    return conf


@pytest.fixture
def state(tmp_path):
    # a space in the path: the commands shown quote it
    state = tmp_path / "demo cloud"
    state.mkdir()
    return state


def _written(state):
    ran = _conf()
    kept.configure(ran, state, PLACEMENT_URL)
    path = kept.write_nova_conf(state, ran)
    return ran, _conf(["--config-file", str(path)])


def test_nova_conf_reads_back_as_the_demo_ran_with_absolute_paths(state):
    ran, read = _written(state)
    for group, name in [
        ("api_database", "connection"),
        ("database", "connection"),
        ("decision_records", "connection"),
        ("placement", "endpoint_override"),
        ("placement", "auth_type"),
        ("scheduler", "novalidhost_detail"),
        ("filter_scheduler", "enabled_filters"),
        ("filter_scheduler", "weight_classes"),
        ("filter_scheduler", "ram_weight_multiplier"),
    ]:
        assert read[group][name] == ran[group][name], (group, name)
    for name in ("host", "state_path", "service_down_time"):
        assert read[name] == ran[name], name
    assert read.api_database.connection == f"sqlite:///{state}/nova_api.sqlite"
    assert read.decision_records.connection == f"sqlite:///{state}/novasched-decisions.sqlite"
    assert read.service_down_time == kept.SERVICE_DOWN_TIME
    # the commands read Placement's database: no Placement service needed for them
    assert read.placement.view_feed == "database"
    assert read.placement.view_database_connection == f"sqlite:///{state}/placement.sqlite"


def test_nova_conf_passes_the_check_every_command_runs_first(state):
    _, read = _written(state)
    assert config_check.validate(read) == []


def test_try_conf_packs_by_ram_on_top_of_nova_conf(state):
    _written(state)
    try_conf = kept.write_try_conf(state)
    both = _conf(["--config-file", str(state / "nova.conf"), "--config-file", str(try_conf)])
    assert both.filter_scheduler.ram_weight_multiplier == -1.0
    assert config_check.validate(both) == []


def test_serving_placement_again_uses_the_address_and_database_nova_conf_names(state):
    _written(state)
    with pytest.raises(kept.DemoStateError, match="no such file"):
        kept._placement_of(state)  # never an empty Placement of its own making
    (state / "placement.sqlite").touch()
    assert kept._placement_of(state) == (
        f"sqlite:///{state}/placement.sqlite",
        "127.0.0.1",
        41234,
    )


def test_a_directory_without_a_demo_cannot_serve_placement(tmp_path):
    with pytest.raises(kept.DemoStateError, match="holds no demo's cloud"):
        kept._placement_of(tmp_path)


def test_a_directory_that_holds_a_demo_is_not_run_into_again(state):
    kept.check_unused(state)  # empty: fine
    _written(state)
    with pytest.raises(kept.DemoStateError, match="already holds a demo's cloud") as caught:
        kept.check_unused(state)
    assert f"--state-dir {shlex.quote(str(state))} --serve-placement" in str(caught.value)


def test_a_directory_whose_path_oslo_config_cannot_read_is_refused(tmp_path):
    with pytest.raises(kept.DemoStateError, match=r"choose a path without \$"):
        kept.check_unused(tmp_path / "demo$HOME")


def test_the_next_steps_name_the_directory_quoted_for_a_shell(state):
    text = kept.next_steps(state, "novasched-manage", "req-1")
    conf = shlex.quote(str(state / "nova.conf"))
    for line in [
        f"novasched-manage --config-file {conf} capacity",
        f"novasched-manage --config-file {conf} explain --flavor m1.small",
        f"novasched-manage --config-file {conf} decision list",
        f"novasched-manage --config-file {conf} decision show req-1",
        f"novasched-manage demo --state-dir {shlex.quote(str(state))} --serve-placement",
        f"novasched-manage --config-file {conf} replay --what-if "
        f"{shlex.quote(str(state / 'try.conf'))}",
        f"novasched-manage --config-file {conf} check --placement-config-file "
        f"{shlex.quote(str(state / 'placement.conf'))}",
    ]:
        assert f"  {line}\n" in text + "\n", line
