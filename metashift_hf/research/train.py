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

import hashlib
import json
import logging
import os
import re
import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Mapping, Sequence

import numpy as np
import pandas as pd

from metashift_hf.builders.images import open_images

from ..core import __version__
from ..core import options as opt
from ..core.errors import EmptyResultError, InputFormatError, MetashiftError, UnknownNameError, short_repr
from ..core.fsutil import OutputExistsError, atomic_dir, atomic_file, check_out, read_marker
from ..core.paths import cache_root
from ..hub.task_source import TaskData, TaskRef, open_task, task_ref
from ..models import efficientnet_lite0, require_torch
from ..scoring.predictions import TaskPredictions
from .algorithms import METHODS, SAMPLING_TEXT, SAMPLINGS, SELECTION_TEXT, SELECTIONS, algorithm_info, resolve_hparams
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
from .score import Scores, score_plan, task_spec_hash


if TYPE_CHECKING:
    from metashift_hf.builders.plan import TaskPlan

Method = Literal["erm", "reweight", "groupdro", "irm", "coral", "mixup", "jtt", "dfr"]
Probe = Literal["linear", "finetune"]
PROBES: tuple[str, ...] = ("linear", "finetune")
SELECTION_SPLIT = "validation"
# (epochs, lr, batch size) per probe. Fine-tuning: the seed paper's Adam / 5e-5 / 32.
DEFAULTS = {"linear": (50, 1e-3, 64), "finetune": (10, 5e-5, 32)}

logger = logging.getLogger(__name__)

TRAIN_KIND = "training run"  # the marker kind of a train --out folder (core.fsutil)


@dataclass(frozen=True)
class TrainConfig:
    """What to train; ``None`` epochs/lr/batch_size take the probe's defaults (:data:`DEFAULTS`)."""

    method: Method = "erm"
    probe: Probe = "linear"
    seeds: "int | str | Sequence[int]" = 1  # a count N (seeds 0..N-1), "3-5", "0,2,7" or a list
    device: str = "cpu"
    epochs: int | None = None
    lr: float | None = None
    batch_size: int | None = None
    weight_decay: float = 0.0
    image_size: int | None = None  # linear probe: backbone input size (None: the model's 224)
    select: str | None = None  # average | worst-group | oracle; None: the method's default (algorithms)
    # shuffle | group-balanced (the MetaShift paper's loader) | domain-balanced (DomainBed's); None: the caller's
    # default (shuffle for train/compare, group-balanced for the paper experiments)
    sampling: str | None = None
    hparams: Mapping[str, float] = field(default_factory=dict)  # overrides of algorithms.HPARAMS[method]
    backbone: str = "efficientnet-lite0"  # or a registry model: features.BACKBONE_FORMS

    @property
    def seed_list(self) -> tuple[int, ...]:
        return parse_seeds(self.seeds)

    @property
    def selection_rule(self) -> str:
        return (
            "model selection: "
            + SELECTION_TEXT[self.select or algorithm_info(self.method).default_selection]
            + "; ties go to the earlier epoch"
        )

    def resolved(self) -> "TrainConfig":
        info = algorithm_info(self.method)  # an unknown method is refused here
        if self.select is not None and self.select not in SELECTIONS:
            raise UnknownNameError(f"unknown selection {self.select!r}", f"use one of: {', '.join(SELECTIONS)}")
        if self.sampling is not None and self.sampling not in SAMPLINGS:
            raise UnknownNameError(f"unknown sampling {self.sampling!r}", f"use one of: {', '.join(SAMPLINGS)}")
        if self.probe not in PROBES:
            raise UnknownNameError(f"unknown probe {self.probe!r}", f"use one of: {', '.join(PROBES)}")
        if not isinstance(self.device, str) or not self.device:
            raise opt.OptionError(f"device {self.device!r} is not a device name", "use cpu, cuda or cuda:N")
        epochs, lr, bs = DEFAULTS[self.probe]
        # None takes the probe's default; anything given is checked (0, NaN, inf and negatives refused)
        return replace(
            self,
            seeds=parse_seeds(self.seeds),
            select=self.select or info.default_selection,
            sampling=self.sampling or "shuffle",
            hparams=resolve_hparams(self.method, self.hparams),
            epochs=epochs if self.epochs is None else opt.positive_int(self.epochs, "epochs"),
            lr=lr if self.lr is None else opt.positive_float(self.lr, "lr"),
            batch_size=bs if self.batch_size is None else opt.positive_int(self.batch_size, "batch_size"),
            weight_decay=opt.non_negative_float(self.weight_decay, "weight_decay"),
            image_size=opt.optional(opt.image_size, self.image_size, "image_size"),
        )  # evaluate's one range


