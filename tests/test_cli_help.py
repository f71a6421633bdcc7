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


def _walk(parser: argparse.ArgumentParser, prefix: str = ""):
    yield prefix.strip(), parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, f"{prefix} {name}")


def test_task_flags_are_declared_once():
    """--seed (task sampling) and --set read the same everywhere: one default, one help (commands/task_args.py)."""
    from metashift_hf.commands.task_args import DEFAULT_SEED, SEED_HELP

    seen, set_help = [], None
    for name, parser in _walk(cli.build_parser(None)):
        flags = {o: a for a in parser._actions for o in a.option_strings}
        if "--set" in flags and name != "experiment ood-levels":  # its --set are shift-family options
            seen.append(name)
            set_help = set_help or flags["--set"].help
            assert flags["--set"].help == set_help and flags["--set"].metavar == "[TASK:]KEY=VALUE", name
            assert flags["--seed"].default is None and flags["--seed"].help == SEED_HELP, name
    assert {"evaluate", "export", "publish", "score", "train", "bugs", "tasks show", "experiment compare"} <= set(seen)
    assert f"default {DEFAULT_SEED}" in SEED_HELP
