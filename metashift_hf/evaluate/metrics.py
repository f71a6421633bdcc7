"""The numbers of one evaluation (report.json): the group table with the context-bug test, the run card, the
headline, overall / split / class scores, ID vs OOD and the context bugs, from the scored per-image rows."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping

import numpy as np
import pandas as pd

from metashift_hf.builders.meta_graph_facts import DISTANCE_RULE
from metashift_hf.tasks.spec import ShiftSpec
from metashift_hf.tasks.splits import split_roles

from ..core import __version__
from ..hub.task_data import OwnDataset, TaskData
from ..models import runtime_card
from ..scoring.bugs import BUG_COLUMNS, BUG_TEST, context_bugs, meta_graph_facts
from ..scoring.groups import group_table, id_vs_ood, worst_subsets
from .config import EvalConfig
from .scored_task import SAMPLE_RULE
from .scoring import COUNTING_RULE, headline_metrics


def task_content_hash(spec: ShiftSpec | None, table: pd.DataFrame) -> str:
    """sha256 over the shift spec as planned (:meth:`ShiftSpec.unpublished`: the same task from an artifact, a folder or
    the Hub hashes alike) and the sorted (split, image_id, label, contexts, group) rows."""
    h = hashlib.sha256()
    h.update((spec.unpublished().to_json(compact=True) if spec is not None else "{}").encode())
    cols = [c for c in ("split", "image_id", "label", "group") if c in table]
    for rec in table.sort_values(["split", "image_id"]).itertuples(index=False):
        d = rec._asdict()
        h.update(json.dumps([d[c] for c in cols] + [sorted(d["contexts"])]).encode())
    return h.hexdigest()


def _summary(row) -> dict[str, Any]:
    return {
        "n": int(row["n"]),
        "correct": int(row["correct"]),
        "accuracy": float(row["accuracy"]),
        "ci": [float(row["ci_low"]), float(row["ci_high"])],
    }


def _class_metrics(groups: pd.DataFrame, worst: pd.DataFrame, classes: list[str], coverage: Mapping[str, Any]) -> dict:
    out = {}
    for c in classes:
        row = groups[(groups.level == "class") & (groups["class"] == c)].iloc[0]
        wc = worst[worst["class"] == c]
        per_split = groups[(groups.level == "split_class") & (groups["class"] == c)]
        out[c] = {
            **_summary(row),
            "n_contexts": int(((groups.level == "context") & (groups["class"] == c)).sum()),
            "leaves_covered": len(set(int(i) for i in coverage.get(c, ()))),
            "worst_context": ({"subset": wc.iloc[0]["subset"], **_summary(wc.iloc[0])} if len(wc) else None),
            "splits": {r["group"]: _summary(r) for _, r in per_split.iterrows()},
        }
    return out


def _gap_metrics(groups: pd.DataFrame, classes: list[str], roles: tuple[str, str] | None) -> dict | None:
    """ID vs OOD overall (accuracies, intervals, gap, relative drop) and per class."""
    gap = id_vs_ood(groups, *roles) if roles else None
    if gap:
        gap["classes"] = {}
        for c in classes:
            sc = groups[(groups.level == "split_class") & (groups["class"] == c)].set_index("group")
            if roles[0] in sc.index and roles[1] in sc.index:
                a, b = float(sc.at[roles[0], "accuracy"]), float(sc.at[roles[1], "accuracy"])
                gap["classes"][c] = {"id": a, "ood": b, "gap": a - b, "relative_drop": (a - b) / a if a > 0 else None}
    return gap


def _bug_list(bug_rows: pd.DataFrame) -> list[dict]:
    def opt(value, cast):
        return None if pd.isna(value) else cast(value)

    return [
        {
            "class": r["class"],
            "subset": r["subset"],
            "context": r["group"],
            **_summary(r),
            "rest_n": int(r["rest_n"]),
            "rest_correct": int(r["rest_correct"]),
            "rest_accuracy": float(r["rest_accuracy"]),
            "z": float(r["z"]),
            "p_value": float(r["p_value"]),
            "q_value": float(r["q_value"]),
            "community": opt(r["community"], int),
            "distance_to_largest_community": opt(r.get("distance_to_largest_community", np.nan), float),
        }
        for _, r in bug_rows.iterrows()
    ]


def scored_groups(
    scored: pd.DataFrame, data: "TaskData | OwnDataset", facts: Any, min_subset_size: int, alpha: float
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """per_group rows with the context-bug test's columns; the tested rows; the bugs, with their distances."""
    facts = meta_graph_facts(data.artifact, facts, scored)
    classes = data.classes
    groups = group_table(scored, classes, facts.community_map() if facts is not None else None)
    tested = context_bugs(scored, groups, min_subset_size, alpha)
    for col in BUG_COLUMNS:
        groups.loc[tested.index, col] = tested[col]
    bug_rows = tested[tested["bug"]].sort_values(["q_value", "subset"], kind="stable")
    if facts is not None:
        for i in bug_rows.index:
            groups.loc[i, "distance_to_largest_community"] = facts.distance_to_largest(groups.at[i, "subset"])
    return groups, tested, groups.loc[bug_rows.index]


