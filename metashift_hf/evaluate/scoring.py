"""Which ImageNet-head predictions are correct for a task's classes, and the evaluation headline.

The group scores, intervals and the context-bug test come from the scoring core (:mod:`metashift_hf.scoring`).

Counting rule (stated in every report): an image counts once overall, once per split and once for
its class; it counts once in *every* context subset it belongs to, so context rows overlap and do
not sum to the class row. Communities are unions of context subsets, again once per image.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from metashift_hf.tasks.splits import headline_split

from ..core.errors import EmptyResultError, InputFormatError, UnknownNameError
from ..scoring.summary import HEADLINE_RULE, split_summary
from .predictions import HeadOutputs


MODES = ("hierarchy", "restricted")
COUNTING_RULE = (
    "each image counts once overall, once in its split and once in its class; it counts once in every "
    "context subset it belongs to (context rows overlap) and once in every community any of those subsets is in"
)
NO_CLASS = "(other)"  # hierarchy mode: top-1 leaf covered by none of the task's classes


def score_images(
    table: pd.DataFrame,
    predictions: HeadOutputs,
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
        raise UnknownNameError(
            f"labels {unknown[:5]} are not classes of the task {classes}", "pass the task's class list"
        )
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


def headline_metrics(scored: pd.DataFrame, classes: Sequence[str]) -> dict | None:
    """Balanced accuracy, worst group and the majority-class baseline on :func:`headline_split` (HEADLINE_RULE),
    from the one split summary (:func:`metashift_hf.scoring.summary.split_summary`).

    ``scored`` is :func:`score_images`' table (``split``, ``label``, ``correct``, optional ``group``).
    An image of two classes (collections) counts once per class, as in the class rows.
    """
    split = headline_split(set(scored["split"]))
    if split is None:
        return None
    part = scored[scored["split"] == split]
    groups = part["group"] if "group" in part and part["group"].notna().all() else part["label"]
    s = split_summary(split, part["label"].to_numpy(), part["correct"].to_numpy(), groups.to_numpy(), classes)
    w, b = s.whole, s.chance
    return {
        "split": split,
        "n": w.n,
        "correct": w.correct,
        "accuracy": w.accuracy,
        "ci": [w.ci_low, w.ci_high],
        "balanced_accuracy": s.balanced_accuracy,
        "worst_group": s.worst_group.group,
        "worst_group_accuracy": s.worst_group.accuracy,
        "baseline": {
            "predicts": b.predicts,
            "n": b.whole.n,
            "correct": b.whole.correct,
            "accuracy": b.whole.accuracy,
            "ci": [b.whole.ci_low, b.whole.ci_high],
            "balanced_accuracy": b.balanced_accuracy,
            "worst_group": b.worst_group.group,
            "worst_group_accuracy": b.worst_group.accuracy,
        },
        "rule": HEADLINE_RULE,
    }
