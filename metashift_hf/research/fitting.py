"""The training loop every algorithm and both probes share: batches, epochs, model selection, the
per-epoch log, checkpoints (resume).

:mod:`metashift_hf.research.train` builds a learner (:class:`LinearLearner` on cached features, or
:class:`FinetuneLearner` on images) and calls :func:`fit_seed` once per seed; the algorithm's update
rule and its stages come from :mod:`metashift_hf.research.algorithms` (``Algorithm.fit`` is run on a
:class:`SeedLoop`: one training stage, or JTT's and DFR's own stages, through the loop's steps). Randomness is drawn per (seed, epoch) — batch order,
Mixup coefficients, dropout, augmentation — so a run resumed from an epoch checkpoint continues
exactly as the uninterrupted run would have (tested).
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from PIL import Image, ImageEnhance

from metashift_hf.builders.images import ImageSource

from ..core.errors import MetashiftError
from ..core.fsutil import atomic_file
from ..models import Preprocessing, open_rgb
from ..models.outputs import head_linear
from .algorithms import (
    ORACLE_SPLIT,
    SELECTION_SPLIT,
    Algorithm,
    balanced_batches,
    dead_schedules,
    get_algorithm,
    selection_score,
)


logger = logging.getLogger(__name__)

COLOR_JITTER = 0.4  # brightness, contrast and saturation factors drawn from [0.6, 1.4]
GREYSCALE_P = 0.1


@dataclass(frozen=True)
class FitData:
    """The task as arrays: class index and group name of every row per split; train group/environment indices."""

    y: dict[str, np.ndarray]
    groups: dict[str, np.ndarray]  # group name (class(context)) per row
    train_groups: np.ndarray  # index into the sorted training groups
    train_envs: np.ndarray  # index into the sorted training contexts (environments)
    n_classes: int

    @property
    def n_groups(self) -> int:
        return int(self.train_groups.max()) + 1 if self.train_groups.size else 0

    @property
    def n_envs(self) -> int:
        return int(self.train_envs.max()) + 1 if self.train_envs.size else 0


@dataclass(frozen=True)
class FitSettings:
    method: str
    hparams: Mapping[str, float]
    select: str  # average | worst-group | oracle
    sampling: str  # shuffle | group-balanced | domain-balanced
    epochs: int
    lr: float
    batch_size: int
    weight_decay: float
    device: str
    # more rules kept over the same trajectory (experiment compare --select all trains once): each rule's best
    # epoch is tracked beside ``select``'s and returned in SeedFit.others
    also: tuple[str, ...] = ()


@dataclass(frozen=True)
class SeedFit:
    """One seed's outcome: probabilities per split, the kept epoch, its selection score, the log, the head."""

    seed: int
    probs: dict[str, np.ndarray]
    selected_epoch: int
    selection_value: float
    log: tuple[dict[str, Any], ...]
    head: dict[str, np.ndarray]
    details: dict[str, Any]
    others: Mapping[str, "SeedFit"] = field(default_factory=dict)  # FitSettings.also's rules: rule -> its fit


def _epoch_seed(seed: int, epoch: int, stream: int = 0) -> int:
    return int(np.random.SeedSequence([seed, epoch, stream]).generate_state(1)[0])


