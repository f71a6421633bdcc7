"""Score any model's predictions on a task: per split, per group, worst group, with uncertainty.

    import metashift_hf
    scores = metashift_hf.score("preds.csv", "paper-subpop-cat-dog-p12", artifact="ARTIFACT")
    print(scores.summary()); scores.to_dict()["worst_group"]

A predictions table has ``image_id`` and either ``prediction`` (class name or class id in the task's
class order) or one column per class, ``prob_<class>`` (probabilities) or ``logit_<class>`` (turned
into probabilities by softmax). The split of every row comes from the task, never from the file.
Groups are the task's own (``class(context-group)``); contexts count once per context subset an image
belongs to, so context rows overlap.
"""
from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Mapping, Sequence

import numpy as np
import pandas as pd

from metashift_hf.builders.spec import ShiftSpec
from ..core import __version__
from ..core import options as opt
from ..core.errors import InputFormatError, MissingImagesError, UnknownNameError, did_you_mean
from ..core.fsutil import atomic_dir
from ..core.names import markdown_safe, terminal_safe
from ..evaluate.scoring import chosen_splits, split_roles
from ..hub.task_source import open_task

if TYPE_CHECKING:
    from metashift_hf.builders.plan import TaskPlan

PredictionKind = Literal["labels", "probabilities", "logits"]
ECE_BINS = 15  # equal-width confidence bins, as in Guo et al. (2017)
PROB_TOLERANCE = 1e-3  # probabilities must sum to 1 within this per row
ADJUSTED_RULE = ("adjusted average: each group's accuracy weighted by that group's share of the train split "
                 "(groups absent from train get weight 0; null when the split shares no group with train)")
COUNTING = ("each image counts once in its split, group and class; it counts once in every context subset "
            "it belongs to (context rows overlap)")
PREDICTIONS_FIX = ("write a .csv or .parquet with a string column image_id and either a column prediction "
                   "(class name or class id) or one column per class named prob_<class> or logit_<class>")

SCORES_KIND = "scores"  # the marker kind of a score --out folder (core.fsutil)
PredictionColumns = Literal["prediction", "probabilities"]
USE_CHOICES: tuple[str, ...] = ("prediction", "probabilities")
LABEL_RULE = ("prediction values are read as text and matched to the task's class names first; they are read "
              "as class ids (0..k-1 in the task's class order) only when no value is a class name and every "
              "value is an integer")
BOTH_RULE = ("with both a prediction column and prob_/logit_ columns, the predicted class must have the row's "
             "highest score on every row, unless --use prediction or --use probabilities picks one")


