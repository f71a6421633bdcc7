"""Split plans for distribution-shift tasks: groups of context subsets -> leak-free splits + a shift spec.

Everything here works on image-id sets (no images, no ``datasets``), so the same plan drives the
``datasets`` builder, ``metashift-hf tasks show``, export and evaluation. The plan data model
(:class:`~.plan.TaskPlan`, :class:`~.plan.Row`, :class:`~.plan.GroupDef`, the group sources) is in
:mod:`.plan`. The generators:

* :func:`domain_generalisation` - train on some context groups, test on others (marginal shift);
  :func:`contexts_near_distance` picks training contexts at a target meta-graph distance d.
* :func:`subpopulation_shift` - every class has a majority and a minority context group; the
  training mixture has minority fraction p, the test set is balanced (conditional shift).
* :func:`community_shift` - per class, the largest meta-graph community is the training
  distribution and the other communities are the out-of-distribution test (matched tasks).
* :func:`collection` - no shift: every image of some classes once, with all its contexts.

Randomness: each group is shuffled by ``numpy.random.default_rng([seed, stable hash of its name])``
over its *sorted* ids, so a plan depends on the seed and the data only (not on set order or on
the other groups).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from metashift_hf.core import options as opt
from metashift_hf.core.errors import (
    EmptyGroupError,
    EmptyResultError,
    InputFormatError,
    MetashiftError,
    UnknownNameError,
)
from metashift_hf.core.names import subset_name

# The plan data model was defined here before metashift_hf/tasks/plan.py: its names stay importable from here.
from .plan import SPLITS, ArtifactSource, GroupDef, GroupSource, Row, SetSource, TaskPlan, with_sizes  # noqa: F401
from .spec import DistanceRule, GroupSpec, MinorityFraction, Removed, ShiftDistance, ShiftSpec, ShiftType


# --------------------------------------------------------------------------------------------
# shared steps
# --------------------------------------------------------------------------------------------
def _key_int(key: str) -> int:
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little")


def seeded_order(ids: Iterable[str], seed: int, key: str) -> list[str]:
    """``ids`` sorted, then shuffled by a generator seeded with (seed, hash of key)."""
    ids = sorted(set(ids))
    rng = np.random.default_rng([int(seed), _key_int(key)])
    return [ids[i] for i in rng.permutation(len(ids))]


def ambiguous_images(source: GroupSource, classes: Sequence[str]) -> frozenset[str]:
    """Images showing two of ``classes``: pair subsets ``a(b)``/``b(a)`` plus any image in subsets of both."""
    out: set[str] = set()
    cls_sets = {c: source.class_images(c) for c in classes}
    for i, a in enumerate(classes):
        for b in classes[i + 1 :]:
            out |= source.subset_images(f"{a}({b})") | source.subset_images(f"{b}({a})")
            out |= cls_sets[a] & cls_sets[b]
    return frozenset(out)


def group_images(source: GroupSource, g: GroupDef) -> set[str]:
    out: set[str] = set()
    for s in g.subsets():
        out |= source.subset_images(s)
    return out


def _carve(
    source: GroupSource, groups: Sequence[GroupDef], *, ambiguous: frozenset[str], exclude: set[str], removed: Counter
) -> dict[str, set[str]]:
    """Group name -> images minus ambiguous, minus ``exclude`` (other splits), minus earlier groups.

    An image in two groups of the same split goes to the first group listed (images counted once).
    """
    out: dict[str, set[str]] = {}
    claimed: set[str] = set()
    for g in groups:
        ids = group_images(source, g)
        amb = ids & ambiguous
        ids -= amb
        leak = ids & exclude
        ids -= leak
        dup = ids & claimed
        ids -= dup
        removed["ambiguous"] += len(amb)
        removed["leakage"] += len(leak)
        removed["duplicate"] += len(dup)
        claimed |= ids
        out[g.name] = ids
    return out


def majority_community(source: GroupSource, cls: str, contexts: Iterable[str]) -> int:
    """The community holding most of ``contexts`` (an image's kept contexts of ``cls``; ties: smaller
    id), -1 when none of them is kept: a row's ``community`` when its group spans several."""
    comms = Counter(source.community(subset_name(cls, c)) for c in contexts)
    comms.pop(-1, None)
    if not comms:
        return -1
    return min(comms, key=lambda k: (-comms[k], k))