def epoch_batches(
    sampling: str, groups: np.ndarray, envs: np.ndarray, batch_size: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """One epoch's batches of row indices: ``shuffle`` (a permutation cut into batches) or ceil(n / batch_size)
    batches drawn equally from each group (``group-balanced``) or environment (``domain-balanced``).
    The training loop and :func:`metashift_hf.research.loader.loader` both draw their batches here."""
    n = len(groups)
    if sampling == "shuffle":
        order = rng.permutation(n)
        return [order[i : i + batch_size] for i in range(0, n, batch_size)]
    keys = groups if sampling == "group-balanced" else envs
    return balanced_batches(keys, batch_size, math.ceil(n / batch_size), rng)


class LinearLearner:
    """A linear head on frozen features, standardised with the training split's mean and std."""

    kind = "linear"

    def __init__(self, torch: Any, feats: Mapping[str, np.ndarray], n_classes: int, device: str) -> None:
        self.torch, self.device, self.n_classes = torch, device, n_classes
        self.mean, self.std = feats["train"].mean(axis=0), feats["train"].std(axis=0) + 1e-6
        self.x = {s: torch.from_numpy((f - self.mean) / self.std).float().to(device) for s, f in feats.items()}
        self.dim = int(feats["train"].shape[1])

    def new_module(self):
        return self.torch.nn.Linear(self.dim, self.n_classes).to(self.device)

    def batch(self, idx: np.ndarray, seed: int, epoch: int):
        return self.x["train"][self.torch.from_numpy(idx).to(self.device)]

    def forward(self, module, xb):
        out = module(xb)
        return out, out  # no learned representation before the head: the logits stand in for it

    def probs(self, module, splits) -> dict[str, np.ndarray]:
        module.eval()
        with self.torch.no_grad():
            return {s: self.torch.softmax(module(self.x[s]), dim=1).cpu().numpy() for s in splits}

    def features(self, module, split: str) -> np.ndarray:
        return self.x[split].cpu().numpy()

    def set_head(self, module, weight: np.ndarray, bias: np.ndarray) -> None:
        with self.torch.no_grad():
            module.weight.copy_(self.torch.from_numpy(weight))
            module.bias.copy_(self.torch.from_numpy(bias))

    def head(self, module) -> dict[str, np.ndarray]:
        """The head as saved (safetensors): logits = ((features - feature_mean) / feature_std) @ weight.T + bias."""
        return {
            "weight": module.weight.detach().cpu().numpy().copy(),
            "bias": module.bias.detach().cpu().numpy().copy(),
            "feature_mean": self.mean.astype(np.float32),
            "feature_std": self.std.astype(np.float32),
        }


def augment(data: bytes, rng: np.random.Generator, size: int, mean, std) -> np.ndarray:
    """Random resized crop (area 8-100%, aspect 3/4-4/3) to ``size``, flip, colour jitter, 10% greyscale."""
    with open_rgb(data) as im:
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
        for enhance in [ImageEnhance.Brightness, ImageEnhance.Contrast, ImageEnhance.Color][
            :: 1 if rng.random() < 0.5 else -1
        ]:
            im = enhance(im).enhance(rng.uniform(1 - COLOR_JITTER, 1 + COLOR_JITTER))
        if rng.random() < GREYSCALE_P:
            im = im.convert("L").convert("RGB")
        arr = np.asarray(im, dtype=np.float32) / 255.0
    arr = (arr - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    return np.ascontiguousarray(arr.transpose(2, 0, 1))


def augment_size(base: Any) -> tuple[int, tuple, tuple]:
    """(crop side, mean, std) for :func:`augment` from a model's preprocessing: a Preprocessing, or a
    transformers image processor's card (``crop_size``/``size``, ``image_mean``/``image_std``)."""
    prep = base.preprocessing
    if isinstance(prep, Preprocessing):
        return prep.crop, prep.mean, prep.std
    card = base.preprocessing_card()  # an hf: model's image processor: its sizes and normalisation
    card = card if isinstance(card, dict) else {}
    size = card.get("crop_size") if card.get("do_center_crop") else None
    size = size or card.get("size")
    side = size if isinstance(size, int) else (size or {}).get("height") or (size or {}).get("shortest_edge")
    if not isinstance(side, int) or side < 1:
        raise MetashiftError(
            f"fine-tuning {base.name}: no image side in its preprocessing ({card})",
            "use --probe linear, or a model whose image processor names its size",
        )
    if card.get("do_normalize"):
        return side, tuple(card["image_mean"]), tuple(card["image_std"])
    return side, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)


class FinetuneLearner:
    """The whole network (``base``: a Classifier whose forward is a torch module, BatchNorm kept) with a new
    head in place of its last Linear layer (features.head_linear), on augmented images."""

    kind = "finetune"

    def __init__(
        self, torch: Any, base: Any, source: ImageSource, ids: Mapping[str, list[str]], n_classes: int, device: str
    ) -> None:
        self.torch, self.base, self.source, self.ids, self.n_classes, self.device = (
            torch,
            base,
            source,
            ids,
            n_classes,
            device,
        )
        self.body, self.head_name = head_linear(torch, base)
        self.size = augment_size(base)
        self.workers = max(1, min(8, os.cpu_count() or 1))
        self._rep = None

    def _head(self, module):
        return module.get_submodule(self.head_name)

    def new_module(self):
        model = copy.deepcopy(self.body)
        parent, _, leaf = self.head_name.rpartition(".")
        head = self.torch.nn.Linear(self._head(model).in_features, self.n_classes)
        setattr(model.get_submodule(parent) if parent else model, leaf, head)

        def keep_input(_module, inputs):  # the pooled features entering the head: CORAL's representation
            self._rep = inputs[0]

        head.register_forward_pre_hook(keep_input)
        return model.to(self.device)

    def batch(self, idx: np.ndarray, seed: int, epoch: int):
        train = self.ids["train"]
        with ThreadPoolExecutor(self.workers) as pool:
            # one generator per (seed, epoch, image): the same augmentations whatever the thread order
            arrays = list(
                pool.map(
                    lambda i: augment(
                        self.source.read(train[i]), np.random.default_rng([seed, epoch, int(i)]), *self.size
                    ),
                    idx,
                )
            )
        return self.torch.from_numpy(np.stack(arrays)).to(self.device)

    def forward(self, module, xb):
        out = module(xb)
        return self._rep, getattr(out, "logits", out)  # a transformers model returns an output object

    def _run(self, module, split: str, fn: Callable) -> np.ndarray:
        module.eval()
        out, ids = [], self.ids[split]
        with ThreadPoolExecutor(self.workers) as pool, self.torch.no_grad():
            for i in range(0, len(ids), 64):
                batch = np.stack(list(pool.map(lambda iid: self.base.prepare(self.source.read(iid)), ids[i : i + 64])))
                out.append(fn(self.forward(module, self.torch.from_numpy(batch).to(self.device))[1]))
        return np.concatenate(out)

    def probs(self, module, splits) -> dict[str, np.ndarray]:
        return {s: self._run(module, s, lambda z: self.torch.softmax(z, 1).cpu().numpy()) for s in splits}

    def features(self, module, split: str) -> np.ndarray:
        return self._run(module, split, lambda z: self._rep.cpu().numpy())

    def set_head(self, module, weight: np.ndarray, bias: np.ndarray) -> None:
        with self.torch.no_grad():
            self._head(module).weight.copy_(self.torch.from_numpy(weight))
            self._head(module).bias.copy_(self.torch.from_numpy(bias))

    def head(self, module) -> dict[str, np.ndarray]:
        return {k: v.detach().cpu().numpy().copy() for k, v in module.state_dict().items()}


# -- checkpoints: tensors in safetensors, everything else in its JSON metadata ------------------------


def _flatten(obj: Any, key: str, tensors: dict, torch: Any) -> Any:
    if torch.is_tensor(obj):
        tensors[key] = obj.detach().cpu().contiguous()
        return {"__tensor__": key}
    if isinstance(obj, Mapping):
        return {"__items__": [[k, _flatten(v, f"{key}.{i}", tensors, torch)] for i, (k, v) in enumerate(obj.items())]}
    if isinstance(obj, (list, tuple)):
        return [_flatten(v, f"{key}.{i}", tensors, torch) for i, v in enumerate(obj)]
    return obj


def _unflatten(obj: Any, tensors: Mapping) -> Any:
    if isinstance(obj, dict) and "__tensor__" in obj:
        return tensors[obj["__tensor__"]]
    if isinstance(obj, dict) and "__items__" in obj:
        return {k: _unflatten(v, tensors) for k, v in obj["__items__"]}
    if isinstance(obj, list):
        return [_unflatten(v, tensors) for v in obj]
    return obj


_CKPT_KEYS = frozenset({"stage", "module", "optimiser", "algorithm", "best", "epoch", "log"})  # what _stage saves


class Checkpoints:
    """The last finished epoch of the seed in progress, one file per seed: ``seed-<s>.ckpt.safetensors``."""

    def __init__(self, folder: Path, torch: Any, resume: bool) -> None:
        self.folder, self.torch, self.resume = Path(folder), torch, resume

    def _path(self, seed: int) -> Path:
        return self.folder / f"seed-{seed}.ckpt.safetensors"

    def save(self, seed: int, state: Mapping[str, Any]) -> None:
        from safetensors.torch import save  # with torch; only checkpoints need it

        tensors: dict = {}
        meta = _flatten(state, "s", tensors, self.torch)
        with atomic_file(self._path(seed)) as f:
            f.write(save(tensors, metadata={"state": json.dumps(meta)}))

    def load(self, seed: int) -> dict[str, Any] | None:
        path = self._path(seed)
        if not (self.resume and path.is_file()):
            return None
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(path), framework="pt") as f:
                meta = json.loads((f.metadata() or {})["state"])
                tensors = {k: f.get_tensor(k) for k in f.keys()}
            state = _unflatten(meta, tensors)
            if not (
                isinstance(state, dict)
                and _CKPT_KEYS <= set(state)
                and isinstance(state["log"], list)
                and isinstance(state["epoch"], int)
                and isinstance(state["stage"], str)
            ):
                raise ValueError("not a checkpoint of this loop")
        except (OSError, ValueError, KeyError, TypeError, SafetensorError) as exc:
            # a cache file (a killed disk, an edit): the seed starts again from its first epoch
            logger.warning(f"warning: the resume checkpoint {path} is damaged ({exc}); seed {seed} starts again")
            self.drop(seed)
            return None
        return state

    def drop(self, seed: int) -> None:
        self._path(seed).unlink(missing_ok=True)


