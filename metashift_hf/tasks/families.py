"""The task-family registry: task ids -> split plans (no images read).

Every task id of an artifact belongs to exactly one :class:`TaskFamily`. A family knows its ids
(:meth:`~TaskFamily.ids`), whether it owns an id (:meth:`~TaskFamily.owns`), its typed options
(:attr:`~TaskFamily.options_type`, a frozen dataclass whose fields are the documented options) and
how to plan one of its tasks (:meth:`~TaskFamily.plan`). :func:`plan_task` and :func:`task_ids`
are the only entry points; nothing else dispatches on task-id prefixes.

Adding a family = one subclass + ``TASK_FAMILIES.register(MyFamily())`` (the one registry idiom,
``core.registry.Registry``; entries are family instances, resolved in registration order)::

    @dataclass(frozen=True)
    class LevelOptions:
        level: int = field(default=1, metadata={"doc": "shift level, 1 (mild) .. 4 (strong)"})

    class LevelFamily(TaskFamily):
        name, title, kind, options_type = "level", "shift-by-level tasks (level-<class>)", "level", LevelOptions
        def owns(self, artifact, task_id): return task_id.startswith("level-")
        def ids(self, artifact): return [f"level-{c}" for c in artifact.classes()]
        def classes(self, artifact, task_id): return (task_id[len("level-"):],)
        def plan(self, artifact, task_id, options, seed): ...  # -> TaskPlan

    TASK_FAMILIES.register(LevelFamily())

Options arrive as a flat mapping (Python keywords, ``--set KEY=VALUE``, builder config fields);
:func:`parse_options` checks names against the family's options dataclass and converts
types with :mod:`.task_options`, where the options dataclasses live (an unknown or misspelt name, a
wrong type -> a :class:`MetashiftError` naming the option and the fix); the family checks values
while planning.
"""

from __future__ import annotations

import math
import os
import typing
import weakref
from abc import ABC, abstractmethod
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, ClassVar, Mapping

from metashift_hf import wordnet_match
from metashift_hf.builders.artifact import Artifact
from metashift_hf.builders.distances import RULE_SPECTRAL as DISTANCE_RULE_SPECTRAL
from metashift_hf.builders.distances import Distance
from metashift_hf.core.errors import (
    EmptyResultError,
    InputFormatError,
    MetashiftError,
    UnknownNameError,
    did_you_mean,
)
from metashift_hf.core.names import SubsetName, id_slug
from metashift_hf.core.options import seed as seed_option
from metashift_hf.core.options import text as text_option
from metashift_hf.core.registry import Registry

from . import coco_tasks, level_plans, levels, paper_tasks, shifts, subpopbench
from .plan import ArtifactSource, GroupDef, TaskPlan
from .spec import CollectionFilters, RegistryFacts, Rules
from .task_options import (  # the options dataclasses stay importable from here, as docs/tasks.md shows
    DEFAULT,
    ClassOptions,
    CocoSubpopOptions,
    CollectionOptions,
    PaperDGOptions,
    PaperSubpopOptions,
    SubpopBenchOptions,
    given_options,
    given_sizes,
    option_docs,
    option_value,
)


_REGISTRY_FILE = "tasks.parquet"  # written by `metashift-hf match` (wordnet_match)
# The old Hugging Face loader's spelling of the ``attributes`` task (a builder config flag).
OLD_LOADER_ATTRIBUTES_FLAG = "attributes_dataset"


# ---------------------------------------------------------------------------------------------
# families
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TaskInfo:
    """What `metashift-hf tasks list|show` says about a task id without planning it."""

    task_id: str
    family: str
    kind: str
    classes: tuple[str, ...]


