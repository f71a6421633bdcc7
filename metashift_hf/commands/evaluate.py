"""``metashift-hf evaluate``: score an ImageNet-1k classifier on a task, per class and per context."""
from __future__ import annotations

import argparse

from ..core.options import level, positive_int, seed, shard
from ..evaluate.options import (
    DEFAULT_ALPHA,
    DEFAULT_BATCH_SIZE,
    DEFAULT_MIN_SUBSET_SIZE,
    MODEL_FORMS,
)
from ..core.errors import InputFormatError
from ..evaluate.run import evaluate
from ..evaluate.leaderboard_hub import check_publish, publish_leaderboard
from ..evaluate.distributed import launched_world
from ..evaluate.zoo import evaluate_zoo, select_tasks
from ..sources.manifest import resolve_input
from .export import parse_overrides
from .task_args import add_splits_argument


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
    p.add_argument("--model", required=True, action="append", metavar="MODEL",
                   help=f"{MODEL_FORMS}; repeat it to evaluate a zoo (each image runs once per model)")
    p.add_argument("--tasks", default=None, metavar="LIST",
                   help="a zoo over many tasks: task ids comma-separated, or all | binary | multiclass (the artifact's "
                        "matched tasks); writes one report per model and task plus leaderboard.csv/.md/.png into --out")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                   help="weights and inputs in this type (bfloat16: faster where the CPU supports it; recorded in the run card)")
    p.add_argument("--cache-dir", default=None, metavar="DIR",
                   help="zoo logits cache root (default: the package cache); logits are keyed by model fingerprint and image sha256")
    p.add_argument("--no-cache", action="store_true", help="zoo: neither read nor write the logits cache")
    p.add_argument("--publish", default=None, metavar="NS/NAME",
                   help="zoo: then push the leaderboard (csv, md, png, zoo.json, a card) to this Hub dataset repo")
    p.add_argument("--shard", type=shard, default=None, metavar="I/N",
                   help="zoo: compute only share I of N (0 <= I < N) of the model passes into the logits cache and "
                        "write nothing to --out (job arrays: --shard $SLURM_ARRAY_TASK_ID/N); a later run without "
                        "--shard over the same --cache-dir writes the leaderboard and computes nothing. Under torchrun / "
                        "accelerate launch the ranks share the passes by themselves (docs/evaluate.md)")
    p.add_argument("--private", action="store_true", help="with --publish: create the repo private")
    p.add_argument("--charts", action="store_true",
                   help="zoo: also draw each task report's per-class charts (off by default: they cost more than the scoring)")
    p.add_argument("--task", required=False,
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
                   help="parallel workers: here threads that decode/preprocess images (default on CPU: the cores torch's threads leave "
                        "free, 1 to 4; on a GPU: 4 per GPU, within the node's cores per process)")
    p.add_argument("--sample", type=positive_int, default=None, metavar="N",
                   help="score at most N images per split, stratified by class (each class keeps its share), "
                        "drawn with --seed (a quick look; intervals widen)")
    add_splits_argument(p)
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

    if (args.task is None) == (args.tasks is None):
        raise InputFormatError("evaluate needs exactly one of --task (one task) and --tasks (a zoo over many)",
                               "pass --task ID, or --tasks ID,ID,... | all | binary | multiclass")
    # a shard or a distributed launch splits a zoo's model passes: one task is a zoo of one
    if args.tasks is not None or len(args.model) > 1 or args.shard is not None or launched_world() is not None:
        return _zoo(args)
    if args.publish is not None:
        raise InputFormatError("--publish pushes a zoo's leaderboard", "use --tasks (a zoo), or publish a task with `metashift-hf publish`")
    args.model = args.model[0]
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
        sample=args.sample, task_options=options or None, config=args.config, revision=args.revision, dtype=args.dtype,
        splits=args.splits,
    )
    print(report.summary())
    return 0


def _zoo(args: argparse.Namespace) -> int:
    """Several models and/or tasks: each (model, image) once, every task scored, a leaderboard."""
    for flag, given in (("--save-logits", args.save_logits), ("--sample", args.sample is not None),
                        ("--on-missing skip", args.on_missing != "error"), ("--config", args.config is not None),
                        ("--revision", args.revision is not None)):
        if given:
            raise InputFormatError(f"{flag} applies to a single --task, not to a zoo",
                                   f"drop {flag.split()[0]}, or evaluate one model on one --task")
    # the repo id, the token and its rights under the namespace: checked before the zoo's work, not after it
    hub = check_publish(args.publish) if args.publish is not None else None
    tasks = args.tasks if args.tasks is not None else args.task
    images = args.images
    if images is None and args.artifact is not None:
        images = resolve_input("images", required=False)  # registered/downloaded once
    named = select_tasks(tasks, args.artifact)
    common, per_task = parse_overrides(args.overrides, named)
    result = evaluate_zoo(
        args.model, named, args.artifact, images, args.out, hierarchy=args.hierarchy, mode=args.mode,
        batch_size=args.batch_size, device=args.device, workers=args.workers, seed=args.seed,
        min_subset_size=args.min_subset_size, alpha=args.alpha, progress=args.progress and not args.no_progress,
        force=args.force, dtype=args.dtype, cache_dir=args.cache_dir, use_cache=not args.no_cache,
        task_options={t: per_task.get(t, common) for t in named if per_task.get(t, common)}, plots=args.charts,
        splits=args.splits, shard=args.shard,
    )
    print(result.summary())
    if args.publish is not None and result.part is None:  # rank 0 / the assembling run publishes
        pushed = publish_leaderboard(args.out, args.publish, private=args.private, hub=hub)
        print(f"published {', '.join(pushed)} to the dataset repo {args.publish}")
    return 0
