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