class TaskFamily(ABC):
    """One kind of task id. Subclasses set the class attributes and implement the methods."""

    name: ClassVar[str]  # short identifier, e.g. "paper-dg"
    title: ClassVar[str]  # for messages: "collections (classes, attributes)"
    kind: ClassVar[str]  # what `metashift-hf tasks list --kind` filters on
    options_type: ClassVar[type]  # frozen dataclass of this family's options

    def kinds(self) -> tuple[str, ...]:
        """Every kind :meth:`info` can report (the CLI's --kind choices)."""
        return (self.kind,)

    def info(self, artifact: Artifact, task_id: str) -> TaskInfo:
        return TaskInfo(task_id, self.name, self.kind, tuple(self.classes(artifact, task_id)))

    @abstractmethod
    def owns(self, artifact: Artifact, task_id: str) -> bool:
        """Whether ``task_id`` names a task of this family (valid on this artifact or not)."""

    @abstractmethod
    def ids(self, artifact: Artifact) -> list[str]:
        """The ids of this family that can be planned on ``artifact``."""

    @abstractmethod
    def classes(self, artifact: Artifact, task_id: str) -> tuple[str, ...]:
        """The classes of one of this family's tasks."""

    @abstractmethod
    def plan(self, artifact: Artifact, task_id: str, options: Any, seed: int) -> TaskPlan:
        """The split plan; ``options`` is an instance of :attr:`options_type`."""


# Ids are resolved in registration order: the first family that owns an id plans it.
TASK_FAMILIES: Registry[TaskFamily] = Registry("task family", "see docs/tasks.md (task families)")


def families() -> tuple[TaskFamily, ...]:
    return TASK_FAMILIES.values()


def parse_options(family: TaskFamily, task_id: str, raw: Mapping[str, Any]) -> Any:
    """Flat options -> ``family.options_type``; unknown names and wrong types are reported."""
    known = {f.name: f for f in fields(family.options_type)}
    hints = typing.get_type_hints(family.options_type)
    values = {}
    for name, value in raw.items():
        if name not in known:
            others = [
                f.title for f in TASK_FAMILIES.values() if f is not family and name in option_docs(f.options_type)
            ]
            if others:
                raise InputFormatError(
                    f"option {name} applies to the {' and the '.join(others)}, not task {task_id!r}",
                    f"drop {name}, or use a task of that family",
                )
            raise UnknownNameError(
                f"unknown option {name!r} for task {task_id}" + did_you_mean(name, known),
                f"this task accepts: {', '.join(sorted(known))} (and seed)",
            )
        values[name] = option_value(task_id, name, value, hints[name])
    return family.options_type(**values)


def _need_cat_dog(artifact: Artifact, task_id: str) -> None:
    """The paper's tasks and SubpopBench's are cat vs dog: refused by name on an artifact without both."""
    if not set(paper_tasks.CLASSES) <= set(artifact.classes()):
        raise UnknownNameError(
            f"task {task_id} needs the classes cat and dog; artifact {artifact.root} lacks them",
            "build the artifact from GQA scene graphs (or the demo world), which has both",
        )


class _PaperFamily(TaskFamily):
    task_ids: ClassVar[tuple[str, ...]]

    def owns(self, artifact: Artifact, task_id: str) -> bool:
        return task_id in self.task_ids

    def ids(self, artifact: Artifact) -> list[str]:
        if not set(paper_tasks.CLASSES) <= set(artifact.classes()):
            return []
        return [i for i in paper_tasks.applicable(group_source(artifact)) if i in self.task_ids]

    def classes(self, artifact: Artifact, task_id: str) -> tuple[str, ...]:
        return paper_tasks.CLASSES

    def plan(self, artifact: Artifact, task_id: str, options: Any, seed: int) -> TaskPlan:
        _need_cat_dog(artifact, task_id)
        plan = paper_tasks.plan(
            task_id, group_source(artifact), seed=seed, scale=options.scale, overrides=given_sizes(options)
        )
        plan.spec = replace(plan.spec, level=levels.paper_level(plan.spec))
        return plan


class PaperDGFamily(_PaperFamily):
    name, title, kind, options_type = "paper-dg", "paper DG tasks (paper-dg-cat-dog-<k>)", "paper", PaperDGOptions
    task_ids = paper_tasks.DG_IDS


class PaperSubpopFamily(_PaperFamily):
    name, title, kind = "paper-subpop", "paper subpopulation tasks (paper-subpop-cat-dog-<p>)", "paper"
    options_type = PaperSubpopOptions
    task_ids = paper_tasks.SUBPOP_IDS


