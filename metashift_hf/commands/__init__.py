"""Subcommands of ``metashift-hf``; each module exposes ``register(subparsers)``.

:data:`HELP` is the one source of each command's one-line description: ``metashift-hf --help`` lists it
(cli.py, without importing the command modules, so --help stays fast) and each module passes it as its
parser's ``help``; tests/test_cli_help.py holds the two together.
"""

from __future__ import annotations


# name -> one-line help, in `metashift-hf --help` order
HELP: dict[str, str] = {
    "download": "download GQA / published MetaShift files (resumable, sha256-verified) or register local copies",
    "build": "build MetaShift (subsets, meta-graphs, communities, embeddings) into an artifact folder",
    "classes": "list the classes of an artifact (subsets, images, communities, task id)",
    "subsets": "list context subsets 'class(context)' with images and meta-graph community",
    "distance": "distance between two subsets of one class (number + rule, or 'disconnected'), or a class's matrix",
    "stats": "compare a built artifact with the published MetaShift statistics",
    "match": "match MetaShift names to WordNet/ImageNet-1k and write the task registry",
    "tasks": "list or show tasks (binary/multiclass from `metashift-hf match`, paper and per-class tasks)",
    "export": "write task repos (parquet shards with embedded images + README card) into a folder",
    "publish": "export tasks and push them to the Hub as dataset repos, plus a collection",
    "space": "write (and push) a Gradio Space that browses exported tasks, meta-graphs and leaderboards",
    "evaluate": (
        "evaluate pretrained ImageNet-1k models on a task (or a zoo of models x tasks): per class, per "
        "context, worst context, bugs"
    ),
    "score": (
        "score a predictions file (class or probabilities per image) on a task: per split, group, worst group, ID/OOD"
    ),
    "train": (
        "train group-robustness baselines (ERM, reweight, GroupDRO, IRM, CORAL, Mixup, JTT, DFR; EfficientNet-Lite0 "
        "linear probe or fine-tuning) and score them"
    ),
    "experiment": (
        "run an experiment: paper-dg, paper-subpop, ood-levels (shift curves), clustered (k-means OOD sets), "
        "conflicts, compare"
    ),
    "bugs": "context bugs of any model's predictions on a task (two-proportion test + Benjamini-Hochberg), per class",
    "demo": "run the whole pipeline on the embedded demo data",
}

__all__ = ["HELP"]
