"""A model zoo over many tasks: each (model, image) computed once, every task scored from the same logits.

    from metashift_hf.evaluate.zoo import evaluate_zoo
    result = evaluate_zoo(
        ["efficientnet-lite0", "hf:./vit"], "binary", TaskOrigin(artifact="ART", images="images.zip"), out="zoo"
    )

The tasks' images are read once and hashed (sha256 of the original bytes); each model's logits live in
a cache keyed by the model's fingerprint and the image hash (:mod:`.cache`), so overlapping tasks, a
second model run and a later zoo reuse them. Each task is then scored by :func:`.run.evaluate` on
those logits (the report of a single ``evaluate``), and the leaderboard collects one row per
(model, task) plus a majority-class baseline row per task, ranked by the headline: balanced accuracy on
the task's test (OOD) split, never train (scoring.HEADLINE_RULE); worst group, the pooled accuracy of
every scored split, worst context and context bugs follow.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import re
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from metashift_hf.builders.artifact import Artifact
from metashift_hf.builders.images import ImageSource
from metashift_hf.builders.plots import new_figure, save_png
from metashift_hf.tasks.families import match_registry
from metashift_hf.tasks.splits import chosen_splits

from ..core import __version__
from ..core import options as opt
from ..core.errors import EmptyResultError, InputFormatError, MetashiftError, MissingImagesError
from ..core.fsutil import atomic_dir, check_out
from ..core.names import id_slug, markdown_safe, terminal_safe
from ..hub.repo_files import ConfigChoiceError
from ..hub.task_data import TaskData
from ..hub.task_open import TaskOrigin, open_task
from ..hub.task_repo import TaskFolderChoiceError
from ..models import CacheConfig, Classifier, RunConfig, runtime_card
from . import distributed, pool
from .config import EvalConfig
from .predictions import HeadOutputs, PrecomputedPredictions, load_scorer
from .run import evaluate
from .scoring import HEADLINE_RULE


logger = logging.getLogger(__name__)

ZOO_KIND = "evaluation zoo"  # the marker kind of an evaluate --out folder holding a zoo (core.fsutil)
TASK_GROUPS = ("all", "binary", "multiclass")  # --tasks words: the artifact's matched tasks, or one kind of them
BASELINE = "baseline:majority"  # the leaderboard row of the constant predictor of each task's majority class
# headline first (the rank's key), then the settings that make rows comparable, then the pooled figures
LEADERBOARD_COLUMNS = [
    "task",
    "rank",
    "model",
    "split",
    "balanced_accuracy",
    "worst_group",
    "worst_group_accuracy",
    "accuracy",
    "ci_low",
    "ci_high",
    "n",
    "correct",
    "mode",
    "hierarchy",
    "leaves_per_class",
    "all_splits",
    "all_splits_n",
    "all_splits_accuracy",
    "id_accuracy",
    "ood_accuracy",
    "worst_context",
    "worst_context_n",
    "worst_context_accuracy",
    "context_bugs",
    "report",
    "task_origin",  # where each row's task came from (report.json's task_origin): kind, repo or folder name,
    "task_source",  # the Hub commit and the sha256 of the published shift_spec.json
    "task_commit",
    "task_spec_sha256",
]
HOW_TO_READ = (
    "How to read it: the headline is the balanced accuracy (mean of per-class accuracies) on each task's "
    "test split, the out-of-distribution one (never train), with the worst group's accuracy beside it; rows "
    f"are ranked by it. `{BASELINE}` always predicts the scored split's most frequent class: its balanced "
    "accuracy is chance for this scoring, so a model at or below it has learned nothing the task measures."
)


def select_tasks(spec: str | Sequence[str], artifact: "str | Artifact | None") -> list[str]:
    """``all`` / ``binary`` / ``multiclass`` (the artifact's available matched tasks) or task names, comma-separated."""
    if not isinstance(spec, str):
        names = [str(t) for t in spec]
    elif spec in TASK_GROUPS:
        if artifact is None:
            raise MetashiftError(
                f"--tasks {spec} lists the matched tasks of an artifact, and none was given",
                "pass --artifact ARTIFACT (matched with `metashift-hf match --artifact ARTIFACT`)",
            )
        entries = match_registry(Artifact.load(artifact))
        names = sorted(t for t, e in entries.items() if e.available and (spec == "all" or e.kind == spec))
        if not names:
            raise EmptyResultError(
                f"the artifact has no available {'matched' if spec == 'all' else spec} tasks",
                "run `metashift-hf match --artifact ARTIFACT` first, or name tasks: --tasks imagenet-5,bin-cat-dog",
            )
    else:
        names = [t.strip() for t in spec.split(",") if t.strip()]
    names = list(dict.fromkeys(names))
    if not names:
        raise InputFormatError(
            f"--tasks {spec!r} names no task", "e.g. --tasks imagenet-5,bin-cat-dog, or all | binary | multiclass"
        )
    return names


@dataclass
class ZooResult:
    """What a zoo run made: the leaderboard (one row per model and task) and where each report is."""

    out: Path | None
    leaderboard: pd.DataFrame
    reports: dict[tuple[str, str], Any]  # (model name, task id) -> EvalReport
    images: int  # distinct images (by content) over all tasks
    computed: dict[str, int]  # model -> images run through it in this call
    cached: dict[str, int]  # model -> images whose logits came from the cache
    seconds: dict[str, float] = field(default_factory=dict)
    part: str | None = None  # "shard i/n" / "rank i/n" when this process only computed its share into the cache

    def summary(self) -> str:
        if self.part is not None:
            done = ", ".join(
                f"{terminal_safe(m)}: {n} computed, {self.cached[m]} cached" for m, n in self.computed.items()
            )
            return (
                f"zoo {self.part}: {self.images} distinct images; {done}. Its logits are in the cache; "
                "the leaderboard is written by rank 0, or by a plain run over the same cache (it computes nothing)"
            )
        models = self.leaderboard.loc[self.leaderboard["model"] != BASELINE, "model"]
        lines = [
            f"zoo: {models.nunique()} model(s) x {self.leaderboard['task'].nunique()} task(s), "
            f"{self.images} distinct images"
        ]
        for m in self.computed:
            lines.append(
                f"  {terminal_safe(m)}: {self.computed[m]} images computed, {self.cached[m]} from the logits cache"
            )
        lines.append(leaderboard_markdown(self.leaderboard, links=False))
        if self.out is not None:
            lines.append(
                f"wrote {self.out}/leaderboard.csv, leaderboard.md, leaderboard.png and one report per model and task"
            )
        return "\n".join(lines)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class _Images:
    """Every distinct image of the zoo's tasks, by content: sha256 -> where to read it again."""

    where: dict[str, tuple[ImageSource, str]] = field(default_factory=dict)
    of_task: dict[str, dict[str, str]] = field(default_factory=dict)  # task -> image_id -> sha256

    def read(self, sha: str) -> bytes:
        src, iid = self.where[sha]
        return src.read(iid)


def _collect_images(
    tasks: Sequence[TaskData], source_for: Callable[[TaskData], ImageSource], splits: Mapping[str, list[str]]
) -> _Images:
    found = _Images()
    # (source, image id) -> sha256: an image shared by many tasks is read and hashed once per call, not once per
    # task (38x on the synthetic full registry); the sources outlive this loop, so their id() is stable
    known: dict[tuple[int, str], str] = {}
    for td in tasks:
        src = source_for(td)
        table = td.plan.table()
        ids = list(dict.fromkeys(table.loc[table["split"].isin(splits[td.task_id]), "image_id"]))
        missing = [i for i in ids if not src.has(i)]
        if missing:
            raise MissingImagesError(
                f"task {td.task_id}: {len(missing)} image(s) are not in the image source "
                f"(e.g. {', '.join(missing[:5])})",
                "point --images at the source the artifact was built from",
                image_ids=missing,
            )
        shas = {}
        for iid in ids:
            sha = known.get((id(src), iid))
            if sha is None:
                sha = known[(id(src), iid)] = _sha256(src.read(iid))
                found.where.setdefault(sha, (src, iid))
            shas[iid] = sha
        found.of_task[td.task_id] = shas
    return found


def _model_slug(name: str, taken: set[str]) -> str:
    slug = id_slug(name.replace(":", "-").replace("/", "-")).strip("._-")[:60] or "model"
    if slug in taken:  # two models whose names differ only in characters a folder name cannot hold
        slug = f"{slug}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
    taken.add(slug)
    return slug


@dataclass
class _ZooPlan:
    """What a zoo run works on, settled before any model pass: settings, this process's part, the loaded models, the
    opened tasks with their scored splits and settings, the distinct images and each model's report folder."""

    cfg: EvalConfig
    part: distributed.Part
    loaded: list[Any]  # Classifiers and predictions files, in --model order
    runs: list[Classifier]  # the models run over the images
    opened: dict[str, TaskData]
    scored_splits: dict[str, list[str]]
    per_task: dict[str, EvalConfig]
    found: _Images
    slugs: dict[str, str]
    seconds: dict[str, Any]


def evaluate_zoo(
    models: Sequence[Any],
    tasks: str | Sequence[Any],
    origin: TaskOrigin | None = None,
    out: str | Path | None = None,
    *,
    settings: EvalConfig | None = None,
    cache: CacheConfig = CacheConfig(),
    shard: Any = None,
) -> ZooResult:
    """Evaluate every model on every task, computing each (model, image) once (see the module docstring).

    ``models``: --model strings, Classifiers or callables. ``tasks``: ``all`` | ``binary`` |
    ``multiclass`` | "id,id,..." | a list of task ids, exported folders, Hub repo ids or TaskData.
    ``origin``: the build task ids are planned on, with its images and task options
    (``TaskOrigin(artifact=, images=, task_options={"bin-cat-dog": {"scale": 0.5}})``; its seed, when given, must
    be ``settings.seed``); None when every task is an exported folder or Hub repo (each :meth:`TaskOrigin.ref`).
    ``settings``: the :class:`.config.EvalConfig` every task is evaluated under (passed on to ``evaluate``).
    Its ``plots`` (None here: off) draws each task report's per-class charts too (at ~0.2 s per chart they
    cost more than scoring; the zoo draws one leaderboard picture); its ``splits`` are scored in every task
    (the headline is never train whatever is scored); ``on_missing="skip"`` is refused (every image is read once
    for all models). Its ``seed`` also draws the cached rows that are recomputed as a check (``zoo.json``
    ``cache_check``: :func:`metashift_hf.models.outputs.check_cached`).
    ``cache``: where the logits are cached (:class:`metashift_hf.models.outputs.CacheConfig`; ``use=False`` neither
    reads nor writes the cache: models are still run once per image).
    ``shard``: ``"i/n"`` computes only this job's share of the model passes into the cache and scores nothing
    (a later plain run assembles the leaderboard); under torchrun / accelerate launch the ranks share the
    passes and rank 0 scores (:mod:`.distributed`).

    The steps: plan (:func:`_plan_zoo`) -> compute the logits, image-major (:func:`.distributed.compute_logits`)
    -> score every task per model (:func:`_score_models`) -> write the leaderboard (:func:`_write_leaderboard`).
    """
    t0 = time.perf_counter()
    cfg = settings if settings is not None else EvalConfig()  # its numbers were checked when it was made
    plan = _plan_zoo(models, tasks, origin, out, cfg, cache, shard, t0)
    part, found = plan.part, plan.found
    writes = out is not None and part.scores
    with (
        distributed.Group(part) as group,
        atomic_dir(out, kind=ZOO_KIND, force=cfg.force) if writes else _no_dir() as tmp,
    ):
        group.agree("images, models or batches", distributed.plan_digest(found.where, plan.runs, cfg.batch_size))
        t_pass = time.perf_counter()
        images = distributed.Images(found.where, found.read)
        done = distributed.compute_logits(plan.runs, images, part, group, _run_config(cfg), cache)
        computed = {m.name: done.computed.get(m.name, 0) for m in plan.loaded}
        cached = {m.name: done.cached.get(m.name, 0) for m in plan.loaded}
        plan.seconds["model_passes"] = round(time.perf_counter() - t_pass, 3)
        if not part.scores:  # a shard or a rank > 0: its share is in the cache; rank 0 / a plain run scores
            seconds = {**plan.seconds, "total": round(time.perf_counter() - t0, 3)}
            board = pd.DataFrame(columns=LEADERBOARD_COLUMNS)
            return ZooResult(None, board, {}, len(found.where), computed, cached, seconds, part.label())
        rows, reports, checks = _score_models(plan, done, images, cache, tmp)
        board = rank(pd.DataFrame(rows, columns=LEADERBOARD_COLUMNS))
        plan.seconds["total"] = round(time.perf_counter() - t0, 3)
        if tmp is not None:
            _write_leaderboard(tmp, board, _zoo_card(plan, cache, computed, cached, checks))
    where = Path(out) if out is not None else None
    return ZooResult(where, board, reports, len(found.where), computed, cached, plan.seconds)


def _run_config(cfg: EvalConfig) -> RunConfig:
    return RunConfig(cfg.batch_size, cfg.workers, cfg.progress)


def _plan_zoo(
    models: Sequence[Any],
    tasks: str | Sequence[Any],
    origin: TaskOrigin | None,
    out: str | Path | None,
    cfg: EvalConfig,
    cache: CacheConfig,
    shard: Any,
    t0: float,
) -> _ZooPlan:
    """Every check and every load before a model pass: the options, the models (each once), the tasks (each once,
    planned with the zoo's seed) and their distinct images (read and hashed once)."""
    if cfg.on_missing != "error":
        raise opt.OptionError(
            f"on_missing={cfg.on_missing!r} applies to a single evaluate, not to a zoo",
            "leave on_missing='error' (a zoo reads every image of every task)",
        )
    part = distributed.choose_part(shard)
    device = distributed.rank_device(cfg.device, part)
    if not models:
        raise InputFormatError("a zoo needs at least one --model", "pass --model NAME (repeatable)")
    _refuse_repeated([m for m in models if isinstance(m, str)])  # before any model loads
    if cache.use and cache.folder is not None:
        check_cache_dir(cache.folder)
    if origin is not None and origin.seed is not None and origin.seed != cfg.seed:
        raise opt.OptionError(
            f"the zoo's tasks are planned with settings.seed {cfg.seed}, and the origin says seed {origin.seed}",
            "give the seed once: EvalConfig(seed=...) (CLI: --seed)",
        )
    if out is not None and part.scores:  # before any model loads: a refused --out costs nothing
        check_out(out, ZOO_KIND, force=cfg.force, inputs=list(origin.inputs) if origin is not None else [])
    art = Artifact.load(origin.artifact) if origin is not None and origin.artifact is not None else None
    if origin is not None:  # the build loaded once; task ids planned with the zoo's seed
        origin = replace(origin, seed=cfg.seed) if art is None else replace(origin, artifact=art, seed=cfg.seed)
    names = (
        select_tasks(tasks, art) if isinstance(tasks, str) or all(isinstance(t, str) for t in tasks) else list(tasks)
    )
    # every model once, wrong names fail before any task work
    loaded = [load_scorer(m, device, cfg.dtype, cfg.image_size) for m in models]
    _refuse_repeated([m.name for m in loaded])
    _refuse_same_model(models, loaded)  # two spellings of one model (hf:./vit, hf:vit) before any image is read
    # any predictor joins: models run over the images, a predictions file is read per task (nothing to share)
    runs = [m for m in loaded if isinstance(m, Classifier)]
    distributed.check_part(part, use_cache=cache.use, models=runs)
    t_models = time.perf_counter()
    opened: dict[str, TaskData] = {}
    for t in names:
        td = _open_zoo_task(t, origin)
        if td.task_id in opened:
            raise InputFormatError(
                f"task {terminal_safe(td.task_id)} is given twice", "name each task once in --tasks"
            )
        opened[td.task_id] = td
    scored_splits = {t: chosen_splits(cfg.splits, set(td.plan.table()["split"]), t) for t, td in opened.items()}
    # the zoo's settings, each task's own splits; a report folder is new inside the zoo's, no bar per task
    per_task = {
        t: replace(cfg, progress=False, force=False, plots=bool(cfg.plots), splits=scored_splits[t]) for t in opened
    }
    sources: dict[str, ImageSource] = {}

    def source_for(td: TaskData) -> ImageSource:
        key = td.where if td.form != "artifact" else f"images {td.images_path}"  # each source opened once
        if key not in sources:
            sources[key] = td.images()
        return sources[key]

    t_plan = time.perf_counter()
    found = _collect_images(list(opened.values()), source_for, scored_splits)
    logger.info("zoo: %d task(s), %d distinct images, %d model(s)", len(opened), len(found.where), len(loaded))
    taken: set[str] = set()
    public = public_model_names(m.name for m in loaded)  # report folders never spell a local absolute path
    seconds = {
        "load_models": round(t_models - t0, 3),
        "plan_tasks": round(t_plan - t_models, 3),
        "read_and_hash_images": round(time.perf_counter() - t_plan, 3),
        "per_model": {},
    }
    slugs = {m.name: _model_slug(public[m.name], taken) for m in loaded}
    return _ZooPlan(cfg, part, loaded, runs, opened, scored_splits, per_task, found, slugs, seconds)


def _score_models(
    plan: _ZooPlan, done: distributed.ZooPass, images: distributed.Images, cache: CacheConfig, tmp: Path | None
) -> tuple[list[dict], dict[tuple[str, str], Any], dict[str, dict]]:
    """Every model's reports on every task (one model's logits in memory at a time), its leaderboard rows, and with
    the first model a baseline row per task; what was recomputed of each model's cached rows (its check)."""
    rows: list[dict] = []
    reports: dict[tuple[str, str], Any] = {}
    checks: dict[str, dict] = {}
    for clf in plan.loaded:
        tm = time.perf_counter()
        first = clf is plan.loaded[0]
        if not isinstance(clf, Classifier):  # a predictions file: each task reads its rows by image id
            _score_tasks(clf, plan.opened, plan.per_task, tmp, plan.slugs, first, reports, rows)
            plan.seconds["per_model"][clf.name] = round(time.perf_counter() - tm, 3)
            continue
        got = distributed.scoring_logits(clf, images, done, _run_config(plan.cfg), cache, seed=plan.cfg.seed)
        if got.check is not None:
            checks[clf.name] = got.check.card()
        score = _logits_scorer(clf, got, plan, tmp)
        _score_tasks(score, plan.opened, plan.per_task, tmp, plan.slugs, first, reports, rows, name=clf.name)
        plan.seconds["per_model"][clf.name] = round(time.perf_counter() - tm, 3)
    return rows, reports, checks


def _logits_scorer(
    clf: Classifier, got: distributed.ModelLogits, plan: _ZooPlan, tmp: Path | None
) -> Callable[[str, TaskData, Path], Any]:
    """A function (task id, task, report folder) -> the report of ``evaluate`` on ``clf``'s logits for that task."""
    fp, store, card = clf.fingerprint(), got.cache, clf.card()

    def score(task_id: str, td: TaskData, rel: Path) -> Any:
        id_sha = plan.found.of_task[task_id]
        ids = list(id_sha)
        block = got.block([id_sha[i] for i in ids])
        preds = PrecomputedPredictions(
            path=store.folder if store is not None else Path("(memory)"),
            predictions=HeadOutputs(ids, block.argmax(axis=1).astype(np.int64), block),
            sha256=fp,
            model_card=card,
            labels=clf.labels,
        )
        # the loaded Artifact itself: loading it again per task costs ~0.5 s at full scale
        return evaluate(preds, td, (tmp / rel) if tmp is not None else None, settings=plan.per_task[task_id])

    return score


def _zoo_card(
    plan: _ZooPlan, cache: CacheConfig, computed: dict[str, int], cached: dict[str, int], checks: dict[str, dict]
) -> dict[str, Any]:
    """zoo.json: what ran, on what, under which settings (rows of the leaderboard are in leaderboard.csv)."""
    cfg = plan.cfg
    return {
        "package_version": __version__,
        "models": [m.card() for m in plan.loaded],
        "tasks": list(plan.opened),
        "task_origins": {
            t: _public_origin(d.origin()) for t, d in plan.opened.items()
        },  # hub/task_data.TaskProvenance
        "images": len(plan.found.where),
        "computed": computed,
        "cached": cached,
        "cache_check": checks,
        "seconds": plan.seconds,
        "cache": "off" if not cache.use else "logits/<model>-<output key[:16]> under the cache folder",
        "runtime": runtime_card(),
        "hierarchy": cfg.hierarchy,
        "mode": cfg.mode,
        "seed": cfg.seed,
        "min_subset_size": cfg.min_subset_size,
        "alpha": cfg.alpha,
        "splits": plan.scored_splits,
        "image_size": cfg.image_size,
        "headline": HEADLINE_RULE,
    }


def _score_tasks(
    scorer: Any,
    opened: Mapping[str, TaskData],
    per_task: Mapping[str, EvalConfig],
    tmp: Path | None,
    slugs: Mapping[str, str],
    first: bool,
    reports: dict,
    rows: list,
    *,
    name: str | None = None,
) -> None:
    """Score one predictor on every task (in a process pool, in task order): its reports and leaderboard rows, and
    with the first predictor one baseline row per task (the truth is the same for every model). ``scorer``: a
    function (task id, task, report folder) -> report, or what ``evaluate`` takes (a predictions file)."""
    name = name or scorer.name
    rels = {task_id: Path(id_slug(task_id)) / slugs[name] for task_id in opened}
    if not callable(scorer) or isinstance(scorer, PrecomputedPredictions):
        predictions = scorer

        def scorer(task_id: str, td: TaskData, rel: Path) -> Any:
            return evaluate(predictions, td, (tmp / rel) if tmp is not None else None, settings=per_task[task_id])

    jobs = [functools.partial(scorer, task_id, td, rels[task_id]) for task_id, td in opened.items()]
    for task_id, rep in zip(opened, pool.ordered_map(jobs, pool.pool_size(len(jobs)))):  # in task order
        reports[(name, task_id)] = rep
        rows.append(_leaderboard_row(name, task_id, rep, rels[task_id]))
        if first:
            rows.append(_baseline_row(task_id, rep))


class _no_dir:
    def __enter__(self):
        return None

    def __exit__(self, *exc) -> bool:
        return False


def _refuse_repeated(names: Sequence[str]) -> None:
    """A model given twice would be run and ranked twice under one name: refused before any work."""
    seen: set[str] = set()
    twice = [n for n in names if n in seen or seen.add(n)]  # type: ignore[func-returns-value]
    if twice:
        raise InputFormatError(
            f"--model {terminal_safe(twice[0])} is given more than once",
            "give each model once (--force only replaces an earlier --out folder; it does not allow a repeated model)",
        )


def _refuse_same_model(models: Sequence[Any], loaded: Sequence[Classifier]) -> None:
    """Two --model strings that load the same model (``hf:./vit`` and ``hf:vit``, a folder and its copy: equal
    weights, preprocessing and head) would be run and ranked twice under two names: refused after loading, before
    any image. Models passed from Python (a module, a callable) are the caller's objects and are not compared."""
    seen: dict[str, str] = {}
    for spec, clf in zip(models, loaded):
        if not isinstance(spec, str) or not getattr(clf, "weights_sha256", None):
            continue
        key = json.dumps(clf.logit_facts(), sort_keys=True, default=str)
        if key in seen:
            raise InputFormatError(
                f"--model {terminal_safe(seen[key])} and --model {terminal_safe(clf.name)} load the same "
                "model (the same weights, preprocessing and head)",
                "give each model once: it would be run and ranked twice under two names",
            )
        seen[key] = clf.name


def check_cache_dir(cache_dir: str | Path) -> None:
    """``--cache-dir`` must be a folder or a path one can be made at: refused before any model runs."""
    path = Path(cache_dir)
    for p in (path, *path.parents):
        if p.is_symlink() and not p.is_dir() or (p.exists() and not p.is_dir()):
            raise InputFormatError(
                f"--cache-dir {terminal_safe(path)}: {terminal_safe(p)} is not a folder",
                "pass a folder for the logits cache (it is made when absent), or drop --cache-dir "
                "(the package cache) or use --no-cache",
            )
        if p.exists():
            return


_ZOO_CONFIG_FIX = (
    "a zoo takes one config per --tasks entry: list the configs' folders (--tasks FOLDER/CONFIG,FOLDER/CONFIG2); "
    "a Hub repo's configs: download it first (hf download REPO --repo-type dataset --local-dir DIR) "
    "and list DIR/CONFIG"
)


def _open_zoo_task(t: Any, origin: TaskOrigin | None) -> TaskData:
    """One --tasks entry: a task id planned on the origin's build, or an exported folder / Hub repo id (which
    carries its own rows and images: :meth:`TaskOrigin.ref`, so the two forms mix in one zoo)."""
    try:
        return open_task(origin.ref(t) if origin is not None else t)
    except ConfigChoiceError as exc:  # a zoo has no --config (it refuses one): say what works here instead
        raise ConfigChoiceError(exc.what, _ZOO_CONFIG_FIX) from None
    except (
        TaskFolderChoiceError
    ) as exc:  # a task is one entry of the zoo's --tasks (an export's root: name its folders)
        raise TaskFolderChoiceError(
            exc.what, f"pass one of them as a --tasks entry, e.g. --tasks {exc.example}", example=exc.example
        ) from None


def _leaderboard_row(model: str, task: str, rep, rel: Path) -> dict:
    run, overall, worst, gap, head = (
        rep["run"],
        rep["overall"],
        rep["worst_subset"],
        rep["id_vs_ood"],
        rep["headline"] or {},
    )
    return {
        "model": model,
        "task": task,
        **_headline_cells(head),
        "mode": run["mode"],
        "hierarchy": run["hierarchy"],
        "leaves_per_class": ";".join(f"{c}={v['leaves_covered']}" for c, v in rep["classes"].items()),
        "all_splits": ";".join(run["splits"]),
        "all_splits_n": overall["n"],
        "all_splits_accuracy": overall["accuracy"],
        "worst_context": worst["subset"] if worst else None,
        "worst_context_n": worst["n"] if worst else None,
        "worst_context_accuracy": worst["accuracy"] if worst else None,
        "context_bugs": len(rep["context_bugs"]),
        "id_accuracy": gap.get("id", {}).get("accuracy") if gap else None,
        "ood_accuracy": gap.get("ood", {}).get("accuracy") if gap else None,
        "report": str(rel),
        **_origin_cells(run.get("task_origin") or {}),
    }


def _origin_cells(origin: Mapping[str, Any]) -> dict:
    """A row's task origin (report.json's ``task_origin``) in flat columns."""
    return {
        "task_origin": origin.get("kind"),
        "task_source": origin.get("repo_id") or (Path(origin["folder"]).name if origin.get("folder") else None),
        "task_commit": origin.get("commit"),
        "task_spec_sha256": origin.get("spec_sha256"),
    }


def _headline_cells(head: Mapping[str, Any]) -> dict:
    ci = head.get("ci") or [None, None]
    return {
        "split": head.get("split"),
        "balanced_accuracy": head.get("balanced_accuracy"),
        "worst_group": head.get("worst_group"),
        "worst_group_accuracy": head.get("worst_group_accuracy"),
        "accuracy": head.get("accuracy"),
        "ci_low": ci[0],
        "ci_high": ci[1],
        "n": head.get("n"),
        "correct": head.get("correct"),
    }


def _baseline_row(task: str, rep) -> dict:
    """The majority-class constant predictor on the same scored split (its figures come from the truth alone)."""
    head, run = rep["headline"] or {}, rep["run"]
    base = {**(head.get("baseline") or {}), "split": head.get("split")}
    said = (
        f"always predicts {base['predicts']}"
        if base.get("predicts") is not None
        else "no test split scored: no headline to compare with"
    )  # e.g. a class collection (a train split only)
    return {
        "model": BASELINE,
        "task": task,
        **_headline_cells(base),
        "mode": run["mode"],
        "hierarchy": run["hierarchy"],
        "leaves_per_class": None,
        "all_splits": None,
        "report": said,
        **_origin_cells(run.get("task_origin") or {}),
    }


def rank(board: pd.DataFrame) -> pd.DataFrame:
    """Rows by task, best headline first (balanced accuracy, then worst group, then name); ``rank`` 1 = best.
    Equal headlines share a rank, so a model tied with the baseline never ranks above it."""
    keyed = board.assign(
        _b=board["balanced_accuracy"].astype(float).fillna(-1.0).round(12),
        _w=board["worst_group_accuracy"].astype(float).fillna(-1.0).round(12),
    )
    keyed = keyed.sort_values(["task", "_b", "_w", "model"], ascending=[True, False, False, True], kind="stable")
    keyed["rank"] = keyed.groupby("task")["_b"].rank(method="min", ascending=False).astype(int)
    return keyed.drop(columns=["_b", "_w"]).reset_index(drop=True)[LEADERBOARD_COLUMNS]


def _pct(x: Any) -> str:
    return "—" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{100 * float(x):.1f}"


def _model_order(board: pd.DataFrame) -> list[str]:
    """Models by their mean headline over the tasks (best first), the baseline among them."""
    mean = board.groupby("model", sort=True)["balanced_accuracy"].mean().fillna(-1.0)
    return sorted(mean.index, key=lambda m: (-round(float(mean[m]), 12), m))


def leaderboard_markdown(board: pd.DataFrame, *, links: bool = True) -> str:
    """Models x tasks: the headline (test balanced accuracy, worst group), then pooled accuracy, worst context
    and context bugs. Every name goes through markdown_safe (a model's name is what the user typed)."""
    models = _model_order(board)
    tasks = list(dict.fromkeys(board["task"]))
    cell = {(r.model, r.task): r for r in board.itertuples(index=False)}
    head = "| model | " + " | ".join(markdown_safe(t) for t in tasks) + " |\n|---|" + "---|" * len(tasks) + "\n"

    def table(text: Callable[[Any], str]) -> str:
        return head + "".join(
            f"| {markdown_safe(m)} | "
            + " | ".join(text(c) if (c := cell.get((m, t))) is not None else "—" for t in tasks)
            + " |\n"
            for m in models
        )

    def headline(c) -> str:
        txt = f"{_pct(c.balanced_accuracy)} (worst group {_pct(c.worst_group_accuracy)}; #{c.rank})"
        return f"[{txt}]({c.report}/report.md)" if links and c.model != BASELINE else txt

    def pooled(c) -> str:
        if c.model == BASELINE:
            if not isinstance(c.split, str):  # no scored test split: nothing the baseline could say
                return markdown_safe(c.report)
            return f"accuracy {_pct(c.accuracy)} on {markdown_safe(c.split)}; {markdown_safe(c.report)}"
        worst = (
            f"{markdown_safe(c.worst_context)} {_pct(c.worst_context_accuracy)} (n={int(c.worst_context_n)})"
            if isinstance(c.worst_context, str)
            else "—"
        )
        return f"{_pct(c.all_splits_accuracy)} over {markdown_safe(c.all_splits)}; worst context {worst}; bugs {int(c.context_bugs)}"

    return (
        HOW_TO_READ
        + "\n\nHeadline: balanced accuracy % on the test split (worst-group accuracy %; rank in the task):\n\n"
        + table(headline)
        + "\nAll scored splits pooled (accuracy %), worst context (accuracy %, n) and context bugs:\n\n"
        + table(pooled)
    )


_PREFIXES = re.compile(r"^((?:[A-Za-z0-9_.-]+:)*)(.*)$", re.S)  # hf:, timm:local-dir:, module:, ... then the rest


def public_model_name(name: str) -> str:
    """A model's name with a local absolute folder reduced to the folder's name (``hf:/home/u/vit`` -> ``hf:vit``):
    what a published card, csv or zoo.json shows; a local path says nothing to a reader and leaks the machine's layout."""
    prefixes, rest = _PREFIXES.match(name).groups()
    local = os.path.expanduser(rest)
    if os.path.isabs(local) or rest.startswith("~"):
        return f"{prefixes}{Path(local).name or 'model'}"
    return name


def public_model_names(names: Iterable[str]) -> dict[str, str]:
    """:func:`public_model_name` of each name, kept apart: models whose local folders share a name
    (``hf:/a/vit``, ``hf:/b/vit``) each get ``#`` and 8 hex digits of the full name's sha256, so a published row,
    count or picture label never merges two models (nor says which local folders they were)."""
    short = {n: public_model_name(n) for n in dict.fromkeys(names)}
    count = Counter(short.values())
    return {n: f"{p}#{hashlib.sha256(n.encode()).hexdigest()[:8]}" if count[p] > 1 else p for n, p in short.items()}


def _public_origin(origin: Mapping[str, Any]) -> dict:
    """A task's ``task_origin`` (hub/task_data.TaskProvenance) for zoo.json: a local folder by its name only."""
    out = dict(origin)
    if out.get("folder"):
        out["folder"] = Path(out["folder"]).name
        out["where"] = f"exported folder {out['folder']}"
    elif out.get("kind") == "artifact":
        out["where"] = "artifact"
    return out


def _public_card(card: Mapping[str, Any], public: Mapping[str, str] | None = None) -> dict:
    """A model card for zoo.json: its local folder written as the folder's name (never an absolute path);
    ``public``: the run's :func:`public_model_names`."""
    out = dict(card)
    if out.get("folder"):
        out["folder"] = Path(str(out["folder"])).name
    if isinstance(out.get("name"), str):
        out["name"] = (public or {}).get(out["name"]) or public_model_name(out["name"])
    return out


def _write_leaderboard(folder: Path, board: pd.DataFrame, card: dict) -> None:
    names = public_model_names(m["name"] for m in card["models"])
    # the files name models publicly (a local absolute folder as its name only): they are shared and published
    board = board.assign(model=[names.get(m, m) for m in board["model"]])
    board.to_csv(folder / "leaderboard.csv", index=False, float_format="%.10g")
    (folder / "leaderboard.md").write_text("# Leaderboard\n\n" + leaderboard_markdown(board) + "\n")
    card["picture"] = (
        "leaderboard.png"
        if _plot_leaderboard(board, folder / "leaderboard.png")
        else "not drawn: matplotlib is not installed"
    )
    card["models"] = [_public_card(m, names) for m in card["models"]]
    # keyed by public names in new dicts: the run's own (ZooResult.computed, .cached) keep the names it printed

    def public(per_model: Mapping[str, Any]) -> dict[str, Any]:
        return {names.get(name) or public_model_name(name): v for name, v in per_model.items()}

    card["computed"], card["cached"] = public(card["computed"]), public(card["cached"])
    card["cache_check"] = public(card.get("cache_check") or {})
    card["seconds"] = {**card["seconds"], "per_model": public(card["seconds"]["per_model"])}
    (folder / "zoo.json").write_text(json.dumps(card, indent=2, sort_keys=True, default=str) + "\n")


def _plot_leaderboard(board: pd.DataFrame, path: Path) -> bool:
    """Heat map of accuracy (models x tasks), each cell labelled with its accuracy; False without matplotlib."""
    try:
        models = _model_order(board)
        tasks = list(dict.fromkeys(board["task"]))
        grid = np.full((len(models), len(tasks)), np.nan)
        for r in board.itertuples(index=False):
            grid[models.index(r.model), tasks.index(r.task)] = r.balanced_accuracy
        fig = new_figure((max(4.0, 1.0 + 0.6 * len(tasks)), max(2.0, 1.0 + 0.45 * len(models))))
    except (ModuleNotFoundError, MetashiftError):  # the optional plot extra is absent
        return False
    ax = fig.add_subplot(1, 1, 1)
    im = ax.imshow(grid, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
    ax.set_xticks(
        range(len(tasks)), [terminal_safe(t).replace("$", r"\$") for t in tasks], rotation=60, ha="right", fontsize=7
    )
    # names as plain text: no control character, and no '$' that matplotlib would read as mathtext
    public = public_model_names(models)
    ax.set_yticks(range(len(models)), [terminal_safe(public[m]).replace("$", r"\$") for m in models], fontsize=7)
    if grid.size <= 400:
        for (i, j), v in np.ndenumerate(grid):
            if not np.isnan(v):
                ax.text(
                    j, i, f"{100 * v:.0f}", ha="center", va="center", fontsize=6, color="white" if v < 0.6 else "black"
                )
    fig.colorbar(im, ax=ax, label="balanced accuracy, test split")
    ax.set_title("headline per model and task (balanced accuracy, test split)")
    fig.tight_layout()
    save_png(fig, path)
    return True
