"""``metashift-hf train``: baselines (metashift_hf.research.algorithms: ERM, reweight, GroupDRO, IRM, CORAL, Mixup, JTT,
DFR) on a task, several seeds, scored per group."""

from __future__ import annotations

import argparse

from ..core.options import OptionError, image_size, non_negative_float, positive_float, positive_int
from ..research.algorithms import HPARAMS, SAMPLINGS, SELECTIONS
from ..research.features import BACKBONE_FORMS
from ..research.train import (
    CONFIG_KEYS,
    METHODS,
    PROBES,
    TrainConfig,
    check_train_out,
    load_config,
    parse_seeds,
    train,
)
from . import HELP
from .run_args import add_cache_dir_argument, add_device_argument, add_epochs_argument
from .task_args import add_task_arguments, task_from_args, task_images


def add_training_arguments(p: argparse.ArgumentParser, default_seeds: int, method: bool = True) -> None:
    """What to train, shared with `metashift-hf experiment` (``method=False``: the command names its methods)."""
    if method:
        p.add_argument(
            "--method", choices=METHODS, default=None, help="training algorithm (default erm; docs/evaluate.md)"
        )
    p.add_argument(
        "--probe",
        choices=PROBES,
        default=None,
        help="linear head on frozen features, or fine-tune all (default linear)",
    )
    p.add_argument(
        "--seeds",
        type=_seeds,
        default=None,
        help=f"training seeds: a count N (0..N-1), a range 3-5 or a list 0,2,7 (default {default_seeds}); "
        "seeds not yet in an earlier run of the same config in --out are added to it",
    )
    p.add_argument(
        "--select",
        choices=SELECTIONS,
        default=None,
        help="model selection: validation average, validation worst-group, or the test ORACLE (an upper "
        "bound, labelled as such); default the method's (worst-group for reweight/groupdro/jtt/dfr)",
    )
    p.add_argument(
        "--sampling",
        choices=SAMPLINGS,
        default=None,
        help="batches: shuffle (default of train and compare), group-balanced (the paper's loader; default of "
        "experiment paper-dg/paper-subpop), or domain-balanced (DomainBed's: each context evenly)",
    )
    p.add_argument(
        "--hparam",
        dest="hparams",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a hyper-parameter of the method, e.g. eta=0.05 (groupdro), lambda_up=20 (jtt); with several "
        "methods (compare) prefix it: groupdro.eta=0.05; repeatable; "
        "defaults: "
        + "; ".join(f"{m} " + ", ".join(f"{k}={v:g}" for k, v in hp.items()) for m, hp in HPARAMS.items() if hp),
    )
    p.add_argument(
        "--backbone",
        default=None,
        metavar="MODEL",
        help=f"linear probe: the model whose pre-logits features are probed, {BACKBONE_FORMS} "
        "(default efficientnet-lite0, offline; --probe finetune trains the same model with a new head)",
    )
    add_device_argument(p, default=None)
    add_epochs_argument(p)
    p.add_argument(
        "--lr", type=positive_float, default=None, help="Adam learning rate (default 1e-3 linear, 5e-5 finetune)"
    )
    p.add_argument("--batch-size", type=positive_int, default=None, help="batch size (default 64 linear, 32 finetune)")
    p.add_argument("--weight-decay", type=non_negative_float, default=None, help="Adam weight decay (default 0)")
    p.add_argument(
        "--image-size",
        type=image_size,
        default=None,
        help="linear probe: backbone input size in pixels (default the model's 224; smaller suits small images)",
    )
    p.add_argument(
        "--config-file",
        default=None,
        metavar="TOML",
        help="training settings from a TOML file with these flags' names (a run's config.toml); flags given win",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted run of the same task and config: finished seeds and the last epoch of "
        "the unfinished one are kept in the cache (train-runs/)",
    )
    add_cache_dir_argument(p)


def _seeds(text: str) -> str:
    parse_seeds(text)  # refused here, by argparse, with the option's name
    return text


def _hparams(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise OptionError(f"--hparam {item!r} is not NAME=VALUE", "write e.g. --hparam eta=0.05")
        out[key.strip()] = value.strip()  # checked by the method's declared range (algorithms.resolve_hparams)
    return out


def config_from_args(args: argparse.Namespace, default_seeds: int) -> TrainConfig:
    """TrainConfig from the flags over the --config-file over the defaults (shared with `experiment`)."""
    values = load_config(args.config_file) if args.config_file else {}
    hparams = {**values.pop("hparams", {}), **_hparams(args.hparams)}
    for key in CONFIG_KEYS:  # the flags are the config file's keys
        given = getattr(args, key, None)
        if given is not None:
            values[key] = given
    values.setdefault("seeds", default_seeds)
    return TrainConfig(**values, **({"hparams": hparams} if hparams else {}))


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "train",
        help=HELP["train"],
        description="Train on the task's train split with --method, keep the epoch its --select rule prefers (the "
        "method's default: validation average or worst-group), predict every split and score it (as "
        "`metashift-hf score`). --probe linear "
        "trains a head on frozen EfficientNet-Lite0 features, computed once per image and cached on "
        "disk by image content (sha256) and model hash; --probe finetune trains the whole network (Adam, lr 5e-5, "
        "batch 32, random resized crop 224, flip, colour jitter, 10%% greyscale), best on a GPU. Writes "
        "seed-<s>/{predictions.csv,scores.json,scores.md,head.safetensors,run.json,log.jsonl}, "
        "scores.json/scores.md (mean ± std over seeds, ddof 1), run_card.json, config.toml and "
        "log.jsonl (every epoch) into --out.",
    )
    add_task_arguments(p, images=True)
    add_training_arguments(p, default_seeds=1)
    p.add_argument(
        "--out",
        required=True,
        help="output folder: new, empty, an earlier run of the same config (new seeds are merged in), or any earlier run with --force",
    )
    p.add_argument(
        "--force", action="store_true", help="replace an earlier training run in --out (nothing else is ever replaced)"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # a task id on an artifact reads --images (or the registered image source); a folder or repo has its own
    images = task_images(args)
    config = config_from_args(args, default_seeds=1)
    config.resolved()  # a bad setting is refused before any download
    check_train_out(args.out, force=args.force, inputs=[args.artifact, images, args.task])  # before any download
    result = train(
        task_from_args(args, images=images),
        args.out,
        config,
        cache_dir=args.cache_dir,
        progress=args.progress,
        force=args.force,
        resume=args.resume,
    )
    print(result.summary())
    feats = result.card.get("features")
    if feats:
        print(f"features: {feats['computed']} computed, {feats['cached']} from the cache ({feats['cache_dir']})")
    merged = result.card.get("merged_from_earlier_run")
    if merged:
        print(
            f"seeds {', '.join(map(str, merged))} kept from the earlier run in {args.out}; now {len(result.runs)} seed(s)"
        )
    print(
        f"outputs: {args.out}/scores.json, scores.md, run_card.json, config.toml, log.jsonl, "
        f"seed-*/{{predictions.csv, {'head' if result.config.probe == 'linear' else 'model'}.safetensors, run.json}}"
    )
    return 0
