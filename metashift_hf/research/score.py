"""Score any model's predictions on a task: per split, per group, worst group, with uncertainty.

    import metashift_hf
    scores = metashift_hf.score("preds.csv", "NS/metashift-paper-subpop-cat-dog-p12")   # or a folder, a dataset
    scores = metashift_hf.score("preds.csv", metashift_hf.TaskRef("paper-subpop-cat-dog-p12", artifact="ARTIFACT"))
    print(scores.summary()); scores.to_dict()["worst_group"]

Predictions are read by :class:`metashift_hf.scoring.predictions.TaskPredictions` (a file, a DataFrame or
arrays); this module scores them. The split of every row comes from the task, never from the file.
Groups are the task's own (``class(context-group)``); contexts count once per context subset an image
belongs to, so context rows overlap.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np
import pandas as pd

from metashift_hf.tasks.spec import ShiftSpec
from metashift_hf.tasks.splits import ID_OOD_RULE, chosen_splits, headline_split, split_roles

from ..core import __version__
from ..core.errors import InputFormatError, MissingImagesError
from ..core.fsutil import atomic_dir
from ..core.names import markdown_safe, parse_subset_name, terminal_safe
from ..hub.task_data import TaskRef
from ..hub.task_open import open_task
from ..scoring.groups import WORST_RULE, GroupScore, group_scores, worst
from ..scoring.per_group import per_group_frame, score_row, write_per_group
from ..scoring.predictions import PredictionKind, TaskPredictions
from ..scoring.summary import (
    ADJUSTED_RULE,
    CHANCE_RULE,
    GROUP_MEAN_RULE,
    Chance,
    adjusted_average,
    group_mean_accuracy,
    split_summary,
)


Predictions = TaskPredictions  # the name the docs used before issue 25 (the same class)

if TYPE_CHECKING:
    from metashift_hf.tasks.plan import TaskPlan

ECE_BINS = 15  # equal-width confidence bins, as in Guo et al. (2017)
COUNTING = (
    "each image counts once in its split, group and class; it counts once in every context subset "
    "it belongs to (context rows overlap)"
)
SCORES_KIND = "scores"  # the marker kind of a score --out folder (core.fsutil)


@dataclass(frozen=True)
class SplitScores:
    """Every figure for one split (or for all scored rows together, split ``"overall"``)."""

    split: str
    n: int
    correct: int
    average: float
    ci_low: float
    ci_high: float
    worst_group: GroupScore
    worst_class: GroupScore
    adjusted_average: float | None  # ours: train-share weighted (ADJUSTED_RULE)
    subpopbench_adjusted_accuracy: float | None  # SubpopBench's: unweighted group mean (GROUP_MEAN_RULE)
    balanced_accuracy: float
    macro_f1: float
    ece: float | None
    chance: Chance  # the split's majority-class constant predictor (scoring.summary.CHANCE_RULE)
    per_group: tuple[GroupScore, ...]
    per_class: tuple[GroupScore, ...]
    per_context: tuple[GroupScore, ...]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["worst_group"] = asdict(self.worst_group)
        d["worst_class"] = asdict(self.worst_class)
        d["chance"] = asdict(self.chance)
        return d


@dataclass(frozen=True)
class Scores:
    """The scores of one predictions table on one task; ``to_dict()`` is scores.json."""

    task_id: str
    classes: tuple[str, ...]
    headline_split: str
    prediction_kind: PredictionKind
    splits: dict[str, SplitScores]
    overall: SplitScores
    id_split: str | None
    ood_split: str | None
    task_spec_hash: str
    task_origin: Mapping[str, Any] | None = None  # where the task came from (hub/task_data.TaskProvenance)

    @property
    def headline(self) -> SplitScores:
        return self.splits[self.headline_split]

    @property
    def id(self) -> float | None:
        return self.splits[self.id_split].average if self.id_split else None

    @property
    def ood(self) -> float | None:
        return self.splits[self.ood_split].average if self.ood_split else None

    @property
    def drop_pct(self) -> float | None:
        """Drop% = 100 (ID - OOD) / ID; None without both splits or when ID accuracy is 0."""
        if self.id is None or self.ood is None or self.id == 0:
            return None
        return 100.0 * (self.id - self.ood) / self.id

    def to_dict(self) -> dict[str, Any]:
        h = self.headline
        return {
            "average": h.average,
            "worst_group": asdict(h.worst_group),
            "worst_class": asdict(h.worst_class),
            "adjusted_average": h.adjusted_average,
            "subpopbench_adjusted_accuracy": h.subpopbench_adjusted_accuracy,
            "per_group": [asdict(g) for s in self.splits.values() for g in s.per_group],
            "id": self.id,
            "ood": self.ood,
            "drop_pct": self.drop_pct,
            "gap": None if self.id is None or self.ood is None else self.id - self.ood,
            "id_split": self.id_split,
            "ood_split": self.ood_split,
            "headline_split": self.headline_split,
            "task_id": self.task_id,
            "task_spec_hash": self.task_spec_hash,
            "task_origin": None if self.task_origin is None else dict(self.task_origin),
            "classes": list(self.classes),
            "prediction_kind": self.prediction_kind,
            "balanced_accuracy": h.balanced_accuracy,
            "chance": asdict(h.chance),
            "macro_f1": h.macro_f1,
            "ece": h.ece,
            "splits": {name: s.to_dict() for name, s in self.splits.items()},
            "overall": self.overall.to_dict(),
            "notes": {
                "adjusted_average": ADJUSTED_RULE,
                "subpopbench_adjusted_accuracy": GROUP_MEAN_RULE,
                "counting": COUNTING,
                "ece": f"{ECE_BINS} equal-width bins of top-1 confidence"
                + ("; probabilities from softmax of the logits" if self.prediction_kind == "logits" else ""),
                "intervals": "Wilson score 95% (scipy.stats.binomtest(...).proportion_ci('wilson'))",
                "id_ood": f"{ID_OOD_RULE}; drop_pct = 100 (ID - OOD) / ID",
                "worst": WORST_RULE,
                "chance": CHANCE_RULE,
            },
            "package_version": __version__,
        }

    def __str__(self) -> str:
        return self.summary()

    def summary(self) -> str:
        """A few lines for the terminal: the headline (HEADLINE_RULE: the headline split's balanced accuracy, worst
        group), the chance baseline beside it, then the other figures and ID/OOD."""
        h, c = self.headline, self.headline.chance
        lines = [
            f"{terminal_safe(self.task_id)}: headline ({self.headline_split}, n={h.n}): balanced accuracy "
            f"{_pct(h.balanced_accuracy)}, worst group {h.worst_group.group} {_pct(h.worst_group.accuracy)} "
            f"[{_pct(h.worst_group.ci_low)}, {_pct(h.worst_group.ci_high)}] n={h.worst_group.n}",
            chance_line(c),
            f"average {_pct(h.average)} [{_pct(h.ci_low)}, {_pct(h.ci_high)}], worst class {h.worst_class.group} "
            f"{_pct(h.worst_class.accuracy)}, adjusted (ours, train-share weighted) {_pct(h.adjusted_average)}, "
            f"SubpopBench adjusted_accuracy (unweighted group mean) {_pct(h.subpopbench_adjusted_accuracy)}, "
            f"macro-F1 {h.macro_f1:.3f}" + (f", ECE {h.ece:.3f}" if h.ece is not None else ""),
        ]
        if self.id is not None and self.ood is not None:
            drop = "n/a" if self.drop_pct is None else f"{self.drop_pct:.1f}%"
            lines.append(
                f"ID ({self.id_split}) {_pct(self.id)} vs OOD ({self.ood_split}) {_pct(self.ood)}: "
                f"gap {100 * (self.id - self.ood):.1f} points, Drop% {drop}"
            )
        return "\n".join(lines)

    def markdown(self) -> str:
        """scores.md: headline, per-split table, per-group table with intervals, classes, worst contexts."""
        out = [
            f"# Scores: {markdown_safe(self.task_id)}",
            "",
            "  \n".join(markdown_safe(line) for line in self.summary().split("\n")),
            "",
            "| split | n | balanced | chance balanced | average | worst group | worst class | adjusted (ours, "
            "train-share weighted) | SubpopBench adjusted_accuracy (unweighted group mean) | macro-F1 | ECE |",
            "|---|---:|---:|---:|---:|---|---|---:|---:|---:|---:|",
        ]
        for s in [*self.splits.values(), self.overall]:
            out.append(
                f"| {s.split} | {s.n} | {_pct(s.balanced_accuracy)} | {_pct(s.chance.balanced_accuracy)} | "
                f"{_pct(s.average)} | {s.worst_group.group} {_pct(s.worst_group.accuracy)} | "
                f"{s.worst_class.group} {_pct(s.worst_class.accuracy)} | "
                f"{_pct(s.adjusted_average)} | {_pct(s.subpopbench_adjusted_accuracy)} | {s.macro_f1:.3f} | "
                f"{'-' if s.ece is None else f'{s.ece:.3f}'} |"
            )
        for title, rows in (
            ("Groups", [g for s in self.splits.values() for g in s.per_group]),
            ("Classes", [g for s in self.splits.values() for g in s.per_class]),
        ):
            out += [
                "",
                f"## {title}",
                "",
                "| split | name | n | correct | accuracy | 95% CI |",
                "|---|---|---:|---:|---:|---|",
            ]
            out += [_md_row(g) for g in rows]
        worst = sorted((g for g in self.headline.per_context if g.n >= 10), key=lambda g: (g.accuracy, -g.n, g.group))[
            :10
        ]
        out += [
            "",
            f"## Worst context subsets in {self.headline_split} (n >= 10)",
            "",
            "| split | subset | n | correct | accuracy | 95% CI |",
            "|---|---|---:|---:|---:|---|",
        ]
        out += [_md_row(g) for g in worst]
        out += ["", "Notes: " + "; ".join(f"{k}: {v}" for k, v in self.to_dict()["notes"].items()), ""]
        return "\n".join(out)

    def write(self, out: "str | os.PathLike", *, force: bool = False, inputs: tuple = ()) -> Path:
        """Write scores.json, scores.md and per_group.csv into ``out`` (new, empty, or earlier scores with ``force``)."""
        with atomic_dir(out, kind=SCORES_KIND, force=force, inputs=inputs) as tmp:
            self.write_into(tmp)
        return Path(out)

    def per_group_frame(self) -> pd.DataFrame:
        """per_group.csv (schema: :mod:`metashift_hf.scoring.per_group`): per split, then over all scored splits
        (``overall``), the split itself (level ``all``), its groups, classes and context subsets."""
        rows = []
        for s in [*self.splits.values(), self.overall]:
            rows.append(
                score_row("all", "", GroupScore(s.split, s.split, s.n, s.correct, s.average, s.ci_low, s.ci_high))
            )
            rows += [score_row("group", "", g) for g in s.per_group]
            rows += [score_row("class", g.group, g) for g in s.per_class]
            rows += [score_row("context", parse_subset_name(g.group)[0], g) for g in s.per_context]
        return per_group_frame(rows)

    def write_into(self, folder: "str | os.PathLike") -> None:
        """Write scores.json, scores.md and per_group.csv into an existing folder (inside a larger atomic write)."""
        folder = Path(folder)
        (folder / "scores.json").write_text(json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n")
        (folder / "scores.md").write_text(self.markdown())
        write_per_group(self.per_group_frame(), folder / "per_group.csv")


def chance_line(c: Chance) -> str:
    """The chance baseline (scoring.summary's :class:`Chance`: always the split's majority class) in one line, as
    ``score``, the Evaluator and ``train`` print it."""
    return (
        f"chance (always {terminal_safe(c.predicts)}, the split's majority class): balanced accuracy "
        f"{_pct(c.balanced_accuracy)}, worst group {_pct(c.worst_group.accuracy)}, accuracy {_pct(c.whole.accuracy)}"
    )


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _md_row(g: GroupScore) -> str:
    return f"| {markdown_safe(g.split)} | {markdown_safe(g.group)} | {g.n} | {g.correct} | {_pct(g.accuracy)} | [{_pct(g.ci_low)}, {_pct(g.ci_high)}] |"


def task_spec_hash(spec: ShiftSpec) -> str:
    """The task's identity: its unpublished spec (the same from the artifact, a folder or the Hub)."""
    import hashlib

    return hashlib.sha256(spec.unpublished().to_json(compact=True).encode()).hexdigest()


