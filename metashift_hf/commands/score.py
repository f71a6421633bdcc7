"""``metashift-hf score``: any model's predictions on a task -> scores.json + scores.md."""
from __future__ import annotations

import argparse

from ..core.fsutil import check_out
from ..score import SCORES_KIND, score
from .export import parse_overrides

HELP = "score a predictions file (class or probabilities per image) on a task: per split, group, worst group, ID/OOD"


def add_task_arguments(p: argparse.ArgumentParser) -> None:
    """--task/--artifact/--seed/--set, shared by the commands that read a task plan."""
    p.add_argument("--task", required=True, help="task id, e.g. paper-subpop-cat-dog-p12")
    p.add_argument("--artifact", required=True, metavar="ARTIFACT", help="artifact folder from `metashift-hf build`")
    p.add_argument("--seed", type=int, default=0, help="seed of the task's sampling (default 0)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="task option, e.g. scale=0.5 (as for export); repeatable")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "score", help=HELP,
        description="Read a .csv/.parquet with image_id and either prediction (class name or id) or one column per "
                    "class (prob_<class> or logit_<class>); the split of each image comes from the task. Writes "
                    "scores.json and scores.md into --out: per split and overall, average, per-group/class/context "
                    "accuracy with Wilson 95%% intervals, worst group, adjusted average, balanced accuracy, macro-F1, "
                    "ECE (with probabilities or logits) and ID vs OOD (gap, Drop%%).")
    add_task_arguments(p)
    p.add_argument("--predictions", required=True, metavar="FILE", help="predictions .csv or .parquet")
    p.add_argument("--splits", nargs="+", default=None, metavar="SPLIT",
                   help="score only these splits (default: every split of the task; each needs all its images predicted)")
    p.add_argument("--out", required=True, help="output folder: new, empty, or earlier scores with --force")
    p.add_argument("--force", action="store_true", help="replace earlier scores in --out (nothing else is ever replaced)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    options, _ = parse_overrides(args.overrides, [args.task])
    check_out(args.out, SCORES_KIND, force=args.force, inputs=(args.predictions, args.artifact))  # before scoring
    scores = score(args.predictions, args.task, args.artifact, seed=args.seed, splits=args.splits, **options)
    scores.write(args.out, force=args.force, inputs=(args.predictions, args.artifact))
    print(scores.summary())
    print(f"scores: {args.out}/scores.json, {args.out}/scores.md")
    return 0
