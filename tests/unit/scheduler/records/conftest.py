"""A decision store on a temporary SQLite file."""

from __future__ import annotations

import pytest

from scheduler.records import DecisionStore


@pytest.fixture
def store_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path}/decisions.sqlite"


@pytest.fixture
def store(store_url):
    s = DecisionStore(store_url)
    yield s
    s.close()
