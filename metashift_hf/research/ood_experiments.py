"""Experiments on shifts by type and level, clustered OOD sets and training conflicts (docs/experiments.md).

* :func:`ood_levels` - train each model on every level task of a shift family (tasks.levels),
  per (model, level) ID/OOD accuracy, Drop%, worst group; per curve slope, AUC, knee
  (metashift_hf.research.level_curves); Kendall's tau / Spearman's rho between ID and OOD accuracy across
  models; for marginal shift the mixed-to-test control.
* :func:`clustered` - k-means per class on backbone features; train on D_k (each class's k-th
  largest cluster), test on the other D_j; MI between cluster id and context tags, top contexts.
* :func:`conflicts` - MetaShift section 4.3 on cached features (metashift_hf.research.conflicts).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import pandas as pd

from metashift_hf.builders.artifact import Artifact
from metashift_hf.tasks import levels as lv
from metashift_hf.tasks.plan import SPLITS, ArtifactSource, Row, TaskPlan
from metashift_hf.tasks.shifts import (
    ambiguous_images,
    finish_plan,
    majority_community,
    seeded_order,
)
from metashift_hf.tasks.spec import GroupSpec

from ..core import options as opt
from ..core.errors import EmptyResultError, InputFormatError, UnknownNameError, did_you_mean
from ..core.fsutil import atomic_dir, check_out
from ..hub.task_data import TaskRef
from ..hub.task_open import TaskOrigin
from . import clusters as cl
from . import conflicts as cf
from .features import image_features, load_backbone
from .level_curves import MIN_MODELS_FOR_P, curve_summary, format_p, pooled_agreement, rank_agreement
from .train import METHODS, PROBES, TrainConfig, train


if TYPE_CHECKING:
    import os

logger = logging.getLogger(__name__)
KIND = "experiment"  # the --out marker kind


def _out(out, force: bool, origin: TaskOrigin):
    """The output folder, written atomically; checked again here (it was checked before the work)."""
    return atomic_dir(out, kind=KIND, force=force, inputs=origin.inputs)


def _build(origin: TaskOrigin, name: str, out, force: bool, plans: bool = False) -> Artifact:
    """The build ``origin`` names, loaded, after ``out`` was checked. These experiments make their tasks on a
    build: an export folder or Hub namespace is refused, and so are task options or a planning seed where the
    experiment plans nothing (``plans``), rather than silently ignored."""
    check_out(out, KIND, force=force, inputs=origin.inputs)
    if not plans and (origin.seed is not None or origin.options or origin.task_options):
        raise InputFormatError(
            f"experiment {name} plans no task id, so a task seed or task options have no meaning for it",
            f"pass TaskOrigin(artifact=..., images=...) only; {name}'s own seed is in its config",
        )
    return origin.build(f"experiment {name}")


# --------------------------------------------------------------------------------------------
# models
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelSpec:
    """``method[:probe]``, e.g. ``erm``, ``groupdro``, ``erm:finetune``."""

    method: str
    probe: str = "linear"

    @property
    def name(self) -> str:
        return self.method if self.probe == "linear" else f"{self.method}:{self.probe}"

    @classmethod
    def parse(cls, text: str) -> "ModelSpec":
        method, _, probe = text.partition(":")
        probe = probe or "linear"
        if method not in METHODS:
            raise UnknownNameError(
                f"unknown model {text!r}" + did_you_mean(method, METHODS),
                f"use method[:probe] with method in {', '.join(METHODS)} and probe in "
                f"{', '.join(PROBES)}, e.g. erm or groupdro:linear",
            )
        if probe not in PROBES:
            raise UnknownNameError(f"unknown probe in model {text!r}", f"use one of {', '.join(PROBES)}")
        return cls(method, probe)


# --------------------------------------------------------------------------------------------
# the experiments' settings (the tasks come from a TaskOrigin: a build with its images)
# --------------------------------------------------------------------------------------------
# k-means restarts (scikit-learn's n_init; default 10): bounded like --seeds so a typo cannot run for days (issue 37)
N_INIT_MAX = 1000
N_INIT_CHECK = opt.int_in(1, N_INIT_MAX)
TWO_SEEDS = TrainConfig(seeds=2)  # the shift experiments' training default: 2 seeds per task, linear probe


@dataclass(frozen=True)
class OodLevelsConfig:
    """Settings of ``ood-levels`` (the tasks: the level family planned on the origin's build, with its seed and
    options, e.g. ``{"levels": 4}``).

    classes: the class pair the family is built on.
    shift_type: ``marginal`` | ``conditional`` | ``joint`` (tasks.levels.SHIFT_TYPES).
    models: ``method[:probe]`` each (:class:`ModelSpec`), trained on every level task.
    training: seeds, device, epochs, ... of every model (its ``method``/``probe`` come from ``models``).
    """

    classes: tuple[str, ...] = ("cat", "dog")
    shift_type: str = "marginal"
    models: tuple[str, ...] = ("erm",)
    training: TrainConfig = TWO_SEEDS


@dataclass(frozen=True)
class ClusteredConfig:
    """Settings of ``clustered`` (its tasks are made here from k-means clusters of the origin's build).

    classes: the class pair; k: clusters per class (at least 2); seed: the k-means and split seed;
    n_init: k-means restarts; model: ``method[:probe]`` trained on each D_k; training: its seeds, device,
    epochs, ...; top: contexts listed per cluster.
    """

    classes: tuple[str, ...] = ("cat", "dog")
    k: int = 8
    seed: int = 0
    n_init: int = 10
    model: str = "erm"
    training: TrainConfig = TWO_SEEDS
    top: int = 3


@dataclass(frozen=True)
class ConflictsConfig:
    """Settings of ``conflicts`` (MetaShift section 4.3 on the origin's build).

    classes: the class pair; subsets: the ``class(context)`` subsets to use (None: every kept subset of the
    classes with at least ``min_images`` images); per_subset / eval_per_subset: training / evaluation images
    drawn per subset; min_eval: fewest images a subset keeps to take part; run: the SGD run
    (:class:`metashift_hf.research.conflicts.ConflictConfig`: steps, window, lr, seed); device: where
    features are computed.
    """

    classes: tuple[str, ...] = ("cat", "dog")
    subsets: tuple[str, ...] | None = None
    min_images: int = 50
    per_subset: int = 50
    eval_per_subset: int = 50
    min_eval: int = 10
    run: cf.ConflictConfig = field(default_factory=cf.ConflictConfig)
    device: str = "cpu"


def _config(model: ModelSpec, training: TrainConfig) -> TrainConfig:
    return replace(training, method=model.method, probe=model.probe)  # type: ignore[arg-type]


def _checked_classes(art: Artifact, classes: Sequence[str]) -> tuple[str, ...]:
    """Two or more distinct classes of the artifact (checked before any image is read)."""
    names = opt.names(classes, "classes", at_least=2)
    known = art.classes()
    unknown = [c for c in names if c not in known]
    if unknown:
        raise UnknownNameError(
            f"{unknown[0]!r} is not a class of artifact {art.root}" + did_you_mean(unknown[0], known),
            "pass classes listed by `metashift-hf classes --artifact ARTIFACT`",
        )
    return names


def _checked_training(models: Sequence[ModelSpec], training: TrainConfig) -> None:
    """Every model's TrainConfig resolved (seeds, epochs, device checked) before the first task is planned."""
    if not isinstance(training, TrainConfig):
        raise opt.OptionError(f"training {training!r} is not a TrainConfig", "pass training=TrainConfig(seeds=2, ...)")
    for m in models:
        _config(m, training).resolved()


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, default=_jsonable) + "\n")


