"""``metashift-hf export``: write task repos (parquet + README card) exactly as they would be pushed."""
from __future__ import annotations

from . import HELP

import argparse

from ..hub.api import reads_dataset_images
from ..core.errors import MetashiftError, did_you_mean
from ..core.options import seed
from ..hub.export import export_tasks, verify_export
from ..sources.manifest import resolve_input
from ..hub.shards import LAYOUTS


def add_task_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments shared by export and publish (both materialise tasks the same way)."""

    p.add_argument("tasks", nargs="*", metavar="TASK", help="task ids, e.g. paper-dg-cat-dog-1 bin-cat-dog (see `metashift-hf tasks list`)")
    p.add_argument("--artifact", metavar="ARTIFACT", help="artifact folder from `metashift-hf build`")
    p.add_argument("--images", help="image folder of <id>.jpg or GQA images.zip")
    p.add_argument("--layout", choices=LAYOUTS, default="repo-per-task",
                   help="repo-per-task: one repo per task plus the `metashift` index repo (default); "
                        "one-repo: every task as a config of the `metashift` repo")
    p.add_argument("--seed", type=seed, default=0, help="seed of the task's sampling (default 0)")
    p.add_argument("--on-missing", choices=("error", "skip"), default="error",
                   help="images missing or corrupt in --images: error (default; lists them) or skip them")
    p.add_argument("--no-progress", action="store_true", help="no progress bars (as for download and evaluate)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="[TASK:]KEY=VALUE",
                   help="task option, e.g. scale=0.5 for every task, paper-dg-cat-dog-1:scale=0.5 for one, "
                        "class-cat:scale=null to drop it for one; repeatable")


def parse_overrides(items: list[str], tasks: list[str]) -> tuple[dict, dict[str, dict]]:
    """``--set`` values -> (options for every task, per-task options that replace them)."""
    import json


    common: dict = {}
    per_task: dict[str, dict] = {}
    for item in items:
        key, eq, raw = item.partition("=")
        task, colon, key = key.rpartition(":") if ":" in key else ("", "", key)
        if not eq or not key:
            raise MetashiftError(f"--set {item!r} is not KEY=VALUE", "write e.g. --set scale=0.5 or --set paper-dg-cat-dog-1:scale=0.5")
        try:
            value = json.loads(raw)  # numbers, true/false, lists; anything else stays a string
        except json.JSONDecodeError:
            value = raw
        if task and task not in tasks:
            raise MetashiftError(f"--set {item!r} names task {task!r}, which is not being exported{did_you_mean(task, tasks)}",
                                 "name one of the TASK arguments before the colon")
        (per_task.setdefault(task, {}) if task else common)[key] = value
    # A per-task entry starts from the common options and replaces what it names; KEY=null drops
    # a common option for that task (collections, for instance, take no size options).
    return common, {t: {k: v for k, v in {**common, **o}.items() if v is not None} for t, o in per_task.items()}

def task_options(args: argparse.Namespace) -> tuple[dict, dict[str, dict]]:
    """``--set`` values plus ``--on-missing``, which applies to every task."""
    common, per_task = parse_overrides(args.overrides, args.tasks)
    for options in (common, *per_task.values()):
        options["on_missing"] = args.on_missing
    return common, per_task


def require_task_inputs(args: argparse.Namespace) -> None:
    if args.no_progress:
        import datasets  # heavy: imported only by the commands that materialise tasks

        datasets.disable_progress_bars()

    if not args.tasks:
        raise MetashiftError("no task named", "give one or more task ids, e.g. `paper-dg-cat-dog-1` "
                             "(list them with `metashift-hf tasks list --artifact ARTIFACT`)")
    if not args.images and args.artifact and reads_dataset_images(args.artifact):
        return  # built with --hf-dataset --image-column: the images are the dataset's own
    if not args.images:  # the images registered or downloaded once (metashift-hf download)

        args.images = resolve_input("images", required=False)
    missing = [flag for flag, value in (("--artifact", args.artifact), ("--images", args.images)) if not value]
    if missing:
        raise MetashiftError(f"{' and '.join(missing)} not given", "pass --artifact ARTIFACT (from `metashift-hf build`) and --images (folder or images.zip; "
                             "or register it once: metashift-hf download --what images / --register images PATH)")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "export",
        help=HELP["export"],
        description=(
            "Prepare each TASK and write, per repo, what `publish` would push: "
            "<config>/<split>-0000i-of-0000n.parquet with the original image bytes embedded, README.md with YAML "
            "metadata (configs, dataset_info) and the dataset card, images/<class>.png meta-graph pictures; plus the "
            "`metashift` index repo. Each repo then loads with datasets.load_dataset(DIR/<repo>, <task>)."
        ),
    )
    add_task_arguments(p)
    p.add_argument("--out", required=True, metavar="DIR",
                   help="output folder: new, empty, or an earlier export; each repo folder in it is written atomically")
    p.add_argument("--force", action="store_true",
                   help="replace repo folders an earlier export wrote in --out (nothing else is ever replaced)")
    p.add_argument("--namespace", default=None,
                   help="Hub namespace the cards' load lines should name (default: the local folder)")
    p.add_argument("--no-verify", action="store_true", help="skip loading each config back with datasets.load_dataset")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:

    require_task_inputs(args)
    common, per_task = task_options(args)
    repos = export_tasks(args.tasks, args.artifact, args.images, args.out, layout=args.layout, seed=args.seed,
                         namespace=args.namespace, task_overrides=per_task, force=args.force, **common)
    for repo in repos:
        print(f"{repo.path}: {len(repo.files)} files, {repo.num_bytes / 1e6:.1f} MB")
    print("load with:")
    for repo in repos:
        for config in repo.configs:
            if not args.no_verify:
                verify_export(repo.path, config)
            print(f"  {repo.load_line(config)}")
    return 0
