"""Fixtures shared by the functional tests' modules.

* ``rabbit_vhost`` (module): a RabbitMQ vhost of the module's own.
* ``placement`` (module, one per backend: SQLite, MariaDB, PostgreSQL), ``client`` and
  ``fleet``: the real Placement, a client of it and a fresh fleet of a few providers, for the
  provider view's database feed tests. The SQLite backend is the ``placement_service``
  fixture, which the modules using ``placement`` import from fixtures_placement.py.
"""

from __future__ import annotations

import contextlib
import subprocess
import uuid as uuidlib
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from placement_client.api import PlacementClient
from scheduler.demo.embedded_placement import EmbeddedPlacement
from tests.functional.fixtures_db import make_database
from tests.functional.fixtures_placement import make_mariadb_placement
from tests.functional.fixtures_provider_view import make_fleet
from tests.functional.fixtures_rabbit import RABBIT_HOST, RABBIT_PORT, ensure_rabbit, rabbitmqctl


@pytest.fixture(scope="module")
def rabbit_vhost() -> Iterator[str]:
    """The URL of a RabbitMQ vhost of this module's own (deleted after), so that nova's fixed
    names (exchange ``nova``, topics ``scheduler``, ``notifications``) are its tests' alone.
    Each test consumes every notification it causes (it asserts the exact lists), so the
    next one starts from empty queues; rabbitmqctl costs seconds per call."""
    ensure_rabbit()
    vhost = f"novasched-edge-{uuidlib.uuid4().hex[:10]}"
    rabbitmqctl("add_vhost", vhost)
    try:
        rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
        yield f"rabbit://guest:guest@{RABBIT_HOST}:{RABBIT_PORT}/{vhost}"
    finally:
        subprocess.run(["rabbitmqctl", "delete_vhost", vhost], capture_output=True, timeout=60)


@pytest.fixture(scope="module", params=["sqlite", "mariadb", "postgresql"])
def placement(request: pytest.FixtureRequest) -> Iterator[SimpleNamespace]:
    """A started Placement (``service``), a client of it and the URL of its database."""
    kind = request.param
    with contextlib.ExitStack() as stack:
        if kind == "sqlite":
            service = request.getfixturevalue("placement_service")
        elif kind == "mariadb":
            service = make_mariadb_placement(workers=2)
            stack.callback(service.stop)
            service.start()
        else:
            url = stack.enter_context(make_database("postgresql", "novasched_dbfeed"))
            service = EmbeddedPlacement(url, mode="process", workers=2)
            stack.callback(service.stop)
            service.start()
        client = PlacementClient(service.url, claim_retries=4, retry_backoff=0.01)
        yield SimpleNamespace(kind=kind, service=service, client=client, db_url=service.db_url)


@pytest.fixture
def client(placement: SimpleNamespace) -> PlacementClient:
    return placement.client


@pytest.fixture
def fleet(client: PlacementClient) -> Iterator[SimpleNamespace]:
    """A fresh ``make_fleet``, removed afterwards (allocations, then providers, children first),
    so that every test compares a few providers only."""
    fleet = make_fleet(client)
    yield fleet
    for rp in reversed(fleet.providers):
        got = client.get_provider_part(rp, "allocations")
        for consumer in got[1] if got else ():
            client.delete_allocation_for_instance(consumer)
        client.delete_provider(rp)
