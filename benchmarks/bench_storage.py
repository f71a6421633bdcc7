"""Storage of overlapping task repos, and what a chunk-deduplicating store saves.

Tasks share images (the paper's cat/dog tasks reuse the same training groups), so two task
repos hold many identical JPEGs. The Hub stores files in a content-defined-chunking store (Xet):
a byte run shared by two files is kept once when it falls into identical chunks. This script
exports two tasks with several parquet writer settings and measures, per setting:

* bytes each repo holds (parquet shards) and their sum;
* unique bytes after chunk-level dedup across both repos, with a gear-hash content-defined
  chunker (64 KiB target, 8 KiB min, 128 KiB max), plus the number of chunks shared;
* the ideal: bytes of the images both tasks contain (what perfect dedup could save).

The embedded demo world's JPEGs are tiny (2-4 kB); GQA's average ~147 kB (images.zip:
21,817,965,542 bytes / 148,854 images). ``--image-kb`` (default 147) therefore swaps the demo
images for seeded noise JPEGs of about that size, so chunks relate to images as they would on
real data; ``--image-kb 0`` keeps the demo images, ``--artifact/--images`` uses real inputs.

    python benchmarks/bench_storage.py [--tasks A B] [--image-kb 147] [--json OUT]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (name, compression, content-defined chunking, rows sorted by image id) - candidate writer settings
SETTINGS = [
    ("snappy", "snappy", False, False),
    ("snappy+cdc", "snappy", True, False),
    ("none+cdc", "none", True, False),
    ("snappy+sort", "snappy", False, True),
    ("snappy+cdc+sort", "snappy", True, True),
    ("none+sort", "none", False, True),
    ("none+cdc+sort", "none", True, True),
    ("zstd+cdc+sort", "zstd", True, True),
]
TARGET_BITS = 16  # 2**16 = 64 KiB average chunk
MIN_CHUNK, MAX_CHUNK = 8 * 1024, 128 * 1024
_GEAR = np.random.default_rng(20240521).integers(0, 2**63, size=256, dtype=np.uint64) * np.uint64(2) + np.uint64(1)


def gear_hashes(data: bytes) -> np.ndarray:
    """Rolling gear hash over a 64-byte window: h_i = sum_k G[b_(i-k)] << k (mod 2**64).

    Computed by doubling (6 shifted adds) instead of a byte loop, so 100s of MB take seconds.
    """
    h = _GEAR[np.frombuffer(data, dtype=np.uint8)]
    span = 1
    while span < 64:
        shifted = np.zeros_like(h)
        shifted[span:] = h[:-span] << np.uint64(span)
        h = h + shifted
        span *= 2
    return h


def chunk_boundaries(data: bytes) -> list[int]:
    """End offsets of content-defined chunks (FastCDC-style: mask test, min and max size)."""
    if not data:
        return []
    mask = np.uint64((1 << TARGET_BITS) - 1) << np.uint64(64 - TARGET_BITS)  # high bits mix best
    cands = np.flatnonzero((gear_hashes(data) & mask) == 0) + 1
    ends, start, i = [], 0, 0
    while start < len(data):
        limit = min(start + MAX_CHUNK, len(data))
        i = np.searchsorted(cands, start + MIN_CHUNK, side="left")
        end = int(cands[i]) if i < len(cands) and cands[i] <= limit else limit
        ends.append(end)
        start = end
    return ends


def chunk_digests(path: Path) -> list[tuple[str, int]]:
    data = path.read_bytes()
    out, start = [], 0
    for end in chunk_boundaries(data):
        out.append((hashlib.sha256(data[start:end]).hexdigest(), end - start))
        start = end
    return out


def noise_images(ids: list[str], folder: Path, kb: int, seed: int = 0) -> None:
    """Seeded noise JPEGs of about ``kb`` kB each (noise does not compress, so size ~ pixels)."""
    from PIL import Image

    side = int(np.sqrt(kb * 1024 / 0.8))  # RGB noise at quality 85 takes ~0.8 bytes per pixel
    for image_id in ids:
        rng = np.random.default_rng([seed, int(hashlib.sha256(image_id.encode()).hexdigest()[:8], 16)])
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8)).save(buf, "JPEG", quality=85)
        (folder / f"{image_id}.jpg").write_bytes(buf.getvalue())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", nargs=2, default=["paper-dg-cat-dog-1", "paper-dg-cat-dog-2"])
    ap.add_argument("--artifact", help="artifact folder (default: the demo world, built in a temp folder)")
    ap.add_argument("--images", help="images folder/zip for --artifact")
    ap.add_argument("--scale", type=float, default=0.5, help="size scale for the paper tasks (demo world: 0.5)")
    ap.add_argument(
        "--image-kb", type=int, default=147, help="replace demo images by noise JPEGs of this size (0: keep)"
    )
    ap.add_argument("--json", help="also write the figures as JSON here")
    ap.add_argument("--only", nargs="*", help="run only these settings (names as printed)")
    args = ap.parse_args(argv)

    from metashift_hf import __version__
    from metashift_hf.hub.api import plan, prepare
    from metashift_hf.hub.shards import ROW_GROUP_ROWS, write_config
    from metashift_hf.hub.task_data import TaskRef

    tmp = Path(tempfile.mkdtemp(prefix="bench-storage-"))
    if args.artifact:
        artifact, images = args.artifact, args.images
    else:
        from metashift_hf.builders.build import build_from_inputs
        from metashift_hf.builders.build_inputs import SceneGraphs
        from metashift_hf.sources.demo_world import generate_demo_world

        world = generate_demo_world(tmp / "world", seed=0)
        artifact = str(
            build_from_inputs(
                tmp / "artifact", given=SceneGraphs(world.scene_graphs), provenance="demo", plots=False
            ).root
        )
        images = str(world.images_dir)
    overrides = {"scale": args.scale} if args.scale != 1 else {}
    ids = {
        t: {
            r.image_id for rows in plan(TaskRef(t, artifact=artifact, options=overrides)).splits.values() for r in rows
        }
        for t in args.tasks
    }
    if args.image_kb and not args.artifact:
        images = tmp / "noise-images"
        images.mkdir()
        noise_images(sorted(ids[args.tasks[0]] | ids[args.tasks[1]]), images, args.image_kb)
    prepared = {
        t: prepare(TaskRef(t, artifact=artifact, images=images, options=overrides), cache_dir=tmp / "cache")
        for t in args.tasks
    }

    sizes = {}
    for t in args.tasks:
        for d in prepared[t].dataset.values():
            for row in d.cast_column("image", __import__("datasets").Image(decode=False)).select_columns(
                ["image_id", "image"]
            ):
                sizes[row["image_id"]] = len(row["image"]["bytes"])
    shared = ids[args.tasks[0]] & ids[args.tasks[1]]
    figures = {
        "package_version": __version__,
        "tasks": args.tasks,
        "image_kb": args.image_kb,
        "rows": {t: sum(len(d) for d in prepared[t].dataset.values()) for t in args.tasks},
        "shared_images": len(shared),
        "shared_image_bytes": sum(sizes[i] for i in shared),
        "image_bytes": {t: sum(sizes[i] for i in ids[t]) for t in args.tasks},
        "row_group_rows": ROW_GROUP_ROWS,
        "store_chunker": {"target": 2**TARGET_BITS, "min": MIN_CHUNK, "max": MAX_CHUNK},
        "settings": [],
    }
    print(
        f"tasks {args.tasks[0]} ({figures['rows'][args.tasks[0]]} rows) and {args.tasks[1]} "
        f"({figures['rows'][args.tasks[1]]} rows): {len(shared)} shared images, {figures['shared_image_bytes'] / 1e6:.1f} MB"
    )
    print(
        f"{'setting':16s} {'repo A MB':>9s} {'repo B MB':>9s} {'sum MB':>8s} {'unique MB':>9s} {'saved':>6s} "
        f"{'shared chunks':>13s} {'write s':>7s}"
    )
    for name, compression, cdc, by_id in SETTINGS:
        if args.only and name not in args.only:
            continue
        t0 = time.perf_counter()
        repo_bytes, chunks = {}, {}
        for t in args.tasks:
            repo = tmp / "repos" / name / t
            cfg = write_config(
                prepared[t].dataset, repo, t, compression=compression, content_defined_chunking=cdc, sort_by_id=by_id
            )
            repo_bytes[t] = cfg.download_size
            chunks[t] = [c for s in cfg.splits for f in s.files for c in chunk_digests(repo / f)]
        seconds = time.perf_counter() - t0
        unique = {}
        for t in args.tasks:
            unique.update(dict(chunks[t]))
        a, b = ({h for h, _ in chunks[t]} for t in args.tasks)
        total = sum(repo_bytes.values())
        uniq = sum(unique.values())
        row = {
            "setting": name,
            "compression": compression,
            "cdc": cdc,
            "sorted_by_image_id": by_id,
            "repo_bytes": repo_bytes,
            "sum_bytes": total,
            "unique_bytes": uniq,
            "saved_fraction": round(1 - uniq / total, 4),
            "shared_chunks": len(a & b),
            "chunks": len(unique),
            "seconds_incl_chunking": round(seconds, 2),
        }
        figures["settings"].append(row)
        print(
            f"{name:16s} {repo_bytes[args.tasks[0]] / 1e6:9.1f} {repo_bytes[args.tasks[1]] / 1e6:9.1f} {total / 1e6:8.1f} "
            f"{uniq / 1e6:9.1f} {row['saved_fraction']:6.1%} {len(a & b):13d} {seconds:7.1f}"
        )
    ideal = figures["shared_image_bytes"] / sum(figures["image_bytes"].values())
    print(f"ideal (every shared image stored once): saves {ideal:.1%} of the image bytes")
    figures["ideal_saved_fraction"] = round(ideal, 4)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
