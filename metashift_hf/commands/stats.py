"""`metashift-hf stats`: an artifact's figures next to the published MetaShift statistics."""

from __future__ import annotations

import argparse
import json

from ..sources.stats import compare
from . import HELP


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "stats",
        help=HELP["stats"],
        description=(
            "Print figure, published value, ours, difference and an explanation for every figure. "
            "--verify exits with status 1 when a check fails: exact published figures for artifacts built "
            "from one pinned published pickle; rules and ontology bounds for GQA builds; stats.json and "
            "content hash against the tables for every artifact."
        ),
    )
    p.add_argument(
        "--artifact",
        required=True,
        metavar="ARTIFACT",
        help="artifact folder written by `metashift-hf build --out ARTIFACT`",
    )
    p.add_argument("--verify", action="store_true", help="exit with status 1 when any check fails")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON instead of a table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:

    report = compare(args.artifact)
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.to_text())
    return 1 if args.verify and report.failures else 0
