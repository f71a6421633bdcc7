"""One results table: every method x task x seed, trained once each, in one flat CSV.

    from metashift_hf import TaskOrigin
    from metashift_hf.research.compare import run_compare
    res = run_compare(["erm", "groupdro", "dfr"], ["paper-subpop-cat-dog-p12"],
                      TaskOrigin(artifact="ARTIFACT", images="images/", options={"scale": 0.5}), "runs/cmp",
                      TrainConfig(seeds="0-2"))

``out/``: ``results.csv`` (flat: task, method, seed, selection, hparams_draw, selected, sampling, metric,
value, ci_low, ci_high; one row per run, seed and metric, SubpopBench's metrics included), ``results.md``
(DomainBed's collect_results shape: one table per selection rule and metric, a row per method, a column per
task plus the cross-task average and worst, mean ± standard error across seeds (std on request), the
paper's figure beside where the paper has one), ``results.tex`` with ``latex=True``, ``compare.png`` and
``runs/<task>/<arm>/`` (each a training run as ``train`` writes it; the arm is the method, with
``-<rule>`` under several selection rules and ``-h<k>`` for hyper-parameter draw k of a random search).
A random search (``n_hparams`` > 1) trains every draw (:func:`~metashift_hf.research.algorithms.sample_hparams`,
draw 0 the defaults) with every seed (trial) and, per rule, task, method and seed, keeps the draw whose
selection score is best, as DomainBed's sweep does; every draw's rows stay in results.csv (``selected``). Features are computed once per image (the cache) and shared by every method.
Each run folder is complete on its own: a later call with more seeds (``seeds="3-5"``) merges them
into the same runs, and an interrupted call continues with ``resume=True``.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO, Mapping, Sequence

import numpy as np
import pandas as pd

from metashift_hf.tasks import paper_tasks as pt

from ..core import __version__
from ..core import options as opt
from ..core.errors import InputFormatError, UnknownNameError, did_you_mean, short_repr
from ..core.fsutil import OutputExistsError, atomic_file, claimed_dir
from ..core.names import id_slug
from ..hub.task_data import TaskData
from ..hub.task_open import TaskOrigin
from .algorithms import (
    METHODS,
    SAMPLING_TEXT,
    SELECTION_TEXT,
    SELECTIONS,
    SWEEP_COMMON,
    algorithm_info,
    sample_hparams,
)
from .compare_runs import check_covers_earlier, check_mergeable, writer_lock
from .features import load_backbone
from .score import Scores
from .train import (
    SharedFits,
    TrainConfig,
    TrainResult,
    check_train_out,
    train,
)


logger = logging.getLogger(__name__)

COMPARE_KIND = "comparison"  # the marker kind of an `experiment compare` --out folder (core.fsutil)
COLUMNS: tuple[str, ...] = (
    "task",
    "method",
    "seed",
    "selection",
    "hparams_draw",
    "selected",
    "sampling",
    "metric",
    "value",
    "ci_low",
    "ci_high",
)
SPREADS: tuple[str, ...] = ("se", "se-ddof1", "std")
SPREAD_TEXT = {
    "se": "mean ± standard error across seeds (np.std(ddof=0) / sqrt(n), DomainBed's and SubpopBench's "
    "collect_results format_mean)",
    "se-ddof1": "mean ± standard error across seeds from the sample standard deviation (np.std(ddof=1) / sqrt(n): "
    "sqrt(n / (n - 1)) times DomainBed's, 1.22x at 3 seeds)",
    "std": "mean ± standard deviation across seeds (ddof 1)",
}


def domainbed_se(values: Sequence[float]) -> float:
    """DomainBed's and SubpopBench's ± (``format_mean`` in their scripts/collect_results.py, without the factor
    100): ``np.std(values / np.sqrt(n))``, the population standard deviation (ddof 0) over sqrt(n), computed
    in their order of operations so the digits match theirs; NaN for fewer than two values (no spread)."""
    v = np.asarray(list(values), dtype=np.float64)
    return float(np.std(v / np.sqrt(len(v)))) if v.size > 1 else float("nan")


# metric -> what it is, for results.md; the CI is Wilson 95% over the split's rows (none for a weighted average)
METRICS: dict[str, str] = {
    "average": "headline split's average accuracy",
    "worst_group": "headline split's worst-group accuracy",
    "adjusted_average": "headline split's train-prior (adjusted) average",
    "id_average": "ID split's average accuracy",
    "ood_average": "OOD split's average accuracy",
    # SubpopBench's metrics, from the same stored predictions through research.score (score_plan)
    "balanced_accuracy": "headline split's balanced (mean per-class) accuracy",
    "chance_balanced_accuracy": "headline split's balanced accuracy of always predicting its majority class",
    "macro_f1": "headline split's macro-F1",
    "ece": "headline split's expected calibration error (top-1, equal-width bins)",
    "worst_class": "headline split's worst-class accuracy",
}
GROUP_METRIC = "group:"  # + a group name: that group's accuracy on the headline split (e.g. group:dog(shelf))


def seed_metrics(scores: Scores) -> list[tuple[str, float | None, float | None, float | None]]:
    """(metric, value, ci_low, ci_high) of one seed's scores, for :data:`METRICS` and each headline group."""
    splits = scores.splits
    head = scores.headline
    out: list[tuple[str, float | None, float | None, float | None]] = []
    out.append(("average", head.average, head.ci_low, head.ci_high))
    wg = head.worst_group
    out.append(("worst_group", wg.accuracy, wg.ci_low, wg.ci_high))
    out.append(("adjusted_average", head.adjusted_average, None, None))
    for name, split in (("id_average", scores.id_split), ("ood_average", scores.ood_split)):
        sp = splits.get(split) if split else None
        out.append((name, sp.average, sp.ci_low, sp.ci_high) if sp else (name, None, None, None))
    out += [
        ("balanced_accuracy", head.balanced_accuracy, None, None),
        ("chance_balanced_accuracy", head.chance.balanced_accuracy, None, None),
        ("macro_f1", head.macro_f1, None, None),
        ("ece", head.ece, None, None),
        ("worst_class", head.worst_class.accuracy, head.worst_class.ci_low, head.worst_class.ci_high),
    ]
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
    spread: str = "se"

    def summary_frame(self) -> pd.DataFrame:
        return summary_frame(self.table)

    def header(self) -> str:
        return header(
            self.config.probe,
            self.card["backbone"]["name"],
            sorted(set(self.table["seed"])),
            self.methods,
            self.card["selection"],
            self.spread,
            self.card.get("sampling"),
            self.card.get("sweep"),
            rule_sections(self.table),
        )

    def markdown(self) -> str:
        return "\n".join(
            [
                "# Method comparison",
                "",
                self.header(),
                "",
                results_tables(self.table, self.methods, self.tasks, self.card["selection"], spread=self.spread),
                "Every seed's figures with 95% Wilson intervals: results.csv; every run: runs/<task>/<arm>/.",
                "",
            ]
        )

    def latex(self) -> str:
        return results_latex(self.table, self.methods, self.tasks, spread=self.spread)


