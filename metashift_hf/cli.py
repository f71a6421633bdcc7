"""The ``metashift-hf`` command line: one subcommand module per stage of the pipeline."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import importlib
import logging
import os
import sys
import time
from typing import Iterator, NoReturn

from .commands import HELP
from .core import __version__
from .core.errors import MetashiftError
from .core.fsutil import write_error
from .core.names import terminal_safe


# name -> one-line help (commands.HELP, the one source), in --help order. Each module
# metashift_hf.commands.<name> defines ``register(subparsers)``, which adds its parser and sets
# ``func(args) -> int``. Only the command being run is imported (it pulls datasets, pyarrow, torch...),
# so `--help` and errors stay fast.
COMMANDS = HELP


def _selected(argv: list[str]) -> str | None:
    """The command named on the line (the first argument that is not an option), if any."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


class _Parser(argparse.ArgumentParser):
    """argparse with the project's two-line ``error:``/``fix:`` layout for an option refused while parsing
    (an :class:`core.options.OptionError` from a ``type=`` check brings its own fix; argparse's own refusals
    point at ``--help``), instead of the usage block. Sub-parsers inherit the class; the exit status stays 2."""

    def error(self, message: str) -> "NoReturn":
        what, _, fix = message.partition("\n  fix: ")  # str(MetashiftError) is what + "\n  fix: " + fix
        _report(MetashiftError(what, fix or f"see `{self.prog} --help` for the options"))
        self.exit(2)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; the full sub-parser only for the command ``argv`` selects (all of them if ``argv`` is None)."""
    parser = _Parser(
        prog="metashift-hf",
        description="MetaShift on the Hugging Face ecosystem: build, match, tasks, export, publish, evaluate.",
    )
    parser.add_argument("--version", action="version", version=f"metashift-hf {__version__}")
    _add_output_options(parser, False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = set(COMMANDS) if argv is None else {_selected(argv)}
    for name, helptext in COMMANDS.items():
        if name in chosen:
            importlib.import_module(f"metashift_hf.commands.{name}").register(sub)
        else:
            sub.add_parser(name, help=helptext)
    for command_parser in sub.choices.values():
        # Also accepted after the command (`metashift-hf build ... -q`, `metashift-hf tasks list ... -q`);
        # SUPPRESS keeps the value given before the command when the option is not repeated after it.
        _add_output_options_below(command_parser)
    return parser


def _add_output_options_below(parser: argparse.ArgumentParser) -> None:
    """-q/-v on ``parser`` and on every nested sub-command parser (`tasks list`, `experiment paper-dg`)."""
    _add_output_options(parser, argparse.SUPPRESS)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _add_output_options_below(child)


def _add_output_options(parser: argparse.ArgumentParser, default: object) -> None:
    group = parser.add_argument_group("output")
    group.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=default,
        help="print only results, warnings and errors (no progress messages or bars)",
    )
    group.add_argument("-v", "--verbose", action="store_true", default=default, help="also print debugging messages")
    group.add_argument(
        "--no-progress",
        action="store_true",
        default=default,
        help="no progress bars (messages still print; -q silences both)",
    )


class _StderrHandler(logging.Handler):
    """Plain messages to whatever ``sys.stderr`` is at the time of the message (tests swap it)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001  (logging's own contract: never raise from emit)
            self.handleError(record)


@contextlib.contextmanager
def user_output(quiet: bool, verbose: bool, bars: bool = True) -> Iterator[bool]:
    """What the user sees while a command runs: the package's log messages as plain lines on stderr
    (warnings only when ``quiet``, debugging too when ``verbose``). Yields whether progress bars are
    shown: not when quiet, nor without ``bars`` (``--no-progress``), nor when stderr is not a terminal. Everything is put back afterwards, so
    ``main()`` can run more than once in a process."""
    logger = logging.getLogger("metashift_hf")
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO)
    progress = bars and not quiet and sys.stderr.isatty()
    # datasets and huggingface_hub read these when imported (the command imports them later).
    env = {k: os.environ.get(k) for k in _BAR_SWITCHES}
    if not progress:
        os.environ.update(dict.fromkeys(_BAR_SWITCHES, "1"))
    bars = [] if progress else _third_party_bars_off()
    try:
        yield progress
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        for key, value in env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        for enable in bars:
            enable()


_BAR_SWITCHES = ("HF_DATASETS_DISABLE_PROGRESS_BARS", "HF_HUB_DISABLE_PROGRESS_BARS")


def _third_party_bars_off() -> list:
    """Switch off the bars of datasets / huggingface_hub where they are already imported (a command
    run in-process); return how to switch back on what was on."""
    undo = []
    datasets = sys.modules.get("datasets")
    if datasets is not None and datasets.is_progress_bar_enabled():
        datasets.disable_progress_bars()
        undo.append(datasets.enable_progress_bars)
    hub = sys.modules.get("huggingface_hub")
    if hub is not None and not hub.utils.are_progress_bars_disabled():
        hub.utils.disable_progress_bars()
        undo.append(hub.utils.enable_progress_bars)
    return undo


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    atexit.unregister(settle_arrow_threads)  # once per process, however often main is called (tests)
    atexit.register(settle_arrow_threads)
    try:
        # commands pass it as progress= (the one reading of -q and --no-progress)
        with user_output(args.quiet, args.verbose, bars=not args.no_progress) as args.progress:
            rc = int(args.func(args) or 0)
        sys.stdout.flush()  # here, so a reader that went away (`| head`) is caught below, not at exit
        return rc
    except MetashiftError as exc:
        return _report(exc)
    except BrokenPipeError:  # before OSError, its base class
        # The reader (e.g. `| head`) went away: stop quietly, and keep Python's exit-time flush from failing too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:
        # disk full, read-only or forbidden output: the machine's state, said in one line
        known = write_error(exc, exc.filename or "the output")
        if known is None:
            raise
        return _report(known)
    except KeyboardInterrupt:
        print("interrupted: nothing half-written was kept", file=sys.stderr)
        return 130


def settle_arrow_threads() -> None:
    """At exit, before the interpreter shuts down: give pyarrow's I/O threads the GIL until none is left waiting.

    ``datasets`` hands pyarrow Python file objects; pyarrow reads them on its I/O threads, and such a thread may
    still be releasing the last Python buffer of a read (which takes the GIL) just after ``load_dataset`` returned.
    If the command ends right then (a refusal found in the rows or facts just read), the interpreter shuts down
    first, CPython ends the thread that asks for the GIL with pthread_exit, and its unwinding through arrow's
    noexcept destructor aborts the process: "terminate called without an active exception", exit 134 (issue 46
    D10; core dumps show arrow::py::PyBuffer::~PyBuffer -> PyGILState_Ensure -> PyThread_exit_thread on an arrow
    I/O thread). Sleeping releases the GIL; a thread that wanted it finishes within a switch interval."""
    if "pyarrow" not in sys.modules:
        return
    for _ in range(_SETTLE_ROUNDS):
        time.sleep(_SETTLE_SECONDS)


_SETTLE_ROUNDS, _SETTLE_SECONDS = 5, 0.01  # 50 ms at most, once per command that read parquet


def _report(exc: MetashiftError) -> int:
    # a message quotes names the user or a dataset gave (hf:FOLDER, a repo's task id): never raw terminal control
    print(f"error: {terminal_safe(exc.what)}", file=sys.stderr)
    if exc.fix:
        print(f"  fix: {terminal_safe(exc.fix)}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