class CocoSubpopFamily(TaskFamily):
    name, kind = "paper-coco-subpop", "paper"
    title = "paper COCO subpopulation tasks (paper-coco-subpop-cat-dog-<p>)"
    options_type = CocoSubpopOptions

    def owns(self, artifact: Artifact, task_id: str) -> bool:
        return task_id in coco_tasks.TASK_IDS

    def ids(self, artifact: Artifact) -> list[str]:
        return list(coco_tasks.TASK_IDS) if coco_tasks.applicable(group_source(artifact)) else []

    def classes(self, artifact: Artifact, task_id: str) -> tuple[str, ...]:
        return coco_tasks.CLASSES

    def plan(self, artifact: Artifact, task_id: str, options: Any, seed: int) -> TaskPlan:
        sizes = paper_tasks.sized(task_id, coco_tasks.default_sizes(task_id), options.scale, given_sizes(options))
        plan = coco_tasks.plan(task_id, group_source(artifact), sizes=sizes, seed=seed)
        plan.spec = replace(plan.spec, level=levels.paper_level(plan.spec))
        return plan


class SubpopBenchFamily(TaskFamily):
    """SubpopBench's MetaShift (``subpopbench-cat-dog``): the four indoor/outdoor groups pooled and split at random
    by SubpopBench's rule, or by a SubpopBench metadata file (metashift_hf/tasks/subpopbench.py)."""

    name, kind = "subpopbench", "paper"
    title = "SubpopBench's MetaShift (subpopbench-cat-dog)"
    options_type = SubpopBenchOptions

    def owns(self, artifact: Artifact, task_id: str) -> bool:
        return task_id == subpopbench.TASK_ID

    def ids(self, artifact: Artifact) -> list[str]:
        # the paper subpopulation tasks' groups are SubpopBench's four: planable where those are
        return [subpopbench.TASK_ID] if paper_tasks.SUBPOP_IDS[0] in PaperSubpopFamily().ids(artifact) else []

    def classes(self, artifact: Artifact, task_id: str) -> tuple[str, ...]:
        return subpopbench.CLASSES

    def plan(self, artifact: Artifact, task_id: str, options: SubpopBenchOptions, seed: int) -> TaskPlan:
        _need_cat_dog(artifact, task_id)
        return subpopbench.plan(group_source(artifact), metadata=options.metadata, seed=seed)


def _collection_contexts(
    task: str,
    artifact: Artifact,
    source: ArtifactSource,
    classes: list[str],
    kinds: tuple[str, ...] | None,
    only: tuple[str, ...] | None,
    opts: ClassOptions,
) -> dict[str, dict[str, frozenset[str]]]:
    """class -> {context: ids} after the migration filters (kind, subset list, size, local groups)."""
    threshold, min_groups = opts.image_subset_size_threshold, opts.min_local_groups
    base = artifact.options.min_images_per_subset
    if threshold is not None and threshold < base:
        raise InputFormatError(
            f"image_subset_size_threshold={threshold} is below the artifact's min_images_per_subset={base}: "
            "smaller subsets were not kept in this artifact",
            f"use a threshold >= {base}, or rebuild with `metashift-hf build --min-images-per-subset {threshold}`",
        )
    only_set = set(only) if only else None
    if only_set:
        kept = {str(SubsetName(c, x)) for c in classes for x in source.kept_contexts(c)}
        bad = sorted(only_set - kept)
        if bad:
            raise UnknownNameError(
                f"task {task}: {bad[0]!r} is not a kept subset of the selected classes"
                + did_you_mean(bad[0], sorted(kept)),
                "pass subsets as 'subject(context)' of kept subsets, e.g. 'cat(orange)'",
            )
    out: dict[str, dict[str, frozenset[str]]] = {}
    for c in classes:
        ctxs = {}
        for ctx, ids in source.kept_contexts(c).items():
            name = str(SubsetName(c, ctx))
            if kinds and source.kind(name) not in kinds:
                continue
            if only_set is not None and name not in only_set:
                continue
            if threshold is not None and len(ids) < threshold:
                continue
            ctxs[ctx] = ids
        if min_groups is not None and len(ctxs) <= min_groups:
            continue
        if ctxs:
            out[c] = ctxs
    if not out:
        raise EmptyResultError(
            f"task {task}: no class has subsets left after the filters",
            "relax image_subset_size_threshold / min_local_groups / attributes / selected_classes",
        )
    return out


def _filters(opts: ClassOptions) -> CollectionFilters:
    return CollectionFilters(
        image_subset_size_threshold=opts.image_subset_size_threshold, min_local_groups=opts.min_local_groups
    )


