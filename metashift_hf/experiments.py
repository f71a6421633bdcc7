"""The paper's experiments as one call each: train a baseline per task, tabulate, plot.

    from metashift_hf.experiments import EXPERIMENTS, run_experiment
    result = run_experiment("paper-dg", "ARTIFACT", "images/", "runs/dg", TrainConfig(seeds=3), overrides={"scale": 0.5})

``EXPERIMENTS`` is the table the ``metashift-hf experiment`` command is built from: each entry names
its tasks and turns one trained task (its :class:`~metashift_hf.train.TrainResult` and shift spec)
into a table row; a new experiment is one more entry. Output folder: ``results.json``, ``results.md``,
``<name>.png`` and ``runs/<task>/`` (each task's predictions, scores and run card, as ``train`` writes).
"""
from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .builders.spec import ShiftSpec
from .core import __version__
from .builders.artifact import Artifact
from .core.errors import InputFormatError, UnknownNameError, did_you_mean
from .core.fsutil import atomic_dir, check_out
from .features import load_backbone
from .shards import REPO_PREFIX
from .task_source import TaskData, open_task
from .train import TrainConfig, TrainResult, train, write_result

logger = logging.getLogger(__name__)

Row = dict[str, Any]
EXPERIMENT_KIND = "experiment"  # the marker kind of an experiment --out folder (core.fsutil)


@dataclass(frozen=True)
class Column:
    """One column of the results table: a key of the row, its heading, and how a value prints."""

    key: str
    title: str
    kind: str = "text"  # "text" | "number" | "pct" / "number_pm" (a {mean, std} over seeds, in % / as is)


@dataclass(frozen=True)
class Plot:
    """Accuracy (y, in %) against ``x`` for each of ``series`` (row keys holding {mean, std})."""

    x: str
    x_label: str
    series: tuple[tuple[str, str], ...]  # (row key, legend label)
    title: str


@dataclass(frozen=True)
class Experiment:
    name: str
    help: str
    tasks: tuple[str, ...]
    row: Callable[[TrainResult, ShiftSpec], Row]
    columns: tuple[Column, ...]
    plot: Plot
    paper: str  # what the paper reports in this shape, for the reader of results.md


def _m(agg: dict, key: str) -> dict:
    return {"mean": agg[key]["mean"], "std": agg[key]["std"]}


def _dg_row(result: TrainResult, spec: ShiftSpec) -> Row:
    agg = result.aggregate()
    dist = spec.distance
    return {"task": result.task_id,
            "train_groups": ", ".join(g.group for g in spec.train_groups if g.cls == "dog"),
            "test_groups": ", ".join(g.group for g in spec.test_groups),
            "distance": dist.value if dist else None, "distance_rule": dist.rule if dist else None,
            "ood_accuracy": _m(agg, "ood"), "id_accuracy": _m(agg, "id"), "drop_pct": _m(agg, "drop_pct"),
            "worst_group": agg["worst_group"]["mean"], "n_test": spec.split_sizes.get("test")}


def _subpop_row(result: TrainResult, spec: ShiftSpec) -> Row:
    agg = result.aggregate()
    mf = spec.minority_fraction
    return {"task": result.task_id, "p": mf.target if mf else None, "p_achieved": mf.achieved if mf else None,
            "average": _m(agg, "average"), "worst_group": {"mean": agg["worst_group"]["mean"], "std": agg["worst_group"]["std"]},
            "adjusted_average": _m(agg, "adjusted_average"), "worst_groups": ", ".join(sorted(set(agg["worst_group"]["groups"]))),
            "n_test": spec.split_sizes.get("test")}


