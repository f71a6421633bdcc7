"""``metashift-hf demo``: run the whole pipeline on the embedded demo world."""

from __future__ import annotations

import argparse

from metashift_hf.core.options import positive_int, seed
from metashift_hf.demo import run_demo

from . import HELP


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help=HELP["demo"],
        description="Generate the seeded demo world (scene graphs + JPEGs), build MetaShift on it, "
        "match to ImageNet, make tasks, export them as Hub repos, load them back "
        "and (with the eval extra) evaluate EfficientNet-Lite0.",
    )
    p.add_argument("--out", default="demo-output", help="output folder (default: demo-output)")
    p.add_argument("--seed", type=seed, default=0, help="seed of the demo world and task sampling")
    p.add_argument("--n-images", type=positive_int, default=None, help="size of the demo world (default: generator's)")
    p.add_argument(
        "--no-eval",
        action="store_true",
        help="skip the training and EfficientNet-Lite0 evaluation stages (no torch needed)",
    )
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:

    run_demo(args.out, seed=args.seed, n_images=args.n_images, evaluate=not args.no_eval)
    return 0
