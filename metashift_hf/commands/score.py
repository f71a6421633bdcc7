"""``metashift-hf score``: any model's predictions on a task -> scores.json + scores.md."""

from __future__ import annotations

import argparse

from ..core.fsutil import check_out
from ..research.score import SCORES_KIND, score_plan
from ..scoring.predictions import BOTH_RULE, LABEL_RULE, USE_CHOICES, TaskPredictions
from . import HELP
from .task_args import add_splits_argument, add_task_arguments, task_from_args


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "score",
        help=HELP["score"],
        description="Read a .csv/.parquet with image_id and either prediction (class name or id) or one column per "
        "class (prob_<class> or logit_<class>); the split of each image comes from the task. Writes "
        "scores.json, scores.md and per_group.csv into --out: per split and overall, average, per-group/class/context "
        "accuracy with Wilson 95%% intervals, worst group, adjusted average, balanced accuracy, macro-F1, "
        "ECE (with probabilities or logits) and ID vs OOD (gap, Drop%%). Labels: " + LABEL_RULE + ". Both "
        "kinds: " + BOTH_RULE + ".",
    )
    add_task_arguments(p)
    p.add_argument("--predictions", required=True, metavar="FILE", help="predictions .csv or .parquet")
    p.add_argument(
        "--use",
        choices=USE_CHOICES,
        default=None,
        help="with both a prediction column and prob_/logit_ columns: score this one (default: both, "
        "which must agree)",
    )
    add_splits_argument(p)  # each scored split needs all its images predicted
    p.add_argument("--out", required=True, help="output folder: new, empty, or earlier scores with --force")
    p.add_argument(
        "--force", action="store_true", help="replace earlier scores in --out (nothing else is ever replaced)"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    check_out(
        args.out, SCORES_KIND, force=args.force, inputs=(args.predictions, args.artifact, args.task)
    )  # before scoring
    data = task_from_args(args)
    preds = TaskPredictions.read(args.predictions, data.plan.classes, use=args.use)
    scores = score_plan(preds, data.plan, splits=args.splits)
    scores.write(args.out, force=args.force, inputs=(args.predictions, args.artifact, args.task))
    print(scores.summary())
    print(f"scores: {args.out}/scores.json, {args.out}/scores.md")
    return 0