@dataclass(frozen=True)
class Predictions:
    """One row per image: the predicted class index (task order) and, when given, class probabilities."""

    image_ids: tuple[str, ...]
    predicted: np.ndarray  # int64 (n,) index into classes
    probabilities: np.ndarray | None  # float64 (n, k), rows sum to 1
    kind: PredictionKind
    classes: tuple[str, ...]
    source: str = "predictions"

    @classmethod
    def read(cls, source: "str | os.PathLike | pd.DataFrame", classes: Sequence[str], *,
             use: PredictionColumns | None = None) -> "Predictions":
        """Read a csv/parquet path or a DataFrame against the task's ``classes`` (refuses unknown classes).

        ``prediction`` is read by :data:`LABEL_RULE`. With both ``prediction`` and ``prob_``/``logit_``
        columns, ``use`` picks one (``"prediction"`` or ``"probabilities"``); without it they must agree
        on every row (the predicted class has the row's highest probability) — see :data:`BOTH_RULE`.
        """
        if use not in (None, *USE_CHOICES):
            raise InputFormatError(f"use={use!r} is not one of {', '.join(USE_CHOICES)}",
                                   "pass use='prediction' or use='probabilities' (command line: --use)")
        if not isinstance(source, (str, os.PathLike, pd.DataFrame)):
            raise InputFormatError(f"cannot read predictions from a {type(source).__name__}",
                                   "pass a .csv/.parquet path, a pandas DataFrame or a dict of columns")
        name = "predictions" if isinstance(source, pd.DataFrame) else str(source)
        df = source if isinstance(source, pd.DataFrame) else _read_table(Path(source))
        if "image_id" not in df.columns:
            raise InputFormatError(f"{name} has no image_id column (columns: {list(df.columns)[:8]})", PREDICTIONS_FIX)
        ids = tuple(str(i) for i in df["image_id"])
        dup = sorted(i for i, k in Counter(ids).items() if k > 1)
        if dup:
            raise InputFormatError(f"{name} repeats image_id {dup[:5]} ({len(dup)} ids more than once)",
                                   "keep exactly one row per image")
        classes = tuple(classes)
        prob_cols = [c for c in df.columns if isinstance(c, str) and c.startswith(("prob_", "logit_"))]
        has_labels = "prediction" in df.columns
        if use == "prediction" and not has_labels or use == "probabilities" and not prob_cols:
            raise InputFormatError(f"{name} has no {'prediction' if use == 'prediction' else 'prob_/logit_'} column(s) "
                                   f"to use (columns: {list(df.columns)[:8]})", "drop --use (use=), or name a column kind "
                                   "the file has")
        if not prob_cols and not has_labels:
            raise InputFormatError(f"{name} has neither a prediction column nor prob_<class>/logit_<class> columns",
                                   PREDICTIONS_FIX)
        labels = None
        if has_labels and use != "probabilities":
            labels = cls(ids, _label_indices(df["prediction"], classes, name), None, "labels", classes, name)
            if not prob_cols or use == "prediction":
                return labels
        scored = cls._from_scores(df, ids, classes, prob_cols, name)
        if labels is None:
            return scored
        assert scored.probabilities is not None
        rows = np.arange(len(ids))
        top = scored.probabilities.max(axis=1)
        differ = np.flatnonzero(scored.probabilities[rows, labels.predicted] < top)  # ties count as agreeing
        if differ.size:
            raise InputFormatError(
                f"{name}: the prediction column and the {scored.kind} columns disagree on {differ.size} of {len(ids)} "
                f"rows (e.g. image_id {ids[differ[0]]}: prediction {classes[labels.predicted[differ[0]]]!r}, highest "
                f"{scored.kind} {classes[scored.predicted[differ[0]]]!r})",
                "choose one: --use prediction or --use probabilities (Python: Predictions.read(..., use=...)), "
                "or drop one of the columns")
        # they agree: keep the probabilities (for ECE) and the explicit prediction (it settles ties)
        return cls(ids, labels.predicted, scored.probabilities, scored.kind, classes, name)

    @classmethod
    def _from_scores(cls, df: pd.DataFrame, ids, classes, cols: list[str], name: str) -> "Predictions":
        prefixes = {c.split("_", 1)[0] for c in cols}
        if len(prefixes) > 1:
            raise InputFormatError(f"{name} mixes prob_ and logit_ columns", "give one kind: prob_<class> or logit_<class>")
        prefix = prefixes.pop()
        named = [c.split("_", 1)[1] for c in cols]
        unknown = [c for c in named if c not in classes]
        if unknown:
            raise UnknownNameError(f"{name} has columns for classes {unknown[:5]} that are not in the task "
                                   f"(classes: {list(classes)}){did_you_mean(unknown[0], classes)}",
                                   f"name one column per task class: {', '.join(f'{prefix}_{c}' for c in classes)}")
        missing = [c for c in classes if c not in named]
        if missing:
            raise InputFormatError(f"{name} lacks {prefix}_ columns for classes {missing}",
                                   "give one column per task class")
        try:
            scores = df[[f"{prefix}_{c}" for c in classes]].to_numpy(dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise InputFormatError(f"{name}: {prefix}_ columns are not numbers ({exc})", PREDICTIONS_FIX) from exc
        if not np.isfinite(scores).all():
            raise InputFormatError(f"{name} has NaN or infinite {prefix}_ values", "write finite numbers for every image")
        if prefix == "prob":
            bad = (scores < 0).any(axis=1) | (scores > 1).any(axis=1) | (np.abs(scores.sum(axis=1) - 1) > PROB_TOLERANCE)
            if bad.any():
                raise InputFormatError(
                    f"{name}: prob_ columns are not probabilities for image_id {[ids[i] for i in np.flatnonzero(bad)[:5]]} "
                    f"(each row must lie in [0, 1] and sum to 1 within {PROB_TOLERANCE})",
                    "write softmax outputs as prob_<class>, or raw scores as logit_<class>")
            probs, kind = scores / scores.sum(axis=1, keepdims=True), "probabilities"
        else:
            shifted = np.exp(scores - scores.max(axis=1, keepdims=True))
            probs, kind = shifted / shifted.sum(axis=1, keepdims=True), "logits"
        # argmax takes the first maximum: ties go to the task's class order
        return cls(ids, probs.argmax(axis=1).astype(np.int64), probs, kind, classes, name)


def _read_table(path: Path) -> pd.DataFrame:
    if not path.is_file():
        raise InputFormatError(f"predictions file {path} does not exist", PREDICTIONS_FIX)
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".parquet", ".pq"):
        raise InputFormatError(f"predictions file {path} is neither .csv nor .parquet", PREDICTIONS_FIX)
    try:
        if suffix == ".csv":
            # labels stay text ("1" is a class name if the task has one, see LABEL_RULE); no "NA"/"None" -> NaN
            return pd.read_csv(path, dtype={"image_id": str, "prediction": str}, keep_default_na=False)
        return pd.read_parquet(path)
    except Exception as exc:  # pandas/pyarrow parse errors vary by engine
        raise InputFormatError(f"cannot read predictions file {path}: {exc}", PREDICTIONS_FIX) from exc


