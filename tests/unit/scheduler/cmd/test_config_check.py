"""The configuration check every novasched-manage command runs first: bad values and
unknown options of the groups novasched reads, and databases that are not there."""

from __future__ import annotations

import pytest

from scheduler.cmd import config_check
from tests.unit.scheduler.cmd.builders import make_conf


def _problems(conf):
    return [str(p) for p in config_check.bad_values(conf) + config_check.unknown_options(conf)]


def test_a_good_nova_conf_has_no_problem(tmp_path):
    conf = make_conf(
        tmp_path,
        "[DEFAULT]\nservice_down_time = 120\nmy_ip = 10.0.0.1\n"
        "[filter_scheduler]\nram_weight_multiplier = -1.0\nenabled_filters = ComputeFilter\n"
        "[placement]\nauth_type = password\nusername = nova\npassword = secret\n"
        "auth_url = http://keystone:5000/v3\n"
        "[libvirt]\nvirt_type = kvm\nno_such_libvirt_option = 1\n"
        "[neutron]\novs_bridge = br-int\n",
    )
    config_check.validate(conf)
    assert _problems(conf) == []


def test_values_of_the_wrong_type_name_the_file_the_option_and_why(tmp_path):
    conf = make_conf(
        tmp_path,
        "[DEFAULT]\nservice_down_time = abc\n"
        "[filter_scheduler]\nhost_subset_size = 0\ntrack_instance_changes = maybe\n"
        "[scheduler]\ncell_timeout = soon\n",
    )
    path = tmp_path / "nova.conf"
    assert sorted(_problems(conf)) == sorted(
        [
            f"{path}: [DEFAULT] service_down_time = abc: not an integer",
            f"{path}: [filter_scheduler] host_subset_size = 0: should be greater than or "
            "equal to 1",
            f"{path}: [filter_scheduler] track_instance_changes = maybe: not a boolean "
            "(true or false)",
            f"{path}: [scheduler] cell_timeout = soon: not a number",
        ]
    )


def test_a_bad_value_under_its_old_default_name_is_found_where_it_is_set(tmp_path):
    # nova.conf written before Ocata: [DEFAULT] ram_weight_multiplier is read as
    # [filter_scheduler] ram_weight_multiplier
    conf = make_conf(tmp_path, "[DEFAULT]\nram_weight_multiplier = lots\n")
    assert _problems(conf) == [
        f"{tmp_path / 'nova.conf'}: [DEFAULT] ram_weight_multiplier = lots: not a number"
    ]


def test_an_unknown_option_in_a_group_novasched_reads_is_named_with_the_likely_one(tmp_path):
    conf = make_conf(
        tmp_path,
        "[filter_scheduler]\nram_weight_multipler = -1.0\nsome_future_option = 7\n"
        "[scheduler]\nram_weight_multiplier = 2.0\n",
    )
    path = tmp_path / "nova.conf"
    assert _problems(conf) == [
        f"{path}: [filter_scheduler] ram_weight_multipler = -1.0: no such option in "
        "[filter_scheduler] (did you mean ram_weight_multiplier?)",
        f"{path}: [filter_scheduler] some_future_option = 7: no such option in [filter_scheduler]",
        f"{path}: [scheduler] ram_weight_multiplier = 2.0: no such option in [scheduler] "
        "(it belongs in [filter_scheduler])",
    ]


def test_only_a_name_like_a_known_one_is_refused_another_is_warned_about(tmp_path):
    # an out-of-tree nova filter registers its own options in [filter_scheduler]
    conf = make_conf(
        tmp_path,
        "[filter_scheduler]\nbigvm_mb = 1024\n[scheduler]\nmax_atempts = 1\n",
    )
    with pytest.raises(config_check.BadConfiguration) as caught:
        config_check.validate(conf)
    (refused,) = caught.value.problems
    assert refused.name == "max_atempts" and refused.likely == "max_attempts"
    conf = make_conf(tmp_path, "[filter_scheduler]\nbigvm_mb = 1024\n")
    (warned,) = config_check.validate(conf)
    assert (warned.group, warned.name, warned.likely) == ("filter_scheduler", "bigvm_mb", "")


def test_the_options_of_the_configured_auth_plugin_and_old_names_are_known(tmp_path):
    conf = make_conf(
        tmp_path,
        "[placement]\nauth_type = admin_token\nendpoint = http://127.0.0.1:8778\n"
        "token = admin\n"
        "[DEFAULT]\nscheduler_default_filters = ComputeFilter\nscheduler_max_attempts = 4\n",
    )
    assert _problems(conf) == []


def test_a_secret_is_not_printed(tmp_path):
    conf = make_conf(tmp_path, "[placement]\nauth_type = password\npasword = hunter2\n")
    (problem,) = _problems(conf)
    assert "hunter2" not in problem
    assert "[placement] pasword = ***: no such option in [placement]" in problem


def test_the_last_file_that_sets_an_option_is_named(tmp_path):
    conf = make_conf(tmp_path, "[filter_scheduler]\nram_weight_multiplier = 1.0\n")
    tried = tmp_path / "try.conf"
    tried.write_text("[filter_scheduler]\nram_weight_multiplier = lots\n")
    conf(
        ["--config-file", str(tmp_path / "nova.conf"), "--config-file", str(tried)],
        project="nova",
        default_config_files=[],
    )
    assert _problems(conf) == [
        f"{tried}: [filter_scheduler] ram_weight_multiplier = lots: not a number"
    ]


def test_validate_raises_with_the_first_problem_and_how_many_more(tmp_path):
    conf = make_conf(tmp_path, "[DEFAULT]\nservice_down_time = abc\n[scheduler]\nmax_atempts = 1\n")
    with pytest.raises(config_check.BadConfiguration) as caught:
        config_check.validate(conf)
    assert len(caught.value.problems) == 2
    assert str(caught.value).endswith(
        "service_down_time = abc: not an integer (and 1 more problem(s) in the configuration)"
    )


# -- databases ------------------------------------------------------------------------------------


def test_an_sqlite_file_that_is_not_there_is_refused_and_not_created(tmp_path):
    path = tmp_path / "typo.db"
    with pytest.raises(config_check.UnreadableDatabase) as caught:
        config_check.require_database(f"sqlite:///{path}", "the API database")
    assert str(caught.value) == (
        f"the API database does not exist: {path}: no such file ({config_check.SYNC})"
    )
    assert not path.exists()


def test_an_sqlite_file_in_a_directory_that_is_not_there_names_the_directory(tmp_path):
    path = tmp_path / "nowhere" / "typo.db"
    with pytest.raises(config_check.UnreadableDatabase, match="no such directory"):
        config_check.require_database(f"sqlite:///{path}", "the API database")


@pytest.mark.parametrize(
    "url",
    [
        None,
        "sqlite://",
        "sqlite:///:memory:",
        "mysql+pymysql://nova:secret@127.0.0.1/nova_api",
        "postgresql://nova@127.0.0.1/nova_api",
    ],
)
def test_only_an_sqlite_path_is_looked_for(url):
    config_check.require_database(url, "the API database")


def test_an_sqlite_file_that_is_there_is_accepted(tmp_path):
    path = tmp_path / "api.db"
    path.write_bytes(b"")
    config_check.require_database(f"sqlite:///{path}", "the API database")
