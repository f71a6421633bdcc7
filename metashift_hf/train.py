"""Baselines on a task: ERM, group reweighting or GroupDRO on EfficientNet-Lite0, several seeds.

    from metashift_hf.train import TrainConfig, train
    result = train("paper-subpop-cat-dog-p12", "ARTIFACT", "images/", "runs/p12",
                   TrainConfig(method="erm", probe="linear", seeds=3), scale=0.5)
    print(result.summary())

``probe="linear"`` trains a linear head on frozen, cached backbone features (metashift_hf.features);
``probe="finetune"`` trains the whole network with the seed paper's recipe (Adam, lr 5e-5, batch 32,
random resized crop 224, flip, colour jitter, 10% greyscale), the GPU path. Every run keeps the epoch
with the best average accuracy on the task's ID validation split, then predicts every split and is
scored with :func:`metashift_hf.score.score`.
"""
from __future__ import annotations

import copy
import io
import json
import math
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd
from PIL import Image, ImageEnhance

from metashift_hf.builders.images import open_images

from .core import __version__
from .core import options as opt
from .core.errors import EmptyResultError, UnknownNameError
from .core.fsutil import atomic_dir, check_out
from .models import efficientnet_lite0, require_torch
from .features import FEATURE_DIM, Backbone, image_features, load_backbone
from .score import Predictions, Scores, score_plan, task_spec_hash
from .task_source import open_task

if TYPE_CHECKING:
    from metashift_hf.builders.shifts import TaskPlan

Method = Literal["erm", "reweight", "groupdro"]
Probe = Literal["linear", "finetune"]
METHODS: tuple[str, ...] = ("erm", "reweight", "groupdro")
PROBES: tuple[str, ...] = ("linear", "finetune")
SELECTION_SPLIT = "validation"
SELECTION_RULE = ("model selection: the epoch with the highest average accuracy on the ID validation split "
                  "('validation', drawn from the training distribution); ties go to the earlier epoch")
# (epochs, lr, batch size) per probe. Fine-tuning: the seed paper's Adam / 5e-5 / 32.
DEFAULTS = {"linear": (50, 1e-3, 64), "finetune": (10, 5e-5, 32)}
COLOR_JITTER = 0.4  # brightness, contrast and saturation factors drawn from [0.6, 1.4]
GREYSCALE_P = 0.1

TRAIN_KIND = "training run"  # the marker kind of a train --out folder (core.fsutil)


@dataclass(frozen=True)
class TrainConfig:
    """What to train; ``None`` epochs/lr/batch_size take the probe's defaults (:data:`DEFAULTS`)."""

    method: Method = "erm"
    probe: Probe = "linear"
    seeds: int = 1
    device: str = "cpu"
    epochs: int | None = None
    lr: float | None = None
    batch_size: int | None = None
    weight_decay: float = 0.0
    groupdro_eta: float = 0.01  # GroupDRO step size on the group weights (Sagawa et al. 2020)
    image_size: int | None = None  # linear probe: backbone input size (None: the model's 224)

    def resolved(self) -> "TrainConfig":
        if self.method not in METHODS:
            raise UnknownNameError(f"unknown method {self.method!r}", f"use one of: {', '.join(METHODS)}")
        if self.probe not in PROBES:
            raise UnknownNameError(f"unknown probe {self.probe!r}", f"use one of: {', '.join(PROBES)}")
        if not isinstance(self.device, str) or not self.device:
            raise opt.OptionError(f"device {self.device!r} is not a device name", "use cpu, cuda or cuda:N")
        epochs, lr, bs = DEFAULTS[self.probe]
        # None takes the probe's default; anything given is checked (0, NaN, inf and negatives refused)
        return replace(self, seeds=opt.positive_int(self.seeds, "seeds"),
                       epochs=epochs if self.epochs is None else opt.positive_int(self.epochs, "epochs"),
                       lr=lr if self.lr is None else opt.positive_float(self.lr, "lr"),
                       batch_size=bs if self.batch_size is None else opt.positive_int(self.batch_size, "batch_size"),
                       weight_decay=opt.non_negative_float(self.weight_decay, "weight_decay"),
                       groupdro_eta=opt.positive_float(self.groupdro_eta, "groupdro_eta"),
                       image_size=opt.optional(opt.positive_int, self.image_size, "image_size"))