# -- the loop ------------------------------------------------------------------------------------------


def _score_entry(learner, module, data: FitData, select: str) -> dict[str, float]:
    splits = [SELECTION_SPLIT] + ([ORACLE_SPLIT] if select == "oracle" else [])
    probs = learner.probs(module, splits)
    out = {}
    for s in splits:
        correct = probs[s].argmax(1) == data.y[s]
        out[f"{s}_average"] = float(correct.mean())
        out[f"{s}_worst_group"] = selection_score(correct, data.groups[s], "worst-group")
    return out


def _selection_key(select: str) -> str:
    return {
        "average": f"{SELECTION_SPLIT}_average",
        "worst-group": f"{SELECTION_SPLIT}_worst_group",
        "oracle": f"{ORACLE_SPLIT}_worst_group",
    }[select]


@dataclass
class SeedLoop:
    """One seed's training, as the steps an algorithm's :meth:`~metashift_hf.research.algorithms.Algorithm.fit`
    composes (the ``StageLoop`` protocol): ``stage`` (train a model, keep the epoch a rule prefers), ``make``,
    ``new_module``, ``features``, ``train_errors``, ``seed_fit`` and ``finish``. It holds what every stage shares:
    the learner, the data, the settings ``s``, the seed, the per-epoch log (appended to), the checkpoints and the
    checkpoint to resume from (used by the stage it belongs to, then dropped)."""

    torch: Any
    learner: "LinearLearner | FinetuneLearner"
    data: FitData
    s: FitSettings
    seed: int
    ckpt: "Checkpoints | None"
    progress: bool
    resume: dict | None = None
    log: list = field(default_factory=list)
    kept: dict = field(default_factory=dict)  # the selecting stage's other rules (s.also): rule -> best dict

    def __post_init__(self) -> None:
        if self.resume is not None:
            self.log = list(self.resume["log"])

    @property
    def splits(self) -> list[str]:
        return list(self.data.y)

    def make(self, method: str, hp: Mapping[str, float] | None = None) -> Algorithm:
        """A fresh ``method`` on this seed's training rows (its defaults unless ``hp``)."""
        d = self.data
        cls = get_algorithm(method)
        return cls(self.torch, hp or {}, d.train_groups, d.n_groups, d.train_envs, d.n_envs, self.s.device)

    def resumes_at(self, stage: str) -> bool:
        """Whether the checkpoint to resume from is in ``stage`` (the stages before it are done)."""
        return self.resume is not None and self.resume["stage"] == stage

    def stage(
        self, algo: Algorithm, stage: str, epochs: int, select: str | None, also: tuple[str, ...] = ()
    ) -> tuple[Any, int, float]:
        """Train one model for ``epochs`` (continuing the checkpoint when it is this stage's); keep the epoch
        ``select`` prefers (None: the last) and, for each rule of ``also``, that rule's. (module, epoch, value)."""
        resume = self.resume if self.resumes_at(stage) else None
        self.resume = None
        return _stage(self, algo, stage, epochs, select, resume, also)

    def new_module(self) -> Any:
        """An untrained model, seeded by the seed (DFR's last layer on a linear probe: no base to train)."""
        self.torch.manual_seed(self.seed)
        return self.learner.new_module()

    def features(self, module: Any) -> dict[str, np.ndarray]:
        return {sp: self.learner.features(module, sp) for sp in self.splits}

    def train_errors(self, module: Any) -> np.ndarray:
        """Which training rows ``module`` gets wrong (boolean per row)."""
        return self.learner.probs(module, ["train"])["train"].argmax(1) != self.data.y["train"]

    def seed_fit(
        self,
        module: Any,
        epoch: int,
        value: float,
        details: dict[str, Any],
        log: "Sequence[dict[str, Any]] | None" = None,
        others: Mapping[str, "SeedFit"] | None = None,
    ) -> SeedFit:
        """``module`` as it is now, as this seed's outcome: every split's probabilities and the head."""
        probs, head = self.learner.probs(module, self.splits), self.learner.head(module)
        return SeedFit(
            self.seed, probs, epoch, value, tuple(self.log if log is None else log), head, details, others or {}
        )

    def finish(self, module: Any, epoch: int, value: float, details: dict[str, Any]) -> SeedFit:
        """The selecting stage's outcome, and each other rule's (``s.also``) from its own kept epoch of the same
        trajectory, with a log that records that rule's selected epoch (issue 46: each run folder its own)."""
        mine = self.seed_fit(module, epoch, value, details, _rule_log(self.log, None))
        others = {}
        for rule, kept in self.kept.items():
            module.load_state_dict(kept["state"])
            log = _rule_log(self.log, rule)
            others[rule] = self.seed_fit(module, int(kept["epoch"]), float(kept["value"]), details, log)
        return replace(mine, others=others)


