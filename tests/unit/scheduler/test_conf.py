"""Configuration: nova's names and defaults, and a nova.conf read unchanged."""

import logging

import pytest
from oslo_config import cfg

from scheduler import conf as novasched_conf


def _conf_from(tmp_path, text):
    path = tmp_path / "nova.conf"
    path.write_text(text)
    conf = cfg.ConfigOpts()
    novasched_conf.register_opts(conf)
    conf(["--config-file", str(path)], project="nova", default_config_files=[])
    return conf


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
    conf = _conf_from(
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
    conf = _conf_from(
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


def test_broken_value_is_a_clear_error(tmp_path):
    conf = _conf_from(tmp_path, "[scheduler]\nmax_attempts = zero\n")
    with pytest.raises(cfg.ConfigFileValueError, match="max_attempts"):
        _ = conf.scheduler.max_attempts