def _label_text(value: Any) -> str | None:
    """A label as text, the same from CSV (strings) and parquet (numbers): 1 -> "1", 1.0 -> "1.0"; None when missing."""
    if isinstance(value, str):
        return value
    if value is None or (pd.api.types.is_scalar(value) and pd.isna(value)):
        return None
    if isinstance(value, (bool, np.bool_)):
        return str(value)
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    return str(value)


def _as_index(label: str, k: int) -> int | None:
    """The class id a label spells (an integer, also written "2.0"), when in 0..k-1."""
    try:
        x = float(label)
    except ValueError:
        return None
    return int(x) if x.is_integer() and 0 <= x < k else None


def _label_indices(column: pd.Series, classes: tuple[str, ...], name: str) -> np.ndarray:
    """Labels -> int64 class indices by :data:`LABEL_RULE`; anything else is refused."""
    index = {c: i for i, c in enumerate(classes)}
    labels = [_label_text(v) for v in column]
    missing = [i for i, t in enumerate(labels) if t is None or t == ""]
    if missing:
        raise InputFormatError(f"{name}: {len(missing)} rows have no prediction (first at row {missing[0] + 1})",
                               "predict a class for every image")
    if any(t in index for t in labels):  # a name column: every value must be a class name
        bad = sorted({t for t in labels if t not in index})
        if bad:
            ids = [t for t in bad if _as_index(t, len(classes)) is not None]
            raise UnknownNameError(
                f"{name}: predictions {bad[:5]} are not classes of the task {list(classes)}"
                f"{did_you_mean(bad[0], classes)}" + (f"; the column holds class names, so {ids[:3]} are not read as "
                                                       "class ids" if ids else ""),
                f"predict class names ({', '.join(classes)}) throughout, or class ids 0..{len(classes) - 1} throughout "
                f"(rule: {LABEL_RULE})")
        return np.fromiter((index[t] for t in labels), dtype=np.int64, count=len(labels))
    ids = [_as_index(t, len(classes)) for t in labels]
    bad = sorted({t for t, i in zip(labels, ids) if i is None})
    if bad:
        raise UnknownNameError(f"{name}: predictions {bad[:5]} are neither classes of the task {list(classes)} nor "
                               f"class ids 0..{len(classes) - 1}{did_you_mean(bad[0], classes)}",
                               f"predict a class name ({', '.join(classes)}) or its id 0..{len(classes) - 1}")
    return np.asarray(ids, dtype=np.int64)


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
        from scipy.stats import binomtest

        n, k = int(correct.size), int(correct.sum())
        ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
        return cls(group, split, n, k, k / n, float(ci.low), float(ci.high))


