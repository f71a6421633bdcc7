"""``metashift-hf evaluate``: score an ImageNet-1k classifier on a task, per class and per context."""
from __future__ import annotations

import argparse

from ..core.options import level, positive_int, seed
from ..evaluate.options import (
    DEFAULT_ALPHA,
    DEFAULT_BATCH_SIZE,
    DEFAULT_MIN_SUBSET_SIZE,
    MODEL_FORMS,
)
from ..evaluate.run import evaluate
from ..manifest import resolve_input
from .export import parse_overrides


def register(subparsers) -> None:

    p = subparsers.add_parser(
        "evaluate",
        help="evaluate a pretrained ImageNet-1k model on a matched task: per class, per context, worst context, bugs",
        description=(
            "Run an ImageNet-1k classifier over a task's images (or read its predictions), score it "
            "hierarchy-aware (the top-1 class must lie under the class's matched WordNet synset) or "
            "restricted to the task's classes, and write report.json, report.md, per_group.csv, "
            "predictions.csv and plots/<class>.png into --out."
        ),
    )
    p.add_argument("--model", required=True, help=f"{MODEL_FORMS}")
    p.add_argument("--task", required=True,
                   help="an exported repo folder, a Hub dataset repo id NAMESPACE/NAME, or a task id (imagenet-5, "
                        "bin-cat-dog, paper-dg-cat-dog-1, ...) with --artifact and --images")
    p.add_argument("--artifact", default=None, metavar="ARTIFACT", help="artifact folder from `metashift-hf build` (task ids)")
    p.add_argument("--config", default=None, help="config of a folder or Hub repo that holds several tasks")
    p.add_argument("--revision", default=None, help="Hub branch, tag or commit (default: main)")
    p.add_argument("--images", default=None, help="image folder of <id>.jpg or GQA images.zip (task ids on --artifact)")
    p.add_argument("--hierarchy", default="wordnet", help="wordnet | paper | tree:PATH (default wordnet)")
    p.add_argument("--mode", choices=("hierarchy", "restricted"), default="hierarchy",
                   help="hierarchy: top-1 over all 1,000 classes; restricted: argmax over the task's classes (default hierarchy)")
    p.add_argument("--batch-size", type=positive_int, default=DEFAULT_BATCH_SIZE, help=f"images per forward pass (default {DEFAULT_BATCH_SIZE})")
    p.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N (default cpu)")
    p.add_argument("--workers", type=positive_int, default=None, metavar="N",
                   help="parallel workers: here threads that decode/preprocess images (default min(4, CPUs))")
    p.add_argument("--sample", type=positive_int, default=None, metavar="N",
                   help="score at most N images per split, stratified by class (each class keeps its share), "
                        "drawn with --seed (a quick look; intervals widen)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="task option, e.g. scale=0.5 (as for export/tasks show); repeatable")
    p.add_argument("--seed", type=seed, default=0, help="seed of the task's sampling (default 0)")
    p.add_argument("--on-missing", choices=("error", "skip"), default="error",
                   help="images missing or corrupt in --images: error (default; lists them) or skip them")
    p.add_argument("--min-subset-size", type=positive_int, default=DEFAULT_MIN_SUBSET_SIZE,
                   help=f"context subsets smaller than this are not ranked as worst nor tested for bugs (default {DEFAULT_MIN_SUBSET_SIZE})")
    p.add_argument("--alpha", type=level, default=DEFAULT_ALPHA, help=f"Benjamini-Hochberg level for context bugs (default {DEFAULT_ALPHA})")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder: new, empty, or an earlier report with --force (written atomically)")
    p.add_argument("--force", action="store_true", help="replace an earlier evaluation report in --out (nothing else is ever replaced)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--save-logits", action="store_true",
                   help="also write logits.parquet (1,000 logits per image); re-score later with --model predictions:OUT/logits.parquet")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:

    images = args.images
    if images is None and args.artifact is not None and not args.model.startswith("predictions:"):

        images = resolve_input("images", required=False)  # registered/downloaded once
    common, per_task = parse_overrides(args.overrides, [args.task])
    options = per_task.get(args.task, common)
    report = evaluate(
        args.model, args.task, args.artifact, images, args.out,
        hierarchy=args.hierarchy, mode=args.mode, batch_size=args.batch_size, device=args.device,
        workers=args.workers, seed=args.seed, min_subset_size=args.min_subset_size, alpha=args.alpha,
        progress=args.progress and not args.no_progress, save_logits=args.save_logits, on_missing=args.on_missing, force=args.force,
        sample=args.sample, task_options=options or None, config=args.config, revision=args.revision,
    )
    print(report.summary())
    return 0