def summary_frame(table: pd.DataFrame) -> pd.DataFrame:
    """Mean and each spread of :data:`SPREADS` across seeds (``se``: :func:`domainbed_se`; ``se-ddof1``: std
    (ddof 1) / sqrt(n); ``std``: ddof 1; NaN with one seed) per task, method, selection rule and metric of a
    results.csv table (the rows a random search selected, when it has the column)."""
    t = table.dropna(subset=["value"])
    if "selected" in t.columns:
        t = t[t["selected"].astype(bool)]
    g = t.groupby(["task", "method", "selection", "metric"], sort=False)["value"]
    out = g.agg(
        mean="mean",
        std=lambda v: float(v.std(ddof=1)) if len(v) > 1 else np.nan,
        se=domainbed_se,
        n="count",
    ).reset_index()
    out["se-ddof1"] = out["std"] / np.sqrt(out["n"])
    return out


def header(
    probe: str,
    backbone: str,
    seeds: Sequence[int],
    methods: Sequence[str],
    selection: Mapping[str, str],
    spread: str = "se",
    sampling: str | None = None,
    sweep: Mapping[str, Any] | None = None,
    rules: Sequence[str] | None = None,
) -> str:
    """What a comparison ran: probe, backbone, seeds, sampling, each method's selection rule, what the paper column
    is. ``rules``: the rules of the sections that follow (:func:`rule_sections`: every method trained under each);
    None or one rule: one table, each method under its own rule ``selection[m]``, which the header names."""
    lines = [
        f"{probe} probe on {backbone}, seeds {', '.join(map(str, seeds))}; {SPREAD_TEXT[spread]}."
        + (f" Sampling: {sampling} ({SAMPLING_TEXT[sampling]})." if sampling in SAMPLING_TEXT else ""),
    ]
    if rules and len(rules) > 1:
        names = ", ".join(f"**{m}** ({algorithm_info(m).title})" for m in methods)
        lines += [
            f"Every method ({names}) keeps the epoch each selection rule prefers, every rule over the same training "
            "(one per method, seed and draw). A section per rule follows, in this order:",
            "",
        ]
        lines += [f"- {SELECTION_TEXT[r]}" for r in rules]
    else:
        lines += ["Each method keeps the epoch its own selection rule prefers (one table below):", ""]
        lines += [f"- **{m}** ({algorithm_info(m).title}): {SELECTION_TEXT[selection[m]]}" for m in methods]
    if sweep and sweep.get("n_hparams", 1) > 1:
        lines += [
            "",
            f"Random search: {sweep['n_hparams']} hyper-parameter draws per method (draw 0 the defaults, "
            f"the others from the distributions of the algorithm registry, hparams seed {sweep['hparams_seed']}) "
            f"x {len(seeds)} trial(s); per rule, task, method and trial the draw with the best selection "
            "score is kept, as DomainBed's sweep.",
        ]
    lines += [
        "",
        "paper: the MetaShift paper's published figure (Liang & Zou 2022, Table 2: ERM, a whole network "
        "trained on the GQA photographs) where it has one; ours differ in backbone, data and selection, so "
        "compare the shape, not the digits. average / worst: the mean and the minimum of the task columns.",
    ]
    return "\n".join(lines)


