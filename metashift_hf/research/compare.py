"""One results table: every method x task x seed, trained once each, in one flat CSV.

    from metashift_hf.research.compare import run_compare
    res = run_compare(["erm", "groupdro", "dfr"], ["paper-subpop-cat-dog-p12"], "ARTIFACT", "images/", "runs/cmp",
                      TrainConfig(seeds="0-2"), overrides={"scale": 0.5})

``out/``: ``results.csv`` (flat: task, method, seed, selection, metric, value, ci_low, ci_high; one row
per seed and metric), ``results.md`` (mean ± std across seeds per task and method, the paper's figure
beside where the paper has one), ``compare.png`` and ``runs/<task>/<method>/`` (each a training run as
``train`` writes it). Features are computed once per image (the cache) and shared by every method.
Each run folder is complete on its own: a later call with more seeds (``seeds="3-5"``) merges them
into the same runs, and an interrupted call continues with ``resume=True``.
"""
from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from metashift_hf.builders import paper_tasks as pt
from metashift_hf.builders.artifact import Artifact

from .algorithms import METHODS, SELECTION_TEXT, algorithm_info
from ..core import __version__
from ..core.errors import InputFormatError, UnknownNameError, did_you_mean, short_repr
from ..core.names import id_slug
from ..core.fsutil import OutputExistsError, atomic_file, claimed_dir
from .features import load_backbone
from .score import Scores
from ..hub.shards import REPO_PREFIX
from ..hub.task_source import TaskData, open_task
from .train import TrainConfig, TrainResult, check_train_out, earlier_run, run_key, settings_differ, train

logger = logging.getLogger(__name__)

COMPARE_KIND = "comparison"  # the marker kind of an `experiment compare` --out folder (core.fsutil)
COLUMNS: tuple[str, ...] = ("task", "method", "seed", "selection", "metric", "value", "ci_low", "ci_high")
# metric -> what it is, for results.md; the CI is Wilson 95% over the split's rows (none for a weighted average)
METRICS: dict[str, str] = {
    "average": "headline split's average accuracy",
    "worst_group": "headline split's worst-group accuracy",
    "adjusted_average": "headline split's train-prior (adjusted) average",
    "id_average": "ID split's average accuracy",
    "ood_average": "OOD split's average accuracy",
}
GROUP_METRIC = "group:"  # + a group name: that group's accuracy on the headline split (e.g. group:dog(shelf))


def _wilson(k: int, n: int) -> tuple[float, float]:
    from scipy.stats import binomtest  # scipy is a dependency; only needed here

    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    return float(ci.low), float(ci.high)


def seed_metrics(scores: Scores) -> list[tuple[str, float | None, float | None, float | None]]:
    """(metric, value, ci_low, ci_high) of one seed's scores, for :data:`METRICS` and each headline group."""
    splits = scores.splits
    head = scores.headline
    out: list[tuple[str, float | None, float | None, float | None]] = []
    k = int(round(head.average * head.n))
    out.append(("average", head.average, *_wilson(k, head.n)))
    wg = head.worst_group
    out.append(("worst_group", wg.accuracy, wg.ci_low, wg.ci_high))
    out.append(("adjusted_average", head.adjusted_average, None, None))
    for name, split in (("id_average", scores.id_split), ("ood_average", scores.ood_split)):
        sp = splits.get(split) if split else None
        out.append((name, sp.average if sp else None, *(_wilson(int(round(sp.average * sp.n)), sp.n) if sp else (None, None))))
    out += [(GROUP_METRIC + g.group, g.accuracy, g.ci_low, g.ci_high) for g in head.per_group]
    return out


def paper_figure(task: str, method: str, metric: str) -> float | None:
    """The paper's published figure for this cell, when it has one (Table 2: ERM on the subpopulation tasks)."""
    if method != "erm" or task not in pt.SUBPOP_IDS or metric not in pt.SUBPOP_PAPER_ERM:
        return None
    return pt.SUBPOP_PAPER_ERM[metric][pt.SUBPOP_IDS.index(task)]


@dataclass(frozen=True)
class CompareResult:
    methods: tuple[str, ...]
    tasks: tuple[str, ...]
    table: pd.DataFrame  # results.csv
    config: TrainConfig
    card: dict[str, Any] = field(repr=False)
    out: Path | None = None

    def summary_frame(self) -> pd.DataFrame:
        return summary_frame(self.table)

    def header(self) -> str:
        return header(self.config.probe, self.card["backbone"]["name"], sorted(set(self.table["seed"])), self.methods,
                      self.card["selection"])

    def markdown(self) -> str:
        return "\n".join(["# Method comparison", "", self.header(), "",
                          results_tables(self.table, self.methods, self.tasks, self.card["selection"]),
                          "Every seed's figures with 95% Wilson intervals: results.csv; every run: runs/<task>/<method>/.", ""])