RULE_EPOCHS = "selected_epoch_by_rule"  # a log entry's other rules' kept epochs (s.also), resolved by _rule_log


def _rule_log(log: Sequence[dict[str, Any]], rule: str | None) -> list[dict[str, Any]]:
    """The log as ``rule``'s run records it (None: the selecting rule's): its own ``selected_epoch``."""
    out = []
    for entry in log:
        entry = dict(entry)
        by_rule = entry.pop(RULE_EPOCHS, None)
        if rule is not None and by_rule is not None:
            entry["selected_epoch"] = by_rule[rule]
        out.append(entry)
    return out


def _stage(
    loop: SeedLoop,
    algo: Algorithm,
    stage: str,
    epochs: int,
    select: str | None,
    resume_state: dict | None,
    also: tuple[str, ...] = (),
):
    """Train one model for ``epochs``; keep the epoch ``select`` prefers (None: the last). Returns (module, epoch, value).
    ``also``: other rules whose best epochs (value, epoch, state) are kept too, in ``loop.kept``."""
    from tqdm.auto import tqdm

    torch, learner, data, s, seed, log, ckpt = (
        loop.torch,
        loop.learner,
        loop.data,
        loop.s,
        loop.seed,
        loop.log,
        loop.ckpt,
    )
    progress = loop.progress
    torch.manual_seed(seed)
    module = learner.new_module()

    def optimiser():
        return torch.optim.Adam(module.parameters(), lr=s.lr, weight_decay=s.weight_decay)

    opt = optimiser()
    start, best = 1, {"value": -1.0, "epoch": 0, "state": None}
    kept = {r: {"value": -1.0, "epoch": 0, "state": None} for r in also}
    if resume_state is not None and resume_state["stage"] == stage:
        module.load_state_dict(resume_state["module"])
        opt.load_state_dict(resume_state["optimiser"])
        algo.load_state(resume_state["algorithm"])
        best = dict(resume_state["best"])
        kept.update(best.pop("also", {}))  # a checkpoint of the same run key kept the same rules
        start = int(resume_state["epoch"]) + 1
    scored = "oracle" if "oracle" in also else select  # the test split is scored when any kept rule needs it
    y = torch.from_numpy(data.y["train"]).to(s.device)
    g = torch.from_numpy(data.train_groups).to(s.device)
    e = torch.from_numpy(data.train_envs).to(s.device)
    n = len(data.y["train"])
    steps = math.ceil(n / s.batch_size)
    algo.set_run(steps * epochs)  # schedules (IRM's anneal) are shares of this stage's updates
    schedule = algo.schedule()
    dead = dead_schedules(algo)
    if dead:
        logger.warning(
            f"{s.method}: scheduled hyper-parameter(s) {', '.join(f'{k} (step {v})' for k, v in dead.items())} "
            f"never take effect in this run of {steps * epochs} steps; raise --epochs or lower the fraction"
        )
    for epoch in tqdm(range(start, epochs + 1), desc=f"{stage} seed {seed}", unit="epoch", disable=not progress):
        torch.manual_seed(_epoch_seed(seed, epoch, 1))  # dropout and drop-connect
        rng = np.random.default_rng(_epoch_seed(seed, epoch, 2))
        algo.rng = np.random.default_rng(_epoch_seed(seed, epoch, 3))
        batches = epoch_batches(s.sampling, data.train_groups, data.train_envs, s.batch_size, rng)
        module.train()
        total, rows = 0.0, 0
        for idx in batches:
            t = torch.from_numpy(idx).to(s.device)
            loss = algo.loss(
                lambda xb: learner.forward(module, xb), learner.batch(idx, seed, epoch), y[t], g[t], e[t], t
            )
            value = float(loss.detach())
            if not math.isfinite(value):  # caught here, not later as NaN "predictions" the user never wrote
                raise _diverged(s, stage, seed, epoch, f"the training loss is {value}")
            opt.zero_grad()
            loss.backward()
            opt.step()
            if algo.resets_optimizer():  # IRM: Adam restarts when the penalty weight jumps (DomainBed)
                opt = optimiser()
            total += value * len(idx)
            rows += len(idx)
        if not all(bool(torch.isfinite(p).all()) for p in module.parameters()):  # an inf gradient in the last step
            raise _diverged(s, stage, seed, epoch, "the model's weights are not finite after the epoch")
        entry: dict[str, Any] = {"seed": seed, "stage": stage, "epoch": epoch, "train_loss": total / max(rows, 1)}
        if schedule:  # when each scheduled hyper-parameter switched, and how long the stage is
            entry.update({"schedule": schedule, "total_steps": steps * epochs})
        if select is not None:
            entry.update(_score_entry(learner, module, data, scored))
            for rule in (select, *also):
                value = entry[_selection_key(rule)]
                now = best if rule == select else kept[rule]
                if value > now["value"]:  # ties: the earlier epoch
                    now = {
                        "value": value,
                        "epoch": epoch,
                        "state": {k: v.detach().clone() for k, v in module.state_dict().items()},
                    }
                    if rule == select:
                        best = now
                    else:
                        kept[rule] = now
            entry["selected_epoch"] = best["epoch"]
            if also:
                entry[RULE_EPOCHS] = {r: kept[r]["epoch"] for r in also}
        log.append(entry)
        if ckpt is not None:  # what _CKPT_KEYS names: the run continues from here bit for bit
            best_now = {**best, "also": kept} if kept else best
            state = {"stage": stage, "epoch": epoch, "module": module.state_dict(), "optimiser": opt.state_dict()}
            ckpt.save(seed, {**state, "algorithm": algo.state(), "best": best_now, "log": log})
    if select is None:
        return module, epochs, float("nan")
    loop.kept.update(kept)
    module.load_state_dict(best["state"])
    return module, int(best["epoch"]), float(best["value"])