def rule_sections(table: pd.DataFrame) -> list[str] | None:
    """The rules results.md has a section for: every rule present when some method was trained under several
    (``--select all``); None when each method was trained under one rule (its own: one table holds them all)."""
    summ = summary_frame(table)
    one_each = bool(len(summ)) and bool((summ.groupby("method")["selection"].nunique() == 1).all())
    return None if one_each else [r for r in SELECTIONS if (summ.selection == r).any()]


DEFAULT_TABLE_METRICS: tuple[str, ...] = ("worst_group", "average", GROUP_METRIC + "dog(shelf)")


def _metric_title(metric: str) -> str:
    if metric.startswith(GROUP_METRIC):
        return f"{metric[len(GROUP_METRIC) :]} accuracy (that group on the headline split" + (
            "; the paper's Table 1 metric)" if metric == GROUP_METRIC + "dog(shelf)" else ")"
        )
    return f"{metric.replace('_', '-')} ({METRICS[metric]})"


def _grid(table: pd.DataFrame, methods: Sequence[str], tasks: Sequence[str], metrics: Sequence[str]):
    """(rule, metric, task columns, rows) for each table: rows (method, [per-task summary row or None], avg, worst).
    ``rule`` None: every method was trained under one rule (its own), so one table holds them all."""
    summ = summary_frame(table)
    for rule in rule_sections(table) or [None]:
        for metric in metrics:
            part = summ[(summ.metric == metric) & ((summ.selection == rule) if rule is not None else True)]
            cols = [t for t in tasks if (part.task == t).any()]
            if not cols:
                continue
            rows = []
            for m in methods:
                cells = [part[(part.task == t) & (part.method == m)] for t in cols]
                cells = [None if c.empty else c.iloc[0] for c in cells]
                if all(c is None for c in cells):
                    continue
                means = [c["mean"] for c in cells if c is not None]
                full = len(means) == len(cols)  # a cross-task figure only over every task
                rows.append(
                    (m, cells, float(np.mean(means)) if full else None, float(np.min(means)) if full else None)
                )
            yield rule, metric, cols, rows