@dataclass(frozen=True)
class SeedRun:
    """One seed: its scores, the epoch model selection kept and that epoch's selection score
    (``validation_accuracy``: validation average or worst-group, or the test oracle's, by the rule)."""

    seed: int
    scores: Scores
    selected_epoch: int
    validation_accuracy: float
    seconds: float
    predictions: pd.DataFrame = field(repr=False, compare=False)
    log: tuple[dict[str, Any], ...] = field(default=(), repr=False, compare=False)
    head: dict[str, np.ndarray] = field(default_factory=dict, repr=False, compare=False)
    details: dict[str, Any] = field(default_factory=dict, compare=False)


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
        metrics["worst_group"] = {
            **_mean_std([d["worst_group"]["accuracy"] for d in dicts]),
            "groups": [d["worst_group"]["group"] for d in dicts],
        }
        rows: dict[tuple[str, str], list[float]] = {}
        for d in dicts:
            for g in d["per_group"]:
                rows.setdefault((g["split"], g["group"]), []).append(g["accuracy"])
        metrics["per_group"] = [
            {
                "split": s,
                "group": g,
                "n": next(x["n"] for x in dicts[0]["per_group"] if (x["split"], x["group"]) == (s, g)),
                **_mean_std(v),
            }
            for (s, g), v in rows.items()
        ]
        metrics["splits"] = {
            s: {
                "average": _mean_std([d["splits"][s]["average"] for d in dicts]),
                "worst_group": _mean_std([d["splits"][s]["worst_group"]["accuracy"] for d in dicts]),
            }
            for s in dicts[0]["splits"]
        }
        return {
            "task_id": self.task_id,
            "method": self.config.method,
            "probe": self.config.probe,
            "n_seeds": len(self.runs),
            "seeds": [r.seed for r in self.runs],
            "std_ddof": 1,
            "headline_split": dicts[0]["headline_split"],
            "id_split": dicts[0]["id_split"],
            "ood_split": dicts[0]["ood_split"],
            "selection": self.config.select,
            "model_selection": self.config.selection_rule,
            "selected_epochs": [r.selected_epoch for r in self.runs],
            **metrics,
        }

    def summary(self) -> str:
        a = self.aggregate()
        lines = [
            f"{self.task_id}: {self.config.method} / {self.config.probe} probe on {self.card['backbone']['name']}, "
            f"{a['n_seeds']} seed(s); {self.config.selection_rule}",
            f"{a['headline_split']}: average {_pm(a['average'])}, worst group {_pm(a['worst_group'])}, "
            f"adjusted {_pm(a['adjusted_average'])}",
        ]
        if a["id"]["mean"] is not None and a["ood"]["mean"] is not None:
            lines.append(
                f"ID ({a['id_split']}) {_pm(a['id'])} vs OOD ({a['ood_split']}) {_pm(a['ood'])}, "
                f"Drop% {_pm(a['drop_pct'], scale=1, unit='')}"
            )
        return "\n".join(lines)

    def markdown(self) -> str:
        a = self.aggregate()
        out = [
            f"# {self.task_id}: {self.config.method}, {self.config.probe} probe",
            "",
            self.summary().replace("\n", "  \n"),
            "",
            f"Mean ± std over {a['n_seeds']} seeds (ddof 1).",
            "",
            "| split | group | n | accuracy |",
            "|---|---|---:|---:|",
        ]
        out += [f"| {g['split']} | {g['group']} | {g['n']} | {_pm(g)} |" for g in a["per_group"]]
        out += [
            "",
            "| seed | selected epoch | validation accuracy | headline average | worst group |",
            "|---:|---:|---:|---:|---|",
        ]
        for r in self.runs:
            h = r.scores.headline
            out.append(
                f"| {r.seed} | {r.selected_epoch} | {100 * r.validation_accuracy:.1f}% | {100 * h.average:.1f}% | "
                f"{h.worst_group.group} {100 * h.worst_group.accuracy:.1f}% |"
            )
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