def _split_scores(
    split: str, rows: pd.DataFrame, classes: Sequence[str], train_share: dict[str, float], probs: np.ndarray | None
) -> SplitScores:
    from sklearn.metrics import f1_score

    correct = rows["correct"].to_numpy()
    head = split_summary(split, rows["label"].to_numpy(), correct, rows["group"].to_numpy(), classes)
    # an image counts once in every context subset it belongs to: one (subset, correct) pair per membership
    pairs = [
        (f"{label}({ctx})", ok)
        for label, ctxs, ok in zip(rows["label"], rows["contexts"], correct)
        for ctx in sorted(set(ctxs))
    ]
    contexts = group_scores([p[0] for p in pairs], np.array([p[1] for p in pairs], dtype=bool), split)
    y, p = rows["y"].to_numpy(), rows["pred"].to_numpy()
    whole = head.whole
    return SplitScores(
        split=split,
        n=whole.n,
        correct=whole.correct,
        average=whole.accuracy,
        ci_low=whole.ci_low,
        ci_high=whole.ci_high,
        worst_group=head.worst_group,
        worst_class=worst(head.per_class),
        adjusted_average=adjusted_average(head.per_group, train_share),
        subpopbench_adjusted_accuracy=group_mean_accuracy(head.per_group),
        balanced_accuracy=head.balanced_accuracy,
        macro_f1=float(f1_score(y, p, labels=list(range(len(classes))), average="macro", zero_division=0)),
        ece=None if probs is None else expected_calibration_error(probs, y),
        chance=head.chance,
        per_group=head.per_group,
        per_class=head.per_class,
        per_context=contexts,
    )


