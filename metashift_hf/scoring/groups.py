"""Group scores on arrays: which rows are correct and the rows' group names in, one score per group out.

The model is WILDS' ``eval`` over a grouper: every figure a report shows (a split, a class, a task
group, a context subset, a community) is a :class:`GroupScore` made by :func:`group_score`, with the
same Wilson interval, and the worst of them is picked by one rule (:data:`WORST_RULE`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Hashable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from metashift_hf.tasks.splits import split_order

from ..core.errors import EmptyResultError
from .stats import wilson_interval


WORST_RULE = "worst = the lowest accuracy; ties go to the larger group, then to the name (alphabetical)"


@dataclass(frozen=True)
class GroupScore:
    """Accuracy of one group (or class, or context subset) in one split, with its Wilson 95% interval."""

    group: str
    split: str
    n: int
    correct: int
    accuracy: float
    ci_low: float
    ci_high: float

    @classmethod
    def of(cls, group: str, split: str, correct: np.ndarray) -> "GroupScore":
        return group_score(group, split, correct)


def group_score(group: str, split: str, correct: "np.ndarray | Sequence[bool]") -> GroupScore:
    """The score of one group from its rows' correctness (NaN accuracy and interval for no rows)."""
    correct = np.asarray(correct, dtype=bool)
    n, k = int(correct.size), int(correct.sum())
    lo, hi = wilson_interval(k, n)
    return GroupScore(str(group), split, n, k, (k / n) if n else float("nan"), lo, hi)


def group_scores(
    names: Sequence[Hashable], correct: np.ndarray, split: str, order: Iterable[Hashable] | None = None
) -> tuple[GroupScore, ...]:
    """One :class:`GroupScore` per group name of the rows (``names[i]`` is row i's group), sorted by name
    unless ``order`` gives the groups (those without rows are left out)."""
    names = np.asarray([str(n) for n in names], dtype=object)
    correct = np.asarray(correct, dtype=bool)
    wanted = sorted(set(names)) if order is None else [str(g) for g in order if str(g) in set(names)]
    return tuple(group_score(g, split, correct[names == g]) for g in wanted)


def worst(scores: Sequence[GroupScore]) -> GroupScore:
    """The worst group by :data:`WORST_RULE`."""
    return min(scores, key=lambda g: (g.accuracy, -g.n, g.group))


def _row(level: str, cls: str, group: str, subset: str, correct: np.ndarray) -> dict:
    g = group_score(group, "", correct)
    return {
        "level": level,
        "class": cls,
        "group": group,
        "subset": subset,
        "n": g.n,
        "correct": g.correct,
        "accuracy": g.accuracy,
        "ci_low": g.ci_low,
        "ci_high": g.ci_high,
    }


def group_table(
    scored: pd.DataFrame,
    classes: Sequence[str],
    subset_community: Mapping[str, int] | None = None,
) -> pd.DataFrame:
    """Per-group accuracies with Wilson 95% intervals of one scored table, in a fixed order.

    ``scored`` has ``label``, ``contexts``, ``correct`` and optionally ``split`` and ``community``.
    Levels: ``overall``, ``split``, ``class``, ``split_class``, ``context`` (subset ``class(context)``),
    ``community`` (community id of the class's meta-graph; from ``subset_community`` when given, else the
    table's ``community`` column, -1 meaning none). :func:`metashift_hf.scoring.per_group.from_group_table`
    turns it into per_group.csv rows.
    """
    if scored.empty:
        raise EmptyResultError("the task has no images to evaluate", "check the task id, --artifact and --images")
    rows = [_row("overall", "", "", "", scored["correct"].to_numpy())]
    splits = split_order(set(scored["split"])) if "split" in scored else []
    for s in splits:
        rows.append(_row("split", "", s, "", scored.loc[scored["split"] == s, "correct"].to_numpy()))
    for c in classes:
        part = scored[scored["label"] == c]
        rows.append(_row("class", c, "", "", part["correct"].to_numpy()))
        for s in splits:
            sp = part[part["split"] == s]
            if len(sp):
                rows.append(_row("split_class", c, s, "", sp["correct"].to_numpy()))
        ctx_members: dict[str, list[bool]] = {}
        comm_members: dict[int, list[bool]] = {}
        has_comm_col = "community" in part.columns
        for contexts, ok, comm in zip(
            part["contexts"], part["correct"], part["community"] if has_comm_col else [-1] * len(part)
        ):
            ctxs = sorted(set(contexts if contexts is not None else []))
            for ctx in ctxs:
                ctx_members.setdefault(ctx, []).append(bool(ok))
            if subset_community is not None:
                comms = {subset_community.get(f"{c}({ctx})", -1) for ctx in ctxs}
            else:
                comms = {int(comm)}
            for k in sorted(comms - {-1}):
                comm_members.setdefault(k, []).append(bool(ok))
        for ctx in sorted(ctx_members):
            row = _row("context", c, ctx, f"{c}({ctx})", np.array(ctx_members[ctx]))
            if subset_community is not None:
                row["community"] = int(subset_community.get(f"{c}({ctx})", -1))
            rows.append(row)
        for k in sorted(comm_members):
            rows.append(_row("community", c, str(k), "", np.array(comm_members[k])))
    df = pd.DataFrame(rows)
    if "community" not in df:
        df["community"] = np.nan
    df["community"] = df["community"].astype("Int64")
    return df


def worst_subsets(groups: pd.DataFrame, min_n: int) -> pd.DataFrame:
    """Context subsets with at least ``min_n`` images, worst first by :data:`WORST_RULE`."""
    ctx = groups[(groups["level"] == "context") & (groups["n"] >= min_n)]
    return ctx.sort_values(["accuracy", "n", "subset"], ascending=[True, False, True], kind="stable")


def id_vs_ood(groups: pd.DataFrame, id_split: str, ood_split: str) -> dict[str, Any] | None:
    """Accuracy on the in-distribution split vs the out-of-distribution split: gap and relative drop."""
    sp = groups[groups["level"] == "split"].set_index("group")
    if id_split not in sp.index or ood_split not in sp.index:
        return None
    a_id, a_ood = float(sp.at[id_split, "accuracy"]), float(sp.at[ood_split, "accuracy"])
    return {
        "id_split": id_split,
        "ood_split": ood_split,
        "id": {
            "n": int(sp.at[id_split, "n"]),
            "correct": int(sp.at[id_split, "correct"]),
            "accuracy": a_id,
            "ci": [float(sp.at[id_split, "ci_low"]), float(sp.at[id_split, "ci_high"])],
        },
        "ood": {
            "n": int(sp.at[ood_split, "n"]),
            "correct": int(sp.at[ood_split, "correct"]),
            "accuracy": a_ood,
            "ci": [float(sp.at[ood_split, "ci_low"]), float(sp.at[ood_split, "ci_high"])],
        },
        "gap": a_id - a_ood,
        "relative_drop": (a_id - a_ood) / a_id if a_id > 0 else None,
    }


__all__ = [
    "GroupScore",
    "WORST_RULE",
    "group_score",
    "group_scores",
    "worst",
    "group_table",
    "worst_subsets",
    "id_vs_ood",
]
