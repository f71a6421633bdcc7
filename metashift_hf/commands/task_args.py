"""The task arguments every command that reads a task shares: one task source, three forms.

``--task`` is a task id planned on ``--artifact`` (with ``--seed``/``--set``), an exported repo folder,
or a Hub dataset repo id ``NAMESPACE/NAME`` (``--config`` when it holds several, ``--revision``).
"""
from __future__ import annotations

import argparse

from ..core.options import seed
from ..hub.task_source import TaskData, open_task
from .export import parse_overrides

TASK_HELP = ("a task: an exported repo folder (`metashift-hf export`), a Hub dataset repo id NAMESPACE/NAME, or a "
             "task id such as paper-subpop-cat-dog-p12 with --artifact")


def add_task_arguments(p: argparse.ArgumentParser, *, task_flag: bool = True) -> None:
    """--task (unless the command takes it as a positional), --artifact, --config, --revision, --seed, --set."""
    if task_flag:
        p.add_argument("--task", required=True, help=TASK_HELP)
    p.add_argument("--artifact", default=None, metavar="ARTIFACT",
                   help="artifact folder from `metashift-hf build`, when the task is a task id")
    p.add_argument("--config", default=None, help="config of a folder or Hub repo that holds several tasks")
    p.add_argument("--revision", default=None, help="Hub branch, tag or commit (default: main)")
    p.add_argument("--seed", type=seed, default=None,
                   help="seed of the task's sampling, with --artifact (default 0; a folder or repo keeps its own)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="task option with --artifact, e.g. scale=0.5 (as for export); repeatable")


SPLITS_HELP = ("score only these splits, e.g. --splits test (as WILDS' --eval_splits; default: every split of the task). "
               "The headline is the test split whatever is scored, never train")


def add_splits_argument(p: argparse.ArgumentParser) -> None:
    """--splits SPLIT [SPLIT ...]: the one declaration of the flag (score, evaluate)."""
    p.add_argument("--splits", nargs="+", default=None, metavar="SPLIT", help=SPLITS_HELP)


def task_from_args(args: argparse.Namespace, task: str | None = None, images=None) -> TaskData:
    """The task the arguments name (``task`` overrides ``args.task``), resolved once."""
    task = args.task if task is None else task
    common, per_task = parse_overrides(args.overrides, [task])
    return open_task(task, artifact=args.artifact, images=images, config=args.config, revision=args.revision,
                     seed=args.seed, options=per_task.get(task, common))


__all__ = ["add_task_arguments", "task_from_args", "TASK_HELP"]
