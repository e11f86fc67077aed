"""etc/novasched.conf.sample must be what oslo-config-generator writes today."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_sample_config_is_current(tmp_path):
    out = tmp_path / "novasched.conf.sample"
    generator = pathlib.Path(sys.executable).with_name("oslo-config-generator")
    subprocess.run(
        [str(generator), "--namespace", "novasched", "--output-file", str(out)],
        check=True,
        capture_output=True,
    )
    committed = (ROOT / "etc" / "novasched.conf.sample").read_text()
    assert out.read_text() == committed, (
        "etc/novasched.conf.sample is out of date: run `make sample-config` and commit it"
    )


def test_sample_config_lists_nova_defaults():
    text = (ROOT / "etc" / "novasched.conf.sample").read_text()
    assert "#max_attempts = 3" in text
    assert "#enabled_filters = ComputeFilter,ComputeCapabilitiesFilter," in text
    assert "#io_ops_weight_multiplier = -1.0" in text