class _RowMaker:
    """Builds :class:`Row` objects: contexts of an image = every kept context of its class holding it."""

    def __init__(self, source: GroupSource) -> None:
        self.source = source
        self._index: dict[str, dict[str, list[str]]] = {}
        self._group_comm: dict[GroupDef, int | None] = {}

    def contexts(self, cls: str, image_id: str) -> tuple[str, ...]:
        idx = self._index.get(cls)
        if idx is None:
            idx = {}
            for ctx, ids in sorted(self.source.kept_contexts(cls).items()):
                for i in ids:
                    idx.setdefault(i, []).append(ctx)
            self._index[cls] = idx
        return tuple(idx.get(image_id, ()))

    def group_community(self, g: GroupDef) -> int | None:
        """The community of ``g``: fixed for community groups, else the one community every subset of
        ``g`` that has images is kept in; None when they span several (or one is not kept)."""
        if g.community is not None:
            return g.community
        if g not in self._group_comm:
            comms = {self.source.community(s) for s in g.subsets() if self.source.subset_images(s)}
            self._group_comm[g] = next(iter(comms)) if len(comms) == 1 and -1 not in comms else None
        return self._group_comm[g]

    def rows(self, g: GroupDef, ids: Iterable[str]) -> list[Row]:
        """Rows of group ``g``: ``context`` = the group's label; ``community`` = the group's
        (:meth:`group_community`), else the row's :func:`majority_community` (-1: no kept context)."""
        comm = self.group_community(g)
        out = []
        for i in ids:
            ctxs = self.contexts(g.cls, i)
            out.append(
                Row(
                    i,
                    g.cls,
                    g.name,
                    g.label,
                    ctxs,
                    comm if comm is not None else majority_community(self.source, g.cls, ctxs),
                )
            )
        return out


def _need(task_id: str, group: str, have: int, need: int, what: str, overrides: str) -> None:
    what_ = (
        f"task {task_id}: group {group} has {have} images after removing ambiguous/leaking images, "
        f"but {what} needs {need}"
    )
    if have == 0 and need > 0:  # smaller sizes cannot help an empty group
        raise EmptyGroupError(
            what_,
            "this task cannot be made from this artifact (every image of the group also "
            "shows another class of the task, or is taken by another split); pick another task",
        )
    if have < need:
        raise EmptyResultError(
            what_,
            f"lower the sizes with overrides ({overrides}), e.g. scale=<fraction> for the "
            "paper tasks, or use an artifact with more images",
        )


def _group_spec(
    g: GroupDef, *, contexts_found: Sequence[str] | None = None, additional: bool | None = None
) -> GroupSpec:
    """A group of a split; ``n`` is filled from the rows by :func:`with_sizes`."""
    return GroupSpec(
        group=g.name,
        cls=g.cls,
        contexts=tuple(g.contexts),
        n=0,
        contexts_found=None if contexts_found is None else tuple(contexts_found),
        additional=additional,
    )


def finish_plan(
    task_id: str,
    shift_type: ShiftType,
    classes: Sequence[str],
    seed: int,
    splits: dict[str, list[Row]],
    groups: Mapping[str, list[GroupSpec]],
    removed: Counter,
    notes: Sequence[str] = (),
    **fields: Any,
) -> TaskPlan:
    """The plan: empty splits dropped, the spec built from the groups and counted from the rows.
    ``fields``: further :class:`ShiftSpec` fields (distance, minority_fraction, paper, ...)."""
    splits = {s: rows for s, rows in splits.items() if rows}
    spec = ShiftSpec(
        task_id=task_id,
        shift_type=shift_type,
        classes=tuple(classes),
        seed=int(seed),
        split_sizes={},
        removed=Removed(
            ambiguous=int(removed["ambiguous"]), leakage=int(removed["leakage"]), duplicate=int(removed["duplicate"])
        ),
        notes=tuple(notes),
        **{f"{s}_groups": tuple(groups.get(s, ())) for s in SPLITS},
        **fields,
    )
    return TaskPlan(task_id, list(classes), splits, with_sizes(spec, splits))


def _check_classes(task_id: str, source: GroupSource, classes: Sequence[str]) -> None:
    for c in classes:
        if not source.kept_contexts(c) and not source.class_images(c):
            raise UnknownNameError(
                f"task {task_id}: class {c!r} has no subsets in this artifact",
                "pick classes the artifact has (metashift-hf tasks list --artifact ARTIFACT)",
            )


