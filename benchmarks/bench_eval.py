"""Evaluation speed on this machine, ratios measured in one run with the modes interleaved.

    python benchmarks/bench_eval.py pipeline [--n 512] [--batch-size 32] [--images DIR]
    python benchmarks/bench_eval.py lite0 [--rounds 3]
    python benchmarks/bench_eval.py zoo --artifact ART --images IMG [--tasks a,b,c]
    python benchmarks/bench_eval.py models [--n 256] [--k 3] [--repeat 3]
    python benchmarks/bench_eval.py cost [--n 128] [--rounds 2] [--write]
    python benchmarks/bench_eval.py prep [--n 512] [--repeat 5]

pipeline: images/s of decode+preprocess, forward only (preprocessed tensors), the evaluator's pipelined
  predict, and evaluate() end to end on an in-memory task (model loaded once, as in a zoo), each
  the best of --repeat rounds, round-robin; ratios against forward only.
lite0: EfficientNet-Lite0 forward-only images/s of the shipped forward (BatchNorm folded; glibc's
  default allocator, 'same' paddings as ZeroPad2d) against today's (mallopt setting, symmetric paddings
  folded, ReLU6 in place), each in its own process (an allocator setting is per process), alternating;
  page faults per run, logits compared bit for bit; bfloat16 top-1 agreement on the real images.
cost: seconds per image of evaluate's model pass (decode, preprocess, forward; pipelined as `evaluate` runs it)
  for EfficientNet-Lite0 at its own 224 px and at --image-size 128, alternating, best round each; --write
  stores it in cards/eval_cost.json, which the dataset cards read for their time estimates (cards/render.py).
prep: images/s of decoding alone (open_rgb) against decode + Lite0's preprocessing (the whole image resized to
  256 on the shorter side, then cropped to 224: models/base.py CROP_RULE), round-robin, best of --repeat rounds,
  over the reference photographs (GQA's 500x333-like shapes); what the resize costs on top of the decode.
models: the zoo's image-major model pass (one decode per image, one resize + crop per distinct preprocessing) with
  Lite0 and K-1 random-weight timm models (two preprocessings) over the reference photographs, against the models'
  summed forward-only time on prepared tensors, with docs/evaluate.md's ceiling beside it; round-robin, best of
  --repeat rounds.
zoo: K overlapping tasks through evaluate_zoo (fresh logits cache) against one predict pass over the
  union of their images, then the same zoo again (cache warm).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


DEFAULT_IMAGES = Path(__file__).resolve().parents[2] / "shared" / "reference" / "images"


def _machine() -> dict:
    import torch

    return {
        "cpus": os.cpu_count(),
        "cpu": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
    }


def _blobs(folder: Path) -> list[bytes]:
    files = sorted(folder.rglob("*.jpg"))
    if not files:
        raise SystemExit(f"no .jpg under {folder}")
    return [f.read_bytes() for f in files]


def _task(blobs: list[bytes], n: int):
    """An in-memory two-class task of n images (the real JPEGs cycled, distinct ids)."""
    import datasets

    feats = datasets.Features(
        {
            "image": datasets.Image(),
            "image_id": datasets.Value("string"),
            "label": datasets.ClassLabel(names=["dog", "car"]),
            "contexts": datasets.Sequence(datasets.Value("string")),
            "group": datasets.Value("string"),
        }
    )
    rows = {
        "image": [{"bytes": blobs[i % len(blobs)], "path": f"{i}.jpg"} for i in range(n)],
        "image_id": [str(i) for i in range(n)],
        "label": [i % 2 for i in range(n)],
        "contexts": [[f"c{i % 5}"] for i in range(n)],
        "group": [f"{['dog', 'car'][i % 2]}(c{i % 5})" for i in range(n)],
    }
    return datasets.DatasetDict({"test": datasets.Dataset.from_dict(rows, features=feats)})


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _ceiling(forward_s: float, decode_s: float) -> float:
    """docs/evaluate.md's ceiling in images/s: forward-only keeps every core busy (``forward_s`` wall per image on
    all cores = cores * forward_s of CPU), decode + preprocess costs ``decode_s`` of CPU per image (one thread);
    with every core busy all the time, cores / (cores * forward_s + decode_s)."""
    cores = _cores()
    return cores / (cores * forward_s + decode_s)


def pipeline(args) -> dict:
    from metashift_hf.evaluate import EvalConfig, evaluate
    from metashift_hf.evaluate.predict import predict
    from metashift_hf.models import load_model, outputs
    from metashift_hf.models.runtime import overlap_rule

    blobs = _blobs(args.images)
    ids = [str(i) for i in range(args.n)]
    read = lambda iid: blobs[int(iid) % len(blobs)]  # noqa: E731
    model = load_model("efficientnet-lite0", dtype=args.dtype)
    bs = args.batch_size
    model.logits([model.prepare(blobs[0])] * bs)  # warm-up (first forward allocates, picks kernels)
    prepared = [model.prepare(read(i)) for i in ids]
    task = _task(blobs, args.n)
    evaluate(
        model, task, settings=EvalConfig(progress=False, batch_size=bs)
    )  # warm WordNet and the hierarchy: fixed costs, measured apart
    modes = {
        "decode": lambda: [model.prepare(read(i)) for i in ids],
        "forward": lambda: [model.logits(prepared[s : s + bs]) for s in range(0, len(ids), bs)],
        "pipelined": lambda: predict(model, ids, read, batch_size=bs, workers=args.workers, progress=False),
        # the other schedule than the rule's for this machine (models/runtime.py overlap_rule), for comparison
        "other_schedule": lambda: outputs.compute(
            outputs.logits(model), ids, read, outputs.RunConfig(bs, args.workers, False, overlap=not overlap_rule())
        ),
        "evaluate": lambda: evaluate(
            model, task, settings=EvalConfig(progress=False, batch_size=bs, workers=args.workers)
        ),
    }
    times = {k: [] for k in modes}
    for _ in range(args.repeat):  # round-robin, best of each: load drift would otherwise fake a difference
        for name, fn in modes.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    best = {k: min(v) for k, v in times.items()}
    n = len(ids)
    ceiling = _ceiling(best["forward"] / n, best["decode"] / n)
    return {
        "images": n,
        "batch_size": bs,
        "dtype": args.dtype,
        **_machine(),
        **{f"{k}_img_s": round(n / t, 1) for k, t in best.items()},
        "schedule": "overlapped" if overlap_rule() else "phased (decode on every core, then forward)",
        "pipelined_vs_forward": round(best["forward"] / best["pipelined"], 3),
        "other_schedule_vs_forward": round(best["forward"] / best["other_schedule"], 3),
        # docs/evaluate.md: every core busy in both phases -> cores / (forward CPU s + decode CPU s) per image
        "ceiling_img_s": round(ceiling, 1),
        "ceiling_vs_forward": round(ceiling * best["forward"] / n, 3),
        "evaluate_vs_ceiling": round(n / best["evaluate"] / ceiling, 3),
        "evaluate_vs_forward": round(best["forward"] / best["evaluate"], 3),
        "load_average_1min_after": round(os.getloadavg()[0], 2),
    }


_CHILD = r"""
import json, os, resource, sys, time, numpy as np, torch
from metashift_hf.models import efficientnet_lite0, tune_allocator
from metashift_hf.hub.task_data import TaskRef
from metashift_hf.hub.task_open import TaskOrigin  # noqa: E402
fast = sys.argv[1] == "today"
card = tune_allocator()
clf = efficientnet_lite0(fast=fast)
x = np.load(sys.argv[2])
batches = [list(x[s:s + 32]) for s in range(0, len(x), 32)]
clf.logits(batches[0])
f0, t = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
out = np.concatenate([clf.logits(b) for b in batches])
dt = time.perf_counter() - t
np.save(sys.argv[3], out)
print(json.dumps({"img_s": len(x) / dt, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0, "allocator": card}))
"""


def lite0(args) -> dict:
    from metashift_hf.models import efficientnet_lite0

    clf = efficientnet_lite0()
    blobs = _blobs(args.images)
    x = np.stack([clf.prepare(blobs[i % len(blobs)]) for i in range(args.n)])
    tmp = Path(tempfile.mkdtemp(prefix="bench-lite0-"))
    np.save(tmp / "x.npy", x)
    env_shipped = {**os.environ, "METASHIFT_HF_NO_MALLOPT": "1"}
    runs = {"shipped": [], "today": []}
    for r in range(args.rounds):
        for mode in ("shipped", "today") if r % 2 == 0 else ("today", "shipped"):
            res = subprocess.run(
                [sys.executable, "-c", _CHILD, mode, str(tmp / "x.npy"), str(tmp / f"{mode}.npy")],
                env=env_shipped if mode == "shipped" else os.environ,
                capture_output=True,
                text=True,
                check=True,
            )
            runs[mode].append(json.loads(res.stdout.strip().splitlines()[-1]))
    same = bool(np.array_equal(np.load(tmp / "shipped.npy"), np.load(tmp / "today.npy")))
    bf = efficientnet_lite0(dtype="bfloat16")
    top_fp = np.load(tmp / "today.npy").argmax(1)
    shutil.rmtree(tmp, ignore_errors=True)
    top_bf = np.concatenate([bf.logits(list(x[s : s + 32])) for s in range(0, len(x), 32)]).argmax(1)
    best = {m: max(v, key=lambda d: d["img_s"]) for m, v in runs.items()}
    return {
        "images": args.n,
        "distinct_images": min(args.n, len(blobs)),
        **_machine(),
        "rounds": args.rounds,
        "shipped_img_s": round(best["shipped"]["img_s"], 1),
        "today_img_s": round(best["today"]["img_s"], 1),
        "today_vs_shipped": round(best["today"]["img_s"] / best["shipped"]["img_s"], 2),
        "page_faults_shipped": best["shipped"]["faults"],
        "page_faults_today": best["today"]["faults"],
        "all_rounds_img_s": {m: [round(d["img_s"], 1) for d in v] for m, v in runs.items()},
        "logits_bit_identical": same,
        "bfloat16_top1_agreement": round(float((top_fp == top_bf).mean()), 4),
        "allocator_today": best["today"]["allocator"],
        "load_average_1min_after": round(os.getloadavg()[0], 2),
    }


def zoo(args) -> dict:
    from metashift_hf.builders.images import open_images
    from metashift_hf.evaluate.config import EvalConfig
    from metashift_hf.evaluate.coverage import class_coverage
    from metashift_hf.evaluate.predict import predict
    from metashift_hf.evaluate.zoo import evaluate_zoo, select_tasks
    from metashift_hf.hub import api
    from metashift_hf.hub.task_data import TaskRef
    from metashift_hf.hub.task_open import TaskOrigin
    from metashift_hf.models import CacheConfig, load_model

    model = load_model("efficientnet-lite0")
    tasks = select_tasks(args.tasks, args.artifact)
    union = sorted({i for t in tasks for i in api.plan(TaskRef(t, artifact=args.artifact)).table()["image_id"]})
    per_task = sum(len(set(api.plan(TaskRef(t, artifact=args.artifact)).table()["image_id"])) for t in tasks)
    src = open_images(args.images)
    model.logits([model.prepare(src.read(union[0]))] * args.batch_size)  # warm-up
    out = Path(tempfile.mkdtemp(prefix="bench-zoo-out-"))
    class_coverage(["dog"], "wordnet")  # warm-up: WordNet and the hierarchy load once per process (a fixed cost)
    times: dict[str, list[float]] = {"union": [], "zoo": [], "zoo_cached": []}
    runs = {}
    for r in range(
        args.rounds
    ):  # interleaved: one pass over the union, the zoo (fresh cache), the zoo again (cache warm)
        cache = out / f"cache-{r}"
        t = time.perf_counter()
        predict(model, union, src.read, batch_size=args.batch_size, progress=False)
        times["union"].append(time.perf_counter() - t)
        for name in ("zoo", "zoo_cached"):
            t = time.perf_counter()
            runs[name] = evaluate_zoo(
                [model],
                tasks,
                TaskOrigin(artifact=args.artifact, images=args.images),
                out / f"{name}-{r}",
                cache=CacheConfig(cache),
                settings=EvalConfig(progress=False, batch_size=args.batch_size, plots=args.charts),
            )
            times[name].append(time.perf_counter() - t)
    shutil.rmtree(out, ignore_errors=True)
    t_union, t_zoo, t_cached = (min(times[k]) for k in ("union", "zoo", "zoo_cached"))
    first, second = runs["zoo"], runs["zoo_cached"]
    return {
        "tasks": len(tasks),
        "task_images_summed": per_task,
        "union_images": len(union),
        **_machine(),
        "charts": args.charts,
        "rounds": args.rounds,
        "all_rounds_s": {k: [round(x, 2) for x in v] for k, v in times.items()},
        "one_pass_over_union_s": round(t_union, 2),
        "zoo_s": round(t_zoo, 2),
        "zoo_cached_s": round(t_cached, 2),
        "zoo_vs_union": round(t_zoo / t_union, 3),
        "zoo_cached_vs_union": round(t_cached / t_union, 3),
        "zoo_parts_s": first.seconds,
        "zoo_cached_parts_s": second.seconds,
        "computed_first": first.computed,
        "cached_second": second.cached,
        "load_average_1min_after": round(os.getloadavg()[0], 2),
    }


ZOO_TIMM = ("mobilenetv3_small_050", "regnetx_002")  # random weights from their configs: one timm preprocessing


def models(args) -> dict:
    """A zoo of EfficientNet-Lite0 and random-weight timm models (two distinct preprocessings) over the reference
    photographs: the image-major pass (models.outputs.compute_together: one decode per image, one resize + crop per
    preprocessing) against the models' summed forward-only time on prepared tensors, interleaved rounds."""
    import timm
    import torch

    from metashift_hf.models import load_model, open_rgb, outputs
    from metashift_hf.models.runtime import overlap_rule

    blobs = _blobs(args.images)
    ids = [str(i) for i in range(args.n)]
    read = lambda iid: blobs[int(iid) % len(blobs)]  # noqa: E731
    tmp = Path(tempfile.mkdtemp(prefix="bench-models-"))
    names = ["efficientnet-lite0"]
    for i, arch in enumerate(ZOO_TIMM[: args.k - 1]):
        torch.manual_seed(i)
        timm.models.save_for_hf(timm.create_model(arch, pretrained=False), tmp / arch, safe_serialization=True)
        names.append(f"timm:local-dir:{tmp / arch}")
    runs = [outputs.logits(load_model(m)) for m in names]
    preps = list(dict.fromkeys(outputs.preparation(r) for r in runs))
    firsts = [next(r for r in runs if outputs.preparation(r) == p) for p in preps]
    bs = args.batch_size
    prepared = {r.name: [r.prepare(read(i)) for i in ids] for r in runs}
    for r in runs:
        r.run(prepared[r.name][:bs])  # warm-up (first forward allocates, picks kernels)
    rgbs = [open_rgb(read(i)) for i in ids]
    modes = {
        "decode": lambda: [open_rgb(read(i)) for i in ids],
        **{f"prep{j}": (lambda r=r: [r.classifier.prepare_rgb(im) for im in rgbs]) for j, r in enumerate(firsts)},
        **{
            f"forward:{r.name.rsplit('/', 1)[-1]}": (
                lambda r=r: [r.run(prepared[r.name][s : s + bs]) for s in range(0, len(ids), bs)]
            )
            for r in runs
        },
        "zoo": lambda: outputs.compute_together(runs, ids, read, outputs.RunConfig(bs, args.workers, False)),
        "zoo_other_schedule": lambda: outputs.compute_together(
            runs, ids, read, outputs.RunConfig(bs, args.workers, False, overlap=not overlap_rule())
        ),
    }
    times = {k: [] for k in modes}
    for _ in range(args.repeat):  # round-robin, best of each
        for name, fn in modes.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    shutil.rmtree(tmp, ignore_errors=True)
    n = len(ids)
    best = {k: min(v) for k, v in times.items()}
    forward_s = (
        sum(best[f"forward:{r.name.rsplit('/', 1)[-1]}"] for r in runs) / n
    )  # every model once per image, all cores
    cpu_decode = (best["decode"] + sum(best[f"prep{j}"] for j in range(len(firsts)))) / n  # one thread
    cores = _cores()
    ceiling = cores / (cores * forward_s + cpu_decode)
    zoo_img_s = n / best["zoo"]
    return {
        "images": n,
        "distinct_photographs": min(n, len(blobs)),
        "models": [r.name.split("/")[-1] for r in runs],
        "distinct_preprocessings": len(preps),
        "batch_size": bs,
        **_machine(),
        "schedule": "overlapped" if overlap_rule() else "phased (decode on every core, then forward)",
        "rounds": args.repeat,
        **{f"{k}_img_s": round(n / t, 1) for k, t in best.items()},
        "summed_forward_only_img_s": round(1 / forward_s, 1),
        "zoo_img_s": round(zoo_img_s, 1),
        "zoo_vs_summed_forward": round(zoo_img_s * forward_s, 3),
        "ceiling_img_s": round(ceiling, 1),
        "ceiling_vs_summed_forward": round(ceiling * forward_s, 3),
        "zoo_vs_ceiling": round(zoo_img_s / ceiling, 3),
        "zoo_other_schedule_vs_summed_forward": round(n / best["zoo_other_schedule"] * forward_s, 3),
        "load_average_1min_after": round(os.getloadavg()[0], 2),
    }


