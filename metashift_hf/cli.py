"""The ``metashift-hf`` command line: one subcommand module per stage of the pipeline."""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from .core import __version__
from .core.errors import MetashiftError
from .core.fsutil import write_error

# name -> one-line help, in --help order. Each module metashift_hf.commands.<name> defines
# ``register(subparsers)``, which adds its parser and sets ``func(args) -> int``. Only the command
# being run is imported (it pulls datasets, pyarrow, torch...), so `--help` and errors stay fast.
COMMANDS = {
    "download": "download GQA / published MetaShift files (resumable, sha256-verified) or register local copies",
    "build": "build MetaShift (subsets, meta-graphs, communities, embeddings) into an artifact folder",
    "distance": "print the spectral-embedding distance between two subsets of one class",
    "stats": "compare a built artifact with the published MetaShift statistics",
    "match": "match MetaShift names to WordNet/ImageNet-1k and write the task registry",
    "tasks": "list or show tasks (binary/multiclass from `metashift-hf match`, paper and per-class tasks)",
    "export": "write task repos (parquet shards with embedded images + README card) into a folder",
    "publish": "export tasks and push them to the Hub as dataset repos, plus a collection",
    "evaluate": "evaluate a pretrained ImageNet-1k model on a matched task: per class, per context, worst context, bugs",
    "score": "score a predictions file (class or probabilities per image) on a task: per split, group, worst group, ID/OOD",
    "train": "train ERM / reweight / GroupDRO baselines (EfficientNet-Lite0 linear probe or fine-tuning) and score them",
    "experiment": "run an experiment: paper-dg, paper-subpop, ood-levels (shift curves), clustered (k-means OOD sets), conflicts",
    "bugs": "context bugs of any model's predictions on a task (two-proportion test + Benjamini-Hochberg), per class",
    "demo": "run the whole pipeline on the embedded demo data",
}


def _selected(argv: list[str]) -> str | None:
    """The command named on the line (the first argument that is not an option), if any."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; the full sub-parser only for the command ``argv`` selects (all of them if ``argv`` is None)."""
    parser = argparse.ArgumentParser(
        prog="metashift-hf",
        description="MetaShift on the Hugging Face ecosystem: build, match, tasks, export, publish, evaluate.",
    )
    parser.add_argument("--version", action="version", version=f"metashift-hf {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = set(COMMANDS) if argv is None else {_selected(argv)}
    for name, helptext in COMMANDS.items():
        if name in chosen:
            importlib.import_module(f"metashift_hf.commands.{name}").register(sub)
        else:
            sub.add_parser(name, help=helptext)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    try:
        return int(args.func(args) or 0)
    except MetashiftError as exc:
        return _report(exc)
    except OSError as exc:
        # disk full, read-only or forbidden output: the machine's state, said in one line
        known = write_error(exc, exc.filename or "the output")
        if known is None:
            raise
        return _report(known)
    except BrokenPipeError:
        # The reader (e.g. `| head`) went away: stop quietly, and keep Python's exit-time flush from failing too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("interrupted: nothing half-written was kept", file=sys.stderr)
        return 130


def _report(exc: MetashiftError) -> int:
    print(f"error: {exc.what}", file=sys.stderr)
    if exc.fix:
        print(f"  fix: {exc.fix}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
