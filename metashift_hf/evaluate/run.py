"""``evaluate(model, task, out)``: the task read through the hub -> its rows -> the model's outputs -> scores ->
groups and context bugs -> the report. Each step is a named function of the module it belongs to
(``scored_task``: what is scored; ``scoring``: per-image scores; ``metrics``: the report's numbers; ``report``:
the folder); this module only composes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from metashift_hf.builders.artifact import Artifact

from ..core.fsutil import check_out
from ..hub.task_data import TaskData, TaskRef, task_ref
from .config import EvalConfig
from .coverage import task_coverage
from .metrics import report_metrics, run_card, scored_groups
from .predictions import PrecomputedPredictions, load_scorer
from .report import REPORT_KIND, EvalReport, write_evaluation
from .scored_task import head_outputs, open_scored, scored_rows
from .scoring import score_images


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
    labels = getattr(loaded, "labels", None)  # the head's label map (None: ImageNet-1k predictions file)
    data = open_scored(task, pixels=not isinstance(loaded, PrecomputedPredictions), on_missing=cfg.on_missing)
    facts = data.meta_graph  # a folder's or repo's, checked against its rows (before any image is read)
    table, splits = scored_rows(data, cfg)
    coverage, hierarchy_card = task_coverage(data.classes, cfg.hierarchy, labels, cfg.coverage)
    preds = head_outputs(loaded, data, table, cfg)
    scored = score_images(table, preds, coverage, cfg.mode, data.classes)
    groups, tested, bug_rows = scored_groups(scored, data, facts, cfg.min_subset_size, cfg.alpha)
    run = run_card(data, table, loaded.card(), hierarchy_card, splits, cfg)
    metrics = report_metrics(run, scored, groups, tested, bug_rows, coverage, data, cfg)
    if out is None:
        return EvalReport(metrics)
    return write_evaluation(out, metrics, groups, scored, preds, labels, cfg)


def _check_out(out: str | Path, model: Any, task: Any, cfg: EvalConfig) -> None:
    """Refuse an ``out`` that would replace something not ours or hold one of the run's inputs."""
    model_file = model[len("predictions:") :] if isinstance(model, str) and model.startswith("predictions:") else None
    tree = cfg.hierarchy[len("tree:") :] if cfg.hierarchy.startswith("tree:") else None
    ref = task.ref if isinstance(task, TaskData) else task_ref(task)
    art_path = ref.artifact.root if isinstance(ref.artifact, Artifact) else ref.artifact  # a loaded one (the zoo) too
    images = ref.images if isinstance(ref.images, (str, Path)) else None
    check_out(out, REPORT_KIND, force=cfg.force, inputs=[art_path, images, model_file, tree])


__all__ = ["evaluate"]
