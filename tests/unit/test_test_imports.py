"""Tests share helpers through builder modules (fakes.py, env.py, builders.py, strategies.py,
tests/functional/fixtures_*.py; pytest fixtures through a conftest.py), never through each
other: no module under tests/ imports from a ``test_*`` module, at the top or inside a
function.

Every tests/**/*.py is parsed (nothing is imported); ``from X.test_y import ...``,
``from .test_y import ...``, ``from X import test_y`` and ``import X.test_y`` fail here with
the file and the line. Move the helper to a builder module next to where it is used instead.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent


def _is_test_module(dotted: str) -> bool:
    return any(part.startswith("test_") for part in dotted.split("."))


def imports_of_test_modules(source: str, where: str) -> list[str]:
    """``where:line: the import`` for every import of a test module in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source, filename=where)):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            names = [alias.name for alias in node.names]
            if _is_test_module(module) or any(_is_test_module(name) for name in names):
                shown = f"from {'.' * node.level}{module} import {', '.join(names)}"
                found.append(f"{where}:{node.lineno}: {shown}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _is_test_module(alias.name):
                    found.append(f"{where}:{node.lineno}: import {alias.name}")
    return found


def test_no_module_under_tests_imports_a_test_module():
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        where = str(path.relative_to(ROOT))
        found += imports_of_test_modules(path.read_text(encoding="utf-8"), where)
    assert not found, "import the helper from a builder module instead:\n" + "\n".join(found)


def test_every_form_of_import_of_a_test_module_is_found():
    source = (
        "from tests.unit.scheduler.drivers.test_filter_scheduler import Cloud\n"
        "from .test_table import NOW\n"
        "from tests.unit.db import test_schema\n"
        "import tests.unit.db.test_queries as queries\n"
        "def helper():\n"
        "    from tests.unit.scheduler.hosts.test_manager import utcnow\n"
        "from tests.unit.scheduler.drivers.fakes import make_host\n"
        "from . import fakes\n"
        "import pytest_timeout\n"
        "from hypothesis import strategies\n"
    )
    found = imports_of_test_modules(source, "probe.py")
    assert [line.split(":")[1] for line in found] == ["1", "2", "3", "4", "6"]
    assert found[1] == "probe.py:2: from .test_table import NOW"