def results_tables(
    table: pd.DataFrame,
    methods: Sequence[str],
    tasks: Sequence[str],
    selection: Mapping[str, str],
    metrics: Sequence[str] = DEFAULT_TABLE_METRICS,
    spread: str = "se",
) -> str:
    """DomainBed's collect_results shape: per selection rule, one markdown table per metric (a ``group:`` metric
    only over the tasks that have the group), a row per method, a column per task (mean ± spread and the
    paper's figure) and the cross-task average and worst."""
    lines: list[str] = []
    last_rule = None
    for rule, metric, cols, rows in _grid(table, methods, tasks, metrics):
        if rule is not None and rule != last_rule:
            lines += [f"### Selection: {SELECTION_TEXT[rule]}", ""]
            last_rule = rule
        lines += [
            f"**{_metric_title(metric)}**" + (" ORACLE" if rule == "oracle" else ""),
            "",
            "| method | " + " | ".join(cols) + " | average | worst |",
            "|---|" + "---:|" * (len(cols) + 2),
        ]
        for m, cells, avg, worst in rows:
            out = []
            for t, c in zip(cols, cells):
                cell = "-" if c is None else _pm(c["mean"], c[spread])
                paper = paper_figure(t, m, metric)
                if paper is not None:
                    cell += f" (paper: {100 * paper:.1f}%)"
                if rule is None and selection.get(m) == "oracle":
                    cell += " ORACLE"
                out.append(cell)
            out += ["-" if avg is None else f"{100 * avg:.1f}%", "-" if worst is None else f"{100 * worst:.1f}%"]
            lines.append(f"| {m} | " + " | ".join(out) + " |")
        lines.append("")
    return "\n".join(lines)


def _tex(text: str) -> str:
    return "".join("\\" + ch if ch in "_%&#$" else ch for ch in text)


def results_latex(
    table: pd.DataFrame,
    methods: Sequence[str],
    tasks: Sequence[str],
    metrics: Sequence[str] = DEFAULT_TABLE_METRICS,
    spread: str = "se",
) -> str:
    """The tables of :func:`results_tables` as LaTeX tabulars (booktabs), one per selection rule and metric."""
    out = [f"% metashift-hf experiment compare: {SPREAD_TEXT[spread]}; requires \\usepackage{{booktabs}}", ""]
    for rule, metric, cols, rows in _grid(table, methods, tasks, metrics):
        out += [
            f"% selection: {SELECTION_TEXT[rule] if rule else 'each method its own rule (results.md)'}",
            f"% {_metric_title(metric)}",
            "\\begin{tabular}{l" + "c" * (len(cols) + 2) + "}",
            "\\toprule",
            "Method & " + " & ".join(_tex(t) for t in cols) + " & Avg & Worst \\\\",
            "\\midrule",
        ]
        for m, cells, avg, worst in rows:
            vals = [
                "--"
                if c is None
                else f"{100 * c['mean']:.1f}" + ("" if np.isnan(c[spread]) else f" $\\pm$ {100 * c[spread]:.1f}")
                for c in cells
            ]
            vals += ["--" if avg is None else f"{100 * avg:.1f}", "--" if worst is None else f"{100 * worst:.1f}"]
            out.append(f"{_tex(m)} & " + " & ".join(vals) + " \\\\")
        out += ["\\bottomrule", "\\end{tabular}", ""]
    return "\n".join(out)


def _pm(mean: float, spread: float) -> str:
    return f"{100 * mean:.1f}" + ("" if spread is None or np.isnan(spread) else f" ± {100 * spread:.1f}") + "%"


