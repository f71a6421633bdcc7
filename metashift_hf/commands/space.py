"""`metashift-hf space`: write the MetaShift Space repo folder (Gradio app over published tasks), optionally push it."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..core import options as opt
from ..core.errors import InputFormatError
from ..core.fsutil import check_out
from ..hub.publish import COLLECTION_TITLE, DEFAULT_TIMEOUT
from ..space import app, package, repo
from . import HELP


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "space",
        help=HELP["space"],
        description=(
            "Write a Hugging Face Space repo folder (README.md with the Space front matter, app.py, requirements.txt) "
            "whose Gradio app browses the tasks of an export folder or Hub namespace: the tasks table and each "
            "task's page, each class's meta-graph with a subset's images and distances, the leaderboard of "
            "--results with per-group drill-down, and subset distances. The source is read (every spec checked) "
            "before anything is written. Serve the folder offline with `python DIR/app.py --from EXPORT --port P`; "
            "--push NS/NAME pushes it as a Space repo (one commit, none when nothing changed) and adds it to the "
            "namespace's collection."
        ),
    )
    p.add_argument(
        "--from",
        dest="source",
        required=True,
        metavar="EXPORT_FOLDER_OR_NAMESPACE",
        help="an export folder (metashift-hf export --out) or the Hub namespace publish filled",
    )
    p.add_argument(
        "--results",
        action="append",
        default=[],
        metavar="RESULTS",
        help="a zoo's results folder (metashift-hf evaluate --out) or results repo NS/NAME; repeat for several",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="the Space repo folder to write")
    p.add_argument("--title", type=lambda v: opt.text(v, "--title"), default=repo.DEFAULT_TITLE, help="Space title")
    p.add_argument(
        "--package",
        type=package.check_package,
        default=None,
        metavar="REQUIREMENT",
        help="requirements.txt line for metashift-hf, e.g. a wheel URL or 'metashift-hf @ git+https://...' "
        "(default: this package's own wheel, built into DIR/wheels/ and named by relative path)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="replace an earlier Space folder written by this command (files you added to it are kept)",
    )
    p.add_argument("--push", default=None, metavar="NAMESPACE/NAME", help="push the folder as this Space repo")
    p.add_argument("--private", action="store_true", help="create the Space private")
    p.add_argument("--collection", default=COLLECTION_TITLE, help="collection the Space is added to")
    p.add_argument(
        "--timeout",
        type=lambda v: opt.positive_float(v, "--timeout"),
        default=DEFAULT_TIMEOUT,
        help=f"give up on a Hub request after this many seconds without progress (default {DEFAULT_TIMEOUT:g})",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.push:
        local = [s for s in (args.source, *args.results) if Path(s).is_dir()]
        if local:  # the Space runs on the Hub: it reads the published repos, not this machine's folders
            raise InputFormatError(
                f"--push: the Space would read {', '.join(local)}, a folder on this machine",
                "write the Space from what is published: --from NAMESPACE and --results NS/NAME (repo ids)",
            )
    check_out(args.out, repo.SPACE_KIND, force=args.force, inputs=[args.source, *args.results])
    data = app.load(args.source, args.results)  # every spec and leaderboard read and checked first
    out = repo.write_space(
        args.out, args.source, args.results, title=args.title, package=args.package, force=args.force
    )
    print(
        f"wrote {out}: {', '.join(repo.space_files(out))} ({len(data.index.tasks)} task(s), "
        f"{len(data.index.classes)} class(es), {len(data.results.board)} result row(s))"
    )
    print(f"serve it offline: python {out / 'app.py'} --from {args.source} --port 7860")
    if args.push:
        commit = repo.push_space(
            out, args.push, private=args.private, collection_title=args.collection, timeout=args.timeout
        )
        print(f"{args.push}: " + (f"committed {commit[:12]}" if commit else "up to date, no commit"))
    return 0