def run_card(
    data: "TaskData | OwnDataset",
    table: pd.DataFrame,
    model_card: dict[str, Any],
    hierarchy_card: dict,
    scored_splits: list[str],
    cfg: EvalConfig,
) -> dict[str, Any]:
    """report.json's ``run``: what was scored, with which model and settings."""
    spec, art = data.spec, data.artifact
    return {
        "package_version": __version__,
        "task_id": data.task_id,
        "task_content_hash": task_content_hash(spec, table),
        "artifact_hash": (art.content_hash if art is not None else spec.artifact_hash if spec else None),
        "model": model_card,
        "mode": cfg.mode,
        "hierarchy": hierarchy_card.get("name", cfg.hierarchy),
        "hierarchy_detail": hierarchy_card,
        "seed": cfg.seed,
        "classes": data.classes,
        "min_subset_size": cfg.min_subset_size,
        "shift_type": spec.shift_type if spec else None,
        "splits": scored_splits,
        "sample_per_split": cfg.sample,
        "sample_rule": SAMPLE_RULE if cfg.sample is not None else None,
        "task_options": dict(spec.overrides) if spec else {},
        # where the task came from (hub/task_data.TaskProvenance); an own dataset without a spec has none
        "task_origin": data.origin() if isinstance(data, TaskData) else None,
        "dtype": model_card.get("dtype", cfg.dtype),
        "runtime": runtime_card(),
        # None: the model's own input size; else the side it was fed (a quick run, not its full-resolution score)
        "image_size": model_card.get("image_size", cfg.image_size),
    }


def report_metrics(
    run: dict[str, Any],
    scored: pd.DataFrame,
    groups: pd.DataFrame,
    tested: pd.DataFrame,
    bug_rows: pd.DataFrame,
    coverage: Mapping[str, Any],
    data: "TaskData | OwnDataset",
    cfg: EvalConfig,
) -> dict[str, Any]:
    """report.json: the run card, the headline, overall / split / class scores, ID vs OOD and the context bugs."""
    classes = data.classes
    worst = worst_subsets(groups, cfg.min_subset_size)
    roles = split_roles(sorted(set(scored["split"])), data.spec)
    return {
        "run": run,
        "counting": COUNTING_RULE,
        "min_subset_size": cfg.min_subset_size,
        "headline": headline_metrics(scored, classes),
        "overall": _summary(groups[groups.level == "overall"].iloc[0]),
        "splits": {r["group"]: _summary(r) for _, r in groups[groups.level == "split"].iterrows()},
        "classes": _class_metrics(groups, worst, classes, coverage),
        "worst_subset": ({"subset": worst.iloc[0]["subset"], **_summary(worst.iloc[0])} if len(worst) else None),
        "id_vs_ood": _gap_metrics(groups, classes, roles),
        "bug_test": {
            "description": BUG_TEST,
            "alpha": cfg.alpha,
            "n_tests": int(tested["p_value"].notna().sum()),
            "min_n": cfg.min_subset_size,
            "distance": DISTANCE_RULE,
        },
        "context_bugs": _bug_list(bug_rows),
    }