def expected_calibration_error(probs: np.ndarray, y: np.ndarray, bins: int = ECE_BINS) -> float:
    """Top-1 ECE: sum over equal-width confidence bins of |accuracy - confidence| weighted by bin size."""
    conf = probs.max(axis=1)
    hit = probs.argmax(axis=1) == y
    # bin b holds confidences in (b/B, (b+1)/B]; confidence 0 cannot happen for a top-1 probability
    which = np.clip(np.ceil(conf * bins).astype(int) - 1, 0, bins - 1)
    ece = 0.0
    for b in range(bins):
        sel = which == b
        if sel.any():
            ece += sel.mean() * abs(hit[sel].mean() - conf[sel].mean())
    return float(ece)


def score(
    predictions: "str | os.PathLike | pd.DataFrame | Mapping[str, Any] | TaskPredictions",
    task: "TaskRef | Any",
    *,
    splits: Sequence[str] | None = None,
) -> Scores:
    """Score predictions on a task's splits (every split by default; ``splits`` restricts them).

    ``task``: a loaded ``Dataset``/``DatasetDict``, an exported folder, a Hub dataset repo id, or a
    :class:`~metashift_hf.hub.task_data.TaskRef` (a task id planned on its ``artifact`` with ``seed`` and
    ``options``; a repo's ``config``/``revision``); see :func:`metashift_hf.hub.task_open.open_task`. ``predictions``: a .csv/.parquet
    path, a DataFrame or a dict of columns (``image_id`` plus ``prediction`` or ``prob_<class>``).
    Every image of the scored splits needs exactly one prediction; predictions for images outside
    the task are refused (a wrong task or seed would otherwise pass unnoticed).
    """
    data = open_task(task)
    return replace(score_plan(predictions, data.plan, splits=splits), task_origin=data.origin())


