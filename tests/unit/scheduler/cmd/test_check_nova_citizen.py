"""``novasched-manage check`` on the two nova.conf settings of issue 18: a memcached
servicegroup driver fails the first check (the service refuses to start), and a cell mapping
whose database_connection is a template is filled from ``[database] connection``, or fails
naming the cell and the field when it cannot be."""

from __future__ import annotations

import pytest

import db
from scheduler.cmd import check
from scheduler.cmd.check import CheckContext, Status
from tests.unit.scheduler.cmd.builders import make_conf


def test_memcached_servicegroup_driver_fails_the_plugin_check(tmp_path):
    assert check.check_plugins(CheckContext(make_conf(tmp_path))).status is Status.OK
    conf = make_conf(tmp_path, "[DEFAULT]\nservicegroup_driver = mc\n")
    result = check.check_plugins(CheckContext(conf))
    assert result.status is Status.FAILURE
    assert "servicegroup_driver = mc is not supported" in result.details
    assert "refuses to start" in result.details
    assert "servicegroup_driver = db" in result.remedy and "services table" in result.remedy


@pytest.fixture
def templated(tmp_path):
    api_url = f"sqlite:///{tmp_path}/api.db"
    cell_url = f"sqlite:///{tmp_path}/cell1.db"
    api = db.get_engine(api_url)
    db.create_schema(api, "api")
    db.create_schema(cell_url, "cell")
    # nova strips the path's leading "/": "{scheme}:////{path}" gives an absolute path back
    db.create_cell_mapping(api, name="cell1", database_connection="{scheme}:////{path}")
    yield api_url, cell_url
    db.dispose_engines()


def test_templated_cell_is_checked_at_the_url_the_template_gives(tmp_path, templated):
    api_url, cell_url = templated
    text = f"[api_database]\nconnection = {api_url}\n[database]\nconnection = {cell_url}\n"
    ctx = CheckContext(make_conf(tmp_path, text))
    result = check.check_databases(ctx)
    ctx.close()
    assert result.status is Status.OK, result.details
    assert [c.url for c in ctx.cells] == [cell_url]


def test_templated_cell_without_database_connection_fails_naming_cell_and_field(
    tmp_path, templated
):
    api_url, _ = templated
    ctx = CheckContext(make_conf(tmp_path, f"[api_database]\nconnection = {api_url}\n"))
    result = check.check_databases(ctx)
    ctx.close()
    assert result.status is Status.FAILURE
    assert "cell cell1 (" in result.details and "{scheme}" in result.details
    assert "[database] connection" in result.remedy
    assert ctx.cells[0].error and ctx.cells[0].engine is None
