"""The task arguments every command that reads a task shares: one task source, three forms.

``--task`` is a task id planned on ``--artifact`` (with ``--seed``/``--set``), an exported repo folder,
or a Hub dataset repo id ``NAMESPACE/NAME`` (``--config`` when it holds several, ``--revision``).
"""

from __future__ import annotations

import argparse
import json
from typing import Literal

from ..core.errors import MetashiftError, did_you_mean
from ..core.options import ON_MISSING, seed
from ..hub.task_data import DEFAULT_SEED, TaskData, TaskRef, reads_dataset_images
from ..hub.task_open import TaskOrigin, open_task
from ..sources.manifest import resolve_input


TASK_HELP = (
    "a task: an exported repo folder (`metashift-hf export`), a Hub dataset repo id NAMESPACE/NAME, or a "
    "task id such as paper-subpop-cat-dog-p12 with --artifact"
)


SEED_HELP = (
    f"seed of the task's sampling, with --artifact (default {DEFAULT_SEED}; an exported folder or Hub repo "
    "keeps its own)"
)
IMAGES_HELP = "image folder of <id>.jpg or GQA images.zip, for task ids on --artifact (default: the registered one)"
TaskFlag = Literal["flag", "optional", "many", "none"]


def add_task_arguments(
    p: argparse.ArgumentParser,
    *,
    task: TaskFlag = "flag",
    images: bool = False,
    hub: bool = True,
    on_missing: bool = False,
    planning: bool = True,
    artifact_required: bool = False,
) -> None:
    """The one declaration of the task flags: the task (``--task``, required or ``optional``; ``many``:
    positional task ids; ``none``: the command declares it), --artifact (``artifact_required``: the command plans
    on a build only), --images (``images``), --config and --revision (``hub``: the task may be a folder or Hub
    repo), --seed and --set (``planning``; off where a command's --seed seeds something else), --on-missing
    (``on_missing``)."""
    if task == "many":
        p.add_argument(
            "tasks",
            nargs="*",
            metavar="TASK",
            help="task ids, e.g. paper-dg-cat-dog-1 bin-cat-dog (see `metashift-hf tasks list`)",
        )
    elif task != "none":
        p.add_argument("--task", required=task == "flag", default=None, help=TASK_HELP)
    p.add_argument(
        "--artifact",
        default=None,
        required=artifact_required,
        metavar="ARTIFACT",
        help="artifact folder from `metashift-hf build`"
        + ("" if artifact_required else ", when the task is a task id"),
    )
    if images:
        p.add_argument("--images", default=None, help=IMAGES_HELP)
    if hub:
        p.add_argument("--config", default=None, help="config of a folder or Hub repo that holds several tasks")
        p.add_argument("--revision", default=None, help="Hub branch, tag or commit (default: main)")
    if planning:
        p.add_argument("--seed", type=seed, default=None, help=SEED_HELP)
        p.add_argument(
            "--set",
            dest="overrides",
            action="append",
            default=[],
            metavar="[TASK:]KEY=VALUE",
            help="task option with --artifact, e.g. scale=0.5 for every task, paper-dg-cat-dog-1:scale=0.5 "
            "for one, class-cat:scale=null to drop it for one; repeatable",
        )
    if on_missing:
        p.add_argument(
            "--on-missing",
            choices=ON_MISSING,
            default="error",
            help="images missing or corrupt in --images: error (default; lists them) or skip them",
        )


def task_images(args: argparse.Namespace) -> str | None:
    """--images, else, for task ids planned on --artifact, the image source registered once with
    `metashift-hf download` (None when there is none: a folder or repo carries its own images, and an artifact
    built with `--hf-dataset ... --image-column` reads its dataset's image column)."""
    if getattr(args, "images", None):
        return args.images
    artifact = getattr(args, "artifact", None)
    if not artifact or _reads_own_images(artifact):
        return None
    return resolve_input("images", required=False)


def _reads_own_images(artifact: str) -> bool:
    try:
        return reads_dataset_images(artifact)
    except MetashiftError:
        return False  # not a readable build: the resolver refuses it with its own message, after this


def planning_seed(args: argparse.Namespace) -> int:
    """The seed a task id is planned with: --seed, else :data:`DEFAULT_SEED`."""
    return DEFAULT_SEED if args.seed is None else args.seed


def parse_overrides(items: list[str], tasks: list[str]) -> tuple[dict, dict[str, dict]]:
    """``--set`` values -> (options for every task, per-task options that replace them)."""
    common: dict = {}
    per_task: dict[str, dict] = {}
    for item in items:
        key, eq, raw = item.partition("=")
        task, colon, key = key.rpartition(":") if ":" in key else ("", "", key)
        if not eq or not key:
            raise MetashiftError(
                f"--set {item!r} is not KEY=VALUE", "write e.g. --set scale=0.5 or --set paper-dg-cat-dog-1:scale=0.5"
            )
        try:
            value = json.loads(raw)  # numbers, true/false, lists; anything else stays a string
        except json.JSONDecodeError:
            value = raw
        if task and task not in tasks:
            raise MetashiftError(
                f"--set {item!r} names task {task!r}, which is not being exported{did_you_mean(task, tasks)}",
                "name one of the TASK arguments before the colon",
            )
        (per_task.setdefault(task, {}) if task else common)[key] = value
    # A per-task entry starts from the common options and replaces what it names; KEY=null drops
    # a common option for that task (collections, for instance, take no size options).
    return common, {t: {k: v for k, v in {**common, **o}.items() if v is not None} for t, o in per_task.items()}


SPLITS_HELP = (
    "score only these splits, e.g. --splits test (as WILDS' --eval_splits; default: every split of the task). "
    "The headline is the test split whatever is scored, never train"
)


def add_splits_argument(p: argparse.ArgumentParser) -> None:
    """--splits SPLIT [SPLIT ...]: the one declaration of the flag (score, evaluate)."""
    p.add_argument("--splits", nargs="+", default=None, metavar="SPLIT", help=SPLITS_HELP)


def task_ref_from_args(args: argparse.Namespace, task: str | None = None, images=None) -> TaskRef:
    """The task request the flags spell (``task`` overrides ``args.task``; ``images`` the resolved --images)."""
    task = args.task if task is None else task
    common, per_task = parse_overrides(args.overrides, [task])
    return TaskRef(
        task,
        artifact=args.artifact,
        images=images,
        seed=args.seed,
        config=getattr(args, "config", None),
        revision=getattr(args, "revision", None),
        options=per_task.get(task, common),
    )


def task_origin_from_args(args: argparse.Namespace, tasks: list[str], images=None) -> TaskOrigin:
    """Where the flags say a run's ``tasks`` come from: --artifact (with ``images``, --seed and --set, per task
    with ``--set TASK:KEY=VALUE``) or --from (an export folder or Hub namespace, where a command has it)."""
    common, per_task = parse_overrides(args.overrides, tasks)
    return TaskOrigin(
        artifact=args.artifact,
        source=getattr(args, "source", None),
        images=images,
        seed=args.seed,
        options=common,
        task_options=per_task,
    )


def task_from_args(args: argparse.Namespace, task: str | None = None, images=None) -> TaskData:
    """The task the arguments name, resolved once (:func:`task_ref_from_args`, :func:`open_task`)."""
    return open_task(task_ref_from_args(args, task, images))


__all__ = [
    "add_task_arguments",
    "task_images",
    "task_ref_from_args",
    "task_origin_from_args",
    "task_from_args",
    "parse_overrides",
    "planning_seed",
    "DEFAULT_SEED",
    "TASK_HELP",
]
