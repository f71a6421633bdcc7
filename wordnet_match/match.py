"""The published MetaShift -> ImageNet-1k matching, with every decision recorded in a match table.

Algorithm (as published): for each vocabulary name (spaces -> underscores, morphy applies) take its
WordNet noun senses in order and match the first one that is a node of the hierarchy. A subset is
selected when both its subject and its context are matched names (and, on an artifact, it is kept).
A class's ImageNet coverage is the set of leaves under every topmost hierarchy node equal to *any*
noun sense of the class name.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from metashift_hf.core.errors import InputFormatError, UnknownNameError, did_you_mean
from metashift_hf.core.names import parse_subset_name

from .hierarchy import Hierarchy
from .wordnet import noun_synsets, wnid_of


_EARLIER = "earlier senses not nodes"  # in a row's reason when a later sense was matched


@dataclass(frozen=True)
class SubsetRecord:
    subset: str
    subject: str
    context: str
    n_images: int | None = None  # None when only names are known
    kept: bool = True  # passes the build rules (always True for a names-only input)
    selected: bool = False  # kept, and both subject and context are matched names


@dataclass(frozen=True)
class MatchRow:
    name: str
    matched: bool
    synset: str | None  # e.g. "dog.n.01"
    wnid: str | None
    definition: str | None
    depth: int | None  # level of the matched node (root = 0)
    imagenet_indices: tuple[int, ...]  # ImageNet-1k classes covered (published rule: any noun sense)
    sense_indices: tuple[int, ...]  # ImageNet-1k classes under the matched sense only
    leaves: tuple[str, ...]  # hierarchy leaves covered (what the published figure counts)
    reason: str


@dataclass
class MatchResult:
    hierarchy: str
    table: dict[str, MatchRow]  # every vocabulary name, sorted
    subsets: list[SubsetRecord]  # every input subset, sorted by name, with kept/selected flags
    class_images: dict[str, int | None] = field(default_factory=dict)  # unique images, selected subsets
    kept_images: dict[str, int | None] = field(default_factory=dict)  # unique images, kept subsets (presets)
    read_from: dict = field(
        default_factory=dict
    )  # what was matched (artifact path + hash, or files); match.json `source`
    figures: dict = field(default_factory=dict)
    tasks: list = field(default_factory=list)  # list[TaskEntry], filled by wordnet_match.tasks
    _by_subject: dict | None = field(default=None, repr=False, compare=False)

    def selected(self) -> list[SubsetRecord]:
        return [s for s in self.subsets if s.selected]

    def classes(self) -> list[str]:
        """Matched classes: subjects with at least one selected subset."""
        return sorted({s.subject for s in self.subsets if s.selected})

    def present_classes(self) -> list[str]:
        """Subjects with at least one kept subset (matched or not)."""
        return sorted({s.subject for s in self.subsets if s.kept})

    def subsets_of(self, name: str, rule: str = "selected") -> list[str]:
        """A class's subsets (sorted): ``selected`` (matched version) or every ``kept`` one."""
        if rule not in ("selected", "kept"):
            raise ValueError(f"rule must be 'selected' or 'kept', not {rule!r}")
        if self._by_subject is None:
            self._by_subject = {}
            for s in self.subsets:
                self._by_subject.setdefault(s.subject, []).append(s)
        found = [s.subset for s in self._by_subject.get(name, ()) if getattr(s, rule)]
        if not found:
            known = self.classes() if rule == "selected" else self.present_classes()
            raise UnknownNameError(
                f"{name!r} has no {rule} subset here{did_you_mean(name, known)}",
                "list the classes with `metashift-hf tasks list` or explain with `metashift-hf match --explain NAME`",
            )
        return found

    def task_subsets(self, task) -> dict[str, list[str]]:
        """The subsets each class of a registry task draws from (per the task's ``subset_rule``)."""
        return {c: self.subsets_of(c, task.subset_rule) for c in task.classes}

    def later_senses(self) -> list[MatchRow]:
        """Matched names of selected subsets whose matched sense is not WordNet's first noun sense
        (``kite`` -> the hawk, not the toy): their ImageNet classes may not be what the images show."""
        used = {n for s in self.subsets if s.selected for n in (s.subject, s.context)}
        return [r for n, r in self.table.items() if n in used and r.matched and _EARLIER in r.reason]

    def row(self, name: str) -> MatchRow:
        if name not in self.table:
            raise UnknownNameError(
                f"{name!r} is not in the vocabulary{did_you_mean(name, self.table)}",
                "names are the subjects/contexts of the subsets (spaces allowed, e.g. 'coffee table')",
            )
        return self.table[name]


# ---------------------------------------------------------------- inputs


