"""Binary and multiclass tasks over matched classes, and the persisted task registry.

Binary task (our precise definition; the published count 19,024 has no code): an unordered pair of
matched classes a < b such that
  1. each has at least ``min_subsets`` selected subsets (on an artifact: kept subsets, i.e. >= 25 images),
  2. their matched hierarchy nodes share an ancestor at level ``level`` (root = level 0), equivalently
     the depth of their lowest common ancestor is >= ``level``,
  3. neither matched node is at or below the other (same synset, or e.g. animal vs dog, cannot be
     told apart by an ImageNet model).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

from metashift_hf.core.errors import UnknownNameError, did_you_mean
from metashift_hf.core.names import id_slug

from .hierarchy import Hierarchy
from .match import MatchResult


DEFAULT_MIN_SUBSETS = 5
DEFAULT_LEVEL = 2

PRESETS: dict[str, tuple[str, ...]] = {
    # the classes of the published pretrained-model table
    "imagenet-5": ("airplane", "cat", "dog", "elephant", "horse"),
    # the paper's 10-class task
    "animals-10": ("bear", "bird", "cat", "cow", "dog", "elephant", "giraffe", "horse", "sheep", "zebra"),
}


@dataclass(frozen=True)
class TaskEntry:
    task_id: str
    kind: str  # "binary" | "multiclass"
    classes: tuple[str, ...]  # sorted
    synsets: tuple[str, ...]  # matched synset per class ("" when the class is absent)
    lca: str  # wnid (or the root id) of the lowest common ancestor in the hierarchy
    lca_name: str
    lca_depth: int
    path_similarity: float  # WordNet path similarity (multiclass: mean over pairs); higher = harder
    n_subsets: tuple[int, ...]
    n_images: tuple[int, ...] | None  # unique images per class, when sizes are known
    subset_rule: str = "selected"  # which subsets of each class the task draws from: selected | kept
    available: bool = True
    reason: str = ""


slug = id_slug  # one rule for names inside every task id (core.names)


def binary_task_id(a: str, b: str) -> str:
    a, b = sorted((a, b))
    return f"bin-{slug(a)}-{slug(b)}"


class _Index:
    """Per-class facts computed once: matched node, ancestors, hypernym distances, counts."""

    def __init__(self, result: MatchResult, hierarchy: Hierarchy, wn):
        self.result, self.hierarchy, self.wn = result, hierarchy, wn
        self.n_subsets: dict[str, int] = {}  # selected subsets per matched class
        self.n_kept: dict[str, int] = {}  # kept subsets per present class
        for s in result.subsets:
            if s.selected:
                self.n_subsets[s.subject] = self.n_subsets.get(s.subject, 0) + 1
            if s.kept:
                self.n_kept[s.subject] = self.n_kept.get(s.subject, 0) + 1
        self.node = {c: result.table[c].wnid for c in self.n_subsets}
        self.ancestors = {c: hierarchy.ancestors(w) for c, w in self.node.items()}
        self._dist: dict[str, dict] = {}

    def hypernym_distances(self, name: str) -> dict:
        """Synset -> fewest hypernym/instance-hypernym steps up from the class's synset (nltk's rule)."""
        if name not in self._dist:
            start = self.wn.synset(self.result.table[name].synset)
            dist = {start: 0}
            frontier = [start]
            while frontier:
                nxt = []
                for s in frontier:
                    for h in s.hypernyms() + s.instance_hypernyms():
                        if h not in dist:
                            dist[h] = dist[s] + 1
                            nxt.append(h)
                frontier = nxt
            self._dist[name] = dist
        return self._dist[name]

    def path_similarity(self, a: str, b: str) -> float:
        da, db = self.hypernym_distances(a), self.hypernym_distances(b)
        common = da.keys() & db.keys()
        return 1.0 / (min(da[s] + db[s] for s in common) + 1) if common else 0.0

    def node_name(self, wnid: str) -> str:
        if wnid == self.hierarchy.root and not wnid.startswith("n"):
            return wnid
        return self.wn.synset_from_pos_and_offset("n", int(wnid[1:])).name()

    def entry(self, task_id: str, kind: str, classes: list[str], subset_rule: str = "selected") -> TaskEntry:
        """A task over ``classes``; LCA and similarity use the matched ones (all of them for binary tasks)."""
        classes = sorted(classes)
        matched = [c for c in classes if c in self.node]
        lca, depth, sim = "", -1, float("nan")
        if matched:
            common = frozenset.intersection(*(self.ancestors[c] for c in matched))
            lca = min(common, key=lambda n: (-self.hierarchy.depth[n], n))  # deepest; ties: smallest id
            depth = self.hierarchy.depth[lca]
        pairs = list(itertools.combinations(matched, 2))
        if pairs:
            sim = round(sum(self.path_similarity(a, b) for a, b in pairs) / len(pairs), 6)
        if subset_rule == "selected":
            counts, images = self.n_subsets, self.result.class_images
        else:
            counts, images = self.n_kept, self.result.kept_images
        per_class = [images.get(c) for c in classes]
        return TaskEntry(
            task_id=task_id,
            kind=kind,
            classes=tuple(classes),
            synsets=tuple(self.result.table[c].synset or "" if c in self.result.table else "" for c in classes),
            lca=lca,
            lca_name=self.node_name(lca) if lca else "",
            lca_depth=depth,
            path_similarity=sim,
            n_subsets=tuple(counts.get(c, 0) for c in classes),
            n_images=None if any(n is None for n in per_class) else tuple(per_class),
            subset_rule=subset_rule,
        )


def binary_tasks(
    result: MatchResult,
    hierarchy: Hierarchy,
    wn,
    *,
    min_subsets: int = DEFAULT_MIN_SUBSETS,
    level: int = DEFAULT_LEVEL,
    index: _Index | None = None,
) -> list[TaskEntry]:
    """Every binary task under the definition in this module's docstring, sorted by id."""
    index = index or _Index(result, hierarchy, wn)
    depth = hierarchy.depth
    eligible = sorted(c for c, n in index.n_subsets.items() if n >= min_subsets)
    tasks = []
    for a, b in itertools.combinations(eligible, 2):
        anc_a, anc_b = index.ancestors[a], index.ancestors[b]
        if index.node[a] in anc_b or index.node[b] in anc_a:
            continue  # nested or identical senses
        if max(depth[n] for n in anc_a & anc_b) < level:
            continue
        tasks.append(index.entry(binary_task_id(a, b), "binary", [a, b]))
    return sorted(tasks, key=lambda t: t.task_id)


