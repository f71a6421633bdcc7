"""The shift experiments of ``metashift-hf experiment``: ood-levels, clustered, conflicts (docs/experiments.md)."""

from __future__ import annotations

import argparse

from metashift_hf.tasks.levels import SHIFT_TYPES

from ..core.options import int_at_least, int_in, positive_float, positive_int, seed, seed_count
from ..hub.task_open import TaskOrigin
from ..research.conflicts import STEPS_MAX, ConflictConfig
from ..research.experiments import EXPERIMENTS, run_experiment
from ..research.ood_experiments import N_INIT_CHECK, N_INIT_MAX, ClusteredConfig, ConflictsConfig, OodLevelsConfig
from ..research.train import TrainConfig
from .run_args import add_cache_dir_argument, add_device_argument, add_epochs_argument
from .task_args import add_task_arguments, parse_overrides, planning_seed, task_images


def _parser(sub, name: str) -> argparse.ArgumentParser:
    """The subcommand of the registered experiment ``name`` (its help from the registry entry)."""
    exp = EXPERIMENTS[name]
    return sub.add_parser(name, help=exp.help, description=exp.help + ".")


def _origin(args: argparse.Namespace, planned: bool = False) -> TaskOrigin:
    """The build (and its images) the experiment makes its tasks on; --seed/--set only where it plans task ids."""
    if not planned:
        return TaskOrigin(artifact=args.artifact, images=task_images(args))
    options, _ = parse_overrides(args.overrides, [])
    return TaskOrigin(artifact=args.artifact, images=task_images(args), seed=planning_seed(args), options=options)


def _run(args: argparse.Namespace, config, planned: bool = False) -> dict:
    return run_experiment(
        args.experiment,
        _origin(args, planned),
        args.out,
        config,
        cache_dir=args.cache_dir,
        progress=False,
        force=args.force,
    )


def _common(q: argparse.ArgumentParser, planning: bool = False) -> None:
    # the tasks are planned on a build; --seed/--set are the tasks' own only where the command plans them
    add_task_arguments(q, task="none", images=True, hub=False, planning=planning, artifact_required=True)
    q.add_argument(
        "--classes", nargs=2, default=["cat", "dog"], metavar=("A", "B"), help="the class pair (default cat dog)"
    )
    add_device_argument(q)
    add_cache_dir_argument(q)
    q.add_argument("--out", required=True, help="output folder: new, empty, or an earlier experiment with --force")
    q.add_argument("--force", action="store_true", help="replace an earlier experiment in --out")


def add_subcommands(sub) -> None:
    """Add the three subcommands to `metashift-hf experiment`'s subparsers."""
    q = _parser(sub, "ood-levels")
    _common(q, planning=True)
    q.add_argument(
        "--type", dest="shift_type", choices=SHIFT_TYPES, default="marginal", help="shift type (default marginal)"
    )
    q.add_argument(
        "--models",
        nargs="+",
        default=["erm", "reweight", "groupdro"],
        metavar="METHOD[:PROBE]",
        help="models to compare, e.g. erm groupdro erm:finetune (default erm reweight groupdro, linear probe)",
    )
    q.add_argument("--seeds", type=seed_count, default=2, help="training seeds per task (default 2)")
    add_epochs_argument(q)
    q.set_defaults(func=run_ood_levels)
    q = _parser(sub, "clustered")
    _common(q)
    q.add_argument("--k", type=int_at_least(2), default=8, help="clusters per class, at least 2 (default 8)")
    q.add_argument(
        "--n-init", type=N_INIT_CHECK, default=10, help=f"k-means restarts, at most {N_INIT_MAX} (default 10)"
    )
    q.add_argument("--seed", type=seed, default=0, help="k-means and split seed (default 0)")
    q.add_argument("--model", default="erm", metavar="METHOD[:PROBE]", help="model trained on each D_k (default erm)")
    q.add_argument("--seeds", type=seed_count, default=2, help="training seeds per D_k (default 2)")
    add_epochs_argument(q, default="50 linear")
    q.set_defaults(func=run_clustered)
    q = _parser(sub, "conflicts")
    _common(q)
    q.add_argument(
        "--subsets",
        nargs="+",
        default=None,
        metavar="SUBSET",
        help="subsets to use, e.g. 'cat(sofa)' (default: every kept subset of the classes with >= --min-images)",
    )
    q.add_argument(
        "--min-images", type=positive_int, default=50, help="default subsets: at least this many images (default 50)"
    )
    q.add_argument("--per-subset", type=positive_int, default=50, help="training images per subset (default 50)")
    q.add_argument(
        "--steps", type=int_in(1, STEPS_MAX), default=2000, help=f"SGD steps, at most {STEPS_MAX:,} (default 2000)"
    )
    q.add_argument("--every", type=positive_int, default=20, help="steps per recorded window (default 20)")
    q.add_argument(
        "--lr", type=positive_float, default=0.05, help="SGD learning rate on standardised features (default 0.05)"
    )
    q.add_argument("--seed", type=seed, default=0, help="seed of draws and batches (default 0)")
    q.set_defaults(func=run_conflicts)


def run_ood_levels(args: argparse.Namespace) -> int:
    training = TrainConfig(seeds=args.seeds, device=args.device, epochs=args.epochs)
    config = OodLevelsConfig(tuple(args.classes), args.shift_type, tuple(args.models), training)
    r = _run(args, config, planned=True)
    for c in r["curves"]:
        slope = "n/a" if c["slope"] is None else f"{c['slope']:.3f}"
        auc = "n/a" if c["auc"] is None else f"{c['auc']:.3f}"
        print(f"{c['model']:<10} {c['curve']:<9} slope {slope}  AUC {auc}  knee {c['knee'] or 'none'}")
    print(f"results: {args.out}/{EXPERIMENTS[args.experiment].outputs}")
    return 0


def run_clustered(args: argparse.Namespace) -> int:
    training = TrainConfig(seeds=args.seeds, device=args.device, epochs=args.epochs)
    config = ClusteredConfig(
        tuple(args.classes), k=args.k, seed=args.seed, n_init=args.n_init, model=args.model, training=training
    )
    r = _run(args, config)
    for c in r["per_class"]:
        print(f"{c['class']}: MI(cluster; contexts) {c['mi_bits']:.3f} of H(cluster) {c['h_cluster_bits']:.3f} bits")
    print(f"results: {args.out}/{EXPERIMENTS[args.experiment].outputs}")
    return 0


def run_conflicts(args: argparse.Namespace) -> int:
    run = ConflictConfig(steps=args.steps, every=args.every, lr=args.lr, seed=args.seed)
    config = ConflictsConfig(
        tuple(args.classes),
        subsets=None if args.subsets is None else tuple(args.subsets),
        min_images=args.min_images,
        per_subset=args.per_subset,
        run=run,
        device=args.device,
    )
    r = _run(args, config)
    for kind in ("helps", "hurts"):
        print(
            f"{kind}: "
            + ", ".join(f"{x['train']} -> {x['eval']} ({x['value']:+.2f})" for x in r["strongest"][kind][:3])
        )
    print(f"results: {args.out}/{EXPERIMENTS[args.experiment].outputs}")
    return 0
