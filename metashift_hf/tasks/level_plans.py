"""The three shift-level generators (marginal, conditional, joint) and the entry point per task id.

The vocabulary (ids, level names, sizes, the checks every plan passes) is metashift_hf/tasks/levels.py, whose
docstring defines the three types; this module draws the images.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from metashift_hf.core.errors import EmptyResultError

from .levels import (
    DELTAS,
    MIX_FRACTIONS,
    SHIFT_TYPES,
    DistanceFn,
    LevelSizes,
    check_level_plan,
    level_names,
    parse_level,
    parse_task_id,
    task_id,
)
from .plan import SPLITS, GroupDef, GroupSource, Row, TaskPlan
from .shifts import (
    _group_spec,
    _RowMaker,
    ambiguous_images,
    finish_plan,
    seeded_order,
)
from .spec import (
    ConditionalFacts,
    DistanceRule,
    Factor,
    FamilyDesign,
    GroupSpec,
    Level,
    MinorityFraction,
    MixedFraction,
    ShiftDistance,
)


# --------------------------------------------------------------------------------------------
# factor assignment and balanced allocation
# --------------------------------------------------------------------------------------------
def assign_factor(
    source: GroupSource, cls: str, values: Mapping[str, Sequence[str]], ambiguous: frozenset[str]
) -> tuple[dict[str, tuple[str, str]], int]:
    """Image -> (factor value, its first context in that value's order) for images of ``cls``
    holding a (kept) context of exactly one value; images holding contexts of two values are dropped
    (returned count), ambiguous images are left out."""
    hits: dict[str, dict[str, str]] = {}
    kept = source.kept_contexts(cls)  # the contexts a task row lists for an image
    for v, ctxs in values.items():
        for ctx in ctxs:
            for i in kept.get(ctx, ()):
                if i in ambiguous:
                    continue
                hits.setdefault(i, {}).setdefault(v, ctx)
    out = {i: next(iter(h.items())) for i, h in hits.items() if len(h) == 1}
    return out, len(hits) - len(out)


def allocate(caps: Sequence[int], n: int) -> list[int]:
    """Split ``n`` over slots proportionally to ``caps`` (largest remainder, never above a cap)."""
    total = int(sum(caps))
    if n > total:
        raise EmptyResultError(f"{n} images requested from slots holding {total}", "lower the sizes")
    if n == 0 or total == 0:
        return [0] * len(caps)
    quota = [n * c / total for c in caps]
    out = [int(np.floor(q)) for q in quota]
    rest = n - sum(out)
    order = sorted(range(len(caps)), key=lambda i: (-(quota[i] - out[i]), i))
    for i in order[:rest]:
        out[i] += 1
    return out


def _pools(
    assign: Mapping[str, tuple[str, str]], seed: int, family: str, cls: str
) -> dict[tuple[str, str], list[str]]:
    """(value, context) -> the class's images in a seeded order shared by every level of the family."""
    by: dict[tuple[str, str], list[str]] = {}
    for i, key in assign.items():
        by.setdefault(key, []).append(i)
    return {k: seeded_order(v, seed, f"{family}/{cls}/{k[0]}/{k[1]}") for k, v in sorted(by.items())}


# --------------------------------------------------------------------------------------------
# marginal family design (contexts and distances; no seed)
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MarginalDesign:
    classes: tuple[str, ...]
    test_contexts: tuple[str, ...]
    train_contexts: tuple[tuple[str, ...], ...]  # per level (nearest level first), contexts in distance order
    distances: tuple[float, ...]  # mean over classes of the C_tr/C_te distance, per level
    per_class: tuple[dict[str, float], ...]
    distance_rule: DistanceRule

    def values(self) -> dict[str, tuple[str, ...]]:
        """The factor: context group of an image (C_te = 'test', level k's C_tr = 'd<k>')."""
        return {"test": self.test_contexts, **{f"d{k}": c for k, c in enumerate(self.train_contexts)}}


def shared_contexts(
    source: GroupSource, classes: Sequence[str], min_images: int, ambiguous: frozenset[str]
) -> list[str]:
    """Contexts kept for every class with at least ``min_images`` unambiguous images in each."""
    common = set.intersection(*(set(source.kept_contexts(c)) for c in classes))
    ok = [
        x
        for x in sorted(common)
        if all(len(source.subset_images(f"{c}({x})") - ambiguous) >= min_images for c in classes)
    ]
    return ok


def marginal_design(
    source: GroupSource,
    classes: Sequence[str],
    distance: DistanceFn,
    *,
    sizes: LevelSizes = LevelSizes(),
    distance_rule: DistanceRule = "custom",
    candidates: Sequence[str] | None = None,
) -> MarginalDesign:
    """C_te = the shared context with most images (fewest over classes) and its nearest shared
    contexts; the other shared contexts, sorted by distance to C_te, give ``levels`` groups of
    ``train_contexts`` contexts at evenly spaced ranks; levels are ordered by the group distance."""
    classes = list(classes)
    amb = ambiguous_images(source, classes)
    cands = list(candidates) if candidates is not None else shared_contexts(source, classes, sizes.min_images, amb)
    need = sizes.test_contexts + sizes.levels * sizes.train_contexts
    fix = (
        "lower test_contexts / train_contexts / levels / min_images, or use classes that share more contexts "
        "(classes with many kept subsets in common)"
    )
    if len(cands) < need:
        raise EmptyResultError(
            f"classes {classes} share {len(cands)} usable contexts; a marginal family with "
            f"{sizes.test_contexts} test contexts and {sizes.levels} levels of "
            f"{sizes.train_contexts} needs {need}",
            fix,
        )

    def mean_d(a: Sequence[str], b: Sequence[str]) -> float:
        return float(np.mean([distance(c, a, b) for c in classes]))

    size = {x: min(len(source.subset_images(f"{c}({x})") - amb) for c in classes) for x in cands}
    anchor = min(cands, key=lambda x: (-size[x], x))
    near = sorted((mean_d([anchor], [x]), x) for x in cands if x != anchor)
    test = tuple(sorted([anchor] + [x for _, x in near[: sizes.test_contexts - 1]]))
    rest = sorted((mean_d([x], test), x) for x in cands if x not in test)
    ordered = [x for _, x in rest]
    span = len(ordered) - sizes.train_contexts
    starts = [int(round(k * span / (sizes.levels - 1))) for k in range(sizes.levels)]
    if any(b - a < sizes.train_contexts for a, b in zip(starts, starts[1:])):
        raise EmptyResultError(
            f"{len(ordered)} candidate training contexts cannot hold {sizes.levels} disjoint "
            f"levels of {sizes.train_contexts}",
            fix,
        )
    groups = [tuple(ordered[s : s + sizes.train_contexts]) for s in starts]  # distance order
    per = [{c: float(distance(c, g, test)) for c in classes} for g in groups]
    dist = [float(np.mean(list(p.values()))) for p in per]
    order = sorted(range(len(groups)), key=lambda k: (dist[k], groups[k]))
    return MarginalDesign(
        tuple(classes),
        test,
        tuple(groups[k] for k in order),
        tuple(dist[k] for k in order),
        tuple(per[k] for k in order),
        distance_rule,
    )


# --------------------------------------------------------------------------------------------
# the three generators
# --------------------------------------------------------------------------------------------
def _class_groups(cls: str, ctxs: Sequence[str]) -> list[GroupDef]:
    return [GroupDef(cls, x, (x,), x) for x in ctxs]


class _Family:
    """Per-class pools of a marginal family, seed-ordered and shared by every level.

    Test pool: images holding a C_te context and no context of any level's C_tr (so the OOD test
    is one set for the family). Level k's pool: images holding a C_tr_k context and no C_te
    context. Within a pool an image belongs to the first of its contexts in the group's order.
    """

    def __init__(self, source: GroupSource, design: MarginalDesign, seed: int, family: str) -> None:
        self.design = design
        self.values = design.values()
        amb = ambiguous_images(source, design.classes)
        self.dropped: dict[str, int] = Counter()
        self.pools: dict[str, dict[tuple[str, str], list[str]]] = {}
        for c in design.classes:
            assign, dropped = assign_factor(source, c, self.values, amb)
            keep = {i: v for i, v in assign.items() if v[0] == "test"}
            kept = source.kept_contexts(c)
            self.dropped["test"] += sum(
                1 for i in set().union(*(kept.get(x, set()) for x in self.values["test"])) - amb if i not in assign
            )
            for k in range(len(design.train_contexts)):
                v = f"d{k}"
                pair, dr = assign_factor(source, c, {"test": self.values["test"], v: self.values[v]}, amb)
                keep.update({i: val for i, val in pair.items() if val[0] == v})
                self.dropped[v] += dr
            self.pools[c] = _pools(keep, seed, family, c)

    def caps(self, value: str) -> list[int]:
        """Per context of ``value``: images every class has (the class-balanced capacity)."""
        return [min(len(self.pools[c].get((value, x), [])) for c in self.design.classes) for x in self.values[value]]

    def take(
        self, value: str, counts: Sequence[int], start: Sequence[int] | None = None
    ) -> dict[str, dict[str, list[str]]]:
        """class -> context -> images ``start[i]:start[i]+counts[i]`` of each context's order."""
        start = start or [0] * len(counts)
        return {
            c: {x: self.pools[c].get((value, x), [])[s : s + n] for x, s, n in zip(self.values[value], start, counts)}
            for c in self.design.classes
        }


def _marginal_budget(fam: _Family, sizes: LevelSizes) -> tuple[int, int, int, int, int]:
    """(per class) n, train, validation, id_test, mix reserve: the same for every level."""
    levels = [f"d{k}" for k in range(len(fam.design.train_contexts))]
    n = min(sum(fam.caps(v)) for v in levels)
    if sizes.train_per_class is not None:
        n_tr = sizes.train_per_class
        n_va, n_it = int(round(n_tr * sizes.validation_fraction)), int(round(n_tr * sizes.id_test_fraction))
        if n_tr + n_va + n_it > n:
            raise EmptyResultError(
                f"train_per_class={n_tr} (+ validation {n_va} + id_test {n_it}) exceeds the "
                f"{n} class-balanced images of the smallest level",
                f"lower train_per_class to at most {int(n / (1 + sizes.validation_fraction + sizes.id_test_fraction))}",
            )
        n = n_tr + n_va + n_it
    test_cap = sum(fam.caps("test"))
    keep = 1 - sizes.validation_fraction - sizes.id_test_fraction
    if sizes.train_per_class is None and n * keep > test_cap:
        # the mix reserve (max fraction x train) must leave at least half of C_te to test on
        n = int(test_cap / keep)
    n_va, n_it = int(round(n * sizes.validation_fraction)), int(round(n * sizes.id_test_fraction))
    n_tr = n - n_va - n_it
    reserve = int(round(max(MIX_FRACTIONS) * n_tr))
    if n_tr < 4 or test_cap - reserve < 2:
        raise EmptyResultError(
            f"marginal family: {n_tr} training and {test_cap - reserve} test images per class after balancing",
            "lower test_contexts/train_contexts/levels or min_images, or use "
            "classes with more images in shared contexts",
        )
    return n, n_tr, n_va, n_it, reserve


def marginal_plan(
    tid: str,
    source: GroupSource,
    design: MarginalDesign,
    level: Level,
    *,
    sizes: LevelSizes = LevelSizes(),
    seed: int = 0,
) -> TaskPlan:
    """Train on level ``level.rank``'s contexts (with ``mixed_fraction`` of C_te mixed in), test on C_te."""
    classes = list(design.classes)
    family = task_id("marginal", classes, "family")
    fam = _Family(source, design, seed, family)
    n, n_tr, n_va, n_it, reserve = _marginal_budget(fam, sizes)
    k = int(level.rank or 0)
    v = f"d{k}"
    a = allocate(fam.caps(v), n)
    tr = allocate(a, n_tr)
    va = allocate([x - y for x, y in zip(a, tr)], n_va)
    it = [x - y - z for x, y, z in zip(a, tr, va)]
    n_mix = int(round(level.mixed_fraction * n_tr))
    te_caps = fam.caps("test")
    res = allocate(te_caps, reserve)
    mix = allocate(res, n_mix)
    keep = allocate(tr, n_tr - n_mix)
    rm = _RowMaker(source)
    splits: dict[str, list[Row]] = {s: [] for s in SPLITS}

    def add(split: str, picked: Mapping[str, Mapping[str, list[str]]]) -> None:
        for c in classes:
            for x, ids in picked[c].items():
                splits[split] += rm.rows(GroupDef(c, x, (x,), x), ids)

    add("train", fam.take(v, keep))
    add("train", fam.take("test", mix))
    add("validation", fam.take(v, va, tr))
    add("id_test", fam.take(v, it, [x + y for x, y in zip(tr, va)]))
    add("test", fam.take("test", [c - r for c, r in zip(te_caps, res)], res))
    d = design.distances[k]
    lev = replace(level, distance=d)
    distance = ShiftDistance(
        value=d,
        rule=design.distance_rule,
        per_class=design.per_class[k],
        note="mean over classes of the distance between the training and the test contexts' subsets of the class",
    )
    groups = _groups_spec(
        classes,
        {
            "train": list(design.train_contexts[k]) + (list(design.test_contexts) if n_mix else []),
            "validation": design.train_contexts[k],
            "id_test": design.train_contexts[k],
            "test": design.test_contexts,
        },
    )
    plan = finish_plan(
        tid,
        "marginal",
        classes,
        seed,
        splits,
        groups,
        Counter(),
        distance=distance,
        mixed_fraction=MixedFraction(target=level.mixed_fraction, images_per_class=n_mix),
        **_level_spec(lev, design, fam.dropped[v] + fam.dropped["test"]),
    )
    check_level_plan(plan)
    return plan


def _level_spec(
    level: Level, design: MarginalDesign | None, dropped: int, extra_values: Mapping | None = None, **factor: Any
) -> dict[str, Any]:
    """ShiftSpec fields ``level``, ``factor`` (the values an image may hold in this task) and
    ``family`` (the family's design); ``factor``: further Factor fields."""
    values = (
        {"test": tuple(design.test_contexts), "train": tuple(design.train_contexts[int(level.rank or 0)])}
        if design
        else {}
    )
    values.update({k: tuple(v) for k, v in (extra_values or {}).items()})
    out: dict[str, Any] = {
        "level": level,
        "factor": Factor(
            name="context group",
            values=values,
            dropped_two_values=int(dropped),
            rule="an image holding contexts of two values is dropped; test images also hold no context "
            "of any level's training contexts, so every level has the same OOD test",
            **factor,
        ),
    }
    if design is not None:
        out["family"] = FamilyDesign(
            test_contexts=tuple(design.test_contexts),
            train_contexts=tuple(tuple(g) for g in design.train_contexts),
            distances=tuple(float(x) for x in design.distances),
            distance_rule=design.distance_rule,
        )
    return out


def _groups_spec(classes: Sequence[str], contexts: Mapping[str, Sequence[str]]) -> dict[str, list[GroupSpec]]:
    return {s: [_group_spec(g) for c in classes for g in _class_groups(c, ctxs)] for s, ctxs in contexts.items()}


@dataclass(frozen=True)
class ConditionalDesign:
    classes: tuple[str, str]
    s1: tuple[str, ...]
    s2: tuple[str, ...]
    labels: tuple[str, str] = ("s1", "s2")


def _cell_counts(total: int, delta: float) -> tuple[int, int]:
    """(favoured, other) images per class for P(A|s1) = 1/2 + delta: A is favoured in s1, B in s2."""
    favoured = int(round(total * (0.5 + delta)))
    return favoured, total - favoured


def _region(total: int) -> int:
    """Images a cell reserves for a split of ``total`` per class: the most any delta in DELTAS takes."""
    return total - int(np.floor(total * (0.5 - max(DELTAS))))


def _conditional_budget(smallest: int, sizes: LevelSizes, splits: Sequence[str]) -> dict[str, int]:
    """Per-class totals per split such that every split's region fits the smallest cell."""
    fr = {"test": sizes.test_fraction, "validation": sizes.validation_fraction, "id_test": sizes.id_test_fraction}
    x = int(np.floor(smallest / (0.5 + max(DELTAS))))
    b: dict[str, int] = {}
    while x > 0:
        b = {s: int(round(x * fr[s])) for s in splits if s != "train"}
        b["train"] = x - sum(b.values())
        if sizes.train_per_class is not None:
            b["train"] = min(b["train"], sizes.train_per_class)
        if sum(_region(v) for v in b.values()) <= smallest:
            break
        x -= 1
    if sizes.train_per_class is not None and b.get("train", 0) < sizes.train_per_class:
        raise EmptyResultError(
            f"train_per_class={sizes.train_per_class} does not fit: the smallest (class, context "
            f"value) cell holds {smallest} images",
            "lower train_per_class or omit it",
        )
    if x <= 0 or b["train"] < 4 or b.get("test", 2) < 2:
        raise EmptyResultError(
            f"the smallest (class, context value) cell holds {smallest} images: too few for a "
            f"family up to delta={max(DELTAS)}",
            "use context values with more images in both classes",
        )
    return b


def _cells(
    source: GroupSource,
    classes: Sequence[str],
    values: Mapping[str, Sequence[str]],
    seed: int,
    key: str,
    within: Callable[[str, str], bool] = lambda c, i: True,
) -> tuple[dict[tuple[str, str], list[str]], dict[str, str], int]:
    """(class, value) -> seeded images; image -> its first context; images dropped for two values."""
    amb = ambiguous_images(source, classes)
    cells: dict[tuple[str, str], list[str]] = {}
    first: dict[str, str] = {}
    dropped = 0
    for c in classes:
        assign, _ = assign_factor(source, c, values, amb)
        kept = source.kept_contexts(c)
        everyone = {i for ctxs in values.values() for x in ctxs for i in kept.get(x, ())}
        dropped += sum(1 for i in everyone - amb if within(c, i) and i not in assign)
        for v in values:
            ids = [i for i, (val, x) in assign.items() if val == v and within(c, i)]
            cells[(c, v)] = seeded_order(ids, seed, f"{key}/{c}/{v}")
        first.update({i: x for i, (_, x) in assign.items()})
    return cells, first, dropped


def _draw(
    cells: Mapping[tuple[str, str], list[str]],
    budget: Mapping[str, int],
    deltas: Mapping[str, float],
    a_cls: str,
    classes: Sequence[str],
) -> dict[str, dict[tuple[str, str], list[str]]]:
    """split -> (class, value) -> images; splits take consecutive regions of every cell's order."""
    out: dict[str, dict[tuple[str, str], list[str]]] = {}
    start = 0
    for s, total in budget.items():
        fav, other = _cell_counts(total, deltas[s])
        out[s] = {}
        for c in classes:
            for v in ("s1", "s2"):
                n = fav if (c == a_cls) == (v == "s1") else other
                out[s][(c, v)] = cells[(c, v)][start : start + n]
        start += _region(total)
    return out


def conditional_plan(
    tid: str,
    source: GroupSource,
    design: ConditionalDesign,
    level: Level,
    *,
    sizes: LevelSizes = LevelSizes(),
    seed: int = 0,
) -> TaskPlan:
    """P(s1) = 1/2 everywhere; P(A|s1) = 1/2 + delta in train/validation/id_test, 1/2 or 1/2 - delta in test."""
    classes = list(design.classes)
    a_cls, b_cls = classes
    values = {"s1": design.s1, "s2": design.s2}
    cells, _, dropped = _cells(source, classes, values, seed, task_id("conditional", classes, "family"))
    budget = _conditional_budget(
        min(len(v) for v in cells.values()), sizes, ("test", "train", "validation", "id_test")
    )
    delta = float(level.delta or 0.0)
    test_delta = -delta if level.test == "reversed" else 0.0
    drawn = _draw(
        cells, budget, {"test": test_delta, "train": delta, "validation": delta, "id_test": delta}, a_cls, classes
    )
    labels = dict(zip(("s1", "s2"), design.labels))
    groups = {(c, v): GroupDef(c, labels[v], tuple(values[v]), "") for c in classes for v in ("s1", "s2")}
    rm = _RowMaker(source)
    splits = {s: [r for key, ids in drawn[s].items() for r in rm.rows(groups[key], ids)] for s in SPLITS if s in drawn}
    entries = {s: [_group_spec(g) for g in groups.values()] for s in ("train", "validation", "id_test", "test")}
    plan = finish_plan(
        tid,
        "conditional" if delta else "none",  # delta = 0: the family's no-shift control, declared as what it is
        classes,
        seed,
        splits,
        entries,
        Counter(),
        minority_fraction=MinorityFraction(target=round(0.5 - delta, 6), achieved=None),
        minority_groups=(groups[(a_cls, "s2")].name, groups[(b_cls, "s1")].name),
        conditional=ConditionalFacts(
            p_s1=0.5, p_a_given_s1_train=0.5 + delta, p_a_given_s1_test=0.5 + test_delta, class_a=a_cls
        ),
        **_level_spec(level, None, dropped, values, labels=labels),
    )
    check_level_plan(plan)
    return plan


def _inner_split(
    source: GroupSource, classes: Sequence[str], ctxs: Sequence[str], seed: int, key: str, mine: Mapping[str, set[str]]
) -> tuple[dict[str, tuple[str, ...]], tuple]:
    """s1/s2 = the bipartition of a level's training contexts that leaves the most images in its
    smallest (class, value) cell (ties: first in order, s1 holding the first context); with its cells."""
    best = None
    m = len(ctxs)
    for mask in range(1, 2 ** (m - 1)):
        bits = [0] + [(mask >> j) & 1 for j in range(m - 1)]
        values = {
            "s1": tuple(x for x, b in zip(ctxs, bits) if b == 0),
            "s2": tuple(x for x, b in zip(ctxs, bits) if b),
        }
        cells = _cells(source, classes, values, seed, key, within=lambda c, i: i in mine[c])
        smallest = min(len(v) for v in cells[0].values())
        if best is None or smallest > best[0]:
            best = (smallest, values, cells)
    if best is None:
        raise EmptyResultError(
            f"a joint level needs two training contexts, got {list(ctxs)}", "pass train_contexts=2 or more"
        )
    return best[1], best[2]


def joint_plan(
    tid: str,
    source: GroupSource,
    design: MarginalDesign,
    level: Level,
    *,
    sizes: LevelSizes = LevelSizes(),
    seed: int = 0,
) -> TaskPlan:
    """Marginal level ``rank``'s contexts, and P(A|s1) = 1/2 + delta inside training (s1/s2:
    :func:`_inner_split` of C_tr); the test is the marginal family's OOD test."""
    classes = list(design.classes)
    a_cls = classes[0]
    fam = _Family(source, design, seed, task_id("marginal", classes, "family"))  # same OOD test as marginal
    _, _, _, _, reserve = _marginal_budget(fam, sizes)
    key = task_id("joint", classes, "family")
    per_level = []
    for kk, g in enumerate(design.train_contexts):
        mine = {c: {i for (v, _), ids in fam.pools[c].items() if v == f"d{kk}" for i in ids} for c in classes}
        per_level.append(_inner_split(source, classes, g, seed, f"{key}/d{kk}", mine))
    # One training size for the whole (level, delta) grid: the smallest cell of any level decides.
    budget = _conditional_budget(
        min(len(v) for _, (cells, _, _) in per_level for v in cells.values()),
        sizes,
        ("train", "validation", "id_test"),
    )
    k = int(level.rank or 0)
    inner, (cells, first, dropped) = per_level[k]
    delta = float(level.delta or 0.0)
    drawn = _draw(cells, budget, dict.fromkeys(budget, delta), a_cls, classes)
    rm = _RowMaker(source)
    splits: dict[str, list[Row]] = {s: [] for s in SPLITS}
    for s, by in drawn.items():
        for (c, _), ids in by.items():
            for i in ids:
                splits[s] += rm.rows(GroupDef(c, first[i], (first[i],), first[i]), [i])
    te_caps = fam.caps("test")
    res = allocate(te_caps, reserve)
    for c, picked in fam.take("test", [cp - r for cp, r in zip(te_caps, res)], res).items():
        for x, ids in picked.items():
            splits["test"] += rm.rows(GroupDef(c, x, (x,), x), ids)
    lev = replace(level, distance=design.distances[k])
    ctxs = design.train_contexts[k]
    groups = _groups_spec(classes, {"train": ctxs, "validation": ctxs, "id_test": ctxs, "test": design.test_contexts})
    plan = finish_plan(
        tid,
        # the design, at every size and distance: delta = 0 keeps the classes balanced over s1/s2, so only P(S)
        # shifts by construction (the rows' measurement and its verdict stand beside it: tasks/design_check.py)
        "joint" if delta else "marginal",
        classes,
        seed,
        splits,
        groups,
        Counter(),
        distance=ShiftDistance(
            value=design.distances[k],
            rule=design.distance_rule,
            per_class=design.per_class[k],
            note="mean over classes of the distance between the training and the test contexts' subsets of the class",
        ),
        conditional=ConditionalFacts(
            p_s1=0.5,
            p_a_given_s1_train=0.5 + delta,
            class_a=a_cls,
            note="s1/s2: the split of the training contexts that leaves the most images in "
            "the smallest (class, value) cell",
        ),
        **_level_spec(
            lev,
            design,
            fam.dropped[f"d{k}"] + fam.dropped["test"] + dropped,
            within_train={s: tuple(x) for s, x in inner.items()},
        ),
    )
    check_level_plan(plan)
    return plan


# --------------------------------------------------------------------------------------------
# designs from a source, and one entry point per task id
# --------------------------------------------------------------------------------------------
def conditional_design(
    source: GroupSource,
    classes: Sequence[str],
    *,
    min_images: int = 10,
    paper_groups: Mapping[str, Sequence[str]] | None = None,
) -> ConditionalDesign:
    """s1/s2 for a class pair. ``paper_groups`` (e.g. the paper's ``cat(indoor)`` ... groups):
    s1 = union of the ``<cls>(indoor)`` contexts, s2 = union of ``<cls>(outdoor)``, minus contexts
    in both. Otherwise: the shared contexts of class A's meta-graph community holding most shared
    contexts (ties: smaller id) are s1, the other shared contexts s2."""
    a, b = classes
    if paper_groups:
        labels = sorted({n[n.index("(") + 1 : -1] for n in paper_groups})
        if len(labels) != 2:
            raise EmptyResultError(
                f"paper groups {sorted(paper_groups)} do not name two context values",
                "pass groups <cls>(<value>) with two values",
            )
        sets = [set().union(*(set(v) for n, v in paper_groups.items() if n.endswith(f"({lab})"))) for lab in labels]
        both = sets[0] & sets[1]
        return ConditionalDesign(
            (a, b), tuple(sorted(sets[0] - both)), tuple(sorted(sets[1] - both)), (labels[0], labels[1])
        )
    shared = shared_contexts(source, classes, min_images, ambiguous_images(source, classes))
    by: dict[int, list[str]] = {}
    for x in shared:
        by.setdefault(source.community(f"{a}({x})"), []).append(x)
    if len(shared) < 2 or len(by) < 2:
        raise EmptyResultError(
            f"classes {list(classes)} share {len(shared)} contexts with >= {min_images} images in "
            f"{len(by)} community of {a}: no two context values",
            "lower min_images, or pick a class pair with more shared contexts",
        )
    top = min(by, key=lambda k: (-len(by[k]), k))
    s1 = tuple(sorted(by[top]))
    s2 = tuple(sorted(x for x in shared if x not in s1))
    return ConditionalDesign((a, b), s1, s2, (f"community-{top}", "other"))


def family_ids(classes: Sequence[str], n_levels: int = 4) -> list[str]:
    """Every listed task id of the three families for a class pair."""
    return [task_id(t, classes, name) for t in SHIFT_TYPES for name in level_names(t, n_levels)]


def plan(
    tid: str,
    source: GroupSource,
    distance: DistanceFn,
    known_classes: Sequence[str],
    *,
    seed: int = 0,
    sizes: LevelSizes = LevelSizes(),
    distance_rule: DistanceRule = "custom",
    candidates: Sequence[str] | None = None,
    paper_groups: Mapping[str, Sequence[str]] | None = None,
) -> TaskPlan:
    """The plan of one ``shift-<type>-<A>-<B>-<level>`` task."""
    shift_type, classes, name = parse_task_id(tid, known_classes)
    level = parse_level(shift_type, name, sizes.levels)
    if shift_type == "conditional":
        design = conditional_design(source, classes, min_images=sizes.min_images, paper_groups=paper_groups)
        return conditional_plan(tid, source, design, level, sizes=sizes, seed=seed)
    mdesign = marginal_design(
        source, classes, distance, sizes=sizes, distance_rule=distance_rule, candidates=candidates
    )
    if shift_type == "marginal":
        return marginal_plan(tid, source, mdesign, level, sizes=sizes, seed=seed)
    return joint_plan(tid, source, mdesign, level, sizes=sizes, seed=seed)
