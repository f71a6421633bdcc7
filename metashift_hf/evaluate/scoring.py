"""Which predictions are correct, and accuracies per split, class, context subset and community.

Counting rule (stated in every report): an image counts once overall, once per split and once for
its class; it counts once in *every* context subset it belongs to, so context rows overlap and do
not sum to the class row. Communities are unions of context subsets, again once per image.
"""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from metashift_hf.builders.spec import ShiftSpec
from ..core import options as opt
from ..core.errors import EmptyResultError, InputFormatError, UnknownNameError, did_you_mean
from .predictions import Predictions
from .stats import benjamini_hochberg, two_proportion_test, wilson_interval

MODES = ("hierarchy", "restricted")
COUNTING_RULE = (
    "each image counts once overall, once in its split and once in its class; it counts once in every "
    "context subset it belongs to (context rows overlap) and once in every community any of those subsets is in"
)
NO_CLASS = "(other)"  # hierarchy mode: top-1 leaf covered by none of the task's classes


def score_images(
    table: pd.DataFrame,
    predictions: Predictions,
    coverage: Mapping[str, Iterable[int]],
    mode: str = "hierarchy",
    classes: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Add ``pred_index``, ``pred_class`` and ``correct`` to a per-image ``table``.

    ``table`` has ``image_id`` and ``label`` (class name); ``coverage`` maps each class to the
    ImageNet-1k leaf indices under its matched synset. *hierarchy*: correct iff the top-1 leaf is
    one of the label's leaves. *restricted*: each class scores the max logit over its leaves and the
    model picks the best-scoring task class (ties: first class in task order).
    """
    if mode not in MODES:
        raise UnknownNameError(f"unknown scoring mode {mode!r}", f"use one of {', '.join(MODES)}")
    classes = list(classes) if classes is not None else sorted(set(table["label"]))
    leaves = {c: np.array(sorted(set(int(i) for i in coverage.get(c, ()))), dtype=np.int64) for c in classes}
    empty = [c for c in classes if leaves[c].size == 0]
    if empty:
        raise EmptyResultError(
            f"class(es) {', '.join(empty)} cover no ImageNet-1k leaf under this hierarchy, so no prediction can be right",
            "drop these classes from the task, or choose another --hierarchy (wordnet covers more leaves than paper)",
        )
    unknown = sorted(set(table["label"]) - set(classes))
    if unknown:
        raise UnknownNameError(f"labels {unknown[:5]} are not classes of the task {classes}", "pass the task's class list")
    preds = predictions.for_ids(list(table["image_id"]))
    out = table.copy()
    out["pred_index"] = preds.top1
    if mode == "hierarchy":
        owner: dict[int, str] = {}
        for c in classes:  # first class in task order owns a shared leaf, for the confusion column only
            for leaf in leaves[c].tolist():
                owner.setdefault(leaf, c)
        out["pred_class"] = [owner.get(int(i), NO_CLASS) for i in preds.top1]
        covered = {c: set(leaves[c].tolist()) for c in classes}
        out["correct"] = [int(i) in covered[c] for i, c in zip(preds.top1, out["label"])]
    else:
        if preds.logits is None:
            raise InputFormatError(
                "restricted scoring needs logits, but the predictions hold only top-1 indices",
                "provide logits (list column 'logits' or columns logit_0..logit_999), or use --mode hierarchy",
            )
        class_scores = np.stack([preds.logits[:, leaves[c]].max(axis=1) for c in classes], axis=1)
        chosen = class_scores.argmax(axis=1)  # argmax returns the first maximum: ties go to task order
        out["pred_class"] = [classes[k] for k in chosen]
        out["correct"] = out["pred_class"] == out["label"]
    out["correct"] = out["correct"].astype(bool)
    return out


SPLIT_ORDER = ("train", "validation", "test", "id_test")


def split_order(splits: Iterable[str]) -> list[str]:
    """The task layer's split order (train, validation, test, id_test), then any others by name."""
    splits = set(splits)
    return [s for s in SPLIT_ORDER if s in splits] + sorted(splits - set(SPLIT_ORDER))


def chosen_splits(asked: Iterable[str] | None, available: Iterable[str], task_id: str) -> list[str]:
    """The splits to score, in split order: ``asked`` (``--splits``; None = every split), each one the task has."""
    order = split_order(available)
    if asked is None:
        return order
    chosen = opt.names(asked, "splits")  # a bare 'test' (read letter by letter) and repeats are refused
    unknown = [s for s in chosen if s not in order]
    if unknown:
        raise UnknownNameError(f"task {task_id} has no split(s) {unknown}{did_you_mean(unknown[0], order)}",
                               f"use splits among {', '.join(order)}")
    return [s for s in order if s in chosen]


def headline_split(splits: Iterable[str]) -> str | None:
    """The split a headline (and a leaderboard's rank) reports: ``test``, the out-of-distribution split, when
    scored; else the last held-out split in split order. Never ``train`` (None when only train is scored)."""
    order = split_order(splits)
    if "test" in order:
        return "test"
    held = [s for s in order if s != "train"]
    return held[-1] if held else None


def _per_group_mean(correct: pd.Series, by: pd.Series) -> tuple[float, float, str]:
    """(mean of the groups' accuracies, worst group's accuracy, worst group's name; ties by name)."""
    acc = correct.groupby(by, sort=True).mean()
    worst = min(acc.index, key=lambda g: (acc[g], str(g)))
    return float(acc.mean()), float(acc[worst]), str(worst)


HEADLINE_RULE = ("headline = the test (OOD) split, never train; balanced accuracy = mean of the per-class accuracies; "
                 "worst group = the lowest accuracy over the split's groups (the task's group column, else its classes); "
                 "baseline = always predicting the split's most frequent class (from the truth): its balanced accuracy "
                 "is 1/classes, chance for any scoring")


def headline_metrics(scored: pd.DataFrame, classes: Sequence[str]) -> dict | None:
    """Balanced accuracy, worst group and the majority-class baseline on :func:`headline_split` (HEADLINE_RULE).

    ``scored`` is :func:`score_images`' table (``split``, ``label``, ``correct``, optional ``group``).
    An image of two classes (collections) counts once per class, as in the class rows.
    """
    split = headline_split(set(scored["split"]))
    if split is None:
        return None
    part = scored[scored["split"] == split]
    groups = part["group"] if "group" in part and part["group"].notna().all() else part["label"]
    balanced, _, _ = _per_group_mean(part["correct"], part["label"])
    _, worst_acc, worst = _per_group_mean(part["correct"], groups)
    counts = part["label"].value_counts()
    majority = min(counts.index, key=lambda c: (-int(counts[c]), list(classes).index(c) if c in classes else len(classes), c))
    right = part["label"] == majority  # what the constant predictor of the majority class gets right
    b_balanced, _, _ = _per_group_mean(right, part["label"])
    _, b_worst_acc, b_worst = _per_group_mean(right, groups)
    k, n = int(part["correct"].sum()), len(part)
    lo, hi = wilson_interval(k, n)
    return {"split": split, "n": n, "correct": k, "accuracy": k / n, "ci": [lo, hi], "balanced_accuracy": balanced,
            "worst_group": worst, "worst_group_accuracy": worst_acc,
            "baseline": {"predicts": str(majority), "n": n, "correct": int(right.sum()), "accuracy": float(right.mean()),
                         "ci": list(wilson_interval(int(right.sum()), n)), "balanced_accuracy": b_balanced,
                         "worst_group": b_worst, "worst_group_accuracy": b_worst_acc},
            "rule": HEADLINE_RULE}


def split_roles(splits: Iterable[str], spec: ShiftSpec | None) -> tuple[str, str] | None:
    """(ID split, OOD split): id_test when present else validation, against test; None without a shift."""
    splits = set(splits)
    if spec is not None and spec.shift_type == "none":
        return None
    ood = "test" if "test" in splits else None
    iid = "id_test" if "id_test" in splits else ("validation" if "validation" in splits else None)
    return (iid, ood) if iid and ood else None


def _row(level: str, cls: str, group: str, subset: str, correct: np.ndarray) -> dict:
    n, k = int(correct.size), int(correct.sum())
    lo, hi = wilson_interval(k, n)
    return {"level": level, "class": cls, "group": group, "subset": subset, "n": n, "correct": k,
            "accuracy": (k / n) if n else float("nan"), "ci_low": lo, "ci_high": hi}


def group_table(
    scored: pd.DataFrame,
    classes: Sequence[str],
    subset_community: Mapping[str, int] | None = None,
) -> pd.DataFrame:
    """Per-group accuracies with Wilson 95% intervals, in a fixed order (the per_group.csv rows).

    Levels: ``overall``, ``split``, ``class``, ``split_class``, ``context`` (subset ``class(context)``),
    ``community`` (community id of the class's meta-graph; from ``subset_community`` when given, else the
    table's ``community`` column, -1 meaning none).
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
        for contexts, ok, comm in zip(part["contexts"], part["correct"],
                                      part["community"] if has_comm_col else [-1] * len(part)):
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
    """Context subsets with at least ``min_n`` images, worst first (accuracy, then larger n, then name)."""
    ctx = groups[(groups["level"] == "context") & (groups["n"] >= min_n)]
    return ctx.sort_values(["accuracy", "n", "subset"], ascending=[True, False, True], kind="stable")


def context_bugs(
    scored: pd.DataFrame,
    groups: pd.DataFrame,
    min_n: int,
    alpha: float = 0.05,
) -> pd.DataFrame:
    """Test every context subset (n >= ``min_n``) against the rest of its class; BH across all tests.

    The comparison group is the class's images *not* in the subset, so the two samples are disjoint
    (the test assumes it). One-sided: is the subset's accuracy below the rest's?
    Returns the context rows with ``rest_n, rest_correct, rest_accuracy, z, p_value, q_value, bug``.
    """
    ctx = groups[(groups["level"] == "context") & (groups["n"] >= min_n)].copy()
    tests = []
    members: dict[str, tuple[np.ndarray, dict[str, list[int]]]] = {}  # class -> (correct, context -> rows): built once
    for cls in set(ctx["class"]):
        part = scored[scored["label"] == cls]
        rows: dict[str, list[int]] = {}
        for i, contexts in enumerate(part["contexts"]):
            for c in set(contexts if contexts is not None else ()):
                rows.setdefault(c, []).append(i)
        members[cls] = (part["correct"].to_numpy(), rows)
    for _, row in ctx.iterrows():
        correct, rows = members[row["class"]]
        inside = np.zeros(correct.size, dtype=bool)
        inside[rows.get(row["group"], [])] = True
        rest = correct[~inside]
        if rest.size == 0:  # the subset is the whole class: nothing to compare with
            tests.append((0, 0, np.nan, np.nan, np.nan))
            continue
        z, p = two_proportion_test(int(row["correct"]), int(row["n"]), int(rest.sum()), int(rest.size))
        tests.append((int(rest.size), int(rest.sum()), rest.mean(), z, p))
    cols = ["rest_n", "rest_correct", "rest_accuracy", "z", "p_value"]
    ctx[cols] = pd.DataFrame(tests, columns=cols, index=ctx.index) if tests else pd.DataFrame(columns=cols)
    tested = ctx["p_value"].notna()
    ctx["q_value"] = np.nan
    if tested.any():
        ctx.loc[tested, "q_value"] = benjamini_hochberg(ctx.loc[tested, "p_value"].to_numpy())
    ctx["bug"] = (ctx["q_value"] < alpha).fillna(False).astype(bool)
    return ctx


def id_vs_ood(groups: pd.DataFrame, id_split: str, ood_split: str) -> dict | None:
    """Accuracy on the in-distribution split vs the out-of-distribution split: gap and relative drop."""
    sp = groups[groups["level"] == "split"].set_index("group")
    if id_split not in sp.index or ood_split not in sp.index:
        return None
    a_id, a_ood = float(sp.at[id_split, "accuracy"]), float(sp.at[ood_split, "accuracy"])
    return {
        "id_split": id_split,
        "ood_split": ood_split,
        "id": {"n": int(sp.at[id_split, "n"]), "correct": int(sp.at[id_split, "correct"]), "accuracy": a_id,
               "ci": [float(sp.at[id_split, "ci_low"]), float(sp.at[id_split, "ci_high"])]},
        "ood": {"n": int(sp.at[ood_split, "n"]), "correct": int(sp.at[ood_split, "correct"]), "accuracy": a_ood,
                "ci": [float(sp.at[ood_split, "ci_low"]), float(sp.at[ood_split, "ci_high"])]},
        "gap": a_id - a_ood,
        "relative_drop": (a_id - a_ood) / a_id if a_id > 0 else None,
    }