@dataclass(frozen=True)
class SeedRun:
    """One seed: its scores, the epoch model selection kept and that epoch's validation accuracy."""

    seed: int
    scores: Scores
    selected_epoch: int
    validation_accuracy: float
    seconds: float
    predictions: pd.DataFrame = field(repr=False, compare=False)


@dataclass(frozen=True)
class TrainResult:
    task_id: str
    config: TrainConfig
    runs: tuple[SeedRun, ...]
    card: dict[str, Any]
    out: Path | None

    def aggregate(self) -> dict[str, Any]:
        """Mean ± std (ddof 1; null with one seed) over seeds of every headline figure and per-group accuracy."""
        dicts = [r.scores.to_dict() for r in self.runs]
        metrics = {}
        for key in ("average", "adjusted_average", "id", "ood", "drop_pct", "balanced_accuracy", "macro_f1", "ece"):
            metrics[key] = _mean_std([d[key] for d in dicts])
        metrics["worst_group"] = {**_mean_std([d["worst_group"]["accuracy"] for d in dicts]),
                                  "groups": [d["worst_group"]["group"] for d in dicts]}
        rows: dict[tuple[str, str], list[float]] = {}
        for d in dicts:
            for g in d["per_group"]:
                rows.setdefault((g["split"], g["group"]), []).append(g["accuracy"])
        metrics["per_group"] = [{"split": s, "group": g, "n": next(x["n"] for x in dicts[0]["per_group"]
                                                                 if (x["split"], x["group"]) == (s, g)),
                                 **_mean_std(v)} for (s, g), v in rows.items()]
        metrics["splits"] = {s: {"average": _mean_std([d["splits"][s]["average"] for d in dicts]),
                                 "worst_group": _mean_std([d["splits"][s]["worst_group"]["accuracy"] for d in dicts])}
                             for s in dicts[0]["splits"]}
        return {"task_id": self.task_id, "method": self.config.method, "probe": self.config.probe,
                "n_seeds": len(self.runs), "seeds": [r.seed for r in self.runs], "std_ddof": 1,
                "headline_split": dicts[0]["headline_split"], "id_split": dicts[0]["id_split"],
                "ood_split": dicts[0]["ood_split"], "model_selection": SELECTION_RULE,
                "selected_epochs": [r.selected_epoch for r in self.runs], **metrics}

    def summary(self) -> str:
        a = self.aggregate()
        lines = [f"{self.task_id}: {self.config.method} / {self.config.probe} probe on {self.card['backbone']['name']}, "
                 f"{a['n_seeds']} seed(s); {SELECTION_RULE}",
                 f"{a['headline_split']}: average {_pm(a['average'])}, worst group {_pm(a['worst_group'])}, "
                 f"adjusted {_pm(a['adjusted_average'])}"]
        if a["id"]["mean"] is not None and a["ood"]["mean"] is not None:
            lines.append(f"ID ({a['id_split']}) {_pm(a['id'])} vs OOD ({a['ood_split']}) {_pm(a['ood'])}, "
                         f"Drop% {_pm(a['drop_pct'], scale=1, unit='')}")
        return "\n".join(lines)

    def markdown(self) -> str:
        a = self.aggregate()
        out = [f"# {self.task_id}: {self.config.method}, {self.config.probe} probe", "", self.summary().replace("\n", "  \n"),
               "", f"Mean ± std over {a['n_seeds']} seeds (ddof 1).", "",
               "| split | group | n | accuracy |", "|---|---|---:|---:|"]
        out += [f"| {g['split']} | {g['group']} | {g['n']} | {_pm(g)} |" for g in a["per_group"]]
        out += ["", "| seed | selected epoch | validation accuracy | headline average | worst group |", "|---:|---:|---:|---:|---|"]
        for r in self.runs:
            h = r.scores.headline
            out.append(f"| {r.seed} | {r.selected_epoch} | {100 * r.validation_accuracy:.1f}% | {100 * h.average:.1f}% | "
                       f"{h.worst_group.group} {100 * h.worst_group.accuracy:.1f}% |")
        return "\n".join(out) + "\n"