def prep(args) -> dict:
    from metashift_hf.models import efficientnet_lite0, open_rgb
    from metashift_hf.models.base import CROP_RULE

    blobs = _blobs(args.images)
    data = [blobs[i % len(blobs)] for i in range(args.n)]
    clf = efficientnet_lite0()
    modes = {
        "decode": lambda: [open_rgb(d).close() for d in data],
        "decode_preprocess": lambda: list(map(clf.prepare, data)),
    }
    times: dict[str, list[float]] = {k: [] for k in modes}
    cpu: dict[str, list[float]] = {k: [] for k in modes}  # process CPU time: steadier than wall on a shared machine
    for _ in range(args.repeat):  # round-robin, best of each
        for name, fn in modes.items():
            t, c = time.perf_counter(), time.process_time()
            fn()
            times[name].append(time.perf_counter() - t)
            cpu[name].append(time.process_time() - c)
    best = {k: min(v) for k, v in times.items()}
    best_cpu = {k: min(v) for k, v in cpu.items()}
    return {
        "images": args.n,
        "distinct_images": min(args.n, len(blobs)),
        "crop_rule": CROP_RULE,
        "preprocessing": clf.preprocessing_card(),
        **_machine(),
        **{f"{k}_img_s": round(args.n / t, 1) for k, t in best.items()},
        "preprocess_ms_per_image_beyond_decode": round(
            1000 * (best["decode_preprocess"] - best["decode"]) / args.n, 3
        ),
        **{f"{k}_cpu_ms_per_image": round(1000 * t / args.n, 3) for k, t in best_cpu.items()},
        "all_rounds_s": {k: [round(x, 3) for x in v] for k, v in times.items()},
        "load_average_1min_after": round(os.getloadavg()[0], 2),
    }


