"""AggregateImagePropertiesIsolation: image properties vs aggregate metadata of the same key."""

from __future__ import annotations

import logging

from filters.aggregate_image_properties_isolation import AggregateImagePropertiesIsolation
from tests.unit.filters.fakes import make_aggregate, make_host, make_spec, override, run_filter

NS = "aggregate_image_properties_isolation_namespace"
SEP = "aggregate_image_properties_isolation_separator"


def passes(image_props, *aggregates):
    filt = AggregateImagePropertiesIsolation()
    host = make_host(aggregates=list(aggregates))
    spec = make_spec(image_props=image_props)
    single = filt.host_passes(host, spec)
    outcome = run_filter(filt, [host], spec)
    assert bool(outcome.passed) == bool(single)
    assert [r for _, r in outcome.rejected] == ([] if single else [single.reason])
    return single


def test_property_must_be_one_of_the_comma_separated_values():
    agg = make_aggregate(1, os_distro="ubuntu, debian")
    assert passes({"os_distro": "debian"}, agg) is True
    result = passes({"os_distro": "centos"}, agg)
    assert result.reason == "image property not allowed by aggregate"


def test_values_of_several_aggregates_are_pooled():
    aggs = [make_aggregate(1, os_distro="ubuntu"), make_aggregate(2, os_distro="centos")]
    assert passes({"os_distro": "centos"}, *aggs) is True
    assert passes({"os_distro": "ubuntu"}, *aggs) is True


def test_keys_the_image_does_not_set_and_falsy_properties_are_ignored():
    agg = make_aggregate(1, os_distro="ubuntu", availability_zone="az1", hw_vm_mode="hvm")
    assert passes({"hw_architecture": "x86_64"}, agg) is True
    assert passes({}, agg) is True
    assert passes(None, agg) is True
    assert passes({"os_distro": ""}, agg) is True
    assert passes({"os_require_quiesce": False}, make_aggregate(1, os_require_quiesce="x")) is True


def test_property_is_compared_by_its_str():
    agg = make_aggregate(1, os_require_quiesce="True", hw_video_ram="64")
    assert passes({"os_require_quiesce": True}, agg) is True
    assert passes({"hw_video_ram": 64}, agg) is True
    assert not passes({"hw_video_ram": 128}, agg)


def test_host_without_aggregates_passes():
    assert passes({"os_distro": "anything"}) is True


def test_namespace_restricts_the_checked_keys():
    agg = make_aggregate(1, os_distro="ubuntu")
    with override(NS, "iso", group="filter_scheduler"):
        # the key is outside the namespace: not checked
        assert passes({"os_distro": "centos"}, agg) is True
        # in the namespace, the key is looked up as is in the image properties
        assert passes({"os_distro": "centos"}, make_aggregate(1, **{"iso.os_distro": "x"})) is True
        with override(SEP, "_", group="filter_scheduler"):
            assert passes({"iso_x": "b"}, make_aggregate(1, iso_x="a")).reason == (
                "image property not allowed by aggregate"
            )
            assert passes({"isox": "b"}, make_aggregate(1, isox="a")) is True


def test_deprecated_options_warn_only_when_set(caplog):
    logger = "filters.aggregate_image_properties_isolation"
    with caplog.at_level(logging.WARNING, logger=logger):
        AggregateImagePropertiesIsolation()
        assert "deprecated" not in caplog.text
        with override(NS, "iso", group="filter_scheduler"):
            AggregateImagePropertiesIsolation()
        assert f"{NS} is deprecated" in caplog.text
        with override(SEP, "_", group="filter_scheduler"):
            AggregateImagePropertiesIsolation()
        assert f"{SEP} is deprecated" in caplog.text


def test_run_flags_match_nova():
    assert AggregateImagePropertiesIsolation.RUN_ON_REBUILD is True
    assert AggregateImagePropertiesIsolation.run_filter_once_per_request is True
