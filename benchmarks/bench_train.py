"""`metashift-hf train --probe linear --seeds 3` on the demo's paper-subpop-cat-dog-p12: wall time with a cold
feature cache (feature extraction included), again with the cache warm, and a second task over the same
images (paper-subpop-cat-dog-p6) reusing the cached features. Target: cold run < 2 minutes on 2 CPU cores.

    python benchmarks/bench_train.py [--work DIR] [--image-size 224] [--threads 2]

Builds the demo world + artifact under --work (reused when present); each run is the real CLI in a
subprocess, so import and model-loading time count.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path


TASK, OTHER, SCALE = "paper-subpop-cat-dog-p12", "paper-subpop-cat-dog-p6", "0.5"


def _world(work: Path) -> tuple[Path, Path]:
    from metashift_hf.builders.build import build_from_inputs
    from metashift_hf.builders.build_inputs import SceneGraphs
    from metashift_hf.sources.demo_world import generate_demo_world

    art, images = work / "artifact", work / "world" / "images"
    if not (art / "manifest.json").is_file():
        world = generate_demo_world(work / "world", seed=0)
        build_from_inputs(art, given=SceneGraphs(world.scene_graphs), provenance="demo")
    return art, images


def _train(task: str, art: Path, images: Path, out: Path, cache: Path, image_size: int | None, env: dict) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "metashift_hf",
        "train",
        "--task",
        task,
        "--artifact",
        str(art),
        "--images",
        str(images),
        "--set",
        f"scale={SCALE}",
        "--seeds",
        "3",
        "--probe",
        "linear",
        "--method",
        "erm",
        "--cache-dir",
        str(cache),
        "--out",
        str(out),
        "--no-progress",
    ] + ([] if image_size is None else ["--image-size", str(image_size)])
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    card = json.loads((out / "run_card.json").read_text())
    agg = json.loads((out / "scores.json").read_text())
    return {
        "task": task,
        "wall_s": round(wall, 1),
        "features": card["features"],
        "test_average": agg["average"],
        "worst_group": {k: agg["worst_group"][k] for k in ("mean", "std")},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("bench-train-work"))
    ap.add_argument("--image-size", type=int, default=None, help="backbone input size (default the model's 224)")
    ap.add_argument("--threads", type=int, default=2, help="torch/OpenMP threads, to emulate a 2-core machine")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    art, images = _world(args.work)
    cache = args.work / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    runs = {
        "cold": _train(TASK, art, images, args.work / "run-cold", cache, args.image_size, env),
        "warm": _train(TASK, art, images, args.work / "run-warm", cache, args.image_size, env),
        "other_task": _train(OTHER, art, images, args.work / "run-other", cache, args.image_size, env),
    }
    print(
        json.dumps(
            {
                "machine": platform.processor() or platform.machine(),
                "cpus": os.cpu_count(),
                "load_avg": os.getloadavg(),
                "threads": args.threads,
                "image_size": args.image_size or 224,
                "runs": runs,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
