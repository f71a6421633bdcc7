"""`metashift-hf distance`: meta-graph distance between two subsets of one class, or a class's matrix."""

from __future__ import annotations

import argparse
import csv
import io

import numpy as np

from metashift_hf.builders.artifact import Artifact
from metashift_hf.builders.distances import RULE_HELP, DistanceMatrix
from metashift_hf.builders.pair_distances import PAIRS_FILE, PairDistances
from metashift_hf.core.errors import InputFormatError
from metashift_hf.core.fsutil import FileKind, atomic_out_file, check_out_file
from metashift_hf.core.names import SubsetName, terminal_safe
from metashift_hf.hub.task_data import TaskRef
from metashift_hf.hub.task_open import open_task

from . import HELP
from .task_args import add_task_arguments


def register(subparsers) -> None:
    rules = "; ".join(f"{k}: {v}" for k, v in RULE_HELP.items())
    p = subparsers.add_parser(
        "distance",
        help=HELP["distance"],
        description="Distance between two kept subsets of the same class, e.g. metashift-hf distance --artifact ARTIFACT "
        "'dog(shelf)' 'dog(bed)'; prints the number, the rule that gave it and its place among the class's pairs, or 'disconnected' when "
        f"no path joins them in the meta-graph. Rules: {rules}. With --class C --matrix: every pair of "
        "C's kept subsets as CSV (source,target,distance,rule,status), printed or written to --out. "
        "--task FOLDER_OR_REPO answers from an exported folder or Hub dataset repo alone (its published "
        f"{PAIRS_FILE}, checked against the sha256 its shift spec records; no artifact, rows or images needed), "
        "with the same numbers as --artifact.",
    )
    add_task_arguments(p, task="optional", planning=False)
    p.add_argument("a", nargs="?", help="subset name 'subject(context)' (list them with `metashift-hf subsets CLASS`)")
    p.add_argument("b", nargs="?", help="subset name of the same subject")
    p.add_argument("--class", dest="subject", metavar="C", help="class whose whole matrix --matrix prints")
    p.add_argument(
        "--matrix", action="store_true", help="every pair of the class's kept subsets, with rule and status"
    )
    p.add_argument(
        "--out",
        metavar="FILE",
        help="write the --matrix CSV to FILE instead of printing it (printed names have control "
        "characters escaped; the file keeps them): a new file, "
        "or an earlier matrix CSV with --force (never a link, device, FIFO or folder)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="replace a matrix CSV an earlier --out wrote (nothing else is ever replaced)",
    )
    p.add_argument(
        "--value",
        action="store_true",
        help="print only 'NUMBER (rule)' or 'disconnected' (for scripts) instead of the sentence",
    )
    p.set_defaults(func=run)


MATRIX_HEADER = ("source", "target", "distance", "rule", "status")
# how an earlier --out of ours is recognised (core.fsutil): the file begins with the exact header line
MATRIX_CSV = FileKind("distance matrix CSV", (",".join(MATRIX_HEADER) + "\n").encode())


def matrix_csv(m: DistanceMatrix, *, terminal: bool = False) -> str:
    """One row per unordered pair: source, target, distance ('' when disconnected), rule, status.
    ``terminal``: names with control characters escaped (core.names.terminal_safe), for printing."""
    name = terminal_safe if terminal else str
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(MATRIX_HEADER)
    for a, b, d in m.pairs():
        w.writerow([name(a), name(b), "" if d.value is None else repr(d.value), d.rule or "", d.status])
    return buf.getvalue()