EXPERIMENTS: dict[str, Experiment] = {
    "paper-dg": Experiment(
        name="paper-dg",
        help="domain generalisation: train on each paper-dg-cat-dog-N training set, OOD (test: the shelf groups) accuracy vs meta-graph distance d",
        tasks=tuple(f"paper-dg-cat-dog-{i}" for i in range(1, 5)),
        row=_dg_row,
        columns=(Column("task", "task"), Column("train_groups", "dog training groups"), Column("test_groups", "OOD test groups"), Column("distance", "d", "number"),
                 Column("ood_accuracy", "OOD accuracy", "pct"), Column("id_accuracy", "ID accuracy", "pct"),
                 Column("drop_pct", "Drop%", "number_pm")),
        plot=Plot("distance", "meta-graph distance d (training dogs to dog(shelf))", (("ood_accuracy", "OOD accuracy"),),
                  "paper-dg: OOD accuracy vs distance"),
        paper="Table 1 of Liang & Zou (2022): the farther the training subsets from dog(shelf), the lower the OOD accuracy."),
    "paper-subpop": Experiment(
        name="paper-subpop",
        help="subpopulation shift: cat/dog indoor/outdoor at minority fraction p = 12/6/1%, average vs worst-group accuracy",
        tasks=("paper-subpop-cat-dog-p12", "paper-subpop-cat-dog-p6", "paper-subpop-cat-dog-p1"),
        row=_subpop_row,
        columns=(Column("task", "task"), Column("p", "minority p", "number"), Column("average", "average", "pct"),
                 Column("worst_group", "worst group", "pct"), Column("adjusted_average", "adjusted", "pct"),
                 Column("worst_groups", "worst group(s)")),
        plot=Plot("p", "minority fraction p in training", (("average", "average accuracy"), ("worst_group", "worst-group accuracy")),
                  "paper-subpop: accuracy vs minority fraction"),
        paper="Table 2 of Liang & Zou (2022): as p shrinks, worst-group accuracy falls while average accuracy changes less."),
}


