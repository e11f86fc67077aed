"""novasched-manage follows the conventions operators know from openstack's commands: a
version, a description on every sub-command's help page, help on every option."""

from __future__ import annotations

import argparse

from scheduler.cmd import manage


def _commands(parser, path=()):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _commands(child, (*path, name))


def test_every_sub_command_has_a_description_and_every_option_help():
    missing = []
    for path, parser in _commands(manage.build_parser()):
        if path and not parser.description:
            missing.append(" ".join(path) + ": no description")
        for action in parser._actions:
            if action.option_strings and not action.help and action.dest != "help":
                missing.append(f"{' '.join(path) or 'novasched-manage'} {action.option_strings[0]}")
    assert missing == []


def test_version(capsys):
    assert manage.main(["--version"]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith("novasched-manage ") and len(out.split()) == 2


def test_help_builds_the_parser_without_the_libraries_only_commands_need():
    """--help builds every command's parser; SQLAlchemy, NumPy, the cell reads and the
    progress bar are imported only when a command runs (start-up under half a second)."""
    import subprocess
    import sys

    code = (
        "import sys; import scheduler.cmd.manage as m; m.build_parser(); "
        "print(' '.join(k for k in ('sqlalchemy', 'numpy', 'db', 'tqdm', "
        "'scheduler.records.store', 'scheduler.hosts.manager') if k in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


def test_a_command_leaves_the_process_logging_as_it_found_it():
    """A command quiets the down hosts' per-request warning while it runs; in a process that
    goes on (a test run, an embedding), the warning is heard again afterwards."""
    import logging

    quiet = logging.getLogger("filters.compute_filter")
    before = quiet.level
    assert manage.main(["--config-file", "/nonexistent/nova.conf", "host", "list"]) != 0
    assert quiet.level == before


def test_every_command_that_prints_takes_f_json_and_yaml():
    """Every command that prints figures, records or results takes openstack's ``-f``: json
    and yaml everywhere, csv and value where the output is rows."""
    parser = manage.build_parser()
    printing = {
        ("cell", "list"): True,
        ("host", "list"): True,
        ("capacity",): True,
        ("check",): True,
        ("decision", "list"): True,
        ("explain",): False,
        ("decision", "show"): False,
        ("replay",): False,
    }
    commands = dict(_commands(parser))
    for path, rows in printing.items():
        fmt = next(a for a in commands[path]._actions if "--format" in a.option_strings)
        assert "-f" in fmt.option_strings, path
        assert {"table", "json", "yaml"} <= set(fmt.choices), path
        assert ({"csv", "value"} <= set(fmt.choices)) is rows, path
