"""Images per second for EfficientNet-Lite0 at batch 32: the evaluator's pipeline vs its parts.

Measures, on the same in-memory JPEG bytes (the shared real GQA/VG images, cycled to --n):
  * decode+preprocess only (single thread),
  * inference only (already preprocessed tensors),
  * sequential: decode a batch, then run it (no overlap),
  * pipelined: metashift_hf.evaluate.predict (thread-pool prefetch overlapped with inference).

    python benchmarks/bench_eval.py [--n 512] [--batch-size 32] [--device cpu] [--workers N] [--images DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

DEFAULT_IMAGES = Path(__file__).resolve().parents[2] / "shared" / "reference" / "images"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=3, help="rounds; each measurement reports its best round (shared machines are noisy)")
    ap.add_argument("--images", type=Path, default=DEFAULT_IMAGES, help="folder searched recursively for *.jpg")
    args = ap.parse_args()

    import torch

    from metashift_hf.evaluate.models import load_model
    from metashift_hf.evaluate.predict import predict

    files = sorted(args.images.rglob("*.jpg"))
    if not files:
        raise SystemExit(f"no .jpg under {args.images}")
    blobs = [f.read_bytes() for f in files]
    ids = [str(i) for i in range(args.n)]
    read = lambda iid: blobs[int(iid) % len(blobs)]  # noqa: E731
    model = load_model("efficientnet-lite0", args.device)
    bs = args.batch_size

    # warm-up (first forward allocates, picks kernels)
    model.logits([model.prepare(blobs[0])] * bs)

    prepared = [model.prepare(read(i)) for i in ids]

    def sequential():
        return np.concatenate([model.logits([model.prepare(read(i)) for i in ids[s:s + bs]]).argmax(1)
                               for s in range(0, len(ids), bs)])

    modes = {
        "decode": lambda: [model.prepare(read(i)) for i in ids],
        "infer": lambda: [model.logits(prepared[s:s + bs]) for s in range(0, len(ids), bs)],
        "sequential": sequential,
        "pipelined": lambda: predict(model, ids, read, batch_size=bs, workers=args.workers, progress=False),
    }
    # round-robin over the modes, best of --repeat each: the machine's load drifts, and measuring the
    # modes one after another would turn that drift into a fake difference between them
    times = {k: [] for k in modes}
    results = {}
    for _ in range(args.repeat):
        for name, fn in modes.items():
            t = time.perf_counter()
            results[name] = fn()
            times[name].append(time.perf_counter() - t)
    t_decode, t_infer, t_seq, t_pipe = (min(times[k]) for k in ("decode", "infer", "sequential", "pipelined"))
    assert np.array_equal(results["sequential"], results["pipelined"].top1), "pipelined and sequential predictions differ"

    n = len(ids)
    result = {
        "images": n, "batch_size": bs, "device": args.device, "torch_threads": torch.get_num_threads(),
        "cpus": os.cpu_count(), "cpu": platform.processor() or platform.machine(), "torch": torch.__version__,
        "decode_preprocess_only_img_s": round(n / t_decode, 1),
        "inference_only_img_s": round(n / t_infer, 1),
        "sequential_img_s": round(n / t_seq, 1),
        "pipelined_img_s": round(n / t_pipe, 1),
        "pipelined_vs_sequential": round(t_seq / t_pipe, 2),
        # other work on the machine slows every figure; keep the load next to them
        "load_average_1min_after": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
