"""``make demo`` as a new user sees it: the demo's own output, and no library noise."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

MANAGE = Path(sys.executable).with_name("novasched-manage")


def test_demo_prints_the_demo_and_nothing_else():
    done = subprocess.run(
        [str(MANAGE), "demo", "--hosts", "40", "--boots", "4"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    # eventlet's deprecation notice (printed whenever futurist or oslo.service is imported)
    # and Placement's own "Over capacity" warnings used to open and interrupt the demo
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    assert lines[0].startswith("Databases: API + 2 cell(s)")
    noise = [
        line for line in lines if "Warning" in line or "WARNING" in line or "Traceback" in line
    ]
    assert noise == []
    assert "placed instances without a claim in Placement: 0" in done.stdout
    # its cloud was in a temporary directory: the demo says how to keep it
    assert lines[-1] == f"  {MANAGE} demo --hosts 40 --boots 4 --state-dir demo-cloud"
