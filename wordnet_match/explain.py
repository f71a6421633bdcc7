"""Human-readable answers to "why did this name (or subset) match, or not?" (`metashift-hf match --explain`)."""

from __future__ import annotations

from metashift_hf.core.names import parse_subset_name

from .hierarchy import Hierarchy
from .imagenet import imagenet_classes
from .match import MatchResult, MatchRow, match_name
from .wordnet import noun_synsets, wnid_of


_SHOW = 8  # ImageNet classes listed before "..."


def _imagenet_list(indices: tuple[int, ...]) -> str:
    names = imagenet_classes()
    shown = ", ".join(f"{i} {names[i].name.split(',')[0]}" for i in indices[:_SHOW])
    return shown + (", ..." if len(indices) > _SHOW else "")


def _sense_lines(name: str, row: MatchRow, tree: Hierarchy, wn) -> list[str]:
    lines = []
    for k, sense in enumerate(noun_synsets(wn, name), 1):
        wnid = wnid_of(sense)
        if wnid in tree.nodes:
            state = f"node, depth {tree.depth[wnid]}"
        elif wnid in tree.hidden_ids:
            state = f"hidden under {tree.hidden[tree.hidden_ids[wnid]]!r} of {tree.hidden_ids[wnid]}"
        else:
            state = "not a node"
        mark = "   <- matched" if sense.name() == row.synset else ""
        lines.append(f"    {k}. {sense.name():<28} {wnid}  {state}{mark}")
    return lines


def _usage(name: str, result: MatchResult | None) -> str | None:
    if result is None:
        return None
    if name not in result.table:
        return "  in the inputs: not a subject or context of any subset"
    as_subject = [s for s in result.subsets if s.subject == name]
    as_context = [s for s in result.subsets if s.context == name]
    return (
        f"  in the inputs: subject of {sum(s.selected for s in as_subject)} selected / "
        f"{sum(s.kept for s in as_subject)} kept / {len(as_subject)} subsets; context of "
        f"{sum(s.selected for s in as_context)} selected / {len(as_context)} subsets"
    )


def explain_name(name: str, tree: Hierarchy, wn, result: MatchResult | None = None) -> str:
    row = result.table[name] if result is not None and name in result.table else match_name(name, tree, wn)
    lines = [f"{name}  [hierarchy {tree.name}, {len(tree.nodes):,} nodes]"]
    if row.matched:
        lines.append(f"  matched: {row.synset} ({row.wnid}), depth {row.depth}: {row.definition}")
    else:
        lines.append("  not matched")
    lines.append(f"  why: {row.reason}")
    senses = _sense_lines(name, row, tree, wn)
    if senses:
        lines.append("  noun senses, in WordNet order (spaces -> underscores, morphy applied):")
        lines += senses
    if row.matched:
        lines.append(
            f"  ImageNet-1k coverage (published rule, leaves under any sense): {len(row.imagenet_indices)}"
            + (f": {_imagenet_list(row.imagenet_indices)}" if row.imagenet_indices else "")
        )
        lines.append(f"  ImageNet-1k classes under {row.synset} only: {len(row.sense_indices)}")
        extra = sorted(set(row.leaves) - set(tree.imagenet_index))
        if extra:
            lines.append(
                f"  leaves that are not ImageNet-1k classes (counted by the published figure): {', '.join(extra)}"
            )
    usage = _usage(name, result)
    if usage:
        lines.append(usage)
    return "\n".join(lines)


def explain_subset(subset: str, tree: Hierarchy, wn, result: MatchResult | None = None) -> str:
    subject, context = parse_subset_name(subset)
    rows = [result.table.get(n) if result is not None else None for n in (subject, context)]
    rows = [r or match_name(n, tree, wn) for r, n in zip(rows, (subject, context))]
    both = all(r.matched for r in rows)
    lines = [
        f"{subset}: {'selectable' if both else 'not selected'} (a subset is selected when subject and context both match)"
    ]
    for role, r in zip(("subject", "context"), rows):
        lines.append(
            f"  {role} {r.name!r}: " + (f"matched to {r.synset}" if r.matched else f"not matched: {r.reason}")
        )
    if result is not None:
        record = next((s for s in result.subsets if s.subset == subset), None)
        if record is None:
            lines.append("  in the inputs: no such subset")
        else:
            size = "" if record.n_images is None else f", {record.n_images} images"
            lines.append(f"  in the inputs: kept={record.kept}{size}, selected={record.selected}")
    return "\n".join(lines)
