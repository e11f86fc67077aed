"""Listings in the formats openstack's commands print: -f table|json|yaml|csv|value, -c."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import yaml

from scheduler.cmd import emit_list, list_format

HEADERS = ["host", "state", "instances"]
ROWS = [["c1", "up", ["i-1", "i-2"]], ["c2", "down", []]]


def _args(fmt=None, columns=None, as_json=False):
    return SimpleNamespace(format=fmt, column=columns, json=as_json)


def test_json_and_yaml_are_one_object_per_row_keyed_by_column():
    expected = [
        {"host": "c1", "state": "up", "instances": ["i-1", "i-2"]},
        {"host": "c2", "state": "down", "instances": []},
    ]
    assert json.loads(emit_list(_args("json"), HEADERS, ROWS)) == expected
    assert yaml.safe_load(emit_list(_args("yaml"), HEADERS, ROWS)) == expected
    assert json.loads(emit_list(_args(as_json=True), HEADERS, ROWS)) == expected  # --json


def test_csv_and_value_with_columns_chosen_in_their_order():
    assert emit_list(_args("csv", ["instances", "host"]), HEADERS, ROWS).splitlines() == [
        "instances,host",
        "i-1 i-2,c1",
        ",c2",
    ]
    assert emit_list(_args("value", ["host", "state"]), HEADERS, ROWS) == "c1 up\nc2 down"


def test_a_table_by_default_and_an_unknown_column_is_refused_with_the_known_ones():
    assert list_format(_args()) == "table"
    assert emit_list(_args(), HEADERS, ROWS).splitlines()[0].split() == HEADERS
    with pytest.raises(ValueError, match="no column 'nosuch'; the columns are host, state"):
        emit_list(_args("csv", ["nosuch"]), HEADERS, ROWS)


DOC = {"status": "OK", "checks": [{"name": "a", "status": "OK"}]}


def test_a_document_is_whole_in_json_and_yaml_and_the_command_text_as_table():
    from scheduler.cmd import emit_document

    def table():
        return "the command's own text"

    assert json.loads(emit_document(_args("json"), DOC, table, HEADERS, ROWS)) == DOC
    assert json.loads(emit_document(_args(as_json=True), DOC, table)) == DOC
    assert yaml.safe_load(emit_document(_args("yaml"), DOC, table, HEADERS, ROWS)) == DOC
    assert emit_document(_args(), DOC, table, HEADERS, ROWS) == "the command's own text"
    assert emit_document(_args("text"), DOC, table) == "the command's own text"


def test_a_document_as_rows_in_csv_value_and_a_table_cut_to_columns():
    from scheduler.cmd import emit_document

    def table():
        raise AssertionError("not the command's text when rows are asked for")

    assert emit_document(_args("value", ["host"]), DOC, table, HEADERS, ROWS) == "c1\nc2"
    cut = emit_document(_args(None, ["state"]), DOC, table, HEADERS, ROWS).splitlines()
    assert [line.strip() for line in cut] == ["state", "-----", "up", "down"]
    with pytest.raises(ValueError, match="no column 'nosuch'"):
        emit_document(_args("csv", ["nosuch"]), DOC, table, HEADERS, ROWS)
