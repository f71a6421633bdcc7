"""`metashift-hf tasks list|show`: the task registry (matched tasks) plus the artifact's other task ids."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math

from metashift_hf.builders.artifact import Artifact
from metashift_hf.cards.shift_words import is_no_shift_level, measured_words, no_shift_reason
from metashift_hf.core.errors import (
    EmptyResultError,
    MetashiftError,
    UnknownNameError,
    did_you_mean,
)
from metashift_hf.core.names import terminal_safe
from metashift_hf.hub.api import available_tasks, plan
from metashift_hf.hub.task_data import TaskRef
from metashift_hf.hub.task_open import TaskTooBigError, open_task
from metashift_hf.tasks.design_check import design_check
from metashift_hf.tasks.families import family_of, kinds
from metashift_hf.tasks.plan import SPLITS
from metashift_hf.tasks.spec import ShiftSpec
from metashift_hf.wordnet_match import registry
from metashift_hf.wordnet_match.tasks import find_task

from . import HELP
from .task_args import add_task_arguments, task_ref_from_args


KINDS = kinds()


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "tasks",
        help=HELP["tasks"],
        description="Tasks come from ARTIFACT/match/tasks.parquet (written by `metashift-hf match`) and, for an "
        "artifact, from metashift_hf.hub.api.available_tasks (paper-*, class-<name>, attributes).",
    )
    sub = p.add_subparsers(dest="tasks_command", metavar="list|show")
    for name, helptext in (
        ("list", "list task ids with their classes and split sizes"),
        ("show", "show one task: its classes, splits, groups and shift"),
    ):
        q = sub.add_parser(name, help=helptext)
        if name == "show":
            q.add_argument(
                "task_id",
                metavar="ID",
                help="a task id (with --artifact or --match), an exported repo folder or a Hub repo id NS/NAME",
            )
            add_task_arguments(q, task="none")  # --artifact, --config, --revision, --seed, --set
            q.add_argument(
                "--json",
                action="store_true",
                help="print the registry entry and the whole shift spec as JSON (for machines)",
            )
        if name == "list":
            q.add_argument("--artifact", metavar="ARTIFACT", help="artifact folder (its registry is ARTIFACT/match)")
        q.add_argument("--match", metavar="DIR", help="a match folder written with `metashift-hf match --out DIR`")
        if name == "list":
            q.add_argument("--kind", choices=KINDS, help="only tasks of this kind")
            q.add_argument("--class", dest="class_name", metavar="NAME", help="only tasks involving this class")
            q.add_argument(
                "--sizes",
                action=argparse.BooleanOptionalAction,
                default=None,
                help=f"plan each listed task for its split sizes (default: when at most {SIZES_AUTO_MAX} "
                "tasks are listed; needs --artifact)",
            )
        q.set_defaults(func=run_list if name == "list" else run_show)
    p.set_defaults(func=lambda args: (p.print_help(), 1)[1])


def _other_task_ids(artifact: "str | Artifact | None") -> list[str]:
    """Non-registry task ids from metashift_hf.hub.api.available_tasks, when an artifact is given."""
    if not artifact:
        return []
    return available_tasks(artifact)


def _other_info(artifact: "str | Artifact", task_id: str):
    art = Artifact.load(artifact)  # a loaded Artifact is used as is: run_list loads it once for every id
    return family_of(art, task_id).info(art, task_id)


def _registry(args):
    """(registry entries, the folder they came from) — empty when there is no match output."""

    source = args.match or args.artifact
    if not source:
        raise MetashiftError(
            "no registry given",
            "use --artifact ARTIFACT (after `metashift-hf match --artifact ARTIFACT`) or --match DIR",
        )
    try:
        return registry(source), source
    except MetashiftError:
        if args.match:
            raise
        return [], source  # an artifact not matched yet still has its paper/class tasks


CLASSES_WIDTH = 60


def _fmt_classes(classes) -> str:
    """'cat,dog'; a long list (the `classes` collection names every class) cut to keep rows readable."""
    text = ",".join(classes)
    if len(text) <= CLASSES_WIDTH:
        return text
    tail = f",… ({len(classes)} classes)"
    return text[: CLASSES_WIDTH - len(tail)].rsplit(",", 1)[0] + tail


def _fmt_sim(value: float) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"


SIZES_AUTO_MAX = 100
SPLIT_COLUMNS = (("train", "TRAIN"), ("validation", "VAL"), ("test", "TEST"), ("id_test", "ID_TEST"))
LEGEND = """columns: TRAIN/VAL/TEST/ID_TEST = rows per split at the default sizes (seed 0); STATUS = ok, or why the task
  cannot be planned as is (with the --set that makes it plan), `-` = not checked (pass --sizes); LCA = lowest common ancestor of the classes in the
  WordNet/ImageNet hierarchy @ its depth (root = 0; deeper = more similar classes); SIM = WordNet path similarity
  of the classes (1 = same synset; higher = harder to tell apart); SUBSETS = kept context subsets per class.
  `metashift-hf tasks show ID --artifact ARTIFACT` explains one task."""


def _sizes(task_id: str, art) -> tuple[dict[str, int], str]:
    """(rows per split, status) of a task at its default sizes."""
    try:
        return dict(plan(TaskRef(task_id, artifact=art)).spec.split_sizes or {}), "ok"
    except EmptyResultError as exc:
        scale = exc.scale if isinstance(exc, TaskTooBigError) else None  # the scale open_task found
        return (
            {},
            f"too big for this artifact at default sizes; plans with --set {task_id}:scale={scale}"
            if scale
            else "too big for this artifact at default sizes",
        )
    except MetashiftError as exc:
        return {}, f"cannot plan: {exc.what}"


def run_list(args: argparse.Namespace) -> int:

    tasks, source = _registry(args)
    rows: list[tuple[str, ...]] = []  # id, kind, classes, lca, sim, subsets, status
    for t in tasks:
        if (args.kind and t.kind != args.kind) or (args.class_name and args.class_name not in t.classes):
            continue
        lca = f"{t.lca_name}@{t.lca_depth}" if t.lca else "-"
        rows.append(
            (
                t.task_id,
                t.kind,
                _fmt_classes(t.classes),
                lca,
                _fmt_sim(t.path_similarity),
                ",".join(map(str, t.n_subsets)),
                "" if t.available else "unavailable: " + t.reason,
            )
        )
    registry_ids = {t.task_id for t in tasks}
    loaded = Artifact.load(args.artifact) if args.artifact else None
    for task_id in _other_task_ids(loaded):
        if task_id in registry_ids:
            continue
        info = _other_info(loaded, task_id)
        if (args.kind and info.kind != args.kind) or (args.class_name and args.class_name not in info.classes):
            continue
        rows.append((task_id, info.kind, _fmt_classes(info.classes), "-", "-", "-", ""))
    if not rows and (args.kind or args.class_name):
        given = " ".join(
            f"{flag} {value}" for flag, value in (("--kind", args.kind), ("--class", args.class_name)) if value
        )
        raise EmptyResultError(
            f"no task in {source} matches {given}",
            "drop a filter, or check the class name with `metashift-hf classes --artifact ARTIFACT`",
        )
    sizes = args.sizes if args.sizes is not None else (bool(args.artifact) and len(rows) <= SIZES_AUTO_MAX)
    if sizes and not args.artifact:
        raise MetashiftError("--sizes needs the artifact", "pass --artifact ARTIFACT")
    art = loaded if sizes else None
    table = [
        ("ID", "KIND", "CLASSES", *([c for _, c in SPLIT_COLUMNS] if sizes else []), "LCA", "SIM", "SUBSETS", "STATUS")
    ]
    for task_id, kind, classes, lca, sim, subsets, status in rows:
        counts: list[str] = []
        if sizes:
            if not status:
                split_sizes, status = _sizes(task_id, art)
                counts = [f"{split_sizes[s]:,}" if s in split_sizes else "-" for s, _ in SPLIT_COLUMNS]
            else:
                counts = ["-"] * len(SPLIT_COLUMNS)
        # Without --sizes nothing was planned: claim no "ok" for a task that may not plan at default sizes.
        table.append((task_id, kind, classes, *counts, lca, sim, subsets, status or ("ok" if sizes else "-")))
    table = [[terminal_safe(c) for c in r] for r in table]  # class names from the data: escaped, never acted on
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for r in table:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    print(
        f"{len(rows):,} task(s)"
        + (
            ""
            if sizes
            else "; split sizes and STATUS not checked: pass --sizes (plans every "
            "listed task), or list fewer with --kind/--class"
        )
    )
    print(LEGEND)
    return 0


def _group_lines(spec: ShiftSpec) -> list[str]:
    out = []
    for split in SPLITS:
        for g in getattr(spec, f"{split}_groups"):
            contexts = ", ".join(g.contexts_found or g.contexts) or "-"
            out.append(f"  {split:<10} {g.group:<28} {g.n:>6,}  contexts: {contexts}")
    return out


_KINDS = {
    "marginal": "domain generalisation / marginal shift: train and test contexts differ",
    "conditional": "subpopulation / conditional shift: the same groups in other proportions",
    "joint": "joint shift: other contexts and other proportions",
    "clustered": "clustered OOD sets: train on one image cluster per class, test on the others",
    "none": "no designed shift (a collection)",
}


def spec_summary(spec: ShiftSpec) -> list[str]:
    """A shift spec as a few readable lines (``tasks show``; ``--json`` gives all of it)."""
    kind = f"no measured shift: {no_shift_reason(spec)}" if is_no_shift_level(spec) else _KINDS[spec.shift_type]
    lines = [f"shift:    {kind}"]
    measured = measured_words(spec)
    if measured:
        lines.append(f"measured: {measured}")
    dist = spec.distance
    if dist is not None and dist.value is not None:
        paper = f"; paper {dist.paper_value}" if dist.paper_value is not None else ""
        lines.append(f"distance: d = {dist.value:.3f} ({dist.rule} rule{paper})")
    mf = spec.minority_fraction
    if mf is not None and mf.target is not None:
        lines.append(f"minority: p = {mf.achieved} of the training rows (target {mf.target})")
    sizes = spec.split_sizes
    order = [s for s in SPLITS if s in sizes] + sorted(set(sizes) - set(SPLITS))
    lines.append("splits:   " + ", ".join(f"{k} {sizes[k]:,}" for k in order))
    removed = {k: v for k, v in dataclasses.asdict(spec.removed).items() if v}
    if removed:
        lines.append(
            "removed:  "
            + ", ".join(f"{k} {v:,}" for k, v in sorted(removed.items()))
            + " images (ambiguous or leaking between splits)"
        )
    lines += ["groups:", *_group_lines(spec)]
    return lines


def _check_json(spec: ShiftSpec) -> dict | None:
    """The declared type's verdict from the spec (tasks/design_check.py), beside the spec in ``--json``."""
    check = design_check(spec)
    return None if check is None else dataclasses.asdict(check)


