"""Speed of the ImageNet matching: WordNet load + full vocabulary match + every binary task (target <= 10 s).

    python benchmarks/bench_match.py                     # both hierarchies, warm WordNet cache
    python benchmarks/bench_match.py --cold              # WordNet copied into a fresh cache first
    python benchmarks/bench_match.py --table             # also the binary-task count for N x L

Inputs default to the shared reference files beside the checkout (../shared/reference/metashift).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
REFERENCE = ROOT.parent / "shared" / "reference" / "metashift"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--reference",
        type=Path,
        default=REFERENCE,
        help="folder with class_hierarchy.json, candidate-subset-names.txt, imagenet1k_node_names.json",
    )
    parser.add_argument("--cold", action="store_true", help="copy WordNet into a fresh temporary cache (timed)")
    parser.add_argument("--table", action="store_true", help="binary-task counts for N in 1,5,10,20 and L in 0..8")
    args = parser.parse_args()

    t0, c0 = time.perf_counter(), time.process_time()
    from metashift_hf.wordnet_match.hierarchy import load_hierarchy
    from metashift_hf.wordnet_match.match import match, read_subset_names, read_vocabulary
    from metashift_hf.wordnet_match.tasks import binary_tasks, build_registry
    from metashift_hf.wordnet_match.wordnet import load_wordnet

    cache = tempfile.mkdtemp(prefix="bench-match-") if args.cold else None
    wn = load_wordnet(cache_dir=cache, use_nltk_corpus=not args.cold)
    t_wn = time.perf_counter() - t0
    print(f"WordNet load{' (cold copy)' if args.cold else ''}: {t_wn:.2f} s (imports included)")
    t_read0 = time.perf_counter()
    vocabulary = read_vocabulary(args.reference / "class_hierarchy.json")
    subsets = read_subset_names(args.reference / "candidate-subset-names.txt")
    t_read = time.perf_counter() - t_read0
    for spec in ("wordnet", f"tree:{args.reference / 'imagenet1k_node_names.json'}"):
        t1 = time.perf_counter()
        tree = load_hierarchy(spec, wn)
        t2 = time.perf_counter()
        result = match(vocabulary, subsets, tree, wn)
        t3 = time.perf_counter()
        tasks = build_registry(result, tree, wn)
        t4 = time.perf_counter()
        f = result.figures
        n_binary = sum(t.kind == "binary" for t in tasks)
        label = "wordnet" if spec == "wordnet" else "published tree"
        print(
            f"{label}: {f['vocabulary_names']} names -> {f['matched_names']} matched -> {f['subsets']} subsets -> "
            f"{f['classes']} classes -> {f['imagenet_leaves_covered']} leaves; {n_binary} binary tasks (N=5, L=2)"
        )
        print(
            f"  hierarchy {t2 - t1:.2f} s, match {t3 - t2:.2f} s, tasks {t4 - t3:.2f} s; "
            f"total with WordNet load and input reading: {t_wn + t_read + (t4 - t1):.2f} s"
        )
        if args.table:
            levels = range(0, 9)
            print(f"  binary tasks, N (rows) x L (columns {list(levels)}):")
            for n in (1, 5, 10, 20):
                counts = [len(binary_tasks(result, tree, wn, min_subsets=n, level=level)) for level in levels]
                print(f"    N={n:<3} " + " ".join(f"{c:>6}" for c in counts))
    # CPU time too: on a shared machine the wall clock also measures the neighbours
    print(
        f"whole run: {time.perf_counter() - t0:.2f} s wall, {time.process_time() - c0:.2f} s CPU"
        + ("" if not args.table else " (table included)")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
