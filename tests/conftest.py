"""Shared test set-up: every test starts from the default configuration."""

import pytest

from scheduler import conf as novasched_conf


@pytest.fixture(autouse=True)
def _reset_config():
    yield
    novasched_conf.CONF.reset()
    novasched_conf.set_defaults(novasched_conf.CONF)
