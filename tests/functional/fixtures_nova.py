"""nova 34's published code in a venv of its own, to prove wire compatibility and to run a real
nova in front of novasched (tests/deployment).

nova is never a dependency of novasched: it is installed beside the project in `.venv-nova`
(created on first use, about two minutes) and run in subprocesses.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOVA_VENV = ROOT / ".venv-nova"
NOVA_VERSION = "34.0.0"
NOVA_SIDE = Path(__file__).with_name("nova_side")


def _nova_python() -> Path:
    return NOVA_VENV / "bin" / "python"


def _has_nova(python: Path) -> bool:
    if not python.exists():
        return False
    probe = subprocess.run(
        [str(python), "-c", "import nova.version as v; print(v.version_string())"],
        capture_output=True,
        text=True,
    )
    return probe.returncode == 0 and probe.stdout.strip().startswith(NOVA_VERSION)


# What the deployment suite (tests/deployment) runs nova with, beside nova itself: nova-api
# under gunicorn, and nova's databases on MariaDB.
DEPLOYMENT_EXTRAS = ("gunicorn", "PyMySQL")


def _has_modules(python: Path, modules: tuple[str, ...]) -> bool:
    probe = subprocess.run(
        [str(python), "-c", "import " + ", ".join(modules)], capture_output=True, text=True
    )
    return probe.returncode == 0


def ensure_nova_venv(with_deployment_extras: bool = False) -> Path:
    """nova 34's venv (created on first use); ``with_deployment_extras`` adds gunicorn and
    PyMySQL to it, for the deployment suite."""
    python = _nova_python()
    if not _has_nova(python):
        _install_nova(python)
    if with_deployment_extras and not _has_modules(python, ("gunicorn", "pymysql")):
        cmd = [str(python), "-m", "pip", "install", "-q", *DEPLOYMENT_EXTRAS]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            pytest.fail(
                f"could not add {', '.join(DEPLOYMENT_EXTRAS)} to {NOVA_VENV}:\n"
                f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
            )
    return python


def _install_nova(python: Path) -> None:
    base = os.environ.get("PYTHON", "python3")
    for cmd in (
        [base, "-m", "venv", str(NOVA_VENV)],
        [str(python), "-m", "pip", "install", "-q", f"nova=={NOVA_VERSION}"],
    ):
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            pytest.fail(
                f"could not set up nova {NOVA_VERSION} for the wire test: {' '.join(cmd)}\n"
                f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
            )
    if not _has_nova(python):
        pytest.fail(f"nova {NOVA_VERSION} is not importable in {NOVA_VENV}")


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