def class_task_id(cls: str) -> str:
    """``class-<name>`` with the name made Hub-safe (``class-living_room``), so every listed id exports."""
    return f"{ClassFamily.prefix}{id_slug(cls)}"


def class_of_task(task_id: str, artifact: Artifact) -> str | None:
    """The class a ``class-<name>`` id stands for, or None."""
    return next((c for c in artifact.classes() if class_task_id(c) == task_id), None)


class ClassFamily(TaskFamily):
    """``class-<name>``: every image of one class once, with all its contexts."""

    name, title, kind, options_type = "class", "class collections (class-<name>)", "class", ClassOptions
    prefix = "class-"

    def owns(self, artifact: Artifact, task_id: str) -> bool:
        return task_id.startswith(self.prefix)

    def ids(self, artifact: Artifact) -> list[str]:
        return sorted(class_task_id(c) for c in artifact.classes())

    def classes(self, artifact: Artifact, task_id: str) -> tuple[str, ...]:
        cls = class_of_task(task_id, artifact)
        return (cls,) if cls is not None else (task_id[len(self.prefix) :],)

    def plan(self, artifact: Artifact, task_id: str, options: ClassOptions, seed: int) -> TaskPlan:
        cls = class_of_task(task_id, artifact)
        if cls is None:
            raise unknown_task(task_id, artifact)
        source = group_source(artifact)
        ctx = _collection_contexts(task_id, artifact, source, [cls], None, None, options)
        return shifts.collection(task_id, source, contexts=ctx, seed=seed, filters=_filters(options))


class CollectionFamily(TaskFamily):
    """``classes`` (every class) and ``attributes`` (attribute subsets only): the old loader's configs."""

    name, title, kind, options_type = (
        "collections",
        "collections (classes, attributes)",
        "collection",
        CollectionOptions,
    )
    task_ids = ("classes", "attributes")

    def owns(self, artifact: Artifact, task_id: str) -> bool:
        return task_id in self.task_ids

    def ids(self, artifact: Artifact) -> list[str]:
        out = ["classes"] if artifact.classes() else []
        table = artifact.subsets_table()
        if ((table["kind"] == "attribute") & table["kept"]).any():
            out.append("attributes")
        return out

    def classes(self, artifact: Artifact, task_id: str) -> tuple[str, ...]:
        return tuple(sorted(artifact.classes()))

    def plan(self, artifact: Artifact, task_id: str, options: CollectionOptions, seed: int) -> TaskPlan:
        if options.attributes is not None and task_id != "attributes":
            raise InputFormatError(
                f"option attributes= applies to the 'attributes' task, not {task_id!r}",
                "use task 'attributes' or drop the attributes option",
            )
        classes = artifact.classes()
        if options.selected_classes is not None:
            for c in options.selected_classes:
                if c not in classes:
                    raise UnknownNameError(
                        f"task {task_id}: selected class {c!r} is not a class of {artifact.root}"
                        + did_you_mean(c, classes),
                        "pick classes from Artifact.classes()",
                    )
            classes = sorted(set(options.selected_classes))
        kinds = None
        if task_id == "attributes":
            kinds = ("attribute",)
            if "attributes" not in self.ids(artifact):
                raise EmptyResultError(
                    f"artifact {artifact.root} has no kept attribute subsets",
                    "build with --include-attributes or from the attributes pickle",
                )
        source = group_source(artifact)
        ctx = _collection_contexts(task_id, artifact, source, classes, kinds, options.attributes, options)
        filters = replace(_filters(options), selected_classes=options.selected_classes, attributes=options.attributes)
        return shifts.collection(task_id, source, contexts=ctx, seed=seed, filters=filters)


def _match_dir(artifact: Artifact) -> Path:
    return Path(artifact.root) / "match"


_SOURCES: "weakref.WeakKeyDictionary[Artifact, ArtifactSource]" = weakref.WeakKeyDictionary()


def group_source(artifact: Artifact) -> ArtifactSource:
    """One ArtifactSource per loaded Artifact: building it walks every candidate subset (~2 s at full
    scale), and listing task ids asked for one per family (six), planning for one per task."""
    source = _SOURCES.get(artifact)
    if source is None:
        source = _SOURCES[artifact] = ArtifactSource(artifact)
    return source


