"""The benchmarks use what the modules they measure publish, never their private names.

A benchmark that reaches into ``placement._proc`` or ``core._driver`` breaks silently when the
owner renames its internals, and hides that the owner lacks an accessor. Every
``benchmarks/*.py`` is parsed (nothing is imported); taking a private name (``_x``, not a
dunder) from anything that is not the module's own fails here with the file and the line:
``from m import _x``, ``obj._x`` and ``getattr(obj, "_x")``. The module's own are ``self``,
``cls`` and the classes it defines. Give the owner a public accessor instead.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"

# public although they begin with an underscore: the standard library documents them
DOCUMENTED = frozenset({"_exit", "_asdict", "_replace", "_fields", "_make"})

_ATTRIBUTE_CALLS = ("getattr", "hasattr", "setattr")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in DOCUMENTED


def _own_names(tree: ast.Module) -> set[str]:
    """``self``, ``cls`` and the classes the module defines: their private names are its own."""
    return {"self", "cls"} | {node.name for node in tree.body if isinstance(node, ast.ClassDef)}


def private_names_taken(source: str, where: str = "<source>") -> list[tuple[int, str]]:
    """(line, what) for every private name ``source`` takes from something not its own."""
    tree = ast.parse(source, filename=where)
    own = _own_names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            found.extend(
                (node.lineno, f"from {node.module} import {alias.name}")
                for alias in node.names
                if _private(alias.name)
            )
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            if not (isinstance(node.value, ast.Name) and node.value.id in own):
                found.append((node.lineno, ast.unparse(node)))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _ATTRIBUTE_CALLS
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _private(node.args[1].value)
        ):
            target = ast.unparse(node.args[0])
            if target not in own:
                found.append((node.lineno, f"{node.func.id}({target}, {node.args[1].value!r})"))
    return found


def _taken_by_benchmarks() -> list[tuple[str, int, str]]:
    taken = []
    for path in sorted(BENCHMARKS.glob("*.py")):
        where = str(path.relative_to(ROOT))
        taken.extend((where, line, what) for line, what in private_names_taken(path.read_text()))
    return taken


def test_benchmarks_take_no_private_names():
    taken = _taken_by_benchmarks()
    assert [f"{w}:{line}: {what}" for w, line, what in taken] == []


@pytest.mark.parametrize(
    "source, expected",
    [
        ("from scheduler.hosts import _SLACK\n", "from scheduler.hosts import _SLACK"),
        ("def f(cloud):\n    return cloud.service._proc.pid\n", "cloud.service._proc"),
        ("from benchmarks import core\ncore._driver(None, None)\n", "core._driver"),
        ("import m\nx = getattr(m, '_SLACK', None)\n", "getattr(m, '_SLACK')"),
        ("class A:\n    pass\ndef f(other):\n    return other._x\n", "other._x"),
    ],
)
def test_the_check_catches_a_private_name(source, expected):
    assert [what for _, what in private_names_taken(source)] == [expected]


def test_own_and_public_names_pass():
    source = (
        "import os\n"
        "class Meter:\n"
        "    _shared = None\n"
        "    def __init__(self):\n"
        "        self._pid = os.getpid()\n"
        "        Meter._shared = self\n"
        "    @classmethod\n"
        "    def make(cls):\n"
        "        return cls._shared, getattr(self, '_pid', None)\n"
        "def _helper(x):\n"
        "    return _helper, x.__class__.__name__, getattr(x, 'pid', None)\n"
        "def child():\n"
        "    os._exit(0)\n"
    )
    assert private_names_taken(source) == []
