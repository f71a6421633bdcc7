"""Baselines on a task: ERM, reweighting, GroupDRO, IRM, CORAL, Mixup, JTT, DFR (metashift_hf.research.algorithms)
on EfficientNet-Lite0 features or fine-tuned, several seeds.

    from metashift_hf import TaskRef
    from metashift_hf.research.train import TrainConfig, train
    task = TaskRef("paper-subpop-cat-dog-p12", artifact="ARTIFACT", images="images/", options={"scale": 0.5})
    result = train(task, "runs/p12", TrainConfig(method="erm", probe="linear", seeds=3))
    print(result.summary())

``probe="linear"`` trains a linear head on frozen, cached backbone features (metashift_hf.research.features);
``probe="finetune"`` trains the whole network with the seed paper's recipe (Adam, lr 5e-5, batch 32,
random resized crop 224, flip, colour jitter, 10% greyscale), the GPU path. Every run keeps the epoch
its selection rule prefers (``select``: validation average, validation worst-group, or the test ORACLE;
the default is the method's, as the literature selects), then predicts every split and is scored with
:func:`metashift_hf.research.score.score`. The loop itself is :mod:`metashift_hf.research.fitting`.

Run management: ``seeds`` is a count (0..N-1), a range ``"3-5"`` or a list; an ``out`` holding an
earlier run of the same task and config gets the new seeds merged in; ``resume=True`` continues an
interrupted run from the seeds it finished and the last epoch of the one in progress (kept in the
cache under ``train-runs/<key>/``); each seed's head is saved as safetensors with its config; the
per-epoch log is ``log.jsonl``; ``config.toml`` holds the flags (``load_config`` reads it back).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from metashift_hf.builders.images import open_images

from ..core import __version__
from ..core.errors import EmptyResultError, InputFormatError
from ..core.fsutil import OutputExistsError, atomic_dir, exclusive_lock
from ..core.paths import cache_root
from ..hub.task_data import TaskData, TaskRef, task_ref
from ..hub.task_open import open_task
from ..models import efficientnet_lite0, require_torch
from ..scoring.predictions import TaskPredictions
from .algorithms import METHODS, SAMPLING_TEXT, algorithm_info
from .features import Backbone, image_features, load_backbone
from .fitting import (
    COLOR_JITTER,
    GREYSCALE_P,
    Checkpoints,
    FinetuneLearner,
    FitData,
    FitSettings,
    LinearLearner,
    augment_size,
    fit_seed,
)
from .score import score_plan, task_spec_hash

# what to train and the run folder live beside this module (train_config, train_runs); their public names
# are importable from here, where most callers import them
from .train_config import (
    CONFIG_KEYS,
    EPOCHS_MAX,
    PROBES,
    TrainConfig,
    config_toml,
    epoch_count,
    load_config,
    parse_seeds,
)
from .train_runs import (
    SEED_KIND,
    SeedRun,
    TrainResult,
    check_same_run,
    check_train_out,
    earlier_run,
    read_earlier_seeds,
    read_seed,
    run_key,
    settings_differ,
    train_run_key,
    write_result,
    write_seed,
)


if TYPE_CHECKING:
    from metashift_hf.tasks.plan import TaskPlan

SELECTION_SPLIT = "validation"
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Data:
    """The task as arrays: per split, image ids; what the training loop needs (:class:`fitting.FitData`)."""

    plan: "TaskPlan"
    ids: dict[str, list[str]]
    fit: FitData


def _task_data(tp: "TaskPlan") -> _Data:
    table = tp.table()
    splits = list(dict.fromkeys(table["split"]))
    if "train" not in splits or SELECTION_SPLIT not in splits:
        raise EmptyResultError(
            f"task {tp.task_id} has splits {splits}; training needs train and {SELECTION_SPLIT}",
            "choose a task with a validation split (paper-*, bin-*, the matched tasks)",
        )
    index = {c: i for i, c in enumerate(tp.classes)}
    ids, y, groups = {}, {}, {}
    for s in splits:
        part = table[table["split"] == s]
        ids[s] = list(part["image_id"])
        y[s] = np.array([index[c] for c in part["label"]], dtype=np.int64)
        groups[s] = part["group"].to_numpy(dtype=str)
    train = table[table["split"] == "train"]

    def codes(values) -> np.ndarray:  # index into the sorted distinct values
        return np.unique(np.asarray(values, dtype=str), return_inverse=True)[1].astype(np.int64)

    return _Data(tp, ids, FitData(y, groups, codes(train["group"]), codes(train["context"]), len(tp.classes)))


def _exclusive_run(work: Path | None):
    """One training run per run key at a time. Two runs of the same task and config share
    ``<cache>/train-runs/<key16>/`` (checkpoints, finished seeds; the first to finish removes it), so the second
    stops here, before any training, with an error naming the lock, instead of an OSError when the first removes
    the folder under it (issue 37; review case A4-57). The small lock file stays (removing it would let a third run
    lock a file no one else sees)."""
    if work is None:  # no output: nothing in the cache is shared
        return contextlib.nullcontext()
    work.parent.mkdir(parents=True, exist_ok=True)
    lock = work.parent / f"{work.name}.lock"
    busy = OutputExistsError(
        f"another run of the same task and config is training right now (lock {lock})",
        "wait for it to finish, then run the same command again: its seeds are merged, none is trained twice",
    )
    return exclusive_lock(lock, busy)


def _learner(torch, data: _Data, cfg: TrainConfig, bb: Backbone, images, cache_dir, progress: bool):
    """The linear probe on cached features, or the network to fine-tune; plus the feature-cache figures."""
    if cfg.probe == "linear":
        fs = image_features(
            [i for s in data.ids.values() for i in s], images, backbone=bb, cache_dir=cache_dir, progress=progress
        )
        feats = {s: fs.rows(ids) for s, ids in data.ids.items()}
        stats = {
            "computed": fs.computed,
            "cached": fs.cached,
            "seconds": round(fs.seconds, 3),
            "cache_dir": str(fs.cache_dir),
        }
        return LinearLearner(torch, feats, len(data.plan.classes), cfg.device), stats
    source = open_images(images)
    source.resolve([i for s in data.ids.values() for i in s], "error", verify=False)
    # Lite0 is loaded again with its BatchNorm layers (the backbone's are folded for inference)
    base = efficientnet_lite0(cfg.device, fold_batchnorm=False) if bb.pooled_lite0 else bb.classifier
    return FinetuneLearner(torch, base, source, data.ids, len(data.plan.classes), cfg.device), None


@dataclass
class SharedFits:
    """Selection rules trained together (``experiment compare --select all``): one trajectory per seed, each rule
    keeping its own epoch. The :func:`train` call that fits a seed under its rule also keeps the other ``rules``'
    epochs here; the ``train`` calls of those rules take them instead of training the seed again."""

    rules: tuple[str, ...]
    fits: dict[tuple[str, int], Any] = field(default_factory=dict)  # (rule, seed) -> SeedFit


def _settings(cfg: TrainConfig, also: tuple[str, ...] = ()) -> FitSettings:
    return FitSettings(
        cfg.method,
        cfg.hparams,
        cfg.select,
        cfg.sampling,
        cfg.epochs,
        cfg.lr,
        cfg.batch_size,
        cfg.weight_decay,
        cfg.device,
        also,
    )


def _predictions_frame(data: _Data, probs: dict[str, np.ndarray]) -> pd.DataFrame:
    classes = list(data.plan.classes)
    frames = []
    for s, p in probs.items():
        df = pd.DataFrame({"image_id": data.ids[s], "split": s, "prediction": [classes[i] for i in p.argmax(axis=1)]})
        for j, c in enumerate(classes):
            df[f"prob_{c}"] = p[:, j]
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


def train(
    task: "TaskRef | Any",
    out: "str | os.PathLike | None" = None,
    config: TrainConfig = TrainConfig(),
    *,
    cache_dir: "str | os.PathLike | None" = None,
    progress: bool = True,
    backbone: Backbone | None = None,
    force: bool = False,
    resume: bool = False,
    merge_from: "str | os.PathLike | None" = None,
    shared: SharedFits | None = None,
) -> TrainResult:
    """Train ``config.seeds`` runs on a task and score each; write everything to ``out`` when given.

    ``task``: a loaded ``Dataset``/``DatasetDict``, an exported folder, a Hub dataset repo id, an
    :func:`metashift_hf.hub.task_open.open_task` result, or a :class:`~metashift_hf.hub.task_data.TaskRef`
    of a task id planned on its ``artifact`` (with its ``images``, ``seed`` and ``options``; a dataset brings
    its own images and spec).
    Training seeds: ``config.seeds`` (a count N = 0..N-1, a range "3-5" or a list). ``backbone``: a loaded
    :func:`metashift_hf.research.features.load_backbone` (reused across tasks). ``out`` must be new, empty, an
    earlier run of the same task and config (its seeds are kept and the new ones merged in) or, with
    ``force``, any earlier training run (replaced). ``resume``: reuse what an interrupted run with the
    same task and config left in the cache (finished seeds, the last epoch of the unfinished one).
    ``merge_from``: another earlier run folder whose seeds are kept the same way (an experiment's
    ``runs/<task>``), when the result is written elsewhere or not at all. ``shared``: rules trained together
    (:class:`SharedFits`): a seed another rule's call already trained is taken from it, not trained again.
    """
    earlier_dir = merge_from if merge_from is not None else out if not force else None
    earlier_card = earlier_run(earlier_dir) if earlier_dir is not None else None
    merging = earlier_card is not None
    if out is not None:  # before any training: a refused --out costs nothing
        ref = task.ref if isinstance(task, TaskData) else task_ref(task)
        inputs = [ref.artifact, ref.images, ref.task]
        check_train_out(out, force=force, inputs=[i for i in inputs if isinstance(i, (str, os.PathLike))])
    cfg = config.resolved()
    t0 = time.perf_counter()
    source = open_task(task)
    tp = source.plan
    images = source.images_path
    if source.form != "artifact":  # the parquet's own bytes; an artifact's images are opened only when needed
        images = source.images()
    data = _task_data(tp)
    if cfg.select == "oracle" and "test" not in data.ids:
        raise EmptyResultError(
            f"task {tp.task_id} has no test split for the oracle selection", "use --select average or worst-group"
        )
    torch = require_torch()
    bb = backbone or load_backbone(
        cfg.backbone, image_size=cfg.image_size if cfg.probe == "linear" else None, device=cfg.device
    )
    spec_hash = task_spec_hash(tp.spec)
    key = train_run_key(spec_hash, cfg, bb.key)
    earlier: dict[int, SeedRun] = {}
    if merging:
        check_same_run(earlier_dir, earlier_card, key, cfg)
        earlier = read_earlier_seeds(Path(earlier_dir), data.plan, cfg.probe)
    work = cache_root(cache_dir) / "train-runs" / key[:16] if out is not None else None
    with _exclusive_run(work):  # before any training: a second run of this key stops here
        ckpt = Checkpoints(work, torch, resume) if work is not None else None
        if resume and work is not None and work.is_dir():
            logger.info(f"   resuming from {work}")
        learner, feature_stats = None, None
        backbone_card = (
            bb.card()
            if cfg.probe == "linear"
            else {**bb.card(), "features": "whole network fine-tuned (BatchNorm trained, not folded)"}
        )
        runs: dict[int, SeedRun] = {s: r for s, r in earlier.items()}
        threads = torch.get_num_threads()
        try:
            for s in cfg.seeds:
                if s in runs:
                    continue
                if resume and work is not None and (work / f"seed-{s}" / "run.json").is_file():
                    try:
                        runs[s] = read_seed(work / f"seed-{s}", tp, s, cfg.probe)
                        continue
                    except InputFormatError as exc:  # our own cache, damaged: train that seed again
                        logger.warning(f"warning: {exc.what}; training seed {s} again")
                fit = shared.fits.pop((cfg.select, s), None) if shared is not None else None
                if fit is None and learner is None:  # only when some seed needs training (a merge may need none)
                    learner, feature_stats = _learner(
                        torch, data, cfg, bb, images if images is not None else source.images(), cache_dir, progress
                    )
                    if cfg.probe == "linear" and cfg.device == "cpu":
                        # a 1280 x k head on batches of 64 is too small for threads to help; on a busy machine
                        # their synchronisation made each epoch ~10x slower (measured)
                        torch.set_num_threads(1)
                t_seed = time.perf_counter()
                if fit is None:
                    also = () if shared is None else tuple(r for r in shared.rules if r != cfg.select)
                    if "test" not in data.ids:
                        also = tuple(r for r in also if r != "oracle")  # that rule's own call refuses the task
                    fit = fit_seed(torch, learner, data.fit, _settings(cfg, also), s, ckpt=ckpt, progress=progress)
                    if shared is not None:
                        shared.fits.update({(rule, s): other for rule, other in fit.others.items()})
                frame = _predictions_frame(data, fit.probs)
                runs[s] = SeedRun(
                    s,
                    score_plan(TaskPredictions.read(frame, tp.classes), tp),
                    fit.selected_epoch,
                    fit.selection_value,
                    time.perf_counter() - t_seed,
                    frame,
                    fit.log,
                    fit.head,
                    fit.details,
                )
                if work is not None:  # a finished seed survives an interruption of the next one
                    with atomic_dir(work / f"seed-{s}", kind=SEED_KIND, force=True) as tmp:
                        write_seed(tmp, runs[s], cfg, tp.classes, backbone_card)
                    ckpt.drop(s)
        finally:
            torch.set_num_threads(threads)
        info = algorithm_info(cfg.method, cfg.hparams)
        card = {
            "package_version": __version__,
            "task_id": tp.task_id,
            "task_spec_hash": spec_hash,
            "task_seed": tp.spec.seed,
            "task_source": source.where,
            "task_origin": source.origin(),
            "task_overrides": dict(tp.spec.overrides),
            "artifact_hash": tp.spec.artifact_hash,
            "method": cfg.method,
            "probe": cfg.probe,
            "seeds": sorted(runs),
            "config": asdict(cfg),
            "run_key": key,
            "algorithm": asdict(info),
            "selection": cfg.select,
            "sampling": cfg.sampling,
            "sampling_rule": SAMPLING_TEXT[cfg.sampling],
            "backbone": backbone_card,
            "device": cfg.device,
            "torch_version": getattr(torch, "__version__", None),
            "model_selection": cfg.selection_rule,
            "augmentation": (
                None
                if cfg.probe == "linear"
                else f"random resized crop {augment_size(bb.classifier)[0]} (area 0.08-1, aspect 3/4-4/3), horizontal flip 0.5, "
                f"colour jitter {COLOR_JITTER} (brightness, contrast, saturation), greyscale p={GREYSCALE_P}"
            ),
            "merged_from_earlier_run": sorted(earlier),
            "features": feature_stats,
            "seconds": round(time.perf_counter() - t0, 3),
        }
        result = TrainResult(
            tp.task_id,
            replace(cfg, seeds=tuple(sorted(runs))),
            tuple(runs[s] for s in sorted(runs)),
            card,
            None if out is None else Path(out),
        )
        if out is not None:
            # out holds an earlier run of this config (found at the start, or written meanwhile by another call):
            # only the new seeds and the run's own files are written, whatever else the user keeps there stays
            merge_into_out = not force and (merge_from is None and merging or earlier_run(out) is not None)
            write_result(result, out, force=force, merge=merge_into_out)
            shutil.rmtree(work, ignore_errors=True)  # the run is complete: nothing left to resume
        return result


__all__ = [
    "TrainConfig",
    "TrainResult",
    "SeedRun",
    "SharedFits",
    "train",
    "write_result",
    "parse_seeds",
    "check_train_out",
    "earlier_run",
    "run_key",
    "settings_differ",
    "config_toml",
    "load_config",
    "METHODS",
    "PROBES",
    "CONFIG_KEYS",
    "EPOCHS_MAX",
    "epoch_count",
]
