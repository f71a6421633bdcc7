"""What the user sees: library messages go through logging; the CLI shows them on stderr, -q keeps
only warnings and errors, -v adds debugging, and progress bars run only on a terminal."""

from __future__ import annotations

import logging
import pickle
import sys

import datasets
import pytest

from fixtures.worlds import two_cluster_subsets
from metashift_hf import cli
from metashift_hf.cli import COMMANDS, build_parser, user_output


@pytest.fixture
def pickle_file(tmp_path):
    path = tmp_path / "candidates.pkl"
    path.write_bytes(pickle.dumps({k: set(v) for k, v in two_cluster_subsets(seed=1, contexts=5).items()}))
    return path


def _build(capsys, pickle_file, out, *options: str) -> tuple[str, str]:
    capsys.readouterr()
    assert cli.main([*options, "build", "--candidate-subsets", str(pickle_file), "--out", str(out), "--no-plots"]) == 0
    captured = capsys.readouterr()
    return captured.out, captured.err


def test_messages_on_stderr_and_quiet_keeps_only_the_result(capsys, pickle_file, tmp_path):
    out, err = _build(capsys, pickle_file, tmp_path / "a")
    assert "rules: 2 classes" in err and "meta-graphs: analysed 2 classes" in err  # builders.build progress
    assert "rules:" not in out and f"built {tmp_path / 'a'}" in out  # the result stays on stdout
    for where in (["-q"], ["--quiet"]):
        out_q, err_q = _build(capsys, pickle_file, tmp_path / f"q{len(where[0])}", *where)
        assert err_q == "" and "classes: 2" in out_q


def test_options_come_before_or_after_any_command():
    parser = build_parser()  # every command's full parser
    for name in COMMANDS:
        sub = parser._subparsers._group_actions[0].choices[name]
        assert {"-q", "--quiet", "-v", "--verbose"} <= set(sub._option_string_actions), name
    chosen = build_parser(["build"])
    assert chosen.parse_args(["-q", "build", "--out", "x"]).quiet is True
    assert chosen.parse_args(["build", "--out", "x", "--quiet"]).quiet is True
    args = chosen.parse_args(["build", "--out", "x"])
    assert args.quiet is False and args.verbose is False
    assert chosen.parse_args(["--verbose", "build", "--out", "x"]).verbose is True


def test_levels_warnings_under_quiet_and_debug_when_verbose(capsys):
    log = logging.getLogger("metashift_hf.some_module")
    for quiet, verbose, shown in (
        (False, False, {"info", "warning"}),
        (True, False, {"warning"}),
        (False, True, {"debug", "info", "warning"}),
    ):
        capsys.readouterr()
        with user_output(quiet, verbose):
            log.debug("debug")
            log.info("info")
            log.warning("warning")
        assert set(capsys.readouterr().err.split()) == shown, (quiet, verbose)


def test_progress_only_on_a_terminal_and_everything_put_back(monkeypatch):
    root = logging.getLogger("metashift_hf")
    handlers, level = list(root.handlers), root.level
    datasets.enable_progress_bars()  # (the demo switches them off for the whole process)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    with user_output(False, False) as progress:
        assert progress is True and datasets.is_progress_bar_enabled()
    with user_output(True, False) as progress:
        assert progress is False and not datasets.is_progress_bar_enabled()
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    with user_output(False, False) as progress:
        assert progress is False and not datasets.is_progress_bar_enabled()
    assert datasets.is_progress_bar_enabled()  # back as it was
    assert root.handlers == handlers and root.level == level
