"""Whole-build benchmark on a full-scale synthetic GQA scene-graph file.

Generates (once, cached) a synthetic ``sceneGraphs.json`` with 113,018 images (benchmarks/synthetic_gqa.py),
runs ``metashift-hf build`` on it in a child process and reports wall time, CPU time and peak RSS
(targets on the 2-core machine: wall <= 30 s, peak RSS <= 3 GB). In the same run it times the
straightforward networkx reference of the meta-graph stage on the built classes
(benchmarks/bench_metagraph.py) and checks that distances agree to 1e-6 on connected meta-graphs.

    python benchmarks/bench_build.py [--scene-graphs FILE ...] [--work DIR] [--pairing relation] [--plots]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

TARGET_WALL_S = 30.0
TARGET_RSS_GB = 3.0


def synthetic_file(work: Path, images: int, seed: int) -> Path:
    """The cached synthetic file for (images, seed), generated when absent."""
    from synthetic_gqa import generate

    path = work / f"synthetic_sceneGraphs_{images}_{seed}.json"
    info = path.with_suffix(".info.json")
    if not (path.is_file() and info.is_file()):
        summary = generate(path, n_images=images, seed=seed)
        info.write_text(json.dumps(summary))
    return path


def run_build(files: list[Path], out: Path, extra: list[str]) -> dict:
    """Run the build in a child process; wall time, CPU time and peak RSS of that child."""
    # --force: the artifact of the previous run is replaced (build refuses to overwrite one otherwise)
    cmd = [
        sys.executable,
        "-m",
        "metashift_hf.cli",
        "build",
        "--scene-graphs",
        *map(str, files),
        "--out",
        str(out),
        "--force",
        *extra,
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"build failed with status {proc.returncode}")
    return {
        "wall_s": wall,
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "peak_rss_gb": after.ru_maxrss / 1024**2,  # Linux reports KiB
        "stages": [line for line in proc.stderr.splitlines() if line.strip()],
        "summary": [line for line in proc.stdout.splitlines() if line.strip()],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scene-graphs", nargs="+", type=Path, help="use these files instead of the synthetic one")
    ap.add_argument(
        "--work",
        type=Path,
        default=Path(os.environ.get("TMPDIR", "/tmp")) / "metashift-bench",
        help="folder for the synthetic file and the artifact",
    )
    ap.add_argument("--images", type=int, default=113_018)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pairing", default="relation", choices=("relation", "cooccurrence"))
    ap.add_argument("--plots", action="store_true", help="include the per-class PNGs in the timed build")
    ap.add_argument("--skip-reference", action="store_true", help="do not time the networkx reference")
    ap.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    args = ap.parse_args(argv)

    args.work.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    files = args.scene_graphs or [synthetic_file(args.work, args.images, args.seed)]
    print(
        f"input: {', '.join(map(str, files))} ({sum(f.stat().st_size for f in files) / 1e6:.0f} MB; "
        f"ready in {time.perf_counter() - t:.1f} s)"
    )
    out = args.work / f"artifact-{args.pairing}"
    extra = ["--pairing", args.pairing] + ([] if args.plots else ["--no-plots"])
    load = os.getloadavg()[0]
    build = run_build(files, out, extra)
    print(f"load average before the build: {load:.2f} on {os.cpu_count()} cores")
    for line in build["stages"] + build["summary"]:
        print("  " + line)
    ok_wall = build["wall_s"] <= TARGET_WALL_S
    ok_rss = build["peak_rss_gb"] <= TARGET_RSS_GB
    print(
        f"whole build: wall {build['wall_s']:.1f} s (target <= {TARGET_WALL_S:.0f} s: {'ok' if ok_wall else 'MISSED'}), "
        f"cpu {build['cpu_s']:.1f} s, peak RSS {build['peak_rss_gb']:.2f} GB "
        f"(target <= {TARGET_RSS_GB:.0f} GB: {'ok' if ok_rss else 'MISSED'})"
    )
    figures = {
        "input_files": [str(f) for f in files],
        "pairing": args.pairing,
        "plots": args.plots,
        "load_average": load,
        **{k: build[k] for k in ("wall_s", "cpu_s", "peak_rss_gb")},
        "stages": build["stages"],
    }

    if not args.skip_reference:
        try:
            import bench_metagraph
        except ImportError:
            print("meta-graph reference: benchmarks/bench_metagraph.py not found, skipped")
        else:
            from metashift_hf.builders.artifact import Artifact

            options = Artifact.load(out).options
            work = bench_metagraph.artifact_workload(str(out))
            r = bench_metagraph.run(
                work, edge_threshold=options.edge_threshold, spectral_dim=options.spectral_dim, repeat=1
            )
            print(
                "meta-graph stage on the built classes (ours = builders.metagraph.analyse_class, "
                "reference = networkx graph + greedy_modularity_communities + spectral_layout):"
            )
            bench_metagraph.print_table(r)
            ok_dist = r["max_distance_diff"] <= 1e-6
            speed = r["ref_cpu"] / max(r["ours_cpu"], 1e-9)
            print(
                f"meta-graph speed-up (cpu): {speed:.1f}x (target >= 5x: {'ok' if speed >= 5 else 'MISSED'}); "
                f"distances equal to 1e-6 on {r['compared']} connected meta-graphs: {'ok' if ok_dist else 'MISSED'}"
            )
            figures["metagraph"] = {k: v for k, v in r.items() if not isinstance(v, dict)}
            figures["metagraph"]["speedup_cpu"] = speed
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
