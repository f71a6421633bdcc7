"""`metashift-hf classes`: the classes of an artifact with their subsets, images and communities."""

from __future__ import annotations

import argparse

from metashift_hf.builders.artifact import Artifact
from metashift_hf.tasks.families import class_task_id

from . import HELP
from .table import print_table


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "classes",
        help=HELP["classes"],
        description="Every class that passes the rules (more than 5 kept subsets of at least 25 images), "
        "largest first. `metashift-hf subsets CLASS` lists one class's subsets.",
    )
    p.add_argument(
        "--artifact", required=True, metavar="ARTIFACT", help="artifact folder written by `metashift-hf build`"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    art = Artifact.load(args.artifact)
    rows = []
    for cls in art.classes():
        info = art.class_info(cls)
        rows.append(
            (
                cls,
                int(info["n_subsets"]),
                int(info["n_images"]),
                int(info["n_communities"]),
                info["embedding_status"],
                class_task_id(cls),
            )
        )
    rows.sort(key=lambda r: (-r[2], r[0]))
    print_table(("CLASS", "SUBSETS", "IMAGES", "COMMUNITIES", "EMBEDDING", "TASK"), rows)
    print(f"{len(rows):,} classes in {art.root} (provenance: {art.provenance})")
    return 0
