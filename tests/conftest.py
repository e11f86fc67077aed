"""Shared test set-up: every test starts from the default configuration.

``--faults-report FILE`` writes what the fault suite (tests/faults) did, as JSON: its
ledger's counts and how many fault scenarios passed or were expected failures.
"""

import json
from collections import Counter

import pytest

from scheduler import conf as novasched_conf

# builder modules whose helpers assert (tests share them, tests/unit/test_test_imports.py):
# pytest rewrites their asserts as it does a test module's, for the same failure messages
pytest.register_assert_rewrite("tests.unit.scheduler.hosts.env", "tests.unit.db.schema_check")


@pytest.fixture(scope="session", autouse=True)
def _state_path(tmp_path_factory):
    """nova's [DEFAULT] state_path (/var/lib/nova) is not this machine's: a scheduler service a
    test starts records its decisions under the session's temporary directory instead."""
    path = str(tmp_path_factory.mktemp("state_path"))
    novasched_conf.CONF.set_default("state_path", path)
    yield path


@pytest.fixture(autouse=True)
def _reset_config(_state_path):
    yield
    novasched_conf.CONF.reset()  # overrides and defaults set by the test
    novasched_conf.set_defaults(novasched_conf.CONF)
    novasched_conf.CONF.set_default("state_path", _state_path)


_OUTCOMES: Counter[str] = Counter()


# the marker of each test directory (registered in pyproject.toml)
_DIRECTORY_MARKERS = ("unit", "functional", "deployment", "differential", "faults")


def pytest_collection_modifyitems(config, items):
    """Mark every test with its directory's marker: ``pytest -m unit`` is the fast loop."""
    for item in items:
        parts = item.nodeid.split("/", 2)
        if len(parts) > 2 and parts[0] == "tests" and parts[1] in _DIRECTORY_MARKERS:
            item.add_marker(parts[1])


def pytest_addoption(parser):
    parser.addoption("--faults-report", metavar="FILE", help="write the fault suite's figures")


_LOST_SEEN = [0]  # the ledger's "allocations lost" at the previous report


def pytest_runtest_logreport(report):
    if not report.nodeid.startswith("tests/faults/") or report.when != "call":
        return
    from tests.faults import ledger

    lost = ledger.COUNTS["allocations lost"] - _LOST_SEEN[0]
    _LOST_SEEN[0] = ledger.COUNTS["allocations lost"]
    if hasattr(report, "wasxfail"):
        # a case known to lose what it loses (its reason says why): counted apart
        _OUTCOMES["allocations lost in known cases"] += lost
    if "tests/faults/test_scenarios.py" not in report.nodeid:
        return
    if hasattr(report, "wasxfail"):
        _OUTCOMES["faults known to lose"] += 1
    elif report.passed:
        _OUTCOMES["faults survived"] += 1
    else:
        _OUTCOMES["faults failed"] += 1


def pytest_sessionfinish(session):
    path = session.config.getoption("--faults-report")
    if not path:
        return
    from tests.faults import ledger

    figures = {**ledger.COUNTS, **_OUTCOMES}
    figures["allocations lost"] = (
        ledger.COUNTS["allocations lost"] - _OUTCOMES["allocations lost in known cases"]
    )
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(figures, fh, indent=1, sort_keys=True)
