"""A training run's results and its folder: :class:`SeedRun` / :class:`TrainResult` (aggregate over seeds,
summary, markdown), one seed on disk (predictions, scores, head as safetensors, run.json, log.jsonl) and
read back checked, the run key that decides which earlier run a new one merges into, and
:func:`write_result` (whole, or merged into an earlier run of the same key)."""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np
import pandas as pd

from ..core import __version__
from ..core.errors import InputFormatError, MetashiftError
from ..core.fsutil import OutputExistsError, atomic_dir, atomic_file, check_out, read_marker
from ..scoring.predictions import TaskPredictions
from .features import Backbone
from .score import Scores, chance_line, score_plan, task_spec_hash
from .train_config import TrainConfig, config_toml


if TYPE_CHECKING:
    from metashift_hf.tasks.plan import TaskPlan

TRAIN_KIND = "training run"  # the marker kind of a train --out folder (core.fsutil)
SEED_KIND = "training seed"  # the marker kind of a finished seed kept for resume (core.fsutil)


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
            "chance": asdict(self.runs[0].scores.headline.chance),
            **metrics,
        }

    def summary(self) -> str:
        a = self.aggregate()
        lines = [
            f"{self.task_id}: {self.config.method} / {self.config.probe} probe on {self.card['backbone']['name']}, "
            f"{a['n_seeds']} seed(s); {self.config.selection_rule}",
            f"{a['headline_split']}: balanced accuracy {_pm(a['balanced_accuracy'])}, average {_pm(a['average'])}, "
            f"worst group {_pm(a['worst_group'])}, adjusted {_pm(a['adjusted_average'])}",
            # the split's majority class: the same for every seed (it reads the truth alone)
            chance_line(self.runs[0].scores.headline.chance),
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


# -- one seed on disk: predictions, scores, head (safetensors), run.json, log.jsonl ---------------------


def _head_name(probe: str) -> str:
    return "head.safetensors" if probe == "linear" else "model.safetensors"


def write_seed(
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


def read_seed(d: Path, plan: "TaskPlan", seed: int, probe: str) -> SeedRun:
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
        scores = score_plan(TaskPredictions.read(frame, plan.classes), plan)
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


def read_earlier_seeds(folder: Path, plan: "TaskPlan", probe: str) -> dict[int, SeedRun]:
    return {s: read_seed(d, plan, s, probe) for s, d in _seed_dirs(folder).items()}


def train_run_key(spec_hash: str, cfg: TrainConfig, backbone_key: str) -> str:
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
    return train_run_key(task_spec_hash(plan.spec), config.resolved(), backbone.key)


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


def check_same_run(folder: "str | os.PathLike", card: Mapping[str, Any], key: str, cfg: TrainConfig) -> None:
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
                write_seed(d, r, result.config, classes or _classes(r), result.card["backbone"])
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
                write_seed(tmp, r, result.config, classes or _classes(r), result.card["backbone"])
    for name, text in _top_files(result).items():
        with atomic_file(folder / name, "w") as f:
            f.write(text)


def _classes(r: SeedRun) -> list[str]:
    return list(r.scores.classes)


__all__ = [
    "SeedRun",
    "TrainResult",
    "write_result",
    "read_seed",
    "write_seed",
    "read_earlier_seeds",
    "check_train_out",
    "check_same_run",
    "earlier_run",
    "run_key",
    "train_run_key",
    "settings_differ",
    "TRAIN_KIND",
    "SEED_KIND",
]
