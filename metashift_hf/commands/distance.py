"""`metashift-hf distance`: meta-graph distance between two subsets of one class."""
from __future__ import annotations

import argparse

from metashift_hf.builders.artifact import Artifact


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "distance",
        help="print the spectral-embedding distance between two subsets of one class",
        description="Euclidean distance between the stored spectral embeddings of two subsets of the same "
                    "class, e.g. metashift-hf distance --artifact DIR 'dog(shelf)' 'dog(bed)'.",
    )
    p.add_argument("--artifact", required=True, metavar="DIR", help="artifact folder written by `metashift-hf build`")
    p.add_argument("a", help="subset name 'subject(context)'")
    p.add_argument("b", help="subset name of the same subject")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:

    artifact = Artifact.load(args.artifact)
    print(f"{artifact.distance(args.a, args.b):.6f}")
    return 0
