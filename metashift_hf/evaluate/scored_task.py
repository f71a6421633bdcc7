"""What ``evaluate`` scores: the task read through the hub (:func:`open_scored`: rows and pixels only through
``TaskData``, or a dataset without a spec as :class:`~metashift_hf.hub.task_data.OwnDataset`), the rows chosen
(:func:`scored_rows`: splits, a stratified sample, :data:`SAMPLE_RULE`) and the head's outputs for them
(:func:`head_outputs`)."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np
import pandas as pd

from metashift_hf.tasks.splits import chosen_splits

from ..core.errors import EmptyResultError
from ..hub.task_data import OwnDataset, TaskData, TaskRef, own_dataset
from ..hub.task_open import open_task
from .config import EvalConfig
from .predict import predict
from .predictions import HeadOutputs, PrecomputedPredictions


# The per-image rows evaluate scores, and predictions.csv's first columns (docs/evaluate.md "Outputs")
ROW_TABLE = ("split", "image_id", "label", "contexts", "group", "community")
SAMPLE_RULE = (
    "at most N images per split, stratified by class: each class keeps its share of the split "
    "(largest remainders, ties by class name), drawn with the seed; every row of a drawn image is kept"
)


def sample_rows(table: pd.DataFrame, per_split: int, seed: int) -> pd.DataFrame:
    """At most ``per_split`` images of each split, stratified by class (:data:`SAMPLE_RULE`)."""
    rng = np.random.default_rng(seed)
    keep = []
    for split in sorted(set(table["split"])):
        part = table[table["split"] == split]
        first_class: dict[str, str] = {}
        for iid, label in sorted(zip(part["image_id"], part["label"])):
            first_class.setdefault(iid, label)  # an image of two classes (collections) counts under one
        by_class: dict[str, list[str]] = {}
        for iid, label in first_class.items():
            by_class.setdefault(label, []).append(iid)
        quota = _stratified_quota({c: len(v) for c, v in by_class.items()}, per_split)
        for c in sorted(by_class):
            ids = by_class[c]
            keep += [(split, i) for i in (rng.choice(ids, quota[c], replace=False) if quota[c] < len(ids) else ids)]
    chosen = pd.MultiIndex.from_tuples(keep, names=["split", "image_id"])
    mask = pd.MultiIndex.from_frame(table[["split", "image_id"]]).isin(chosen)
    return table[mask].reset_index(drop=True)


def _stratified_quota(sizes: Mapping[str, int], total: int) -> dict[str, int]:
    """Largest-remainder shares of ``total`` in proportion to ``sizes`` (all of them when they fit)."""
    n = sum(sizes.values())
    if n <= total:
        return dict(sizes)
    exact = {c: k * total / n for c, k in sizes.items()}
    quota = {c: int(x) for c, x in exact.items()}
    for c in sorted(sizes, key=lambda c: (-(exact[c] - quota[c]), c))[: total - sum(quota.values())]:
        quota[c] += 1
    return quota


def open_scored(task: Any, *, pixels: bool, on_missing: str = "error") -> "TaskData | OwnDataset":
    """The task to score, read only through the hub's readers: a dataset without a shift spec as it is
    (task ``custom``), any other form through :func:`open_task`. A task id planned on an artifact, when the model
    reads ``pixels``, is materialised by the one materialiser (``TaskData.prepare``: the same plan, never planned
    again; ``on_missing``) and read back as that dataset, so it is scored as its export is."""
    own = own_dataset(task)
    if own is not None:
        return own
    data = open_task(task)
    if pixels and data.form == "artifact":
        prepared = open_task(TaskRef(data.prepare(on_missing=on_missing), artifact=data.artifact))
        return dataclasses.replace(prepared, materialised_from=data.provenance)
    return data


def scored_rows(data: "TaskData | OwnDataset", cfg: EvalConfig) -> tuple[pd.DataFrame, list[str]]:
    """The per-image rows to score (:data:`ROW_TABLE` columns): the chosen splits, sampled when asked; the splits."""
    table = data.rows() if isinstance(data, OwnDataset) else data.plan.table()
    table = table[[c for c in ROW_TABLE if c in table]]
    scored_splits = chosen_splits(cfg.splits, set(table["split"]), data.task_id)  # before any image is read
    table = table[table["split"].isin(scored_splits)].reset_index(drop=True)
    if cfg.sample is not None:
        table = sample_rows(table, cfg.sample, cfg.seed)
    if table.empty:
        raise EmptyResultError(f"task {data.task_id!r} has no images", "check the task id and the artifact")
    return table, scored_splits


def head_outputs(loaded: Any, data: "TaskData | OwnDataset", table: pd.DataFrame, cfg: EvalConfig) -> HeadOutputs:
    """The head's outputs for each image of ``table`` once (an image of two classes is predicted once)."""
    ids = list(dict.fromkeys(table["image_id"]))
    if isinstance(loaded, PrecomputedPredictions):
        return loaded.predictions.for_ids(ids, source=str(loaded.path))
    read = data.images().read
    return predict(loaded, ids, read, batch_size=cfg.batch_size, workers=cfg.workers, progress=cfg.progress)