def score_plan(
    predictions: "str | os.PathLike | pd.DataFrame | Mapping[str, Any] | TaskPredictions",
    tp: "TaskPlan",
    *,
    splits: Sequence[str] | None = None,
) -> Scores:
    """:func:`score` on an already resolved task plan."""
    classes = tuple(tp.classes)
    if isinstance(predictions, Mapping):  # a dict of columns (arrays or lists), as a training loop has them
        predictions = pd.DataFrame(dict(predictions))
    preds = predictions if isinstance(predictions, TaskPredictions) else TaskPredictions.read(predictions, classes)
    if preds.classes != classes:
        raise InputFormatError(
            f"predictions are for classes {list(preds.classes)}, the task has {list(classes)}",
            "predict the task's classes in its order",
        )
    table = tp.table()
    chosen = chosen_splits(splits, set(table["split"]), tp.task_id)
    pos = {iid: i for i, iid in enumerate(preds.image_ids)}
    outside = sorted(set(pos) - set(table["image_id"]))
    if outside:
        raise MissingImagesError(
            f"{preds.source} has predictions for {len(outside)} images that are not in task "
            f"{tp.task_id} (e.g. {', '.join(outside[:5])})",
            "score against the task (and seed, --set options) the predictions were made for",
            image_ids=outside,
        )
    scored = table[table["split"].isin(chosen)].reset_index(drop=True)
    missing = [i for i in scored["image_id"] if i not in pos]
    if missing:
        raise MissingImagesError(
            f"{preds.source} has no prediction for {len(missing)} of the {len(scored)} images of "
            f"split(s) {', '.join(chosen)} (e.g. {', '.join(missing[:5])})",
            "predict every image of the scored splits, or restrict them (splits= / --splits test)",
            image_ids=missing,
        )
    idx = np.fromiter((pos[i] for i in scored["image_id"]), dtype=np.int64, count=len(scored))
    label_index = {c: i for i, c in enumerate(classes)}
    scored["y"] = [label_index[c] for c in scored["label"]]
    scored["pred"] = preds.predicted[idx]
    scored["correct"] = scored["y"] == scored["pred"]
    probs = None if preds.probabilities is None else preds.probabilities[idx]
    train = table[table["split"] == "train"]
    train_share = train["group"].value_counts(normalize=True).to_dict() if len(train) else {}
    per_split = {}
    for s in chosen:
        sel = (scored["split"] == s).to_numpy()
        per_split[s] = _split_scores(s, scored[sel], classes, train_share, None if probs is None else probs[sel])
    overall = _split_scores("overall", scored, classes, train_share, probs)
    roles = split_roles(chosen, tp.spec)
    headline = headline_split(chosen) or chosen[-1]  # only train scored: train
    return Scores(
        task_id=tp.task_id,
        classes=classes,
        headline_split=headline,
        prediction_kind=preds.kind,
        splits=per_split,
        overall=overall,
        id_split=roles[0] if roles else None,
        ood_split=roles[1] if roles else None,
        task_spec_hash=task_spec_hash(tp.spec),
    )


__all__ = [
    "chance_line",
    "Predictions",
    "TaskPredictions",
    "GroupScore",
    "SplitScores",
    "Scores",
    "score",
    "expected_calibration_error",
]
