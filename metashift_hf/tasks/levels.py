"""Shift tasks by type and level, the vocabulary: ids, level names, sizes and the checks every plan passes
(the generators are in metashift_hf/tasks/level_plans.py).

The three types: marginal (P(S) shifts), conditional (P(Y|S) shifts), joint (both).

With Y the class and S the context, only P(S, Y) = P(S) P(Y|S) may shift between train and test.

* **marginal** ``d<k>``: train contexts C_tr and test contexts C_te are disjoint; within every
  context each class has the same number of images, so S says nothing about Y. Levels are the
  meta-graph distance between C_tr and C_te (``d0`` nearest .. ``d<K-1>`` farthest). ``d<k>-mix<pp>``
  replaces pp% of the training images with C_te images (same training size) and tests on the
  rest of C_te: the mixed-to-test control.
* **conditional** ``delta<dd>`` (``-rev``): two context values s1, s2 with P(s1) = 1/2 in train and
  test; P(A|s1) = 1/2 + delta in train, 1/2 in the balanced test, 1/2 - delta in the reversed one.
* **joint** ``d<k>-delta<dd>``: marginal level k's contexts, and inside training the contexts of
  C_tr split into s1/s2 with P(A|s1) = 1/2 + delta; test = the marginal family's OOD test (P(S)
  and P(Y|S) both shift).

Every plan satisfies (and :func:`check_level_plan` verifies): each image has one value of the
factor (images with two are dropped), no image sits in two splits, P(Y) is equal in train and test.
Images of one family are drawn from one seeded order per (class, context), so levels are nested
and the OOD test set is the same for every level of a family.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Sequence

from metashift_hf.core import options as opt
from metashift_hf.core.errors import EmptyResultError, MetashiftError, UnknownNameError, did_you_mean

from .plan import TaskPlan
from .spec import Level, LevelType, ShiftSpec


ShiftType = LevelType
SHIFT_TYPES: tuple[ShiftType, ...] = ("marginal", "conditional", "joint")
DELTAS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.45, 0.49)
MIX_FRACTIONS = (0.1, 0.25, 0.5)
PREFIX = "shift"

# (class, contexts a, contexts b) -> meta-graph distance between the two sets of subsets of the class
DistanceFn = Callable[[str, Sequence[str], Sequence[str]], float]


# --------------------------------------------------------------------------------------------
# levels and ids
# --------------------------------------------------------------------------------------------
def _delta_name(delta: float) -> str:
    return f"delta{int(round(delta * 100)):02d}"


def level_names(shift_type: ShiftType, n_levels: int = 4) -> list[str]:
    """The level names a family lists (any ``d<k>-mix<pp>`` with k < n_levels also plans)."""
    if shift_type == "marginal":
        last = n_levels - 1
        return [f"d{k}" for k in range(n_levels)] + [f"d{last}-mix{int(round(f * 100))}" for f in MIX_FRACTIONS]
    if shift_type == "conditional":
        return [_delta_name(d) for d in DELTAS] + [_delta_name(d) + "-rev" for d in DELTAS if d > 0]
    return [f"d{k}-{_delta_name(d)}" for k in range(n_levels) for d in DELTAS]


def parse_level(shift_type: str, name: str, n_levels: int = 4) -> Level:
    """``d3`` / ``d3-mix25`` / ``delta30`` / ``delta30-rev`` / ``d1-delta45`` -> :class:`Level`."""
    bad = UnknownNameError(
        f"unknown {shift_type} level {name!r}" + did_you_mean(name, level_names(shift_type, n_levels))
        if shift_type in SHIFT_TYPES
        else f"unknown shift type {shift_type!r}",
        f"use a level such as {', '.join(level_names(shift_type, n_levels)[:4])}"
        if shift_type in SHIFT_TYPES
        else f"use one of {', '.join(SHIFT_TYPES)}",
    )
    if shift_type not in SHIFT_TYPES:
        raise bad
    parts = name.split("-")

    def rank(p: str) -> int:
        if not (p.startswith("d") and p[1:].isdigit()) or int(p[1:]) >= n_levels:
            raise bad
        return int(p[1:])

    def delta(p: str) -> float:
        if not (p.startswith("delta") and p[5:].isdigit()):
            raise bad
        d = int(p[5:]) / 100
        if d not in DELTAS:
            raise bad
        return d

    if shift_type == "marginal":
        if len(parts) == 1:
            return Level("marginal", name, rank=rank(parts[0]))
        if len(parts) == 2 and parts[1].startswith("mix") and parts[1][3:].isdigit():
            f = int(parts[1][3:]) / 100
            if f not in MIX_FRACTIONS:
                raise bad
            return Level("marginal", name, rank=rank(parts[0]), mixed_fraction=f)
        raise bad
    if shift_type == "conditional":
        if len(parts) == 1:
            return Level("conditional", name, delta=delta(parts[0]), test="balanced")
        if len(parts) == 2 and parts[1] == "rev" and delta(parts[0]) > 0:
            return Level("conditional", name, delta=delta(parts[0]), test="reversed")
        raise bad
    if len(parts) == 2:
        return Level("joint", name, rank=rank(parts[0]), delta=delta(parts[1]))
    raise bad


def task_id(shift_type: ShiftType, classes: Sequence[str], level: str) -> str:
    return f"{PREFIX}-{shift_type}-{'-'.join(classes)}-{level}"


def parse_task_id(tid: str, known_classes: Sequence[str]) -> tuple[ShiftType, tuple[str, ...], str]:
    """``shift-marginal-cat-dog-d3`` -> ("marginal", ("cat", "dog"), "d3"); class names may hold '-'."""
    head = f"{PREFIX}-"
    if not tid.startswith(head):
        raise UnknownNameError(f"{tid!r} is not a shift task id", "use ids like shift-marginal-cat-dog-d3")
    rest = tid[len(head) :]
    shift_type, _, rest = rest.partition("-")
    if shift_type not in SHIFT_TYPES:
        raise UnknownNameError(
            f"task {tid!r}: unknown shift type {shift_type!r}", f"use one of {', '.join(SHIFT_TYPES)}"
        )
    known = sorted(set(known_classes), key=len, reverse=True)
    classes: list[str] = []
    while rest:
        for c in known:
            if rest.startswith(c + "-") and c not in classes:
                classes.append(c)
                rest = rest[len(c) + 1 :]
                break
        else:
            break
        if len(classes) == 2:
            break
    if len(classes) != 2 or not rest:
        raise UnknownNameError(
            f"task {tid!r}: expected shift-<type>-<class A>-<class B>-<level> with two classes of the artifact",
            "list shift tasks with `metashift-hf tasks list --kind shift`",
        )
    return shift_type, (classes[0], classes[1]), rest  # type: ignore[return-value]


# --------------------------------------------------------------------------------------------
# sizes
# --------------------------------------------------------------------------------------------
def _doc(text: str) -> dict:
    return {"doc": text}


@dataclass(frozen=True)
class LevelSizes:
    """Options of the shift families (design and sizes). Counts are per class."""

    test_contexts: int = field(default=1, metadata=_doc("marginal/joint: contexts in the OOD test group C_te (1)"))
    train_contexts: int = field(default=4, metadata=_doc("marginal/joint: contexts in each level's C_tr (4)"))
    levels: int = field(default=4, metadata=_doc("marginal/joint: number of distance levels d0.. (4)"))
    min_images: int = field(default=10, metadata=_doc("images a shared context needs in every class to be used (10)"))
    train_per_class: int | None = field(
        default=None, metadata=_doc("training images per class; None = the largest every level of the family supports")
    )
    validation_fraction: float = field(default=0.1, metadata=_doc("share of the ID budget for validation (0.1)"))
    id_test_fraction: float = field(default=0.2, metadata=_doc("share of the ID budget for id_test (0.2)"))
    test_fraction: float = field(default=0.25, metadata=_doc("conditional: share of the budget for test (0.25)"))

    def __post_init__(self) -> None:
        for f in ("test_contexts", "train_contexts", "levels", "min_images"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise opt.OptionError(f"{f}={v!r} must be a positive integer", f"pass e.g. {f}=3")
        if self.levels < 2:
            raise opt.OptionError(f"levels={self.levels} gives no curve", "pass levels=2 or more")
        fr = (self.validation_fraction, self.id_test_fraction, self.test_fraction)
        if not all(isinstance(x, (int, float)) and 0 <= x < 1 for x in fr) or fr[0] + fr[1] >= 1:
            raise opt.OptionError(
                f"fractions {fr} must lie in [0, 1) and leave images for train",
                "pass e.g. validation_fraction=0.1, id_test_fraction=0.2",
            )
        if self.train_per_class is not None and (isinstance(self.train_per_class, bool) or self.train_per_class < 4):
            raise EmptyResultError(
                f"train_per_class={self.train_per_class!r} is too small", "pass 4 or more, or omit it"
            )


# --------------------------------------------------------------------------------------------
# the three checks
# --------------------------------------------------------------------------------------------
def check_level_plan(plan: TaskPlan, tol: float = 1e-9) -> None:
    """Raise unless: every image has exactly one value of the factor (``spec.factor``, and of
    ``within_train`` for training-side images of joint tasks), no image is in two splits, and the
    class proportions P(Y) are equal in train and test."""
    factor = plan.spec.factor
    values = {v: set(c) for v, c in factor.values.items()}
    within = {v: set(c) for v, c in (factor.within_train or {}).items()}
    fix = "this is a bug in the level generator; please report it with the task id and seed"
    seen: dict[str, str] = {}
    for split, rows in plan.splits.items():
        for r in rows:
            if r.image_id in seen:
                raise MetashiftError(
                    f"task {plan.task_id}: image {r.image_id} is in {seen[r.image_id]!r} and {split!r}", fix
                )
            seen[r.image_id] = split
            ctx = set(r.contexts)
            hit = [v for v, c in values.items() if ctx & c]
            if len(hit) != 1:
                raise MetashiftError(
                    f"task {plan.task_id}: image {r.image_id} ({r.label}) has factor values {hit}, not exactly one",
                    fix,
                )
            inner = [v for v, c in within.items() if ctx & c]
            if within and split != "test" and len(inner) != 1:
                raise MetashiftError(f"task {plan.task_id}: image {r.image_id} has training values {inner}", fix)
    p = {}
    for s in ("train", "test"):
        rows = plan.splits.get(s, [])
        if not rows:
            raise MetashiftError(f"task {plan.task_id}: split {s!r} is empty", fix)
        cnt = Counter(r.label for r in rows)
        p[s] = {c: cnt.get(c, 0) / len(rows) for c in plan.classes}
    bad = {c: (p["train"][c], p["test"][c]) for c in plan.classes if abs(p["train"][c] - p["test"][c]) > tol}
    if bad:
        raise MetashiftError(f"task {plan.task_id}: P(Y) differs between train and test: {bad}", fix)


def paper_level(spec: ShiftSpec) -> Level:
    """The paper tasks in this vocabulary: DG = its declared type (joint: metashift_hf/tasks/paper_tasks.py
    DG_SHIFT_TYPE) with level d (its distance) and no designed delta, subpopulation = conditional with
    delta = 1/2 - p (p the minority fraction of training) and a balanced test."""
    if spec.shift_type in ("marginal", "joint") and spec.minority_fraction is None:
        d = spec.distance.value if spec.distance is not None else None
        return Level(spec.shift_type, f"d={d:.3f}" if d is not None else "d=?", distance=d)
    if spec.shift_type == "conditional" and spec.minority_fraction is not None:
        mf = spec.minority_fraction
        p = mf.achieved if mf.achieved is not None else mf.target
        delta = round(0.5 - float(p), 6)
        return Level("conditional", f"delta={delta:g}", delta=delta, test="balanced")
    raise UnknownNameError(f"shift type {spec.shift_type!r} has no level", "pass a DG or subpopulation spec")
