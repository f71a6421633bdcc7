"""``metashift-hf bugs``: context bugs of any predictions file (a trained model's, or any `score` input)."""

from __future__ import annotations

import argparse

from ..core.fsutil import check_out
from ..core.options import level, positive_int
from ..research.bugs import BUGS_KIND, find_bugs
from . import HELP
from .task_args import add_task_arguments, task_from_args


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "bugs",
        help=HELP["bugs"],
        description="Read predictions as `metashift-hf score` does (e.g. `metashift-hf train`'s seed-<s>/predictions.csv). "
        "Every context subset of a class with at least --min-n images of --split is compared with the "
        "class's other images (one-sided two-proportion z-test, Benjamini-Hochberg across all tests). "
        "Writes bugs.json and bugs.md: harmful contexts per class, ordered by meta-graph distance from the "
        "class's largest community (nearest first).",
    )
    add_task_arguments(p)
    p.add_argument("--predictions", required=True, metavar="FILE", help="predictions .csv or .parquet")
    p.add_argument("--split", default="test", help="split to test (default test)")
    p.add_argument("--min-n", type=positive_int, default=10, help="smallest context subset tested (default 10)")
    p.add_argument("--alpha", type=level, default=0.05, help="false discovery rate (default 0.05)")
    p.add_argument("--top", type=positive_int, default=5, help="harmful contexts listed per class (default 5)")
    p.add_argument("--out", required=True, help="output folder: new, empty, or an earlier bug report with --force")
    p.add_argument("--force", action="store_true", help="replace an earlier bug report in --out")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    inputs = (args.predictions, args.artifact, args.task)
    check_out(args.out, BUGS_KIND, force=args.force, inputs=inputs)  # before the work
    report = find_bugs(args.predictions, task_from_args(args), split=args.split, min_n=args.min_n, alpha=args.alpha)
    report.write(args.out, force=args.force, inputs=inputs, top=args.top)
    d = report.to_dict(args.top)
    print(f"{report.task_id} ({report.split}): {d['n_tests']} context subsets tested, {d['n_bugs']} significant")
    for cls, rows in d["harmful"].items():
        print(
            f"  {cls}: "
            + ", ".join(f"{r['subset']} {100 * r['accuracy']:.0f}% vs {100 * r['rest_accuracy']:.0f}%" for r in rows)
        )
    print(f"report: {args.out}/bugs.json, {args.out}/bugs.md")
    return 0