@dataclass(frozen=True)
class SplitScores:
    """Every figure for one split (or for all scored rows together, split ``"overall"``)."""

    split: str
    n: int
    average: float
    worst_group: GroupScore
    worst_class: GroupScore
    adjusted_average: float | None
    balanced_accuracy: float
    macro_f1: float
    ece: float | None
    per_group: tuple[GroupScore, ...]
    per_class: tuple[GroupScore, ...]
    per_context: tuple[GroupScore, ...]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["worst_group"] = asdict(self.worst_group)
        d["worst_class"] = asdict(self.worst_class)
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
            "classes": list(self.classes),
            "prediction_kind": self.prediction_kind,
            "balanced_accuracy": h.balanced_accuracy,
            "macro_f1": h.macro_f1,
            "ece": h.ece,
            "splits": {name: s.to_dict() for name, s in self.splits.items()},
            "overall": self.overall.to_dict(),
            "notes": {"adjusted_average": ADJUSTED_RULE, "counting": COUNTING,
                      "ece": f"{ECE_BINS} equal-width bins of top-1 confidence" + (
                          "; probabilities from softmax of the logits" if self.prediction_kind == "logits" else ""),
                      "intervals": "Wilson score 95% (scipy.stats.binomtest(...).proportion_ci('wilson'))",
                      "id_ood": "ID = id_test when the task has it, else validation; OOD = test; "
                                "drop_pct = 100 (ID - OOD) / ID"},
            "package_version": __version__,
        }

    def __str__(self) -> str:
        return self.summary()

    def summary(self) -> str:
        """A few lines for the terminal: headline split, worst group, worst class, ID/OOD."""
        h = self.headline
        lines = [f"{terminal_safe(self.task_id)}: {self.headline_split} average {_pct(h.average)} (n={h.n}), worst group "
                 f"{h.worst_group.group} {_pct(h.worst_group.accuracy)} [{_pct(h.worst_group.ci_low)}, "
                 f"{_pct(h.worst_group.ci_high)}] n={h.worst_group.n}, worst class {h.worst_class.group} "
                 f"{_pct(h.worst_class.accuracy)}, adjusted {_pct(h.adjusted_average)}, "
                 f"balanced {_pct(h.balanced_accuracy)}, macro-F1 {h.macro_f1:.3f}"
                 + (f", ECE {h.ece:.3f}" if h.ece is not None else "")]
        if self.id is not None and self.ood is not None:
            drop = "n/a" if self.drop_pct is None else f"{self.drop_pct:.1f}%"
            lines.append(f"ID ({self.id_split}) {_pct(self.id)} vs OOD ({self.ood_split}) {_pct(self.ood)}: "
                         f"gap {100 * (self.id - self.ood):.1f} points, Drop% {drop}")
        return "\n".join(lines)

    def markdown(self) -> str:
        """scores.md: headline, per-split table, per-group table with intervals, classes, worst contexts."""
        out = [f"# Scores: {markdown_safe(self.task_id)}", "", "  \n".join(markdown_safe(line) for line in self.summary().split("\n")), "",
               "| split | n | average | worst group | worst class | adjusted | balanced | macro-F1 | ECE |",
               "|---|---:|---:|---|---|---:|---:|---:|---:|"]
        for s in [*self.splits.values(), self.overall]:
            out.append(f"| {s.split} | {s.n} | {_pct(s.average)} | {s.worst_group.group} {_pct(s.worst_group.accuracy)} | "
                       f"{s.worst_class.group} {_pct(s.worst_class.accuracy)} | "
                       f"{_pct(s.adjusted_average)} | {_pct(s.balanced_accuracy)} | {s.macro_f1:.3f} | "
                       f"{'-' if s.ece is None else f'{s.ece:.3f}'} |")
        for title, rows in (("Groups", [g for s in self.splits.values() for g in s.per_group]),
                            ("Classes", [g for s in self.splits.values() for g in s.per_class])):
            out += ["", f"## {title}", "", "| split | name | n | correct | accuracy | 95% CI |", "|---|---|---:|---:|---:|---|"]
            out += [_md_row(g) for g in rows]
        worst = sorted((g for g in self.headline.per_context if g.n >= 10), key=lambda g: (g.accuracy, -g.n, g.group))[:10]
        out += ["", f"## Worst context subsets in {self.headline_split} (n >= 10)", "",
                "| split | subset | n | correct | accuracy | 95% CI |", "|---|---|---:|---:|---:|---|"]
        out += [_md_row(g) for g in worst]
        out += ["", "Notes: " + "; ".join(f"{k}: {v}" for k, v in self.to_dict()["notes"].items()), ""]
        return "\n".join(out)

    def write(self, out: "str | os.PathLike", *, force: bool = False, inputs: tuple = ()) -> Path:
        """Write scores.json, scores.md and per_group.csv into ``out`` (new, empty, or earlier scores with ``force``)."""
        with atomic_dir(out, kind=SCORES_KIND, force=force, inputs=inputs) as tmp:
            self.write_into(tmp)
        return Path(out)

    def per_group_frame(self) -> pd.DataFrame:
        """per_group.csv: one row per (split, level, name) for levels group, class and context, with intervals."""
        rows = [{"split": g.split, "level": level, "name": g.group, "n": g.n, "correct": g.correct,
                 "accuracy": g.accuracy, "ci_low": g.ci_low, "ci_high": g.ci_high}
                for s in [*self.splits.values(), self.overall]
                for level, scores in (("group", s.per_group), ("class", s.per_class), ("context", s.per_context))
                for g in scores]
        return pd.DataFrame(rows, columns=["split", "level", "name", "n", "correct", "accuracy", "ci_low", "ci_high"])

    def write_into(self, folder: "str | os.PathLike") -> None:
        """Write scores.json, scores.md and per_group.csv into an existing folder (inside a larger atomic write)."""
        folder = Path(folder)
        (folder / "scores.json").write_text(json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n")
        (folder / "scores.md").write_text(self.markdown())
        self.per_group_frame().to_csv(folder / "per_group.csv", index=False)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _md_row(g: GroupScore) -> str:
    return f"| {markdown_safe(g.split)} | {markdown_safe(g.group)} | {g.n} | {g.correct} | {_pct(g.accuracy)} | [{_pct(g.ci_low)}, {_pct(g.ci_high)}] |"


def task_spec_hash(spec: ShiftSpec) -> str:
    import hashlib

    return hashlib.sha256(spec.to_json(compact=True).encode()).hexdigest()


def _split_scores(split: str, rows: pd.DataFrame, k: int, train_share: dict[str, float],
                  probs: np.ndarray | None) -> SplitScores:
    from sklearn.metrics import f1_score

    correct = rows["correct"].to_numpy()
    groups = tuple(GroupScore.of(g, split, correct[(rows["group"] == g).to_numpy()]) for g in sorted(set(rows["group"])))
    classes = tuple(GroupScore.of(c, split, correct[(rows["label"] == c).to_numpy()])
                    for c in dict.fromkeys(rows["label"]))
    members: dict[str, list[bool]] = {}
    for label, ctxs, ok in zip(rows["label"], rows["contexts"], correct):
        for ctx in sorted(set(ctxs)):
            members.setdefault(f"{label}({ctx})", []).append(bool(ok))
    contexts = tuple(GroupScore.of(s, split, np.array(v)) for s, v in sorted(members.items()))
    worst = _worst(groups)
    weights = {g.group: train_share.get(g.group, 0.0) for g in groups}
    total = sum(weights.values())
    adjusted = (sum(weights[g.group] * g.accuracy for g in groups) / total) if total > 0 else None
    y, p = rows["y"].to_numpy(), rows["pred"].to_numpy()
    labels = list(range(k))
    return SplitScores(
        split=split, n=int(correct.size), average=float(correct.mean()), worst_group=worst,
        worst_class=_worst(classes), adjusted_average=adjusted,
        # balanced accuracy: mean recall over the classes present in the split
        balanced_accuracy=float(np.mean([(p[y == c] == c).mean() for c in np.unique(y)])),
        macro_f1=float(f1_score(y, p, labels=labels, average="macro", zero_division=0)),
        ece=None if probs is None else expected_calibration_error(probs, y),
        per_group=groups, per_class=classes, per_context=contexts)


def _worst(scores: Sequence[GroupScore]) -> GroupScore:
    """Lowest accuracy; ties go to the larger group, then the name (a stable, explainable choice)."""
    return min(scores, key=lambda g: (g.accuracy, -g.n, g.group))


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


def score(predictions: "str | os.PathLike | pd.DataFrame | Mapping[str, Any] | Predictions", task: Any,
          artifact: "str | os.PathLike | None" = None, *, seed: int | None = None, splits: Sequence[str] | None = None,
          config: str | None = None, revision: str | None = None, **overrides: Any) -> Scores:
    """Score predictions on a task's splits (every split by default; ``splits`` restricts them).

    ``task``: a loaded ``Dataset``/``DatasetDict``, an exported folder, a Hub dataset repo id
    (``config``/``revision`` pick one), or a task id planned on ``artifact`` (with ``seed`` and size
    ``overrides``); see :func:`metashift_hf.hub.task_source.open_task`. ``predictions``: a .csv/.parquet
    path, a DataFrame or a dict of columns (``image_id`` plus ``prediction`` or ``prob_<class>``).
    Every image of the scored splits needs exactly one prediction; predictions for images outside
    the task are refused (a wrong task or seed would otherwise pass unnoticed).
    """
    tp = open_task(task, artifact=artifact, seed=seed, options=overrides, config=config, revision=revision).plan
    return score_plan(predictions, tp, splits=splits)


def score_plan(predictions: "str | os.PathLike | pd.DataFrame | Mapping[str, Any] | Predictions", tp: "TaskPlan", *,
               splits: Sequence[str] | None = None) -> Scores:
    """:func:`score` on an already resolved task plan."""
    classes = tuple(tp.classes)
    if isinstance(predictions, Mapping):  # a dict of columns (arrays or lists), as a training loop has them
        predictions = pd.DataFrame(dict(predictions))
    preds = predictions if isinstance(predictions, Predictions) else Predictions.read(predictions, classes)
    if preds.classes != classes:
        raise InputFormatError(f"predictions are for classes {list(preds.classes)}, the task has {list(classes)}",
                               "predict the task's classes in its order")
    table = tp.table()
    chosen = chosen_splits(splits, set(table["split"]), tp.task_id)
    pos = {iid: i for i, iid in enumerate(preds.image_ids)}
    outside = sorted(set(pos) - set(table["image_id"]))
    if outside:
        raise MissingImagesError(f"{preds.source} has predictions for {len(outside)} images that are not in task "
                                 f"{tp.task_id} (e.g. {', '.join(outside[:5])})",
                                 "score against the task (and seed, --set options) the predictions were made for",
                                 image_ids=outside)
    scored = table[table["split"].isin(chosen)].reset_index(drop=True)
    missing = [i for i in scored["image_id"] if i not in pos]
    if missing:
        raise MissingImagesError(f"{preds.source} has no prediction for {len(missing)} of the {len(scored)} images of "
                                 f"split(s) {', '.join(chosen)} (e.g. {', '.join(missing[:5])})",
                                 "predict every image of the scored splits, or restrict them (splits= / --splits test)",
                                 image_ids=missing)
    idx = np.fromiter((pos[i] for i in scored["image_id"]), dtype=np.int64, count=len(scored))
    label_index = {c: i for i, c in enumerate(classes)}
    scored["y"] = [label_index[c] for c in scored["label"]]
    scored["pred"] = preds.predicted[idx]
    scored["correct"] = scored["y"] == scored["pred"]
    probs = None if preds.probabilities is None else preds.probabilities[idx]
    train = table[table["split"] == "train"]
    train_share = (train["group"].value_counts(normalize=True).to_dict() if len(train) else {})
    per_split = {}
    for s in chosen:
        sel = (scored["split"] == s).to_numpy()
        per_split[s] = _split_scores(s, scored[sel], len(classes), train_share, None if probs is None else probs[sel])
    overall = _split_scores("overall", scored, len(classes), train_share, probs)
    roles = split_roles(chosen, tp.spec)
    headline = "test" if "test" in per_split else chosen[-1]
    return Scores(task_id=tp.task_id, classes=classes, headline_split=headline, prediction_kind=preds.kind,
                  splits=per_split, overall=overall, id_split=roles[0] if roles else None,
                  ood_split=roles[1] if roles else None, task_spec_hash=task_spec_hash(tp.spec))


__all__ = ["Predictions", "GroupScore", "SplitScores", "Scores", "score", "expected_calibration_error"]