# --------------------------------------------------------------------------------------------
# domain generalisation
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DGSizes:
    """Images per training group for train / validation (exact) and id_test (at most: what is
    left); test groups are used whole unless ``test_per_group`` caps them. Additional test groups
    are left out by default (0) so that ``test`` is the paper's test set; None = whole groups.
    Defaults: 4 training groups x 100 = the paper's 400 training images."""

    train_per_group: int = 100
    validation_per_group: int = 25
    id_test_per_group: int = 50
    test_per_group: int | None = None
    additional_test_per_group: int | None = 0

    def scaled(self, scale: float) -> "DGSizes":
        f = lambda n: n if not n else max(1, int(round(n * scale)))  # noqa: E731
        return DGSizes(
            f(self.train_per_group),
            f(self.validation_per_group),
            f(self.id_test_per_group),
            f(self.test_per_group),
            f(self.additional_test_per_group),
        )


@dataclass(frozen=True)
class DGGroups:
    """The groups of a domain-generalisation task: its classes, training groups, (OOD) test groups and
    optional additional test groups."""

    classes: tuple[str, ...]
    train: tuple[GroupDef, ...]
    test: tuple[GroupDef, ...]
    additional_test: tuple[GroupDef, ...] = ()

    def __post_init__(self) -> None:
        for name in ("classes", "train", "test", "additional_test"):
            object.__setattr__(self, name, tuple(getattr(self, name)))


def domain_generalisation(
    task_id: str,
    source: GroupSource,
    groups: DGGroups,
    *,
    sizes: DGSizes = DGSizes(),
    seed: int = 0,
    ambiguous: frozenset[str] | None = None,
    distance: ShiftDistance | None = None,
    shift_type: ShiftType = "marginal",
    **spec_fields: Any,
) -> TaskPlan:
    """Train on ``groups.train``, test (out of distribution) on ``groups.test``, plus
    ``groups.additional_test`` when ``sizes.additional_test_per_group`` is not 0. ``shift_type``: the
    declared type (``joint`` when training groups are class-specific and a test context has both
    classes, as in the paper's DG tasks: S then tells Y in training, not in test).

    Leakage order (the paper's): test groups lose ambiguous images; training groups lose ambiguous
    images and every test image; additional test groups lose ambiguous images and every image of a
    training group (and of the main test groups, so each image is counted once). Validation and
    id_test are seeded hold-outs of the training groups. ``spec_fields``: further ShiftSpec fields.
    """
    classes, train, test, additional_test = list(groups.classes), groups.train, groups.test, groups.additional_test
    _check_classes(task_id, source, classes)
    amb = ambiguous_images(source, classes) if ambiguous is None else ambiguous
    removed: Counter = Counter()
    test_sets = _carve(source, test, ambiguous=amb, exclude=set(), removed=removed)
    all_test = set().union(*test_sets.values()) if test_sets else set()
    train_sets = _carve(source, train, ambiguous=amb, exclude=all_test, removed=removed)
    all_train = set().union(*train_sets.values()) if train_sets else set()
    if sizes.additional_test_per_group == 0:
        additional_test = ()
    add_sets = _carve(source, additional_test, ambiguous=amb, exclude=all_train | all_test, removed=removed)
    rm = _RowMaker(source)
    splits: dict[str, list[Row]] = {s: [] for s in SPLITS}
    specs: dict[str, list[GroupSpec]] = {s: [] for s in SPLITS}
    ov = "train_per_group=, validation_per_group=, id_test_per_group="
    for g in train:
        order = seeded_order(train_sets[g.name], seed, f"{task_id}/{g.name}")
        n_tr, n_va = sizes.train_per_group, sizes.validation_per_group
        _need(task_id, g.name, len(order), n_tr + n_va, f"train {n_tr} + validation {n_va}", ov)
        # id_test is a cap: small training groups (real dog(bag) etc.) still give a task.
        n_id = min(sizes.id_test_per_group, len(order) - n_tr - n_va)
        _deal(rm, g, order, (("train", n_tr), ("validation", n_va), ("id_test", n_id)), splits, specs)
    notes = []
    for g, extra in [(g, False) for g in test] + [(g, True) for g in additional_test]:
        ids = (test_sets if not extra else add_sets)[g.name]
        if not ids and extra:
            notes.append(f"additional test group {g.name} is empty on this artifact")
            continue
        if not ids:
            raise EmptyResultError(
                f"task {task_id}: test group {g.name} is empty after removing ambiguous/leaking images "
                f"(contexts {list(g.contexts)}, found in the artifact: {_found(source, g)})",
                "use an artifact that has these subsets (e.g. built from the full GQA scene graphs)",
            )
        order = seeded_order(ids, seed, f"{task_id}/{g.name}")
        cap = sizes.additional_test_per_group if extra else sizes.test_per_group
        if cap is not None:
            order = order[:cap]
        splits["test"] += rm.rows(g, order)
        specs["test"].append(_group_spec(g, contexts_found=_found(source, g), additional=extra))
    return finish_plan(
        task_id, shift_type, classes, seed, splits, specs, removed, notes, distance=distance, **spec_fields
    )