SEED_KIND = "training seed"  # the marker kind of a finished seed kept for resume (core.fsutil)


def parse_seeds(spec: "int | str | Sequence[int]") -> tuple[int, ...]:
    """Training seeds: a count N (0..N-1), ``"a-b"`` (inclusive), ``"0,2,5-7"`` or a list; sorted, distinct.

    Each seed is in [0, 2**32 - 1] (:func:`core.options.seed`) and there are at most
    :data:`core.options.SEEDS_MAX` of them, both checked before any list is built (``0-1000000000`` is
    refused at once instead of filling memory)."""
    if isinstance(spec, bool):
        raise opt.OptionError(f"seeds {spec!r} is not a seed list", "use a count (3), a range (3-5) or a list (0,2,7)")
    if isinstance(spec, (int, np.integer)):
        return tuple(range(opt.seed_count(spec, "seeds")))
    if isinstance(spec, str):
        text = spec.strip()
        if text.isdigit():
            return tuple(range(opt.seed_count(text, "seeds")))  # the text checked first: int() of 5000 digits raises
        out: set[int] = set()
        for part in text.split(","):
            a, sep, b = part.strip().partition("-")
            if not (a.isdigit() and (not sep or b.isdigit())):
                raise opt.OptionError(
                    f"seeds {spec!r}: {part.strip()!r} is not a seed or a range",
                    "use a count (3), a range (3-5) or a list (0,2,5-7) of non-negative integers",
                )
            lo = opt.seed(a, "seeds")
            hi = opt.seed(b, "seeds") if sep else lo
            if hi < lo:
                raise opt.OptionError(
                    f"seeds {spec!r}: the range {part.strip()} is empty", "write it low-high, e.g. 3-5"
                )
            _bound_seeds(spec, len(out) + hi - lo + 1)  # before the range is built
            out.update(range(lo, hi + 1))
        return tuple(sorted(out))
    if not isinstance(spec, (list, tuple, range, np.ndarray)):  # 1.5, None, a dict: no raw TypeError
        raise opt.OptionError(
            f"seeds {spec!r} is not a count, a range or a list of seeds", "use e.g. 3, '3-5' or [0, 2, 7]"
        )
    _bound_seeds(spec, len(spec))
    if not len(spec) or any(isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, np.integer)) for s in spec):
        raise opt.OptionError(f"seeds {short_repr(spec)} is not a list of non-negative integers", "use e.g. [0, 1, 2]")
    return tuple(sorted({opt.seed(s, "seeds") for s in spec}))


def _bound_seeds(spec: Any, n: int) -> None:
    if n > opt.SEEDS_MAX:
        raise opt.OptionError(
            f"seeds {short_repr(spec)} asks for {n} seeds, more than the maximum {opt.SEEDS_MAX}",
            f"ask for at most {opt.SEEDS_MAX} seeds per call, e.g. --seeds 5 or --seeds 0-9",
        )


# -- the config file: TOML with the flags' names (tomllib reads it; this small writer writes it) ------

