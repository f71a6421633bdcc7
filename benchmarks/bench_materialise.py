"""Benchmark: materialise and export a task whose images sit in a zip, vs a plain copy of the same bytes.

    python benchmarks/bench_materialise.py [--images 3000] [--width 500 --height 375] [--repeat 3]

Writes GQA-sized JPEGs (noise, so they do not compress away; ~500x375 like GQA) into a zip with
GQA's layout (``images/<id>.jpg``, stored), builds an artifact whose ``class-cat`` task holds every
image, then in the same run times

* plain copy: read every image from the zip (same reader) and write the bytes to one file (no
  fsync, like ``cp``; the datasets writer does not fsync either);
* materialise: ``Metashift(...).download_and_prepare()`` into a fresh cache (arrow files with the
  original bytes, integrity check of every JPEG included);
* export: ``metashift_hf.hub.shards.write_config`` of the materialised task (parquet shards with the
  original bytes embedded, rows sorted by image id: what ``metashift-hf export`` writes per task).

Reports MB/s of image bytes for each and the ratios to the plain copy (target: >= 0.7 for both),
wall and CPU seconds of this process. Best of ``--repeat`` runs for each, interleaved, so all see
the same page-cache state and, on a shared machine, about the same load (CPU seconds are the less
disturbed figure there; the load average is printed).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def make_inputs(root: Path, n: int, width: int, height: int, seed: int = 0) -> tuple[Path, Path, int]:
    from PIL import Image

    from metashift_hf.builders.build import BuildOptions, build_artifact
    from metashift_hf.builders.subsets import CandidateSubsets

    rng = np.random.default_rng(seed)
    ids = [str(2300000 + i) for i in range(n)]
    zpath = root / "images.zip"
    total = 0
    # Blocky noise: JPEG sizes close to real photos (~40-80 KB at 500x375, quality 85).
    tiles = [rng.integers(0, 256, (height // 4, width // 4, 3), dtype=np.uint8) for _ in range(16)]
    with zipfile.ZipFile(zpath, "w", zipfile.ZIP_STORED) as z:
        for i, iid in enumerate(ids):
            arr = np.kron(tiles[i % 16], np.ones((4, 4, 1), dtype=np.uint8))
            arr = np.roll(arr, i, axis=1)
            b = io.BytesIO()
            Image.fromarray(arr).save(b, "JPEG", quality=85)
            z.writestr(f"images/{iid}.jpg", b.getvalue())
            total += len(b.getvalue())
    # one class, 8 contexts, every image in 1-3 of them
    subsets: dict[str, list[str]] = {}
    for iid in ids:
        for c in rng.choice(8, size=rng.integers(1, 4), replace=False):
            subsets.setdefault(f"cat(ctx{c})", []).append(iid)
    art = build_artifact(CandidateSubsets.from_dict(subsets), root / "artifact", BuildOptions(), plots=False)
    return zpath, Path(art.root), total


def plain_copy(zpath: Path, ids: list[str], out: Path) -> tuple[float, float]:
    """(wall s, CPU s of this process) to copy every image's bytes from the zip into one file."""
    from metashift_hf.builders.images import open_images

    t, c = time.perf_counter(), time.process_time()
    with open_images(zpath) as src, open(out, "wb") as f:
        for iid in ids:
            f.write(src.read(iid))
    return time.perf_counter() - t, time.process_time() - c


def materialise(zpath: Path, artifact: Path, cache: Path):
    """(wall s, CPU s of this process, rows, the builder) of download_and_prepare."""
    from metashift_hf.tasks.metashift import Metashift

    t, c = time.perf_counter(), time.process_time()
    b = Metashift(config_name="class-cat", artifact=str(artifact), images=str(zpath), cache_dir=str(cache))
    b.download_and_prepare()
    return time.perf_counter() - t, time.process_time() - c, b.info.splits["train"].num_examples, b


def export(dataset_dict, out: Path) -> tuple[float, float]:
    """(wall s, CPU s of this process) to write the task's parquet shards, as ``export`` does."""
    from metashift_hf.hub.shards import write_config

    t, c = time.perf_counter(), time.process_time()
    write_config(dataset_dict, out, "class-cat")
    return time.perf_counter() - t, time.process_time() - c


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=3000)
    ap.add_argument("--width", type=int, default=500)
    ap.add_argument("--height", type=int, default=376)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=None, help="scratch folder (default: a temp dir, removed)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args(argv)
    import datasets

    datasets.disable_progress_bars()
    root = Path(args.workdir or tempfile.mkdtemp(prefix="bench-materialise-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        t = time.perf_counter()
        zpath, artifact, total = make_inputs(root, args.images, args.width, args.height)
        setup = time.perf_counter() - t
        from metashift_hf.builders.images import open_images

        with open_images(zpath) as src:
            ids = src.ids()
        times: dict[str, list[tuple[float, float]]] = {"plain_copy": [], "materialise": [], "export": []}
        rows = 0
        for r in range(args.repeat):
            times["plain_copy"].append(plain_copy(zpath, ids, root / f"copy-{r}.bin"))
            (root / f"copy-{r}.bin").unlink()
            wall, cpu, rows, builder = materialise(zpath, artifact, root / f"cache-{r}")
            times["materialise"].append((wall, cpu))
            times["export"].append(export(builder.as_dataset(), root / f"export-{r}"))
            shutil.rmtree(root / f"export-{r}", ignore_errors=True)
            shutil.rmtree(root / f"cache-{r}", ignore_errors=True)
        mb = total / 1e6
        best = {k: min(w for w, _ in v) for k, v in times.items()}
        best_cpu = {k: min(c for _, c in v) for k, v in times.items()}
        res = {"images": args.images, "image_mb": round(mb, 1), "rows": rows, "target_ratio": 0.7}
        for k in times:
            res[f"{k}_s"] = round(best[k], 3)
            res[f"{k}_mb_s"] = round(mb / best[k], 1)
            res[f"{k}_cpu_s"] = round(best_cpu[k], 3)
        for k in ("materialise", "export"):
            res[f"{k}_ratio"] = round(best["plain_copy"] / best[k], 3)
            # CPU seconds are less disturbed than wall time when other jobs share the cores.
            res[f"{k}_cpu_ratio"] = round(best_cpu["plain_copy"] / best_cpu[k], 3)
        res["setup_s"] = round(setup, 1)
        res["load_average"] = [round(x, 2) for x in os.getloadavg()]
        for k, v in times.items():
            res[f"all_{k}_s"] = [round(w, 3) for w, _ in v]
        print(json.dumps(res, indent=1))
        if args.json:
            args.json.write_text(json.dumps(res, indent=1) + "\n")
        return 0
    finally:
        if args.workdir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