def multiclass_task(
    result: MatchResult, hierarchy: Hierarchy, wn, classes, task_id: str | None = None, index: _Index | None = None
) -> TaskEntry:
    """A K-class task drawing on every kept subset of each class (the classes as built).

    Unavailable (with the reason) when a class is absent from the input; a present class with no
    ImageNet-1k node stays usable for training but is named in ``reason`` (no ImageNet evaluation).
    """
    classes = sorted(set(classes))
    task_id = task_id or "mc-" + "-".join(slug(c) for c in classes)
    index = index or _Index(result, hierarchy, wn)
    entry = index.entry(task_id, "multiclass", classes, subset_rule="kept")
    absent = [c for c in classes if c not in index.n_kept]
    if absent:
        return replace(
            entry,
            lca="",
            lca_name="",
            lca_depth=-1,
            path_similarity=float("nan"),
            available=False,
            reason=f"absent from the input (no kept subset): {', '.join(absent)}",
        )
    notes = []
    unmatched = [c for c in classes if c not in index.node]
    if unmatched:
        notes.append(
            f"{', '.join(unmatched)}: no matched subset under {hierarchy.name} "
            f"(not ImageNet-evaluable; LCA and similarity use the other classes)"
        )
    uncovered = [c for c in classes if c in index.node and not result.table[c].imagenet_indices]
    if uncovered:
        notes.append(f"{', '.join(uncovered)}: matched but cover no ImageNet-1k class under {hierarchy.name}")
    return replace(entry, reason="; ".join(notes))


def build_registry(
    result: MatchResult,
    hierarchy: Hierarchy,
    wn,
    *,
    min_subsets: int = DEFAULT_MIN_SUBSETS,
    level: int = DEFAULT_LEVEL,
) -> list[TaskEntry]:
    """Binary tasks + the multiclass presets (available or not), sorted by id."""
    index = _Index(result, hierarchy, wn)
    tasks = binary_tasks(result, hierarchy, wn, min_subsets=min_subsets, level=level, index=index)
    tasks += [
        multiclass_task(result, hierarchy, wn, classes, task_id, index=index) for task_id, classes in PRESETS.items()
    ]
    return sorted(tasks, key=lambda t: t.task_id)


def find_task(tasks: list[TaskEntry], task_id: str) -> TaskEntry:
    for task in tasks:
        if task.task_id == task_id:
            return task
    raise UnknownNameError(
        f"no task {task_id!r} in the registry{did_you_mean(task_id, [t.task_id for t in tasks])}",
        "list the ids with `metashift-hf tasks list` (binary ids are bin-<a>-<b> with a < b, spaces as _)",
    )