def _jsonable(v: Any) -> Any:
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    if isinstance(v, np.ndarray):
        return v.tolist()
    return str(v)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


# --------------------------------------------------------------------------------------------
# ood-levels
# --------------------------------------------------------------------------------------------
def _level_tasks(shift_type: str, classes: Sequence[str], n_levels: int) -> dict[str, list[tuple[str, float, str]]]:
    """curve name -> [(task id, x, level name)] in level order; 'mix' is the marginal control."""
    A = list(classes)
    if shift_type == "marginal":
        far = f"d{n_levels - 1}"
        return {
            "ood": [(lv.task_id("marginal", A, f"d{k}"), float("nan"), f"d{k}") for k in range(n_levels)],
            "mix": [(lv.task_id("marginal", A, far), 0.0, far)]
            + [
                (lv.task_id("marginal", A, f"{far}-mix{int(round(f * 100))}"), f, f"{far}-mix{int(round(f * 100))}")
                for f in lv.MIX_FRACTIONS
            ],
        }
    if shift_type == "conditional":
        bal = [(lv.task_id("conditional", A, lv._delta_name(d)), d, lv._delta_name(d)) for d in lv.DELTAS]
        rev = [bal[0]] + [
            (lv.task_id("conditional", A, lv._delta_name(d) + "-rev"), d, lv._delta_name(d) + "-rev")
            for d in lv.DELTAS
            if d > 0
        ]
        return {"balanced": bal, "reversed": rev}
    if shift_type == "joint":
        return {
            f"d{k}": [
                (lv.task_id("joint", A, f"d{k}-{lv._delta_name(d)}"), d, f"d{k}-{lv._delta_name(d)}")
                for d in lv.DELTAS
            ]
            for k in range(n_levels)
        }
    raise UnknownNameError(f"unknown shift type {shift_type!r}", f"use one of {', '.join(lv.SHIFT_TYPES)}")


