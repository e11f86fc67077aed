# ruff: noqa: F811 - the fixtures are imported by name, and test arguments reuse those names
"""A cell mapping whose database_connection is a template, on MariaDB: the scheduler fills
it from its own ``[database] connection`` as nova does and schedules to that cell's hosts;
without ``[database] connection`` it leaves the cell out with an error naming it. And
``format_cell_url`` gives nova 34's own ``CellMapping._format_url`` results on random
inputs."""

from __future__ import annotations

import contextlib
import logging
import random
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from db import models
from db.api import CellUrlTemplateError, format_cell_url
from scheduler.conf import CONF
from scheduler.objects import Destination, Flavor, RequestSpec
from scheduler.rpc.context import RequestContext
from tests.functional.fixtures_cloud import PROJECT, USER, Cloud, build_cloud
from tests.functional.fixtures_nova import _run_nova_side, nova_python  # noqa: F401

SMALL = Flavor(name="m1.small", flavorid="2", vcpus=1, memory_mb=512, root_gb=1)


@pytest.fixture(scope="module")
def cloud(tmp_path_factory) -> Iterator[Cloud]:
    with contextlib.ExitStack() as stack:
        yield build_cloud(
            stack,
            Path(tmp_path_factory.mktemp("tmpl")),
            cell_kinds=("mariadb", "mariadb"),
            hosts=12,
            topic=f"scheduler-tmpl-{uuidlib.uuid4().hex[:10]}",
        )


def _set_mapping(cloud: Cloud, cell_uuid: str, url: str) -> None:
    t = models.cell_mappings
    engine = sa.create_engine(cloud.api_url, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(t.update().where(t.c.uuid == cell_uuid).values(database_connection=url))
    finally:
        engine.dispose()


def _boot_into(cloud: Cloud, cell_uuid: str):
    spec = RequestSpec(
        flavor=SMALL,
        num_instances=1,
        project_id=PROJECT,
        user_id=USER,
        requested_destination=Destination(cell_uuid=cell_uuid),
    )
    ctx = RequestContext(user_id=USER, project_id=PROJECT, request_id=f"req-{uuidlib.uuid4()}")
    return cloud.client.select_destinations(
        ctx, spec, [str(uuidlib.uuid4())], return_objects=True, return_alternates=False
    )


def test_a_templated_cell_is_filled_from_database_connection_and_scheduled_to(cloud, caplog):
    (cell1, url1), (cell2, url2) = sorted(cloud.cell_urls.items(), key=lambda kv: kv[1])
    real = make_url(url2)
    # the scheme, user, host, port and query come from the reader's own [database] connection
    template = f"{{scheme}}://{{username}}@{{hostname}}:{{port}}/{real.database}?{{query}}"
    assert format_cell_url(template, url1) == url2
    _set_mapping(cloud, cell2, template)
    host_manager = cloud.service.driver.host_manager
    try:
        # no [database] connection: the cell is left out, with an error naming it
        with caplog.at_level(logging.ERROR):
            cloud.service.reset()
        assert cell2 not in host_manager.enabled_cells and cell1 in host_manager.enabled_cells
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert any(cell2 in m and "{scheme}" in m for m in errors), errors

        CONF.set_override("connection", url1, group="database")
        cloud.service.reset()
        assert host_manager.enabled_cells[cell2].database_connection == url2
        result = _boot_into(cloud, cell2)
        chosen = result[0][0]
        assert chosen.cell_uuid == cell2 and cloud.host_cell(chosen.service_host) == cell2
    finally:
        _set_mapping(cloud, cell2, url2)
        CONF.clear_override("connection", group="database")
        cloud.service.reset()


# ---------------------------------------------------------------- nova's own formatting

_FIELDS = ["scheme", "username", "password", "hostname", "port", "path", "query", "fragment"]


def _random_reader(rng: random.Random) -> str:
    scheme = rng.choice(["mysql+pymysql", "postgresql", "rabbit", "sqlite", "mysql"])
    user = rng.choice(["", "nova", "r%40ot", "u"])
    password = rng.choice([None, "", "s3cret", "p:w", "a%2Fb"])
    hosts = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        host = rng.choice(["db", "10.0.0.1", "[::1]", "db.example.org", ""])
        port = rng.choice([None, 3306, 5672, "x"])
        cred = user + (f":{password}" if password is not None else "")
        netloc = (f"{cred}@" if cred else "") + host + (f":{port}" if port is not None else "")
        hosts.append(netloc)
    path = rng.choice(["", "/", "/nova", "/nova_cell0", "/a/b"])
    query = rng.choice(["", "?charset=utf8", "?a=1&b=2"])
    fragment = rng.choice(["", "#frag"])
    return f"{scheme}://{','.join(hosts)}{path}{query}{fragment}"


def _random_template(rng: random.Random) -> str:
    names = _FIELDS + ["username1", "hostname2", "port1", "password3", "bogus", ""]
    parts = []
    for _ in range(rng.randint(0, 5)):
        parts.append(rng.choice(["{" + rng.choice(names) + "}", "://", "@", ":", "/", "x", "{{"]))
    return "".join(parts) or "mysql://root@db/cell"


def test_format_cell_url_gives_novas_results(nova_python):
    rng = random.Random(20261127)
    cases = [[_random_template(rng), _random_reader(rng)] for _ in range(600)]
    cases += [
        ["{scheme}://{username}:{password}@{hostname}:{port}/{path}?{query}", r]
        for r in ("mysql+pymysql://root:pw@db:3306/nova?charset=utf8", "mysql://db/x")
    ]
    nova = _run_nova_side(nova_python, "service_state.py", {"op": "format", "cases": cases})
    for (template, reader), (ok, value) in zip(cases, nova["results"], strict=True):
        if ok:
            assert format_cell_url(template, reader) == value, (template, reader)
            continue
        # nova logs the failure and uses the URL as stored: we do the same for a URL that
        # is not a template, and refuse (leave the cell out) for one that is
        try:
            assert format_cell_url(template, reader) == template, (template, reader, value)
        except CellUrlTemplateError:
            pass
