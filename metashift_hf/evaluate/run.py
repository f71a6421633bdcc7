"""``evaluate(model, task, out)``: predictions -> scores -> groups -> report."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

from metashift_hf.builders.artifact import Artifact
from metashift_hf.builders.images import cell_bytes
from metashift_hf.builders.meta_graph_facts import DISTANCE_RULE
from metashift_hf.tasks.spec import ShiftSpec
from metashift_hf.tasks.splits import chosen_splits, split_roles
from metashift_hf.wordnet_match.imagenet import imagenet_classes

from ..core import __version__
from ..core.errors import EmptyResultError, InputFormatError, MetashiftError
from ..core.fsutil import check_out
from ..hub.task_data import TaskData, TaskRef, spec_less_dataset, task_ref
from ..hub.task_open import open_task
from ..hub.task_rows import dataset_classes
from ..models import runtime_card
from ..scoring.bugs import BUG_COLUMNS, BUG_TEST, context_bugs, meta_graph_facts
from ..scoring.groups import group_table, id_vs_ood, worst_subsets
from .config import EvalConfig
from .coverage import head_coverage
from .predict import predict
from .predictions import PrecomputedPredictions, load_scorer
from .report import REPORT_KIND, EvalReport, write_report
from .scoring import COUNTING_RULE, headline_metrics, score_images


def _task_rows(task: Any, need_images: bool, on_missing: str = "error"):
    """(TaskData or None, task_id, spec or None, per-image table, class names, byte reader or None).

    The task is resolved by :func:`open_task` (every form); a planned task id gives its rows without images
    when predictions come from a file, else it is materialised by ``TaskData.prepare`` (``on_missing``).
    A folder, repo or dataset is read as it is, its images from its own bytes; a loaded dataset without a
    shift spec is scored as task ``custom``.
    """
    own = spec_less_dataset(task)
    if own is not None:
        return (None, "custom", None) + _from_dataset(own)
    data = open_task(task)
    if data.dataset is not None:
        return (data, data.task_id, data.spec) + _from_dataset(data.dataset)
    if not need_images:
        return data, data.task_id, data.spec, _checked(data.plan.table(), data.task_id), data.classes, None
    if data.images_path is None:
        raise MetashiftError(
            f"task {data.task_id!r}: the model needs the images, and --images was not given",
            "pass --images SRC (a folder of <id>.jpg or GQA images.zip), use the task's exported "
            "folder or Hub repo (it carries its images), or --model predictions:FILE",
        )
    # the same plan, materialised by the one materialiser (never planned again)
    prepared = data.prepare(on_missing=on_missing)
    return (data, prepared.task_id, prepared.spec) + _from_dataset(prepared.dataset)


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


def _checked(table: pd.DataFrame, where: str) -> pd.DataFrame:
    """Normalise contexts to lists and refuse a repeated (image, class) row.

    An image may appear once per class it shows (collections); never twice for the same class.
    """
    table = table.reset_index(drop=True)
    table["contexts"] = [list(c) if c is not None else [] for c in table["contexts"]]
    if "community" not in table:
        table["community"] = -1
    dup = table.duplicated(["image_id", "label"], keep=False)
    if dup.any():
        ids = sorted(set(table.loc[dup, "image_id"]))[:5]
        raise InputFormatError(
            f"{where}: image(s) {ids} appear more than once for the same class",
            "a task lists each image at most once per class (no image in two splits)",
        )
    return table


def _from_dataset(dd) -> tuple[pd.DataFrame, list[str], Callable[[str], bytes]]:
    """Per-image table (split, image_id, label name, contexts, group, community), class names, byte reader."""
    import datasets

    frames, where = [], {}
    classes = dataset_classes(dd, "task dataset", ("image_id", "label", "contexts"))
    for split in sorted(dd):
        ds = dd[split]
        cols = [c for c in ("image_id", "label", "contexts", "group", "community") if c in ds.column_names]
        df = ds.select_columns(cols).to_pandas()
        df["label"] = [classes[i] for i in df["label"]]
        df.insert(0, "split", split)
        frames.append(df)
        for row, iid in enumerate(df["image_id"]):
            where.setdefault(iid, (split, row))
    table = _checked(pd.concat(frames, ignore_index=True), "task dataset")
    lock = threading.Lock()
    raw = {s: dd[s].cast_column("image", datasets.Image(decode=False)) for s in dd if "image" in dd[s].column_names}

    def read(iid: str) -> bytes:
        split, row = where[iid]
        if split not in raw:
            raise InputFormatError(
                f"task split {split!r} has no image column",
                "prepare the task with images, or use --model predictions:FILE",
            )
        with lock:  # one reader at a time into the Arrow table; decoding happens outside the lock
            cell = raw[split][row]["image"]
        return cell_bytes(cell, f"image {iid!r} (split {split!r} row {row})", iid)  # bytes only, never its path

    return table, classes, read


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
    hierarchy, mode, coverage, seed, sample = cfg.hierarchy, cfg.mode, cfg.coverage, cfg.seed, cfg.sample
    min_subset_size, alpha, force = cfg.min_subset_size, cfg.alpha, cfg.force
    if out is not None:  # before the model loads: a refused --out costs nothing
        model_file = (
            model[len("predictions:") :] if isinstance(model, str) and model.startswith("predictions:") else None
        )
        tree = hierarchy[len("tree:") :] if hierarchy.startswith("tree:") else None
        ref = task.ref if isinstance(task, TaskData) else task_ref(task)
        art_path = (
            ref.artifact.root if isinstance(ref.artifact, Artifact) else ref.artifact
        )  # a loaded one (the zoo) too
        images = ref.images if isinstance(ref.images, (str, Path)) else None
        check_out(out, REPORT_KIND, force=force, inputs=[art_path, images, model_file, tree])
    # the model first: a wrong name or a missing extra fails before any task is materialised
    loaded = load_scorer(model, cfg.device, cfg.dtype, cfg.image_size)
    data, task_id, spec, table, classes, read = _task_rows(
        task, not isinstance(loaded, PrecomputedPredictions), cfg.on_missing
    )
    facts = None if data is None else data.meta_graph  # a folder's or repo's, checked against its rows
    scored_splits = chosen_splits(cfg.splits, set(table["split"]), task_id)  # before any image is read
    table = table[table["split"].isin(scored_splits)].reset_index(drop=True)
    if sample is not None:
        table = sample_rows(table, sample, seed)
    if table.empty:
        raise EmptyResultError(f"task {task_id!r} has no images", "check the task id and the artifact")
    art = None if data is None else data.artifact
    labels = getattr(loaded, "labels", None)  # the head's label map (None: ImageNet-1k predictions file)
    if coverage is None:
        coverage, hierarchy_card = head_coverage(classes, hierarchy, labels)
    else:
        hierarchy_card = {"name": "custom coverage", "classes": {c: len(list(coverage.get(c, ()))) for c in classes}}

    ids = list(dict.fromkeys(table["image_id"]))  # each image once, even when it shows two classes
    if isinstance(loaded, PrecomputedPredictions):
        preds = loaded.predictions.for_ids(ids, source=str(loaded.path))
    else:
        preds = predict(loaded, ids, read, batch_size=cfg.batch_size, workers=cfg.workers, progress=cfg.progress)

    scored = score_images(table, preds, coverage, mode, classes)
    facts = meta_graph_facts(art, facts, scored)
    groups = group_table(scored, classes, facts.community_map() if facts is not None else None)
    tested = context_bugs(scored, groups, min_subset_size, alpha)
    for col in BUG_COLUMNS:
        groups.loc[tested.index, col] = tested[col]
    bug_rows = tested[tested["bug"]].sort_values(["q_value", "subset"], kind="stable")
    if facts is not None:
        for i in bug_rows.index:
            groups.loc[i, "distance_to_largest_community"] = facts.distance_to_largest(groups.at[i, "subset"])
    bug_rows = groups.loc[bug_rows.index]

    worst = worst_subsets(groups, min_subset_size)
    roles = split_roles(sorted(set(table["split"])), spec)
    model_card = loaded.card()
    metrics: dict[str, Any] = {
        "run": {
            "package_version": __version__,
            "task_id": task_id,
            "task_content_hash": task_content_hash(spec, table),
            "artifact_hash": (art.content_hash if art is not None else spec.artifact_hash if spec else None),
            "model": model_card,
            "mode": mode,
            "hierarchy": hierarchy_card.get("name", hierarchy),
            "hierarchy_detail": hierarchy_card,
            "seed": seed,
            "classes": classes,
            "min_subset_size": min_subset_size,
            "shift_type": spec.shift_type if spec else None,
            "splits": scored_splits,
            "sample_per_split": sample,
            "sample_rule": SAMPLE_RULE if sample is not None else None,
            "task_options": dict(spec.overrides) if spec else {},
            "task_origin": None if data is None else data.origin(),  # hub/task_data.TaskProvenance
            "dtype": model_card.get("dtype", cfg.dtype),
            "runtime": runtime_card(),
            # None: the model's own input size; else the side it was fed (a quick run, not its full-resolution score)
            "image_size": model_card.get("image_size", cfg.image_size),
        },
        "counting": COUNTING_RULE,
        "min_subset_size": min_subset_size,
        "headline": headline_metrics(scored, classes),
        "overall": _summary(groups[groups.level == "overall"].iloc[0]),
        "splits": {r["group"]: _summary(r) for _, r in groups[groups.level == "split"].iterrows()},
        "classes": _class_metrics(groups, worst, classes, coverage),
        "worst_subset": ({"subset": worst.iloc[0]["subset"], **_summary(worst.iloc[0])} if len(worst) else None),
        "id_vs_ood": _gap_metrics(groups, classes, roles),
        "bug_test": {
            "description": BUG_TEST,
            "alpha": alpha,
            "n_tests": int(tested["p_value"].notna().sum()),
            "min_n": min_subset_size,
            "distance": DISTANCE_RULE,
        },
        "context_bugs": _bug_list(bug_rows),
    }
    if out is None:
        return EvalReport(metrics)
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
        out, metrics, groups, _per_image(scored, names), logits, force=force, pictures=cfg.plots is not False
    )  # None: a single evaluate draws its charts