_REGISTRIES: "weakref.WeakKeyDictionary[Artifact, tuple[tuple, dict]]" = weakref.WeakKeyDictionary()
_MATCHES: "weakref.WeakKeyDictionary[Artifact, tuple[tuple, Any]]" = weakref.WeakKeyDictionary()


def match_registry(artifact: Artifact) -> dict:
    """task_id -> wordnet_match TaskEntry for ARTIFACT/match/ (empty when the artifact is not matched).

    Read once per loaded Artifact (and again only when the file changes): every family's ``owns``
    asks for it, so listing thousands of task ids used to read the parquet file once per id.
    """
    path = _match_dir(artifact) / _REGISTRY_FILE
    try:
        st = path.stat()
    except FileNotFoundError:
        return {}
    stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
    known = _REGISTRIES.get(artifact)
    if known is None or known[0] != stamp:
        known = (stamp, {t.task_id: t for t in wordnet_match.registry(_match_dir(artifact))})
        _REGISTRIES[artifact] = known
    return known[1]


def _loaded_match(art: Artifact):
    """The artifact's match result, read once per loaded Artifact (again only when match.json changes):
    planning every matched task of a zoo read it once per task (quadratic in the vocabulary)."""
    folder = _match_dir(art)
    try:
        st = (folder / "match.json").stat()
    except FileNotFoundError:
        return wordnet_match.load_match(folder)  # its own error says what is missing
    stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
    known = _MATCHES.get(art)
    if known is None or known[0] != stamp:
        known = (stamp, wordnet_match.load_match(folder))
        _MATCHES[art] = known
    return known[1]


def _matched_subsets(art: Artifact, entry) -> dict[str, list[str]] | None:
    """Per class, the subsets a registry task draws from: ``selected`` = subject and context both
    matched to ImageNet (the ImageNet-matched MetaShift); ``kept`` = every kept subset (None)."""
    if entry.subset_rule == "kept":
        return None
    match = _loaded_match(art)
    out = {}
    for c in entry.classes:
        try:
            out[c] = match.subsets_of(c, "selected")
        except UnknownNameError:
            out[c] = []  # community_shift reports the class as having no usable subsets
    return out


def _community_distance(artifact: Artifact):
    """Paper rule (size-weighted centre of member embeddings); a group with an unembedded member gets
    the resistance between the groups instead, or 'disconnected' (the Distance's rule/status says which)."""

    def fn(cls: str, id_group: GroupDef, ood: list[GroupDef]) -> Distance:
        groups = {g.name: list(g.contexts) for g in [id_group, *ood]}
        return artifact.group_distance(cls, groups, id_group.name, [g.name for g in ood], rule="paper")

    return fn


class MatchedFamily(TaskFamily):
    """Binary (``bin-<a>-<b>``) and multiclass (presets such as ``imagenet-5``) tasks of the match
    registry ``ARTIFACT/match/tasks.parquet``; community shift with the paper distance."""

    name, title, kind, options_type = (
        "matched",
        "matched tasks (bin-<a>-<b>, multiclass presets)",
        "matched",
        shifts.CommunitySizes,
    )

    def owns(self, artifact: Artifact, task_id: str) -> bool:
        return task_id in match_registry(artifact)

    def ids(self, artifact: Artifact) -> list[str]:
        return sorted(t for t, e in match_registry(artifact).items() if e.available)

    def classes(self, artifact: Artifact, task_id: str) -> tuple[str, ...]:
        return tuple(match_registry(artifact)[task_id].classes)

    def kinds(self) -> tuple[str, ...]:
        return ("binary", "multiclass")  # wordnet_match TaskEntry.kind

    def info(self, artifact: Artifact, task_id: str) -> TaskInfo:
        entry = match_registry(artifact)[task_id]
        return TaskInfo(task_id, self.name, entry.kind, tuple(entry.classes))

    def plan(self, artifact: Artifact, task_id: str, options: shifts.CommunitySizes, seed: int) -> TaskPlan:
        entry = match_registry(artifact)[task_id]
        if not entry.available:
            raise EmptyResultError(
                f"task {task_id} is not available on {artifact.root}: {entry.reason}",
                "pick another id from `metashift-hf tasks list --artifact ARTIFACT`",
            )
        classes = sorted(entry.classes)
        missing = [c for c in classes if c not in artifact.classes()]
        if missing:
            raise EmptyResultError(
                f"task {task_id}: classes {missing} are not classes of {artifact.root}",
                f"re-run `metashift-hf match --artifact {artifact.root}` for this artifact",
            )
        return shifts.community_shift(
            task_id,
            group_source(artifact),
            classes=classes,
            sizes=options,
            seed=seed,
            distance_fn=_community_distance(artifact),
            distance_rule="paper",
            subsets=_matched_subsets(artifact, entry),
            registry=RegistryFacts(
                kind=entry.kind,
                lca=entry.lca,
                lca_name=entry.lca_name,
                lca_depth=int(entry.lca_depth),
                path_similarity=None if math.isnan(entry.path_similarity) else float(entry.path_similarity),
                subset_rule=entry.subset_rule,
            ),
        )


