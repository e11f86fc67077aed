"""Configuration: nova's names and defaults, and a nova.conf read unchanged."""

import logging

import pytest
from oslo_config import cfg

from scheduler import conf as novasched_conf
from tests.unit.scheduler.cmd.builders import make_conf


def test_nova_defaults():
    conf = cfg.ConfigOpts()
    novasched_conf.register_opts(conf)
    conf([], default_config_files=[])
    assert conf.scheduler.max_attempts == 3
    assert conf.scheduler.max_placement_results == 1000
    assert conf.scheduler.driver == "filter_scheduler"
    assert conf.filter_scheduler.enabled_filters == novasched_conf.DEFAULT_ENABLED_FILTERS
    assert conf.filter_scheduler.host_subset_size == 1
    assert conf.filter_scheduler.io_ops_weight_multiplier == -1.0
    assert conf.filter_scheduler.num_instances_weight_multiplier == 0.0
    assert conf.service_down_time == 60
    assert conf.default_availability_zone == "nova"
    assert conf.placement.service_type == "placement"


def test_operators_nova_conf_section_is_read(tmp_path):
    conf = make_conf(
        tmp_path,
        "[filter_scheduler]\n"
        "enabled_filters = ComputeFilter,AllHostsFilter\n"
        "host_subset_size = 3\n"
        "ram_weight_multiplier = -1.0\n",
    )
    assert conf.filter_scheduler.enabled_filters == ["ComputeFilter", "AllHostsFilter"]
    assert conf.filter_scheduler.host_subset_size == 3
    assert conf.filter_scheduler.ram_weight_multiplier == -1.0


def test_unsupported_options_are_ignored_with_one_warning(tmp_path, caplog):
    conf = make_conf(
        tmp_path,
        "[DEFAULT]\nmy_ip = 10.0.0.1\n"
        "[filter_scheduler]\nhost_subset_size = 2\nsome_future_option = 7\n"
        "[scheduler]\nmax_attempts = 5\nunknown_knob = x\n"
        "[libvirt]\nvirt_type = kvm\n",
    )
    with caplog.at_level(logging.WARNING, logger="scheduler.conf"):
        unknown = novasched_conf.warn_unsupported_options(conf)
    assert unknown == ["filter_scheduler.some_future_option", "scheduler.unknown_knob"]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "some_future_option" in warnings[0].getMessage()
    assert conf.scheduler.max_attempts == 5


def test_the_options_of_the_configured_auth_plugin_are_not_unsupported(tmp_path):
    # a nova.conf reaching Placement without Keystone, as nova's own services must
    conf = make_conf(
        tmp_path,
        "[placement]\nauth_type = admin_token\nendpoint = http://127.0.0.1:8778\n"
        "token = admin\nno_such_option = 1\n",
    )
    assert novasched_conf.unsupported_options(conf) == ["placement.no_such_option"]


def test_noauth2_is_looked_up_quietly(tmp_path, caplog):
    """noauth2 is the Placement client's own, not a keystoneauth plugin: asking for the
    plugin's options logs nothing (an operator's check output had "Could not load noauth2"),
    and its unknown options are still reported."""
    conf = make_conf(tmp_path, "[placement]\nauth_type = noauth2\nno_such_option = 1\n")
    with caplog.at_level(logging.DEBUG):
        assert novasched_conf.unsupported_options(conf) == ["placement.no_such_option"]
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_broken_value_is_a_clear_error(tmp_path):
    conf = make_conf(tmp_path, "[scheduler]\nmax_attempts = zero\n")
    with pytest.raises(cfg.ConfigFileValueError, match="max_attempts"):
        _ = conf.scheduler.max_attempts


# ------------------------------------------------- nova.conf written before Ocata ([DEFAULT])

# old [DEFAULT] name -> (today's group, option, value written, value read); every value
# differs from the default
_OCATA_NAMES = {
    "scheduler_default_filters": (
        "filter_scheduler",
        "enabled_filters",
        "RetryFilter, ComputeFilter, RamFilter",
        ["RetryFilter", "ComputeFilter", "RamFilter"],
    ),
    "scheduler_available_filters": (
        "filter_scheduler",
        "available_filters",
        "nova.scheduler.filters.all_filters\nscheduler_available_filters = my.filters.MyFilter",
        ["nova.scheduler.filters.all_filters", "my.filters.MyFilter"],
    ),
    "scheduler_weight_classes": (
        "filter_scheduler",
        "weight_classes",
        "nova.scheduler.weights.ram.RAMWeigher",
        ["nova.scheduler.weights.ram.RAMWeigher"],
    ),
    "scheduler_host_subset_size": ("filter_scheduler", "host_subset_size", "4", 4),
    "scheduler_max_attempts": ("scheduler", "max_attempts", "7", 7),
    "scheduler_driver": (
        "scheduler",
        "driver",
        "nova.scheduler.caching_scheduler.CachingScheduler",
        "nova.scheduler.caching_scheduler.CachingScheduler",
    ),
    "scheduler_driver_task_period": ("scheduler", "periodic_task_interval", "120", 120),
    "scheduler_tracks_instance_changes": (
        "filter_scheduler",
        "track_instance_changes",
        "False",
        False,
    ),
    "max_io_ops_per_host": ("filter_scheduler", "max_io_ops_per_host", "3", 3),
    "max_instances_per_host": ("filter_scheduler", "max_instances_per_host", "20", 20),
    "isolated_images": ("filter_scheduler", "isolated_images", "img-1,img-2", ["img-1", "img-2"]),
    "isolated_hosts": ("filter_scheduler", "isolated_hosts", "host-a", ["host-a"]),
    "restrict_isolated_hosts_to_isolated_images": (
        "filter_scheduler",
        "restrict_isolated_hosts_to_isolated_images",
        "False",
        False,
    ),
    "ram_weight_multiplier": ("filter_scheduler", "ram_weight_multiplier", "-2.0", -2.0),
    "disk_weight_multiplier": ("filter_scheduler", "disk_weight_multiplier", "3.5", 3.5),
    "io_ops_weight_multiplier": ("filter_scheduler", "io_ops_weight_multiplier", "2.0", 2.0),
    "soft_affinity_weight_multiplier": (
        "filter_scheduler",
        "soft_affinity_weight_multiplier",
        "5.0",
        5.0,
    ),
    "soft_anti_affinity_weight_multiplier": (
        "filter_scheduler",
        "soft_anti_affinity_weight_multiplier",
        "6.0",
        6.0,
    ),
    "aggregate_image_properties_isolation_namespace": (
        "filter_scheduler",
        "aggregate_image_properties_isolation_namespace",
        "isolation",
        "isolation",
    ),
    "aggregate_image_properties_isolation_separator": (
        "filter_scheduler",
        "aggregate_image_properties_isolation_separator",
        "_",
        "_",
    ),
}