class _Source:
    """Where the distances come from: the build (--artifact) or a task's published pairs (--task)."""

    def __init__(self, args: argparse.Namespace) -> None:
        if args.task is None and args.artifact is None:
            raise InputFormatError(
                "distance needs --artifact ARTIFACT (the build) or --task FOLDER_OR_REPO (an exported task)",
                "run metashift-hf distance --artifact ARTIFACT 'dog(shelf)' 'dog(bed)', or "
                "metashift-hf distance --task NAMESPACE/metashift-TASK 'dog(shelf)' 'dog(bed)'",
            )
        self.inputs = tuple(x for x in (args.artifact, args.task) if x is not None)
        self.args = args

    def open(self) -> "Artifact | PairDistances":
        args = self.args
        if args.task is None:
            art = Artifact.load(args.artifact)
            self.edge_threshold = art.options.edge_threshold
            return art
        data = open_task(TaskRef(args.task, artifact=args.artifact, config=args.config, revision=args.revision))
        rules = data.spec.rules
        self.edge_threshold = None if rules is None else rules.edge_threshold
        return data.distances

    @staticmethod
    def matrix(where: "Artifact | PairDistances", subject: str) -> DistanceMatrix:
        return where.distance_matrix(subject) if isinstance(where, Artifact) else where.matrix(subject)


def run(args: argparse.Namespace) -> int:
    source = _Source(args)
    if args.matrix:
        if not args.subject or args.a or args.b:
            raise InputFormatError(
                "--matrix needs --class C and no subset names",
                "run metashift-hf distance --artifact ARTIFACT --class dog --matrix [--out FILE]",
            )
        if args.out:  # before the artifact is read
            check_out_file(args.out, MATRIX_CSV, force=args.force, inputs=source.inputs)
        m = source.matrix(source.open(), args.subject)
        if args.out:  # the file keeps the names as they are; the terminal gets them escaped
            with atomic_out_file(args.out, MATRIX_CSV, force=args.force, inputs=source.inputs) as f:
                f.write(matrix_csv(m))
            covered, total = m.coverage()
            print(
                terminal_safe(
                    f"wrote {total} pairs of {args.subject!r} to {args.out} ({covered} with a number, "
                    f"{total - covered} disconnected)"
                )
            )
        else:
            print(matrix_csv(m, terminal=True), end="")
        return 0
    if args.out or args.force:
        raise InputFormatError(
            "--out (and --force) write the matrix CSV of one class: they need --class C --matrix",
            "run metashift-hf distance --artifact ARTIFACT --class dog --matrix --out FILE, "
            "or drop --out to print the distance of two subsets",
        )
    if not (args.a and args.b) or args.subject:
        raise InputFormatError(
            "give two subset names, or --class C --matrix",
            "run metashift-hf distance --artifact ARTIFACT 'dog(shelf)' 'dog(bed)'",
        )
    where = source.open()
    d = where.distance(args.a, args.b)
    if args.value:
        print(terminal_safe(d))
        return 0
    subject = SubsetName.parse(args.a).subject
    if d.value is None:
        print(
            terminal_safe(
                f"{args.a} and {args.b} are disconnected: no path joins them in the meta-graph of class "
                f"{subject!r}, so no distance is defined (a lower --edge-threshold at build joins more subsets)"
            )
        )
        return 0
    print(terminal_safe(f"d({args.a}, {args.b}) = {d.value:.3f}"))
    threshold = "" if source.edge_threshold is None else f" (overlap >= {source.edge_threshold})"
    print(
        terminal_safe(
            f"  rule: {d.rule}, the {RULE_HELP.get(d.rule, d.rule)}, in the meta-graph of class {subject!r}, "
            f"whose edges join subsets sharing images{threshold}; "
            "0 = same place, larger = more different contexts."
        )
    )
    m = source.matrix(where, subject)
    upper = m.values[np.triu_indices(len(m.names), 1)]
    pairs = upper[np.isfinite(upper)]
    if len(pairs):
        print(
            terminal_safe(
                f"  for scale: the {len(pairs):,} connected pairs of {subject!r} range from {pairs.min():.3f} "
                f"to {pairs.max():.3f} (median {np.median(pairs):.3f}); this pair is farther apart than "
                f"{float((pairs < d.value).mean()):.0%} of them."
            )
        )
    return 0
