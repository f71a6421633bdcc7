"""The zoo past one process: image hashing per call, and one process vs torchrun ranks vs --shard jobs.

    python benchmarks/bench_zoo_dist.py --artifact ART --images IMG [--tasks all] [--model efficientnet-lite0] [--ranks 2]

Prints JSON: the task images against the distinct images (what the zoo hashed before and after it
hashed each image once per call), sha256 cost per image, then the wall time of the same zoo (fresh
logits cache each) run (1) in one process, (2) under ``torchrun --standalone --nproc_per_node RANKS``
(gloo, CPU), (3) as RANKS ``--shard i/RANKS`` processes one after another plus the assembling plain run;
whether (2) and (3) wrote the single process's leaderboard.csv/.md byte for byte, and per-image
costs (wall / distinct images). Every run is a fresh ``metashift-hf`` process (model load included).
On a machine with fewer cores than ranks the ranks share the cores: the ratio shows overheads, not speed-up.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _run(cmd: list[str], env: dict) -> float:
    t = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{' '.join(cmd[:6])}... failed:\n{done.stderr[-3000:]}")
    return round(time.perf_counter() - t, 2)


def _images(args) -> tuple[list[str], int, int, float]:
    """(the tasks that plan on this artifact, their images summed over the tasks, distinct images, sha256 s per image)."""
    from metashift_hf.builders.artifact import Artifact
    from metashift_hf.builders.images import open_images
    from metashift_hf.core.errors import MetashiftError
    from metashift_hf.evaluate.zoo import select_tasks
    from metashift_hf.hub.task_data import TaskRef
    from metashift_hf.hub.task_open import open_task

    art = Artifact.load(args.artifact)
    src = open_images(args.images)
    total, distinct, tasks = 0, set(), []
    for t in select_tasks(args.tasks, art):
        try:
            ids = set(open_task(TaskRef(t, artifact=art, images=args.images)).plan.table()["image_id"])
        except MetashiftError:  # a registry task this artifact cannot make (e.g. an empty group): left out
            continue
        tasks.append(t)
        total += len(ids)
        distinct |= ids
    sample = sorted(distinct)[:200]
    t0 = time.perf_counter()
    for iid in sample:
        hashlib.sha256(src.read(iid)).hexdigest()
    return tasks, total, len(distinct), (time.perf_counter() - t0) / max(1, len(sample))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--artifact", type=Path, required=True)
    ap.add_argument("--images", type=Path, required=True)
    ap.add_argument("--tasks", default="all")
    ap.add_argument("--model", default="efficientnet-lite0")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()
    tasks, total, distinct, sha_s = _images(args)
    tmp = Path(tempfile.mkdtemp(prefix="bench-zoo-dist-"))
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    cli = [sys.executable, "-m", "metashift_hf.cli"]
    common = [
        "evaluate",
        "--model",
        args.model,
        "--tasks",
        ",".join(tasks),
        "--artifact",
        str(args.artifact),
        "--images",
        str(args.images),
        "--batch-size",
        str(args.batch_size),
        "--no-progress",
    ]
    try:
        single = _run([*cli, *common, "--out", str(tmp / "single"), "--cache-dir", str(tmp / "c1")], env)
        dist = _run(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nproc_per_node",
                str(args.ranks),
                "-m",
                "metashift_hf.cli",
                *common,
                "--out",
                str(tmp / "dist"),
                "--cache-dir",
                str(tmp / "c2"),
            ],
            env,
        )
        shards = [
            _run(
                [
                    *cli,
                    *common,
                    "--out",
                    str(tmp / f"s{i}"),
                    "--cache-dir",
                    str(tmp / "c3"),
                    "--shard",
                    f"{i}/{args.ranks}",
                ],
                env,
            )
            for i in range(args.ranks)
        ]
        assemble = _run([*cli, *common, "--out", str(tmp / "assembled"), "--cache-dir", str(tmp / "c3")], env)
        same = {
            name: all(
                (tmp / d / name).read_bytes() == (tmp / "single" / name).read_bytes() for d in ("dist", "assembled")
            )
            for name in ("leaderboard.csv", "leaderboard.md")
        }
        zoo = json.loads((tmp / "single" / "zoo.json").read_text())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        json.dumps(
            {
                "cpus": os.cpu_count(),
                "model": args.model,
                "tasks": len(tasks),
                "ranks": args.ranks,
                "task_images": total,
                "distinct_images": distinct,
                "hash_reads_before": total,
                "hash_reads_now": distinct,
                "sha256_ms_per_image": round(1000 * sha_s, 3),
                "wall_s": {"single": single, "torchrun": dist, "shards": shards, "assemble": assemble},
                "single_stages_s": zoo["seconds"],
                "ms_per_distinct_image": {
                    "single": round(1000 * single / distinct, 2),
                    "torchrun": round(1000 * dist / distinct, 2),
                    "shards_summed": round(1000 * sum(shards) / distinct, 2),
                },
                "byte_identical_to_single": same,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
