"""Scoring inside a training loop (WILDS style): arrays in, the same scores as ``metashift-hf score`` out.

    from datasets import load_dataset
    import metashift_hf
    ds = load_dataset("NS/metashift-paper-subpop-cat-dog-p12", "paper-subpop-cat-dog-p12")
    ev = metashift_hf.Evaluator(ds)                   # or a repo id, an exported folder, a task id + artifact=
    result = ev.eval(y_prob, split="test")            # numpy or torch; rows in the split's order
    print(result)                                     # headline, worst group, worst class, ID/OOD
    result.to_dict()["worst_group"]                   # the scores.json dict
    g = ev.grouping("community", split="train")       # integer ids per row + the ClassLabel naming them

Unlike WILDS' ``eval(y_pred, y_true, metadata)``, the truth and the groups come from the task itself:
the caller cannot pass labels of another split or an out-of-date grouping, and every figure (Wilson
intervals, worst group, adjusted average, ECE, ID vs OOD) is computed by :func:`metashift_hf.research.score.score_plan`,
so an ``eval`` equals ``score`` on the same predictions.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal, Sequence, get_args

import datasets
import numpy as np
import pandas as pd

from ..builders.shifts import TaskPlan
from ..builders.spec import ShiftSpec
from ..core.errors import InputFormatError, UnknownNameError, did_you_mean
from .score import PROB_TOLERANCE, Scores, score_plan
from ..task_source import TaskData, open_task

GroupBy = Literal["group", "class", "context", "community"]
NO_COMMUNITY = "none"  # the name part of a row whose group has no community (-1)


@dataclass(frozen=True)
class Grouping:
    """Integer ids of one split's rows under one grouping; ``names`` (a ClassLabel over the whole task,
    sorted; communities as ``class/k``, unique across classes) turns an id back into its name."""

    by: GroupBy
    split: str
    ids: np.ndarray  # int64, one per row of the split, in row order
    names: datasets.ClassLabel

    @property
    def n_groups(self) -> int:
        return self.names.num_classes


def _to_numpy(values: Any, what: str) -> np.ndarray:
    if hasattr(values, "detach"):  # a torch tensor, without importing torch here
        values = values.detach().cpu().numpy()
    try:
        return np.asarray(values)
    except (TypeError, ValueError) as exc:
        raise InputFormatError(f"{what} is not an array ({type(values).__name__}: {exc})",
                               "pass a numpy array or a torch tensor") from None


class Evaluator:
    """Score arrays of predictions on one task, split by split (see the module docstring).

    ``task``: a loaded ``Dataset``/``DatasetDict``, an exported folder, a Hub dataset repo id (with
    ``config``/``revision``), or a task id with ``artifact=`` (plus ``seed`` and size options).
    """

    def __init__(self, task: Any, *, config: str | None = None, revision: str | None = None,
                 artifact: "str | os.PathLike | None" = None, seed: int | None = None, **options: Any) -> None:
        self.task: TaskData = open_task(task, artifact=artifact, seed=seed, options=options, config=config,
                                        revision=revision)

    @property
    def plan(self) -> TaskPlan:
        return self.task.plan

    @property
    def spec(self) -> ShiftSpec:
        return self.task.spec

    @property
    def classes(self) -> list[str]:
        return self.task.classes

    @property
    def splits(self) -> list[str]:
        return self.task.plan.split_names()

    def _split(self, split: str) -> list:
        if split not in self.task.plan.splits:
            raise UnknownNameError(f"task {self.task.task_id} has no split {split!r}{did_you_mean(split, self.splits)}",
                                   f"use one of: {', '.join(self.splits)}")
        return self.task.plan.splits[split]

    def image_ids(self, split: str) -> list[str]:
        """The split's image ids in row order (the order ``eval`` expects)."""
        return [r.image_id for r in self._split(split)]

    def labels(self, split: str) -> np.ndarray:
        """The split's true class indices (task class order), int64, in row order."""
        index = {c: i for i, c in enumerate(self.classes)}
        return np.array([index[r.label] for r in self._split(split)], dtype=np.int64)

    def grouping(self, by: GroupBy, split: str) -> Grouping:
        """Integer ids of the split's rows by ``group``, ``class``, ``context`` or ``community``."""
        if by not in get_args(GroupBy):
            raise UnknownNameError(f"unknown grouping {by!r}{did_you_mean(str(by), get_args(GroupBy))}",
                                   f"use one of: {', '.join(get_args(GroupBy))}")
        every = [r for rows in self.task.plan.splits.values() for r in rows]
        names = sorted({self._name(r, by) for r in every}) if by != "class" else list(self.classes)
        index = {n: i for i, n in enumerate(names)}
        ids = np.array([index[self._name(r, by)] for r in self._split(split)], dtype=np.int64)
        return Grouping(by, split, ids, datasets.ClassLabel(names=names))

    @staticmethod
    def _name(row, by: GroupBy) -> str:
        if by == "group":
            return row.group
        if by == "class":
            return row.label
        if by == "context":
            return row.context
        return f"{row.label}/{NO_COMMUNITY if row.community < 0 else row.community}"

    def eval(self, y_pred: Any, split: str = "test", rows: "Sequence[int] | np.ndarray | None" = None) -> Scores:
        """Score ``y_pred`` on ``split`` (all its rows, or the ``rows`` positions / boolean mask).

        ``y_pred``: class indices ``(n,)``, or scores ``(n, k)`` in the task's class order: probabilities
        when every row lies in [0, 1] and sums to 1, else logits (softmax; the result says which).
        """
        split_rows = self._split(split)
        if rows is not None:
            pos = _to_numpy(rows, "rows")
            if pos.dtype == bool:
                if pos.shape != (len(split_rows),):
                    raise InputFormatError(f"rows is a mask of {pos.shape}, split {split!r} has {len(split_rows)} rows",
                                           "give one boolean per row of the split, or integer positions")
                pos = np.flatnonzero(pos)
            if pos.ndim != 1 or not np.issubdtype(pos.dtype, np.integer) or (pos < 0).any() or (pos >= len(split_rows)).any():
                raise InputFormatError(f"rows must be positions 0..{len(split_rows) - 1} of split {split!r}",
                                       "give integer positions (or a boolean mask) into the split's rows")
            if len(set(pos.tolist())) != len(pos):
                raise InputFormatError("rows repeats a position", "give each row once")
            split_rows = [split_rows[i] for i in pos]
        pred = _to_numpy(y_pred, "y_pred")
        if pred.shape[:1] != (len(split_rows),):
            raise InputFormatError(f"y_pred has {pred.shape[0] if pred.ndim else 0} rows, split {split!r} has "
                                   f"{len(split_rows)}" + (" selected" if rows is not None else ""),
                                   "predict every row of the split, in its order (Evaluator.image_ids(split))")
        ids = [r.image_id for r in split_rows]
        frame = pd.DataFrame({"image_id": ids})
        k = len(self.classes)
        if pred.ndim == 1:
            if not np.issubdtype(pred.dtype, np.integer) or (pred < 0).any() or (pred >= k).any():
                raise InputFormatError(f"y_pred of shape {pred.shape} holds values that are not class indices 0..{k - 1}",
                                       "pass predicted class indices (argmax), or (n, k) probabilities/logits")
            frame["prediction"] = [self.classes[i] for i in pred]
        elif pred.ndim == 2 and pred.shape[1] == k:
            scores = pred.astype(np.float64)
            probabilities = bool(np.isfinite(scores).all() and (scores >= 0).all() and (scores <= 1).all()
                                 and (np.abs(scores.sum(axis=1) - 1) <= PROB_TOLERANCE).all())
            prefix = "prob" if probabilities else "logit"
            for j, c in enumerate(self.classes):
                frame[f"{prefix}_{c}"] = scores[:, j]
        else:
            raise InputFormatError(f"y_pred has shape {pred.shape}; the task has {k} classes",
                                   f"pass (n,) class indices or (n, {k}) scores in the class order {self.classes}")
        plan = self.task.plan
        if rows is not None:  # the same plan with this split cut to the chosen rows (train shares unchanged)
            plan = TaskPlan(plan.task_id, plan.classes, {**plan.splits, split: split_rows}, plan.spec)
        return score_plan(frame, plan, splits=[split])


__all__ = ["Evaluator", "Grouping", "GroupBy"]