def summary_frame(table: pd.DataFrame) -> pd.DataFrame:
    """Mean and std (ddof 1) across seeds per task, method and metric of a results.csv table."""
    t = table.dropna(subset=["value"])
    g = t.groupby(["task", "method", "selection", "metric"], sort=False)["value"]
    return g.agg(mean="mean", std=lambda v: float(v.std(ddof=1)) if len(v) > 1 else np.nan, n="count").reset_index()


def header(probe: str, backbone: str, seeds: Sequence[int], methods: Sequence[str], selection: Mapping[str, str]) -> str:
    """What a comparison ran: probe, backbone, seeds, each method's selection rule, what the paper column is."""
    lines = [f"{probe} probe on {backbone}, seeds {', '.join(map(str, seeds))}; mean ± std across seeds (ddof 1). "
             "Each method keeps the epoch its selection rule prefers:", ""]
    lines += [f"- **{m}** ({algorithm_info(m).title}): {SELECTION_TEXT[selection[m]]}" for m in methods]
    lines += ["", "paper: the MetaShift paper's published figure (Liang & Zou 2022, Table 2: ERM, a whole network "
                  "trained on the GQA photographs) where it has one; ours differ in backbone, data and selection, so "
                  "compare the shape, not the digits."]
    return "\n".join(lines)


