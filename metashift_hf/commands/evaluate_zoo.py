"""``metashift-hf evaluate --tasks ...`` / several ``--model``: a zoo, each (model, image) once, a leaderboard.

The flags are declared once, in ``commands/evaluate.py`` (one command, two modules: one model vs the zoo).
"""

from __future__ import annotations

import argparse

from ..core.errors import InputFormatError
from ..evaluate.config import EvalConfig
from ..evaluate.leaderboard_hub import check_publish, publish_leaderboard
from ..evaluate.zoo import evaluate_zoo, select_tasks
from ..hub.task_open import TaskOrigin
from ..models import CacheConfig
from .task_args import parse_overrides, task_images


def run_zoo(args: argparse.Namespace, settings: EvalConfig) -> int:
    """Several models and/or tasks: each (model, image) once, every task scored, a leaderboard.

    ``settings``: the run settings the flags give (commands.evaluate.eval_config)."""
    for flag, given in (
        ("--save-logits", args.save_logits),
        ("--sample", args.sample is not None),
        ("--on-missing skip", args.on_missing != "error"),
        ("--config", args.config is not None),
        ("--revision", args.revision is not None),
    ):
        if given:
            raise InputFormatError(
                f"{flag} applies to a single --task, not to a zoo",
                f"drop {flag.split()[0]}, or evaluate one model on one --task",
            )
    # the repo id, the token and its rights under the namespace: checked before the zoo's work, not after it
    hub = check_publish(args.publish) if args.publish is not None else None
    tasks = args.tasks if args.tasks is not None else args.task
    images = task_images(args)
    named = select_tasks(tasks, args.artifact)
    common, per_task = parse_overrides(args.overrides, named)
    task_options = {t: per_task.get(t, common) for t in named if per_task.get(t, common)}
    # the zoo's task ids are planned on --artifact (its seed is the settings' --seed); folders and repos as they are
    origin = TaskOrigin(artifact=args.artifact, images=images, task_options=task_options) if args.artifact else None
    if origin is None and task_options:
        raise InputFormatError(
            "--set applies to task ids planned on --artifact, and none was given",
            "pass --artifact ARTIFACT, or drop --set (an exported folder or Hub repo is planned already)",
        )
    result = evaluate_zoo(
        args.model,
        named,
        origin,
        args.out,
        settings=settings,
        cache=CacheConfig(args.cache_dir, use=not args.no_cache),
        shard=args.shard,
    )
    print(result.summary())
    if args.publish is not None and result.part is None:  # rank 0 / the assembling run publishes
        pushed = publish_leaderboard(args.out, args.publish, private=args.private, hub=hub)
        print(f"published {', '.join(pushed)} to the dataset repo {args.publish}")
    return 0


__all__ = ["run_zoo"]
