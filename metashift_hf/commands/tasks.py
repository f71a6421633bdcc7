"""`metashift-hf tasks list|show`: the task registry (matched tasks) plus the artifact's other task ids."""
from __future__ import annotations

import argparse
import json
import math

from metashift_hf.api import available_tasks, plan
from metashift_hf.builders.artifact import Artifact
from metashift_hf.builders.tasks import family_of, kinds
from metashift_hf.core.errors import (
    EmptyResultError,
    MetashiftError,
    UnknownNameError,
    did_you_mean,
)
from metashift_hf.wordnet_match import registry
from metashift_hf.wordnet_match.tasks import find_task

from .export import parse_overrides

KINDS = kinds()


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "tasks",
        help="list or show tasks (binary/multiclass from `metashift-hf match`, paper and per-class tasks)",
        description="Tasks come from ARTIFACT/match/tasks.parquet (written by `metashift-hf match`) and, for an "
                    "artifact, from metashift_hf.api.available_tasks (paper-*, class-<name>, attributes).",
    )
    sub = p.add_subparsers(dest="tasks_command", metavar="list|show")
    for name, helptext in (("list", "list task ids with their classes"), ("show", "show one task")):
        q = sub.add_parser(name, help=helptext)
        if name == "show":
            q.add_argument("task_id", metavar="ID")
            q.add_argument("--seed", type=int, default=0, help="seed of the task's sampling (default 0)")
            q.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                           help="task option for the shift spec, e.g. scale=0.5 (as for export); repeatable")
        q.add_argument("--artifact", metavar="DIR", help="artifact folder (its registry is DIR/match)")
        q.add_argument("--match", metavar="DIR", help="a match folder written with `metashift-hf match --out DIR`")
        if name == "list":
            q.add_argument("--kind", choices=KINDS, help="only tasks of this kind")
            q.add_argument("--class", dest="class_name", metavar="NAME", help="only tasks involving this class")
        q.set_defaults(func=run_list if name == "list" else run_show)
    p.set_defaults(func=lambda args: (p.print_help(), 1)[1])


def _other_task_ids(artifact: str | None) -> list[str]:
    """Non-registry task ids from metashift_hf.api.available_tasks, when an artifact is given."""
    if not artifact:
        return []
    return available_tasks(artifact)


def _other_info(artifact: str, task_id: str):
    art = Artifact.load(artifact)
    return family_of(art, task_id).info(art, task_id)


def _registry(args):
    """(registry entries, the folder they came from) — empty when there is no match output."""

    source = args.match or args.artifact
    if not source:
        raise MetashiftError("no registry given", "use --artifact DIR (after `metashift-hf match --artifact DIR`) "
                                                  "or --match DIR")
    try:
        return registry(source), source
    except MetashiftError:
        if args.match:
            raise
        return [], source  # an artifact not matched yet still has its paper/class tasks


def _fmt_sim(value: float) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"


def run_list(args: argparse.Namespace) -> int:

    tasks, source = _registry(args)
    rows = []
    for t in tasks:
        if (args.kind and t.kind != args.kind) or (args.class_name and args.class_name not in t.classes):
            continue
        status = "" if t.available else "  UNAVAILABLE: " + t.reason
        lca = f"{t.lca_name}@{t.lca_depth}" if t.lca else "-"
        rows.append(f"{t.task_id:<36} {t.kind:<10} {','.join(t.classes):<40} lca={lca:<28} "
                    f"sim={_fmt_sim(t.path_similarity)} subsets={','.join(map(str, t.n_subsets))}{status}")
    registry_ids = {t.task_id for t in tasks}
    for task_id in _other_task_ids(args.artifact):
        if task_id in registry_ids:
            continue
        info = _other_info(args.artifact, task_id)
        if (args.kind and info.kind != args.kind) or (args.class_name and args.class_name not in info.classes):
            continue
        rows.append(f"{task_id:<36} {info.kind:<10} {','.join(info.classes)}")
    if not rows and (args.kind or args.class_name):
        raise EmptyResultError(f"no task in {source} matches --kind {args.kind} --class {args.class_name}",
                               "drop a filter, or check the class name with `metashift-hf match --explain NAME`")
    print("\n".join(rows))
    print(f"{len(rows):,} task(s)")
    return 0


def run_show(args: argparse.Namespace) -> int:

    tasks, source = _registry(args)
    others = _other_task_ids(args.artifact)
    entry = None
    if any(t.task_id == args.task_id for t in tasks):  # registry first: available_tasks lists its ids too
        entry = find_task(tasks, args.task_id)
        print(json.dumps({k: (None if isinstance(v, float) and math.isnan(v) else v)
                          for k, v in entry.__dict__.items()}, indent=2))
    elif args.task_id in others:
        info = _other_info(args.artifact, args.task_id)
        print(json.dumps({"task_id": info.task_id, "family": info.family, "kind": info.kind,
                          "classes": list(info.classes)}, indent=2))
    else:
        known = sorted({t.task_id for t in tasks} | set(others))
        raise UnknownNameError(f"no task {args.task_id!r} in {source}{did_you_mean(args.task_id, known)}",
                               "list the ids with `metashift-hf tasks list`")
    if args.artifact and (entry is None or entry.available):
        try:
            options, _ = parse_overrides(args.overrides, [args.task_id])
            spec = plan(args.task_id, args.artifact, seed=args.seed, **options).spec
        except MetashiftError as exc:  # the entry (printed above) is still worth showing; the error goes to stderr
            raise MetashiftError(f"shift spec of {args.task_id} not available: {exc.what}",
                                 f"{exc.fix} (here: --set KEY=VALUE)" if exc.fix else "") from None
        print("shift spec:")
        print(spec.to_json(), end="")
    return 0
