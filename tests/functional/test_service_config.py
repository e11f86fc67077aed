"""``novasched-scheduler`` refuses, at start, a configuration value it could not read later:
one line per bad option, naming the file, the option and why, and EX_CONFIG (78), which a
service manager does not restart."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_a_value_of_the_wrong_type_stops_the_service_at_start(tmp_path):
    conf = tmp_path / "nova.conf"
    conf.write_text(
        "[DEFAULT]\ntransport_url = fake://\nservice_down_time = abc\n"
        "[filter_scheduler]\nram_weight_multiplier = lots\n[scheduler]\nworkers = 1\n"
    )
    exe = Path(sys.executable).with_name("novasched-scheduler")
    result = subprocess.run(
        [str(exe), "--config-file", str(conf)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 78, result.stderr
    errors = [line for line in result.stderr.splitlines() if "configuration error" in line]
    assert errors == [
        f"novasched-scheduler: configuration error: {conf}: [DEFAULT] service_down_time = abc: "
        "not an integer",
        f"novasched-scheduler: configuration error: {conf}: [filter_scheduler] "
        "ram_weight_multiplier = lots: not a number",
    ]
    assert "Traceback" not in result.stderr
