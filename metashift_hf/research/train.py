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
from .algorithms import METHODS, SAMPLING_TEXT, SELECTION_SPLIT, algorithm_info
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


@dataclass(frozen=True)
class _RunOptions:
    """How a :func:`train` call runs and where its earlier seeds come from (its keyword arguments)."""

    cache_dir: "str | os.PathLike | None" = None
    progress: bool = True
    force: bool = False
    resume: bool = False
    merge_from: "str | os.PathLike | None" = None
    shared: SharedFits | None = None


class TrainRun:
    """One :func:`train` call as named steps: :meth:`open` (everything checked and read before any training: the
    output, the task, the backbone, the run key, the earlier seeds), :meth:`fit_missing_seeds` (each seed not
    already finished: trained, taken from a rule trained beside it, or read back from an interrupted run),
    :meth:`result` (the run card) and :meth:`write`."""

    def __init__(self, task: Any, out: "str | os.PathLike | None", config: TrainConfig, opts: _RunOptions) -> None:
        self.task, self.out, self.opts = task, out, opts
        self.cfg = config.resolved()
        self.t0 = time.perf_counter()
        self.runs: dict[int, SeedRun] = {}
        self.earlier: dict[int, SeedRun] = {}
        self.feature_stats: dict[str, Any] | None = None
        self._learner: Any = None

    # -- before any training ------------------------------------------------------------------------------------
    def open(self, backbone: Backbone | None) -> None:
        """Check ``out`` (a refused --out costs nothing), open the task, load the backbone, find the run key and
        read the earlier run's seeds."""
        opts, cfg = self.opts, self.cfg
        self.earlier_dir = opts.merge_from if opts.merge_from is not None else self.out if not opts.force else None
        self.earlier_card = earlier_run(self.earlier_dir) if self.earlier_dir is not None else None
        if self.out is not None:
            ref = self.task.ref if isinstance(self.task, TaskData) else task_ref(self.task)
            inputs = [i for i in (ref.artifact, ref.images, ref.task) if isinstance(i, (str, os.PathLike))]
            check_train_out(self.out, force=opts.force, inputs=inputs)
        self.source = open_task(self.task)
        self.tp = self.source.plan
        # the parquet's own bytes; an artifact's images are opened only when a seed needs training
        self.images = self.source.images_path if self.source.form == "artifact" else self.source.images()
        self.data = _task_data(self.tp)
        if cfg.select == "oracle" and "test" not in self.data.ids:
            raise EmptyResultError(
                f"task {self.tp.task_id} has no test split for the oracle selection",
                "use --select average or worst-group",
            )
        self.torch = require_torch()
        image_size = cfg.image_size if cfg.probe == "linear" else None
        self.bb = backbone or load_backbone(cfg.backbone, image_size=image_size, device=cfg.device)
        self.spec_hash = task_spec_hash(self.tp.spec)
        self.key = train_run_key(self.spec_hash, cfg, self.bb.key)
        if self.earlier_card is not None:
            check_same_run(self.earlier_dir, self.earlier_card, self.key, cfg)
            self.earlier = read_earlier_seeds(Path(self.earlier_dir), self.data.plan, cfg.probe)
        self.runs = dict(self.earlier)
        self.work = cache_root(opts.cache_dir) / "train-runs" / self.key[:16] if self.out is not None else None

    @property
    def backbone_card(self) -> dict[str, Any]:
        if self.cfg.probe == "linear":
            return self.bb.card()
        return {**self.bb.card(), "features": "whole network fine-tuned (BatchNorm trained, not folded)"}

    # -- training -----------------------------------------------------------------------------------------------
    def fit_missing_seeds(self) -> None:
        """Every seed of the config not in the earlier run: read back from the interrupted run (``resume``), taken
        from a rule trained beside it (``shared``) or trained; each finished seed kept in the cache at once."""
        torch, work = self.torch, self.work
        self.ckpt = Checkpoints(work, torch, self.opts.resume) if work is not None else None
        if self.opts.resume and work is not None and work.is_dir():
            logger.info(f"   resuming from {work}")
        threads = torch.get_num_threads()
        try:
            for s in self.cfg.seeds:
                if s in self.runs:
                    continue
                resumed = self._resumed(s)
                if resumed is not None:
                    self.runs[s] = resumed
                    continue
                self.runs[s] = self._fitted(s)
                self._keep(s)
        finally:
            torch.set_num_threads(threads)

    def _resumed(self, s: int) -> SeedRun | None:
        """Seed ``s`` as an interrupted run of this key finished it (``resume``), or None."""
        done = self.work / f"seed-{s}" if self.work is not None else None
        if not (self.opts.resume and done is not None and (done / "run.json").is_file()):
            return None
        try:
            return read_seed(done, self.tp, s, self.cfg.probe)
        except InputFormatError as exc:  # our own cache, damaged: train that seed again
            logger.warning(f"warning: {exc.what}; training seed {s} again")
            return None

    def _fitted(self, s: int) -> SeedRun:
        """Seed ``s`` trained here, or taken from the rule trained beside it (``shared``), and scored."""
        shared, cfg, data = self.opts.shared, self.cfg, self.data
        fit = shared.fits.pop((cfg.select, s), None) if shared is not None else None
        learner = self.learner() if fit is None else None  # the features are computed once, not in a seed's time
        t_seed = time.perf_counter()
        if fit is None:
            also = () if shared is None else tuple(r for r in shared.rules if r != cfg.select)
            if "test" not in data.ids:
                also = tuple(r for r in also if r != "oracle")  # that rule's own call refuses the task
            settings = _settings(cfg, also)
            fit = fit_seed(self.torch, learner, data.fit, settings, s, ckpt=self.ckpt, progress=self.opts.progress)
            if shared is not None:
                shared.fits.update({(rule, s): other for rule, other in fit.others.items()})
        frame = _predictions_frame(data, fit.probs)
        scores = score_plan(TaskPredictions.read(frame, self.tp.classes), self.tp)
        seconds = time.perf_counter() - t_seed
        return SeedRun(
            s, scores, fit.selected_epoch, fit.selection_value, seconds, frame, fit.log, fit.head, fit.details
        )

    def learner(self) -> Any:
        """The learner, made when a seed first needs training (a merge or a resume may need none)."""
        if self._learner is None:
            cfg = self.cfg
            images = self.images if self.images is not None else self.source.images()
            self._learner, self.feature_stats = _learner(
                self.torch, self.data, cfg, self.bb, images, self.opts.cache_dir, self.opts.progress
            )
            if cfg.probe == "linear" and cfg.device == "cpu":
                # a 1280 x k head on batches of 64 is too small for threads to help; on a busy machine
                # their synchronisation made each epoch ~10x slower (measured)
                self.torch.set_num_threads(1)
        return self._learner

    def _keep(self, s: int) -> None:
        """A finished seed survives an interruption of the next one (kept in the cache under the run key)."""
        if self.work is None:
            return
        with atomic_dir(self.work / f"seed-{s}", kind=SEED_KIND, force=True) as tmp:
            write_seed(tmp, self.runs[s], self.cfg, self.tp.classes, self.backbone_card)
        self.ckpt.drop(s)

    # -- the result ---------------------------------------------------------------------------------------------
    def card(self) -> dict[str, Any]:
        """The run card (run.json): what was trained, on what, how, and how long it took."""
        cfg, tp, bb = self.cfg, self.tp, self.bb
        augmentation = None
        if cfg.probe != "linear":
            augmentation = (
                f"random resized crop {augment_size(bb.classifier)[0]} (area 0.08-1, aspect 3/4-4/3), horizontal "
                f"flip 0.5, colour jitter {COLOR_JITTER} (brightness, contrast, saturation), greyscale p={GREYSCALE_P}"
            )
        return {
            "package_version": __version__,
            "task_id": tp.task_id,
            "task_spec_hash": self.spec_hash,
            "task_seed": tp.spec.seed,
            "task_source": self.source.where,
            "task_origin": self.source.origin(),
            "task_overrides": dict(tp.spec.overrides),
            "artifact_hash": tp.spec.artifact_hash,
            "method": cfg.method,
            "probe": cfg.probe,
            "seeds": sorted(self.runs),
            "config": asdict(cfg),
            "run_key": self.key,
            "algorithm": asdict(algorithm_info(cfg.method, cfg.hparams)),
            "selection": cfg.select,
            "sampling": cfg.sampling,
            "sampling_rule": SAMPLING_TEXT[cfg.sampling],
            "backbone": self.backbone_card,
            "device": cfg.device,
            "torch_version": getattr(self.torch, "__version__", None),
            "model_selection": cfg.selection_rule,
            "augmentation": augmentation,
            "merged_from_earlier_run": sorted(self.earlier),
            "features": self.feature_stats,
            "seconds": round(time.perf_counter() - self.t0, 3),
        }

    def result(self) -> TrainResult:
        runs = tuple(self.runs[s] for s in sorted(self.runs))
        out = None if self.out is None else Path(self.out)
        return TrainResult(self.tp.task_id, replace(self.cfg, seeds=tuple(sorted(self.runs))), runs, self.card(), out)

    def write(self, result: TrainResult) -> None:
        """``out``, when given: an earlier run of this config there (found at the start, or written meanwhile by
        another call) gains only the new seeds and the run's own files; whatever else the user keeps stays. The
        cached seeds go: nothing is left to resume."""
        if self.out is None:
            return
        opts = self.opts
        merging = self.earlier_card is not None
        merge_into_out = not opts.force and (opts.merge_from is None and merging or earlier_run(self.out) is not None)
        write_result(result, self.out, force=opts.force, merge=merge_into_out)
        shutil.rmtree(self.work, ignore_errors=True)


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
    The steps: :class:`TrainRun`.
    """
    run = TrainRun(task, out, config, _RunOptions(cache_dir, progress, force, resume, merge_from, shared))
    run.open(backbone)
    with _exclusive_run(run.work):  # before any training: a second run of this key stops here
        run.fit_missing_seeds()
        result = run.result()
        run.write(result)
    return result


__all__ = [
    "TrainConfig",
    "TrainResult",
    "SeedRun",
    "SharedFits",
    "TrainRun",
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
