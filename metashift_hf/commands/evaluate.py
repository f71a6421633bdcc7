"""``metashift-hf evaluate``: score an ImageNet-1k classifier on a task, per class and per context.

Every flag is declared here (one command); one model on one ``--task`` runs here, a zoo (``--tasks`` or
several ``--model``) in :mod:`metashift_hf.commands.evaluate_zoo`.
"""

from __future__ import annotations

import argparse

from ..core.errors import InputFormatError
from ..core.options import IMAGE_SIZE_MAX, IMAGE_SIZE_MIN, image_size, level, positive_int, shard
from ..evaluate.config import EvalConfig
from ..evaluate.distributed import launched_world
from ..evaluate.options import DEFAULT_ALPHA, DEFAULT_BATCH_SIZE, DEFAULT_MIN_SUBSET_SIZE, MODEL_FORMS
from ..evaluate.run import evaluate
from . import HELP
from .evaluate_zoo import run_zoo
from .run_args import add_cache_dir_argument, add_device_argument
from .task_args import add_splits_argument, add_task_arguments, planning_seed, task_images, task_ref_from_args


def register(subparsers) -> None:

    p = subparsers.add_parser(
        "evaluate",
        help=HELP["evaluate"],
        description=(
            "Run an ImageNet-1k classifier over a task's images (or read its predictions), score it "
            "hierarchy-aware (the top-1 class must lie under the class's matched WordNet synset) or "
            "restricted to the task's classes, and write report.json, report.md, per_group.csv, "
            "predictions.csv and plots/<class>.png into --out."
        ),
    )
    p.add_argument(
        "--model",
        required=True,
        action="append",
        metavar="MODEL",
        help=f"{MODEL_FORMS}; repeat it to evaluate a zoo (each image runs once per model)",
    )
    p.add_argument(
        "--tasks",
        default=None,
        metavar="LIST",
        help="a zoo over many tasks: task ids comma-separated, or all | binary | multiclass (the artifact's "
        "matched tasks); writes one report per model and task plus leaderboard.csv/.md/.png into --out",
    )
    p.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        default="float32",
        help="weights and inputs in this type (bfloat16: faster where the CPU supports it; recorded in the run card)",
    )
    add_cache_dir_argument(p)
    p.add_argument("--no-cache", action="store_true", help="zoo: neither read nor write the logits cache")
    p.add_argument(
        "--publish",
        default=None,
        metavar="NS/NAME",
        help="zoo: then push the leaderboard (csv, md, png, zoo.json, a card) to this Hub dataset repo",
    )
    p.add_argument(
        "--shard",
        type=shard,
        default=None,
        metavar="I/N",
        help="zoo: compute only share I of N (0 <= I < N) of the model passes into the logits cache and "
        "write nothing to --out (job arrays: --shard $SLURM_ARRAY_TASK_ID/N); a later run without "
        "--shard over the same --cache-dir writes the leaderboard and computes nothing. Under torchrun / "
        "accelerate launch the ranks share the passes by themselves (docs/evaluate.md)",
    )
    p.add_argument("--private", action="store_true", help="with --publish: create the repo private")
    p.add_argument(
        "--charts",
        action="store_true",
        help="zoo: also draw each task report's per-class charts (off by default: they cost more than the scoring)",
    )
    add_task_arguments(p, task="optional", images=True, on_missing=True)
    p.add_argument("--hierarchy", default="wordnet", help="wordnet | paper | tree:PATH (default wordnet)")
    p.add_argument(
        "--mode",
        choices=("hierarchy", "restricted"),
        default="hierarchy",
        help="hierarchy: top-1 over all 1,000 classes; restricted: argmax over the task's classes (default hierarchy)",
    )
    p.add_argument(
        "--batch-size",
        type=positive_int,
        default=DEFAULT_BATCH_SIZE,
        help=f"images per forward pass (default {DEFAULT_BATCH_SIZE})",
    )
    add_device_argument(p)
    p.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        metavar="N",
        help="parallel workers: here threads that decode/preprocess images (default on CPU: the cores torch's threads leave "
        "free, 1 to 4; on a GPU: 4 per GPU, within the node's cores per process)",
    )
    p.add_argument(
        "--sample",
        type=positive_int,
        default=None,
        metavar="N",
        help="score at most N images per split, stratified by class (each class keeps its share), "
        "drawn with --seed (a quick look; intervals widen)",
    )
    p.add_argument(
        "--image-size",
        type=image_size,
        default=None,
        metavar="N",
        help=f"feed the model N x N px inputs (its resize and crop scaled; {IMAGE_SIZE_MIN}-{IMAGE_SIZE_MAX}): a quick "
        "look, recorded in the report and keyed apart in the logits cache (default: the model's own size)",
    )
    add_splits_argument(p)
    p.add_argument(
        "--min-subset-size",
        type=positive_int,
        default=DEFAULT_MIN_SUBSET_SIZE,
        help=f"context subsets smaller than this are not ranked as worst nor tested for bugs (default {DEFAULT_MIN_SUBSET_SIZE})",
    )
    p.add_argument(
        "--alpha",
        type=level,
        default=DEFAULT_ALPHA,
        help=f"Benjamini-Hochberg level for context bugs (default {DEFAULT_ALPHA})",
    )
    p.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="output folder: new, empty, or an earlier report with --force (written atomically)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="replace an earlier evaluation report in --out (nothing else is ever replaced)",
    )
    p.add_argument(
        "--save-logits",
        action="store_true",
        help="also write logits.parquet (1,000 logits per image); re-score later with --model predictions:OUT/logits.parquet",
    )
    p.set_defaults(func=run)


def eval_config(args: argparse.Namespace, zoo: bool) -> EvalConfig:
    """The run settings the flags give, read once for one model and for the zoo (``--charts``: the zoo's plots)."""
    return EvalConfig(
        hierarchy=args.hierarchy,
        mode=args.mode,
        batch_size=args.batch_size,
        device=args.device,
        workers=args.workers,
        seed=planning_seed(args),
        min_subset_size=args.min_subset_size,
        alpha=args.alpha,
        dtype=args.dtype,
        sample=args.sample,
        image_size=args.image_size,
        on_missing=args.on_missing,
        save_logits=args.save_logits,
        splits=args.splits,
        progress=args.progress,
        force=args.force,
        plots=args.charts if zoo else None,
    )


def run(args: argparse.Namespace) -> int:

    if (args.task is None) == (args.tasks is None):
        raise InputFormatError(
            "evaluate needs exactly one of --task (one task) and --tasks (a zoo over many)",
            "pass --task ID, or --tasks ID,ID,... | all | binary | multiclass",
        )
    # a shard or a distributed launch splits a zoo's model passes: one task is a zoo of one
    zoo = args.tasks is not None or len(args.model) > 1 or args.shard is not None or launched_world() is not None
    settings = eval_config(args, zoo)  # every number checked before any other work
    if zoo:
        return run_zoo(args, settings)
    if args.publish is not None:
        raise InputFormatError(
            "--publish pushes a zoo's leaderboard",
            "use --tasks (a zoo), or publish a task with `metashift-hf publish`",
        )
    args.model = args.model[0]
    # predictions need no pixels: the registered images are looked up only for a model that reads them
    images = args.images if args.model.startswith("predictions:") else task_images(args)
    report = evaluate(args.model, task_ref_from_args(args, images=images), args.out, settings=settings)
    print(report.summary())
    return 0
