"""`metashift-hf match`: MetaShift names -> WordNet 3.0 -> ImageNet-1k, plus the task registry."""

from __future__ import annotations

import argparse

from metashift_hf.core.errors import MetashiftError
from metashift_hf.core.options import non_negative_int
from metashift_hf.sources.manifest import paper_tree_path
from metashift_hf.tasks.match_artifact import MatchInputs, explain_names, run_match

from . import HELP


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "match",
        help=HELP["match"],
        description="Published matching: each name's first WordNet noun sense that is a node of the hierarchy; "
        "a subset is selected when its subject and context both match. Writes match.json, "
        "match_table.parquet, subsets.parquet, classes.parquet and tasks.parquet into --out "
        "(default ARTIFACT/match). --explain NAME says why a name did or did not match.",
    )
    src = p.add_argument_group("inputs (one source)")
    src.add_argument(
        "--artifact", metavar="ARTIFACT", help="an artifact from `metashift-hf build` (sizes known: kept subsets only)"
    )
    src.add_argument("--subset-names", metavar="FILE", help="subset names, one 'subject(context)' per line")
    src.add_argument(
        "--vocabulary",
        metavar="FILE",
        help="names to match: class_hierarchy.json, a JSON list or one per line (default: names in the subsets)",
    )
    p.add_argument(
        "--hierarchy",
        default="wordnet",
        metavar="wordnet|paper|tree:PATH",
        help="wordnet: hypernym closure of the 1,000 classes; paper: the published tree (fetched once, "
        "sha256-pinned); tree:PATH: a tree file in the published format (default: wordnet)",
    )
    p.add_argument(
        "--out", metavar="DIR", help="output folder (default: ARTIFACT/match; required with --subset-names)"
    )
    p.add_argument(
        "--force", action="store_true", help="replace an earlier match folder in --out (nothing else is ever replaced)"
    )
    p.add_argument(
        "--min-subsets",
        type=non_negative_int,
        default=5,
        metavar="N",
        help="binary tasks: each class needs at least N selected subsets (default: 5)",
    )
    p.add_argument(
        "--level",
        type=non_negative_int,
        default=2,
        metavar="L",
        help="binary tasks: the classes share an ancestor at level L, root = 0 (default: 2)",
    )
    p.add_argument("--tree-url", metavar="URL", help="where --hierarchy paper is fetched from when not cached")
    p.add_argument(
        "--explain",
        nargs="+",
        metavar="NAME",
        help="explain these names (or 'subject(context)' subsets) instead of writing output",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:

    if args.explain:
        return explain(args)
    if args.artifact and (args.subset_names or args.vocabulary):
        raise MetashiftError(
            "give either --artifact or --subset-names/--vocabulary, not both",
            "an artifact already carries its subsets and names",
        )
    if not args.artifact and not args.subset_names:
        raise MetashiftError(
            "no input: nothing to match",
            "use --artifact ARTIFACT, or --subset-names FILE [--vocabulary FILE] --out DIR",
        )
    if args.subset_names and not args.out:
        raise MetashiftError("--subset-names needs --out DIR (there is no artifact to write into)", "add --out DIR")
    if args.min_subsets < 1 or args.level < 0:
        raise MetashiftError(
            f"--min-subsets {args.min_subsets} / --level {args.level} out of range",
            "use --min-subsets >= 1 and --level >= 0",
        )

    result = run_match(_inputs(args), out=args.out, min_subsets=args.min_subsets, level=args.level, force=args.force)
    f, t = result.figures, result.figures["tasks"]
    out = args.out or f"{args.artifact}/match"
    print(f"hierarchy {f['hierarchy']} ({f['hierarchy_nodes']:,} nodes)")
    print(
        f"  {f['vocabulary_names']:,} names -> {f['matched_names']:,} matched -> {f['subsets']:,} subsets "
        f"-> {f['classes']:,} classes -> {f['imagenet_leaves_covered']:,} ImageNet-1k leaves covered "
        f"({f['imagenet_classes_covered']:,} ImageNet-1k classes)"
    )
    for node, key in f["hidden_subtrees"].items():
        print(f"  note: the subtree of {node} sits under the key {key!r}, which the published walker does not read")
    print(
        f"  binary tasks (>= {t['min_subsets']} subsets per class, common ancestor at level {t['level']}): {t['binary']:,}"
    )
    for task in (x for x in result.tasks if x.kind == "multiclass"):
        state = "available" if task.available else "UNAVAILABLE"
        print(f"  {task.task_id}: {state}" + (f" ({task.reason})" if task.reason else ""))
    later = result.later_senses()
    if later:
        print(
            f"warning: {len(later):,} name(s) of selected subsets matched a later WordNet sense, not the first "
            "(published rule: the first sense that is a hierarchy node), so their images may not show what the "
            "ImageNet classes mean (e.g. kite the toy, matched as the hawk):"
        )
        for r in later[:10]:
            print(f"  {r.name} -> {r.synset}: {r.definition}")
        print(
            ("  ... " + ", ".join(r.name for r in later[10:]) + "\n" if len(later) > 10 else "")
            + "  check one with `metashift-hf match --explain NAME` (it lists every sense)"
        )
    print(f"wrote {out}")
    return 0


def _paper_tree(args: argparse.Namespace):
    """The published tree's local file for --hierarchy paper (fetched once, then from the cache/manifest)."""

    return paper_tree_path(args.tree_url) if args.hierarchy == "paper" else None


def _inputs(args: argparse.Namespace) -> MatchInputs:
    return MatchInputs(
        artifact=args.artifact,
        subset_names=args.subset_names,
        vocabulary=args.vocabulary,
        hierarchy=args.hierarchy,
        paper_tree=_paper_tree(args),
    )


def explain(args: argparse.Namespace) -> int:

    print(explain_names(args.explain, _inputs(args)))
    return 0
