"""``metashift-hf train``: ERM / reweighting / GroupDRO baselines on a task, several seeds, scored per group."""
from __future__ import annotations

import argparse

from ..core.options import positive_float, positive_int
from ..manifest import resolve_input
from ..core.fsutil import check_out
from ..train import METHODS, PROBES, TRAIN_KIND, TrainConfig, train
from .task_args import add_task_arguments, task_from_args


def add_training_arguments(p: argparse.ArgumentParser, default_seeds: int) -> None:
    """What to train, shared with `metashift-hf experiment`."""
    p.add_argument("--images", default=None, help="image folder of <id>.jpg or GQA images.zip (default: the registered one)")
    p.add_argument("--method", choices=METHODS, default="erm", help="training objective (default erm)")
    p.add_argument("--probe", choices=PROBES, default="linear", help="linear head on frozen features, or fine-tune all (default linear)")
    p.add_argument("--seeds", type=positive_int, default=default_seeds, help=f"training seeds 0..N-1 (default {default_seeds})")
    p.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N (default cpu)")
    p.add_argument("--epochs", type=positive_int, default=None, help="epochs (default 50 linear, 10 finetune)")
    p.add_argument("--image-size", type=positive_int, default=None,
                   help="linear probe: backbone input size in pixels (default the model's 224; smaller suits small images)")
    p.add_argument("--cache-dir", default=None, help="feature cache root (default $METASHIFT_HF_CACHE or the user cache)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "train", help="train ERM / reweight / GroupDRO baselines (EfficientNet-Lite0 linear probe or fine-tuning) and score them",
        description="Train on the task's train split, keep the epoch with the best average accuracy on its ID "
                    "validation split, predict every split and score it (as `metashift-hf score`). --probe linear "
                    "trains a head on frozen EfficientNet-Lite0 features, computed once per image and cached on "
                    "disk by image id and model hash; --probe finetune trains the whole network (Adam, lr 5e-5, "
                    "batch 32, random resized crop 224, flip, colour jitter, 10%% greyscale), best on a GPU. Writes "
                    "seed-<s>/{predictions.csv,scores.json,scores.md}, scores.json/scores.md (mean ± std over "
                    "seeds, ddof 1) and run_card.json into --out.")
    add_task_arguments(p)
    add_training_arguments(p, default_seeds=1)
    p.add_argument("--lr", type=positive_float, default=None, help="Adam learning rate (default 1e-3 linear, 5e-5 finetune)")
    p.add_argument("--batch-size", type=positive_int, default=None, help="batch size (default 64 linear, 32 finetune)")
    p.add_argument("--out", required=True, help="output folder: new, empty, or an earlier run with --force")
    p.add_argument("--force", action="store_true", help="replace an earlier training run in --out (nothing else is ever replaced)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # a task id on an artifact reads --images (or the registered image source); a folder or repo has its own
    images = args.images or (resolve_input("images", required=False) if args.artifact else None)
    config = TrainConfig(method=args.method, probe=args.probe, seeds=args.seeds, device=args.device, epochs=args.epochs,
                         lr=args.lr, batch_size=args.batch_size, image_size=args.image_size)
    check_out(args.out, TRAIN_KIND, force=args.force, inputs=[args.artifact, images, args.task])  # before any download
    result = train(task_from_args(args, images=images), None, None, args.out, config, cache_dir=args.cache_dir,
                   progress=args.progress and not args.no_progress, force=args.force)
    print(result.summary())
    feats = result.card.get("features")
    if feats:
        print(f"features: {feats['computed']} computed, {feats['cached']} from the cache ({feats['cache_dir']})")
    print(f"outputs: {args.out}/scores.json, scores.md, run_card.json, seed-*/predictions.csv")
    return 0