def _diverged(s: FitSettings, stage: str, seed: int, epoch: int, what: str) -> MetashiftError:
    """Training went to inf/NaN: the error names the method, its hyper-parameters (those moved off their
    defaults, the likely cause, in the fix), the learning rate, the stage and the epoch."""
    declared = get_algorithm(s.method).hparams
    moved = [f"{k}={v:g} (default {declared[k].default:g})" for k, v in s.hparams.items() if v != declared[k].default]
    hps = ", ".join(f"{k}={v:g}" for k, v in s.hparams.items()) or "none"
    return MetashiftError(
        f"{s.method} training diverged at epoch {epoch} of seed {seed} (stage {stage}): {what}; "
        f"hyper-parameters {hps}, lr {s.lr:g}",
        (f"lower {', '.join(moved)}" if moved else f"lower the learning rate (--lr, now {s.lr:g})")
        + "; non-finite numbers cannot be trained on",
    )


def fit_seed(
    torch: Any,
    learner: "LinearLearner | FinetuneLearner",
    data: FitData,
    s: FitSettings,
    seed: int,
    *,
    ckpt: Checkpoints | None = None,
    progress: bool = False,
) -> SeedFit:
    """Train one seed with ``s.method`` (its own stages: :meth:`Algorithm.fit`) and return its predictions on every
    split."""
    resume = ckpt.load(seed) if ckpt is not None else None
    loop = SeedLoop(torch, learner, data, s, seed, ckpt, progress, resume)
    return loop.make(s.method, s.hparams).fit(loop)


__all__ = [
    "FitData",
    "FitSettings",
    "SeedFit",
    "SeedLoop",
    "LinearLearner",
    "FinetuneLearner",
    "Checkpoints",
    "fit_seed",
    "augment",
    "epoch_batches",
    "augment_size",
    "SELECTION_SPLIT",
    "ORACLE_SPLIT",
    "COLOR_JITTER",
    "GREYSCALE_P",
]
