"""nova 34's published code in a venv of its own, to prove wire compatibility and to run a real
nova in front of novasched (tests/deployment).

nova is never a dependency of novasched: it is installed beside the project in `.venv-nova`
(created on first use, about two minutes) and run in subprocesses.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests import peers

ROOT = peers.ROOT
NOVA_VENV = peers.NOVA_VENV
NOVA_VERSION = peers.NOVA_VERSION
NOVA_SIDE = Path(__file__).with_name("nova_side")

# What the deployment suite (tests/deployment) runs nova with, beside nova itself: nova-api
# under gunicorn, and nova's databases on MariaDB.
DEPLOYMENT_EXTRAS = ("gunicorn", "PyMySQL")


def ensure_nova_venv(with_deployment_extras: bool = False) -> Path:
    """nova 34's venv (created on first use); ``with_deployment_extras`` adds gunicorn and
    PyMySQL to it, for the deployment suite. Fails the test if it cannot be made."""
    try:
        return peers.nova_venv(DEPLOYMENT_EXTRAS if with_deployment_extras else ())
    except peers.PeerUnavailable as exc:
        pytest.fail(f"nova {NOVA_VERSION} for the compatibility tests: {exc}")


@pytest.fixture(scope="module")
def nova_python() -> Path:
    """nova 34's interpreter (its venv made on first use)."""
    return ensure_nova_venv()


def nova_conductor_call(python: Path, **args: object) -> dict:
    """Run nova's conductor-side select_destinations with ``args``; return what nova saw."""
    return _run_nova_side(python, "conductor_call.py", args)


def nova_aggregate_api(python: Path, **args: object) -> dict:
    """Run nova-api's aggregate code (API database write, then the update_aggregates cast)."""
    return _run_nova_side(python, "aggregate_api.py", args)


def nova_instance_info(python: Path, **args: object) -> dict:
    """Cast one of nova-compute's instance-info messages with nova's own client."""
    return _run_nova_side(python, "instance_info.py", args)


def _run_nova_side(python: Path, script: str, args: dict) -> dict:
    done = subprocess.run(
        [str(python), "-W", "ignore", str(NOVA_SIDE / script), json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        pytest.fail(f"nova's {script} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
