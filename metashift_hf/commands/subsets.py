"""`metashift-hf subsets`: the context subsets of one class (or of all), with size and community."""

from __future__ import annotations

import argparse

from metashift_hf.builders.artifact import Artifact

from . import HELP
from .table import print_table


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "subsets",
        help=HELP["subsets"],
        description="Kept subsets (at least 25 images, of a class) by default, largest first; use their names "
        "with `metashift-hf distance` and `--set` options. Python: Artifact.subsets_table().",
    )
    p.add_argument("classes", nargs="*", metavar="CLASS", help="only these classes (default: every class)")
    p.add_argument(
        "--artifact", required=True, metavar="ARTIFACT", help="artifact folder written by `metashift-hf build`"
    )
    p.add_argument("--all", action="store_true", help="also candidate subsets that did not pass the rules")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    art = Artifact.load(args.artifact)
    for cls in args.classes:
        art.subsets_of(cls)  # unknown class: UnknownNameError with a did-you-mean
    t = art.subsets_table()
    if args.classes:
        t = t[t["subject"].isin(args.classes)]
    if not args.all:
        t = t[t["kept"]]
    t = t.sort_values(["subject", "n_images", "subset"], ascending=[True, False, True])
    rows = [
        (
            r.subset,
            r.subject,
            r.context,
            r.kind,
            int(r.n_images),
            "yes" if r.kept else "no",
            int(r.community) if r.community >= 0 else "-",
        )
        for r in t.itertuples()
    ]
    print_table(("SUBSET", "CLASS", "CONTEXT", "KIND", "IMAGES", "KEPT", "COMMUNITY"), rows)
    print(f"{len(rows):,} subsets" + ("" if args.all else " (kept only; --all for every candidate)"))
    return 0