@dataclass(frozen=True)
class ExperimentResult:
    experiment: str
    rows: tuple[Row, ...]
    config: TrainConfig
    card: dict[str, Any] = field(repr=False)
    out: Path | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"experiment": self.experiment, "rows": list(self.rows), "run": self.card}

    def markdown(self) -> str:
        exp = EXPERIMENTS[self.experiment]
        cols = exp.columns
        lines = [f"# Experiment {exp.name}", "", exp.help + ".", "",
                 f"{self.config.method} / {self.config.probe} probe, {self.config.seeds} seed(s), mean ± std (ddof 1); "
                 f"{self.card['model_selection']}.", "",
                 "| " + " | ".join(c.title for c in cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
        lines += ["| " + " | ".join(_cell(r.get(c.key), c.kind) for c in cols) + " |" for r in self.rows]
        lines += ["", f"The paper's shape: {exp.paper} These figures are what this run measured.", ""]
        return "\n".join(lines)

    def summary(self) -> str:
        exp = EXPERIMENTS[self.experiment]
        return "\n".join("   " + "  ".join(f"{c.title} {_cell(r.get(c.key), c.kind)}" for c in exp.columns) for r in self.rows)


def _cell(value: Any, kind: str) -> str:
    if value is None:
        return "-"
    if kind == "pct":
        if value["mean"] is None:
            return "n/a"
        return f"{100 * value['mean']:.1f}" + ("" if value["std"] is None else f" ± {100 * value['std']:.1f}") + "%"
    if kind == "number_pm":
        if value["mean"] is None:
            return "n/a"
        return f"{value['mean']:.1f}" + ("" if value["std"] is None else f" ± {value['std']:.1f}")
    if kind == "number":
        return f"{value:.3f}"
    return str(value)


def _plot(exp: Experiment, rows: Sequence[Row], path: Path) -> bool:
    """accuracy vs x with ±std error bars; False when matplotlib is not installed."""
    try:
        import matplotlib  # heavy optional dependency: only for this figure

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ModuleNotFoundError:
        return False
    pts = [r for r in rows if r.get(exp.plot.x) is not None]
    fig, ax = plt.subplots(figsize=(5.5, 3.8), dpi=120)
    for key, label in exp.plot.series:
        xs = [r[exp.plot.x] for r in pts]
        ys = [100 * (r[key]["mean"] or 0) for r in pts]
        err = [100 * (r[key]["std"] or 0) for r in pts]
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=label)
        if len(exp.plot.series) == 1:
            for r, x, y in zip(pts, xs, ys):
                ax.annotate(r["task"].rsplit("-", 1)[-1], (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xlabel(exp.plot.x_label)
    ax.set_ylabel("accuracy (%)")
    ax.set_title(exp.plot.title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def experiment_tasks(name: str, *, artifact: "str | os.PathLike | None" = None,
                     images: "str | os.PathLike | None" = None, source: "str | os.PathLike | None" = None,
                     seed: int | None = None, overrides: Mapping[str, Any] | None = None) -> dict[str, TaskData]:
    """Every task of experiment ``name``, resolved before any training: planned on ``artifact``, or read
    from ``source``, a folder written by ``export`` or a Hub namespace (task T is ``SOURCE/metashift-T``)."""
    if name not in EXPERIMENTS:
        raise UnknownNameError(f"unknown experiment {name!r}{did_you_mean(name, EXPERIMENTS)}",
                               f"use one of: {', '.join(EXPERIMENTS)}")
    if (artifact is None) == (source is None):
        raise InputFormatError(f"experiment {name}: give either an artifact (--artifact) or the exported tasks "
                               "(--from EXPORT_FOLDER or a Hub NAMESPACE)", "pass exactly one of --artifact and --from")
    tasks = EXPERIMENTS[name].tasks
    if source is not None:
        return {t: open_task(f"{str(source).rstrip('/')}/{REPO_PREFIX}{t}", images=images, seed=seed, options=overrides)
                for t in tasks}
    art = Artifact.load(artifact)
    return {t: open_task(t, artifact=art, images=images, seed=seed, options=overrides) for t in tasks}


def run_experiment(name: str, artifact: "str | os.PathLike | None", images: "str | os.PathLike | None",
                   out: "str | os.PathLike", config: TrainConfig = TrainConfig(), *, seed: int | None = None,
                   overrides: Mapping[str, Any] | None = None, source: "str | os.PathLike | None" = None,
                   cache_dir: "str | os.PathLike | None" = None, progress: bool = True, force: bool = False) -> ExperimentResult:
    """Train ``config`` on every task of experiment ``name`` and write the table, plot and runs to ``out``.

    The tasks are planned on ``artifact`` (with ``images``, ``seed``, ``overrides``) or read from ``source``
    (see :func:`experiment_tasks`). ``out`` must be new, empty or (with ``force``) an earlier experiment.
    """
    if name not in EXPERIMENTS:
        raise UnknownNameError(f"unknown experiment {name!r}{did_you_mean(name, EXPERIMENTS)}",
                               f"use one of: {', '.join(EXPERIMENTS)}")
    exp = EXPERIMENTS[name]
    check_out(out, EXPERIMENT_KIND, force=force, inputs=(artifact, images, source))  # before any training
    cfg = config.resolved()
    t0 = time.perf_counter()
    # every task first: a task the artifact cannot supply (or the source lacks) fails before any training
    data = experiment_tasks(name, artifact=artifact, images=images, source=source, seed=seed, overrides=overrides)
    plans = {t: d.plan for t, d in data.items()}
    backbone = load_backbone(image_size=cfg.image_size, device=cfg.device)  # loaded once, features shared
    results: dict[str, TrainResult] = {}
    for t in exp.tasks:
        logger.info(f"   training {t} ...")
        results[t] = train(data[t], None, None, None, cfg, cache_dir=cache_dir, progress=progress,
                           backbone=backbone if cfg.probe == "linear" else None)
    rows = tuple(exp.row(results[t], plans[t].spec) for t in exp.tasks)
    first = results[exp.tasks[0]].card
    card = {"package_version": __version__, "experiment": name, "tasks": list(exp.tasks),
            "task_sources": {t: d.where for t, d in data.items()},
            "task_seed": {t: d.spec.seed for t, d in data.items()},
            "task_overrides": {t: dict(d.spec.overrides) for t, d in data.items()}, "method": cfg.method, "probe": cfg.probe, "seeds": first["seeds"],
            "backbone": first["backbone"], "model_selection": first["model_selection"],
            "features": {t: r.card["features"] for t, r in results.items()},
            "seconds": round(time.perf_counter() - t0, 3)}
    result = ExperimentResult(name, rows, cfg, card, Path(out))
    with atomic_dir(out, kind=EXPERIMENT_KIND, force=force, inputs=(artifact, images, source)) as tmp:
        for t, r in results.items():
            write_result(r, tmp / "runs" / t)
        (tmp / "results.json").write_text(json.dumps(result.to_dict(), indent=2, default=str) + "\n")
        (tmp / "results.md").write_text(result.markdown())
        _plot(exp, rows, tmp / f"{name}.png")
    return result


__all__ = ["EXPERIMENTS", "Experiment", "Column", "Plot", "ExperimentResult", "run_experiment"]