def _context_distance(artifact: Artifact):
    """Distance between two sets of contexts of one class: the paper rule (size-weighted centres
    of the member subsets' spectral embeddings) on the class's stored meta-graph."""

    def fn(cls: str, a, b) -> float:
        d = artifact.set_distance(cls, [str(SubsetName(cls, x)) for x in a], [str(SubsetName(cls, x)) for x in b])
        if d.rule != DISTANCE_RULE_SPECTRAL:  # one scale per family: resistance numbers are not comparable
            raise MetashiftError(
                f"{cls}: contexts {list(a)} / {list(b)} have no spectral distance ({d})",
                "pick contexts whose subsets lie in the class's embedded meta-graph component",
            )
        return d.value

    return fn


def _embedded_contexts(artifact: Artifact, classes) -> list[str]:
    """Contexts kept for every class with an embedding in every class's meta-graph (distances exist)."""
    sets = [
        {x for x in group_source(artifact).kept_contexts(c) if artifact.embedding(str(SubsetName(c, x))) is not None}
        for c in classes
    ]
    return sorted(set.intersection(*sets)) if sets else []


class ShiftFamily(TaskFamily):
    """``shift-<type>-<A>-<B>-<level>``: one family per shift type (tasks.levels). Any pair of
    classes plans; the pair cat/dog is listed when the artifact has it and it supplies the family."""

    kind, options_type = "shift", levels.LevelSizes
    shift_type: ClassVar[str]
    listed_pair: ClassVar[tuple[str, str]] = ("cat", "dog")

    def owns(self, artifact: Artifact, task_id: str) -> bool:
        return task_id.startswith(f"{levels.PREFIX}-{self.shift_type}-")

    def ids(self, artifact: Artifact) -> list[str]:
        pair = self.listed_pair
        if not set(pair) <= set(artifact.classes()):
            return []
        source = group_source(artifact)
        o = levels.LevelSizes()
        shared = level_plans.shared_contexts(source, pair, o.min_images, shifts.ambiguous_images(source, pair))
        if len(shared) < o.test_contexts + o.levels * o.train_contexts:
            return []
        return [levels.task_id(self.shift_type, pair, n) for n in levels.level_names(self.shift_type, o.levels)]

    def classes(self, artifact: Artifact, task_id: str) -> tuple[str, ...]:
        return levels.parse_task_id(task_id, artifact.classes())[1]

    def plan(self, artifact: Artifact, task_id: str, options: levels.LevelSizes, seed: int) -> TaskPlan:
        classes = self.classes(artifact, task_id)
        source = group_source(artifact)
        shared = level_plans.shared_contexts(
            source, classes, options.min_images, shifts.ambiguous_images(source, classes)
        )
        embedded = set(_embedded_contexts(artifact, classes))
        # cat/dog: the paper's indoor/outdoor groups are the conditional factor (s1 = indoor)
        paper = paper_tasks.SUBPOP_GROUPS if set(classes) == set(paper_tasks.CLASSES) else None
        return level_plans.plan(
            task_id,
            source,
            _context_distance(artifact),
            artifact.classes(),
            seed=seed,
            sizes=options,
            distance_rule="paper",
            candidates=[x for x in shared if x in embedded],
            paper_groups=paper,
        )


class MarginalShiftFamily(ShiftFamily):
    name, title, shift_type = "shift-marginal", "marginal shift levels (shift-marginal-<a>-<b>-d<k>)", "marginal"


class ConditionalShiftFamily(ShiftFamily):
    name, title, shift_type = (
        "shift-conditional",
        "conditional shift levels (shift-conditional-<a>-<b>-delta<dd>)",
        "conditional",
    )


