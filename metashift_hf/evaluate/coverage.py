"""Which ImageNet-1k classes count as correct for a MetaShift class, under a chosen hierarchy."""
from __future__ import annotations

from typing import Any, Sequence

from metashift_hf.wordnet_match.hierarchy import load_hierarchy
from metashift_hf.wordnet_match.match import match_name
from metashift_hf.wordnet_match.wordnet import load_wordnet

from ..core.errors import EmptyResultError


def class_coverage(classes: Sequence[str], hierarchy: str = "wordnet") -> tuple[dict[str, frozenset[int]], dict[str, Any]]:
    """Class name -> ImageNet-1k indices under its matched synset, via ``wordnet_match`` (published rule).

    Returns the coverage and a hierarchy card for the report (name, source, per-class synset and
    leaf count). A class that does not match under the hierarchy is an error with the matcher's reason.
    """

    wn = load_wordnet()
    tree = load_hierarchy(hierarchy, wn)
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
        "source": tree.source,
        "rule": "correct iff the top-1 ImageNet-1k class is a leaf under a topmost hierarchy node equal to any WordNet noun sense of the class name",
        "classes": {c: {"synset": r.synset, "wnid": r.wnid, "leaves_covered": len(r.imagenet_indices)} for c, r in sorted(rows.items())},
    }
    return {c: frozenset(int(i) for i in r.imagenet_indices) for c, r in rows.items()}, card
