"""Builders shared by the ``novasched-manage`` tests."""

from __future__ import annotations

from oslo_config import cfg

from scheduler import conf as novasched_conf
from scheduler.cmd import manage


def make_conf(tmp_path, text: str = "") -> cfg.ConfigOpts:
    """A ConfigOpts with novasched's options, read from a nova.conf holding ``text``."""
    path = tmp_path / "nova.conf"
    path.write_text(text)
    conf = cfg.ConfigOpts()
    novasched_conf.register_opts(conf)
    conf(["--config-file", str(path)], project="nova", default_config_files=[])
    return conf


def run_manage(capsys, *argv: str) -> tuple[int, str, str]:
    """``novasched-manage ARGV`` in this process: its exit status, stdout and stderr."""
    rc = manage.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err
