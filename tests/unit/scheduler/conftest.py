"""Fixtures shared by the scheduler's unit tests."""

from __future__ import annotations

import pytest

import db
from tests.unit.scheduler.hosts.env import Env


@pytest.fixture
def env(tmp_path):
    """An API database with helpers to make cells and write nova's rows into them; the
    host managers it made are stopped afterwards."""
    e = Env(tmp_path)
    yield e
    for hm in e.managers:
        hm.stop()
    db.dispose_engines()
