"""``metashift-hf experiment NAME``: one subcommand per entry of metashift_hf.research.experiments.EXPERIMENTS (the
shift experiments' flags, ood-levels, clustered and conflicts, are in commands.shift_experiments), plus compare."""

from __future__ import annotations

import argparse

from ..core.options import seed, seed_count
from ..research.algorithms import HPARAM_DRAWS_MAX, METHODS, SELECTIONS, hparam_draws
from ..research.compare import SPREADS, CompareOptions, run_compare
from ..research.experiments import EXPERIMENTS, TABLE_EXPERIMENTS, run_experiment
from . import HELP
from .shift_experiments import add_subcommands
from .task_args import add_task_arguments, task_images, task_origin_from_args
from .train import add_training_arguments, config_from_args


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "experiment",
        help=HELP["experiment"],
        description="paper-dg / paper-subpop train a baseline on each of their tasks and write "
        "results.json, results.md, NAME.png and runs/<task>/ into --out; ood-levels, "
        "clustered and conflicts are described in docs/experiments.md.",
    )
    sub = p.add_subparsers(dest="experiment", metavar="|".join([*TABLE_EXPERIMENTS, "compare", *shift_names()]))
    for name in TABLE_EXPERIMENTS:
        exp = EXPERIMENTS[name]
        q = sub.add_parser(
            name,
            help=exp.help.replace("%", "%%"),  # argparse formats help strings with %
            description=f"{exp.help}. Tasks: {', '.join(exp.tasks)}.".replace("%", "%%"),
        )
        add_task_arguments(q, task="none", images=True, hub=False)  # --artifact, --images, --seed, --set
        q.add_argument(
            "--from",
            dest="source",
            default=None,
            metavar="SRC",
            help="or read the exported tasks: a folder written by `metashift-hf export`, or a Hub namespace "
            "(task T is SRC/metashift-T); no --artifact, --images or --set needed",
        )
        add_training_arguments(q, default_seeds=3)
        q.add_argument("--out", required=True, help="output folder: new, empty, or an earlier experiment with --force")
        q.add_argument(
            "--force",
            action="store_true",
            help="replace an earlier experiment in --out (nothing else is ever replaced)",
        )
        q.set_defaults(func=run)
    _register_compare(sub)
    add_subcommands(sub)
    p.set_defaults(func=lambda args: (p.print_help(), 1)[1])


def shift_names() -> list[str]:
    return [n for n in EXPERIMENTS if n not in TABLE_EXPERIMENTS]


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def _register_compare(sub) -> None:
    q = sub.add_parser(
        "compare",
        help="every method x task x seed once: results.csv, results.md (paper figures beside), compare.png",
        description="Train each --methods on each --tasks with every seed (features computed once, "
        "shared) and write results.csv (task, method, seed, selection, hparams_draw, selected, "
        "sampling, metric, value, ci_low, ci_high; SubpopBench's balanced accuracy, macro-F1, "
        "ECE and worst-class accuracy among the metrics), results.md (DomainBed's "
        "collect_results shape: per selection rule a row per method, a column per task and the "
        "cross-task average and worst; mean ± standard error across seeds, the paper's figure "
        "beside where it has one), compare.png and runs/<task>/<arm>/. An earlier comparison "
        "in --out gains the new seeds (e.g. --seeds 3-5).",
    )
    q.add_argument("--methods", type=_names, required=True, metavar="M1,M2,...", help=f"methods: {', '.join(METHODS)}")
    q.add_argument(
        "--tasks",
        type=_names,
        required=True,
        metavar="T1,T2,...",
        help="task ids, e.g. paper-subpop-cat-dog-p12,paper-dg-cat-dog-1",
    )
    add_task_arguments(q, task="none", images=True, hub=False)  # --artifact, --images, --seed, --set
    q.add_argument(
        "--from",
        dest="source",
        default=None,
        metavar="SRC",
        help="or read the exported tasks: a folder written by `metashift-hf export`, or a Hub namespace",
    )
    add_training_arguments(q, default_seeds=3, method=False)
    for action in q._actions:  # compare alone may train every rule: --select all
        if action.dest == "select":
            action.choices = (*SELECTIONS, "all")
            action.help += (
                "; all: every rule over one training per method (each keeps its own epoch), one table per rule"
            )
    q.add_argument(
        "--spread",
        choices=SPREADS,
        default="se",
        help="the ± in results.md/.tex: se (default: np.std(ddof=0)/sqrt(n) across seeds, DomainBed's and "
        "SubpopBench's format_mean), se-ddof1 (np.std(ddof=1)/sqrt(n)) or std (ddof 1)",
    )
    q.add_argument("--latex", action="store_true", help="also write results.tex (booktabs tabulars) beside results.md")
    q.add_argument(
        "--n-hparams",
        type=hparam_draws,
        default=1,
        metavar="H",
        help=f"random hyper-parameter search: H draws per method, at most {HPARAM_DRAWS_MAX} (draw 0 the defaults, "
        "the others from the algorithm registry's distributions), the best per selection rule kept (default 1: no search)",
    )
    q.add_argument(
        "--n-trials",
        type=seed_count,
        default=None,
        metavar="T",
        help="with --n-hparams: trials (training seeds 0..T-1) per draw; replaces --seeds",
    )
    q.add_argument("--hparams-seed", type=seed, default=0, help="seed of the hyper-parameter draws (default 0)")
    q.add_argument(
        "--out", required=True, help="output folder: new, empty, or an earlier comparison (runs gain new seeds)"
    )
    q.set_defaults(func=run_compare_command)


def run_compare_command(args: argparse.Namespace) -> int:
    origin = task_origin_from_args(args, args.tasks, task_images(args))
    every_rule = args.select == "all"
    if every_rule:
        args.select = None
    config = config_from_args(args, default_seeds=3)
    result = run_compare(
        args.methods,
        args.tasks,
        origin,
        args.out,
        config,
        cache_dir=args.cache_dir,
        progress=args.progress,
        resume=args.resume,
        options=CompareOptions(
            selections=tuple(SELECTIONS) if every_rule else None,
            spread=args.spread,
            latex=args.latex,
            n_hparams=args.n_hparams,
            n_trials=args.n_trials,
            hparams_seed=args.hparams_seed,
        ),
    )
    print(result.markdown())
    print(
        f"results: {args.out}/results.csv, results.md{', results.tex' if args.latex else ''}, compare.png, "
        "runs/<task>/<arm>/"
    )
    return 0


def run(args: argparse.Namespace) -> int:
    origin = task_origin_from_args(args, list(EXPERIMENTS[args.experiment].tasks), task_images(args))
    config = config_from_args(args, default_seeds=3)
    result = run_experiment(
        args.experiment,
        origin,
        args.out,
        config,
        cache_dir=args.cache_dir,
        progress=args.progress,
        force=args.force,
    )
    print(result.summary())
    print(f"results: {args.out}/results.md, results.json, {args.experiment}.png, runs/<task>/")
    return 0
