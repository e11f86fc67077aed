"""IsolatedHostsFilter: the isolated images / isolated hosts matrix."""

from __future__ import annotations

import itertools

import pytest

from filters.isolated_hosts_filter import IsolatedHostsFilter
from scheduler.objects import ImageMeta
from tests.unit.filters.fakes import make_host, make_spec, override, run_filter

RESERVED = "isolated host reserved for isolated images"
NEEDS = "isolated image needs an isolated host"


def check(host, image_id, images, hosts, restrict):
    spec = make_spec()
    spec.image = ImageMeta(id=image_id) if image_id != "no-image" else None
    state = make_host(host)
    with (
        override("isolated_images", images, group="filter_scheduler"),
        override("isolated_hosts", hosts, group="filter_scheduler"),
        override("restrict_isolated_hosts_to_isolated_images", restrict, group="filter_scheduler"),
    ):
        filt = IsolatedHostsFilter()
        single = filt.host_passes(state, spec)
        outcome = run_filter(filt, [state], spec)
    assert bool(outcome.passed) == bool(single)
    assert [r for _, r in outcome.rejected] == ([] if single else [single.reason])
    return True if single is True else single.reason


@pytest.mark.parametrize(
    ("image_isolated", "host_isolated", "restrict", "expected"),
    [
        (True, True, True, True),
        (True, False, True, NEEDS),
        (False, True, True, RESERVED),
        (False, False, True, True),
        (True, True, False, True),
        (True, False, False, NEEDS),
        (False, True, False, True),
        (False, False, False, True),
    ],
)
def test_matrix(image_isolated, host_isolated, restrict, expected):
    image = "iso-img" if image_isolated else "other-img"
    host = "iso-host" if host_isolated else "other-host"
    assert check(host, image, ["iso-img"], ["iso-host"], restrict) == expected


def test_without_isolated_images_isolated_hosts_take_nothing_when_restricted():
    assert check("iso-host", "img", [], ["iso-host"], True) == RESERVED
    assert check("other", "img", [], ["iso-host"], True) is True
    assert check("iso-host", "img", [], ["iso-host"], False) is True


def test_without_any_configuration_every_host_passes():
    for restrict, image in itertools.product((True, False), ("img", "no-image", None)):
        assert check("h", image, [], [], restrict) is True


def test_volume_backed_request_without_image_id_is_not_isolated():
    assert check("iso-host", "no-image", ["iso-img"], ["iso-host"], True) == RESERVED
    assert check("iso-host", None, ["iso-img"], ["iso-host"], True) == RESERVED
    assert check("other", None, ["iso-img"], ["iso-host"], True) is True


def test_run_flags_match_nova():
    assert IsolatedHostsFilter.RUN_ON_REBUILD is True
    assert IsolatedHostsFilter.run_filter_once_per_request is True
