"""Differential tests: nova 34's own functions and ours, on the same Hypothesis-generated
inputs.

nova runs in its own venv (``.venv-nova``, made on first use by ``fixtures_nova``), in one
long-lived worker process per test module (``nova_side/worker.py``): each example is one
line of JSON to it and one line back, so thousands of examples cost seconds, and Hypothesis
keeps its shrinking (a disagreement is reported on its smallest input).

How many examples: ``examples()`` (``tests/hunt.py``), bounded in ``make test``; a
maintainer hunting for disagreements sets ``NOVASCHED_HUNT=1`` (2,000 per test) or
``NOVASCHED_HUNT=<n>``::

    NOVASCHED_HUNT=5000 .venv/bin/pytest tests/differential -x
"""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.functional.fixtures_nova import ensure_nova_venv

NOVA_SIDE = Path(__file__).with_name("nova_side")


class NovaError(AssertionError):
    """nova's side failed on an input (not a refusal nova's function itself raised)."""


class NovaWorker:
    """nova 34's interpreter running ``nova_side/worker.py``: ``call(area, op, payload)``
    runs ``nova_side/diff_<area>.py``'s ``op`` on ``payload`` and returns its result."""

    def __init__(self, python: Path):
        self._proc = subprocess.Popen(
            [str(python), "-W", "ignore", str(NOVA_SIDE / "worker.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self._lock = threading.Lock()
        self._stderr: list[str] = []
        threading.Thread(target=self._drain, daemon=True).start()
        ready = self._proc.stdout.readline()
        if json.loads(ready or "{}").get("ready") is not True:
            self.close()
            raise NovaError(f"nova's worker did not start:\n{self.stderr()}")

    def _drain(self) -> None:
        for line in self._proc.stderr:
            self._stderr.append(line)
            del self._stderr[:-200]

    def stderr(self) -> str:
        return "".join(self._stderr)

    def call(self, area: str, op: str, payload: Any) -> Any:
        with self._lock:
            if self._proc.poll() is not None:
                raise NovaError(f"nova's worker exited ({self._proc.returncode}):\n{self.stderr()}")
            self._proc.stdin.write(json.dumps({"area": area, "op": op, "payload": payload}) + "\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
        if not line:
            raise NovaError(f"nova's worker died:\n{self.stderr()}")
        answer = json.loads(line)
        if "crash" in answer:
            raise NovaError(f"nova's side failed on {payload!r}:\n{answer['crash']}")
        return answer["result"]

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


@pytest.fixture(scope="module")
def nova():
    """nova 34's worker for the module's examples."""
    worker = NovaWorker(ensure_nova_venv())
    try:
        yield worker
    finally:
        worker.close()