def _deal(
    rm: _RowMaker,
    g: GroupDef,
    order: Sequence[str],
    counts: Sequence[tuple[str, int]],
    splits: dict[str, list[Row]],
    specs: dict[str, list[GroupSpec]],
) -> None:
    """``g``'s images into consecutive regions of its seeded ``order``, one (split, n) after the other, and
    its group spec into each of those splits: every split of a group is drawn from one order, so they never overlap."""
    found = _found(rm.source, g)
    start = 0
    for split, n in counts:
        splits[split] += rm.rows(g, order[start : start + n])
        specs[split].append(_group_spec(g, contexts_found=found))
        start += n


def _found(source: GroupSource, g: GroupDef) -> list[str]:
    return [c for c in g.contexts if source.subset_images(f"{g.cls}({c})")]


def contexts_near_distance(distances: Mapping[str, float], target: float, k: int = 1) -> list[str]:
    """The ``k`` contexts whose distance is nearest ``target`` (ties: smaller name); NaNs ignored."""
    ok = [(abs(d - target), c) for c, d in distances.items() if d is not None and np.isfinite(d)]
    if len(ok) < k:
        raise EmptyResultError(
            f"only {len(ok)} contexts have a finite distance, {k} requested",
            "lower k, or use a class whose meta-graph has spectral embeddings for more subsets",
        )
    return [c for _, c in sorted(ok)[:k]]


@dataclass(frozen=True)
class DistanceTarget:
    """The shifted class of a DG-by-distance task: trained on the ``k`` kept contexts whose subset
    distance to ``<cls>(<test_context>)`` is nearest ``distance``, tested on that subset."""

    cls: str
    test_context: str
    distance: float
    k: int = 2


@dataclass(frozen=True)
class FixedContexts:
    """The other class of a DG-by-distance task, with its training and test contexts as given."""

    cls: str
    train_contexts: tuple[str, ...]
    test_contexts: tuple[str, ...]


def domain_generalisation_by_distance(
    task_id: str,
    source: GroupSource,
    artifact,
    target: DistanceTarget,
    other: FixedContexts,
    *,
    sizes: DGSizes = DGSizes(),
    seed: int = 0,
) -> TaskPlan:
    """Binary DG task whose shifted class (``target.cls``) is trained on the ``target.k`` kept contexts
    whose subset distance to ``<cls>(<test_context>)`` is nearest ``target.distance``.

    Distance = ``artifact.distance`` (the spectral rule, or resistance when the test subset has no
    embedding; ``metric`` in the spec says which); the achieved distance (mean over the chosen
    contexts) goes in the spec.
    """
    shifted_class, test_context, target_distance, k = target.cls, target.test_context, target.distance, target.k
    other_class = other.cls
    test_subset = f"{shifted_class}({test_context})"
    answers = {
        ctx: artifact.distance(test_subset, f"{shifted_class}({ctx})")
        for ctx in source.kept_contexts(shifted_class)
        if ctx != test_context
    }
    # one rule for every candidate (numbers of different rules are on different scales): the original
    # spectral rule when the test subset has an embedding, else resistance; disconnected ones drop out
    metric = "spectral" if any(d.rule == "spectral" for d in answers.values()) else "resistance"
    cands = {ctx: d.value for ctx, d in answers.items() if d.rule == metric}
    chosen = contexts_near_distance(cands, target_distance, k)
    achieved = float(np.mean([cands[c] for c in chosen]))
    train = [GroupDef(other_class, c, (c,), c) for c in other.train_contexts]
    train += [GroupDef(shifted_class, c, (c,), c) for c in chosen]
    test = [GroupDef(other_class, c, (c,), c) for c in other.test_contexts]
    test += [GroupDef(shifted_class, test_context, (test_context,), test_context)]
    return domain_generalisation(
        task_id,
        source,
        DGGroups(tuple(sorted({shifted_class, other_class})), tuple(train), tuple(test)),
        sizes=sizes,
        seed=seed,
        distance=ShiftDistance(
            value=achieved,
            rule="subset",
            metric=metric,
            note=f"target {target_distance}; mean distance of {chosen} to {test_subset}",
        ),
    )


