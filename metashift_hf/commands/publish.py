"""``metashift-hf publish``: push task repos to the Hugging Face Hub (idempotent) and collect them."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from ..core.errors import MetashiftError
from ..hub.publish import COLLECTION_TITLE, DEFAULT_TIMEOUT, PushOptions, check_repo_dir, plan_lines, publish_tasks
from ..hub.shards import ExportedRepo, repo_files
from . import HELP
from .export import add_export_arguments, require_task_inputs
from .task_args import task_origin_from_args


def register(subparsers) -> None:

    p = subparsers.add_parser(
        "publish",
        help=HELP["publish"],
        description=(
            "Export each TASK (or take the repos already exported in --from-export) and push them under "
            "--namespace: one commit per repo, nothing committed when the Hub already has the same files, and a "
            "collection listing every repo. The token comes from HF_TOKEN or `hf auth login` and is never printed; "
            "HF_ENDPOINT selects another Hub."
        ),
    )
    add_export_arguments(p)
    p.add_argument("--namespace", required=True, help="Hub user or organisation to publish under")
    p.add_argument(
        "--from-export",
        metavar="DIR",
        default=None,
        help="push the repo folders already in DIR (written by `metashift-hf export --namespace NS`) instead of exporting TASKs",
    )
    p.add_argument("--out", default=None, help="where to export before pushing (default: a temporary folder)")
    p.add_argument("--force", action="store_true", help="replace repo folders an earlier export wrote in --out")
    p.add_argument("--private", action="store_true", help="create the repos and the collection as private")
    p.add_argument(
        "--allow-synthetic",
        action="store_true",
        help="publish even though the artifact/export is synthetic (demo world): refused by default, "
        "since the Hub would show drawn shapes as MetaShift",
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan (repos, files, sizes) and push nothing")
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"give up on a Hub request after this many seconds without progress (default {DEFAULT_TIMEOUT:g})",
    )
    p.add_argument("--collection", default=COLLECTION_TITLE, help=f"collection title (default {COLLECTION_TITLE!r})")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    push = PushOptions(
        private=args.private,
        dry_run=args.dry_run,
        collection_title=args.collection,
        allow_synthetic=args.allow_synthetic,
        timeout=args.timeout,
    )  # --timeout checked here
    if args.from_export:
        if args.tasks:
            raise MetashiftError(
                "give either TASKs or --from-export, not both",
                "drop the task ids to push the exported folders as they are",
            )
        folder = Path(args.from_export)
        # real folders only: a linked folder could point anywhere
        repos = (
            sorted(p for p in folder.iterdir() if p.is_dir() and not p.is_symlink() and not p.name.startswith("."))
            if folder.is_dir()
            else []
        )
        if not repos:
            raise MetashiftError(
                f"{folder} holds no exported repo folders", "run `metashift-hf export ... --out DIR` first"
            )
        _print_result(push.push(repos, args.namespace))
        return 0
    require_task_inputs(args)
    origin = task_origin_from_args(args, args.tasks, args.images)
    with tempfile.TemporaryDirectory(prefix="metashift-publish-") as tmp:
        _print_result(
            publish_tasks(
                args.tasks,
                origin,
                args.namespace,
                args.out or tmp,
                push=push,
                layout=args.layout,
                force=args.force,
                on_missing=args.on_missing,
            )
        )
    return 0


def _print_result(result) -> None:
    """The plan of a dry run; else the lines a user types, read from the pushed READMEs (while the export folder exists)."""

    if result.dry_run:
        print("dry run: nothing is pushed. Plan:")
        print("\n".join(plan_lines(result.plans)))
        return
    print("load with:")
    for plan in result.plans:
        for config in check_repo_dir(
            ExportedRepo(plan.local_dir.name, plan.local_dir, (), repo_files(plan.local_dir))
        ):
            print(f'  load_dataset("{plan.repo_id}", "{config}")')