CONFIG_KEYS: tuple[str, ...] = (
    "method",
    "probe",
    "seeds",
    "device",
    "epochs",
    "lr",
    "batch_size",
    "weight_decay",
    "image_size",
    "select",
    "sampling",
    "backbone",
)


def config_toml(cfg: TrainConfig) -> str:
    """``cfg`` as TOML (keys as :data:`CONFIG_KEYS`, the method's hyper-parameters under ``[hparams]``)."""
    lines = [
        "# metashift-hf train configuration: `metashift-hf train --config-file THIS` (flags given on the",
        "# command line win over it); the same keys as TrainConfig.",
    ]
    for key in CONFIG_KEYS:
        value = getattr(cfg, key)
        if value is None:
            continue
        if isinstance(value, (tuple, list)):
            value = "[" + ", ".join(str(int(v)) for v in value) + "]"
        elif isinstance(value, str):
            value = json.dumps(value)
        elif isinstance(value, float):
            value = repr(value)
        lines.append(f"{key} = {value}")
    if cfg.hparams:
        lines += ["", "[hparams]"] + [f"{k} = {float(v)!r}" for k, v in sorted(cfg.hparams.items())]
    return "\n".join(lines) + "\n"


def load_config(path: "str | os.PathLike") -> dict[str, Any]:
    """TrainConfig keyword arguments from a TOML file; unknown keys and wrong types are refused."""
    import tomllib  # standard library from Python 3.11

    p = Path(path)
    try:
        raw = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise opt.OptionError(
            f"config file {p} does not exist", "pass a TOML file written by `train` (config.toml)"
        ) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise opt.OptionError(
            f"config file {p} is not valid TOML: {exc}", "fix the file (key = value lines)"
        ) from None
    unknown = sorted(set(raw) - set(CONFIG_KEYS) - {"hparams"})
    if unknown:
        raise opt.OptionError(
            f"config file {p}: unknown key(s) {', '.join(unknown)}", f"use only: {', '.join(CONFIG_KEYS)}, [hparams]"
        )
    hp = raw.get("hparams", {})
    if not isinstance(hp, dict):
        raise opt.OptionError(f"config file {p}: hparams must be a table", "write [hparams] then name = value lines")
    for key in ("method", "probe", "device", "select", "sampling", "backbone"):
        if key in raw and not isinstance(raw[key], str):
            raise opt.OptionError(f"config file {p}: {key} = {raw[key]!r} must be a string", f'write {key} = "..."')
    return {**{k: v for k, v in raw.items() if k != "hparams"}, **({"hparams": hp} if hp else {})}


# -- one seed on disk: predictions, scores, head (safetensors), run.json, log.jsonl ---------------------


def _head_name(probe: str) -> str:
    return "head.safetensors" if probe == "linear" else "model.safetensors"


def _write_seed(
    d: Path, r: SeedRun, cfg: TrainConfig, classes: Sequence[str], backbone_card: Mapping[str, Any]
) -> None:
    from safetensors.numpy import save  # the heads' format: no pickles

    r.predictions.to_csv(d / "predictions.csv", index=False)
    r.scores.write_into(d)
    meta = {
        "format": "metashift-hf head",
        "probe": cfg.probe,
        "method": cfg.method,
        "seed": str(r.seed),
        "classes": json.dumps(list(classes)),
        "config": json.dumps(asdict(cfg), default=str),
        "backbone": json.dumps(dict(backbone_card), default=str),
        "use": (
            "logits = ((features - feature_mean) / feature_std) @ weight.T + bias, features from the backbone "
            "named in 'backbone'"
            if cfg.probe == "linear"
            else "the fine-tuned network's state dict"
        ),
    }
    (d / _head_name(cfg.probe)).write_bytes(
        save({k: np.ascontiguousarray(v) for k, v in r.head.items()}, metadata=meta)
    )
    (d / "run.json").write_text(
        json.dumps(
            {
                "seed": r.seed,
                "selection": cfg.select,
                "selected_epoch": r.selected_epoch,
                "selection_value": r.validation_accuracy,
                "seconds": round(r.seconds, 3),
                "details": r.details,
            },
            indent=2,
            default=str,
        )
        + "\n"
    )
    (d / "log.jsonl").write_text("".join(json.dumps(e) + "\n" for e in r.log))