# --------------------------------------------------------------------------------------------
# subpopulation shift
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SubpopSizes:
    """Paper defaults: 850 training images per class, 144 test images per group (576 for 4 groups),
    minority 100 per class (p ~ 12%). Validation has the training mixture (85 = 10% of train)."""

    train_per_class: int = 850
    minority_per_class: int = 100
    test_per_group: int = 144
    validation_per_class: int = 85

    def scaled(self, scale: float) -> "SubpopSizes":
        f = lambda n: max(1, int(round(n * scale)))  # noqa: E731
        return SubpopSizes(
            f(self.train_per_class), f(self.minority_per_class), f(self.test_per_group), f(self.validation_per_class)
        )

    def with_fraction(self, p: float) -> "SubpopSizes":
        """Minority images per class for a target fraction ``p`` of the training set of a class."""
        if not 0 <= p <= 0.5:
            raise opt.OptionError(
                f"minority_fraction must lie in [0, 0.5], got {p}",
                "pass a fraction such as 0.12 (12% minority images per class)",
            )
        return replace(self, minority_per_class=int(round(p * self.train_per_class)))


def subpopulation_shift(
    task_id: str,
    source: GroupSource,
    *,
    majority: Sequence[GroupDef],
    minority: Sequence[GroupDef],
    sizes: SubpopSizes = SubpopSizes(),
    seed: int = 0,
    pool: Mapping[str, int] | None = None,
    ambiguous: frozenset[str] | None = None,
    **spec_fields: Any,
) -> TaskPlan:
    """Each class has one majority and one minority group. Per group, a seeded order gives the
    test images first (``test_per_group``, balanced), then the training images (minority
    ``minority_per_class``, majority the rest of ``train_per_class``), then validation with the
    same mixture. Majority groups never contain a minority image. ``pool`` (group -> n) is the
    paper's truncation: test + train must fit in the first n images of the group's order.
    """
    classes = sorted({g.cls for g in majority} | {g.cls for g in minority})
    by_cls = {c: ([g for g in majority if g.cls == c], [g for g in minority if g.cls == c]) for c in classes}
    for c, (ma, mi) in by_cls.items():
        if len(ma) != 1 or len(mi) != 1:
            raise EmptyResultError(
                f"task {task_id}: class {c} needs exactly one majority and one minority group",
                "define one majority GroupDef and one minority GroupDef per class",
            )
    _check_classes(task_id, source, classes)
    amb = ambiguous_images(source, classes) if ambiguous is None else ambiguous
    removed: Counter = Counter()
    # Minority groups are carved first; majority groups lose the minority images (the paper's
    # rule), which is a definition, not leakage, so it is not counted as removed.
    mino_sets = _carve(source, minority, ambiguous=amb, exclude=set(), removed=removed)
    majo_sets = _carve(source, majority, ambiguous=amb, exclude=set().union(*mino_sets.values()), removed=Counter())
    m, t, v = sizes.minority_per_class, sizes.test_per_group, sizes.validation_per_class
    if not 0 <= m <= sizes.train_per_class:
        raise EmptyResultError(
            f"minority_per_class={m} must lie in [0, train_per_class={sizes.train_per_class}]",
            "lower minority_per_class or raise train_per_class",
        )
    v_min = int(round(v * m / sizes.train_per_class)) if sizes.train_per_class else 0
    rm = _RowMaker(source)
    splits: dict[str, list[Row]] = {s: [] for s in SPLITS}
    groups: dict[str, list[GroupSpec]] = {s: [] for s in SPLITS}
    ov = "train_per_class=, minority_per_class=, test_per_group=, validation_per_class="
    for c in classes:
        for g, n_train, n_val, sets in (
            (by_cls[c][0][0], sizes.train_per_class - m, v - v_min, majo_sets),
            (by_cls[c][1][0], m, v_min, mino_sets),
        ):
            order = seeded_order(sets[g.name], seed, f"{task_id}/{g.name}")
            if pool and g.name in pool:
                _need(
                    task_id,
                    g.name,
                    min(len(order), pool[g.name]),
                    t + n_train,
                    f"test {t} + train {n_train} within the paper's pool of {pool[g.name]}",
                    ov,
                )
            _need(
                task_id,
                g.name,
                len(order),
                t + n_train + n_val,
                f"test {t} + train {n_train} + validation {n_val}",
                ov,
            )
            _deal(rm, g, order, (("test", t), ("train", n_train), ("validation", n_val)), splits, groups)
    target = round(m / sizes.train_per_class, 6) if sizes.train_per_class else None
    return finish_plan(
        task_id,
        "conditional",
        classes,
        seed,
        splits,
        groups,
        removed,
        minority_fraction=MinorityFraction(target=target, achieved=None),
        minority_groups=tuple(g.name for g in minority),
        **spec_fields,
    )