def ood_levels(
    origin: TaskOrigin,
    out: "str | os.PathLike",
    config: OodLevelsConfig = OodLevelsConfig(),
    *,
    cache_dir: "str | os.PathLike | None" = None,
    progress: bool = False,
    force: bool = False,
) -> dict:
    """Train every model on every level task; write results.json, results.md, levels.csv, curves.png."""
    art = _build(origin, "ood-levels", out, force, plans=True)
    specs = [ModelSpec.parse(m) for m in opt.names(config.models, "models")]
    _checked_training(specs, config.training)
    seed, shift_type = origin.planning_seed, config.shift_type
    classes = _checked_classes(art, config.classes)
    options = dict(origin.options)
    n_levels = int(options.get("levels", lv.LevelSizes().levels))
    curves = _level_tasks(shift_type, classes, n_levels)
    tasks = {tid: name for pts in curves.values() for tid, _, name in pts}
    data = replace(origin, artifact=art).open(list(tasks))  # every level task planned before any training
    plans = {tid: d.plan for tid, d in data.items()}
    bb = load_backbone(device=config.training.device)
    rows = []
    for m in specs:
        for tid, tp in plans.items():
            res = train(
                data[tid], None, _config(m, config.training), backbone=bb, cache_dir=cache_dir, progress=progress
            )
            a = res.aggregate()
            lev = tp.spec.level
            # ID and OOD are id_test and test at every designed level, the conditional control (delta = 0, declared
            # none) too: its Drop% is the curve's no-shift reference (tasks.splits.split_roles)
            ood, idv = a["splits"]["test"], a["splits"]["id_test"]["average"]
            rows.append(
                {
                    "model": m.name,
                    "task_id": tid,
                    "level": tasks[tid],
                    "type": lev.type,
                    "distance": lev.distance,
                    "delta": lev.delta,
                    "mixed_fraction": lev.mixed_fraction,
                    "test": lev.test,
                    "n_train": len(tp.splits["train"]),
                    "n_test": len(tp.splits["test"]),
                    "id": idv["mean"],
                    "id_std": idv["std"],
                    "ood": ood["average"]["mean"],
                    "ood_std": ood["average"]["std"],
                    "drop_pct": a["drop_pct"]["mean"],
                    "worst_group": ood["worst_group"]["mean"],
                    "worst_group_std": ood["worst_group"]["std"],
                    "n_seeds": a["n_seeds"],
                }
            )
            r = rows[-1]
            logger.info(
                f"   {m.name:<10} {tid:<42} ID {_pct(r['id'])}  OOD {_pct(r['ood'])}  worst group {_pct(r['worst_group'])}"
            )
    table = pd.DataFrame(rows)
    summaries = []
    for m in specs:
        part = table[table["model"] == m.name].set_index("task_id")
        for curve, pts in curves.items():
            xs = [(part.at[tid, "distance"] if np.isnan(x) else x) for tid, x, _ in pts]
            ys = [part.at[tid, "ood"] for tid, _, _ in pts]
            s = curve_summary([name for _, _, name in pts], xs, ys)
            summaries.append(
                {
                    "model": m.name,
                    "curve": curve,
                    "x": [float(v) for v in xs],
                    "ood": ys,
                    "levels": [name for _, _, name in pts],
                    **s.as_dict(),
                }
            )
    # Per level across models (n = models); all levels at once only through a permutation test over models,
    # never one correlation over the (model, level) points, which are not independent (level_curves).
    agreement: dict[str, Any] = {"per_level": [], "pooled": None, "min_models_for_p": MIN_MODELS_FOR_P}
    if len(specs) >= 2:
        for tid in tasks:
            part = table[table["task_id"] == tid]
            agreement["per_level"].append(
                {"task_id": tid, "level": tasks[tid], **rank_agreement(part["id"], part["ood"])}
            )
        wide = {
            k: table.pivot(index="model", columns="task_id", values=k).loc[[m.name for m in specs], list(tasks)]
            for k in ("id", "ood")
        }
        agreement["pooled"] = pooled_agreement(wide["id"].to_numpy(float), wide["ood"].to_numpy(float))
    result = {
        "experiment": "ood-levels",
        "classes": list(classes),
        "type": shift_type,
        "models": [m.name for m in specs],
        "seeds": len(config.training.resolved().seeds),
        "backbone": bb.card(),  # its preprocessing's crop rule tells whether stored figures are stale
        "task_seed": seed,
        "options": options,
        "levels": rows,
        "curves": summaries,
        "agreement": agreement,
        "family": next(iter(plans.values())).spec.to_dict()["family"],
        "factor": {tid: p.spec.to_dict()["factor"] for tid, p in list(plans.items())[:1]},
        "model_selection": "each run keeps the epoch its method's selection rule prefers (validation average; "
        "validation worst-group for reweight, groupdro, jtt, dfr; metashift_hf.research.algorithms)",
    }
    with _out(out, force, origin) as tmp:
        table.to_csv(tmp / "levels.csv", index=False)
        _write_json(tmp / "results.json", result)
        (tmp / "results.md").write_text(_levels_markdown(result))
        _plot_curves(summaries, table, curves, tmp / "curves.png", f"{shift_type} shift, {'/'.join(classes)}")
    return result