def read_vocabulary(path: str | os.PathLike) -> list[str]:
    """Names from ``class_hierarchy.json`` (parent -> children: parents and children), a JSON list, or text lines."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise InputFormatError(f"vocabulary file {path} does not exist", "check --vocabulary") from exc
    fix = "give class_hierarchy.json ({parent: [names]}), a JSON list of names, or a text file with one name per line"
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputFormatError(f"vocabulary file {path} is not JSON: {exc}", fix) from exc
        if isinstance(data, dict):
            names = []
            for parent, kids in data.items():
                if not isinstance(kids, list):
                    raise InputFormatError(f"vocabulary file {path}: value of {parent!r} is not a list", fix)
                names.append(parent)
                names.extend(kids)
        elif isinstance(data, list):
            names = data
        else:
            raise InputFormatError(f"vocabulary file {path} holds a {type(data).__name__}", fix)
    else:
        names = [line.strip() for line in text.splitlines() if line.strip()]
    bad = [n for n in names if not isinstance(n, str) or not n.strip()]
    if bad:
        raise InputFormatError(f"vocabulary file {path}: {bad[0]!r} is not a name", fix)
    return list(dict.fromkeys(names))


def read_subset_names(path: str | os.PathLike) -> list[SubsetRecord]:
    """One ``subject(context)`` per line (e.g. candidate-subset-names.txt); sizes unknown."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError as exc:
        raise InputFormatError(f"subset-names file {path} does not exist", "check --subset-names") from exc
    records = {}
    for number, line in enumerate(lines, 1):
        name = line.strip()
        if not name:
            continue
        try:
            subject, context = parse_subset_name(name)
        except InputFormatError as exc:
            raise InputFormatError(f"{path}:{number}: {exc.what}", exc.fix) from exc
        records[name] = SubsetRecord(name, subject, context)
    return [records[n] for n in sorted(records)]


def vocabulary_of(subsets: list[SubsetRecord]) -> list[str]:
    return sorted({s.subject for s in subsets} | {s.context for s in subsets})


# ---------------------------------------------------------------- matching


def _coverage(hierarchy: Hierarchy, wnids: set[str]) -> tuple[frozenset[str], tuple[int, ...]]:
    leaves = frozenset().union(*(hierarchy.leaves_under(n) for n in hierarchy.topmost(wnids & hierarchy.nodes)))
    index = hierarchy.imagenet_index
    return leaves, tuple(sorted(index[leaf] for leaf in leaves if leaf in index))


def match_name(name: str, hierarchy: Hierarchy, wn) -> MatchRow:
    """One row of the match table, with the reason in words."""
    senses = noun_synsets(wn, name)
    if not senses:
        return MatchRow(
            name,
            False,
            None,
            None,
            None,
            None,
            (),
            (),
            (),
            f"no WordNet noun sense for {name.replace(' ', '_')!r} (morphy applied)",
        )
    for position, sense in enumerate(senses):
        wnid = wnid_of(sense)
        if wnid not in hierarchy.nodes:
            continue
        leaves, indices = _coverage(hierarchy, {wnid_of(s) for s in senses})
        _, own = _coverage(hierarchy, {wnid})
        skipped = ", ".join(s.name() for s in senses[:position])
        reason = f"sense {position + 1} of {len(senses)} is a node of {hierarchy.name}"
        if skipped:
            reason += f" ({_EARLIER}: {skipped})"
        return MatchRow(
            name,
            True,
            sense.name(),
            wnid,
            sense.definition(),
            hierarchy.depth[wnid],
            indices,
            own,
            tuple(sorted(leaves)),
            reason,
        )
    listed = ", ".join(s.name() for s in senses[:6]) + (", ..." if len(senses) > 6 else "")
    reason = f"none of its {len(senses)} noun senses ({listed}) is a node of {hierarchy.name}"
    for sense in senses:
        parent = hierarchy.hidden_ids.get(wnid_of(sense))
        if parent:
            reason += (
                f"; {sense.name()} is in the file only under the key {hierarchy.hidden[parent]!r} "
                f"of {parent}, which the published walker does not read"
            )
    return MatchRow(name, False, None, None, None, None, (), (), (), reason)


def match(
    vocabulary: list[str],
    subsets: list[SubsetRecord],
    hierarchy: Hierarchy,
    wn,
    *,
    read_from: dict | None = None,
) -> MatchResult:
    """Match every vocabulary name, select subsets, and compute the published figures.

    Image counts per class are unknown here (None); ``run_match`` fills them in from an artifact.
    """
    table = {name: match_name(name, hierarchy, wn) for name in sorted(set(vocabulary))}
    matched = {n for n, row in table.items() if row.matched}
    records = sorted(
        (
            SubsetRecord(
                s.subset,
                s.subject,
                s.context,
                s.n_images,
                s.kept,
                s.kept and s.subject in matched and s.context in matched,
            )
            for s in subsets
        ),
        key=lambda s: s.subset,
    )
    result = MatchResult(hierarchy.name, table, records, read_from=dict(read_from or {}))
    selected = result.selected()
    classes = result.classes()
    result.class_images = {c: None for c in classes}
    leaves = set().union(*(table[c].leaves for c in classes)) if classes else set()
    indices = set().union(*(table[c].imagenet_indices for c in classes)) if classes else set()
    result.figures = {
        "vocabulary_names": len(table),
        "matched_names": len(matched),
        "subsets": len(selected),
        "classes": len(classes),
        "imagenet_leaves_covered": len(leaves),
        "imagenet_classes_covered": len(indices),
        "hierarchy": hierarchy.name,
        "hierarchy_nodes": len(hierarchy.nodes),
        "hierarchy_source": hierarchy.provenance,
        "hidden_subtrees": dict(sorted(hierarchy.hidden.items())),
    }
    return result