@pytest.fixture
def fresh_deprecation_log(monkeypatch):
    """oslo.log reports each deprecation once per process: forget the ones reported."""
    from oslo_log import versionutils

    monkeypatch.setattr(versionutils, "_deprecated_messages_sent", {})


def _ocata_conf_text() -> str:
    lines = ["[DEFAULT]", "my_ip = 10.0.0.1"]
    lines += [f"{old} = {written}" for old, (_, _, written, _) in _OCATA_NAMES.items()]
    return "\n".join(lines) + "\n"


def test_ocata_default_names_set_todays_options(tmp_path):
    defaults = cfg.ConfigOpts()
    novasched_conf.register_opts(defaults)
    defaults([], default_config_files=[])
    conf = make_conf(tmp_path, _ocata_conf_text())
    for old, (group, name, _, expected) in _OCATA_NAMES.items():
        assert conf[group][name] == expected, old
        assert expected != defaults[group][name], old


def test_ocata_default_names_log_a_deprecation_naming_the_new_option(
    tmp_path, caplog, fresh_deprecation_log
):
    conf = make_conf(tmp_path, _ocata_conf_text())
    with caplog.at_level(logging.WARNING, logger="oslo_config.cfg"):
        for group, name, _, _ in _OCATA_NAMES.values():
            _ = conf[group][name]
    messages = [r.getMessage() for r in caplog.records if r.name == "oslo_config.cfg"]
    for old, (group, name, _, _) in _OCATA_NAMES.items():
        expected = (
            f'Option "{old}" from group "DEFAULT" is deprecated. '
            f'Use option "{name}" from group "{group}".'
        )
        assert any(expected in m for m in messages), old


def test_ocata_default_names_are_not_reported_as_unsupported(tmp_path, caplog):
    conf = make_conf(tmp_path, _ocata_conf_text())
    with caplog.at_level(logging.WARNING, logger="scheduler.conf"):
        assert novasched_conf.warn_unsupported_options(conf) == []
    assert not [r for r in caplog.records if r.name == "scheduler.conf"]


def test_the_new_name_wins_over_the_old_one(tmp_path, caplog, fresh_deprecation_log):
    conf = make_conf(
        tmp_path,
        "[DEFAULT]\n"
        "scheduler_max_attempts = 9\n"
        "scheduler_default_filters = RamFilter\n"
        "ram_weight_multiplier = -5.0\n"
        "[scheduler]\nmax_attempts = 4\n"
        "[filter_scheduler]\n"
        "enabled_filters = ComputeFilter\n"
        "ram_weight_multiplier = 2.0\n",
    )
    with caplog.at_level(logging.WARNING, logger="oslo_config.cfg"):
        assert conf.scheduler.max_attempts == 4
        assert conf.filter_scheduler.enabled_filters == ["ComputeFilter"]
        assert conf.filter_scheduler.ram_weight_multiplier == 2.0
    assert not [r for r in caplog.records if r.name == "oslo_config.cfg"]


def test_old_default_names_without_a_counterpart_are_reported(tmp_path, caplog):
    conf = make_conf(
        tmp_path,
        "[DEFAULT]\n"
        "scheduler_host_manager = ironic_host_manager\n"
        "scheduler_use_baremetal_filters = True\n"
        "baremetal_scheduler_default_filters = ExactRamFilter\n"
        "scheduler_default_filters = ComputeFilter\n",
    )
    with caplog.at_level(logging.WARNING, logger="scheduler.conf"):
        unknown = novasched_conf.warn_unsupported_options(conf)
    assert unknown == [
        "DEFAULT.baremetal_scheduler_default_filters",
        "DEFAULT.scheduler_host_manager",
        "DEFAULT.scheduler_use_baremetal_filters",
    ]
    assert len([r for r in caplog.records if r.name == "scheduler.conf"]) == 1
    assert conf.filter_scheduler.enabled_filters == ["ComputeFilter"]
