"""Scoring inside a training loop (WILDS style): arrays in, the same scores as ``metashift-hf score`` out.

    from datasets import load_dataset
    import metashift_hf
    ds = load_dataset("NS/metashift-paper-subpop-cat-dog-p12", "paper-subpop-cat-dog-p12")
    ev = metashift_hf.Evaluator(ds)                   # or a repo id, an exported folder, a TaskRef
    result = ev.eval(y_prob, split="test")            # numpy or torch; rows in ds["test"]'s order
    both = ev.eval({"validation": y_val, "test": y_test})   # ID vs OOD in one Scores
    print(result)                                     # headline, worst group, worst class, ID/OOD
    result.to_dict()["worst_group"]                   # the scores.json dict
    g = ev.grouping("community", split="train")       # integer ids per row + the ClassLabel naming them

Unlike WILDS' ``eval(y_pred, y_true, metadata)``, the truth and the groups come from the task itself:
the caller cannot pass labels of another split or an out-of-date grouping. Rows are keyed by the
``image_id`` column of the object given: after ``ds.shuffle()`` or ``ds["test"].select(...)``,
``image_ids``, ``labels``, ``grouping`` and ``eval`` follow that object's rows (a split with fewer rows
than the task's is scored as given, with a warning; rows that are not that split's, e.g. training rows passed as
``"test"``, are refused where the spec records each split's rows). Every figure (Wilson
intervals, worst group, adjusted average, ECE, ID vs OOD) is computed by :func:`metashift_hf.research.score.score_plan`,
so an ``eval`` equals ``score`` on the same predictions.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any, Literal, Mapping, Sequence, get_args

import datasets
import numpy as np

from ..core.errors import EmptyResultError, InputFormatError, UnknownNameError, did_you_mean
from ..hub.task_data import TaskData, TaskRef
from ..hub.task_open import open_task
from ..scoring.predictions import PROB_TOLERANCE, TaskPredictions
from ..tasks.plan import Row, TaskPlan
from ..tasks.spec import ShiftSpec
from .score import Scores, score_plan


logger = logging.getLogger(__name__)

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


RowKey = tuple[str, int]  # (image_id, class index): a collection lists an image once per class


def _to_numpy(values: Any, what: str) -> np.ndarray:
    if hasattr(values, "detach"):  # a torch tensor, without importing torch here
        values = values.detach().cpu()
        if str(values.dtype) == "torch.bfloat16":  # numpy has no bfloat16
            values = values.float()
        values = values.numpy()
    try:
        return np.asarray(values)
    except (TypeError, ValueError) as exc:
        raise InputFormatError(
            f"{what} is not an array ({type(values).__name__}: {exc})", "pass a numpy array or a torch tensor"
        ) from None


class Evaluator:
    """Score arrays of predictions on one task, split by split (see the module docstring).

    ``task``: a loaded ``Dataset``/``DatasetDict``, an exported folder, a Hub dataset repo id, or a
    :class:`~metashift_hf.hub.task_data.TaskRef` (a task id with its ``artifact``, ``seed`` and options; a
    repo's ``config``/``revision``).
    """

    def __init__(self, task: "TaskRef | Any") -> None:
        # a blank name ("" would be the current folder) is refused where the request is made (TaskRef)
        self.task: TaskData = open_task(task)
        given = _given_keys(self.task)
        self._rows = self.task.plan.splits if given is None else self._in_given_order(given)

    def _in_given_order(self, given: dict[str, list[RowKey]]) -> dict[str, list[Row]]:
        """Each split's rows in the order of the object given (the plan holds them in export order),
        warning about a split with fewer rows than the task's."""
        plan, sizes = self.task.plan, self.task.spec.split_sizes
        index = {c: i for i, c in enumerate(plan.classes)}
        rows = {}
        for split, keys in given.items():
            if not keys:
                continue  # the plan drops an empty split
            size = sizes.get(split)  # task_dataset.check_rows refused unknown splits, extra and repeated rows
            if size is not None and len(keys) < size:
                # check_rows refused rows that are not the split's when the spec records them (spec_version 5)
                checked = self.task.spec.members_of(split) is not None
                logger.warning(
                    "%s: split %r has %d of the %d rows of task %s's %s split; scoring the rows given%s",
                    self.task.where,
                    split,
                    len(keys),
                    size,
                    plan.task_id,
                    split,
                    " (each one of that split's rows)"
                    if checked
                    else " (its shift spec records no rows, so they cannot be checked to be that split's: "
                    "export the task again to have them checked)",
                )
            by_key = {(r.image_id, index[r.label]): r for r in plan.splits[split]}
            rows[split] = [by_key[k] for k in keys]
        return rows

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

    def _split(self, split: str) -> list[Row]:
        if not isinstance(split, str):
            raise InputFormatError(
                f"split={split!r} is not a split name",
                f"pass one of {', '.join(map(repr, self.splits))}"
                " (several splits: eval({'validation': y_val, 'test': y_test}))",
            )
        if split not in self._rows:
            if self.task.spec.split_sizes.get(split):  # L-17: the task has the split, the data given no rows of it
                raise EmptyResultError(
                    f"task {self.task.task_id}'s split {split!r} has no rows in the data given "
                    f"(the task holds {self.task.spec.split_sizes[split]:,})",
                    f"pass data that holds the split's rows (scorable here: {', '.join(self.splits) or 'none'})",
                )
            raise UnknownNameError(
                f"task {self.task.task_id} has no split {split!r}{did_you_mean(split, self.splits)}",
                f"use one of: {', '.join(self.splits)}" if self.splits else "pass data that holds a split's rows",
            )
        return self._rows[split]

    def image_ids(self, split: str) -> list[str]:
        """The split's image ids in the row order of the object given (the order ``eval`` expects)."""
        return [r.image_id for r in self._split(split)]

    def labels(self, split: str) -> np.ndarray:
        """The split's true class indices (task class order), int64, in row order."""
        index = {c: i for i, c in enumerate(self.classes)}
        return np.array([index[r.label] for r in self._split(split)], dtype=np.int64)

    def grouping(self, by: GroupBy, split: str) -> Grouping:
        """Integer ids of the split's rows by ``group``, ``class``, ``context`` or ``community``."""
        if by not in get_args(GroupBy):
            raise UnknownNameError(
                f"unknown grouping {by!r}{did_you_mean(str(by), get_args(GroupBy))}",
                f"use one of: {', '.join(get_args(GroupBy))}",
            )
        if by == "community":  # a folder's or repo's facts file must agree with the rows' communities (read once)
            _ = self.task.meta_graph
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
        when every row lies in [0, 1] and sums to 1, else logits (softmax; the result says which). Or a
        dict ``{split: y_pred}`` (e.g. validation and test): one ``Scores`` over those splits, ID vs OOD.
        """
        if isinstance(y_pred, Mapping):
            return self._eval_splits(y_pred, split, rows)
        split_rows = self._split(split)
        if rows is not None:
            split_rows = [split_rows[i] for i in self._positions(rows, split, len(split_rows))]
        preds = self._predictions(y_pred, split, split_rows, "y_pred", selected=rows is not None)
        plan = self.task.plan
        if rows is not None:  # the same plan with this split cut to the chosen rows (train shares unchanged)
            plan = TaskPlan(plan.task_id, plan.classes, {**plan.splits, split: split_rows}, plan.spec)
        return replace(score_plan(preds, plan, splits=[split]), task_origin=self.task.origin())

    def _eval_splits(self, y_pred: Mapping[str, Any], split: str, rows: Any) -> Scores:
        if rows is not None or split != "test":
            raise InputFormatError(
                "a dict of predictions names its own splits; split=/rows= go with one array",
                "drop split=/rows=, or pass one array with split= (and rows=)",
            )
        if not y_pred:
            raise InputFormatError(
                "y_pred is an empty dict", "pass {split: predictions}, e.g. {'validation': y_val, 'test': y_test}"
            )
        parts = [self._predictions(v, s, self._split(s), f"y_pred[{s!r}]") for s, v in y_pred.items()]
        scores = score_plan(TaskPredictions.concat(parts, "y_pred"), self.task.plan, splits=list(y_pred))
        return replace(scores, task_origin=self.task.origin())

    @staticmethod
    def _positions(rows: Any, split: str, n: int) -> np.ndarray:
        pos = _to_numpy(rows, "rows")
        if pos.dtype == bool:
            if pos.shape != (n,):
                raise InputFormatError(
                    f"rows is a mask of {pos.shape}, split {split!r} has {n} rows",
                    "give one boolean per row of the split, or integer positions",
                )
            pos = np.flatnonzero(pos)
        if pos.size == 0:
            raise InputFormatError(
                f"rows selects no row of split {split!r}",
                "give at least one position (or a mask with a True), or rows=None for every row",
            )
        if pos.ndim != 1 or not np.issubdtype(pos.dtype, np.integer) or (pos < 0).any() or (pos >= n).any():
            raise InputFormatError(
                f"rows must be positions 0..{n - 1} of split {split!r}",
                "give integer positions (or a boolean mask) into the split's rows",
            )
        if len(set(pos.tolist())) != len(pos):
            raise InputFormatError("rows repeats a position", "give each row once")
        return pos

    def _predictions(
        self, y_pred: Any, split: str, split_rows: list[Row], what: str, selected: bool = False
    ) -> TaskPredictions:
        """``y_pred`` as the arrays ``score_plan`` scores: class indices, or probabilities/logits in class order."""
        pred = _to_numpy(y_pred, what)
        if np.iscomplexobj(pred):  # numpy would drop the imaginary part with a warning and score the rest
            raise InputFormatError(
                f"{what} holds complex numbers ({pred.dtype})",
                "pass real class indices, probabilities or logits (e.g. y.real when the imaginary part is 0)",
            )
        if pred.shape[:1] != (len(split_rows),):
            raise InputFormatError(
                f"{what} has {pred.shape[0] if pred.ndim else 0} rows, split {split!r} has "
                f"{len(split_rows)}" + (" selected" if selected else ""),
                "predict every row of the split, in the order of the dataset given (Evaluator.image_ids(split))",
            )
        ids = tuple(r.image_id for r in split_rows)
        classes = tuple(self.classes)
        k = len(classes)
        if pred.ndim == 1:
            if not np.issubdtype(pred.dtype, np.integer) or (pred < 0).any() or (pred >= k).any():
                raise InputFormatError(
                    f"{what} of shape {pred.shape} holds values that are not class indices 0..{k - 1}",
                    "pass predicted class indices (argmax), or (n, k) probabilities/logits",
                )
            return TaskPredictions(ids, pred.astype(np.int64), None, "labels", classes, what)
        if pred.ndim == 2 and pred.shape[1] == k:
            scores = pred.astype(np.float64)
            probabilities = bool(
                np.isfinite(scores).all()
                and (scores >= 0).all()
                and (scores <= 1).all()
                and (np.abs(scores.sum(axis=1) - 1) <= PROB_TOLERANCE).all()
            )
            return TaskPredictions.from_scores(
                ids, scores, classes, "probabilities" if probabilities else "logits", what
            )
        raise InputFormatError(
            f"{what} has shape {pred.shape}; the task has {k} classes",
            f"pass (n,) class indices or (n, {k}) scores in the class order {self.classes}",
        )


def _given_keys(task: TaskData) -> dict[str, list[RowKey]] | None:
    """Each split's (image_id, class index) in the row order of a loaded dataset (None for other forms,
    read in export order); ``check_rows`` has checked them against the spec (no repeated or foreign rows)."""
    if task.form != "dataset":
        return None
    given: dict[str, list[RowKey]] = {}
    for split, ds in task.dataset.items():
        cols = ds.select_columns(["image_id", "label"]).to_dict()
        given[split] = [(str(i), y) for i, y in zip(cols["image_id"], cols["label"])]
    return given


__all__ = ["Evaluator", "Grouping", "GroupBy"]
