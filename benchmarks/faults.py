"""faults: the fault suite (tests/faults) run as a benchmark section, and its figures.

It runs ``pytest tests/faults`` in a child process against the real services (RabbitMQ,
MariaDB, the real Placement; ``scripts/ensure-services.sh`` starts them) and reports what the
suite's ledger counted: calls made and answered under faults, faults injected and survived,
malformed requests tried over RPC, Placement audits, and allocations lost (claims in
Placement without a successful reply), which must be 0.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIGURES = (
    "calls",
    "calls answered",
    "faults injected",
    "faults survived",
    "faults known to lose",
    "faults failed",
    "malformed requests tried",
    "audits",
    "allocations lost",
    "allocations lost in known cases",
)


def run(sizes: list[int], repeats: int, out: dict[str, Any]) -> dict[str, Any]:
    """Run the suite once (``sizes`` and ``repeats`` do not apply) and return its figures."""
    with tempfile.TemporaryDirectory(prefix="novasched-faults-") as tmp:
        report = Path(tmp) / "faults.json"
        started = time.perf_counter()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "tests/faults",
                f"--faults-report={report}",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        seconds = time.perf_counter() - started
        if not report.exists():
            raise RuntimeError(f"the fault suite did not run:\n{done.stdout[-2000:]}")
        figures = json.loads(report.read_text())
    row = {name: figures.get(name, 0) for name in FIGURES}
    row["seconds"] = round(seconds, 1)
    # every test of the suite passed (or failed as expected) and nothing was lost
    row["nothing lost"] = row["allocations lost"] == 0 and done.returncode == 0
    out["rows"] = [row]
    out["pytest_exit_status"] = done.returncode
    return out


def format_table(result: dict[str, Any]) -> str:
    [row] = result["rows"]
    width = max(len(name) for name in row)
    lines = [f"{name:<{width}}  {value}" for name, value in row.items() if name != "nothing lost"]
    lines.append(f"{'verdict':<{width}}  {'PASS' if row['nothing lost'] else 'FAIL'}")
    return "\n".join(lines)