# The shift-level and clustered designs follow the OOD-testing paper's paradigms on MetaShift's contexts; no
# published figure exists for these tasks, so the tables say so rather than leave a "paper" column empty.
NO_PUBLISHED = (
    "No published figure to compare: these tasks are built here (the paper reference, paper-tasks.json, "
    "has none for them); every figure below is this run's measurement."
)


def _levels_markdown(r: dict) -> str:
    out = [
        f"# ood-levels: {r['type']} shift, {' vs '.join(r['classes'])}",
        "",
        f"Models {', '.join(r['models'])}; {r['seeds']} seeds each (mean shown); {r['model_selection']}.",
        "",
        NO_PUBLISHED,
        "",
        "| model | level | d | delta | mix | n train | n test | ID | OOD | Drop% | worst group |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for x in r["levels"]:
        d = "" if x["distance"] is None else f"{x['distance']:.3f}"
        dl = "" if x["delta"] is None else f"{x['delta']:g}"
        dp = "n/a" if x["drop_pct"] is None else f"{x['drop_pct']:.1f}"
        out.append(
            f"| {x['model']} | {x['level']} | {d} | {dl} | {x['mixed_fraction']:g} | {x['n_train']} | "
            f"{x['n_test']} | {_pct(x['id'])} | {_pct(x['ood'])} | {dp} | {_pct(x['worst_group'])} |"
        )
    out += ["", "| model | curve | slope (acc / unit x) | AUC | knee |", "|---|---|---:|---:|---|"]
    for c in r["curves"]:
        slope = "n/a" if c["slope"] is None else f"{c['slope']:.3f}"
        auc = "n/a" if c["auc"] is None else f"{c['auc']:.3f}"
        out.append(f"| {c['model']} | {c['curve']} | {slope} | {auc} | {c['knee'] or 'none'} |")
    ag = r["agreement"]
    if ag.get("per_level"):
        out += [
            "",
            f"ID vs OOD accuracy across models, per level (n = number of models; no p-value below "
            f"{ag['min_models_for_p']} models; permutation p-values, level_curves.rank_agreement):",
            "",
            "| level | n | Kendall tau | p | Spearman rho | p |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for a in ag["per_level"]:
            out.append(
                f"| {a['level']} | {a['n_models']} | {_num(a['kendall_tau'])} | {format_p(a['kendall_p'])} | "
                f"{_num(a['spearman_rho'])} | {format_p(a['spearman_p'])} |"
            )
    pooled = ag.get("pooled")
    if pooled:
        out += [
            "",
            f"All levels: mean per-level Kendall tau {_num(pooled['mean_kendall_tau'])} over "
            f"{pooled['levels_with_ranks']} levels, {pooled['n_models']} models, p {format_p(pooled['p_value'])} "
            f"({pooled['p_note']}).",
        ]
    return "\n".join(out) + "\n"


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _plot_curves(summaries: list[dict], table: pd.DataFrame, curves: dict, path: Path, title: str) -> None:
    import matplotlib  # heavy optional dependency, loaded only to draw

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(curves)
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.4), squeeze=False)
    for ax, curve in zip(axes[0], names):
        for s in [s for s in summaries if s["curve"] == curve]:
            part = table[table["model"] == s["model"]].set_index("task_id")
            ids = [part.at[tid, "id"] for tid, _, _ in curves[curve]]
            (line,) = ax.plot(s["x"], s["ood"], marker="o", label=f"{s['model']} OOD")
            ax.plot(s["x"], ids, marker=".", linestyle="--", color=line.get_color(), label=f"{s['model']} ID")
        xlabel = {"ood": "meta-graph distance d", "mix": "fraction of C_te mixed into training"}.get(curve, "delta")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("accuracy")
        ax.set_ylim(0, 1.02)
        ax.set_title(curve, fontsize=9)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------------------------
