"""The metrics, real but in a private registry, for one test."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from scheduler.telemetry import metrics


@pytest.fixture
def registry():
    reg = CollectorRegistry()
    metrics.enable(registry=reg)
    yield reg
    metrics.disable()