def _mean_std(values: list) -> dict[str, Any]:
    vals = [v for v in values if v is not None]
    if len(vals) != len(values) or not vals:
        return {"mean": None, "std": None, "values": values}
    arr = np.asarray(vals, dtype=np.float64)
    return {"mean": float(arr.mean()), "std": float(arr.std(ddof=1)) if arr.size > 1 else None, "values": vals}


def _pm(m: dict, scale: float = 100.0, unit: str = "%") -> str:
    if m["mean"] is None:
        return "n/a"
    std = "" if m["std"] is None else f" ± {scale * m['std']:.1f}"
    return f"{scale * m['mean']:.1f}{std}{unit}"


@dataclass(frozen=True)
class _Data:
    """The task as arrays: per split, image ids, class indices; train group indices for reweight/GroupDRO."""

    plan: "TaskPlan"
    ids: dict[str, list[str]]
    y: dict[str, np.ndarray]
    train_groups: np.ndarray
    n_groups: int


def _task_data(tp: "TaskPlan") -> _Data:
    table = tp.table()
    splits = list(dict.fromkeys(table["split"]))
    if "train" not in splits or SELECTION_SPLIT not in splits:
        raise EmptyResultError(f"task {tp.task_id} has splits {splits}; training needs train and {SELECTION_SPLIT}",
                               "choose a task with a validation split (paper-*, bin-*, the matched tasks)")
    index = {c: i for i, c in enumerate(tp.classes)}
    ids, y = {}, {}
    for s in splits:
        part = table[table["split"] == s]
        ids[s] = list(part["image_id"])
        y[s] = np.array([index[c] for c in part["label"]], dtype=np.int64)
    train_group = list(table.loc[table["split"] == "train", "group"])
    names = sorted(set(train_group))
    return _Data(tp, ids, y, np.array([names.index(g) for g in train_group], dtype=np.int64), len(names))


class _Objective:
    """ERM, group-balanced reweighting or online GroupDRO (Sagawa et al. 2020) over a batch's losses."""

    def __init__(self, torch, method: str, groups: np.ndarray, n_groups: int, eta: float, device: str) -> None:
        self.torch, self.method, self.eta = torch, method, eta
        counts = np.bincount(groups, minlength=n_groups).astype(np.float64)
        # reweight: each group carries the same total weight in the objective
        self.group_weight = torch.tensor(1.0 / np.maximum(counts, 1), dtype=torch.float32, device=device)
        self.q = torch.full((n_groups,), 1.0 / n_groups, device=device)
        self.n_groups = n_groups

    def __call__(self, losses, groups):
        torch = self.torch
        if self.method == "erm":
            return losses.mean()
        if self.method == "reweight":
            w = self.group_weight[groups]
            return (w * losses).sum() / w.sum()
        sums = torch.zeros(self.n_groups, device=losses.device).index_add_(0, groups, losses)
        counts = torch.zeros(self.n_groups, device=losses.device).index_add_(0, groups, torch.ones_like(losses))
        present = counts > 0
        group_loss = torch.where(present, sums / counts.clamp(min=1), torch.zeros_like(sums))
        with torch.no_grad():  # exponentiated-gradient ascent on the groups seen in this batch
            self.q = self.q * torch.exp(self.eta * group_loss.detach() * present)
            self.q = self.q / self.q.sum()
        return (self.q * group_loss).sum()