_SEED_DIR = re.compile(r"seed-([0-9]{1,10})")


def _seed_dirs(folder: Path) -> dict[int, Path]:
    """The seed folders of a run (``seed-<n>``); anything else in it (a user's notes, ``seed-old/``) is not ours."""
    found = {}
    for d in sorted(Path(folder).iterdir()):
        m = _SEED_DIR.fullmatch(d.name)
        if m and d.is_dir() and not d.is_symlink():
            found[int(m.group(1))] = d
    return found


def _read_seed(d: Path, data: _Data, seed: int, probe: str) -> SeedRun:
    """Seed ``seed`` as :func:`_write_seed` wrote it into ``d``, scored again from its predictions (the same
    figures). An earlier run is untrusted input: every file is checked, and a missing, truncated or edited
    one is an :class:`InputFormatError` naming it (never a traceback, never a seed counted twice)."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    def bad(name: str, why: str) -> InputFormatError:
        return InputFormatError(
            f"earlier run {d}: {name} {why}",
            f"delete {d} so that seed {seed} is trained again (the run's other seeds are kept)",
        )

    meta = _read_json(d / "run.json", bad)
    types = {
        "seed": int,
        "selected_epoch": int,
        "selection_value": (int, float),
        "seconds": (int, float),
        "details": dict,
    }
    wrong = [k for k, t in types.items() if isinstance(meta.get(k), bool) or not isinstance(meta.get(k), t)]
    if wrong:
        raise bad("run.json", f"lacks or mistypes {', '.join(wrong)}")
    if meta["seed"] != seed:  # an edited seed would count one model as two seeds
        raise bad("run.json", f"names seed {meta['seed']}, not the folder's seed {seed}")
    try:
        frame = pd.read_csv(d / "predictions.csv", dtype={"image_id": str, "split": str, "prediction": str})
        scores = score_plan(TaskPredictions.read(frame, data.plan.classes), data.plan)
    except FileNotFoundError:
        raise bad("predictions.csv", "is missing") from None
    except MetashiftError as exc:
        raise bad("predictions.csv", f"does not fit the task: {exc.what}") from None
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise bad("predictions.csv", f"is not a readable CSV ({exc})") from None
    try:
        log = tuple(
            json.loads(line) for line in (d / "log.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()
        )
        head = load_file(str(d / _head_name(probe)))
    except FileNotFoundError as exc:
        raise bad(Path(exc.filename or "a file").name, "is missing") from None
    except (OSError, ValueError, SafetensorError) as exc:
        raise bad("log.jsonl or " + _head_name(probe), f"is damaged ({exc})") from None
    if not all(isinstance(e, dict) for e in log):
        raise bad("log.jsonl", "holds a line that is not a JSON object")
    return SeedRun(
        seed,
        scores,
        meta["selected_epoch"],
        float(meta["selection_value"]),
        float(meta["seconds"]),
        frame,
        log,
        head,
        meta["details"],
    )


def _read_json(path: Path, bad) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise bad(path.name, "is missing") from None
    except (OSError, ValueError) as exc:
        raise bad(path.name, f"is not readable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise bad(path.name, "is not a JSON object")
    return data


def _read_earlier_seeds(folder: Path, data: _Data, probe: str) -> dict[int, SeedRun]:
    return {s: _read_seed(d, data, s, probe) for s, d in _seed_dirs(folder).items()}


def _run_key(spec_hash: str, cfg: TrainConfig, backbone_key: str) -> str:
    """What makes two runs mergeable: the task, every setting but the seeds, and the backbone."""
    settings = {k: v for k, v in asdict(cfg).items() if k != "seeds"}
    return hashlib.sha256(
        json.dumps(
            {"task": spec_hash, "config": settings, "backbone": backbone_key, "package": __version__},
            sort_keys=True,
            default=str,
        ).encode()
    ).hexdigest()


def run_key(plan: "TaskPlan", config: TrainConfig, backbone: Backbone) -> str:
    """The key an earlier run in an ``out`` folder must carry for ``config`` on ``plan`` to merge into it."""
    return _run_key(task_spec_hash(plan.spec), config.resolved(), backbone.key)


def earlier_run(out: "str | os.PathLike") -> dict[str, Any] | None:
    """The run card of an earlier training run in ``out`` (ours, complete), else None; a damaged card is an error."""
    marker = read_marker(out) if Path(out).is_dir() else None
    card = Path(out) / "run_card.json"
    if not marker or marker.get("kind") != TRAIN_KIND or not card.is_file():
        return None
    return _read_json(
        card,
        lambda name, why: InputFormatError(
            f"earlier run {out}: {name} {why}", f"name a new output folder, or delete {out} to start that run again"
        ),
    )


def settings_differ(card: Mapping[str, Any], config: TrainConfig) -> list[str]:
    """The settings (TrainConfig fields but the seeds) in which an earlier run's card differs from ``config``."""
    now = json.loads(json.dumps(asdict(config.resolved()), default=str))
    was = card.get("config") if isinstance(card.get("config"), dict) else {}
    return sorted(k for k in now if k != "seeds" and was.get(k) != now[k])


