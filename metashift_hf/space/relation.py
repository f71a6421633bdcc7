"""The paper's central relation for one model on one task: each test context's accuracy (Wilson 95% interval, from
the run's ``per_group.csv`` through the scoring core) against its meta-graph distance to the training subsets of
its class (the task repo's published pairwise distances, ``TaskData.distances``: never computed here), with the
Spearman rank correlation (scipy).

MetaShift (Liang & Zou, ICLR 2022), Sec. 4.2: "the distance between the training subsets and the test subset ...
the larger the distance, the lower the accuracy on the test subset". A test context here is a context subset
``class(context)`` of one of the task's test groups, not in a training group; its distance is to the nearest of its
class's training subsets (the smallest published d; disconnected pairs have none). Where ours differs: the paper
trains one model per (train, test) pair; here one model trained on the task's training groups is read on every
test context.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from ..core.errors import MetashiftError
from ..core.names import SubsetName
from .graphs import task_data
from .index import IndexedTask
from .results import Drilldown


MIN_POINTS = 3  # a rank correlation over fewer contexts says nothing


@dataclass(frozen=True)
class Relation:
    """Accuracy against distance to training, one row per test context, and their rank correlation."""

    model: str
    task: str
    points: pd.DataFrame  # context, class, n, accuracy, ci_low, ci_high, distance, nearest (training subset)
    rho: float | None  # Spearman's rank correlation (None: fewer than MIN_POINTS contexts with a distance)
    p_value: float | None
    note: str  # why some context has no distance, or why there is no correlation


def _train_and_test_subsets(e: IndexedTask) -> tuple[dict[str, list[str]], set[str]]:
    """class -> its training subsets, and the test groups' subsets not in training (names ``class(context)``)."""
    groups = e.spec.groups()
    train: dict[str, list[str]] = {}
    for g in groups.get("train", ()):
        train.setdefault(g.cls, []).extend(str(SubsetName(g.cls, c)) for c in g.contexts)
    trained = {s for subs in train.values() for s in subs}
    test = {str(SubsetName(g.cls, c)) for g in groups.get("test", ()) for c in g.contexts} - trained
    return train, test


def _nearest(pairs, subset: str, candidates: list[str]) -> tuple[float | None, str]:
    """The smallest published distance from ``subset`` to one of ``candidates`` (and which one)."""
    best: tuple[float | None, str] = (None, "")
    for other in candidates:
        try:
            d = pairs.distance(subset, other)
        except MetashiftError:
            continue  # a subset the published pairs do not hold (not kept in the build)
        if d.value is not None and (best[0] is None or d.value < best[0]):
            best = (float(d.value), other)
    return best


def relation(e: IndexedTask, dd: Drilldown) -> Relation:
    """Each test context of ``dd``'s per-group table with its distance to training, and Spearman's rho."""
    from scipy.stats import spearmanr  # a dependency of the package; only this view needs it

    train, test = _train_and_test_subsets(e)
    rows = dd.groups[(dd.groups["level"] == "context") & dd.groups["name"].isin(test)]
    pairs = task_data(e).distances  # the repo's published pairwise distances (refused when it has none)
    points = []
    for r in rows.to_dict("records"):
        d, nearest = _nearest(pairs, r["name"], train.get(r["class"], []))
        points.append(
            {
                "context": r["name"],
                "class": r["class"],
                "n": r["n"],
                "accuracy": r["accuracy"],
                "ci_low": r["ci_low"],
                "ci_high": r["ci_high"],
                "distance": math.nan if d is None else d,
                "nearest": nearest,
            }
        )
    df = pd.DataFrame(
        points, columns=["context", "class", "n", "accuracy", "ci_low", "ci_high", "distance", "nearest"]
    )
    known = df.dropna(subset=["distance", "accuracy"])
    notes = []
    if len(known) < len(df):
        notes.append(f"{len(df) - len(known)} test context(s) have no published distance to a training subset")
    rho = p = None
    if len(known) >= MIN_POINTS and known["distance"].nunique() > 1 and known["accuracy"].nunique() > 1:
        res = spearmanr(known["distance"], known["accuracy"])
        rho, p = float(res.statistic), float(res.pvalue)
    else:
        notes.append(f"a rank correlation needs at least {MIN_POINTS} test contexts with distinct values")
    return Relation(dd.model, dd.task, df, rho, p, "; ".join(notes))