# clustered OOD sets
# --------------------------------------------------------------------------------------------
def _class_pool(
    art: Artifact, classes: Sequence[str]
) -> tuple[dict[str, list[str]], dict[tuple[str, str], tuple[str, ...]], dict[tuple[str, str], int]]:
    """Per class its unambiguous images (sorted); each image's kept contexts, and the community
    holding most of them (a cluster spans communities: the rows' ``community``, tasks.shifts)."""
    source = ArtifactSource(art)
    amb = ambiguous_images(source, classes)
    ids, tags = {}, {}
    for c in classes:
        kept = source.kept_contexts(c)
        holds: dict[str, list[str]] = {}
        for ctx, members in sorted(kept.items()):
            for i in members:
                if i not in amb:
                    holds.setdefault(i, []).append(ctx)
        ids[c] = sorted(holds)
        tags.update({(c, i): tuple(v) for i, v in holds.items()})
    return ids, tags, {key: majority_community(source, key[0], v) for key, v in tags.items()}


def _cluster_plan(
    k: int,
    classes: Sequence[str],
    clusterings: Sequence[cl.Clustering],
    tags: dict[tuple[str, str], tuple[str, ...]],
    seed: int,
    comms: dict[tuple[str, str], int],
) -> TaskPlan:
    """Train/validation/id_test from each class's k-th cluster (70/10/20, seeded); test = the others."""
    tid = f"clustered-{'-'.join(classes)}-k{k}"
    splits: dict[str, list[Row]] = {s: [] for s in SPLITS}
    for c, cz in zip(classes, clusterings):
        by = {j: [i for i, lab in zip(cz.image_ids, cz.labels.tolist()) if lab == j] for j in range(len(cz.sizes))}
        order = seeded_order(by[k], seed, f"{tid}/{c}")
        n_va, n_it = int(round(0.1 * len(order))), int(round(0.2 * len(order)))
        parts = {"validation": order[:n_va], "id_test": order[n_va : n_va + n_it], "train": order[n_va + n_it :]}
        for s, members in parts.items():
            splits[s] += [Row(i, c, f"{c}(cluster-{k})", f"cluster-{k}", tags[(c, i)], comms[(c, i)]) for i in members]
        for j, members in by.items():
            if j != k:
                splits["test"] += [
                    Row(i, c, f"{c}(cluster-{j})", f"cluster-{j}", tags[(c, i)], comms[(c, i)])
                    for i in sorted(members)
                ]
    # Groups are clusters, not contexts: a GroupSpec per (split, class, cluster) with no contexts.
    groups = {
        s: [GroupSpec(group=g, cls=c, contexts=(), n=0) for g, c in sorted({(r.group, r.label) for r in rows})]
        for s, rows in splits.items()
    }
    notes = [
        f"k-means cluster {k} of each class (clusters ordered by size, 0 = largest) is in distribution; "
        "the other clusters are the OOD test split"
    ]
    return finish_plan(tid, "clustered", classes, seed, splits, groups, Counter(), notes)