def _plot(result: CompareResult, out: BinaryIO) -> None:
    """Worst-group accuracy (mean ± spread) per task, one bar per method, as PNG into ``out``."""
    import matplotlib  # heavy optional dependency: only for this figure

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summ = result.summary_frame()
    summ = summ[
        (summ.metric == "worst_group") & (summ.selection == summ.method.map(lambda m: result.card["selection"][m]))
    ]  # each method's own rule
    n_m = len(result.methods)
    width = 0.8 / n_m
    fig, ax = plt.subplots(figsize=(min(12.0, 2 + len(result.tasks) * (0.5 + 0.12 * n_m)), 4.2), dpi=120)
    xs = np.arange(len(result.tasks))
    for j, m in enumerate(result.methods):
        vals = [summ[(summ.task == t) & (summ.method == m)] for t in result.tasks]
        ys = [100 * v.iloc[0]["mean"] if not v.empty else np.nan for v in vals]
        err = [100 * (0 if v.empty or np.isnan(v.iloc[0][result.spread]) else v.iloc[0][result.spread]) for v in vals]
        label = m + (" (oracle)" if result.card["selection"][m] == "oracle" else "")
        pos = xs + (j - (n_m - 1) / 2) * width
        ax.bar(pos, ys, width, yerr=err, capsize=2, label=label)
        paper = [(x, paper_figure(t, m, "worst_group")) for x, t in zip(pos, result.tasks)]
        paper = [(x, 100 * v) for x, v in paper if v is not None]
        if paper:
            ax.scatter(*zip(*paper), marker="_", s=120, color="black", zorder=3, label=f"paper: {m} (Table 2)")
    ax.set_xticks(xs, [t.replace("paper-", "") for t in result.tasks], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("worst-group accuracy (%)")
    ax.set_ylim(0, 100)
    ax.set_title(f"methods compared: worst-group accuracy (mean ± {result.spread} over seeds)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, ncol=min(4, n_m))
    fig.tight_layout()
    fig.savefig(out, format="png", bbox_inches="tight")
    plt.close(fig)


def method_hparams(hparams: Mapping[str, float], method: str, methods: Sequence[str]) -> dict[str, float]:
    """``method``'s share of ``hparams``: keys ``method.name`` (e.g. ``groupdro.eta``) for one method, plain
    ``name`` for every method (so it must be one of each method's)."""
    out = {}
    for key, value in hparams.items():
        owner, sep, name = key.partition(".")
        if not sep:
            out[key] = value
        elif owner not in methods:
            raise UnknownNameError(
                f"hyper-parameter {key!r} names a method that is not compared",
                f"prefix it with one of: {', '.join(methods)}",
            )
        elif owner == method:
            out[name] = value
    return out


def _check_names(methods: Sequence[str], tasks: Sequence[str]) -> None:
    if not methods or not tasks:
        raise InputFormatError(
            "experiment compare needs at least one method and one task",
            "pass e.g. --methods erm,groupdro,dfr --tasks paper-subpop-cat-dog-p12",
        )
    for m in methods:
        if m not in METHODS:
            raise UnknownNameError(
                f"unknown method {m!r}{did_you_mean(m, METHODS)}", f"use some of: {', '.join(METHODS)}"
            )
    for t in tasks:  # a task id names a folder (runs/<task>/, SRC/metashift-<task>): no path may hide in it
        if not isinstance(t, str) or not t or id_slug(t) != t or t.startswith("."):
            raise UnknownNameError(
                f"{short_repr(t)} is not a task id: a task id is letters, digits, '.', '_' and '-', "
                "and names no folder (no '/', no '..')",
                "name tasks by id, e.g. --tasks paper-subpop-cat-dog-p12 (`metashift-hf tasks list`); "
                "with --from SRC, task T is read from SRC/metashift-T",
            )
    for what, names in (("method", methods), ("task", tasks)):
        if len(set(names)) != len(names):
            raise InputFormatError(f"a {what} is named twice in {', '.join(names)}", f"name each {what} once")


@dataclass(frozen=True)
class Arm:
    """One trained configuration of a comparison: a method under one selection rule with one hyper-parameter draw."""

    method: str
    rule: str
    draw: int
    folder: str  # runs/<task>/<folder>
    config: TrainConfig


def plan_arms(
    methods: Sequence[str],
    config: TrainConfig,
    selections: Sequence[str] | None = None,
    n_hparams: int = 1,
    hparams_seed: int = 0,
) -> list[Arm]:
    """Every (method, rule, draw) to train, its folder name and resolved config (every bad setting refused here).

    ``selections``: the rules to train each method under (None: ``config.select`` or the method's default).
    Draw 0 is ``config`` as given, one arm over every seed; draw k > 0 is one arm per seed (trial) ``s``, whose
    values are :func:`sample_hparams` ``(method, k, hparams_seed, trial=s)`` (method's and the loop's lr and weight
    decay), the hyper-parameters the user fixed (``config.hparams``) winning. As DomainBed's sweep
    (``random_hparams(..., seed_hash(hparams_seed, trial_seed))``): each trial of a draw has its own values, so
    the spread over trials includes the search's variance."""
    arms = []
    several = selections is not None and len(selections) > 1
    seeds = config.seed_list  # the seeds alone: hparams resolve per method below
    for m in methods:
        base = replace(config, method=m, hparams=method_hparams(config.hparams, m, methods))
        for rule in selections or [None]:
            for k in range(n_hparams):
                cfg = replace(base, select=rule or base.select)
                folder = m + (f"-{cfg.select}" if several else "") + (f"-h{k}" if n_hparams > 1 else "")
                if k == 0:
                    cfg = cfg.resolved()
                    arms.append(Arm(m, cfg.select, k, folder, cfg))
                    continue
                for s in seeds:
                    drawn = sample_hparams(m, k, hparams_seed, trial=s)
                    loop = {key: drawn.pop(key) for key in SWEEP_COMMON}
                    trial = replace(cfg, seeds=[s], hparams={**drawn, **base.hparams}, **loop).resolved()
                    arms.append(Arm(m, trial.select, k, f"{folder}-t{s}", trial))
    return arms


@dataclass(frozen=True)
class CompareOptions:
    """How a comparison is tabulated and swept (checked when made, before any training).

    ``selections``: every rule to train each method under (None: ``config.select`` or each method's
    default); ``spread`` (:data:`SPREADS`): ``se`` (DomainBed's/SubpopBench's standard error, default),
    ``se-ddof1`` or ``std`` in
    results.md/.tex; ``latex``: also write results.tex; ``n_hparams`` > 1: a random search of that many
    draws per method, ``n_trials`` seeds each (0..n_trials-1, replacing ``config.seeds``), the draw
    selected per rule as DomainBed's sweep; ``hparams_seed``: the seed of the draws."""

    selections: tuple[str, ...] | None = None
    spread: str = "se"
    latex: bool = False
    n_hparams: int = 1
    n_trials: int | None = None
    hparams_seed: int = 0

    def __post_init__(self) -> None:
        if self.spread not in SPREADS:
            raise UnknownNameError(f"unknown spread {self.spread!r}", f"use one of: {', '.join(SPREADS)}")
        for rule in self.selections or ():
            if rule not in SELECTIONS:
                raise UnknownNameError(
                    f"unknown selection {rule!r}", f"use some of: {', '.join(SELECTIONS)} (or --select all)"
                )
        object.__setattr__(self, "n_hparams", opt.positive_int(self.n_hparams, "n_hparams"))
        if self.n_trials is not None:
            object.__setattr__(self, "n_trials", opt.seed_count(self.n_trials, "n_trials"))
        object.__setattr__(self, "hparams_seed", opt.seed(self.hparams_seed, "hparams_seed"))


def run_compare(
    methods: Sequence[str],
    tasks: Sequence[str],
    origin: TaskOrigin,
    out: "str | os.PathLike",
    config: TrainConfig = TrainConfig(),
    *,
    cache_dir: "str | os.PathLike | None" = None,
    progress: bool = True,
    resume: bool = False,
    options: CompareOptions = CompareOptions(),
) -> CompareResult:
    """Train every method on every task (``config``'s seeds, probe and settings; ``config.select`` or each
    method's default selection, or every rule of ``options.selections``) and write the table. The tasks come
    from ``origin`` (a build, or an export folder / Hub namespace: :class:`TaskOrigin`). ``out`` is new,
    empty, or an earlier comparison (its runs gain the new seeds; a run of other settings there is refused).
    ``options``: tables and sweep (:class:`CompareOptions`). The steps: :class:`Comparison`."""
    run = Comparison.plan(methods, tasks, origin, config, options)
    with claimed_dir(out, COMPARE_KIND, inputs=origin.inputs) as folder, writer_lock(folder):
        run.open(folder)
        results = run.train_arms(cache_dir=cache_dir, progress=progress, resume=resume)
        table = run.table(results)
        result = CompareResult(
            run.methods, run.tasks, table, run.first, run.card(results, table), folder, options.spread
        )
        _write(result, folder, latex=options.latex)
    return result


@dataclass
class Comparison:
    """One :func:`run_compare` call as named steps: :meth:`plan` (names and every arm's config checked, before any
    folder is touched), :meth:`open` (the --out folder's earlier runs, every run folder, the tasks and the backbone
    checked before any training), :meth:`train_arms`, :meth:`table` (results.csv's rows) and :meth:`card`."""

    methods: tuple[str, ...]
    tasks: tuple[str, ...]
    origin: TaskOrigin
    arms: list[Arm]
    options: CompareOptions
    t0: float = field(default_factory=time.perf_counter)
    folder: Path | None = None
    data: dict[str, TaskData] = field(default_factory=dict)
    backbone: Any = None

    @classmethod
    def plan(
        cls,
        methods: Sequence[str],
        tasks: Sequence[str],
        origin: TaskOrigin,
        config: TrainConfig,
        options: CompareOptions,
    ) -> "Comparison":
        methods, tasks = tuple(methods), tuple(tasks)
        _check_names(methods, tasks)
        if options.n_trials is not None:
            config = replace(config, seeds=options.n_trials)
        arms = plan_arms(methods, config, options.selections, options.n_hparams, options.hparams_seed)
        return cls(methods, tasks, origin, arms, options)

    @property
    def first(self) -> TrainConfig:
        return self.arms[0].config

    def open(self, folder: Path) -> None:
        """Everything checked before any training: the earlier comparison in ``folder`` is covered, every run
        folder may be written, the tasks open, the backbone loads (once: features shared by every method and
        task) and every earlier run merges."""
        self.folder = folder
        check_covers_earlier(folder, [(a.method, a.folder) for a in self.arms], self.tasks)
        for t in self.tasks:
            for a in self.arms:
                check_train_out(folder / "runs" / t / a.folder, inputs=self.origin.inputs)
        self.data = self.origin.open(self.tasks)
        first = self.first
        image_size = first.image_size if first.probe == "linear" else None
        self.backbone = load_backbone(first.backbone, image_size=image_size, device=first.device)
        for t in self.tasks:
            for a in self.arms:
                check_mergeable(folder, t, a.folder, self.data[t], a.config, self.backbone)

    def train_arms(
        self, *, cache_dir: "str | os.PathLike | None", progress: bool, resume: bool
    ) -> dict[tuple[str, str], TrainResult]:
        """Every arm on every task: (task, arm folder) -> its run. Under several rules each method and draw is
        trained once per seed, every rule keeping its own epoch (:class:`SharedFits`)."""
        rules = tuple(dict.fromkeys(a.rule for a in self.arms))
        several = len(rules) > 1
        shared = {(t, a.method, a.draw): SharedFits(rules) for t in self.tasks for a in self.arms} if several else {}
        results: dict[tuple[str, str], TrainResult] = {}
        for t in self.tasks:
            for a in self.arms:
                logger.info(f"   training {a.folder} on {t} ...")
                try:
                    results[t, a.folder] = train(
                        self.data[t],
                        self.folder / "runs" / t / a.folder,
                        a.config,
                        cache_dir=cache_dir,
                        progress=progress,
                        backbone=self.backbone,
                        resume=resume,
                        shared=shared.get((t, a.method, a.draw)),
                    )
                except OutputExistsError as exc:  # another comparison wrote there meanwhile
                    raise OutputExistsError(
                        exc.what,
                        f"run the same command again once the other comparison into {self.folder} "
                        "has finished (its runs are merged), or name a new --out",
                    ) from None
        return results

    def table(self, results: Mapping[tuple[str, str], TrainResult]) -> pd.DataFrame:
        """results.csv: a row per task, arm, seed and metric, ``selected`` marking the draw the sweep keeps."""
        chosen = _sweep_choice(results, self.arms, self.tasks)
        rows = []
        for t in self.tasks:
            for a in self.arms:
                for run in results[t, a.folder].runs:
                    kept = chosen[t, a.method, a.rule, run.seed] == a.draw
                    for metric, value, lo, hi in seed_metrics(run.scores):
                        rows.append(
                            (t, a.method, run.seed, a.rule, a.draw, kept, a.config.sampling, metric, value, lo, hi)
                        )
        return pd.DataFrame(rows, columns=list(COLUMNS))

    def card(self, results: Mapping[tuple[str, str], TrainResult], table: pd.DataFrame) -> dict[str, Any]:
        """compare.json: what was compared, how, on what, and how long it took."""
        arms, methods, first, data = self.arms, self.methods, self.first, self.data
        return {
            "package_version": __version__,
            "methods": list(methods),
            "tasks": list(self.tasks),
            "seeds": sorted(set(table["seed"])),
            "probe": first.probe,
            "backbone": next(iter(results.values())).card["backbone"],
            "selection": {m: next(a.rule for a in arms if a.method == m) for m in methods},
            "selections": sorted({a.rule for a in arms}, key=SELECTIONS.index),
            "sampling": first.sampling,
            "sampling_rule": SAMPLING_TEXT[first.sampling],
            "spread": self.options.spread,
            "sweep": {
                "n_hparams": self.options.n_hparams,
                "hparams_seed": self.options.hparams_seed,
                "draws": {a.folder: _draw_card(a) for a in arms},
            },
            "algorithms": {
                m: asdict(algorithm_info(m, next(a.config.hparams for a in arms if a.method == m))) for m in methods
            },
            "task_sources": {t: d.where for t, d in data.items()},
            "task_origins": {t: d.origin() for t, d in data.items()},
            "task_overrides": {t: dict(d.spec.overrides) for t, d in data.items()},
            "config": {k: v for k, v in asdict(first).items() if k not in ("method", "select", "hparams")},
            "features": {f"{t}/{f}": r.card["features"] for (t, f), r in results.items()},
            "seconds": round(time.perf_counter() - self.t0, 3),
        }


def _draw_card(a: Arm) -> dict[str, Any]:
    return {
        "method": a.method,
        "draw": a.draw,
        "trials": list(a.config.seeds),  # a draw k > 0 has its own values per trial
        "lr": a.config.lr,
        "weight_decay": a.config.weight_decay,
        "hparams": dict(a.config.hparams),
    }


def _write(result: CompareResult, folder: Path, *, latex: bool) -> None:
    """results.csv, results.md (results.tex), compare.json and compare.png, each written atomically."""
    with atomic_file(folder / "results.csv", "w") as f:
        result.table.to_csv(f, index=False)
    with atomic_file(folder / "results.md", "w") as f:
        f.write(result.markdown())
    if latex:
        with atomic_file(folder / "results.tex", "w") as f:
            f.write(result.latex())
    with atomic_file(folder / "compare.json", "w") as f:
        f.write(json.dumps(result.card, indent=2, default=str) + "\n")
    _plot_atomic(result, folder / "compare.png")


def _sweep_choice(
    results: Mapping[tuple[str, str], TrainResult], arms: Sequence[Arm], tasks: Sequence[str]
) -> dict[tuple[str, str, int, int], int]:
    """(task, method, rule, seed) -> the hyper-parameter draw with the best selection score under that rule
    (each run's score of its kept epoch; ties: the lower draw)."""
    best: dict[tuple[str, str, int, int], tuple[float, int]] = {}
    for t in tasks:
        for a in arms:
            for run in results[t, a.folder].runs:
                key = (t, a.method, a.rule, run.seed)
                cand = (float(run.validation_accuracy), -a.draw)
                if key not in best or cand > best[key]:
                    best[key] = cand
    return {k: -v[1] for k, v in best.items()}


def _plot_atomic(result: CompareResult, path: Path) -> None:
    """compare.png through the one atomic write (a killed run's temporary is cleaned as every other's);
    no figure without matplotlib (an optional extra)."""
    if importlib.util.find_spec("matplotlib") is None:
        return
    with atomic_file(path) as f:
        _plot(result, f)


__all__ = [
    "run_compare",
    "Comparison",
    "plan_arms",
    "Arm",
    "results_latex",
    "SPREADS",
    "SPREAD_TEXT",
    "domainbed_se",
    "method_hparams",
    "summary_frame",
    "header",
    "rule_sections",
    "results_tables",
    "GROUP_METRIC",
    "CompareResult",
    "seed_metrics",
    "paper_figure",
    "COLUMNS",
    "METRICS",
    "COMPARE_KIND",
]
