"""The ``metashift-hf`` command line: one subcommand module per stage of the pipeline."""
from __future__ import annotations

import argparse
import importlib
import sys

from .core.errors import MetashiftError

# Each module under metashift_hf.commands defines ``register(subparsers)``, which adds its
# parser(s) and sets ``func(args) -> int``. Order here is the order shown in --help.
COMMAND_MODULES = [
    "download",
    "build",
    "distance",
    "stats",
    "match",
    "tasks",
    "export",
    "publish",
    "evaluate",
    "demo",
]


def build_parser() -> argparse.ArgumentParser:
    from .core import __version__

    parser = argparse.ArgumentParser(
        prog="metashift-hf",
        description="MetaShift on the Hugging Face ecosystem: build, match, tasks, export, publish, evaluate.",
    )
    parser.add_argument("--version", action="version", version=f"metashift-hf {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"metashift_hf.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"metashift_hf.commands.{name}":
                continue  # command not shipped in this build
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    try:
        return int(args.func(args) or 0)
    except MetashiftError as exc:
        print(f"error: {exc.what}", file=sys.stderr)
        if exc.fix:
            print(f"  fix: {exc.fix}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: nothing half-written was kept", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