def clustered(
    origin: TaskOrigin,
    out: "str | os.PathLike",
    config: ClusteredConfig = ClusteredConfig(),
    *,
    cache_dir: "str | os.PathLike | None" = None,
    progress: bool = False,
    force: bool = False,
) -> dict:
    """Clustered OOD sets when contexts are unknown; results.json, results.md, clusters.csv."""
    art = _build(origin, "clustered", out, force)
    k, n_init = opt.int_at_least(2)(config.k, "k"), N_INIT_CHECK(config.n_init, "n_init")
    seed, top = opt.seed(config.seed, "seed"), opt.positive_int(config.top, "top")
    m = ModelSpec.parse(config.model)
    _checked_training([m], config.training)
    classes = _checked_classes(art, config.classes)
    images = origin.images
    ids, tags, comms = _class_pool(art, classes)
    small = [c for c in classes if len(ids[c]) < k]
    if small:  # k-means needs k images per class: say so before any image is embedded
        raise EmptyResultError(
            f"class {small[0]} has {len(ids[small[0]])} usable images, fewer than k={k} clusters",
            f"lower --k (Python: k=) to at most {min(len(ids[c]) for c in classes)}",
        )
    bb = load_backbone(device=config.training.device)
    fs = image_features(
        [i for c in classes for i in ids[c]], images, backbone=bb, cache_dir=cache_dir, progress=progress
    )
    clusterings = [cl.kmeans_by_size(c, ids[c], fs.rows(ids[c]), k, seed=seed, n_init=n_init) for c in classes]
    per_class = []
    for c, cz in zip(classes, clusterings):
        t = [tags[(c, i)] for i in cz.image_ids]
        mi, hk = cl.mutual_information(cz.labels, t), cl.cluster_entropy(cz.labels, t)
        per_class.append(
            {
                "class": c,
                "sizes": list(cz.sizes),
                "inertia": cz.inertia,
                "mi_bits": mi,
                "h_cluster_bits": hk,
                "mi_normalised": mi / hk if hk else None,
                "top_contexts": {str(j): v for j, v in cl.top_contexts(cz.labels, t, top).items()},
            }
        )
    d_sets = cl.clustered_sets(clusterings)
    all_ids = [(c, i) for c, cz in zip(classes, clusterings) for i in cz.image_ids]
    rows = []
    for kk in sorted(d_sets):
        member = [1 if i in d_sets[kk] else 0 for _, i in all_ids]
        mi_d = cl.mutual_information(member, [tags[key] for key in all_ids])
        tp = _cluster_plan(kk, classes, clusterings, tags, seed, comms)
        res = train(
            TaskRef(tp, artifact=art, images=images),
            None,
            _config(m, config.training),
            backbone=bb,
            cache_dir=cache_dir,
            progress=progress,
        )
        a = res.aggregate()
        test_groups = [g for g in a["per_group"] if g["split"] == "test" and g["mean"] is not None]
        per_cluster: dict[str, list[float]] = {}
        for g in test_groups:  # accuracy on D_j = mean over classes of class-j groups, weighted by n
            j = g["group"].rsplit("cluster-", 1)[1].rstrip(")")
            per_cluster.setdefault(j, []).extend([g["mean"]] * g["n"])
        ood_mean = float(np.mean([np.mean(v) for v in per_cluster.values()])) if per_cluster else None
        rows.append(
            {
                "k": kk,
                "size": len(d_sets[kk]),
                "n_train": len(tp.splits["train"]),
                "id": a["id"]["mean"],
                "ood_mean_over_clusters": ood_mean,
                "ood_pooled": a["ood"]["mean"],
                "worst_group": a["splits"]["test"]["worst_group"]["mean"],
                "mi_membership_bits": mi_d,
            }
        )
        logger.info(
            f"   D_{kk}: {len(d_sets[kk])} images, ID {_pct(rows[-1]['id'])}, mean OOD over clusters {_pct(ood_mean)}, "
            f"MI(membership; contexts) {mi_d:.3f} bits"
        )
    result = {
        "experiment": "clustered",
        "classes": list(classes),
        "k": k,
        "seed": seed,
        "n_init": n_init,
        "model": m.name,
        "seeds": len(config.training.resolved().seeds),
        "backbone": bb.card(),
        "per_class": per_class,
        "per_k": rows,
        "notes": {
            "clusters": "k-means (scikit-learn) per class on the backbone's pooled penultimate features, "
            "clusters ranked by size (0 = largest); D_k = union over classes of cluster k",
            "mi": "bits; an image's unit weight is spread evenly over its kept contexts",
            "ood_mean_over_clusters": "mean over j != k of the accuracy on D_j",
        },
    }
    with _out(out, force, origin) as tmp:
        pd.DataFrame(rows).to_csv(tmp / "clusters.csv", index=False)
        pd.DataFrame(
            [
                {"class": c, "image_id": i, "cluster": int(lab), "contexts": "|".join(tags[(c, i)])}
                for c, cz in zip(classes, clusterings)
                for i, lab in zip(cz.image_ids, cz.labels)
            ]
        ).to_csv(tmp / "assignments.csv", index=False)
        _write_json(tmp / "results.json", result)
        (tmp / "results.md").write_text(_clustered_markdown(result))
    return result


