"""Scaling benchmark of `build --tags` (issue 28): peak memory, CPU and wall at 100k / 300k / 1M images.

Generates (once, cached in --work) synthetic tag tables, parquet with columns image_id, tag:

- ``openimages``: 600 tags, ~7.7 distinct tags per image, Zipf-like frequencies (OpenImages' shape);
- ``laion``: 20,000 tags, the same tags per image, a longer tail (LAION-like tag sets);

then runs each build in a child process, one at a time: ``new`` = this tree's build (out of core,
the tags file streamed into DuckDB; defaults: --memory-limit 25 % of RAM while counting, then at
most 256 MiB, --workers 2 on 2+ cores), ``old`` = the build of another
interpreter whose ``metashift_hf`` is today's code (``--old-python``, e.g. the python that imports
the main checkout). Figures per run: peak RSS of the whole process tree (every process summed,
sampled from /proc every 50 ms), the largest single process's peak (same sampling),
CPU seconds (children user + system) and wall seconds.

    nice -n 10 python benchmarks/build_scaling.py --kind openimages --images 100000 300000 \\
        [--old-python /usr/bin/python3] [--engines new old] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


ROOT = Path(__file__).resolve().parents[1]
KINDS = {"openimages": {"tags": 600, "zipf": 0.9}, "laion": {"tags": 20_000, "zipf": 1.05}}
TAGS_PER_IMAGE = 7.7


def generate(path: Path, kind: str, images: int, seed: int = 0) -> dict:
    """The synthetic tag table for (kind, images, seed): per image 1 + Poisson tags drawn without
    repeats from a Zipf-like distribution over the vocabulary."""
    spec = KINDS[kind]
    rng = np.random.default_rng(seed)
    n_tags = spec["tags"]
    p = 1.0 / np.arange(1, n_tags + 1) ** spec["zipf"]
    p /= p.sum()
    rows_img, rows_tag = [], []
    block = 100_000
    for lo in range(0, images, block):
        n = min(block, images - lo)
        k = 1 + rng.poisson(TAGS_PER_IMAGE * 1.075 - 1, n)  # a few draws repeat a tag: ~7.7 distinct remain
        img = np.repeat(np.arange(lo, lo + n, dtype=np.int64), k)
        tag = rng.choice(n_tags, size=img.size, p=p)
        key = np.unique(img * n_tags + tag)
        rows_img.append(key // n_tags)
        rows_tag.append(key % n_tags)
    img = np.concatenate(rows_img)
    tag = np.concatenate(rows_tag)
    ids = pa.array([f"{i:016x}" for i in range(images)], pa.string())  # OpenImages ids: 16 hex digits
    names = pa.array([f"/m/{kind[0]}{t:05d}" for t in range(n_tags)], pa.string())
    table = pa.table({"image_id": ids.take(pa.array(img)), "tag": names.take(pa.array(tag))})
    pq.write_table(table, path, compression="zstd")
    return {
        "images": images,
        "rows": int(img.size),
        "tags_per_image": round(img.size / images, 3),
        "distinct_tags": int(np.unique(tag).size),
    }


def tag_file(work: Path, kind: str, images: int) -> tuple[Path, dict]:
    path = work / f"tags_{kind}_{images}.parquet"
    info = path.with_suffix(".info.json")
    if not (path.is_file() and info.is_file()):
        info.write_text(json.dumps(generate(path, kind, images)))
    return path, json.loads(info.read_text())


def _tree_rss(pid: int) -> tuple[int, int]:
    """Resident bytes of ``pid`` and every descendant (Linux /proc): (sum, largest single process)."""
    total, largest, todo = 0, 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/statm") as f:
                rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            total += rss
            largest = max(largest, rss)
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            continue
    return total, largest


def run_build(python: str, tags: Path, out: Path, extra: list[str]) -> dict:
    """One build in a child process (plots off); its figures."""
    cmd = [
        python,
        "-m",
        "metashift_hf.cli",
        "build",
        "--tags",
        str(tags),
        "--out",
        str(out),
        "--force",
        "--no-plots",
        *extra,
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=out.parent)
    peak = [0, 0]

    def sample() -> None:
        while proc.poll() is None:
            total, largest = _tree_rss(proc.pid)
            peak[0], peak[1] = max(peak[0], total), max(peak[1], largest)
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout, stderr = proc.communicate()
    wall = time.perf_counter() - t
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = {
        "ok": proc.returncode == 0,
        "wall_s": round(wall, 1),
        "cpu_s": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 1),
        "peak_tree_gib": round(peak[0] / 2**30, 3),
        "peak_one_process_gib": round(peak[1] / 2**30, 3),
        "stages": [line for line in stderr.splitlines() if line.strip()][-12:],
        "summary": [line for line in stdout.splitlines() if line.strip()],
    }
    if proc.returncode != 0:
        result["error"] = stderr.strip().splitlines()[-3:]
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kind", choices=sorted(KINDS), default="openimages")
    ap.add_argument("--images", type=int, nargs="+", default=[100_000, 300_000])
    ap.add_argument("--engines", nargs="+", choices=("new", "old"), default=["new", "old"])
    ap.add_argument(
        "--old-python",
        default=None,
        help="an interpreter whose metashift_hf is today's build (old is skipped without it)",
    )
    ap.add_argument("--work", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "metashift-scaling")
    ap.add_argument("--extra", default="", help="more build flags for the new build, e.g. '--memory-limit 1GiB'")
    ap.add_argument("--json", type=Path, help="append the figures to this JSON-lines file")
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    for n in args.images:
        tags, info = tag_file(args.work, args.kind, n)
        print(
            f"{args.kind} {n:,} images: {info['rows']:,} rows, {info['tags_per_image']} tags/image, "
            f"{info['distinct_tags']} tags",
            flush=True,
        )
        for engine in args.engines:
            if engine == "old" and not args.old_python:
                continue
            python = sys.executable if engine == "new" else args.old_python
            extra = args.extra.split() if engine == "new" else []
            r = run_build(python, tags, args.work / f"art_{args.kind}_{n}_{engine}", extra)
            print(
                f"  {engine}: {'ok' if r['ok'] else 'FAILED'}  peak {r['peak_tree_gib']:.2f} GiB (tree), "
                f"{r['peak_one_process_gib']:.2f} GiB (one process)  cpu {r['cpu_s']:.0f} s  wall {r['wall_s']:.0f} s",
                flush=True,
            )
            if not r["ok"]:
                print("   ", " | ".join(r["error"]), flush=True)
            if args.json:
                with args.json.open("a") as f:
                    f.write(json.dumps({"kind": args.kind, "images": n, "engine": engine, **info, **r}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
