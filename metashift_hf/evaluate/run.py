"""``evaluate(model, task, out)``: predictions -> scores -> groups -> report."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

from metashift_hf.builders.artifact import Artifact
from metashift_hf.builders.meta_graph_facts import DISTANCE_RULE
from metashift_hf.tasks.spec import ShiftSpec
from metashift_hf.tasks.splits import chosen_splits, split_roles
from metashift_hf.wordnet_match.imagenet import imagenet_classes

from ..core import __version__
from ..core.errors import EmptyResultError, InputFormatError
from ..core.fsutil import check_out
from ..hub.task_data import OwnDataset, TaskData, TaskRef, own_dataset, task_ref
from ..hub.task_open import open_task
from ..models import runtime_card
from ..scoring.bugs import BUG_COLUMNS, BUG_TEST, context_bugs, meta_graph_facts
from ..scoring.groups import group_table, id_vs_ood, worst_subsets
from .config import EvalConfig
from .coverage import head_coverage
from .predict import predict
from .predictions import HeadOutputs, PrecomputedPredictions, load_scorer
from .report import REPORT_KIND, EvalReport, write_report
from .scoring import COUNTING_RULE, headline_metrics, score_images


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


def task_content_hash(spec: ShiftSpec | None, table: pd.DataFrame) -> str:
    """sha256 over the shift spec and the sorted (split, image_id, label, contexts, group) rows."""
    h = hashlib.sha256()
    h.update((spec.to_json(compact=True) if spec is not None else "{}").encode())
    cols = [c for c in ("split", "image_id", "label", "group") if c in table]
    for rec in table.sort_values(["split", "image_id"]).itertuples(index=False):
        d = rec._asdict()
        h.update(json.dumps([d[c] for c in cols] + [sorted(d["contexts"])]).encode())
    return h.hexdigest()


def _summary(row) -> dict[str, Any]:
    return {
        "n": int(row["n"]),
        "correct": int(row["correct"]),
        "accuracy": float(row["accuracy"]),
        "ci": [float(row["ci_low"]), float(row["ci_high"])],
    }


def _class_metrics(groups: pd.DataFrame, worst: pd.DataFrame, classes: list[str], coverage: Mapping[str, Any]) -> dict:
    out = {}
    for c in classes:
        row = groups[(groups.level == "class") & (groups["class"] == c)].iloc[0]
        wc = worst[worst["class"] == c]
        per_split = groups[(groups.level == "split_class") & (groups["class"] == c)]
        out[c] = {
            **_summary(row),
            "n_contexts": int(((groups.level == "context") & (groups["class"] == c)).sum()),
            "leaves_covered": len(set(int(i) for i in coverage.get(c, ()))),
            "worst_context": ({"subset": wc.iloc[0]["subset"], **_summary(wc.iloc[0])} if len(wc) else None),
            "splits": {r["group"]: _summary(r) for _, r in per_split.iterrows()},
        }
    return out


def _gap_metrics(groups: pd.DataFrame, classes: list[str], roles: tuple[str, str] | None) -> dict | None:
    """ID vs OOD overall (accuracies, intervals, gap, relative drop) and per class."""
    gap = id_vs_ood(groups, *roles) if roles else None
    if gap:
        gap["classes"] = {}
        for c in classes:
            sc = groups[(groups.level == "split_class") & (groups["class"] == c)].set_index("group")
            if roles[0] in sc.index and roles[1] in sc.index:
                a, b = float(sc.at[roles[0], "accuracy"]), float(sc.at[roles[1], "accuracy"])
                gap["classes"][c] = {"id": a, "ood": b, "gap": a - b, "relative_drop": (a - b) / a if a > 0 else None}
    return gap


def _bug_list(bug_rows: pd.DataFrame) -> list[dict]:
    def opt(value, cast):
        return None if pd.isna(value) else cast(value)

    return [
        {
            "class": r["class"],
            "subset": r["subset"],
            "context": r["group"],
            **_summary(r),
            "rest_n": int(r["rest_n"]),
            "rest_correct": int(r["rest_correct"]),
            "rest_accuracy": float(r["rest_accuracy"]),
            "z": float(r["z"]),
            "p_value": float(r["p_value"]),
            "q_value": float(r["q_value"]),
            "community": opt(r["community"], int),
            "distance_to_largest_community": opt(r.get("distance_to_largest_community", np.nan), float),
        }
        for _, r in bug_rows.iterrows()
    ]


def _per_image(scored: pd.DataFrame, labels: list[str] | None = None) -> pd.DataFrame:
    """predictions.csv rows: contexts joined by '|', name of the top-1 class (ImageNet-1k or the head's), sorted."""

    names = [c.name.split(",")[0] for c in imagenet_classes()] if labels is None else labels
    per_image = scored.assign(
        contexts=["|".join(sorted(c)) for c in scored["contexts"]], pred_name=[names[i] for i in scored["pred_index"]]
    )
    return per_image.sort_values(["split", "image_id"], kind="stable").reset_index(drop=True)


def evaluate(
    model: Any,
    task: "TaskRef | Any",
    out: str | Path | None = None,
    *,
    settings: EvalConfig | None = None,
) -> EvalReport:
    """Evaluate an ImageNet-1k classifier on a MetaShift task; write the report to ``out`` when given.

    ``model``: "efficientnet-lite0", "torchvision:NAME", "timm:NAME", "predictions:FILE", a loaded
    Classifier/PrecomputedPredictions, or any callable list[PIL.Image] -> (n, 1000) logits.
    ``task``: a :class:`~metashift_hf.hub.task_data.TaskRef` (a task id planned on its ``artifact``, with
    ``images``, ``seed`` and ``options``; a folder or Hub repo with ``config``/``revision``) or a bare exported
    folder, Hub dataset repo id, loaded Dataset/DatasetDict (image, image_id, label ClassLabel, contexts, group,
    community), ``metashift_hf.prepare`` result or :func:`open_task` result.
    ``settings``: how it runs (:class:`.config.EvalConfig`: hierarchy, mode, coverage, batch size, device,
    seed, sample, splits, ...; checked when made; default ``EvalConfig()``).
    The report's ``headline`` (scoring.HEADLINE_RULE) is the test split's balanced and worst-group
    accuracy with the majority-class baseline beside it; it never includes train.
    """
    cfg = settings if settings is not None else EvalConfig()  # its numbers were checked when it was made
    if out is not None:
        _check_out(out, model, task, cfg)  # before the model loads: a refused --out costs nothing
    # the model first: a wrong name or a missing extra fails before any task is materialised
    loaded = load_scorer(model, cfg.device, cfg.dtype, cfg.image_size)
    data = open_scored(task, pixels=not isinstance(loaded, PrecomputedPredictions), on_missing=cfg.on_missing)
    facts = data.meta_graph  # a folder's or repo's, checked against its rows (before any image is read)
    table, scored_splits = _scored_rows(data, cfg)
    coverage, hierarchy_card = _coverage(data.classes, cfg, getattr(loaded, "labels", None))
    preds = _predictions(loaded, data, table, cfg)
    scored = score_images(table, preds, coverage, cfg.mode, data.classes)
    groups, tested, bug_rows = _groups(scored, data, facts, cfg.min_subset_size, cfg.alpha)
    run = _run_card(data, table, loaded, hierarchy_card, scored_splits, cfg)
    metrics = _metrics(run, scored, groups, tested, bug_rows, coverage, data, cfg)
    if out is None:
        return EvalReport(metrics)
    return _write(out, metrics, groups, scored, preds, getattr(loaded, "labels", None), cfg)


def _check_out(out: str | Path, model: Any, task: Any, cfg: EvalConfig) -> None:
    """Refuse an ``out`` that would replace something not ours or hold one of the run's inputs."""
    model_file = model[len("predictions:") :] if isinstance(model, str) and model.startswith("predictions:") else None
    tree = cfg.hierarchy[len("tree:") :] if cfg.hierarchy.startswith("tree:") else None
    ref = task.ref if isinstance(task, TaskData) else task_ref(task)
    art_path = ref.artifact.root if isinstance(ref.artifact, Artifact) else ref.artifact  # a loaded one (the zoo) too
    images = ref.images if isinstance(ref.images, (str, Path)) else None
    check_out(out, REPORT_KIND, force=cfg.force, inputs=[art_path, images, model_file, tree])


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
        return open_task(TaskRef(data.prepare(on_missing=on_missing), artifact=data.artifact))
    return data


def _scored_rows(data: "TaskData | OwnDataset", cfg: EvalConfig) -> tuple[pd.DataFrame, list[str]]:
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


def _coverage(classes: list[str], cfg: EvalConfig, labels: Any) -> tuple[Mapping[str, Any], dict]:
    """Each class's ImageNet-1k leaves under the hierarchy (or the given coverage), and the hierarchy's card."""
    if cfg.coverage is None:
        return head_coverage(classes, cfg.hierarchy, labels)
    return cfg.coverage, {
        "name": "custom coverage",
        "classes": {c: len(list(cfg.coverage.get(c, ()))) for c in classes},
    }


def _predictions(loaded: Any, data: "TaskData | OwnDataset", table: pd.DataFrame, cfg: EvalConfig) -> HeadOutputs:
    """The head's outputs for each image of ``table`` once (an image of two classes is predicted once)."""
    ids = list(dict.fromkeys(table["image_id"]))
    if isinstance(loaded, PrecomputedPredictions):
        return loaded.predictions.for_ids(ids, source=str(loaded.path))
    read = data.images().read
    return predict(loaded, ids, read, batch_size=cfg.batch_size, workers=cfg.workers, progress=cfg.progress)


def _groups(
    scored: pd.DataFrame, data: "TaskData | OwnDataset", facts: Any, min_subset_size: int, alpha: float
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """per_group rows with the context-bug test's columns; the tested rows; the bugs, with their distances."""
    facts = meta_graph_facts(data.artifact, facts, scored)
    classes = data.classes
    groups = group_table(scored, classes, facts.community_map() if facts is not None else None)
    tested = context_bugs(scored, groups, min_subset_size, alpha)
    for col in BUG_COLUMNS:
        groups.loc[tested.index, col] = tested[col]
    bug_rows = tested[tested["bug"]].sort_values(["q_value", "subset"], kind="stable")
    if facts is not None:
        for i in bug_rows.index:
            groups.loc[i, "distance_to_largest_community"] = facts.distance_to_largest(groups.at[i, "subset"])
    return groups, tested, groups.loc[bug_rows.index]


def _run_card(
    data: "TaskData | OwnDataset",
    table: pd.DataFrame,
    loaded: Any,
    hierarchy_card: dict,
    scored_splits: list[str],
    cfg: EvalConfig,
) -> dict[str, Any]:
    """report.json's ``run``: what was scored, with which model and settings."""
    spec, art = data.spec, data.artifact
    model_card = loaded.card()
    return {
        "package_version": __version__,
        "task_id": data.task_id,
        "task_content_hash": task_content_hash(spec, table),
        "artifact_hash": (art.content_hash if art is not None else spec.artifact_hash if spec else None),
        "model": model_card,
        "mode": cfg.mode,
        "hierarchy": hierarchy_card.get("name", cfg.hierarchy),
        "hierarchy_detail": hierarchy_card,
        "seed": cfg.seed,
        "classes": data.classes,
        "min_subset_size": cfg.min_subset_size,
        "shift_type": spec.shift_type if spec else None,
        "splits": scored_splits,
        "sample_per_split": cfg.sample,
        "sample_rule": SAMPLE_RULE if cfg.sample is not None else None,
        "task_options": dict(spec.overrides) if spec else {},
        "dtype": model_card.get("dtype", cfg.dtype),
        "runtime": runtime_card(),
        # None: the model's own input size; else the side it was fed (a quick run, not its full-resolution score)
        "image_size": model_card.get("image_size", cfg.image_size),
    }


def _metrics(
    run: dict[str, Any],
    scored: pd.DataFrame,
    groups: pd.DataFrame,
    tested: pd.DataFrame,
    bug_rows: pd.DataFrame,
    coverage: Mapping[str, Any],
    data: "TaskData | OwnDataset",
    cfg: EvalConfig,
) -> dict[str, Any]:
    """report.json: the run card, the headline, overall / split / class scores, ID vs OOD and the context bugs."""
    classes = data.classes
    worst = worst_subsets(groups, cfg.min_subset_size)
    roles = split_roles(sorted(set(scored["split"])), data.spec)
    return {
        "run": run,
        "counting": COUNTING_RULE,
        "min_subset_size": cfg.min_subset_size,
        "headline": headline_metrics(scored, classes),
        "overall": _summary(groups[groups.level == "overall"].iloc[0]),
        "splits": {r["group"]: _summary(r) for _, r in groups[groups.level == "split"].iterrows()},
        "classes": _class_metrics(groups, worst, classes, coverage),
        "worst_subset": ({"subset": worst.iloc[0]["subset"], **_summary(worst.iloc[0])} if len(worst) else None),
        "id_vs_ood": _gap_metrics(groups, classes, roles),
        "bug_test": {
            "description": BUG_TEST,
            "alpha": cfg.alpha,
            "n_tests": int(tested["p_value"].notna().sum()),
            "min_n": cfg.min_subset_size,
            "distance": DISTANCE_RULE,
        },
        "context_bugs": _bug_list(bug_rows),
    }


def _write(
    out: str | Path,
    metrics: dict[str, Any],
    groups: pd.DataFrame,
    scored: pd.DataFrame,
    preds: HeadOutputs,
    labels: Any,
    cfg: EvalConfig,
) -> EvalReport:
    """The report folder: report.json/md, per_group.csv, predictions.csv, logits (``save_logits``), charts."""
    logits = None
    if cfg.save_logits:
        if preds.logits is None:
            raise InputFormatError(
                "save_logits: these predictions hold only top-1 indices, no logits",
                "drop --save-logits, or give a predictions file with logits",
            )
        logits = pd.DataFrame({"image_id": preds.image_ids, "logits": list(preds.logits)})
    names = None if labels is None or labels.is_imagenet_1k else list(labels.names)
    return write_report(
        out, metrics, groups, _per_image(scored, names), logits, force=cfg.force, pictures=cfg.plots is not False
    )  # None: a single evaluate draws its charts