def results_tables(table: pd.DataFrame, methods: Sequence[str], tasks: Sequence[str], selection: Mapping[str, str],
                   metrics: Sequence[str] = ("worst_group", "average", GROUP_METRIC + "dog(shelf)")) -> str:
    """One markdown table per metric (a ``group:`` metric only for the tasks that have the group): a row
    per task, a column per method, mean ± std and the paper's figure."""
    summ = summary_frame(table)
    lines: list[str] = []
    for metric in metrics:
        rows = [t for t in tasks if ((summ.task == t) & (summ.metric == metric)).any()]
        if not rows:
            continue
        title = (f"**{metric[len(GROUP_METRIC):]} accuracy** (that group on the headline split"
                 + ("; the paper's Table 1 metric)" if metric == GROUP_METRIC + "dog(shelf)" else ")")
                 if metric.startswith(GROUP_METRIC) else f"**{metric.replace('_', '-')} accuracy** ({METRICS[metric]})")
        lines += [title, "", "| task | " + " | ".join(methods) + " |", "|---|" + "---:|" * len(methods)]
        for task in rows:
            cells = []
            for m in methods:
                row = summ[(summ.task == task) & (summ.method == m) & (summ.metric == metric)]
                cell = "-" if row.empty else _pm(row.iloc[0]["mean"], row.iloc[0]["std"])
                paper = paper_figure(task, m, metric)
                if paper is not None:
                    cell += f" (paper: {100 * paper:.1f}%)"
                if selection[m] == "oracle":
                    cell += " ORACLE"
                cells.append(cell)
            lines.append(f"| {task} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def _pm(mean: float, std: float) -> str:
    return f"{100 * mean:.1f}" + ("" if std is None or np.isnan(std) else f" ± {100 * std:.1f}") + "%"


def _plot(result: CompareResult, path: Path) -> bool:
    """Worst-group accuracy (mean ± std) per task, one bar per method; False without matplotlib."""
    try:
        import matplotlib  # heavy optional dependency: only for this figure

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ModuleNotFoundError:
        return False
    summ = result.summary_frame()
    summ = summ[summ.metric == "worst_group"]
    n_m = len(result.methods)
    width = 0.8 / n_m
    fig, ax = plt.subplots(figsize=(min(12.0, 2 + len(result.tasks) * (0.5 + 0.12 * n_m)), 4.2), dpi=120)
    xs = np.arange(len(result.tasks))
    for j, m in enumerate(result.methods):
        vals = [summ[(summ.task == t) & (summ.method == m)] for t in result.tasks]
        ys = [100 * v.iloc[0]["mean"] if not v.empty else np.nan for v in vals]
        err = [100 * (0 if v.empty or np.isnan(v.iloc[0]["std"]) else v.iloc[0]["std"]) for v in vals]
        label = m + (" (oracle)" if result.card["selection"][m] == "oracle" else "")
        pos = xs + (j - (n_m - 1) / 2) * width
        ax.bar(pos, ys, width, yerr=err, capsize=2, label=label)
        paper = [(x, paper_figure(t, m, "worst_group")) for x, t in zip(pos, result.tasks)]
        paper = [(x, 100 * v) for x, v in paper if v is not None]
        if paper:
            ax.scatter(*zip(*paper), marker="_", s=120, color="black", zorder=3,
                       label=f"paper: {m} (Table 2)")
    ax.set_xticks(xs, [t.replace("paper-", "") for t in result.tasks], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("worst-group accuracy (%)")
    ax.set_ylim(0, 100)
    ax.set_title("methods compared: worst-group accuracy (mean ± std over seeds)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, ncol=min(4, n_m))
    fig.tight_layout()
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return True


def method_hparams(hparams: Mapping[str, float], method: str, methods: Sequence[str]) -> dict[str, float]:
    """``method``'s share of ``hparams``: keys ``method.name`` (e.g. ``groupdro.eta``) for one method, plain
    ``name`` for every method (so it must be one of each method's)."""
    out = {}
    for key, value in hparams.items():
        owner, sep, name = key.partition(".")
        if not sep:
            out[key] = value
        elif owner not in methods:
            raise UnknownNameError(f"hyper-parameter {key!r} names a method that is not compared",
                                   f"prefix it with one of: {', '.join(methods)}")
        elif owner == method:
            out[name] = value
    return out


def _check_names(methods: Sequence[str], tasks: Sequence[str]) -> None:
    if not methods or not tasks:
        raise InputFormatError("experiment compare needs at least one method and one task",
                               "pass e.g. --methods erm,groupdro,dfr --tasks paper-subpop-cat-dog-p12")
    for m in methods:
        if m not in METHODS:
            raise UnknownNameError(f"unknown method {m!r}{did_you_mean(m, METHODS)}", f"use some of: {', '.join(METHODS)}")
    for t in tasks:  # a task id names a folder (runs/<task>/, SRC/metashift-<task>): no path may hide in it
        if not isinstance(t, str) or not t or id_slug(t) != t or t.startswith("."):
            raise UnknownNameError(f"{short_repr(t)} is not a task id: a task id is letters, digits, '.', '_' and '-', "
                                   "and names no folder (no '/', no '..')",
                                   "name tasks by id, e.g. --tasks paper-subpop-cat-dog-p12 (`metashift-hf tasks list`); "
                                   "with --from SRC, task T is read from SRC/metashift-T")
    for what, names in (("method", methods), ("task", tasks)):
        if len(set(names)) != len(names):
            raise InputFormatError(f"a {what} is named twice in {', '.join(names)}", f"name each {what} once")


def run_compare(methods: Sequence[str], tasks: Sequence[str], artifact: "str | os.PathLike | None",
                images: "str | os.PathLike | None", out: "str | os.PathLike", config: TrainConfig = TrainConfig(), *,
                seed: int | None = None, overrides: Mapping[str, Any] | None = None,
                source: "str | os.PathLike | None" = None, cache_dir: "str | os.PathLike | None" = None,
                progress: bool = True, resume: bool = False) -> CompareResult:
    """Train every method on every task (``config``'s seeds, probe and settings; ``config.select`` or each
    method's default selection) and write the table. ``out`` is new, empty, or an earlier comparison
    (its runs gain the new seeds; a run of other settings there is refused)."""
    methods, tasks = tuple(methods), tuple(tasks)
    _check_names(methods, tasks)
    if (artifact is None) == (source is None):
        raise InputFormatError("experiment compare: give either an artifact (--artifact) or the exported tasks "
                               "(--from EXPORT_FOLDER or a Hub NAMESPACE)", "pass exactly one of --artifact and --from")
    configs = {m: replace(config, method=m, hparams=method_hparams(config.hparams, m, methods)).resolved()
               for m in methods}  # every bad setting before any work
    t0 = time.perf_counter()
    with claimed_dir(out, COMPARE_KIND, inputs=(artifact, images, source)) as folder:
        _check_covers_earlier(folder, methods, tasks)
        for t in tasks:
            for m in methods:
                check_train_out(folder / "runs" / t / m, inputs=(artifact, images, source))
        if source is not None:
            data: dict[str, TaskData] = {t: open_task(f"{str(source).rstrip('/')}/{REPO_PREFIX}{t}", images=images, seed=seed,
                                                      options=overrides) for t in tasks}
        else:
            art = Artifact.load(artifact)
            data = {t: open_task(t, artifact=art, images=images, seed=seed, options=overrides) for t in tasks}
        first = configs[methods[0]]
        backbone = load_backbone(first.backbone, image_size=first.image_size if first.probe == "linear" else None,
                                 device=first.device)  # loaded once; features shared by every method and task
        for t in tasks:  # every earlier run merges, checked before any run is modified
            for m in methods:
                _check_mergeable(folder, t, m, data[t], configs[m], backbone)
        results: dict[tuple[str, str], TrainResult] = {}
        for t in tasks:
            for m in methods:
                logger.info(f"   training {m} on {t} ...")
                try:
                    results[t, m] = train(data[t], None, None, folder / "runs" / t / m, configs[m], cache_dir=cache_dir,
                                          progress=progress, backbone=backbone, resume=resume)
                except OutputExistsError as exc:  # another comparison wrote there meanwhile
                    raise OutputExistsError(exc.what, f"run the same command again once the other comparison into {folder} "
                                                      "has finished (its runs are merged), or name a new --out") from None
        rows = []
        for (t, m), r in results.items():
            for run in r.runs:
                for metric, value, lo, hi in seed_metrics(run.scores):
                    rows.append((t, m, run.seed, r.config.select, metric, value, lo, hi))
        table = pd.DataFrame(rows, columns=list(COLUMNS))
        any_run = next(iter(results.values()))
        card = {"package_version": __version__, "methods": list(methods), "tasks": list(tasks),
                "seeds": sorted(set(table["seed"])), "probe": first.probe, "backbone": any_run.card["backbone"],
                "selection": {m: configs[m].select for m in methods}, "sampling": first.sampling,
                "algorithms": {m: asdict(algorithm_info(m, configs[m].hparams)) for m in methods},
                "task_sources": {t: d.where for t, d in data.items()},
                "task_overrides": {t: dict(d.spec.overrides) for t, d in data.items()},
                "config": {k: v for k, v in asdict(first).items() if k not in ("method", "select", "hparams")},
                "features": {f"{t}/{m}": r.card["features"] for (t, m), r in results.items()},
                "seconds": round(time.perf_counter() - t0, 3)}
        result = CompareResult(methods, tasks, table, first, card, folder)
        with atomic_file(folder / "results.csv", "w") as f:
            table.to_csv(f, index=False)
        with atomic_file(folder / "results.md", "w") as f:
            f.write(result.markdown())
        with atomic_file(folder / "compare.json", "w") as f:
            f.write(json.dumps(card, indent=2, default=str) + "\n")
        _plot_atomic(result, folder / "compare.png")
    return result


def _earlier_pairs(folder: Path) -> set[tuple[str, str]]:
    """(task, method) of every run folder an earlier comparison left under ``folder/runs/``."""
    runs = folder / "runs"
    if not runs.is_dir():
        return set()
    return {(t.name, m.name) for t in runs.iterdir() if t.is_dir() for m in t.iterdir() if m.is_dir()}


def _check_covers_earlier(folder: Path, methods: Sequence[str], tasks: Sequence[str]) -> None:
    """results.csv/md/png cover every run in the folder: a call naming fewer methods or tasks than the
    earlier comparison is refused (it would drop their rows while their runs stay)."""
    left_out = sorted(p for p in _earlier_pairs(folder) if p[0] not in tasks or p[1] not in methods)
    if left_out:
        all_m = list(methods) + sorted({m for _, m in left_out} - set(methods))
        all_t = list(tasks) + sorted({t for t, _ in left_out} - set(tasks))
        shown = ", ".join(f"{m} on {t}" for t, m in left_out[:4]) + (" ..." if len(left_out) > 4 else "")
        raise OutputExistsError(f"--out {folder} holds earlier runs this call does not name ({shown}); its results "
                                "always cover every run in the folder",
                                f"add to the earlier comparison with --methods {','.join(all_m)} --tasks {','.join(all_t)}, "
                                "or name a new --out to start a new comparison")


def _check_mergeable(folder: Path, task: str, method: str, data: TaskData, config: TrainConfig, backbone) -> None:
    """An earlier run of ``method`` on ``task`` in ``folder`` must have the same settings (its seeds merge)."""
    run = folder / "runs" / task / method
    card = earlier_run(run)
    if card is not None and card.get("run_key") != run_key(data.plan, config, backbone):
        differ = settings_differ(card, config)
        raise OutputExistsError(f"--out {folder} holds a run of {method} on {task} with other settings"
                                + (f" ({', '.join(differ)} differ)" if differ else " (task, backbone or package version differ)"),
                                f"repeat the earlier comparison's settings (see {folder / 'compare.json'}) to add seeds to it, "
                                "or name a new --out to start a new comparison")


def _plot_atomic(result: CompareResult, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}.png")
    try:
        if _plot(result, tmp):
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


__all__ = ["run_compare", "method_hparams", "summary_frame", "header", "results_tables", "GROUP_METRIC", "CompareResult", "seed_metrics", "paper_figure", "COLUMNS", "METRICS", "COMPARE_KIND"]