EVAL_COST_FILE = Path(__file__).resolve().parents[1] / "cards" / "eval_cost.json"
COST_SIZES = (224, 128)  # the full run and the cards' quick variant (cards/render.py QUICK_IMAGE_SIZE)


def cost(args) -> dict:
    from metashift_hf.evaluate.predict import predict
    from metashift_hf.evaluate.predictions import load_scorer

    load_before = round(os.getloadavg()[0], 2)
    blobs = _blobs(args.images)
    ids = [str(i) for i in range(args.n)]
    read = lambda iid: blobs[int(iid) % len(blobs)]  # noqa: E731
    models = {size: load_scorer("efficientnet-lite0", image_size=None if size == 224 else size) for size in COST_SIZES}
    for m in models.values():  # warm-up: the first forward allocates and picks kernels
        predict(m, ids[: args.batch_size], read, batch_size=args.batch_size, progress=False)
    times: dict[int, list[float]] = {size: [] for size in COST_SIZES}
    for r in range(args.rounds):  # alternating, best of each: load drift would otherwise fake a difference
        for size in COST_SIZES if r % 2 == 0 else COST_SIZES[::-1]:
            t = time.perf_counter()
            predict(models[size], ids, read, batch_size=args.batch_size, workers=args.workers, progress=False)
            times[size].append(time.perf_counter() - t)
    distinct = [str(i) for i in range(len(blobs))]  # each reference photograph once: does the top-1 class move?
    top1 = {
        size: predict(m, distinct, read, batch_size=args.batch_size, progress=False).top1 for size, m in models.items()
    }
    machine = _machine()
    cpu = (
        next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            machine["cpu"],
        )
        if Path("/proc/cpuinfo").is_file()
        else machine["cpu"]
    )
    return {
        "what": "seconds per image of evaluate's model pass (decode, preprocess, forward; pipelined, float32, "
        f"batch {args.batch_size}), best of {args.rounds} alternating rounds over {args.n} images",
        "model": "efficientnet-lite0",
        "machine": f"a {machine['cpus']}-core CPU ({cpu})",
        **machine,
        "images": args.n,
        "rounds": args.rounds,
        "seconds_per_image": {str(size): round(min(v) / args.n, 5) for size, v in times.items()},
        "all_rounds_s": {str(size): [round(x, 2) for x in v] for size, v in times.items()},
        "top1_agreement_128_vs_224": {"images": len(distinct), "agree": int((top1[128] == top1[224]).sum())},
        "measured_with": "python benchmarks/bench_eval.py cost --write",
        "load_average_1min_before": load_before,
        "load_average_1min_after": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("pipeline", "lite0", "zoo", "models", "cost", "prep"))
    ap.add_argument("--k", type=int, default=3, choices=(2, 3), help="models: Lite0 and K-1 random-weight timm models")
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--repeat", type=int, default=3, help="pipeline: rounds; each mode reports its best round")
    ap.add_argument("--rounds", type=int, default=3, help="lite0: processes per variant, alternating")
    ap.add_argument(
        "--images", type=Path, default=DEFAULT_IMAGES, help="folder of *.jpg (zoo: the artifact's image source)"
    )
    ap.add_argument("--artifact", type=Path, default=None)
    ap.add_argument("--tasks", default="bin-cat-dog,bin-dog-horse,bin-cat-horse")
    ap.add_argument("--charts", action="store_true", help="zoo: per-class charts in every task report")
    ap.add_argument(
        "--write", action="store_true", help=f"cost: write the result to {EVAL_COST_FILE} (the cards' estimates)"
    )
    args = ap.parse_args()
    result = {"pipeline": pipeline, "lite0": lite0, "zoo": zoo, "models": models, "cost": cost, "prep": prep}[
        args.what
    ](args)
    text = json.dumps(result, indent=2, default=str)
    print(text)
    if args.write and args.what == "cost":
        EVAL_COST_FILE.write_text(text + "\n")


if __name__ == "__main__":
    main()
