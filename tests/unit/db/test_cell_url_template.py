"""A cell mapping's templated URL is filled from the reader's own URL as nova's CellMapping
fills it, and a template that cannot be filled names its cell and field (and, for the
scheduler, leaves the cell out). tests/functional/test_cell_url_template.py compares
``format_cell_url`` with nova 34's own code on random inputs."""

from __future__ import annotations

import logging

import pytest

import db
from db.api import CellUrlTemplateError, format_cell_url

READER = "mysql+pymysql://nova:s3cret@db.example:3307/nova_cell0?charset=utf8"


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        # every field nova fills
        (
            "{scheme}://{username}:{password}@{hostname}:{port}/{path}?{query}",
            "mysql+pymysql://nova:s3cret@db.example:3307/nova_cell0?charset=utf8",
        ),
        ("{scheme}://{username}:{password}@{hostname}/nova_cell1", None),
        # a URL without a field is used as stored; "{{" is an escaped brace, as in nova
        ("mysql+pymysql://root@other/cell2", "mysql+pymysql://root@other/cell2"),
        ("sqlite:///x{{y}}.db", "sqlite:///x{y}.db"),
    ],
)
def test_template_is_filled_from_the_readers_url(template, expected):
    if expected is None:
        expected = "mysql+pymysql://nova:s3cret@db.example/nova_cell1"
    assert format_cell_url(template, READER) == expected


def test_a_part_the_reader_lacks_becomes_None_as_in_nova():
    # nova's str.format of a missing password: the text "None"
    out = format_cell_url("{scheme}://{username}:{password}@{hostname}/c1", "mysql://root@h/db")
    assert out == "mysql://root:None@h/c1"


def test_multi_host_url_fields_are_numbered():
    reader = "rabbit://a:b@h1:5672,c:d@[::1]:5673/vhost"
    template = "rabbit://{username1}:{password1}@{hostname1}:{port1},{hostname2}:{port2}/{path}"
    assert format_cell_url(template, reader) == "rabbit://a:b@h1:5672,::1:5673/vhost"


def test_a_brace_in_a_password_is_not_a_template():
    url = "mysql+pymysql://root:pa}ss@db/cell1"
    assert format_cell_url(url, READER) == url
    assert format_cell_url(url, None) == url


@pytest.mark.parametrize(
    ("template", "reader", "variable"),
    [
        ("{scheme}://root@{hostname}/cell1", None, "scheme"),
        ("mysql://root@{host}/cell1", READER, "host"),
        ("mysql://root@{hostname}:{port3}/cell1", READER, "port3"),
        # the reader's port is not a number: nova's parse fails too
        ("mysql://root@{hostname}/c", "mysql://root@h:notaport/db", "hostname"),
    ],
)
def test_a_template_that_cannot_be_filled_names_the_field(template, reader, variable):
    with pytest.raises(CellUrlTemplateError) as err:
        format_cell_url(template, reader)
    assert err.value.variable == variable
    assert f"{{{variable}}}" in str(err.value)


@pytest.fixture
def api(tmp_path):
    engine = db.get_engine(f"sqlite:///{tmp_path}/api.db")
    db.create_schema(engine, "api")
    db.create_cell_mapping(engine, name="plain", database_connection="sqlite:///plain.db")
    db.create_cell_mapping(
        engine,
        name="templated",
        database_connection="{scheme}://{username}:{password}@{hostname}:{port}/nova_cell1",
        transport_url="rabbit://{username}:{password}@{hostname}:{port}/",
    )
    yield engine
    db.dispose_engines()


def test_get_cell_mappings_fills_templates_from_the_given_connection(api):
    cells = {c["name"]: c for c in db.get_cell_mappings(api, READER)}
    assert cells["templated"]["database_connection"] == (
        "mysql+pymysql://nova:s3cret@db.example:3307/nova_cell1"
    )
    assert "template_error" not in cells["templated"]
    assert cells["plain"]["database_connection"] == "sqlite:///plain.db"


def test_get_cell_mappings_fills_transport_url_from_the_given_one(api):
    cells = {
        c["name"]: c
        for c in db.get_cell_mappings(api, READER, transport_url="rabbit://g:p@mq:5672/")
    }
    assert cells["templated"]["transport_url"] == "rabbit://g:p@mq:5672/"
    # without one the transport URL stays as stored: the scheduler never uses it
    cells = {c["name"]: c for c in db.get_cell_mappings(api, READER)}
    assert cells["templated"]["transport_url"].startswith("rabbit://{username}")


def test_without_a_connection_a_template_is_reported_with_its_cell(api):
    cells = {c["name"]: c for c in db.get_cell_mappings(api)}
    error = cells["templated"]["template_error"]
    assert "cell templated (" in error and "{scheme}" in error
    assert "[database] connection, which is not set" in error
    assert "template_error" not in cells["plain"]


def test_skip_unusable_logs_the_cell_and_leaves_it_out(api, caplog):
    with caplog.at_level(logging.ERROR, logger="db.queries"):
        names = [c["name"] for c in db.get_cell_mappings(api, None, skip_unusable=True)]
    assert names == ["plain"]
    assert any(
        "templated" in r.getMessage() and "{scheme}" in r.getMessage() for r in caplog.records
    )
