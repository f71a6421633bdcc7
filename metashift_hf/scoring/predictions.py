"""A task's predictions read from a file, a DataFrame or arrays, checked against the task's classes.

A predictions table has ``image_id`` and either ``prediction`` (class name or class id in the task's
class order) or one column per class, ``prob_<class>`` (probabilities) or ``logit_<class>`` (turned
into probabilities by softmax). ``TaskPredictions.from_scores`` takes the arrays themselves
(``Evaluator.eval``). The scorer is :mod:`metashift_hf.research.score`.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Sequence

import numpy as np
import pandas as pd

from ..core.errors import InputFormatError, UnknownNameError, did_you_mean
from ..core.fsutil import check_input_file


PredictionKind = Literal["labels", "probabilities", "logits"]
PROB_TOLERANCE = 1e-3  # probabilities must sum to 1 within this per row
PREDICTIONS_FIX = (
    "write a .csv or .parquet with a string column image_id and either a column prediction "
    "(class name or class id) or one column per class named prob_<class> or logit_<class>"
)

PredictionColumns = Literal["prediction", "probabilities"]
USE_CHOICES: tuple[str, ...] = ("prediction", "probabilities")
LABEL_RULE = (
    "prediction values are read as text and matched to the task's class names first; they are read "
    "as class ids (0..k-1 in the task's class order) only when no value is a class name and every "
    "value is an integer"
)
BOTH_RULE = (
    "with both a prediction column and prob_/logit_ columns, the predicted class must have the row's "
    "highest score on every row, unless --use prediction or --use probabilities picks one"
)


@dataclass(frozen=True)
class TaskPredictions:
    """One row per image: the predicted task class (index in task order) and, when given, class probabilities
    (what ``score``, ``bugs`` and ``Evaluator.eval`` score; ImageNet head outputs are
    :class:`metashift_hf.evaluate.predictions.HeadOutputs`)."""

    image_ids: tuple[str, ...]
    predicted: np.ndarray  # int64 (n,) index into classes
    probabilities: np.ndarray | None  # float64 (n, k), rows sum to 1
    kind: PredictionKind
    classes: tuple[str, ...]
    source: str = "predictions"

    def __post_init__(self) -> None:
        dup = sorted(i for i, k in Counter(self.image_ids).items() if k > 1)
        if dup:
            raise InputFormatError(
                f"{self.source} repeats image_id {dup[:5]} ({len(dup)} ids more than once)",
                "keep exactly one row per image",
            )

    @classmethod
    def concat(cls, parts: "Sequence[TaskPredictions]", source: str = "predictions") -> "TaskPredictions":
        """Several predictions of one kind (e.g. one per split) as one."""
        kinds = {p.kind for p in parts}
        if len(kinds) > 1:
            raise InputFormatError(
                f"{source} mixes kinds of predictions ({', '.join(f'{p.source}: {p.kind}' for p in parts)})",
                "give every split the same kind: class indices, probabilities or logits",
            )
        probs = None if parts[0].probabilities is None else np.concatenate([p.probabilities for p in parts])
        return cls(
            tuple(i for p in parts for i in p.image_ids),
            np.concatenate([p.predicted for p in parts]),
            probs,
            parts[0].kind,
            parts[0].classes,
            source,
        )

    @classmethod
    def read(
        cls,
        source: "str | os.PathLike | pd.DataFrame",
        classes: Sequence[str],
        *,
        use: PredictionColumns | None = None,
    ) -> "TaskPredictions":
        """Read a csv/parquet path or a DataFrame against the task's ``classes`` (refuses unknown classes).

        ``prediction`` is read by :data:`LABEL_RULE`. With both ``prediction`` and ``prob_``/``logit_``
        columns, ``use`` picks one (``"prediction"`` or ``"probabilities"``); without it they must agree
        on every row (the predicted class has the row's highest probability) — see :data:`BOTH_RULE`.
        """
        if use not in (None, *USE_CHOICES):
            raise InputFormatError(
                f"use={use!r} is not one of {', '.join(USE_CHOICES)}",
                "pass use='prediction' or use='probabilities' (command line: --use)",
            )
        if not isinstance(source, (str, os.PathLike, pd.DataFrame)):
            raise InputFormatError(
                f"cannot read predictions from a {type(source).__name__}",
                "pass a .csv/.parquet path, a pandas DataFrame or a dict of columns",
            )
        name = "predictions" if isinstance(source, pd.DataFrame) else str(source)
        df = source if isinstance(source, pd.DataFrame) else _read_table(Path(source))
        if "image_id" not in df.columns:
            raise InputFormatError(f"{name} has no image_id column (columns: {list(df.columns)[:8]})", PREDICTIONS_FIX)
        ids = tuple(str(i) for i in df["image_id"])
        classes = tuple(classes)
        prob_cols = [c for c in df.columns if isinstance(c, str) and c.startswith(("prob_", "logit_"))]
        has_labels = "prediction" in df.columns
        if use == "prediction" and not has_labels or use == "probabilities" and not prob_cols:
            raise InputFormatError(
                f"{name} has no {'prediction' if use == 'prediction' else 'prob_/logit_'} column(s) "
                f"to use (columns: {list(df.columns)[:8]})",
                "drop --use (use=), or name a column kind the file has",
            )
        if not prob_cols and not has_labels:
            raise InputFormatError(
                f"{name} has neither a prediction column nor prob_<class>/logit_<class> columns", PREDICTIONS_FIX
            )
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
                "choose one: --use prediction or --use probabilities (Python: TaskPredictions.read(..., use=...)), "
                "or drop one of the columns",
            )
        # they agree: keep the probabilities (for ECE) and the explicit prediction (it settles ties)
        return cls(ids, labels.predicted, scored.probabilities, scored.kind, classes, name)

    @classmethod
    def _from_scores(cls, df: pd.DataFrame, ids, classes, cols: list[str], name: str) -> "TaskPredictions":
        prefixes = {c.split("_", 1)[0] for c in cols}
        if len(prefixes) > 1:
            raise InputFormatError(
                f"{name} mixes prob_ and logit_ columns", "give one kind: prob_<class> or logit_<class>"
            )
        prefix = prefixes.pop()
        named = [c.split("_", 1)[1] for c in cols]
        unknown = [c for c in named if c not in classes]
        if unknown:
            raise UnknownNameError(
                f"{name} has columns for classes {unknown[:5]} that are not in the task "
                f"(classes: {list(classes)}){did_you_mean(unknown[0], classes)}",
                f"name one column per task class: {', '.join(f'{prefix}_{c}' for c in classes)}",
            )
        missing = [c for c in classes if c not in named]
        if missing:
            raise InputFormatError(
                f"{name} lacks {prefix}_ columns for classes {missing}", "give one column per task class"
            )
        block = df[[f"{prefix}_{c}" for c in classes]]
        if any(pd.api.types.is_complex_dtype(t) for t in block.dtypes):  # a float cast would drop the imaginary part
            raise _complex_values(name, prefix)
        try:
            scores = block.to_numpy(dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise InputFormatError(f"{name}: {prefix}_ columns are not numbers ({exc})", PREDICTIONS_FIX) from exc
        return cls.from_scores(ids, scores, classes, "probabilities" if prefix == "prob" else "logits", name)

    @classmethod
    def from_scores(
        cls,
        ids: Sequence[str],
        scores: np.ndarray,
        classes: Sequence[str],
        kind: Literal["probabilities", "logits"],
        name: str = "predictions",
    ) -> "TaskPredictions":
        """(n, k) probabilities (checked: in [0, 1], rows sum to 1 within PROB_TOLERANCE) or logits (softmax),
        in the task's class order; the prediction is the row's argmax (ties: first class in task order)."""
        prefix = "prob" if kind == "probabilities" else "logit"
        if np.iscomplexobj(scores):  # a float64 cast would drop the imaginary part (with only a warning)
            raise _complex_values(name, prefix)
        scores = np.asarray(scores, dtype=np.float64)
        if not np.isfinite(scores).all():
            raise InputFormatError(
                f"{name} has NaN or infinite {prefix}_ values", "write finite numbers for every image"
            )
        if kind == "probabilities":
            bad = (
                (scores < 0).any(axis=1) | (scores > 1).any(axis=1) | (np.abs(scores.sum(axis=1) - 1) > PROB_TOLERANCE)
            )
            if bad.any():
                raise InputFormatError(
                    f"{name}: prob_ columns are not probabilities for image_id {[ids[i] for i in np.flatnonzero(bad)[:5]]} "
                    f"(each row must lie in [0, 1] and sum to 1 within {PROB_TOLERANCE})",
                    "write softmax outputs as prob_<class>, or raw scores as logit_<class>",
                )
            probs = scores / scores.sum(axis=1, keepdims=True)
        else:
            shifted = np.exp(scores - scores.max(axis=1, keepdims=True))
            probs = shifted / shifted.sum(axis=1, keepdims=True)
        # argmax takes the first maximum: ties go to the task's class order
        return cls(tuple(ids), probs.argmax(axis=1).astype(np.int64), probs, kind, tuple(classes), name)


def _complex_values(name: str, prefix: str) -> InputFormatError:
    return InputFormatError(
        f"{name} has complex {prefix}_ values", "write real numbers: probabilities or logits, one per class"
    )


def _read_table(path: Path) -> pd.DataFrame:
    check_input_file(path, f"predictions file {path}", PREDICTIONS_FIX)
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
        raise InputFormatError(
            f"{name}: {len(missing)} rows have no prediction (first at row {missing[0] + 1})",
            "predict a class for every image",
        )
    if any(t in index for t in labels):  # a name column: every value must be a class name
        bad = sorted({t for t in labels if t not in index})
        if bad:
            ids = [t for t in bad if _as_index(t, len(classes)) is not None]
            raise UnknownNameError(
                f"{name}: predictions {bad[:5]} are not classes of the task {list(classes)}"
                f"{did_you_mean(bad[0], classes)}"
                + (f"; the column holds class names, so {ids[:3]} are not read as class ids" if ids else ""),
                f"predict class names ({', '.join(classes)}) throughout, or class ids 0..{len(classes) - 1} throughout "
                f"(rule: {LABEL_RULE})",
            )
        return np.fromiter((index[t] for t in labels), dtype=np.int64, count=len(labels))
    ids = [_as_index(t, len(classes)) for t in labels]
    bad = sorted({t for t, i in zip(labels, ids) if i is None})
    if bad:
        raise UnknownNameError(
            f"{name}: predictions {bad[:5]} are neither classes of the task {list(classes)} nor "
            f"class ids 0..{len(classes) - 1}{did_you_mean(bad[0], classes)}",
            f"predict a class name ({', '.join(classes)}) or its id 0..{len(classes) - 1}",
        )
    return np.asarray(ids, dtype=np.int64)


__all__ = [
    "TaskPredictions",
    "PredictionKind",
    "PredictionColumns",
    "PROB_TOLERANCE",
    "PREDICTIONS_FIX",
    "USE_CHOICES",
    "LABEL_RULE",
    "BOTH_RULE",
]