class JointShiftFamily(ShiftFamily):
    name, title, shift_type = "shift-joint", "joint shift levels (shift-joint-<a>-<b>-d<k>-delta<dd>)", "joint"


for _family in (
    PaperDGFamily(),
    PaperSubpopFamily(),
    CocoSubpopFamily(),
    SubpopBenchFamily(),
    CollectionFamily(),
    ClassFamily(),
    MatchedFamily(),
    MarginalShiftFamily(),
    ConditionalShiftFamily(),
    JointShiftFamily(),
):
    TASK_FAMILIES.register(_family)


# ---------------------------------------------------------------------------------------------
# entry points
# ---------------------------------------------------------------------------------------------
def kinds() -> tuple[str, ...]:
    """Every task kind of the registered families, in registration order."""
    out: list[str] = []
    for f in TASK_FAMILIES.values():
        out += [k for k in f.kinds() if k not in out]
    return tuple(out)


def task_ids(artifact: Artifact) -> list[str]:
    """Every task id valid for this artifact, family by family (matched ones when ARTIFACT/match/ exists)."""
    out: list[str] = []
    for f in TASK_FAMILIES.values():
        out += [i for i in f.ids(artifact) if i not in out]
    return out


def unknown_task(task: str, artifact: Artifact) -> UnknownNameError:
    return UnknownNameError(
        f"unknown task {task!r} for artifact {artifact.root}" + did_you_mean(task, task_ids(artifact)),
        "list the valid ids with `metashift-hf tasks list --artifact ARTIFACT` "
        "(matched bin-/multiclass ids need `metashift-hf match --artifact ARTIFACT` first)",
    )


def family_of(artifact: Artifact, task_id: str) -> TaskFamily:
    """The family that owns ``task_id`` (UnknownNameError with suggestions when none does)."""
    if not task_id:
        raise UnknownNameError(
            "no task id given",
            "pass a task id, e.g. 'paper-dg-cat-dog-1' (list them with `metashift-hf tasks list --artifact ARTIFACT`)",
        )
    for f in TASK_FAMILIES.values():
        if f.owns(artifact, task_id):
            return f
    raise unknown_task(task_id, artifact)


def _rules(artifact: Artifact) -> Rules:
    o = artifact.options
    return Rules(
        min_images_per_subset=o.min_images_per_subset,
        min_subsets_per_class=o.min_subsets_per_class,
        edge_threshold=float(o.edge_threshold),
        community_method=o.community_method,
        spectral_dim=o.spectral_dim,
        pairing=o.pairing,
    )


def plan_task(task: str, artifact: "str | os.PathLike | Artifact", *, seed: int = 0, **options: Any) -> TaskPlan:
    """The split plan of one task id on one artifact (no images read).

    ``options`` are the task family's options (see :func:`family_of(...).options_type
    <family_of>` and docs/tasks.md); ``attributes_dataset=True`` is the old loader's spelling
    of task ``attributes``.
    """
    seed = seed_option(seed, "seed")  # checked, never rounded: seed=1.5 or -1 is refused here
    art = Artifact.load(artifact)
    if options.pop(OLD_LOADER_ATTRIBUTES_FLAG, False):
        if task not in ("attributes", None, ""):
            raise InputFormatError(
                f"attributes_dataset=True conflicts with task {task!r}",
                "use task 'attributes' (attributes_dataset=True is its old-loader spelling)",
            )
        task = "attributes"
    if task is not None and task != "":  # None and "" get family_of's "no task id given"
        text_option(task, "task")
    family = family_of(art, task)
    opts = parse_options(family, task, options)
    plan = family.plan(art, task, opts, seed)
    plan.spec = replace(plan.spec, artifact_hash=art.content_hash, rules=_rules(art), overrides=given_options(opts))
    return plan


__all__ = [
    "TaskFamily",
    "TaskInfo",
    "class_task_id",
    "class_of_task",
    "kinds",
    "TASK_FAMILIES",
    "families",
    "family_of",
    "plan_task",
    "task_ids",
    "parse_options",
    "given_options",
    "option_docs",
    "DEFAULT",
    "PaperDGOptions",
    "PaperSubpopOptions",
    "ClassOptions",
    "CollectionOptions",
]