def _clustered_markdown(r: dict) -> str:
    out = [
        f"# clustered OOD sets: {' vs '.join(r['classes'])}, k = {r['k']}",
        "",
        f"k-means seed {r['seed']}, n_init {r['n_init']}; model {r['model']}, {r['seeds']} seeds.",
        "",
        NO_PUBLISHED,
        "",
        "| D_k | images | n train | ID | mean OOD over clusters | worst group | MI(membership; contexts) bits |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for x in r["per_k"]:
        out.append(
            f"| {x['k']} | {x['size']} | {x['n_train']} | {_pct(x['id'])} | {_pct(x['ood_mean_over_clusters'])} | "
            f"{_pct(x['worst_group'])} | {x['mi_membership_bits']:.3f} |"
        )
    for c in r["per_class"]:
        out += [
            "",
            f"## {c['class']}: MI(cluster; contexts) = {c['mi_bits']:.3f} bits of H(cluster) = "
            f"{c['h_cluster_bits']:.3f} bits",
            "",
            "| cluster | size | top contexts (share, lift) |",
            "|---:|---:|---|",
        ]
        for j, size in enumerate(c["sizes"]):
            tops = ", ".join(
                f"{t['context']} ({100 * t['share']:.0f}%, x{t['lift']:.1f})" for t in c["top_contexts"][str(j)]
            )
            out.append(f"| {j} | {size} | {tops} |")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------
# training conflicts
# --------------------------------------------------------------------------------------------
def conflicts(
    origin: TaskOrigin,
    out: "str | os.PathLike",
    config: ConflictsConfig = ConflictsConfig(),
    *,
    cache_dir: "str | os.PathLike | None" = None,
    progress: bool = False,
    force: bool = False,
) -> dict:
    """Training-subset x evaluation-subset conflict matrix (CSV + heatmap), the windows' history."""
    art = _build(origin, "conflicts", out, force)
    min_images = opt.positive_int(config.min_images, "min_images")
    per_subset = opt.positive_int(config.per_subset, "per_subset")
    eval_per_subset = opt.positive_int(config.eval_per_subset, "eval_per_subset")
    min_eval = opt.positive_int(config.min_eval, "min_eval")
    run_config = cf.check_config(config.run)
    classes = _checked_classes(art, config.classes)
    subsets = None if config.subsets is None else opt.names(config.subsets, "subsets", at_least=2)
    source = ArtifactSource(art)
    amb = ambiguous_images(source, classes)
    cand = {f"{c}({x})": sorted(ids - amb) for c in classes for x, ids in source.kept_contexts(c).items()}
    if subsets is None:
        names = sorted(n for n, v in cand.items() if len(v) >= min_images)
    else:
        bad = [n for n in subsets if n not in cand]
        if bad:
            raise UnknownNameError(
                f"{bad[0]!r} is not a kept subset of {', '.join(classes)}" + did_you_mean(bad[0], cand),
                "pass kept subsets such as 'cat(sofa)'",
            )
        names = list(subsets)
    if len(names) < 2:
        raise EmptyResultError(
            f"{len(names)} subset(s) of {', '.join(classes)} have >= {min_images} images",
            "lower --min-images or pass --subsets",
        )
    train_ids: dict[str, list[str]] = {}
    eval_ids: dict[str, list[str]] = {}
    used: set[str] = set()
    skipped_train, skipped = [], []
    for n in names:
        # an image serves one subset once: evaluation (up to half of what is left) first, then training
        avail = [i for i in seeded_order(cand[n], run_config.seed, f"conflicts/{n}") if i not in used]
        n_eval = min(eval_per_subset, len(avail) // 2)
        ev, tr = avail[:n_eval], avail[n_eval : n_eval + per_subset]
        if len(ev) >= min_eval:
            eval_ids[n] = ev
            used |= set(ev)
        else:
            skipped.append(n)
        if len(tr) >= min_eval:
            train_ids[n] = tr
            used |= set(tr)
        else:
            skipped_train.append(n)
    if len(train_ids) < 2 or not eval_ids:
        raise EmptyResultError(
            f"{len(train_ids)} training and {len(eval_ids)} evaluation subsets keep images after the training draw",
            "lower --per-subset (Python: per_subset=, or min_eval=), or pass larger subsets",
        )
    label = {
        i: classes.index(n[: n.index("(")]) for group in (train_ids, eval_ids) for n, v in group.items() for i in v
    }
    bb = load_backbone(device=config.device)
    fs = image_features(sorted(label), origin.images, backbone=bb, cache_dir=cache_dir, progress=progress)
    feats = dict(zip(fs.image_ids, fs.features))
    run = cf.record(
        cf.subsets_from(feats, train_ids, label), cf.subsets_from(feats, eval_ids, label), len(classes), run_config
    )
    matrix = cf.conflict_matrix(run)
    result = {
        "experiment": "conflicts",
        "classes": list(classes),
        "train_subsets": {n: len(v) for n, v in train_ids.items()},
        "eval_subsets": {n: len(v) for n, v in eval_ids.items()},
        "skipped_eval": skipped,
        "skipped_train": skipped_train,
        "config": {
            "steps": run_config.steps,
            "every": run_config.every,
            "batch_size": run_config.batch_size,
            "lr": run_config.lr,
            "seed": run_config.seed,
        },
        "backbone": bb.card(),
        "final_eval_loss": dict(zip(run.eval_names, run.loss_after[-1].tolist())),
        "strongest": _strongest(matrix),
        "notes": cf.__doc__.split("\n\n", 1)[1].strip(),
    }
    logger.info(
        f"   {len(train_ids)} training subsets x {len(eval_ids)} evaluation subsets, {run_config.steps // run_config.every} windows"
    )
    with _out(out, force, origin) as tmp:
        cf.write_matrix(
            matrix, tmp / "conflicts.csv", tmp / "conflicts.png", f"training conflicts, {' vs '.join(classes)}"
        )
        run.history().to_csv(tmp / "history.csv", index=False)
        _write_json(tmp / "results.json", result)
    return result


def _strongest(matrix: pd.DataFrame, n: int = 5) -> dict[str, list[dict]]:
    flat = [(float(v), t, e) for t, row in matrix.iterrows() for e, v in row.items()]
    helps = sorted(flat, key=lambda z: -z[0])[:n]
    hurts = sorted(flat, key=lambda z: z[0])[:n]
    return {
        "helps": [{"train": t, "eval": e, "value": v} for v, t, e in helps],
        "hurts": [{"train": t, "eval": e, "value": v} for v, t, e in hurts],
    }


__all__ = [
    "ModelSpec",
    "OodLevelsConfig",
    "ClusteredConfig",
    "ConflictsConfig",
    "ood_levels",
    "clustered",
    "conflicts",
]