def _show_exported(args: argparse.Namespace, ref: TaskRef) -> int:
    """``tasks show FOLDER|NS/REPO``: the shift spec an exported task carries (no artifact needed), after its
    rows and both copies of the spec (``shift_spec.json`` and the parquet's features) were checked to agree."""
    data = open_task(ref)  # refuses --set/--seed: the folder or repo is planned already
    data.verify()  # a spec that disagrees with the rows or with its other copy is refused, not shown
    spec = data.spec
    if args.json:
        print(
            json.dumps(
                {
                    "task": {"task_id": spec.task_id, "source": args.task_id},
                    "shift_spec": json.loads(spec.to_json()),
                    "design_check": _check_json(spec),
                },
                indent=2,
                sort_keys=True,
                default=str,
            )
        )
        return 0
    print(terminal_safe(f"task {spec.task_id} (from {args.task_id}): classes {', '.join(spec.classes)}"))
    print("\n".join(terminal_safe(line) for line in spec_summary(spec)))
    print(f"whole spec: metashift-hf tasks show {args.task_id} --json")
    return 0


def run_show(args: argparse.Namespace) -> int:
    ref = task_ref_from_args(args, args.task_id)
    if args.match is None and ref.form in ("folder", "hub"):
        return _show_exported(args, ref)
    if args.match is None and args.artifact is None:
        open_task(ref)  # the one resolver names what is wrong (white space, a file, no such folder), not "no registry"
    tasks, source = _registry(args)
    others = _other_task_ids(args.artifact)
    entry = None
    if any(t.task_id == args.task_id for t in tasks):  # registry first: available_tasks lists its ids too
        entry = find_task(tasks, args.task_id)
        facts = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in entry.__dict__.items()}
    elif args.task_id in others:
        info = _other_info(args.artifact, args.task_id)
        facts = {"task_id": info.task_id, "family": info.family, "kind": info.kind, "classes": list(info.classes)}
    else:
        known = sorted({t.task_id for t in tasks} | set(others))
        raise UnknownNameError(
            f"no task {args.task_id!r} in {source}{did_you_mean(args.task_id, known)}",
            "list the ids with `metashift-hf tasks list`",
        )
    if entry is not None and not entry.available:
        raise EmptyResultError(
            f"task {args.task_id} is not available on {source}: {entry.reason}",
            "pick another id from `metashift-hf tasks list --artifact ARTIFACT`",
        )
    spec = None
    if args.artifact:
        # open_task: a task too big for the artifact gets the --set scale=... that makes it plan
        spec = open_task(ref).spec
    if args.json:
        shift_spec = None if spec is None else json.loads(spec.to_json())
        check = None if spec is None else _check_json(spec)
        out = {"task": facts, "shift_spec": shift_spec, "design_check": check}
        print(json.dumps(out, indent=2, sort_keys=True, default=str))
        return 0
    print(terminal_safe(f"task {args.task_id}: {facts['kind']}, classes {', '.join(facts['classes'])}"))
    if entry is not None:
        print(
            f"wordnet:  lowest common ancestor {entry.lca_name} at depth {entry.lca_depth}; "
            f"path similarity {_fmt_sim(entry.path_similarity)}"
        )
    if spec is None:
        print("(pass --artifact ARTIFACT for its splits, groups and shift)")
        return 0
    print("\n".join(terminal_safe(line) for line in spec_summary(spec)))
    print(f"whole spec: metashift-hf tasks show {args.task_id} --artifact ARTIFACT --json")
    return 0