# --------------------------------------------------------------------------------------------
# community shift (default for matched binary / multiclass tasks)
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CommunitySizes:
    """Fractions of each class's training-distribution images held out for validation / id_test;
    optional caps on train images per class and OOD test images per class."""

    validation_fraction: float = 0.1
    id_test_fraction: float = 0.2
    train_max_per_class: int | None = None
    test_max_per_class: int | None = None


def community_groups(source: GroupSource, cls: str, only: Iterable[str] | None = None) -> list[GroupDef]:
    """One group per meta-graph community of ``cls`` (community 0 = the largest), contexts sorted;
    ``only``: the subset names allowed (e.g. the ImageNet-matched ones)."""
    allowed = None if only is None else set(only)
    by: dict[int, list[str]] = {}
    for ctx in source.kept_contexts(cls):
        if allowed is not None and f"{cls}({ctx})" not in allowed:
            continue
        by.setdefault(source.community(f"{cls}({ctx})"), []).append(ctx)
    return [GroupDef(cls, f"community-{k}", tuple(sorted(by[k])), "", k) for k in sorted(by) if k >= 0]


def community_shift(
    task_id: str,
    source: GroupSource,
    *,
    classes: Sequence[str],
    sizes: CommunitySizes = CommunitySizes(),
    seed: int = 0,
    distance_fn: Callable[[str, GroupDef, list[GroupDef]], float] | None = None,
    distance_rule: DistanceRule = "paper",
    ambiguous: frozenset[str] | None = None,
    subsets: Mapping[str, Iterable[str]] | None = None,
    **spec_fields: Any,
) -> TaskPlan:
    """Per class: the subsets of its largest meta-graph community (the smallest community id among
    the subsets used; ``subsets`` restricts them per class) = training distribution (train /
    validation / id_test); every other community = out-of-distribution test. An image in both
    goes to the training side.
    ``distance_fn(cls, id_group, ood_groups)`` gives a class's train-vs-OOD distance; the spec
    reports it per class and their mean.
    """
    fr = (sizes.validation_fraction, sizes.id_test_fraction)
    if not all(isinstance(f, (int, float)) and 0 <= f < 1 for f in fr) or sum(fr) >= 1:
        raise opt.OptionError(
            f"task {task_id}: validation_fraction={fr[0]!r} and id_test_fraction={fr[1]!r} "
            "must be fractions in [0, 1) that leave images for train",
            "pass e.g. validation_fraction=0.1, id_test_fraction=0.2",
        )
    for name, cap, least in (
        ("train_max_per_class", sizes.train_max_per_class, 1),
        ("test_max_per_class", sizes.test_max_per_class, 0),
    ):
        # a bad cap is a bad value, not a group size ("group has -5 images")
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < least):
            raise InputFormatError(
                f"task {task_id}: option {name}={cap!r} is not an integer of at least {least}",
                f"pass {name}=<count of at least {least}>, or leave it out for no cap",
            )
    _check_classes(task_id, source, classes)
    amb = ambiguous_images(source, classes) if ambiguous is None else ambiguous
    removed: Counter = Counter()
    rm = _RowMaker(source)
    splits: dict[str, list[Row]] = {s: [] for s in SPLITS}
    entries: dict[str, list[GroupSpec]] = {s: [] for s in SPLITS}
    per_class_d: dict[str, float | None] = {}
    per_class_metric: dict[str, str] = {}
    notes = []
    for c in classes:
        groups = community_groups(source, c, None if subsets is None else subsets.get(c, ()))
        if not groups:
            raise EmptyResultError(
                f"task {task_id}: class {c} has no usable kept subsets with a community",
                "rebuild the artifact so that this class passes the rules, or drop it",
            )
        id_g, ood = groups[0], groups[1:]
        id_set = _carve(source, [id_g], ambiguous=amb, exclude=set(), removed=removed)[id_g.name]
        ood_sets = _carve(source, ood, ambiguous=amb, exclude=id_set, removed=removed)
        order = seeded_order(id_set, seed, f"{task_id}/{id_g.name}")
        n = len(order)
        n_va = int(round(n * sizes.validation_fraction))
        n_id = int(round(n * sizes.id_test_fraction))
        n_tr = n - n_va - n_id
        if sizes.train_max_per_class is not None:
            n_tr = min(n_tr, sizes.train_max_per_class)
        _need(task_id, id_g.name, n_tr, 1, "train", "validation_fraction=, id_test_fraction=")
        splits["validation"] += rm.rows(id_g, order[:n_va])
        splits["id_test"] += rm.rows(id_g, order[n_va : n_va + n_id])
        splits["train"] += rm.rows(id_g, order[n_va + n_id : n_va + n_id + n_tr])
        for s in ("train", "validation", "id_test"):
            entries[s].append(_group_spec(id_g))
        if not ood:
            notes.append(f"{c} has a single community: no out-of-distribution test images")
        left = sizes.test_max_per_class
        for g in ood:
            o = seeded_order(ood_sets[g.name], seed, f"{task_id}/{g.name}")
            if left is not None:
                o, left = o[:left], left - len(o[:left])
            splits["test"] += rm.rows(g, o)
            entries["test"].append(_group_spec(g))
        if distance_fn is not None and ood:
            try:
                d = distance_fn(c, id_g, list(ood))
                per_class_d[c] = d.value
                per_class_metric[c] = d.rule or d.status  # which distance rule gave it, or 'disconnected'
                if d.value is None:
                    notes.append(f"{c}: no distance (train and test communities are disconnected)")
            except MetashiftError as exc:
                per_class_d[c] = None
                notes.append(f"{c}: no distance ({exc.what})")
    distance = None
    if distance_fn is not None:
        vals = [d for d in per_class_d.values() if d is not None]
        distance = ShiftDistance(
            value=float(np.mean(vals)) if vals else None,
            rule=distance_rule,
            metric="+".join(sorted({m for c, m in per_class_metric.items() if per_class_d[c] is not None})),
            per_class_metric=per_class_metric,
            note="per class: mean distance from the training community's group to each test community's "
            "group; value: mean over classes",
            per_class=per_class_d,
        )
    return finish_plan(
        task_id, "marginal", classes, seed, splits, entries, removed, notes, distance=distance, **spec_fields
    )


