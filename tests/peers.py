"""The peers that tests and benchmarks start beside novasched: nova 34 in a venv of its own,
and RabbitMQ virtual hosts.

Plain functions that raise ``PeerUnavailable`` with what went wrong. The pytest fixtures
(``tests/functional/fixtures_nova.py``, ``fixtures_rabbit.py``) turn that into a loud test
failure; the benchmarks (``benchmarks/nova34.py``) into a setup error of their section. No
pytest here, so that a benchmark run needs none.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOVA_VENV = ROOT / ".venv-nova"
NOVA_VERSION = "34.0.0"


class PeerUnavailable(RuntimeError):
    """A peer could not be installed, started or reached."""


def _run(cmd: list[str], what: str, timeout: float) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise PeerUnavailable(
            f"{what}: {' '.join(cmd)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        )


def has_modules(python: Path, modules: tuple[str, ...]) -> bool:
    """Whether ``python`` imports every one of ``modules``."""
    if not python.exists():
        return False
    probe = [str(python), "-c", "import " + ", ".join(modules)]
    return subprocess.run(probe, capture_output=True, text=True).returncode == 0


def _has_nova(python: Path) -> bool:
    if not python.exists():
        return False
    probe = subprocess.run(
        [str(python), "-c", "import nova.version as v; print(v.version_string())"],
        capture_output=True,
        text=True,
    )
    return probe.returncode == 0 and probe.stdout.strip().startswith(NOVA_VERSION)


def nova_venv(extras: tuple[str, ...] = ()) -> Path:
    """The interpreter of ``.venv-nova`` with nova 34 in it, and the PyPI packages ``extras``
    (each importable under its name in lower case: ``PyMySQL`` as ``pymysql``); whatever is
    missing is installed first (nova itself takes about two minutes)."""
    python = NOVA_VENV / "bin" / "python"
    if not _has_nova(python):
        base = os.environ.get("PYTHON", sys.executable)
        _run([base, "-m", "venv", str(NOVA_VENV)], f"nova {NOVA_VERSION}'s venv", 900)
        _run(
            [str(python), "-m", "pip", "install", "-q", f"nova=={NOVA_VERSION}"],
            f"nova {NOVA_VERSION}",
            900,
        )
        if not _has_nova(python):
            raise PeerUnavailable(f"nova {NOVA_VERSION} is not importable in {NOVA_VENV}")
    if extras and not has_modules(python, tuple(name.lower() for name in extras)):
        _run([str(python), "-m", "pip", "install", "-q", *extras], f"nova's {extras}", 600)
    return python


def rabbitmqctl() -> str:
    """The path of ``rabbitmqctl``."""
    ctl = shutil.which("rabbitmqctl")
    if ctl is None:
        raise PeerUnavailable("rabbitmqctl is not installed: a RabbitMQ vhost cannot be made")
    return ctl


def add_vhost(prefix: str) -> str:
    """A new RabbitMQ virtual host ``<prefix>-<random>`` that guest may use; its name."""
    ctl = rabbitmqctl()
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    _run([ctl, "add_vhost", name], "a RabbitMQ vhost", 60)
    try:
        _run([ctl, "set_permissions", "-p", name, "guest", ".*", ".*", ".*"], "guest's rights", 60)
    except PeerUnavailable:
        delete_vhost(name)
        raise
    return name


def delete_vhost(name: str) -> None:
    """Delete the virtual host ``name`` and its queues (quietly: it may be gone already)."""
    subprocess.run([rabbitmqctl(), "delete_vhost", name], capture_output=True, timeout=60)


def queue_consumers(vhost: str, queue: str) -> int:
    """How many consumers ``queue`` in ``vhost`` has (0 if there is no such queue yet)."""
    done = subprocess.run(
        [rabbitmqctl(), "-q", "list_queues", "-p", vhost, "name", "consumers"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    for line in done.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == queue and parts[1].isdigit():
            return int(parts[1])
    return 0
