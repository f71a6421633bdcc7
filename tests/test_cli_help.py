"""CLI help has one source (commands.HELP): the top-level listing and each command's own parser agree."""
from __future__ import annotations

import argparse

from metashift_hf import cli
from metashift_hf.commands import HELP


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def test_every_command_has_one_help():
    full = _subparsers(cli.build_parser(None))  # every command module registered
    listed = {a.dest: a.help for a in full._choices_actions}
    assert set(listed) == set(HELP) == set(cli.COMMANDS)
    for name, text in HELP.items():
        assert listed[name] == text, name  # the module's own parser says what --help lists
        light = {a.dest: a.help for a in _subparsers(cli.build_parser(["stats"]))._choices_actions}
        assert light[name] == text, name  # the fast listing (modules not imported) says the same


def test_stale_texts_fixed():
    assert "IRM" in HELP["train"] and "spectral" not in HELP["distance"]