# --------------------------------------------------------------------------------------------
# collections (no shift)
# --------------------------------------------------------------------------------------------
def collection(
    task_id: str,
    source: GroupSource,
    *,
    contexts: Mapping[str, Mapping[str, frozenset[str]]],
    seed: int = 0,
    **spec_fields: Any,
) -> TaskPlan:
    """One ``train`` split: every image of each class once (an image showing two classes appears
    once per class), with the list of its contexts among ``contexts[cls]`` (context -> ids).
    Group = ``<cls>(community-<k>)`` with k the most frequent community among its contexts (ties:
    smaller k), ``<cls>(all)`` when it has none; the row's ``context`` is ``community-<k>`` / ``all``.
    """
    classes = sorted(contexts)
    rows: list[Row] = []
    train_groups: list[GroupSpec] = []
    for c in classes:
        index: dict[str, list[str]] = {}
        for ctx in sorted(contexts[c]):
            for i in contexts[c][ctx]:
                index.setdefault(i, []).append(ctx)
        group_ctx: dict[str, set[str]] = {}
        for i in sorted(index):
            ctxs = tuple(index[i])
            k = majority_community(source, c, ctxs)
            label = f"community-{k}" if k >= 0 else "all"
            g = subset_name(c, label)
            group_ctx.setdefault(g, set()).update(ctxs)
            rows.append(Row(i, c, g, label, ctxs, k))
        train_groups += [
            GroupSpec(group=g, cls=c, contexts=tuple(sorted(group_ctx[g])), n=0) for g in sorted(group_ctx)
        ]
    return finish_plan(
        task_id, "none", classes, seed, {"train": rows}, {"train": train_groups}, Counter(), **spec_fields
    )
