"""Every test of the example plugins starts from the default options."""

import pytest

from scheduler.conf import CONF


@pytest.fixture(autouse=True)
def _default_options():
    yield
    CONF.clear_override("dedicated_projects", group="example_plugins")
    CONF.clear_override("rack_spread_weight_multiplier", group="example_plugins")
