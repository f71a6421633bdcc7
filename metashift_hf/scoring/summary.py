"""The one split summary: n, accuracy (Wilson 95%), balanced accuracy, worst group and the chance baseline.

Every headline figure comes from :func:`split_summary`: ``score`` and ``Evaluator.eval`` (and so ``train`` and
``experiment compare``, which score their predictions through ``score``) per split, ``evaluate`` (and so the
zoo's leaderboard) on the headline split. Balanced accuracy is computed here only (:func:`balanced_accuracy`),
so the six report the same figures to the last digit for the same predictions (issue 34 part 3).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Hashable, Sequence

import numpy as np

from ..core.errors import EmptyResultError
from .groups import WORST_RULE, GroupScore, group_score, group_scores, worst


HEADLINE_RULE = (
    "headline = the test (OOD) split, never train; balanced accuracy = mean of the per-class accuracies; "
    "worst group = the lowest accuracy over the split's groups (the task's group column, else its classes; "
    + WORST_RULE
    + "); "
    "baseline = always predicting the split's most frequent class (from the truth): its balanced accuracy "
    "is 1/classes, chance for any scoring"
)
CHANCE_RULE = (
    "chance = always predicting the split's most frequent class (ties: first in the task's class order); "
    "its balanced accuracy is 1/classes"
)


# Two "adjusted" accuracies, each defined once, here, and labelled wherever shown (issue 45 part 2):
ADJUSTED_RULE = (
    "adjusted average (ours): each group's accuracy weighted by that group's share of the train split "
    "(groups absent from train get weight 0; null when the split shares no group with train)"
)
GROUP_MEAN_RULE = (
    "SubpopBench adjusted_accuracy: the unweighted mean of the split's group accuracies "
    "(subpopbench/utils/eval_helper.py: sum(per_group accuracy) / number of groups in the split)"
)


def adjusted_average(per_group: Sequence[GroupScore], train_share: "dict[str, float]") -> float | None:
    """Ours (:data:`ADJUSTED_RULE`): the group accuracies weighted by the groups' shares of train."""
    weights = {g.group: train_share.get(g.group, 0.0) for g in per_group}
    total = sum(weights.values())
    return (sum(weights[g.group] * g.accuracy for g in per_group) / total) if total > 0 else None


def group_mean_accuracy(per_group: Sequence[GroupScore]) -> float | None:
    """SubpopBench's ``adjusted_accuracy`` (:data:`GROUP_MEAN_RULE`): every group of the split counts the same,
    computed exactly from the counts (fractions) like :func:`balanced_accuracy`; None without groups."""
    if not per_group:
        return None
    return float(sum(Fraction(g.correct, g.n) for g in per_group) / len(per_group))


def balanced_accuracy(per_class: Sequence[GroupScore]) -> float:
    """Mean of the per-class accuracies (= mean recall) over the classes with rows.

    Computed exactly from the counts (fractions), then rounded once: the figure does not depend on the order
    of the classes or on a summation order, so every report of it agrees to the last digit.
    """
    if not per_class:
        return float("nan")
    return float(sum(Fraction(g.correct, g.n) for g in per_class) / len(per_class))


@dataclass(frozen=True)
class Chance:
    """The constant predictor of the split's most frequent class, scored like a model (from the truth alone):
    ``whole`` its accuracy over the split (with the Wilson interval)."""

    predicts: str
    whole: GroupScore
    balanced_accuracy: float
    worst_group: GroupScore


@dataclass(frozen=True)
class SplitSummary:
    """One split's headline figures: ``whole`` (n, correct, accuracy and its Wilson interval over the split),
    balanced accuracy, the worst group (:data:`~metashift_hf.scoring.groups.WORST_RULE`), the per-group and
    per-class scores and the chance baseline."""

    whole: GroupScore
    balanced_accuracy: float
    worst_group: GroupScore
    per_group: tuple[GroupScore, ...]
    per_class: tuple[GroupScore, ...]
    chance: Chance


def _class_order(labels: np.ndarray, classes: Sequence[Hashable]) -> list[str]:
    """The task's classes that have rows, in task order; labels outside ``classes`` after them, sorted."""
    present = set(labels.tolist())
    known = [str(c) for c in classes]
    return [c for c in known if c in present] + sorted(present - set(known))


def split_summary(
    split: str,
    labels: "np.ndarray | Sequence[Hashable]",
    correct: "np.ndarray | Sequence[bool]",
    groups: "np.ndarray | Sequence[Hashable]",
    classes: Sequence[Hashable],
) -> SplitSummary:
    """The summary of one split's rows: ``labels[i]`` is row i's true class, ``correct[i]`` whether the model
    got it right, ``groups[i]`` its group (the worst group is picked among these); ``classes`` the task's
    classes in task order (the order of ``per_class`` and the tie-break of the majority class)."""
    labels = np.asarray([str(c) for c in labels], dtype=object)
    correct = np.asarray(correct, dtype=bool)
    groups = np.asarray([str(g) for g in groups], dtype=object)
    if correct.size == 0:
        raise EmptyResultError(f"split {split!r} has no rows to score", "score a split that has images")
    if not labels.size == correct.size == groups.size:
        raise ValueError(f"labels, correct and groups differ in length ({labels.size}, {correct.size}, {groups.size})")
    order = _class_order(labels, classes)
    per_group = group_scores(groups, correct, split)
    per_class = group_scores(labels, correct, split, order=order)
    counts = {c: int((labels == c).sum()) for c in order}
    majority = min(order, key=lambda c: (-counts[c], order.index(c)))
    right = labels == majority  # what the constant predictor of the majority class gets right
    chance = Chance(
        predicts=majority,
        whole=group_score(split, split, right),
        balanced_accuracy=balanced_accuracy(group_scores(labels, right, split, order=order)),
        worst_group=worst(group_scores(groups, right, split)),
    )
    return SplitSummary(
        whole=group_score(split, split, correct),
        balanced_accuracy=balanced_accuracy(per_class),
        worst_group=worst(per_group),
        per_group=per_group,
        per_class=per_class,
        chance=chance,
    )


__all__ = ["HEADLINE_RULE", "CHANCE_RULE", "Chance", "SplitSummary", "balanced_accuracy", "split_summary"]
