"""``metashift-hf export``: write task repos (parquet + README card) exactly as they would be pushed."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..core.errors import MetashiftError
from ..core.names import terminal_safe
from ..hub.export import export_tasks, verify_export
from ..hub.shards import LAYOUTS
from ..hub.task_data import TaskRef, reads_dataset_images
from . import HELP
from .task_args import add_task_arguments, task_images, task_origin_from_args


def add_export_arguments(p: argparse.ArgumentParser) -> None:
    """What export and publish share (both materialise tasks the same way): the task flags plus the layout."""
    add_task_arguments(p, task="many", images=True, hub=False, on_missing=True)
    p.add_argument(
        "--layout",
        choices=LAYOUTS,
        default="repo-per-task",
        help="repo-per-task: one repo per task plus the `metashift` index repo (default); "
        "one-repo: every task as a config of the `metashift` repo",
    )


def require_task_inputs(args: argparse.Namespace) -> None:
    if not args.tasks:
        raise MetashiftError(
            "no task named",
            "give one or more task ids, e.g. `paper-dg-cat-dog-1` "
            "(list them with `metashift-hf tasks list --artifact ARTIFACT`)",
        )
    done = [t for t in args.tasks if TaskRef(t).form in ("folder", "hub")]
    if done:  # before asking for --artifact/--images, which such a task never needs
        raise MetashiftError(
            f"{terminal_safe(done[0])} is an exported task (a folder or Hub repo): it is exported already, with its "
            "rows, images and card",
            f"push it as it is with `metashift-hf publish --from-export {terminal_safe(str(Path(done[0]).parent))}`, "
            "or export task ids planned on a build (--artifact ARTIFACT)",
        )
    if not args.images and args.artifact and reads_dataset_images(args.artifact):
        return  # built with --hf-dataset --image-column: the images are the dataset's own
    args.images = task_images(args)
    missing = [flag for flag, value in (("--artifact", args.artifact), ("--images", args.images)) if not value]
    if missing:
        raise MetashiftError(
            f"{' and '.join(missing)} not given",
            "pass --artifact ARTIFACT (from `metashift-hf build`) and --images (folder or images.zip; "
            "or register it once: metashift-hf download --what images / --register images PATH)",
        )


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
    add_export_arguments(p)
    p.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="output folder: new, empty, or an earlier export; each repo folder in it is written atomically",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="replace repo folders an earlier export wrote in --out (nothing else is ever replaced)",
    )
    p.add_argument(
        "--namespace", default=None, help="Hub namespace the cards' load lines should name (default: the local folder)"
    )
    p.add_argument("--no-verify", action="store_true", help="skip loading each config back with datasets.load_dataset")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:

    require_task_inputs(args)
    repos = export_tasks(
        args.tasks,
        task_origin_from_args(args, args.tasks, args.images),
        args.out,
        layout=args.layout,
        namespace=args.namespace,
        force=args.force,
        on_missing=args.on_missing,
    )
    for repo in repos:
        print(f"{repo.path}: {len(repo.files)} files, {repo.num_bytes / 1e6:.1f} MB")
    print("load with:")
    for repo in repos:
        for config in repo.configs:
            if not args.no_verify:
                verify_export(repo.path, config)
            print(f"  {repo.load_line(config)}")
    return 0
