"""Which outputs of a model's head (ImageNet-1k classes, or any WordNet nouns) count as correct for a MetaShift class."""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Mapping, Sequence

from metashift_hf.wordnet_match.hierarchy import load_hierarchy
from metashift_hf.wordnet_match.match import match_name
from metashift_hf.wordnet_match.wordnet import load_wordnet, noun_synsets, synset_of_offset, wnid_of

from ..core.errors import EmptyResultError
from ..models import LabelMap


_FIXED = ("wordnet", "paper")  # hierarchies that cannot change while the process runs (tree:PATH files can)


@lru_cache(maxsize=len(_FIXED))
def _named_hierarchy(name: str):
    """Built once per process: a zoo scores hundreds of tasks under the same hierarchy."""
    return load_hierarchy(name, load_wordnet())


def class_coverage(
    classes: Sequence[str], hierarchy: str = "wordnet"
) -> tuple[dict[str, frozenset[int]], dict[str, Any]]:
    """Class name -> ImageNet-1k indices under its matched synset, via ``wordnet_match`` (published rule).

    Returns the coverage and a hierarchy card for the report (name, source, per-class synset and
    leaf count). A class that does not match under the hierarchy is an error with the matcher's reason.
    """

    wn = load_wordnet()
    tree = _named_hierarchy(hierarchy) if hierarchy in _FIXED else load_hierarchy(hierarchy, wn)
    rows = {c: match_name(c, tree, wn) for c in classes}
    unmatched = {c: r.reason for c, r in rows.items() if not r.matched or not r.imagenet_indices}
    if unmatched:
        why = "; ".join(f"{c}: {reason or 'covers no ImageNet-1k class'}" for c, reason in sorted(unmatched.items()))
        raise EmptyResultError(
            f"under hierarchy {hierarchy!r} these task classes have no ImageNet-1k coverage: {why}",
            "choose another --hierarchy (wordnet is the largest), or drop the classes from the task "
            "(explain a name with `metashift-hf match --explain NAME`)",
        )
    card = {
        "name": tree.name,
        "source": tree.provenance,
        "rule": "correct iff the top-1 ImageNet-1k class is a leaf under a topmost hierarchy node equal to any WordNet noun sense of the class name",
        "classes": {
            c: {"synset": r.synset, "wnid": r.wnid, "leaves_covered": len(r.imagenet_indices)}
            for c, r in sorted(rows.items())
        },
    }
    return {c: frozenset(int(i) for i in r.imagenet_indices) for c, r in rows.items()}, card


def head_coverage(
    classes: Sequence[str], hierarchy: str = "wordnet", labels: LabelMap | None = None
) -> tuple[dict[str, frozenset[int]], dict[str, Any]]:
    """Class name -> indices of the model's head outputs that count as correct for it.

    An ImageNet-1k head in class-index order (or ``labels`` None) is :func:`class_coverage`. A head
    whose labels are ImageNet-1k classes in another order or a subset is mapped through them. Any
    other head (ImageNet-21k wnids) is scored through WordNet 3.0: an output covers a class when one
    of the class name's noun senses is the output's synset or one of its hypernyms (instance
    hypernyms too); only ``hierarchy="wordnet"`` applies there. Unmapped outputs cover no class.
    """
    if labels is None or labels.is_imagenet_1k:
        return class_coverage(classes, hierarchy)
    card_labels = labels.card()
    in_1k = labels.imagenet_indices()
    if all(w is None or i is not None for w, i in zip(labels.wnids, in_1k)):
        cov, card = class_coverage(classes, hierarchy)
        out = {c: frozenset(k for k, i in enumerate(in_1k) if i is not None and i in cov[c]) for c in classes}
        _refuse_empty(out, hierarchy)
        card = {
            **card,
            "head": card_labels,
            "rule": card["rule"] + "; head outputs mapped to ImageNet-1k classes by their labels",
        }
        return out, card
    if hierarchy != "wordnet":
        raise EmptyResultError(
            f"the model's head has {labels.size} outputs beyond ImageNet-1k (e.g. ImageNet-21k wnids); only the "
            f"WordNet hierarchy scores them, not {hierarchy!r}",
            "use --hierarchy wordnet with this model",
        )
    wn = load_wordnet()
    senses = {c: {wnid_of(s) for s in noun_synsets(wn, c)} for c in classes}
    unresolved: list[dict] = []
    ancestors: list[set[str]] = []
    for k, w in enumerate(labels.wnids):
        syn = synset_of_offset(wn, int(w[1:])) if w else None
        if syn is None or syn.pos() != "n":
            if w:
                unresolved.append({"index": k, "label": labels.names[k], "wnid": w})
            ancestors.append(set())
            continue
        up = syn.closure(lambda s: s.hypernyms() + s.instance_hypernyms())
        ancestors.append({w} | {wnid_of(s) for s in up})
    out = {c: frozenset(k for k, a in enumerate(ancestors) if a & senses[c]) for c in classes}
    _refuse_empty(out, hierarchy)
    card = {
        "name": "wordnet (head wnids)",
        "source": "WordNet 3.0 hypernym closure of each head output's synset",
        "rule": "correct iff the top-1 head output's synset is, or lies under, any WordNet noun sense of the class name",
        "head": {**card_labels, "wnids_not_in_wordnet": unresolved[:50]},
        "classes": {c: {"senses": sorted(senses[c]), "outputs_covered": len(out[c])} for c in sorted(classes)},
    }
    return out, card


def task_coverage(
    classes: Sequence[str], hierarchy: str, labels: LabelMap | None, given: Mapping[str, Any] | None = None
) -> tuple[Mapping[str, Any], dict[str, Any]]:
    """``given`` (class -> head indices, ``EvalConfig.coverage``) with its card, else :func:`head_coverage`."""
    if given is None:
        return head_coverage(classes, hierarchy, labels)
    return given, {"name": "custom coverage", "classes": {c: len(list(given.get(c, ()))) for c in classes}}


def _refuse_empty(coverage: dict[str, frozenset[int]], hierarchy: str) -> None:
    empty = sorted(c for c, v in coverage.items() if not v)
    if empty:
        raise EmptyResultError(
            f"under hierarchy {hierarchy!r} no output of the model's head covers: {', '.join(empty)}",
            "use a model whose head includes these classes, or drop them from the task",
        )