def check_train_out(out: "str | os.PathLike", *, force: bool = False, inputs: Sequence[Any] = ()) -> bool:
    """Check ``out`` before any work (core.fsutil.check_out); an earlier training run there is allowed
    without ``force`` (its seeds are merged). True when ``out`` holds such a run."""
    merging = not force and earlier_run(out) is not None
    check_out(out, TRAIN_KIND, force=force or merging, inputs=[i for i in inputs if i is not None])
    return merging


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


def _settings(cfg: TrainConfig) -> FitSettings:
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
) -> TrainResult:
    """Train ``config.seeds`` runs on a task and score each; write everything to ``out`` when given.

    ``task``: a loaded ``Dataset``/``DatasetDict``, an exported folder, a Hub dataset repo id, an
    :func:`metashift_hf.hub.task_source.open_task` result, or a :class:`~metashift_hf.hub.task_source.TaskRef`
    of a task id planned on its ``artifact`` (with its ``images``, ``seed`` and ``options``; a dataset brings
    its own images and spec).
    Training seeds: ``config.seeds`` (a count N = 0..N-1, a range "3-5" or a list). ``backbone``: a loaded
    :func:`metashift_hf.research.features.load_backbone` (reused across tasks). ``out`` must be new, empty, an
    earlier run of the same task and config (its seeds are kept and the new ones merged in) or, with
    ``force``, any earlier training run (replaced). ``resume``: reuse what an interrupted run with the
    same task and config left in the cache (finished seeds, the last epoch of the unfinished one).
    ``merge_from``: another earlier run folder whose seeds are kept the same way (an experiment's
    ``runs/<task>``), when the result is written elsewhere or not at all.
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
    key = _run_key(spec_hash, cfg, bb.key)
    earlier: dict[int, SeedRun] = {}
    if merging:
        _check_same_run(earlier_dir, earlier_card, key, cfg)
        earlier = _read_earlier_seeds(Path(earlier_dir), data, cfg.probe)
    work = cache_root(cache_dir) / "train-runs" / key[:16] if out is not None else None
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
                    runs[s] = _read_seed(work / f"seed-{s}", data, s, cfg.probe)
                    continue
                except InputFormatError as exc:  # our own cache, damaged: train that seed again
                    logger.warning(f"warning: {exc.what}; training seed {s} again")
            if learner is None:  # only when some seed needs training (a merge may need none)
                learner, feature_stats = _learner(
                    torch, data, cfg, bb, images if images is not None else source.images(), cache_dir, progress
                )
                if cfg.probe == "linear" and cfg.device == "cpu":
                    # a 1280 x k head on batches of 64 is too small for threads to help; on a busy machine
                    # their synchronisation made each epoch ~10x slower (measured)
                    torch.set_num_threads(1)
            t_seed = time.perf_counter()
            fit = fit_seed(torch, learner, data.fit, _settings(cfg), s, ckpt=ckpt, progress=progress)
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
                    _write_seed(tmp, runs[s], cfg, tp.classes, backbone_card)
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


def _check_same_run(folder: "str | os.PathLike", card: Mapping[str, Any], key: str, cfg: TrainConfig) -> None:
    if card.get("run_key") != key:
        differ = settings_differ(card, cfg)
        raise OutputExistsError(
            f"{folder} holds a run of another task, config or backbone ({card.get('task_id')}, "
            f"{card.get('method')}{'; settings that differ: ' + ', '.join(differ) if differ else ''}); "
            "seeds merge only into the same run",
            "use another --out, or --force to replace it",
        )


def _top_files(result: TrainResult) -> dict[str, str]:
    """The run's own files at the top of its folder, run_card.json last (it marks the run complete)."""
    return {
        "scores.json": json.dumps(result.aggregate(), indent=2) + "\n",
        "scores.md": result.markdown(),
        "config.toml": config_toml(result.config),
        "log.jsonl": "".join(json.dumps(e) + "\n" for r in result.runs for e in r.log),
        "run_card.json": json.dumps(result.card, indent=2, default=str) + "\n",
    }