def _linear_runs(data: _Data, feats: dict[str, np.ndarray], cfg: TrainConfig, progress: bool):
    """Yield (seed, probabilities per split, selected epoch, validation accuracy) for each seed."""
    torch = require_torch()
    device = cfg.device
    mean, std = feats["train"].mean(axis=0), feats["train"].std(axis=0) + 1e-6  # standardise on train only
    x = {s: torch.from_numpy((f - mean) / std).float().to(device) for s, f in feats.items()}
    ytr = torch.from_numpy(data.y["train"]).to(device)
    gtr = torch.from_numpy(data.train_groups).to(device)
    k = len(data.plan.classes)
    from tqdm.auto import tqdm

    threads = torch.get_num_threads()
    if device == "cpu":
        # a 1280 x k head on batches of 64 is too small for threads to help; on a busy machine their
        # synchronisation made each epoch ~10x slower (measured)
        torch.set_num_threads(1)
    try:
        yield from _linear_seeds(torch, data, x, ytr, gtr, k, cfg, progress, tqdm)
    finally:
        torch.set_num_threads(threads)


def _linear_seeds(torch, data: _Data, x, ytr, gtr, k: int, cfg: TrainConfig, progress: bool, tqdm):
    device = cfg.device
    for seed in range(cfg.seeds):
        torch.manual_seed(seed)
        head = torch.nn.Linear(FEATURE_DIM, k).to(device)
        opt = torch.optim.Adam(head.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        objective = _Objective(torch, cfg.method, data.train_groups, data.n_groups, cfg.groupdro_eta, device)
        gen = torch.Generator().manual_seed(seed)
        best = (-1.0, 0, None)
        n = ytr.shape[0]
        for epoch in tqdm(range(1, cfg.epochs + 1), desc=f"train linear seed {seed}", unit="epoch", disable=not progress):
            head.train()
            for idx in torch.randperm(n, generator=gen).to(device).split(cfg.batch_size):
                loss = objective(torch.nn.functional.cross_entropy(head(x["train"][idx]), ytr[idx], reduction="none"),
                                 gtr[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
            head.eval()
            with torch.no_grad():
                val = float((head(x[SELECTION_SPLIT]).argmax(1).cpu().numpy() == data.y[SELECTION_SPLIT]).mean())
            if val > best[0]:
                best = (val, epoch, {kk: v.detach().clone() for kk, v in head.state_dict().items()})
        head.load_state_dict(best[2])
        head.eval()
        with torch.no_grad():
            probs = {s: torch.softmax(head(xs), dim=1).cpu().numpy() for s, xs in x.items()}
        yield seed, probs, best[1], best[0]


def _augment(data: bytes, rng: np.random.Generator, size: int, mean, std) -> np.ndarray:
    """Random resized crop (area 8-100%, aspect 3/4-4/3) to ``size``, flip, colour jitter, 10% greyscale."""
    with Image.open(io.BytesIO(data)) as im:
        im = im.convert("RGB")
        w, h = im.size
        box = None
        for _ in range(10):
            area = w * h * rng.uniform(0.08, 1.0)
            ratio = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
            cw, ch = round(math.sqrt(area * ratio)), round(math.sqrt(area / ratio))
            if 0 < cw <= w and 0 < ch <= h:
                left, top = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
                box = (left, top, left + cw, top + ch)
                break
        if box is None:  # fall back to the centre square, as torchvision does
            side = min(w, h)
            box = ((w - side) // 2, (h - side) // 2, (w - side) // 2 + side, (h - side) // 2 + side)
        im = im.resize((size, size), Image.Resampling.BILINEAR, box=box)
        if rng.random() < 0.5:
            im = im.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        for enhance in [ImageEnhance.Brightness, ImageEnhance.Contrast, ImageEnhance.Color][::1 if rng.random() < 0.5 else -1]:
            im = enhance(im).enhance(rng.uniform(1 - COLOR_JITTER, 1 + COLOR_JITTER))
        if rng.random() < GREYSCALE_P:
            im = im.convert("L").convert("RGB")
        arr = np.asarray(im, dtype=np.float32) / 255.0
    arr = (arr - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    return np.ascontiguousarray(arr.transpose(2, 0, 1))


def _finetune_runs(data: _Data, images, cfg: TrainConfig, progress: bool):
    """Fine-tune the whole backbone per seed; yield like :func:`_linear_runs`."""
    from tqdm.auto import tqdm

    torch = require_torch()
    source = open_images(images)
    all_ids = [i for s in data.ids.values() for i in s]
    source.resolve(all_ids, "error", verify=False)
    base = efficientnet_lite0(cfg.device, fold_batchnorm=False)
    prep = base.preprocessing
    k = len(data.plan.classes)
    workers = max(1, min(8, os.cpu_count() or 1))

    def predict_probs(model, ids: list[str]) -> np.ndarray:
        model.eval()
        out = []
        with ThreadPoolExecutor(workers) as pool, torch.no_grad():
            for i in range(0, len(ids), 64):
                batch = np.stack(list(pool.map(lambda iid: prep(source.read(iid)), ids[i:i + 64])))
                out.append(torch.softmax(model(torch.from_numpy(batch).to(cfg.device)), 1).cpu().numpy())
        return np.concatenate(out)

    ytr = torch.from_numpy(data.y["train"]).to(cfg.device)
    gtr = torch.from_numpy(data.train_groups).to(cfg.device)
    for seed in range(cfg.seeds):
        torch.manual_seed(seed)
        model = copy.deepcopy(base.forward)
        model._fc = torch.nn.Linear(FEATURE_DIM, k)
        model.to(cfg.device)
        opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        objective = _Objective(torch, cfg.method, data.train_groups, data.n_groups, cfg.groupdro_eta, cfg.device)
        order_rng = np.random.default_rng(seed)
        best = (-1.0, 0, None)
        n = len(data.ids["train"])
        for epoch in range(1, cfg.epochs + 1):
            model.train()
            order = order_rng.permutation(n)
            bar = tqdm(total=n, desc=f"finetune seed {seed} epoch {epoch}", unit="img", disable=not progress)
            with ThreadPoolExecutor(workers) as pool:
                for start in range(0, n, cfg.batch_size):
                    idx = order[start:start + cfg.batch_size]
                    # one generator per (seed, epoch, image): the same augmentations whatever the thread order
                    batch = np.stack(list(pool.map(
                        lambda i: _augment(source.read(data.ids["train"][i]), np.random.default_rng([seed, epoch, int(i)]),
                                           prep.crop, prep.mean, prep.std), idx)))
                    t_idx = torch.from_numpy(idx).to(cfg.device)
                    logits = model(torch.from_numpy(batch).to(cfg.device))
                    loss = objective(torch.nn.functional.cross_entropy(logits, ytr[t_idx], reduction="none"), gtr[t_idx])
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    bar.update(len(idx))
            bar.close()
            val = float((predict_probs(model, data.ids[SELECTION_SPLIT]).argmax(1) == data.y[SELECTION_SPLIT]).mean())
            if val > best[0]:
                best = (val, epoch, copy.deepcopy(model.state_dict()))
        model.load_state_dict(best[2])
        yield seed, {s: predict_probs(model, ids) for s, ids in data.ids.items()}, best[1], best[0]


def _predictions_frame(data: _Data, probs: dict[str, np.ndarray]) -> pd.DataFrame:
    classes = list(data.plan.classes)
    frames = []
    for s, p in probs.items():
        df = pd.DataFrame({"image_id": data.ids[s], "split": s,
                           "prediction": [classes[i] for i in p.argmax(axis=1)]})
        for j, c in enumerate(classes):
            df[f"prob_{c}"] = p[:, j]
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


def train(task: Any, artifact: "str | os.PathLike | None" = None, images: "str | os.PathLike | None" = None,
          out: "str | os.PathLike | None" = None, config: TrainConfig = TrainConfig(), *, seed: int | None = None,
          cache_dir: "str | os.PathLike | None" = None, progress: bool = True, backbone: Backbone | None = None,
          force: bool = False, **overrides: Any) -> TrainResult:
    """Train ``config.seeds`` runs on a task and score each; write everything to ``out`` when given.

    ``task``: a loaded ``Dataset``/``DatasetDict``, an exported folder, a Hub dataset repo id, an
    :func:`metashift_hf.task_source.open_task` result, or a task id planned on ``artifact`` (then
    ``images``, ``seed`` and size ``overrides`` apply; a dataset brings its own images and spec).
    Training seeds are 0..seeds-1. ``backbone``: a loaded :func:`metashift_hf.features.load_backbone`
    (reused across tasks). ``out`` must be new, empty or (with ``force``) an earlier training run.
    """
    if out is not None:  # before any training: a refused --out costs nothing
        check_out(out, TRAIN_KIND, force=force, inputs=[artifact, images, task if isinstance(task, str) else None])
    cfg = config.resolved()
    t0 = time.perf_counter()
    source = open_task(task, artifact=artifact, images=images, seed=seed, options=overrides)
    tp = source.plan
    if source.dataset is not None:  # the parquet's own bytes; an artifact's images are opened only when needed
        images = source.images()
    data = _task_data(tp)
    feature_stats: dict[str, Any] | None = None
    if cfg.probe == "linear":
        bb = backbone or load_backbone(image_size=cfg.image_size, device=cfg.device)
        fs = image_features([i for s in data.ids.values() for i in s], images, backbone=bb, cache_dir=cache_dir,
                            progress=progress)
        feats = {s: fs.rows(ids) for s, ids in data.ids.items()}
        feature_stats = {"computed": fs.computed, "cached": fs.cached, "seconds": round(fs.seconds, 3),
                         "cache_dir": str(fs.cache_dir)}
        backbone_card = bb.card()
        runs_iter = _linear_runs(data, feats, cfg, progress)
    else:
        bb = backbone or load_backbone(device=cfg.device)
        backbone_card = {**bb.card(), "features": "whole network fine-tuned (BatchNorm trained, not folded)"}
        runs_iter = _finetune_runs(data, images, cfg, progress)
    runs = []
    t_seed = time.perf_counter()
    for s, probs, epoch, val in runs_iter:
        frame = _predictions_frame(data, probs)
        preds = Predictions.read(frame, tp.classes)
        runs.append(SeedRun(s, score_plan(preds, tp), epoch, val, time.perf_counter() - t_seed, frame))
        t_seed = time.perf_counter()
    torch = sys.modules.get("torch")
    card = {"package_version": __version__, "task_id": tp.task_id, "task_spec_hash": task_spec_hash(tp.spec),
            "task_seed": tp.spec.seed, "task_source": source.where, "task_overrides": dict(tp.spec.overrides), "artifact_hash": tp.spec.artifact_hash,
            "method": cfg.method, "probe": cfg.probe, "seeds": list(range(cfg.seeds)), "config": asdict(cfg),
            "backbone": backbone_card, "device": cfg.device,
            "torch_version": getattr(torch, "__version__", None), "model_selection": SELECTION_RULE,
            "augmentation": (None if cfg.probe == "linear" else
                             f"random resized crop {bb.preprocessing.crop} (area 0.08-1, aspect 3/4-4/3), horizontal flip 0.5, "
                             f"colour jitter {COLOR_JITTER} (brightness, contrast, saturation), greyscale p={GREYSCALE_P}"),
            "features": feature_stats, "seconds": round(time.perf_counter() - t0, 3)}
    result = TrainResult(tp.task_id, cfg, tuple(runs), card, None if out is None else Path(out))
    if out is not None:
        write_result(result, out, force=force)
    return result


def write_result(result: TrainResult, out: "str | os.PathLike", force: bool = False) -> None:
    """``out/``: scores.json (aggregate), scores.md, run_card.json, seed-<s>/{predictions.csv, scores.json, scores.md}."""
    with atomic_dir(out, kind=TRAIN_KIND, force=force) as tmp:
        for r in result.runs:
            d = tmp / f"seed-{r.seed}"
            d.mkdir()
            r.predictions.to_csv(d / "predictions.csv", index=False)
            r.scores.write_into(d)
        (tmp / "scores.json").write_text(json.dumps(result.aggregate(), indent=2) + "\n")
        (tmp / "scores.md").write_text(result.markdown())
        (tmp / "run_card.json").write_text(json.dumps(result.card, indent=2, default=str) + "\n")


__all__ = ["TrainConfig", "TrainResult", "SeedRun", "train", "write_result", "METHODS", "PROBES"]
