"""Matching end to end: inputs (an artifact, or subset-names + vocabulary files) -> match -> task registry -> folder."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metashift_hf.builders.artifact import Artifact
from metashift_hf.core.errors import MetashiftError
from metashift_hf.core.fsutil import check_out, sha256_file
from metashift_hf.wordnet_match.explain import explain_name, explain_subset
from metashift_hf.wordnet_match.hierarchy import load_hierarchy
from metashift_hf.wordnet_match.match import (
    MatchResult,
    SubsetRecord,
    match,
    read_subset_names,
    read_vocabulary,
    vocabulary_of,
)
from metashift_hf.wordnet_match.store import MATCH_KIND, write_match
from metashift_hf.wordnet_match.tasks import (
    DEFAULT_LEVEL,
    DEFAULT_MIN_SUBSETS,
    PRESETS,
    build_registry,
)
from metashift_hf.wordnet_match.wordnet import load_wordnet


def artifact_inputs(artifact) -> tuple[list[str], list[SubsetRecord], dict]:
    """Vocabulary (every subject/context of its candidate subsets), subsets with sizes and kept flags."""
    art = Artifact.load(artifact)
    table = art.subsets_table()
    records = [
        SubsetRecord(str(s), str(a), str(c), int(n), bool(k))
        for s, a, c, n, k in zip(table["subset"], table["subject"], table["context"], table["n_images"], table["kept"])
    ]
    read_from = {"kind": "artifact", "path": str(Path(art.root)), "content_hash": art.content_hash}
    return vocabulary_of(records), sorted(records, key=lambda r: r.subset), read_from


def load_inputs(artifact=None, subset_names=None, vocabulary=None):
    """(artifact or None, vocabulary, subset records, description of what was read) from one of the two input kinds."""
    if (artifact is None) == (subset_names is None):
        raise MetashiftError(
            "give exactly one input: an artifact, or a subset-names file (with an optional vocabulary file)",
            "use --artifact ARTIFACT, or --subset-names FILE [--vocabulary FILE]",
        )
    if artifact is not None:
        art = Artifact.load(artifact)
        names, subsets, read_from = artifact_inputs(art)
        return art, names, subsets, read_from
    subsets = read_subset_names(subset_names)
    names = read_vocabulary(vocabulary) if vocabulary else vocabulary_of(subsets)
    read_from = {"kind": "files", "subset_names": {"path": str(subset_names), "sha256": sha256_file(subset_names)}}
    if vocabulary:
        read_from["vocabulary"] = {"path": str(vocabulary), "sha256": sha256_file(vocabulary)}
    return None, names, subsets, read_from


@dataclass(frozen=True)
class MatchInputs:
    """What a match reads: an ``artifact``, or a ``subset_names`` file (``vocabulary`` defaults to the
    names in the subsets); the ``hierarchy`` (``wordnet`` | ``paper`` | ``tree:PATH``) with the local
    published tree (``paper_tree``, for ``paper``); WordNet's ``cache_dir``."""

    artifact: Any = None  # an Artifact or its folder
    subset_names: str | os.PathLike | None = None
    vocabulary: str | os.PathLike | None = None
    hierarchy: str = "wordnet"
    paper_tree: str | os.PathLike | None = None
    cache_dir: str | os.PathLike | None = None

    def files(self) -> list:
        """Every local file or folder read (an output may never be one of them)."""
        tree = self.hierarchy[len("tree:") :] if self.hierarchy.startswith("tree:") else None
        return [self.subset_names, self.vocabulary, self.paper_tree, tree]


def run_match(
    inputs: MatchInputs,
    *,
    out: str | os.PathLike | None = None,
    min_subsets: int = DEFAULT_MIN_SUBSETS,
    level: int = DEFAULT_LEVEL,
    write: bool = True,
    force: bool = False,
) -> MatchResult:
    """Match, enumerate tasks and write the folder (``out``, default ``ARTIFACT/match``) when ``write``.

    ``out`` must be new, empty or (with ``force``) an earlier match folder.
    """
    art, names, subsets, read_from = load_inputs(inputs.artifact, inputs.subset_names, inputs.vocabulary)
    if out is None and art is not None:
        out = Path(art.root) / "match"
    if write and out is not None:
        out = check_out(out, MATCH_KIND, force=force, inputs=[*inputs.files(), art.root if art is not None else None])
    wn = load_wordnet(cache_dir=inputs.cache_dir)
    tree = load_hierarchy(inputs.hierarchy, wn, paper_tree=inputs.paper_tree)
    result = match(names, subsets, tree, wn, read_from=read_from)
    if art is not None:
        result.class_images = {
            c: len(frozenset().union(*(art.images(s) for s in result.subsets_of(c)))) for c in result.classes()
        }
        present = set(result.present_classes())
        wanted = sorted({c for classes in PRESETS.values() for c in classes} & present)
        result.kept_images = {c: len(art.class_images(c, kept_only=True)) for c in wanted}
    result.tasks = build_registry(result, tree, wn, min_subsets=min_subsets, level=level)
    binary = [t for t in result.tasks if t.kind == "binary"]
    presets = [t for t in result.tasks if t.kind == "multiclass"]
    result.figures["tasks"] = {
        "min_subsets": min_subsets,
        "min_images_per_subset": (art.options.min_images_per_subset if art is not None else None),
        "level": level,
        "binary": len(binary),
        "multiclass_available": [t.task_id for t in presets if t.available],
        "multiclass_unavailable": {t.task_id: t.reason for t in presets if not t.available},
    }
    result.figures["wordnet_version"] = wn.get_version()
    if write and out is not None:
        write_match(result, out, force=force)
    return result


def explain_names(names: list[str], inputs: MatchInputs = MatchInputs()) -> str:
    """Explain names or ``subject(context)`` subsets; with an artifact or subset names, also how they are used there."""
    wn = load_wordnet(cache_dir=inputs.cache_dir)
    tree = load_hierarchy(inputs.hierarchy, wn, paper_tree=inputs.paper_tree)
    result = None
    if inputs.artifact is not None or inputs.subset_names is not None:
        _, vocab, subsets, read_from = load_inputs(inputs.artifact, inputs.subset_names, inputs.vocabulary)
        result = match(vocab, subsets, tree, wn, read_from=read_from)
    parts = []
    for name in names:
        name = name.strip()
        if name.endswith(")") and "(" in name:
            parts.append(explain_subset(name, tree, wn, result))
        else:
            parts.append(explain_name(name, tree, wn, result))
    return "\n\n".join(parts)