def write_result(result: TrainResult, out: "str | os.PathLike", force: bool = False, merge: bool = False) -> None:
    """``out/``: scores.json (aggregate), scores.md, run_card.json, config.toml, log.jsonl (every epoch of every
    seed), seed-<s>/{predictions.csv, scores.json, scores.md, head.safetensors (or model.safetensors), run.json, log.jsonl}.

    ``merge``: ``out`` holds an earlier run of the same run (its card's ``run_key``); only the seed folders
    it lacks and the files above are written, each atomically, and nothing else in ``out`` is touched
    (a user's notes and sub-folders stay). Otherwise the folder is written whole (:func:`core.fsutil.atomic_dir`)."""
    classes = result.card.get("classes")
    if not merge:
        with atomic_dir(out, kind=TRAIN_KIND, force=force) as tmp:
            for r in result.runs:
                d = tmp / f"seed-{r.seed}"
                d.mkdir()
                _write_seed(d, r, result.config, classes or _classes(r), result.card["backbone"])
            for name, text in _top_files(result).items():
                (tmp / name).write_text(text)
        return
    folder = Path(out)
    card = earlier_run(folder)
    if card is None or card.get("run_key") != result.card.get("run_key"):
        raise OutputExistsError(
            f"--out {folder} no longer holds an earlier run of this task and config",
            "run the command again (another run may have written there meanwhile), or name a new folder",
        )
    have = _seed_dirs(folder)
    if set(have) - {r.seed for r in result.runs}:  # seeds another call added meanwhile: they must be read first
        raise OutputExistsError(
            f"--out {folder} gained seeds {sorted(set(have) - {r.seed for r in result.runs})} while "
            "this run was training",
            "run the command again: it merges them and trains nothing twice",
        )
    for r in result.runs:
        if r.seed not in have:
            with atomic_dir(folder / f"seed-{r.seed}", kind=SEED_KIND) as tmp:
                _write_seed(tmp, r, result.config, classes or _classes(r), result.card["backbone"])
    for name, text in _top_files(result).items():
        with atomic_file(folder / name, "w") as f:
            f.write(text)


def _classes(r: SeedRun) -> list[str]:
    return list(r.scores.classes)


__all__ = [
    "TrainConfig",
    "TrainResult",
    "SeedRun",
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
]
