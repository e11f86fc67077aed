"""One real nova 34 deployment, with novasched in front, shared by the whole suite.

``nova_deployment`` (package) starts it all once (see deployment.py for what runs), and stops
it once the last test of tests/deployment has run: its dozen processes would otherwise slow
the rest of the suite. The suite then runs twice, once per novasched configuration of
``deployment``: the default (no provider view: candidates from GET /allocation_candidates,
as nova), then the view fed by Placement's database. Between the two only novasched
restarts. Run the suite alone with ``.venv/bin/pytest tests/deployment``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.deployment.deployment import Deployment
from tests.functional.fixtures_nova import ensure_nova_venv

NOVASCHED_CONFIGS = ("default", "view-database")


@pytest.fixture(scope="package")
def nova_deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    nova_python = ensure_nova_venv(with_deployment_extras=True)
    cloud = Deployment(tmp_path_factory.mktemp("nova-deployment"), nova_python)
    started = time.monotonic()
    try:
        cloud.start()
    except BaseException:
        cloud.stop()
        raise
    print(f"\nnova deployment up in {time.monotonic() - started:.1f} s: {cloud.timings}")
    try:
        yield cloud
    finally:
        cloud.stop()


@pytest.fixture(scope="package", params=NOVASCHED_CONFIGS)
def deployment(request: pytest.FixtureRequest, nova_deployment: Deployment) -> Deployment:
    nova_deployment.use_novasched_config(view_database=request.param == "view-database")
    return nova_deployment
